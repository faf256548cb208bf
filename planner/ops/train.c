/* The train family: gradient ops (optimizer updates and the finite check: update.c).
 *
 * Gradient ops are ONNX Runtime's training ops (domain com.microsoft; MaxPoolGrad and
 * AveragePoolGrad also in the default domain from opset 9, where ONNX Runtime defines
 * them), with the same inputs, outputs, attributes and semantics, so training graphs
 * load in both.  Shape functions check arity, dtypes and shapes and refuse what the
 * kernels (runtime/cpu/k_train*.c) do not implement.
 *
 * Output shapes that the inputs do not decide (MaxPoolGrad's and AveragePoolGrad's dX)
 * come from the output value when it already has a shape (a gradient builder sets it
 * to X's shape before inferring the node, as ONNX Runtime's builder types its outputs),
 * else from what the graph says: the MaxPool that produced Indices, or an
 * AveragePool geometry whose input extent is unambiguous (all strides 1). */
#include <string.h>

#include "ir/op_registry.h"
#include "ops/grad_rules.h"
#include "ops/op_semantics.h"

static const vp_dtype index_types[] = {VP_I32, VP_I64};

/* ---- checks ---- */

static vp_status check_float(const vp_node *n, int i, const vp_value *v, vp_error *err) {
    return vp_shape_check_dtype(n, i, v->dtype, vp_float_types, 4, err);
}

/* A float vector input of shape [c] (per-channel statistics and parameters). */
static vp_status check_channels(vp_graph *g, const vp_node *n, int i, int64_t c, vp_error *err) {
    const vp_value *v = vp_shape_in(g, n, i);
    vp_status s = check_float(n, i, v, err);
    if (s) return s;
    if (v->rank != 1 || v->dims[0] != c)
        return vp_node_fail(err, VP_ERR_INVALID, n, "input %d must have shape [%lld]", i, (long long)c);
    return VP_OK;
}

static vp_status check_rank_at_least(const vp_node *n, int i, const vp_value *v, int rank, vp_error *err) {
    if (v->rank >= rank) return VP_OK;
    return vp_node_fail(err, VP_ERR_INVALID, n, "input %d has rank %d, expected at least %d", i, v->rank, rank);
}

/* ---- activations, softmax, dropout ---- */

/* (dY, X or Y) -> dX, all of one float dtype and shape. */
static vp_status shape_pointwise_grad(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 2, 2, 1, 1, err);
    if (!s) s = check_float(n, 0, vp_shape_in(g, n, 0), err);
    if (!s) s = vp_shape_check_like(g, n, 1, 0, err);
    if (!s) s = vp_shape_same_as_input(g, n, 0, 0, err);
    return s;
}

static vp_status shape_softmax_grad(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = shape_pointwise_grad(g, n, err);
    if (s) return s;
    const vp_value *y = vp_shape_in(g, n, 1);
    int axis;
    return vp_shape_axis(n, vp_attr_int(n, "axis", vp_train_softmax_is_13(n) ? -1 : 1), y->rank, &axis, err);
}

/* DropoutGrad(dy, mask, [ratio], [training_mode]) -> dx */
static vp_status shape_dropout_grad(vp_graph *g, vp_node *n, vp_error *err) {
    static const vp_dtype bool_type[] = {VP_BOOL};
    vp_status s = vp_shape_check_arity(n, 2, 4, 1, 1, err);
    if (s) return s;
    const vp_value *dy = vp_shape_in(g, n, 0), *mask = vp_shape_in(g, n, 1);
    if ((s = check_float(n, 0, dy, err))) return s;
    if (mask->dtype != VP_BOOL)
        return vp_node_fail(err, VP_ERR_INVALID, n, "mask (input 1) must be bool, got %s", vp_dtype_name(mask->dtype));
    if (!vp_shape_equal(mask, dy)) return vp_shape_fail_like(n, 1, mask, dy, 0, err);
    if ((s = vp_shape_check_scalar(g, n, 2, vp_float_types, 4, err))) return s;
    if ((s = vp_shape_check_scalar(g, n, 3, bool_type, 1, err))) return s;
    return vp_shape_same_as_input(g, n, 0, 0, err);
}

/* ---- normalisation ---- */

