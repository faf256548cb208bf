/* Dropout in training mode (from a mask drawn on the host), DropoutGrad and IsAllFinite,
 * in float32, float16, bfloat16 and float64.
 *
 * Each computes as the CPU kernel does (runtime/cpu/k_elementwise_cast.c,
 * k_train_act.c, k_train_index.c): float32 in float, the 16-bit types in float and
 * rounded on store, float64 in double. */
#include <math.h>
#include <stdint.h>

#include "cu_common.cuh"
#include "cu_lowp.cuh"

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
