/* float32 erf, exp, GELU and GELU's derivative over arrays, in a form the compiler vectorises.
 *
 * In: float arrays of n elements (the output may be an input: in place).  Out: erf(x),
 * gelu(x) = 0.5 x (1 + erf(x / sqrt 2)) and dy * gelu'(x), each element within 1 ulp of
 * erf and exp (measured over every 7th float32 bit pattern against the float64 libm:
 * erf at most 0.99 ulp, exp 0.87 ulp; glibc's erff is 0.90), the accuracy class of libm's
 * erff and expf, which are scalar calls and were a sixth of the GPT export's step.
 * Keeps true: the same bits on every machine and in every lane.  The only fused
 * operations are explicit fmaf calls (correctly rounded wherever they run: an FMA
 * instruction in the AVX2 version, libm's fmaf in the baseline one; ISO C mode lets the
 * compiler contract nothing else), and every branch is a select, so a vector lane, the
 * scalar tail and the other version compute the same operations in the same order.
 *
 * erf: for |x| <= 0.927734375 an odd polynomial in x; above, 1 - exp(p(|x|)) with its
 * sign restored, |x| clamped at 4 (erf(4) is 1 in float32).  exp: Cody-Waite reduction
 * by ln 2, a degree-6 polynomial, and the scale 2^i applied in two halves so results
 * that are subnormal round once.  Polynomials: N. Juffa's minimax fits (erff, expf). */
#include "k_vmath.h"

#include <math.h>
#include <string.h>

/* Each row twice: for AVX2 with FMA, picked at run time where the CPU has both, and for
 * the baseline instruction set; one plain function elsewhere. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
/* the selects below are if-converted (vectorised) only when the compiler may assume
 * floating-point operations do not trap; no value changes */
#pragma GCC optimize("no-trapping-math")
#define VM_DISPATCH(name, params, args)                                                   \
    __attribute__((target("avx2,fma"))) static void name##_hw params { VM_BODY_##name; }  \
    static void name##_base params { VM_BODY_##name; }                                    \
    void name params {                                                                    \
        if (vm_has_avx2_fma()) name##_hw args;                                            \
        else name##_base args;                                                            \
    }