/* LayerNormalizationGrad(Y_grad, X, scale, mean, inv_std_dev) -> X_grad, scale_grad, bias_grad,
 * and SimplifiedLayerNormalizationGrad(Y_grad, X, scale, inv_std_var) -> X_grad, scale_grad
 * (RMSNorm's: no mean, no bias); n_stats: the statistics inputs after scale. */
static vp_status shape_norm_grad(vp_graph *g, vp_node *n, int n_stats, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 3 + n_stats, 3 + n_stats, 1, 1 + n_stats, err);
    if (s) return s;
    const vp_value *x = vp_shape_in(g, n, 1), *scale = vp_shape_in(g, n, 2);
    if ((s = check_float(n, 1, x, err)) || (s = vp_shape_check_like(g, n, 0, 1, err))) return s;
    if ((s = check_rank_at_least(n, 1, x, 1, err))) return s;
    int axis;
    if ((s = vp_shape_axis(n, vp_attr_int(n, "axis", -1), x->rank, &axis, err))) return s;
    int64_t outer = 1;
    for (int d = 0; d < axis; d++) outer *= x->dims[d];
    /* scale spans the normalised axes exactly; a broadcast scale is not implemented */
    int exact = scale->dtype == x->dtype && scale->rank == x->rank - axis;
    for (int d = 0; exact && d < scale->rank; d++) exact = scale->dims[d] == x->dims[axis + d];
    if (!exact) {
        char s1[128], s2[128];
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "scale %s %s must be %s %s, the normalised axes of X",
                            vp_dtype_name(scale->dtype), vp_shape_str(scale->rank, scale->dims, s1, sizeof s1),
                            vp_dtype_name(x->dtype), vp_shape_str(x->rank - axis, x->dims + axis, s2, sizeof s2));
    }
    for (int i = 3; i < 3 + n_stats; i++) {
        const vp_value *st = vp_shape_in(g, n, i);
        if ((s = check_float(n, i, st, err))) return s;
        if (vp_value_numel(st) != outer)
            return vp_node_fail(err, VP_ERR_INVALID, n, "input %d must hold one value per normalised row (%lld), has %lld",
                                i, (long long)outer, (long long)vp_value_numel(st));
    }
    s = vp_shape_same_as_input(g, n, 0, 1, err);
    if (!s) s = vp_shape_same_as_input(g, n, 1, 2, err);
    if (!s && n_stats == 2) s = vp_shape_same_as_input(g, n, 2, 2, err);
    return s;
}

static vp_status shape_layernorm_grad(vp_graph *g, vp_node *n, vp_error *err) { return shape_norm_grad(g, n, 2, err); }
static vp_status shape_simplified_layernorm_grad(vp_graph *g, vp_node *n, vp_error *err) {
    return shape_norm_grad(g, n, 1, err);
}

/* BatchNormInternal(X, scale, B, input_mean, input_var)
 *   -> Y, running_mean, running_var, saved_mean, saved_inv_std */
static vp_status shape_batchnorm_internal(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 5, 5, 1, 5, err);
    if (s) return s;
    const vp_value *x = vp_shape_in(g, n, 0);
    if ((s = check_float(n, 0, x, err)) || (s = check_rank_at_least(n, 0, x, 2, err))) return s;
    for (int i = 1; i < 5 && !s; i++) s = check_channels(g, n, i, x->dims[1], err);
    if (!s) s = vp_shape_same_as_input(g, n, 0, 0, err);
    for (int i = 1; i < 5 && !s; i++) s = vp_shape_same_as_input(g, n, i, i % 2 ? 3 : 4, err);
    return s;
}

