/* FakeQuant, its gradient, the moving-average observer and QuantParams on the CPU (see
 * planner/ops/quant.c for the semantics and k_fake_quant.h for the precision kept).
 *
 * X is seen as [outer, channels, inner]: channel c uses scale[c] and zero_point[c]
 * (one channel when the scale has one element).  The observer may run in place over
 * its state (min' in min's storage): each channel's state is read before it is
 * written. */
#include <math.h>
#include <stdlib.h>

#include "k_fake_quant.h"
#include "k_reduce.h"
#include "quant/qparams.h"

typedef struct fq_layout {
    int64_t outer, channels, inner;
} fq_layout;

static void fq_layout_init(const vp_node *n, const vp_tensor *x, int64_t n_params, fq_layout *L) {
    if (n_params <= 1) {
        *L = (fq_layout){1, 1, vp_tensor_numel(x)};
        return;
    }
    int axis = (int)vp_attr_int(n, "axis", 0);
    if (axis < 0) axis += x->rank;
    vp_red_split(x->rank, x->dims, axis, &L->outer, &L->channels, &L->inner);
}

typedef struct fq_attrs {
    float lo, hi, grad_factor;
} fq_attrs;

static fq_attrs fq_attrs_of(const vp_node *n) {
    return (fq_attrs){(float)vp_attr_int(n, "quant_min", -128), (float)vp_attr_int(n, "quant_max", 127),
                      vp_attr_float(n, "grad_factor", 0)};
}

/* The quantised level of x before clamping, as torch computes it: the float product
 * with the float reciprocal, rounded half to even, plus the zero point. */
static inline float level_f32(float x, float inv, float z) { return nearbyintf(x * inv) + z; }
static inline double level_f64(double x, double inv, double z) { return nearbyint(x * inv) + z; }

static inline float clampf(float q, float lo, float hi) { return q < lo ? lo : q > hi ? hi : q; }

vp_status vp_cpu_fake_quant(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    (void)err;
    const vp_tensor *x = in[0], *scale = in[1], *zp = in[2];
    fq_layout L;
    fq_layout_init(n, x, vp_tensor_numel(scale), &L);
    fq_attrs a = fq_attrs_of(n);
    const float *s = scale->data, *z = zp->data;
    uint8_t *mask = n->n_outputs > 1 && out[1] ? out[1]->data : NULL;
    for (int64_t o = 0; o < L.outer; o++)
        for (int64_t c = 0; c < L.channels; c++) {
            int64_t off = (o * L.channels + c) * L.inner;
            if (x->dtype == VP_F32) {
                const float *xs = (const float *)x->data + off;
                float *ys = (float *)out[0]->data + off, inv = 1.0f / s[c];
                for (int64_t i = 0; i < L.inner; i++) {
                    float q = level_f32(xs[i], inv, z[c]);
                    if (mask) mask[off + i] = q >= a.lo && q <= a.hi;
                    ys[i] = (clampf(q, a.lo, a.hi) - z[c]) * s[c];
                }
            } else {
                const double *xs = (const double *)x->data + off;
                double *ys = (double *)out[0]->data + off, inv = 1.0 / s[c];
                for (int64_t i = 0; i < L.inner; i++) {
                    double q = level_f64(xs[i], inv, z[c]);
                    if (mask) mask[off + i] = q >= a.lo && q <= a.hi;
                    ys[i] = ((q < a.lo ? a.lo : q > a.hi ? a.hi : q) - z[c]) * s[c];
                }
            }
        }
    return VP_OK;
}

/* One element's share of LSQ's scale gradient (before grad_factor): d(fake-quant)/ds. */
static inline double lsq_dscale(double x, double q, double s, double inv, double z, const fq_attrs *a) {
    if (q < a->lo) return a->lo - z;
    if (q > a->hi) return a->hi - z;
    return ((q - z) * s - x) * inv;
}

