/* What an op's attributes and input shapes mean (op_semantics.h): the resolvers the
 * shape functions, the gradient rules and the CPU kernels share.
 *
 * In: a node (its attributes, opset, domain) and its inputs' dims, or plain arrays
 * (Slice's starts and ends, Pad's pads).  Out: the op's meaning as a plan: window
 * extents and pads, axes, per-axis starts and steps, Resize's sample rule; or a
 * refusal naming the node (INVALID, UNSUPPORTED) or the reason in `why`.  Keeps true:
 * pure, reading nothing but what it is given, so the planner and the runtime, each
 * calling it, agree by construction; it stands on the IR alone (libvplanrt carries it
 * for the kernels). */
#include "ops/op_semantics.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ir/dtype_conv.h"

/* ---- elementwise: legacy broadcasting ---- */

int vp_ew_is_legacy(const vp_node *n) {
    return n->opset < 7 && (!n->domain || !n->domain[0] || !strcmp(n->domain, "ai.onnx"));
}

/* Where B's dims start among A's, or -1 when B cannot be placed. */
static int ew_legacy_axis(const vp_node *n, int channel_slope, int rank_a, const int64_t *dims_a, int rank_b,
                          const int64_t *dims_b) {
    if (channel_slope) {
        if (rank_b == 1 && rank_a >= 2 && dims_b[0] == dims_a[1]) return 1;
        return rank_b == rank_a ? 0 : -1;
    }
    if (!vp_attr_int(n, "broadcast", 0)) return rank_b == rank_a ? 0 : -1;
    int64_t axis = vp_node_attr(n, "axis") ? vp_attr_int(n, "axis", 0) : rank_a - rank_b;
    if (axis < 0) axis += rank_a;
    return axis >= 0 && axis + rank_b <= rank_a ? (int)axis : -1;
}

int vp_ew_legacy_shape(const vp_node *n, int channel_slope, int rank_a, const int64_t *dims_a, int rank_b,
                       const int64_t *dims_b, int64_t *b_as_a) {
    for (int d = 0; d < rank_a; d++) b_as_a[d] = 1;
    int64_t count_b = 1;
    for (int d = 0; d < rank_b; d++) count_b *= dims_b[d];
    if (channel_slope && count_b == 1) return 1;
    int axis = ew_legacy_axis(n, channel_slope, rank_a, dims_a, rank_b, dims_b);
    if (axis < 0) return 0;
    /* size-1 dims of B stretch only where broadcasting was asked for */
    int stretch = vp_attr_int(n, "broadcast", 0) != 0;
    for (int d = 0; d < rank_b; d++) {
        if (dims_b[d] != dims_a[axis + d] && !(stretch && dims_b[d] == 1)) return 0;
        b_as_a[axis + d] = dims_b[d];
    }
    return 1;
}

/* ---- linalg: sliding windows ---- */

static int64_t floor_div(int64_t a, int64_t b) { return a / b - (a % b != 0 && (a < 0) != (b < 0)); }

static int64_t ceil_div(int64_t a, int64_t b) { return -floor_div(-a, b); }

typedef enum { PAD_NOTSET, PAD_SAME_UPPER, PAD_SAME_LOWER, PAD_VALID } auto_pad_mode;

static vp_status read_auto_pad(const vp_node *n, auto_pad_mode *mode, vp_error *err) {
    const char *s = vp_attr_string(n, "auto_pad", "NOTSET");
    if (!strcmp(s, "NOTSET") || !s[0]) *mode = PAD_NOTSET;
    else if (!strcmp(s, "SAME_UPPER")) *mode = PAD_SAME_UPPER;
    else if (!strcmp(s, "SAME_LOWER")) *mode = PAD_SAME_LOWER;
    else if (!strcmp(s, "VALID")) *mode = PAD_VALID;
    else
        return vp_node_fail(err, VP_ERR_INVALID, n, "auto_pad '%s' is not NOTSET, SAME_UPPER, SAME_LOWER or VALID", s);
    return VP_OK;
}

/* Splits a total padding between the two ends; SAME_UPPER puts the odd one at the end. */
static void split_pad(int64_t total, int upper, int64_t *begin, int64_t *end) {
    int64_t half = floor_div(total, 2);
    *begin = upper ? half : total - half;
    *end = total - *begin;
}