/* BatchNormalizationGrad(dY, X, scale, saved_mean, saved_inv_std) -> dX, dscale, dbias */
static vp_status shape_batchnorm_grad(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 5, 5, 1, 3, err);
    if (s) return s;
    const vp_value *x = vp_shape_in(g, n, 1);
    if ((s = check_float(n, 1, x, err)) || (s = vp_shape_check_like(g, n, 0, 1, err))) return s;
    if ((s = check_rank_at_least(n, 1, x, 2, err))) return s;
    for (int i = 2; i < 5 && !s; i++) s = check_channels(g, n, i, x->dims[1], err);
    /* float32 scale with a narrower X: mixed precision's BatchNorm (planner/precision) */
    vp_dtype st = vp_shape_in(g, n, 2)->dtype;
    if (!s && st != x->dtype && !(st == VP_F32 && (x->dtype == VP_F16 || x->dtype == VP_BF16)))
        s = vp_node_fail(err, VP_ERR_INVALID, n, "scale must have X's dtype %s", vp_dtype_name(x->dtype));
    if (!s) s = vp_shape_same_as_input(g, n, 0, 1, err);
    if (!s) s = vp_shape_same_as_input(g, n, 1, 2, err);
    if (!s) s = vp_shape_same_as_input(g, n, 2, 2, err);
    return s;
}

/* ---- convolution and pooling ---- */

/* ConvGrad(dY, X, W) -> dX, dW, dB with Conv's attributes; outputs optional. */
static vp_status shape_conv_grad(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 3, 3, 1, 3, err);
    if (s) return s;
    const vp_value *dy = vp_shape_in(g, n, 0), *x = vp_shape_in(g, n, 1), *w = vp_shape_in(g, n, 2);
    if ((s = check_float(n, 1, x, err)) || (s = check_rank_at_least(n, 1, x, 3, err))) return s;
    if (w->dtype != x->dtype || dy->dtype != x->dtype || w->rank != x->rank)
        return vp_node_fail(err, VP_ERR_INVALID, n, "dY, X and W must share dtype and rank");
    int64_t group = vp_attr_int(n, "group", 1), c = x->dims[1], m = w->dims[0];
    if (group < 1 || c % group || m % group || w->dims[1] * group != c)
        return vp_node_fail(err, VP_ERR_INVALID, n, "weight shape does not fit %lld input channels in %lld groups",
                            (long long)c, (long long)group);
    vp_window win;
    if ((s = vp_window_resolve(n, VP_WINDOW_CONV, x->rank - 2, x->dims + 2, w->dims + 2, &win, err))) return s;
    int64_t want[VP_MAX_RANK] = {x->dims[0], m};
    memcpy(want + 2, win.out, (size_t)win.n_sp * sizeof *win.out);
    int ok = dy->rank == x->rank;
    for (int d = 0; ok && d < x->rank; d++) ok = dy->dims[d] == want[d];
    if (!ok) {
        char s1[128], s2[128];
        return vp_node_fail(err, VP_ERR_INVALID, n, "dY has shape %s, the convolution's output is %s",
                            vp_shape_str(dy->rank, dy->dims, s1, sizeof s1), vp_shape_str(x->rank, want, s2, sizeof s2));
    }
    s = vp_shape_same_as_input(g, n, 0, 1, err);
    if (!s) s = vp_shape_same_as_input(g, n, 1, 2, err);
    if (!s) s = vp_shape_set_output(g, n, 2, x->dtype, 1, &m, err);
    return s;
}

/* The shape a gradient builder (or the model) already gave output 0, if any. */
static const vp_value *declared_output(vp_graph *g, const vp_node *n) {
    if (n->n_outputs < 1 || n->outputs[0] < 0) return NULL;
    const vp_value *v = &g->values[n->outputs[0]];
    return v->rank >= 0 && v->dtype != VP_UNDEFINED ? v : NULL;
}

/* Sets dX to `shape` after checking it against dY: the same batch and channels, and,
 * when the node carries the pooling attributes (AveragePoolGrad always, MaxPoolGrad as
 * gradient builders copy them), a window over dX's extents that gives dY's. */
static vp_status set_pool_dx(vp_graph *g, vp_node *n, vp_window_kind kind, const vp_value *dy, const int64_t *shape,
                             vp_error *err) {
    int64_t dims[VP_MAX_RANK]; /* a copy: shape may be the output value's own dims, which setting clears */
    memcpy(dims, shape, sizeof dims);
    int ok = dims[0] == dy->dims[0] && dims[1] == dy->dims[1];
    if (ok && (kind == VP_WINDOW_AVGPOOL || vp_node_attr(n, "kernel_shape"))) {
        vp_window w;
        vp_status s = vp_window_resolve(n, kind, dy->rank - 2, dims + 2, NULL, &w, err);
        if (s) return s;
        for (int d = 0; ok && d < w.n_sp; d++) ok = w.out[d] == dy->dims[d + 2];
    }
    if (!ok) {
        char s1[128], s2[128];
        return vp_node_fail(err, VP_ERR_INVALID, n, "pooling an input of shape %s does not give dY's shape %s",
                            vp_shape_str(dy->rank, dims, s1, sizeof s1), vp_shape_str(dy->rank, dy->dims, s2, sizeof s2));
    }
    return vp_shape_set_output(g, n, 0, dy->dtype, dy->rank, dims, err);
}

