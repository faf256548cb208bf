/* Dropout in training mode (ONNX's from a mask drawn on the host, ours drawn here),
 * DropoutGrad and IsAllFinite,
 * in float32, float16, bfloat16 and float64.
 *
 * Each computes as the CPU kernel does (runtime/cpu/k_elementwise_cast.c,
 * k_train_act.c, k_train_index.c): float32 in float, the 16-bit types in float and
 * rounded on store, float64 in double. */
#include <math.h>
#include <stdint.h>

#include "cu_common.cuh"
#include "cu_lowp.cuh"
#include "dropout_rng.h"

/* y = keep ? x * scale : 0; float32 multiplies by the float scale as the CPU does. */
template <typename T> __global__ void k_dropout(int64_t n, const T *x, const uint8_t *keep, double scale, T *y) {
    CU_FOR(i, n) cu_st(y, i, keep[i] ? (float)((double)cu_ld(x, i) * scale) : 0.0f);
}
__global__ void k_dropout_f32(int64_t n, const float *x, const uint8_t *keep, float scale, float *y) {
    CU_FOR(i, n) y[i] = keep[i] ? x[i] * scale : 0.0f;
}
__global__ void k_dropout_f64(int64_t n, const double *x, const uint8_t *keep, double scale, double *y) {
    CU_FOR(i, n) y[i] = keep[i] ? x[i] * scale : 0.0;
}

extern "C" cudaError_t cu_dropout(int dtype, int64_t n, const void *x, const uint8_t *keep, double scale, void *y,
                                  cudaStream_t st) {
    if (n == 0) return cudaSuccess;
    unsigned g = cu_blocks(n);
    if (dtype == 1) k_dropout_f32<<<g, CU_THREADS, 0, st>>>(n, (const float *)x, keep, (float)scale, (float *)y);
    else if (dtype == 11) k_dropout_f64<<<g, CU_THREADS, 0, st>>>(n, (const double *)x, keep, scale, (double *)y);
    else CU_FLOAT_DISPATCH(dtype, k_dropout<T><<<g, CU_THREADS, 0, st>>>(n, (const T *)x, keep, scale, (T *)y));
    return cudaGetLastError();
}

/* Our training steps' Dropouts (vplan_step): the counter-based mask of runtime/
 * dropout_rng.h drawn here, its key from the step count on the device, element i at its
 * index in the whole tensor (this rank's chunks of `ranks`); y as k_dropout, the mask
 * (may be NULL) recorded. */
__device__ static inline int dropout_keep(uint64_t key, int64_t i, uint32_t thr, uint64_t chunk, int ranks, int rank) {
    return vp_dropout_keeps(key, vp_dropout_global_index((uint64_t)i, chunk, ranks, rank), thr);
}
/* y[i] = keep ? x[i] * scale : 0 as the CPU computes it: float32 and float64 in their own
 * type, the 16-bit types in double, rounded on store (k_dropout's arithmetic) */
__device__ static inline void scaled(float *y, int64_t i, const float *x, int keep, double scale) {
    y[i] = keep ? x[i] * (float)scale : 0.0f;
}
__device__ static inline void scaled(double *y, int64_t i, const double *x, int keep, double scale) {
    y[i] = keep ? x[i] * scale : 0.0;
}
template <typename T> __device__ static inline void scaled(T *y, int64_t i, const T *x, int keep, double scale) {
    cu_st(y, i, keep ? (float)((double)cu_ld(x, i) * scale) : 0.0f);
}
template <typename T>
__global__ void k_dropout_counter(int64_t n, const T *x, uint32_t seed, const int64_t *step, uint32_t thr, double scale,
                                  uint64_t chunk, int ranks, int rank, T *y, uint8_t *mask) {
    uint64_t key = vp_dropout_key(seed, step ? *step : 0);
    CU_FOR(i, n) {
        int keep = dropout_keep(key, i, thr, chunk, ranks, rank);
        scaled(y, i, x, keep, scale);
        if (mask) mask[i] = (uint8_t)keep;
    }
}

extern "C" cudaError_t cu_dropout_counter(int dtype, int64_t n, const void *x, uint32_t seed, const int64_t *step,
                                          double ratio, uint64_t chunk, int ranks, int rank, void *y, uint8_t *mask,
                                          cudaStream_t st) {
    if (n == 0) return cudaSuccess;
    unsigned g = cu_blocks(n);
    uint32_t thr = vp_dropout_threshold(ratio);
    double scale = 1.0 / (1.0 - ratio);
    if (dtype == 11)
        k_dropout_counter<double><<<g, CU_THREADS, 0, st>>>(n, (const double *)x, seed, step, thr, scale, chunk, ranks,
                                                             rank, (double *)y, mask);
    else
        CU_FLOAT_DISPATCH(dtype, k_dropout_counter<T><<<g, CU_THREADS, 0, st>>>(n, (const T *)x, seed, step, thr, scale,
                                                                                chunk, ranks, rank, (T *)y, mask));
    return cudaGetLastError();
}

/* dx = mask ? dy / keep : 0 (float32 arithmetic for the 16-bit types, as the CPU
 * widens them). */
template <typename T> __global__ void k_dropout_grad(int64_t n, const T *dy, const uint8_t *mask, float keep, T *dx) {
    CU_FOR(i, n) cu_st(dx, i, mask[i] ? cu_ld(dy, i) / keep : 0.0f);
}
__global__ void k_dropout_grad_f64(int64_t n, const double *dy, const uint8_t *mask, double keep, double *dx) {
    CU_FOR(i, n) dx[i] = mask[i] ? dy[i] / keep : 0.0;
}

extern "C" cudaError_t cu_dropout_grad(int dtype, int64_t n, const void *dy, const uint8_t *mask, double keep, void *dx,
                                       cudaStream_t st) {
    if (n == 0) return cudaSuccess;
    unsigned g = cu_blocks(n);
    if (dtype == 11) k_dropout_grad_f64<<<g, CU_THREADS, 0, st>>>(n, (const double *)dy, mask, keep, (double *)dx);
    else CU_FLOAT_DISPATCH(dtype, k_dropout_grad<T><<<g, CU_THREADS, 0, st>>>(n, (const T *)dy, mask, (float)keep, (T *)dx));
    return cudaGetLastError();
}

/* flag = 0 where an element is non-finite (mode 0), infinite (1) or NaN (2); threads
 * only ever write 0, so their races agree. */
template <typename T> __global__ void k_all_finite(int64_t n, const T *x, int mode, uint8_t *flag) {
    CU_FOR(i, n) {
        float v = cu_ld(x, i);
        int nan = isnan(v), inf = isinf(v);
        if (mode == 1 ? inf : mode == 2 ? nan : nan || inf) *flag = 0;
    }
}
__global__ void k_all_finite_f64(int64_t n, const double *x, int mode, uint8_t *flag) {
    CU_FOR(i, n) {
        double v = x[i];
        int nan = isnan(v), inf = isinf(v);
        if (mode == 1 ? inf : mode == 2 ? nan : nan || inf) *flag = 0;
    }
}

extern "C" cudaError_t cu_all_finite(int dtype, int64_t n, const void *x, int mode, uint8_t *flag, cudaStream_t st) {
    if (n == 0) return cudaSuccess;
    unsigned g = cu_blocks(n);
    if (dtype == 11) k_all_finite_f64<<<g, CU_THREADS, 0, st>>>(n, (const double *)x, mode, flag);
    else CU_FLOAT_DISPATCH(dtype, k_all_finite<T><<<g, CU_THREADS, 0, st>>>(n, (const T *)x, mode, flag));
    return cudaGetLastError();
}
