/* Low-precision comparison in units of the dtype: see lowp_compare.h for the bound and
 * why.  Elements are read through vp_load (float16 and bfloat16 widened exactly). */
#include "lowp_compare.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_util.h"

double lowp_ulp(vp_dtype t, double m) {
    int bits = t == VP_BF16 ? 8 : t == VP_F16 ? 11 : t == VP_F32 ? 24 : 53;
    int min_exp = t == VP_F16 ? -14 : t == VP_F64 ? -1022 : -126; /* smallest normal's exponent */
    int e;
    m = fabs(m);
    if (m == 0 || !isfinite(m)) e = min_exp;
    else {
        (void)frexp(m, &e); /* m = f 2^e, f in [0.5, 1) */
        e -= 1;
        if (e < min_exp) e = min_exp;
    }
    return ldexp(1.0, e - bits + 1);
}

static int same_layout(const vp_tensor *a, const vp_tensor *b) {
    if (a->dtype != b->dtype || a->rank != b->rank) return 0;
    for (int d = 0; d < a->rank; d++)
        if (a->dims[d] != b->dims[d]) return 0;
    return 1;
}

static double scale_of(const vp_tensor *t) {
    double scale = 0;
    for (int64_t i = 0; i < vp_tensor_numel(t); i++) {
        double y = fabs(vp_load(t->data, t->dtype, i));
        if (isfinite(y) && y > scale) scale = y;
    }
    return scale;
}

double lowp_compare(const vp_tensor *got, const vp_tensor *want, double ulps, double acc, int64_t *at) {
    if (!same_layout(got, want)) return -1;
    double scale = scale_of(want), worst = 0;
    *at = 0;
    for (int64_t i = 0; i < vp_tensor_numel(want); i++) {
        double x = vp_load(got->data, got->dtype, i), y = vp_load(want->data, want->dtype, i), e;
        if (isnan(x) || isnan(y) || isinf(x) || isinf(y)) e = (isnan(x) && isnan(y)) || x == y ? 0 : INFINITY;
        else e = fabs(x - y) / (ulps * lowp_ulp(want->dtype, fmax(fabs(x), fabs(y))) + acc * scale);
        if (e > worst) {
            worst = e;
            *at = i;
        }
    }
    return worst;
}

int lowp_mutation_caught(const vp_tensor *got, const vp_tensor *want, double ulps, double acc) {
    int64_t n = vp_tensor_numel(want), top = -1;
    double big = 0;
    for (int64_t i = 0; i < n; i++) {
        double y = fabs(vp_load(want->data, want->dtype, i));
        if (isfinite(y) && y > big) big = y, top = i;
    }
    if (top < 0) return -1;
    size_t bytes = vp_tensor_nbytes(got);
    vp_tensor bad = *got;
    bad.data = malloc(bytes ? bytes : 1);
    if (!bad.data) abort();
    memcpy(bad.data, got->data, bytes);
    /* two ulps toward zero: away from zero could cross into the next binade, where the
     * element's own ulp (and so its bound) doubles */
    double y = vp_load(want->data, want->dtype, top);
    vp_store(bad.data, bad.dtype, top, y - copysign(2 * lowp_ulp(want->dtype, y), y));
    int64_t at;
    double e = lowp_compare(&bad, want, ulps, acc, &at);
    free(bad.data);
    return e > 1;
}