/* MaxPoolGrad(dY, Indices) -> dX */
static vp_status shape_maxpool_grad(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 2, 2, 1, 1, err);
    if (s) return s;
    const vp_value *dy = vp_shape_in(g, n, 0), *idx = vp_shape_in(g, n, 1);
    if ((s = check_float(n, 0, dy, err)) || (s = check_rank_at_least(n, 0, dy, 3, err))) return s;
    if (idx->dtype != VP_I64)
        return vp_node_fail(err, VP_ERR_INVALID, n, "Indices (input 1) must be int64, got %s", vp_dtype_name(idx->dtype));
    if (!vp_shape_equal(idx, dy)) return vp_shape_fail_like(n, 1, idx, dy, 0, err);
    if (vp_attr_int(n, "storage_order", 0) != 0)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "storage_order=1 (column-major indices) is not supported");
    const vp_value *decl = declared_output(g, n);
    if (decl && decl->rank == dy->rank) return set_pool_dx(g, n, VP_WINDOW_MAXPOOL, dy, decl->dims, err);
    const vp_node *pool = idx->producer >= 0 ? &g->nodes[idx->producer] : NULL;
    if (pool && !strcmp(pool->op_type, "MaxPool") && !pool->domain[0] && pool->n_inputs > 0 && pool->inputs[0] >= 0) {
        const vp_value *x = &g->values[pool->inputs[0]];
        if (x->rank == dy->rank) return set_pool_dx(g, n, VP_WINDOW_MAXPOOL, dy, x->dims, err);
    }
    return vp_node_fail(err, VP_ERR_UNSUPPORTED, n,
                        "the shape of dX is unknown: give the output value X's shape, or feed Indices from a MaxPool");
}

/* vplan.MaxPoolInputGrad(dY, X) -> dX: dX has X's shape, dY the pooled one. */
static vp_status shape_maxpool_input_grad(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 2, 2, 1, 1, err);
    if (s) return s;
    const vp_value *dy = vp_shape_in(g, n, 0), *x = vp_shape_in(g, n, 1);
    if ((s = check_float(n, 0, dy, err)) || (s = check_rank_at_least(n, 0, dy, 3, err))) return s;
    if (x->dtype != dy->dtype || x->rank != dy->rank)
        return vp_node_fail(err, VP_ERR_INVALID, n, "X (input 1) must be %s of rank %d like dY", vp_dtype_name(dy->dtype),
                            dy->rank);
    if (vp_attr_int(n, "storage_order", 0) != 0)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "storage_order=1 (column-major indices) is not supported");
    return set_pool_dx(g, n, VP_WINDOW_MAXPOOL, dy, x->dims, err);
}

static const vp_dtype f32_f64[] = {VP_F32, VP_F64};

/* vplan.MaxPoolArgmax(X) -> Y, A: MaxPool's Y, and A (uint8, Y's shape) the kernel
 * offset of each window's maximum, so windows of at most 255 elements. */
static vp_status shape_maxpool_argmax(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 1, 1, 2, 2, err);
    if (s) return s;
    const vp_value *x = vp_shape_in(g, n, 0);
    if ((s = vp_shape_check_dtype(n, 0, x->dtype, f32_f64, 2, err)) || (s = check_rank_at_least(n, 0, x, 3, err)))
        return s;
    vp_window w;
    if ((s = vp_window_resolve(n, VP_WINDOW_MAXPOOL, x->rank - 2, x->dims + 2, NULL, &w, err))) return s;
    if (vp_window_kernel_volume(&w) > 255)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "a window of %lld elements does not fit a one-byte argmax",
                            (long long)vp_window_kernel_volume(&w));
    int64_t dims[VP_MAX_RANK] = {x->dims[0], x->dims[1]};
    memcpy(dims + 2, w.out, (size_t)w.n_sp * sizeof *dims);
    if ((s = vp_shape_set_output(g, n, 0, x->dtype, x->rank, dims, err))) return s;
    return vp_shape_set_output(g, n, 1, VP_U8, x->rank, dims, err);
}