/* Output extent of Conv and pooling on axis d. */
static vp_status forward_extent(const vp_node *n, vp_window *w, int d, auto_pad_mode mode, int ceil_mode,
                                vp_error *err) {
    int64_t ext = (w->kernel[d] - 1) * w->dilation[d] + 1, s = w->stride[d];
    if (mode == PAD_SAME_UPPER || mode == PAD_SAME_LOWER) {
        w->out[d] = ceil_div(w->in[d], s);
        int64_t total = (w->out[d] - 1) * s + ext - w->in[d];
        split_pad(total > 0 ? total : 0, mode == PAD_SAME_UPPER, &w->pad_begin[d], &w->pad_end[d]);
        return VP_OK;
    }
    if (mode == PAD_VALID) w->pad_begin[d] = w->pad_end[d] = 0;
    int64_t span = w->in[d] + w->pad_begin[d] + w->pad_end[d] - ext;
    /* under ceil_mode a window may overhang the padded input's end, the first one too (a
     * window wider than the input: torch's AvgPool2d(k, ceil_mode=True) over a smaller map,
     * as every EfficientNet of Hugging Face pools), so long as it starts inside */
    if (span < 0 && !(ceil_mode && mode == PAD_NOTSET && span > -s))
        return vp_node_fail(err, VP_ERR_INVALID, n,
                            "the window (extent %lld) is larger than the padded input (%lld) on spatial axis %d",
                            (long long)ext, (long long)(w->in[d] + w->pad_begin[d] + w->pad_end[d]), d);
    if (ceil_mode && mode == PAD_NOTSET) {
        w->out[d] = ceil_div(span, s) + 1;
        /* the last window must start inside the input or its leading pad */
        if ((w->out[d] - 1) * s >= w->in[d] + w->pad_begin[d]) w->out[d]--;
    } else {
        w->out[d] = span / s + 1;
    }
    return VP_OK;
}

/* Output extent of ConvTranspose on axis d, following the ONNX specification: explicit
 * output_shape derives the pads, SAME_* aims at in * stride. */
static void transpose_extent(vp_window *w, int d, auto_pad_mode mode, const int64_t *out_pad, const int64_t *target,
                             int pads_given) {
    int64_t natural = w->stride[d] * (w->in[d] - 1) + out_pad[d] + (w->kernel[d] - 1) * w->dilation[d] + 1;
    int same = mode == PAD_SAME_UPPER || mode == PAD_SAME_LOWER;
    if (same || (target && !pads_given)) {
        int64_t want = target ? target[d] : w->in[d] * w->stride[d];
        split_pad(natural - want, mode == PAD_SAME_UPPER, &w->pad_begin[d], &w->pad_end[d]);
        w->out[d] = want;
        return;
    }
    if (mode == PAD_VALID) w->pad_begin[d] = w->pad_end[d] = 0;
    w->out[d] = target ? target[d] : natural - w->pad_begin[d] - w->pad_end[d];
}

static vp_status read_kernel(const vp_node *n, int n_sp, const int64_t *kernel, vp_window *w, vp_error *err) {
    int given;
    vp_status s = vp_attr_ints_checked(n, "kernel_shape", n_sp, 0, 1, w->kernel, &given, err);
    if (s) return s;
    if (!kernel) {
        if (!given) return vp_node_fail(err, VP_ERR_INVALID, n, "attribute kernel_shape is required");
        return VP_OK;
    }
    for (int d = 0; d < n_sp; d++) {
        if (given && w->kernel[d] != kernel[d])
            return vp_node_fail(err, VP_ERR_INVALID, n, "kernel_shape[%d] = %lld disagrees with the weight's %lld", d,
                                (long long)w->kernel[d], (long long)kernel[d]);
        if (kernel[d] < 1)
            return vp_node_fail(err, VP_ERR_INVALID, n, "the weight has an empty kernel axis %d", d);
        w->kernel[d] = kernel[d];
    }
    return VP_OK;
}

static vp_status read_output_shape(const vp_node *n, int n_sp, int64_t *target, int *has, vp_error *err) {
    const int64_t *v;
    int count = vp_attr_ints(n, "output_shape", &v);
    *has = count >= 0;
    if (count < 0) return VP_OK;
    if (count != n_sp && count != n_sp + 2)
        return vp_node_fail(err, VP_ERR_INVALID, n, "output_shape has %d values, expected %d", count, n_sp);
    for (int d = 0; d < n_sp; d++) target[d] = v[count - n_sp + d];
    return VP_OK;
}

