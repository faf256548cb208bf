/* Resize, Upsample and ResizeGrad on the CPU, on the plan the shape function resolves
 * too (vp_resize_resolve, planner/ops/op_semantics.c).
 *
 * In: X (any dtype for nearest, a float type for linear) and the scales or sizes that
 * decide Y's shape.  Out: Y, each element a weighted sum of the X elements at the
 * neighbouring sample positions (one for nearest, 2^k for linear over k resized
 * axes), or ResizeGrad's dX, where each dY element is added back to those same
 * positions with the same weights: the exact adjoint, so gradients agree with finite
 * differences of the forward kernel.
 *
 * Coordinates follow the ONNX specification (onnx/reference/ops/op_resize.py): the
 * source position of output index x along an axis is computed in double from the
 * float32 scale as stored (or sizes/in for sizes), then rounded by nearest_mode or
 * split between its two neighbours for linear, positions outside the input clamped
 * to its edge.  Before opset 11 (Resize-10, Upsample) the rule is asymmetric with
 * floor, as Upsample's definition and torch's nearest; ONNX Runtime rounds up when
 * downsampling there, which no exporter writes. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_util.h"
#include "k_resample.h"

/* ---- sampling tables ---- */

/* Where output index o along one axis reads: i0 (nearest) or i0 and i1 weighted
 * 1 - w and w (linear); outside: tf_crop_and_resize past the input (extrapolated). */
typedef struct tap {
    int64_t i0, i1;
    double w;
    int outside;
} tap;

static double source_coord(const vp_resize_plan *p, int a, int64_t o) {
    double s = p->scale[a], x = (double)o, lin = (double)p->in[a], lout = p->length[a];
    switch (p->coord) {
    case VP_COORD_HALF_PIXEL: return (x + 0.5) / s - 0.5;
    case VP_COORD_HALF_PIXEL_SYMMETRIC: {
        double adjust = (double)p->out[a] / lout, center = lin / 2;
        return center * (1 - adjust) + (x + 0.5) / s - 0.5;
    }
    case VP_COORD_PYTORCH_HALF_PIXEL: return lout > 1 ? (x + 0.5) / s - 0.5 : 0;
    case VP_COORD_ALIGN_CORNERS: return lout == 1 ? 0 : x * (lin - 1) / (lout - 1);
    case VP_COORD_ASYMMETRIC: return x / s;
    case VP_COORD_TF_HALF_PIXEL_FOR_NEAREST: return (x + 0.5) / s;
    case VP_COORD_TF_CROP_AND_RESIZE: {
        double st = p->roi_start[a], en = p->roi_end[a];
        return lout > 1 ? st * (lin - 1) + x * (en - st) * (lin - 1) / (lout - 1) : 0.5 * (st + en) * (lin - 1);
    }
    }
    return x;
}

static int64_t clamp_index(double v, int64_t n) {
    if (v < 0) return 0;
    if (v > (double)(n - 1)) return n - 1;
    return (int64_t)v;
}

static tap make_tap(const vp_resize_plan *p, int a, int64_t o) {
    double x = source_coord(p, a, o);
    int64_t n = p->in[a];
    tap t = {0, 0, 0, 0};
    if (p->coord == VP_COORD_TF_CROP_AND_RESIZE && (x < 0 || x > (double)(n - 1))) {
        t.outside = 1;
        return t;
    }
    if (p->mode == VP_RESIZE_NEAREST) {
        double f = floor(x), r;
        switch (p->round) {
        case VP_ROUND_PREFER_FLOOR: r = x - f <= 0.5 ? f : f + 1; break;
        case VP_ROUND_PREFER_CEIL: r = x - f < 0.5 ? f : f + 1; break;
        case VP_ROUND_FLOOR: r = f; break;
        default: r = ceil(x); break;
        }
        t.i0 = t.i1 = clamp_index(r, n);
        return t;
    }
    if (x < 0) x = 0;
    if (x > (double)(n - 1)) x = (double)(n - 1);
    t.i0 = (int64_t)x;
    t.i1 = t.i0 + 1 < n ? t.i0 + 1 : t.i0;
    t.w = t.i1 == t.i0 ? 0 : x - (double)t.i0;
    return t;
}

/* Per-axis tables, one allocation: taps[a][o] for o < out[a]. */
static tap *make_taps(const vp_resize_plan *p, tap **taps) {
    int64_t total = 0;
    for (int a = 0; a < p->rank; a++) total += p->out[a];
    tap *all = malloc((size_t)(total ? total : 1) * sizeof *all);
    if (!all) return NULL;
    int64_t at = 0;
    for (int a = 0; a < p->rank; a++) {
        taps[a] = all + at;
        for (int64_t o = 0; o < p->out[a]; o++) taps[a][o] = make_tap(p, a, o);
        at += p->out[a];
    }
    return all;
}

/* Visits every output element with its taps: the X offset of the corner, and for the
 * k axes that interpolate, the step to the far neighbour and its weight. */
typedef struct visit {
    int64_t base;
    int k;
    int64_t step[VP_MAX_RANK];
    double w[VP_MAX_RANK];
    int outside;
} visit;

