/* Vectorised float32 erf, exp, GELU and GELU's derivative (k_vmath.c says how and how
 * accurate): the float32 rows of Erf, Gelu (erf form) and GeluGrad, and attention's
 * probabilities. */
#ifndef VP_K_VMATH_H
#define VP_K_VMATH_H

#include <math.h>
#include <stdint.h>

/* y[i] = erf(x[i]) */
void vp_vm_erf_f32(const float *x, float *y, int64_t n);
/* y[i] = 0.5 x[i] (1 + erf(x[i] / sqrt 2)) */
void vp_vm_gelu_f32(const float *x, float *y, int64_t n);
/* dx[i] = dy[i] gelu'(x[i]) */
void vp_vm_gelu_grad_f32(const float *dy, const float *x, float *dx, int64_t n);

/* y[i] = exp(x[i] - shift) */
void vp_vm_exp_shift_f32(const float *x, float shift, float *y, int64_t n);
/* *sum = the sum over i of exp(x[i] - shift), each term as vp_vm_exp_shift_f32's,
 * added in index order in float64 */
void vp_vm_exp_sum_f32(const float *x, float shift, int64_t n, double *sum);

/* tanh(u) through one expf: libm's tanhf goes through expm1f, which was a quarter of a
 * step of GPT-2's or Gemma's (tanh-form GELU and its gradient).  Exact at both ends (an
 * overflowing exp gives 1, an underflowing one -1), within a few float32 ulps of 1
 * absolutely near 0, where GELU's uses add it to 1. */
static inline float vp_vm_tanhf(float u) { return 1.0f - 2.0f / (1.0f + expf(2.0f * u)); }

/* One element of the same functions (tests). */
float vp_vm_erff(float x);
float vp_vm_expf(float x);

#endif
