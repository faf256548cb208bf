/* Launchers of the quant family's kernels (cu_quant.cu), float32, as cu_kernels.h's:
 * they enqueue on the stream and return cudaGetLastError(). */
#ifndef VP_CU_QUANT_H
#define VP_CU_QUANT_H

#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* X as [outer, channels, inner]; channel c uses scale[c] and zero_point[c]. */
typedef struct cu_quant_shape {
    int64_t outer, channels, inner;
    float lo, hi;      /* quant_min, quant_max */
    float grad_factor; /* LSQ: > 0 when the scale learns */
} cu_quant_shape;

/* Y and (when not NULL) the byte mask. */
cudaError_t cu_fake_quant(const cu_quant_shape *s, const float *x, const float *scale, const float *zp, float *y,
                          uint8_t *mask, cudaStream_t st);
/* dX from dY and X, or from dY and the mask (x NULL); dScale (may be NULL) from X. */
cudaError_t cu_fake_quant_grad(const cu_quant_shape *s, const float *dy, const float *x, const uint8_t *mask,
                               const float *scale, const float *zp, float *dx, float *dscale, cudaStream_t st);
/* The moving-average observer; may run in place over its state. */
cudaError_t cu_quant_observer(const cu_quant_shape *s, const float *x, const float *lo, const float *hi, const float *count,
                              float *lo2, float *hi2, float *count2, float averaging, int64_t freeze_after, cudaStream_t st);
cudaError_t cu_quant_params(int64_t n, const float *lo, const float *hi, int qmin, int qmax, int symmetric, float *scale,
                            float *zp, cudaStream_t st);

#ifdef __cplusplus
}
#endif

#endif
