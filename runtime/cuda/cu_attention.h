/* Launchers of the attention kernels (cu_attention.cu), float32, as cu_kernels.h's:
 * they enqueue on the stream and return cudaGetLastError(). */
#ifndef VP_CU_ATTENTION_H
#define VP_CU_ATTENTION_H

#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Q [B,H,S,D], K [B,H,T,D], V [B,H,T,Dv], contiguous; the mask (NULL: none) read at
 * b*s0 + h*s1 + i*s2 + j*s3, strides 0 where it is broadcast. */
typedef struct cu_attention_shape {
    int64_t B, H, S, T, D, Dv;
    float scale;
    int causal;
    int y_bshd; /* Y and dY [B, S, H, Dv] instead of [B, H, S, Dv] */
    const float *mask;
    int64_t mask_strides[4];
} cu_attention_shape;

/* Y [B,H,S,Dv] (or [B,S,H,Dv] under y_bshd) and (when lse is not NULL) the row log-sum-exp [B,H,S]. */
cudaError_t cu_attention(const cu_attention_shape *s, const float *q, const float *k, const float *v, float *y,
                         float *lse, cudaStream_t st);
/* dQ, dK, dV (each may be NULL) from dY, the inputs, Y and LSE. */
cudaError_t cu_attention_grad(const cu_attention_shape *s, const float *dy, const float *q, const float *k,
                              const float *v, const float *y, const float *lse, float *dq, float *dk, float *dv,
                              cudaStream_t st);

#ifdef __cplusplus
}
#endif

#endif