typedef void (*visit_fn)(int64_t e, const visit *v, void *ctx);

static void walk(const vp_resize_plan *p, tap *const *taps, visit_fn fn, void *ctx) {
    int64_t xs[VP_MAX_RANK], idx[VP_MAX_RANK] = {0}, total = 1;
    int64_t st = 1;
    for (int a = p->rank - 1; a >= 0; a--) {
        xs[a] = st;
        st *= p->in[a];
        total *= p->out[a];
    }
    for (int64_t e = 0; e < total; e++) {
        visit v = {0, 0, {0}, {0}, 0};
        for (int a = 0; a < p->rank; a++) {
            const tap *t = &taps[a][idx[a]];
            v.outside |= t->outside;
            v.base += t->i0 * xs[a];
            if (t->w != 0) {
                v.step[v.k] = (t->i1 - t->i0) * xs[a];
                v.w[v.k++] = t->w;
            }
        }
        fn(e, &v, ctx);
        for (int a = p->rank - 1; a >= 0; a--) {
            if (++idx[a] < p->out[a]) break;
            idx[a] = 0;
        }
    }
}

/* Corner m (bit j: the far neighbour along interpolating axis j) of one output's
 * neighbourhood: its X offset and its weight. */
static double corner(const visit *v, unsigned m, int64_t *off) {
    double wt = 1;
    *off = v->base;
    for (int j = 0; j < v->k; j++) {
        if (m >> j & 1) *off += v->step[j], wt *= v->w[j];
        else wt *= 1 - v->w[j];
    }
    return wt;
}

typedef struct fwd_ctx {
    const vp_tensor *x;
    vp_tensor *y;
    double extrapolation;
    size_t esize;
} fwd_ctx;

static void forward_float(int64_t e, const visit *v, void *c_) {
    fwd_ctx *c = c_;
    double acc = 0;
    if (v->outside) acc = c->extrapolation;
    else
        for (unsigned m = 0; m < 1u << v->k; m++) {
            int64_t off;
            double wt = corner(v, m, &off);
            acc += wt * vp_load(c->x->data, c->x->dtype, off);
        }
    vp_store(c->y->data, c->y->dtype, e, acc);
}

/* Nearest on any dtype: a byte copy (extrapolated elements of non-float types: 0). */
static void forward_copy(int64_t e, const visit *v, void *c_) {
    fwd_ctx *c = c_;
    char *dst = (char *)c->y->data + (size_t)e * c->esize;
    if (v->outside) memset(dst, 0, c->esize);
    else memcpy(dst, (const char *)c->x->data + (size_t)v->base * c->esize, c->esize);
}


static vp_status run_plan(const vp_node *n, const vp_resize_plan *p, visit_fn fn, void *ctx, vp_error *err) {
    tap *taps[VP_MAX_RANK];
    tap *all = make_taps(p, taps);
    if (!all) return vp_node_fail(err, VP_ERR_NOMEM, n, "out of memory for sampling tables");
    walk(p, taps, fn, ctx);
    free(all);
    return VP_OK;
}

vp_status vp_cpu_resize(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    vp_resize_plan p;
    vp_status s = vp_resize_resolve(n, in, n->n_inputs, &p, err);
    if (s) return s;
    fwd_ctx c = {in[0], out[0], p.extrapolation, vp_dtype_size(in[0]->dtype)};
    if (p.mode == VP_RESIZE_LINEAR && !vp_dtype_is_float(in[0]->dtype))
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "linear resize of %s is not supported", vp_dtype_name(in[0]->dtype));
    return run_plan(n, &p, vp_dtype_is_float(in[0]->dtype) ? forward_float : forward_copy, &c, err);
}

typedef struct adj_ctx {
    const vp_tensor *dy;
    double *acc;
} adj_ctx;

static void adjoint(int64_t e, const visit *v, void *c_) {
    adj_ctx *c = c_;
    if (v->outside) return;
    double g = vp_load(c->dy->data, c->dy->dtype, e);
    for (unsigned m = 0; m < 1u << v->k; m++) {
        int64_t off;
        double wt = corner(v, m, &off);
        c->acc[off] += wt * g;
    }
}

vp_status vp_cpu_resize_grad(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    if (!out[0]) return VP_OK;
    vp_resize_plan p;
    vp_status s = vp_resize_resolve(n, in, n->n_inputs, &p, err);
    if (s) return s;
    int64_t numel = vp_tensor_numel(out[0]);
    /* accumulated in double, rounded once: the sum does not depend on the visiting order's
     * partial roundings in half types */
    adj_ctx c = {in[0], calloc((size_t)(numel ? numel : 1), sizeof(double))};
    if (!c.acc) return vp_node_fail(err, VP_ERR_NOMEM, n, "out of memory");
    s = run_plan(n, &p, adjoint, &c, err);
    for (int64_t i = 0; !s && i < numel; i++) vp_store(out[0]->data, out[0]->dtype, i, c.acc[i]);
    free(c.acc);
    return s;
}
