/* Collectives over NCCL between GPUs, one process (and one GPU) per rank.
 *
 * Built with the CUDA backend where NCCL is found (the CUDA toolkit ships it) and MPI
 * is there to start the processes: rank 0 makes the NCCL unique id and MPI broadcasts
 * it (vp_comm_broadcast on the MPI communicator), then every rank joins with
 * ncclCommInitRank on its device.  All-reduces are queued on the CUDA backend's stream,
 * so they are ordered with the kernels before and after them and nothing waits on the
 * host. */
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdlib.h>

#include "comm.h"
#include "comm_nccl.h"

typedef struct nccl_ctx {
    ncclComm_t comm;
    cudaStream_t stream;
    int in_group;   /* between ncclGroupStart and ncclGroupEnd */
    int sync_after; /* a call in the open group wants the stream synchronised at its end */
} nccl_ctx;

static vp_status nccl_check(ncclResult_t r, const char *what, vp_error *err) {
    if (r == ncclSuccess) return VP_OK;
    return vp_fail(err, VP_ERR_RUNTIME, "%s: %s", what, ncclGetErrorString(r));
}

/* NCCL's type for a float dtype; 0 for the others. */
static int nccl_type(vp_dtype dt, ncclDataType_t *t) {
    switch (dt) {
    case VP_F32: *t = ncclFloat32; return 1;
    case VP_F64: *t = ncclFloat64; return 1;
    case VP_F16: *t = ncclFloat16; return 1;
    case VP_BF16: *t = ncclBfloat16; return 1;
    default: return 0;
    }
}

static vp_status nccl_allreduce(vp_comm *c, void *buf, int64_t count, vp_dtype dt, vp_comm_op op, vp_error *err) {
    nccl_ctx *x = c->ctx;
    ncclDataType_t t;
    if (!nccl_type(dt, &t)) return vp_fail(err, VP_ERR_UNSUPPORTED, "NCCL all-reduce of %s", vp_dtype_name(dt));
    return nccl_check(ncclAllReduce(buf, buf, (size_t)count, t, op == VP_COMM_MAX ? ncclMax : ncclSum, x->comm, x->stream), "ncclAllReduce", err);
}

static vp_status nccl_broadcast(vp_comm *c, void *buf, int64_t bytes, int root, vp_error *err) {
    nccl_ctx *x = c->ctx;
    vp_status s = nccl_check(ncclBroadcast(buf, buf, (size_t)bytes, ncclChar, root, x->comm, x->stream), "ncclBroadcast", err);
    if (!s && cudaStreamSynchronize(x->stream) != cudaSuccess) s = vp_fail(err, VP_ERR_RUNTIME, "cudaStreamSynchronize");
    return s;
}

static vp_status nccl_allgather(vp_comm *c, const void *send, void *recv, int64_t bytes, vp_error *err) {
    nccl_ctx *x = c->ctx;
    vp_status s = nccl_check(ncclAllGather(send, recv, (size_t)bytes, ncclChar, x->comm, x->stream), "ncclAllGather", err);
    if (x->in_group) x->sync_after = 1;
    else if (!s && cudaStreamSynchronize(x->stream) != cudaSuccess) s = vp_fail(err, VP_ERR_RUNTIME, "cudaStreamSynchronize");
    return s;
}

static vp_status nccl_reduce_scatter(vp_comm *c, const void *send, void *recv, int64_t count, vp_dtype dt, vp_error *err) {
    nccl_ctx *x = c->ctx;
    ncclDataType_t t;
    if (!nccl_type(dt, &t)) return vp_fail(err, VP_ERR_UNSUPPORTED, "NCCL reduce-scatter of %s", vp_dtype_name(dt));
    return nccl_check(ncclReduceScatter(send, recv, (size_t)count, t, ncclSum, x->comm, x->stream), "ncclReduceScatter", err);
}

/* NCCL launches a group's calls when it closes; a group always closes, even after a
 * failed call, so the communicator is never left inside one. */
static vp_status nccl_group(vp_comm *c, int begin, vp_error *err) {
    nccl_ctx *x = c->ctx;
    if (begin) {
        x->in_group = 1;
        x->sync_after = 0;
        return nccl_check(ncclGroupStart(), "ncclGroupStart", err);
    }
    x->in_group = 0;
    vp_status s = nccl_check(ncclGroupEnd(), "ncclGroupEnd", err);
    if (!s && x->sync_after && cudaStreamSynchronize(x->stream) != cudaSuccess)
        s = vp_fail(err, VP_ERR_RUNTIME, "cudaStreamSynchronize");
    x->sync_after = 0;
    return s;
}

static void nccl_destroy(vp_comm *c) {
    nccl_ctx *x = c->ctx;
    if (x) {
        cudaStreamSynchronize(x->stream);
        ncclCommDestroy(x->comm);
        free(x);
    }
    free(c);
}

static const vp_comm_iface nccl_iface = {"nccl", nccl_allreduce, nccl_broadcast, nccl_allgather, nccl_reduce_scatter,
                                         nccl_group, nccl_destroy};

vp_status vp_comm_nccl_new(vp_comm *mpi, int device, void *stream, vp_comm **out, vp_error *err) {
    *out = NULL;
    ncclUniqueId id;
    vp_status s = mpi->rank == 0 ? nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId", err) : VP_OK;
    /* every rank joins the broadcast, even one whose id failed, so none waits forever */
    vp_status b = vp_comm_broadcast(mpi, &id, (int64_t)sizeof id, 0, err);
    if (s || b) return s ? s : b;
    if (cudaSetDevice(device) != cudaSuccess) return vp_fail(err, VP_ERR_RUNTIME, "cudaSetDevice(%d)", device);
    vp_comm *c = calloc(1, sizeof *c);
    nccl_ctx *x = calloc(1, sizeof *x);
    if (!c || !x) {
        free(c);
        free(x);
        return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    }
    x->stream = (cudaStream_t)stream;
    s = nccl_check(ncclCommInitRank(&x->comm, mpi->size, id, mpi->rank), "ncclCommInitRank", err);
    if (s) {
        free(c);
        free(x);
        return s;
    }
    c->iface = &nccl_iface;
    c->ctx = x;
    c->rank = mpi->rank;
    c->size = mpi->size;
    *out = c;
    return VP_OK;
}