/* vplan.MaxPoolReluGrad(dY, A, Y) -> dX: dX's shape is the attribute input_shape (the
 * pooled input's, which the node no longer reads). */
static vp_status shape_maxpool_relu_grad(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 3, 3, 1, 1, err);
    if (s) return s;
    const vp_value *dy = vp_shape_in(g, n, 0), *a = vp_shape_in(g, n, 1), *y = vp_shape_in(g, n, 2);
    if ((s = vp_shape_check_dtype(n, 0, dy->dtype, f32_f64, 2, err)) || (s = check_rank_at_least(n, 0, dy, 3, err)))
        return s;
    if (a->dtype != VP_U8 || !vp_shape_equal(a, dy)) return vp_shape_fail_like(n, 1, a, dy, 0, err);
    if (y->dtype != dy->dtype || !vp_shape_equal(y, dy)) return vp_shape_fail_like(n, 2, y, dy, 0, err);
    const int64_t *shape;
    if (vp_attr_ints(n, "input_shape", &shape) != dy->rank)
        return vp_node_fail(err, VP_ERR_INVALID, n, "attribute input_shape must give the %d extents of X", dy->rank);
    int64_t dims[VP_MAX_RANK] = {0}; /* set_pool_dx reads VP_MAX_RANK extents */
    memcpy(dims, shape, (size_t)dy->rank * sizeof *dims);
    return set_pool_dx(g, n, VP_WINDOW_MAXPOOL, dy, dims, err);
}

/* dX's extents when every stride is 1, the one case where dY's extents decide them:
 * in = out - 1 + (kernel - 1) * dilation + 1 - pads (in = out with SAME padding).
 * set_pool_dx() then checks the result against the full window geometry. */
static vp_status unit_stride_dx(const vp_node *n, const vp_value *dy, int64_t *dims, vp_error *err) {
    const int64_t *kernel, *strides, *dil, *pads;
    int n_sp = dy->rank - 2, nk = vp_attr_ints(n, "kernel_shape", &kernel), ns = vp_attr_ints(n, "strides", &strides);
    int nd = vp_attr_ints(n, "dilations", &dil), np = vp_attr_ints(n, "pads", &pads);
    const char *pad = vp_attr_string(n, "auto_pad", "NOTSET");
    int same = !strncmp(pad, "SAME", 4), valid = !strcmp(pad, "VALID");
    if (nk != n_sp || (ns >= 0 && ns != n_sp) || (nd >= 0 && nd != n_sp) || (np >= 0 && np != 2 * n_sp))
        return vp_node_fail(err, VP_ERR_INVALID, n, "kernel_shape, strides, dilations or pads do not fit %d spatial axes",
                            n_sp);
    memcpy(dims, dy->dims, VP_MAX_RANK * sizeof *dims);
    for (int d = 0; d < n_sp; d++) {
        if (ns > 0 && strides[d] != 1)
            return vp_node_fail(err, VP_ERR_UNSUPPORTED, n,
                                "the shape of dX is ambiguous with strides > 1: give the output value X's shape");
        int64_t ext = (kernel[d] - 1) * (nd > 0 ? dil[d] : 1) + 1;
        int64_t padding = np > 0 && !valid ? pads[d] + pads[n_sp + d] : 0;
        if (!same) dims[d + 2] = dy->dims[d + 2] - 1 + ext - padding;
    }
    return VP_OK;
}

/* AveragePoolGrad(dY) -> dX with AveragePool's attributes. */
static vp_status shape_avgpool_grad(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 1, 1, 1, 1, err);
    if (s) return s;
    const vp_value *dy = vp_shape_in(g, n, 0);
    if ((s = check_float(n, 0, dy, err)) || (s = check_rank_at_least(n, 0, dy, 3, err))) return s;
    int64_t dims[VP_MAX_RANK];
    const vp_value *decl = declared_output(g, n);
    if (decl && decl->rank == dy->rank) memcpy(dims, decl->dims, sizeof dims);
    else if ((s = unit_stride_dx(n, dy, dims, err))) return s;
    return set_pool_dx(g, n, VP_WINDOW_AVGPOOL, dy, dims, err);
}

