/* What the emulator's runtime (cuda_emu.cc) lends its launches (cuda_emu_launch.cc) and
 * its cuBLAS (cuda_emu_blas.cc). */
#ifndef VP_CUDA_EMU_INTERNAL_H
#define VP_CUDA_EMU_INTERNAL_H

#include <stddef.h>

#include "cuda_emu.h"

/* true when [p, p + n) lies inside one device allocation */
bool vp_emu_on_device(const void *p, size_t n);
/* records e as the sticky last error (the first failure wins); returns e */
cudaError_t vp_emu_set_error(cudaError_t e);
/* the sticky last error, left as it is */
cudaError_t vp_emu_peek_error(void);
/* Runs the late work queued on st (all of it). */
extern "C" void vp_emu_stream_drain(cudaStream_t st);

#endif