vp_status vp_window_resolve(const vp_node *n, vp_window_kind kind, int n_sp, const int64_t *x_dims,
                            const int64_t *kernel, vp_window *w, vp_error *err) {
    memset(w, 0, sizeof *w);
    if (n_sp < 1 || n_sp > VP_MAX_SPATIAL)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "%d spatial axes (1 to %d supported)", n_sp, VP_MAX_SPATIAL);
    w->n_sp = n_sp;
    memcpy(w->in, x_dims, (size_t)n_sp * sizeof *x_dims);
    int64_t pads[2 * VP_MAX_SPATIAL], out_pad[VP_MAX_SPATIAL], target[VP_MAX_SPATIAL];
    int pads_given, has_target = 0;
    auto_pad_mode mode = PAD_NOTSET;
    vp_status s = read_kernel(n, n_sp, kernel, w, err);
    if (!s) s = vp_attr_ints_checked(n, "strides", n_sp, 1, 1, w->stride, NULL, err);
    if (!s) s = vp_attr_ints_checked(n, "dilations", n_sp, 1, 1, w->dilation, NULL, err);
    if (!s) s = vp_attr_ints_checked(n, "pads", 2 * n_sp, 0, kind == VP_WINDOW_CONV_TRANSPOSE ? INT64_MIN : 0, pads,
                          &pads_given, err);
    if (!s) s = read_auto_pad(n, &mode, err);
    if (!s && kind == VP_WINDOW_CONV_TRANSPOSE) {
        s = vp_attr_ints_checked(n, "output_padding", n_sp, 0, 0, out_pad, NULL, err);
        if (!s) s = read_output_shape(n, n_sp, target, &has_target, err);
    }
    if (s) return s;
    int ceil_mode = (kind == VP_WINDOW_MAXPOOL || kind == VP_WINDOW_AVGPOOL) && vp_attr_int(n, "ceil_mode", 0);
    for (int d = 0; d < n_sp; d++) {
        w->pad_begin[d] = pads[d];
        w->pad_end[d] = pads[n_sp + d];
        if (kind == VP_WINDOW_CONV_TRANSPOSE)
            transpose_extent(w, d, mode, out_pad, has_target ? target : NULL, pads_given);
        else if ((s = forward_extent(n, w, d, mode, ceil_mode, err)))
            return s;
        if (w->out[d] < 1)
            return vp_node_fail(err, VP_ERR_INVALID, n, "output extent %lld on spatial axis %d is not positive",
                                (long long)w->out[d], d);
        /* a ceil_mode window wider than its padded input reads nothing past it (every
         * offset from the first window's reach on falls beyond it for every window, and
         * counts in no divisor): the kernel is cut to that reach, the same results without
         * walking the rest (EfficientNet's 1280-wide window over a 7 x 7 map) */
        int64_t reach = ceil_div(w->in[d] + w->pad_begin[d] + w->pad_end[d], w->dilation[d]);
        if (ceil_mode && w->kernel[d] > reach) w->kernel[d] = reach;
    }
    return VP_OK;
}

static int64_t volume(const int64_t *dims, int n) {
    int64_t v = 1;
    for (int i = 0; i < n; i++) v *= dims[i];
    return v;
}

int64_t vp_window_in_volume(const vp_window *w) { return volume(w->in, w->n_sp); }

int64_t vp_window_out_volume(const vp_window *w) { return volume(w->out, w->n_sp); }

int64_t vp_window_kernel_volume(const vp_window *w) { return volume(w->kernel, w->n_sp); }

/* ---- linalg: BatchNormalization ---- */

int vp_batchnorm_is_training(const vp_node *n) {
    if (n->opset >= 14) return vp_attr_int(n, "training_mode", 0) != 0;
    for (int i = 1; i < n->n_outputs; i++)
        if (n->outputs[i] >= 0) return 1;
    return 0;
}

int vp_batchnorm_is_per_activation(const vp_node *n) {
    return n->opset < 9 && vp_attr_int(n, "spatial", 1) == 0;
}

/* ---- reduce: axes, softmax's view ---- */

void vp_red_split(int rank, const int64_t *dims, int axis, int64_t *outer, int64_t *len, int64_t *inner) {
    *outer = *inner = 1;
    for (int d = 0; d < axis; d++) *outer *= dims[d];
    for (int d = axis + 1; d < rank; d++) *inner *= dims[d];
    *len = dims[axis];
}

int vp_node_axes(const vp_graph *g, const vp_node *n, const int64_t **axes) {
    *axes = NULL;
    if (n->n_inputs > 1 && n->inputs[1] >= 0) {
        const vp_value *a = &g->values[n->inputs[1]];
        if (!a->data || a->dtype != VP_I64 || a->rank != 1) return -1;
        *axes = a->data;
        return (int)a->dims[0];
    }
    return vp_attr_ints(n, "axes", axes);
}

