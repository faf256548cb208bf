/* Resize, Upsample and ResizeGrad on the CPU, and the plan resolver they share with
 * the shape function.
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

static int parse_coord(const char *s) {
    static const char *const names[] = {"half_pixel",   "half_pixel_symmetric",      "pytorch_half_pixel", "align_corners",
                                        "asymmetric",   "tf_half_pixel_for_nearest", "tf_crop_and_resize"};
    for (int i = 0; i < (int)(sizeof names / sizeof names[0]); i++)
        if (!strcmp(s, names[i])) return i;
    return -1;
}

static int parse_round(const char *s) {
    static const char *const names[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
    for (int i = 0; i < 4; i++)
        if (!strcmp(s, names[i])) return i;
    return -1;
}

/* An input, or NULL when omitted or empty (exporters write empty roi and scales). */
static const vp_tensor *opt_in(const vp_tensor *const *in, int n_in, int i) {
    if (i >= n_in || !in[i] || vp_tensor_numel(in[i]) == 0) return NULL;
    return in[i];
}

static vp_status read_mode(const vp_node *n, int legacy, vp_resize_plan *p, vp_error *err) {
    const char *mode = vp_attr_string(n, "mode", "nearest");
    if (!strcmp(mode, "nearest")) p->mode = VP_RESIZE_NEAREST;
    else if (!strcmp(mode, "linear") || (legacy && !strcmp(mode, "bilinear"))) p->mode = VP_RESIZE_LINEAR;
    else if (!strcmp(mode, "cubic"))
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "mode 'cubic' is not supported (nearest and linear are)");
    else return vp_node_fail(err, VP_ERR_INVALID, n, "unknown mode '%s'", mode);
    if (vp_attr_int(n, "antialias", 0))
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "antialias=1 is not supported");
    if (vp_attr_int(n, "exclude_outside", 0))
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "exclude_outside=1 is not supported");
    if (legacy) {
        p->coord = VP_COORD_ASYMMETRIC;
        p->round = VP_ROUND_FLOOR;
        return VP_OK;
    }
    const char *cs = vp_attr_string(n, "coordinate_transformation_mode", "half_pixel");
    const char *rs = vp_attr_string(n, "nearest_mode", "round_prefer_floor");
    int c = parse_coord(cs), r = parse_round(rs);
    if (c < 0) return vp_node_fail(err, VP_ERR_INVALID, n, "unknown coordinate_transformation_mode '%s'", cs);
    if (r < 0) return vp_node_fail(err, VP_ERR_INVALID, n, "unknown nearest_mode '%s'", rs);
    p->coord = (vp_resize_coord)c;
    p->round = (vp_resize_round)r;
    return VP_OK;
}

/* The axes scales, sizes and roi speak of (opset 18's axes attribute; all by default). */
static vp_status read_axes(const vp_node *n, int rank, int *axes, int *n_axes, vp_error *err) {
    const int64_t *a;
    int k = vp_attr_ints(n, "axes", &a);
    if (k < 0) {
        for (int i = 0; i < rank; i++) axes[i] = i;
        *n_axes = rank;
        return VP_OK;
    }
    if (k > rank) return vp_node_fail(err, VP_ERR_INVALID, n, "axes has %d entries for rank %d", k, rank);
    unsigned seen = 0;
    for (int i = 0; i < k; i++) {
        int64_t v = a[i] < 0 ? a[i] + rank : a[i];
        if (v < 0 || v >= rank || (seen >> v & 1))
            return vp_node_fail(err, VP_ERR_INVALID, n, "axes entry %lld is out of range or repeated", (long long)a[i]);
        seen |= 1u << v;
        axes[i] = (int)v;
    }
    *n_axes = k;
    return VP_OK;
}

static vp_status check_count(const vp_node *n, const char *what, int64_t got, int want, vp_error *err) {
    if (got == want) return VP_OK;
    return vp_node_fail(err, VP_ERR_INVALID, n, "%s has %lld entries, expected %d (one per resized axis)", what,
                        (long long)got, want);
}