static int vm_has_avx2_fma(void) {
    static int known = -1; /* every thread computes the same answer: a benign race */
    if (known < 0) {
        __builtin_cpu_init();
        known = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    }
    return known;
}
#else
#define VM_DISPATCH(name, params, args) \
    void name params { VM_BODY_##name; }
#endif

enum { VM_BLOCK = 64 };

/* inlined into each version, so that each compiles them for its own instructions */
#define VM_INLINE static inline __attribute__((always_inline))

VM_INLINE float vm_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

VM_INLINE float vm_min(float a, float b) { return a < b ? a : b; } /* b where a is NaN */
VM_INLINE float vm_max(float a, float b) { return a > b ? a : b; }

VM_INLINE float vm_exp(float x) {
    float a = vm_max(vm_min(x, 88.8f), -104.0f);                /* inf and 0 beyond */
    float j = fmaf(1.442695f, a, 12582912.f) - 12582912.f;     /* rint(a / ln 2) */
    float f = fmaf(j, -6.93145752e-1f, a);
    f = fmaf(j, -1.42860677e-6f, f);
    int32_t i = (int32_t)j, i1 = i / 2, i2 = i - i1;           /* i in [-150, 128] */
    float r = 1.37805939e-3f;
    r = fmaf(r, f, 8.37312452e-3f);
    r = fmaf(r, f, 4.16695364e-2f);
    r = fmaf(r, f, 1.66664720e-1f);
    r = fmaf(r, f, 4.99999851e-1f);
    r = fmaf(r, f, 1.0f);
    r = fmaf(r, f, 1.0f);
    r = r * vm_bits((uint32_t)(i1 + 127) << 23);
    r = r * vm_bits((uint32_t)(i2 + 127) << 23);
    float nan = x + x; /* computed unconditionally: a select, not a branch */
    return x != x ? nan : r;
}

VM_INLINE float vm_erf(float x) {
    float t = vm_min(fabsf(x), 4.0f), s = x * x;
    float r = fmaf(-1.72853470e-5f, t, 3.83197126e-4f);
    float u = fmaf(-3.88396438e-3f, t, 2.42546219e-2f);
    r = fmaf(r, t * t, u);
    r = fmaf(r, t, -1.06777877e-1f);
    r = fmaf(r, t, -6.34846687e-1f);
    r = fmaf(r, t, -1.28717512e-1f);
    r = fmaf(r, t, -t);
    r = copysignf(1.0f - vm_exp(r), x);
    float p = -5.96761703e-4f;
    p = fmaf(p, s, 4.99119423e-3f);
    p = fmaf(p, s, -2.67681349e-2f);
    p = fmaf(p, s, 1.12819925e-1f);
    p = fmaf(p, s, -3.76125336e-1f);
    p = fmaf(p, s, 1.28379166e-1f);
    p = fmaf(p, x, x);
    float nan = x + x;
    r = fabsf(x) > 0.927734375f ? r : p;
    return x != x ? nan : r;
}

float vp_vm_erff(float x) { return vm_erf(x); }
float vp_vm_expf(float x) { return vm_exp(x); }

/* out[i] = F for i < n, a block at a time through a local array: the vectoriser need
 * not prove that out does not overlap the inputs (in place it is one of them). */
#define VM_ROWS(n, out, F)                                                                \
    do {                                                                                  \
        for (int64_t i0 = 0; i0 < (n); i0 += VM_BLOCK) {                                  \
            int64_t m = (n) - i0 < VM_BLOCK ? (n) - i0 : VM_BLOCK;                        \
            float blk[VM_BLOCK];                                                          \
            if (m == VM_BLOCK) {                                                          \
                _Pragma("omp simd")                                                       \
                for (int64_t k = 0; k < VM_BLOCK; k++) {                                  \
                    const int64_t i = i0 + k;                                             \
                    blk[k] = (F);                                                         \
                }                                                                         \
            } else { /* lanes too: attention's causal rows end anywhere */                \
                _Pragma("omp simd")                                                       \
                for (int64_t k = 0; k < m; k++) {                                         \
                    const int64_t i = i0 + k;                                             \
                    blk[k] = (F);                                                         \
                }                                                                         \
            }                                                                             \
            memcpy((out) + i0, blk, (size_t)m * sizeof(float));                           \
        }                                                                                 \
    } while (0)

#define VM_BODY_vp_vm_erf_f32 VM_ROWS(n, y, vm_erf(x[i]))
VM_DISPATCH(vp_vm_erf_f32, (const float *x, float *y, int64_t n), (x, y, n))

VM_INLINE float vm_gelu(float x) { return 0.5f * x * (1.0f + vm_erf(x * 0.70710678118654752440f)); }

#define VM_BODY_vp_vm_gelu_f32 VM_ROWS(n, y, vm_gelu(x[i]))
VM_DISPATCH(vp_vm_gelu_f32, (const float *x, float *y, int64_t n), (x, y, n))

/* dy (Phi(x) + x phi(x)), as the reference's float expression orders it */
VM_INLINE float vm_gelu_dx(float d, float x) {
    return d * (0.5f * (1.0f + vm_erf(x * 0.70710678118654752440f)) + x * vm_exp(-0.5f * x * x) * 0.3989422804014327f);
}

#define VM_BODY_vp_vm_gelu_grad_f32 VM_ROWS(n, dx, vm_gelu_dx(dy[i], x[i]))
VM_DISPATCH(vp_vm_gelu_grad_f32, (const float *dy, const float *x, float *dx, int64_t n), (dy, x, dx, n))

#define VM_BODY_vp_vm_exp_shift_f32 VM_ROWS(n, y, vm_exp(x[i] - shift))
VM_DISPATCH(vp_vm_exp_shift_f32, (const float *x, float shift, float *y, int64_t n), (x, shift, y, n))

/* the terms a block at a time (vectorised), added in index order in float64 */
#define VM_BODY_vp_vm_exp_sum_f32                                                         \
    do {                                                                                  \
        double acc = 0;                                                                   \
        for (int64_t i0 = 0; i0 < n; i0 += VM_BLOCK) {                                    \
            int64_t m = n - i0 < VM_BLOCK ? n - i0 : VM_BLOCK;                            \
            float blk[VM_BLOCK];                                                          \
            if (m == VM_BLOCK) {                                                          \
                _Pragma("omp simd")                                                       \
                for (int64_t k = 0; k < VM_BLOCK; k++) blk[k] = vm_exp(x[i0 + k] - shift); \
            } else {                                                                      \
                _Pragma("omp simd")                                                       \
                for (int64_t k = 0; k < m; k++) blk[k] = vm_exp(x[i0 + k] - shift);       \
            }                                                                             \
            for (int64_t k = 0; k < m; k++) acc += blk[k];                                \
        }                                                                                 \
        *sum = acc;                                                                       \
    } while (0)
VM_DISPATCH(vp_vm_exp_sum_f32, (const float *x, float shift, int64_t n, double *sum), (x, shift, n, sum))