vp_status vp_reduce_axes_mask(const vp_node *n, int rank, const int64_t *axes, int n_axes, unsigned *mask,
                              vp_error *err) {
    *mask = 0;
    if (!n_axes) {
        if (!vp_attr_int(n, "noop_with_empty_axes", 0)) *mask = (1u << rank) - 1;
        return VP_OK;
    }
    for (int i = 0; i < n_axes; i++) {
        if (axes[i] < -rank || axes[i] >= rank)
            return vp_node_fail(err, VP_ERR_INVALID, n, "axis %lld is out of range for rank %d",
                                (long long)axes[i], rank);
        int a = (int)(axes[i] < 0 ? axes[i] + rank : axes[i]);
        if (*mask & (1u << a)) return vp_node_fail(err, VP_ERR_INVALID, n, "axis %d is listed twice", a);
        *mask |= 1u << a;
    }
    return VP_OK;
}

vp_status vp_softmax_split(const vp_node *n, int rank, const int64_t *dims, int64_t *outer, int64_t *len,
                           int64_t *inner, vp_error *err) {
    int coerce_2d = n->opset < 13;
    int64_t axis = vp_attr_int(n, "axis", coerce_2d ? 1 : -1);
    if (axis < -rank || axis >= rank)
        return vp_node_fail(err, VP_ERR_INVALID, n, "axis %lld is out of range for rank %d", (long long)axis, rank);
    int a = (int)(axis < 0 ? axis + rank : axis);
    vp_red_split(rank, dims, a, outer, len, inner);
    if (coerce_2d) { /* the trailing block is one flattened axis */
        *len *= *inner;
        *inner = 1;
    }
    return VP_OK;
}

/* ---- resample: Resize, Upsample, ResizeGrad ---- */

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

/* ---- tensor and source: Shape's bounds, Constant's value, Slice ---- */

static int normalized_axis(int64_t axis, int rank) { return (int)(axis < 0 ? axis + rank : axis); }

/* The axis entry i of a Slice's or Pad's list names (axes NULL: axis i), normalised;
 * -1 with the reason in why when it is out of range or already in seen (`verb`: what
 * naming it twice would do to it). */
static int listed_axis(const int64_t *axes, int i, int rank, int *seen, const char *verb, char *why, size_t why_len) {
    int64_t ax = axes ? axes[i] : i;
    if (ax < -rank || ax >= rank) {
        snprintf(why, why_len, "axis %lld is out of range for rank %d", (long long)ax, rank);
        return -1;
    }
    int a = normalized_axis(ax, rank);
    if (seen[a]++) {
        snprintf(why, why_len, "axis %d is %s twice", a, verb);
        return -1;
    }
    return a;
}

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Resolves one axis; ONNX clamps starts and ends into range rather than failing. */
static void slice_axis(int64_t dim, int64_t start, int64_t end, int64_t step, int64_t *first, int64_t *count) {
    *first = 0;
    *count = 0;
    if (dim == 0) return;
    if (start < 0) start += dim;
    if (end < 0) end += dim;
    if (step > 0) {
        start = clamp64(start, 0, dim);
        end = clamp64(end, 0, dim);
        if (end > start) *count = (end - start - 1) / step + 1;
    } else {
        start = clamp64(start, 0, dim - 1);
        end = clamp64(end, -1, dim - 1);
        int64_t mag = step == INT64_MIN ? INT64_MAX : -step; /* differences stay below it either way */
        if (start > end) *count = (start - end - 1) / mag + 1;
    }
    if (*count) *first = start;
}

vp_status vp_slice_resolve(int rank, const int64_t *dims, int n, const int64_t *starts, const int64_t *ends,
                           const int64_t *axes, const int64_t *steps, vp_slice_plan *plan, char *why, size_t why_len) {
    int seen[VP_MAX_RANK] = {0};
    for (int a = 0; a < rank; a++) {
        plan->start[a] = 0;
        plan->step[a] = 1;
        plan->count[a] = dims[a];
    }
    for (int i = 0; i < n; i++) {
        int a = listed_axis(axes, i, rank, seen, "sliced", why, why_len);
        if (a < 0) return VP_ERR_INVALID;
        int64_t step = steps ? steps[i] : 1;
        if (step == 0) {
            snprintf(why, why_len, "step for axis %d is 0", a);
            return VP_ERR_INVALID;
        }
        slice_axis(dims[a], starts[i], ends[i], step, &plan->start[a], &plan->count[a]);
        /* At most one element taken: its step is never used, and a huge one (a file may say
         * INT64_MAX) would overflow step * stride in the caller. */
        plan->step[a] = plan->count[a] <= 1 ? (step > 0 ? 1 : -1) : step;
    }
    return VP_OK;
}

