/* runtime/cpu/k_vmath.c: the vectorised float32 erf and exp against libm's float64 ones,
 * and its array rows against its own scalar functions.
 *
 *   accuracy  every 4099th float32 bit pattern (about a million values, both signs,
 *             subnormals to infinities): erf and exp within 1 ulp of the float64 libm
 *             value (the class of glibc's erff and expf); NaN stays NaN, erf(+-inf) =
 *             +-1, exp(-inf) = 0, exp(+inf) and exp(89) overflow to inf.
 *   lanes     the rows (Erf, Gelu, GeluGrad, attention's exp and sum of exp), vectorised and picked for the
 *             CPU at run time, give the bits of the scalar functions (built for the
 *             baseline instruction set) in every lane and in the tail, in place too. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cpu_host.h"
#include "k_vmath.h"

enum { STEP = 4099 };

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static int same_bits(float a, float b) { return !memcmp(&a, &b, sizeof a); }

/* |got - want| in units of the float32 spacing at want. */
static double ulps(float got, double want) {
    float w = (float)want;
    double spacing = (double)nextafterf(fabsf(w), INFINITY) - fabsf(w);
    return fabs((double)got - want) / spacing;
}

static void accuracy(void) {
    double worst_erf = 0, worst_exp = 0;
    float at_erf = 0, at_exp = 0;
    long n = 0;
    for (uint64_t u = 0; u <= 0xffffffffu; u += STEP) {
        float x = from_bits((uint32_t)u);
        if (isnan(x)) continue;
        n++;
        double e = ulps(vp_vm_erff(x), erf((double)x));
        if (e > worst_erf) worst_erf = e, at_erf = x;
        if (x > -103.0f && x < 88.7f) { /* inside the range where exp is finite and not 0 */
            double d = ulps(vp_vm_expf(x), exp((double)x));
            if (d > worst_exp) worst_exp = d, at_exp = x;
        }
    }
    check(worst_erf <= 1.0, "erf within 1 ulp over %ld values: worst %.3f at %a", n, worst_erf, at_erf);
    check(worst_exp <= 1.0, "exp within 1 ulp: worst %.3f at %a", worst_exp, at_exp);
    check(isnan(vp_vm_erff(NAN)) && isnan(vp_vm_expf(NAN)), "NaN stays NaN");
    check(vp_vm_erff(INFINITY) == 1.0f && vp_vm_erff(-INFINITY) == -1.0f, "erf(+-inf) = +-1");
    check(vp_vm_expf(-INFINITY) == 0.0f && isinf(vp_vm_expf(INFINITY)) && isinf(vp_vm_expf(89.0f)),
          "exp(-inf) = 0, exp(inf) = exp(89) = inf");
    check(same_bits(vp_vm_erff(-0.0f), -0.0f), "erf(-0) = -0");
}

static float gelu(float x) { return 0.5f * x * (1.0f + vp_vm_erff(x * 0.70710678118654752440f)); }

static float gelu_dx(float d, float x) {
    return d * (0.5f * (1.0f + vp_vm_erff(x * 0.70710678118654752440f)) +
                x * vp_vm_expf(-0.5f * x * x) * 0.3989422804014327f);
}

static void lanes(void) {
    enum { N = 1000 + 37 }; /* whole blocks and a tail */
    float *x = malloc(N * sizeof *x), *d = malloc(N * sizeof *d), *y = malloc(N * sizeof *y);
    if (!x || !d || !y) {
        check(0, "out of memory");
        free(x), free(d), free(y);
        return;
    }
    uint32_t seed = 12345;
    for (int i = 0; i < N; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * 12.0f; /* [-6, 6): both erf branches */
        d[i] = (float)(i % 7) - 3.0f;
    }
    x[5] = NAN, x[6] = INFINITY, x[7] = -INFINITY, x[8] = 0.927734375f, x[9] = -0.0f;
    int bad_erf = 0, bad_gelu = 0, bad_grad = 0, bad_inplace = 0;
    vp_vm_erf_f32(x, y, N);
    for (int i = 0; i < N; i++) bad_erf += !same_bits(y[i], vp_vm_erff(x[i]));
    vp_vm_gelu_f32(x, y, N);
    for (int i = 0; i < N; i++) bad_gelu += !same_bits(y[i], gelu(x[i]));
    vp_vm_gelu_grad_f32(d, x, y, N);
    for (int i = 0; i < N; i++) bad_grad += !same_bits(y[i], gelu_dx(d[i], x[i]));
    memcpy(y, d, N * sizeof *y); /* GeluGrad in place: dX over dY */
    vp_vm_gelu_grad_f32(y, x, y, N);
    for (int i = 0; i < N; i++) bad_inplace += !same_bits(y[i], gelu_dx(d[i], x[i]));
    float shift = 1.25f;
    int bad_exp = 0;
    vp_vm_exp_shift_f32(x, shift, y, N);
    double sum = 0, got = 0;
    for (int i = 0; i < N; i++) {
        float want = vp_vm_expf(x[i] - shift);
        bad_exp += !same_bits(y[i], want);
        if (i >= 10) sum += want; /* the finite lanes, in index order */
    }
    vp_vm_exp_sum_f32(x + 10, shift, N - 10, &got);
    check(!bad_exp, "exp row: %d of %d elements differ from the scalar exp", bad_exp, N);
    check(!memcmp(&got, &sum, sizeof sum), "exp sum: %.17g, the scalar terms in order %.17g", got, sum);
    check(!bad_erf, "erf row: %d of %d elements differ from the scalar erf", bad_erf, N);
    check(!bad_gelu, "gelu row: %d of %d differ", bad_gelu, N);
    check(!bad_grad, "gelu grad row: %d of %d differ", bad_grad, N);
    check(!bad_inplace, "gelu grad in place: %d of %d differ", bad_inplace, N);
    free(x), free(d), free(y);
}

int main(void) {
    vp_cpu_host_install();
    accuracy();
    lanes();
    return check_summary();
}