vp_status vp_resize_resolve(const vp_node *n, const vp_tensor *const *in, int n_in, vp_resize_plan *p, vp_error *err) {
    int is_grad = !strcmp(n->op_type, "ResizeGrad"), upsample = !strcmp(n->op_type, "Upsample");
    int legacy = !is_grad && (upsample || n->opset < 11);
    const vp_tensor *x = in[is_grad ? 1 : 0], *roi = NULL, *scales = NULL, *sizes = NULL, *dy = is_grad ? in[0] : NULL;
    if (is_grad) roi = opt_in(in, n_in, 2), scales = opt_in(in, n_in, 3);
    else if (legacy) scales = opt_in(in, n_in, 1);
    else roi = opt_in(in, n_in, 1), scales = opt_in(in, n_in, 2), sizes = opt_in(in, n_in, 3);
    memset(p, 0, sizeof *p);
    vp_status s = read_mode(n, legacy, p, err);
    if (s) return s;
    int axes[VP_MAX_RANK], n_axes = 0;
    p->rank = x->rank;
    if ((s = read_axes(n, x->rank, axes, &n_axes, err))) return s;
    for (int a = 0; a < x->rank; a++) {
        p->in[a] = p->out[a] = x->dims[a];
        p->scale[a] = 1;
        p->roi_end[a] = 1;
    }
    p->extrapolation = vp_attr_float(n, "extrapolation_value", 0.0f);

    double sc[VP_MAX_RANK];
    int n_sc = -1;
    const float *attr_sc;
    if (upsample && n->opset < 9) {
        n_sc = vp_attr_floats(n, "scales", &attr_sc);
        if (n_sc < 0) return vp_node_fail(err, VP_ERR_INVALID, n, "attribute scales is required");
        if ((s = check_count(n, "scales", n_sc, n_axes, err))) return s;
        for (int i = 0; i < n_sc; i++) sc[i] = attr_sc[i];
    } else if (scales) {
        if (scales->dtype != VP_F32 && scales->dtype != VP_F64 && scales->dtype != VP_F16)
            return vp_node_fail(err, VP_ERR_INVALID, n, "scales must be float, got %s", vp_dtype_name(scales->dtype));
        if (!scales->data)
            return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "scales decide the output shape but are not known ahead of time");
        if ((s = check_count(n, "scales", vp_tensor_numel(scales), n_axes, err))) return s;
        n_sc = n_axes;
        for (int i = 0; i < n_sc; i++) sc[i] = vp_load(scales->data, scales->dtype, i);
    }
    if (n_sc >= 0 && sizes) return vp_node_fail(err, VP_ERR_INVALID, n, "has both scales and sizes");
    if (n_sc >= 0) {
        for (int i = 0; i < n_sc; i++) {
            int a = axes[i];
            if (!(sc[i] > 0) || !isfinite(sc[i]))
                return vp_node_fail(err, VP_ERR_INVALID, n, "scale %g for axis %d is not positive", sc[i], a);
            p->scale[a] = sc[i];
            double o = floor((double)p->in[a] * sc[i]);
            if (o > 4.0e18) return vp_node_fail(err, VP_ERR_INVALID, n, "scale %g makes axis %d too large", sc[i], a);
            p->out[a] = (int64_t)o;
            p->length[a] = (double)p->in[a] * sc[i];
        }
    } else if (sizes) {
        if (sizes->dtype != VP_I64)
            return vp_node_fail(err, VP_ERR_INVALID, n, "sizes must be int64, got %s", vp_dtype_name(sizes->dtype));
        if (!sizes->data)
            return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "sizes decide the output shape but are not known ahead of time");
        if ((s = check_count(n, "sizes", vp_tensor_numel(sizes), n_axes, err))) return s;
        const int64_t *sz = sizes->data;
        const char *policy = vp_attr_string(n, "keep_aspect_ratio_policy", "stretch");
        int keep = !strcmp(policy, "not_larger") ? 1 : !strcmp(policy, "not_smaller") ? 2 : 0;
        if (!keep && strcmp(policy, "stretch"))
            return vp_node_fail(err, VP_ERR_INVALID, n, "unknown keep_aspect_ratio_policy '%s'", policy);
        double common = keep == 1 ? INFINITY : 0;
        for (int i = 0; i < n_axes; i++) {
            int a = axes[i];
            if (sz[i] < 0 || p->in[a] == 0)
                return vp_node_fail(err, VP_ERR_INVALID, n, "cannot size axis %d of extent %lld to %lld", a,
                                    (long long)p->in[a], (long long)sz[i]);
            double r = (double)sz[i] / (double)p->in[a];
            p->scale[a] = r;
            p->out[a] = sz[i];
            if (keep == 1 && r < common) common = r;
            if (keep == 2 && r > common) common = r;
        }
        for (int i = 0; keep && i < n_axes; i++) {
            int a = axes[i];
            p->scale[a] = common;
            p->out[a] = (int64_t)nearbyint(common * (double)p->in[a]);
        }
    } else if (is_grad) {
        if (dy->rank != x->rank) return vp_node_fail(err, VP_ERR_INVALID, n, "dY and X have different ranks");
        for (int a = 0; a < x->rank; a++) p->scale[a] = p->in[a] ? (double)dy->dims[a] / (double)p->in[a] : 1;
    } else {
        return vp_node_fail(err, VP_ERR_INVALID, n, "needs scales or sizes");
    }
    if (is_grad) {
        if (dy->rank != x->rank) return vp_node_fail(err, VP_ERR_INVALID, n, "dY and X have different ranks");
        for (int a = 0; a < x->rank; a++) {
            if (n_sc >= 0 && p->out[a] != dy->dims[a])
                return vp_node_fail(err, VP_ERR_INVALID, n, "dY has %lld elements along axis %d, the scales give %lld",
                                    (long long)dy->dims[a], a, (long long)p->out[a]);
            p->out[a] = dy->dims[a];
        }
    }
    /* nothing to sample from: an empty input axis can only give an empty output axis */
    for (int a = 0; a < x->rank; a++)
        if (p->in[a] == 0 && p->out[a] > 0)
            return vp_node_fail(err, VP_ERR_INVALID, n, "axis %d of X is empty but the output has %lld elements there", a,
                                (long long)p->out[a]);
    for (int a = 0; a < x->rank; a++)
        if (n_sc < 0 || p->length[a] == 0) p->length[a] = (double)p->out[a];
    if (p->coord == VP_COORD_TF_CROP_AND_RESIZE) {
        if (!roi) return vp_node_fail(err, VP_ERR_INVALID, n, "tf_crop_and_resize needs roi");
        if (!roi->data) return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "roi is not known ahead of time");
        if ((s = check_count(n, "roi", vp_tensor_numel(roi), 2 * n_axes, err))) return s;
        for (int i = 0; i < n_axes; i++) {
            p->roi_start[axes[i]] = vp_load(roi->data, roi->dtype, i);
            p->roi_end[axes[i]] = vp_load(roi->data, roi->dtype, n_axes + i);
        }
    }
    return VP_OK;
}

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