/* ---- indexing and loss ---- */

/* GatherGrad(shape, indices, dY) -> dX, attr axis */
static vp_status shape_gather_grad(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 3, 3, 1, 1, err);
    if (s) return s;
    const vp_value *idx = vp_shape_in(g, n, 1), *dy = vp_shape_in(g, n, 2);
    int64_t dims[VP_MAX_RANK], want[VP_MAX_RANK];
    int rank, axis;
    if ((s = vp_shape_const_ints(g, n, 0, dims, VP_MAX_RANK, &rank, err))) return s;
    if ((s = vp_shape_check_dtype(n, 1, idx->dtype, index_types, 2, err))) return s;
    if ((s = check_float(n, 2, dy, err))) return s;
    if (rank < 1) return vp_node_fail(err, VP_ERR_INVALID, n, "shape (input 0) must name a tensor of rank >= 1");
    for (int d = 0; d < rank; d++)
        if (dims[d] < 0) return vp_node_fail(err, VP_ERR_INVALID, n, "shape (input 0) has negative dim %d", d);
    if ((s = vp_shape_axis(n, vp_attr_int(n, "axis", 0), rank, &axis, err))) return s;
    int want_rank = rank - 1 + idx->rank;
    if (want_rank > VP_MAX_RANK)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "dY would have rank %d (at most %d)", want_rank, VP_MAX_RANK);
    int r = 0;
    for (int d = 0; d < axis; d++) want[r++] = dims[d];
    for (int d = 0; d < idx->rank; d++) want[r++] = idx->dims[d];
    for (int d = axis + 1; d < rank; d++) want[r++] = dims[d];
    int ok = dy->rank == want_rank;
    for (int d = 0; ok && d < r; d++) ok = dy->dims[d] == want[d];
    if (!ok) {
        char s1[128], s2[128];
        return vp_node_fail(err, VP_ERR_INVALID, n, "dY has shape %s, Gather's output is %s",
                            vp_shape_str(dy->rank, dy->dims, s1, sizeof s1), vp_shape_str(r, want, s2, sizeof s2));
    }
    return vp_shape_set_output(g, n, 0, dy->dtype, rank, dims, err);
}

/* SoftmaxCrossEntropyLossGrad(dY, log_prob, label, [weight], [bias]) -> d_logit,
 * log_prob [N, C, D...], label [N, D...]. */
static vp_status shape_sce_loss_grad(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 3, 5, 1, 1, err);
    if (s) return s;
    const vp_value *dy = vp_shape_in(g, n, 0), *lp = vp_shape_in(g, n, 1), *label = vp_shape_in(g, n, 2);
    const vp_value *weight = vp_shape_in(g, n, 3);
    if ((s = check_float(n, 1, lp, err)) || (s = check_rank_at_least(n, 1, lp, 2, err))) return s;
    if ((s = vp_shape_check_dtype(n, 2, label->dtype, index_types, 2, err))) return s;
    int ok = label->rank == lp->rank - 1 && label->dims[0] == lp->dims[0];
    for (int d = 1; ok && d < label->rank; d++) ok = label->dims[d] == lp->dims[d + 1];
    if (!ok) {
        char s1[128], s2[128];
        return vp_node_fail(err, VP_ERR_INVALID, n, "label %s does not fit log_prob %s ([N, D...] for [N, C, D...])",
                            vp_shape_str(label->rank, label->dims, s1, sizeof s1),
                            vp_shape_str(lp->rank, lp->dims, s2, sizeof s2));
    }
    if (dy->dtype != lp->dtype)
        return vp_node_fail(err, VP_ERR_INVALID, n, "dY must have log_prob's dtype %s", vp_dtype_name(lp->dtype));
    const char *red = vp_attr_string(n, "reduction", "mean");
    if (!strcmp(red, "none")) {
        if (!vp_shape_equal(dy, label)) return vp_shape_fail_like(n, 0, dy, label, 2, err);
    } else if (!strcmp(red, "mean") || !strcmp(red, "sum")) {
        if (vp_value_numel(dy) != 1) return vp_node_fail(err, VP_ERR_INVALID, n, "dY must be a scalar for reduction '%s'", red);
    } else {
        return vp_node_fail(err, VP_ERR_INVALID, n, "reduction '%s' is not one of none, sum, mean", red);
    }
    if (weight && (s = check_channels(g, n, 3, lp->dims[1], err))) return s;
    if (weight && weight->dtype != lp->dtype)
        return vp_node_fail(err, VP_ERR_INVALID, n, "weight must have log_prob's dtype %s", vp_dtype_name(lp->dtype));
    if (vp_shape_in(g, n, 4) && (s = vp_shape_check_like(g, n, 4, 1, err))) return s;
    return vp_shape_same_as_input(g, n, 0, 1, err);
}

