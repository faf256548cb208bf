/* NCCL behind the collective interface (runtime/comm.h): built with the CUDA backend
 * where NCCL and MPI are found (VP_HAVE_NCCL). */
#ifndef VP_COMM_NCCL_H
#define VP_COMM_NCCL_H

#include "comm.h"

/* A communicator over the GPUs of mpi's ranks (this process's on `device`), its unique
 * id broadcast over mpi, its all-reduces queued on `stream` (a cudaStream_t: the CUDA
 * backend's, vp_backend_cuda_stream). */
vp_status vp_comm_nccl_new(vp_comm *mpi, int device, void *stream, vp_comm **out, vp_error *err);

#endif