void vp_shape_op_bounds(const vp_node *n, int rank, int *start, int *end) {
    int64_t s = 0, e = rank;
    if (n->opset >= 15) {
        s = vp_attr_int(n, "start", 0);
        e = vp_attr_int(n, "end", rank);
    }
    if (s < 0) s += rank;
    if (e < 0) e += rank;
    *start = (int)clamp64(s, 0, rank);
    *end = (int)clamp64(e, 0, rank);
}

const vp_attr *vp_constant_value_attr(const vp_node *n) {
    for (int i = 0; i < n->n_attrs; i++)
        if (!strncmp(n->attrs[i].name, "value", 5) || !strcmp(n->attrs[i].name, "sparse_value")) return &n->attrs[i];
    return NULL;
}

/* ---- tensor: Pad ---- */

int vp_pad_mode_parse(const char *s) {
    if (!strcmp(s, "constant")) return VP_PAD_CONSTANT;
    if (!strcmp(s, "reflect")) return VP_PAD_REFLECT;
    if (!strcmp(s, "edge")) return VP_PAD_EDGE;
    if (!strcmp(s, "wrap")) return VP_PAD_WRAP;
    return -1;
}

static const char *const pad_mode_names[] = {"constant", "reflect", "edge", "wrap"};

int64_t vp_pad_kept(int64_t dim, int64_t begin, int64_t end) {
    return dim - (begin < 0 ? -begin : 0) - (end < 0 ? -end : 0);
}

static vp_status pad_check_axis(int a, int64_t dim, vp_pad_mode mode, int64_t begin, int64_t end, char *why,
                                size_t why_len) {
    int64_t kept = begin < -dim || end < -dim ? -1 : vp_pad_kept(dim, begin, end), size;
    if (kept < 0 || __builtin_add_overflow(kept, begin > 0 ? begin : 0, &size) ||
        __builtin_add_overflow(size, end > 0 ? end : 0, &size)) {
        snprintf(why, why_len, "pads %lld and %lld do not fit axis %d of size %lld", (long long)begin, (long long)end,
                 a, (long long)dim);
        return VP_ERR_INVALID;
    }
    if (mode != VP_PAD_CONSTANT && kept == 0 && size > 0) {
        snprintf(why, why_len, "%s padding of axis %d has no elements to repeat", pad_mode_names[mode], a);
        return VP_ERR_INVALID;
    }
    /* numpy, ONNX's reference, extends reflect and wrap wider than the axis in steps
     * that are not periodic; runtimes disagree, so we do not guess */
    if ((mode == VP_PAD_REFLECT || mode == VP_PAD_WRAP) && (begin > kept || end > kept)) {
        snprintf(why, why_len, "%s padding wider than the axis (%lld and %lld on axis %d of %lld) is not supported",
                 pad_mode_names[mode], (long long)begin, (long long)end, a, (long long)kept);
        return VP_ERR_UNSUPPORTED;
    }
    return VP_OK;
}

vp_status vp_pad_resolve(int rank, const int64_t *dims, vp_pad_mode mode, int n, const int64_t *pads,
                         const int64_t *axes, int64_t *begin, int64_t *end, char *why, size_t why_len) {
    int seen[VP_MAX_RANK] = {0};
    for (int a = 0; a < rank; a++) begin[a] = end[a] = 0;
    if (!axes && n != rank) {
        snprintf(why, why_len, "pads has %d entries, expected %d for rank %d", 2 * n, 2 * rank, rank);
        return VP_ERR_INVALID;
    }
    for (int i = 0; i < n; i++) {
        int a = listed_axis(axes, i, rank, seen, "padded", why, why_len);
        if (a < 0) return VP_ERR_INVALID;
        begin[a] = pads[i];
        end[a] = pads[n + i];
    }
    for (int a = 0; a < rank; a++) {
        vp_status s = pad_check_axis(a, dims[a], mode, begin[a], end[a], why, why_len);
        if (s) return s;
    }
    return VP_OK;
}

/* ---- train: the gradient ops' forms ---- */

int vp_train_softmax_is_13(const vp_node *n) {
    size_t len = strlen(n->op_type);
    return len > 3 && !strcmp(n->op_type + len - 3, "_13");
}