/* Designated fields, so columns added to vp_op_def later start out empty here. */
#define MS_OP(op, shape_fn) {.name = op, .domain = "com.microsoft", .min_opset = 0, .shape = shape_fn}
/* dX may be written over dY or the forward value read (elementwise, or rows and
 * channels read whole before they are written) */
#define MS_INPLACE_OP(op, shape_fn) \
    {.name = op, .domain = "com.microsoft", .min_opset = 0, .shape = shape_fn, .flags = VP_OP_INPLACE}
#define ONNX9_OP(op, shape_fn) {.name = op, .domain = "", .min_opset = 9, .shape = shape_fn}
const vp_op_def vp_ops_train[] = {
    MS_INPLACE_OP("ReluGrad", shape_pointwise_grad),
    MS_INPLACE_OP("LeakyReluGrad", shape_pointwise_grad),
    MS_INPLACE_OP("GeluGrad", shape_pointwise_grad),
    MS_INPLACE_OP("FastGeluGrad", shape_pointwise_grad),
    MS_INPLACE_OP("SigmoidGrad", shape_pointwise_grad),
    MS_INPLACE_OP("TanhGrad", shape_pointwise_grad),
    MS_INPLACE_OP("SoftmaxGrad", shape_softmax_grad),
    MS_INPLACE_OP("SoftmaxGrad_13", shape_softmax_grad),
    MS_INPLACE_OP("LogSoftmaxGrad", shape_softmax_grad),
    MS_INPLACE_OP("LogSoftmaxGrad_13", shape_softmax_grad),
    MS_INPLACE_OP("DropoutGrad", shape_dropout_grad),
    MS_OP("LayerNormalizationGrad", shape_layernorm_grad),
    MS_OP("SimplifiedLayerNormalizationGrad", shape_simplified_layernorm_grad),
    /* the one forward op here: its gradient is BatchNormalizationGrad (grad_linalg.c) */
    {.name = "BatchNormInternal", .domain = "com.microsoft", .min_opset = 0, .shape = shape_batchnorm_internal,
     .grad = vp_grad_batch_norm_internal},
    MS_INPLACE_OP("BatchNormalizationGrad", shape_batchnorm_grad),
    MS_OP("ConvGrad", shape_conv_grad),
    MS_OP("MaxPoolGrad", shape_maxpool_grad),
    MS_OP("AveragePoolGrad", shape_avgpool_grad),
    ONNX9_OP("MaxPoolGrad", shape_maxpool_grad),
    ONNX9_OP("AveragePoolGrad", shape_avgpool_grad),
    MS_OP("GatherGrad", shape_gather_grad),
    MS_INPLACE_OP("SoftmaxCrossEntropyLossGrad", shape_sce_loss_grad),
    /* MaxPool's gradient from its input, where the input is kept anyway (grad_linalg.c) */
    {.name = "MaxPoolInputGrad", .domain = "vplan", .min_opset = 0, .shape = shape_maxpool_input_grad},
    /* MaxPool of a Relu output, the pair's gradient without the Relu output (train/fuse_pool_grad.c) */
    {.name = "MaxPoolArgmax", .domain = "vplan", .min_opset = 0, .shape = shape_maxpool_argmax},
    {.name = "MaxPoolReluGrad", .domain = "vplan", .min_opset = 0, .shape = shape_maxpool_relu_grad},
    {0},
};