vp_status vp_cpu_fake_quant_grad(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    (void)err;
    const vp_tensor *dy = in[0], *x = in[1], *scale = in[2], *zp = in[3];
    vp_tensor *dx = out[0], *ds = n->n_outputs > 1 ? out[1] : NULL;
    if (x->dtype == VP_BOOL) { /* the mask form */
        const uint8_t *m = x->data;
        for (int64_t i = 0; dx && i < vp_tensor_numel(dy); i++)
            if (dy->dtype == VP_F32) ((float *)dx->data)[i] = m[i] ? ((const float *)dy->data)[i] : 0.0f;
            else ((double *)dx->data)[i] = m[i] ? ((const double *)dy->data)[i] : 0.0;
        return VP_OK;
    }
    fq_layout L;
    fq_layout_init(n, x, vp_tensor_numel(scale), &L);
    fq_attrs a = fq_attrs_of(n);
    const float *s = scale->data, *z = zp->data;
    double *acc = ds ? calloc((size_t)L.channels, sizeof *acc) : NULL;
    if (ds && !acc) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    for (int64_t o = 0; o < L.outer; o++)
        for (int64_t c = 0; c < L.channels; c++) {
            int64_t off = (o * L.channels + c) * L.inner;
            double sum = 0;
            if (x->dtype == VP_F32) {
                const float *xs = (const float *)x->data + off, *g = (const float *)dy->data + off;
                float *d = dx ? (float *)dx->data + off : NULL, inv = 1.0f / s[c];
                for (int64_t i = 0; i < L.inner; i++) {
                    float q = level_f32(xs[i], inv, z[c]);
                    if (d) d[i] = q >= a.lo && q <= a.hi ? g[i] : 0.0f;
                    if (acc) {
                        /* torch's in-range term: ((q - z) * s - x) / s from the float
                         * fake-quantised value */
                        float fq = (clampf(q, a.lo, a.hi) - z[c]) * s[c];
                        double t = q < a.lo ? a.lo - z[c] : q > a.hi ? a.hi - z[c] : (double)((fq - xs[i]) * inv);
                        sum += t * g[i];
                    }
                }
            } else {
                const double *xs = (const double *)x->data + off, *g = (const double *)dy->data + off;
                double *d = dx ? (double *)dx->data + off : NULL, inv = 1.0 / s[c];
                for (int64_t i = 0; i < L.inner; i++) {
                    double q = level_f64(xs[i], inv, z[c]);
                    if (d) d[i] = q >= a.lo && q <= a.hi ? g[i] : 0.0;
                    if (acc) sum += lsq_dscale(xs[i], q, s[c], inv, z[c], &a) * g[i];
                }
            }
            if (acc) acc[c] += sum;
        }
    for (int64_t c = 0; acc && c < L.channels; c++) ((float *)ds->data)[c] = (float)(acc[c] * a.grad_factor);
    free(acc);
    return VP_OK;
}

vp_status vp_cpu_quant_observer(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    (void)err;
    const vp_tensor *x = in[0];
    const float *mn = in[1]->data, *mx = in[2]->data;
    float count = *(const float *)in[3]->data;
    float *mn2 = out[0]->data, *mx2 = out[1]->data;
    fq_layout L;
    fq_layout_init(n, x, vp_tensor_numel(in[1]), &L);
    float c_avg = vp_attr_float(n, "averaging_constant", 0.01f);
    int64_t freeze = vp_attr_int(n, "freeze_after", 0);
    int frozen = (freeze > 0 && count >= (float)freeze) || !vp_tensor_numel(x);
    for (int64_t c = 0; c < L.channels; c++) {
        float lo = mn[c], hi = mx[c];
        if (!frozen) {
            float blo = INFINITY, bhi = -INFINITY;
            for (int64_t o = 0; o < L.outer; o++) {
                int64_t off = (o * L.channels + c) * L.inner;
                for (int64_t i = 0; i < L.inner; i++) {
                    float v = x->dtype == VP_F32 ? ((const float *)x->data)[off + i] : (float)((const double *)x->data)[off + i];
                    blo = v < blo ? v : blo;
                    bhi = v > bhi ? v : bhi;
                }
            }
            if (count == 0 || c_avg == 1.0f) lo = blo, hi = bhi; /* 1: the current range, exactly */
            else lo = lo + c_avg * (blo - lo), hi = hi + c_avg * (bhi - hi);
        }
        mn2[c] = lo;
        mx2[c] = hi;
    }
    *(float *)out[2]->data = count + 1.0f;
    return VP_OK;
}

vp_status vp_cpu_quant_params(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    (void)err;
    int qmin = (int)vp_attr_int(n, "quant_min", -128), qmax = (int)vp_attr_int(n, "quant_max", 127);
    int symmetric = (int)vp_attr_int(n, "symmetric", 0);
    const float *lo = in[0]->data, *hi = in[1]->data;
    for (int64_t c = 0; c < vp_tensor_numel(in[0]); c++)
        vp_quant_params(lo[c], hi[c], qmin, qmax, symmetric, &((float *)out[0]->data)[c], &((float *)out[1]->data)[c]);
    return VP_OK;
}
