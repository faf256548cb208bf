/* Launchers of the attention kernels (cu_attention.cu), as cu_kernels.h's: dtype 1, 10
 * or 16 for Q, K, V, the mask, Y and the gradients, LSE float32;
 * they enqueue on the stream and return cudaGetLastError(). */
#ifndef VP_CU_ATTENTION_H
#define VP_CU_ATTENTION_H

#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Q [B,H,S,D], K [B,Hk,T,D], V [B,Hk,T,Dv] (Hk divides H; 0 reads as H), contiguous;
 * the mask (NULL: none) read at b*s0 + h*s1 + i*s2 + j*s3, strides 0 where it is
 * broadcast. */
typedef struct cu_attention_shape {
    int64_t B, H, S, T, D, Dv;
    int64_t Hk;
    float scale;
    float softcap; /* c > 0: scores c tanh(A / c) before the mask; 0: none */
    int causal;
    int zero_rows; /* zero_masked_rows: a row masked everywhere gives 0s */
    int y_bshd; /* Y and dY [B, S, H, Dv] instead of [B, H, S, Dv] */
    int q_bshd, kv_bshd; /* Q, dQ [B, S, H, D]; K, V, dK, dV [B, T, Hk, D]; the sizes above stay logical */
    const void *mask; /* of the dtype */
    int64_t mask_strides[4];
    int64_t mask_dims[4]; /* the mask's own extents, 1 where it broadcasts (its gradient's too) */
    float dropout;        /* r > 0: P dropped by M / (1 - r), M drawn by runtime/dropout_rng.h */
    uint32_t drop_seed;   /* the node's seed attribute */
    const int64_t *drop_step; /* the step count, on the device (NULL: 0); the key is made there */
    int drop_ranks, drop_rank; /* M at the whole tensor's index: this rank's heads of drop_ranks parts */
} cu_attention_shape;

/* Y [B,H,S,Dv] (or [B,S,H,Dv] under y_bshd) and (when lse is not NULL) the row log-sum-exp [B,H,S]. */
cudaError_t cu_attention(int dtype, const cu_attention_shape *s, const void *q, const void *k, const void *v, void *y,
                         float *lse, cudaStream_t st);
/* dQ, dK, dV and the mask's gradient dmask (each may be NULL; dmask laid out as the
 * mask, at its strides) from dY, the inputs, Y and LSE. */
cudaError_t cu_attention_grad(int dtype, const cu_attention_shape *s, const void *dy, const void *q, const void *k,
                              const void *v, const void *y, const float *lse, void *dq, void *dk, void *dv,
                              void *dmask, cudaStream_t st);

#ifdef __cplusplus
}
#endif

#endif
