/* The reduce family: reductions (Reduce*, ArgMax, ArgMin), scans (CumSum, TopK),
 * Softmax and its relatives, the two classification losses, and linear quantisation.
 *
 * Shape functions here decide output shapes and refuse what the kernels in
 * runtime/cpu/k_reduce.h do not compute: blocked or sub-byte / float8 quantisation,
 * integer ReduceLogSumExp, unsigned 32/64-bit and other unusual dtypes.  Opset-dependent
 * semantics (axes becoming an input, Softmax's 2-D coercion before opset 13) are
 * decided from n->opset, in helpers the kernels share where both need them. */
#include <string.h>

#include "ir/op_registry.h"
#include "ops/grad_rules.h"
#include "ops/op_semantics.h"

static const vp_dtype numeric_types[] = {VP_F32, VP_F64, VP_F16, VP_BF16, VP_I32, VP_I64};
static const vp_dtype ordered_types[] = {VP_F32, VP_F64, VP_F16, VP_BF16, VP_I32, VP_I64, VP_U8, VP_I8};
static const vp_dtype min_max_types[] = {VP_F32, VP_F64, VP_F16, VP_BF16, VP_I32, VP_I64, VP_U8, VP_I8, VP_BOOL};
static const vp_dtype label_types[] = {VP_I32, VP_I64};
static const vp_dtype f32_only[] = {VP_F32};
static const vp_dtype quant_float_types[] = {VP_F32, VP_F16, VP_BF16};
static const vp_dtype quant_int_types[] = {VP_U8, VP_I8, VP_U16, VP_I16};
static const vp_dtype dequant_in_types[] = {VP_U8, VP_I8, VP_U16, VP_I16, VP_I32};

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static int in_set(vp_dtype dt, const vp_dtype *set, int n) {
    for (int i = 0; i < n; i++)
        if (set[i] == dt) return 1;
    return 0;
}

/* ---- Reduce* ---- */

/* ReduceSum takes axes as an input from opset 13, the other reductions from 18. */
static int reduce_axes_are_input(const vp_node *n) {
    return n->opset >= (strcmp(n->op_type, "ReduceSum") ? 18 : 13);
}

static vp_status reduce_axes(vp_graph *g, const vp_node *n, int64_t *axes, int *n_axes, vp_error *err) {
    *n_axes = 0;
    if (reduce_axes_are_input(n)) {
        if (vp_node_attr(n, "axes"))
            return vp_node_fail(err, VP_ERR_INVALID, n, "has an 'axes' attribute, but opset %d takes axes as input 1",
                                n->opset);
        if (!vp_shape_in(g, n, 1)) return VP_OK;
        return vp_shape_const_ints(g, n, 1, axes, VP_MAX_RANK, n_axes, err);
    }
    const int64_t *a;
    int k = vp_attr_ints(n, "axes", &a);
    if (k > VP_MAX_RANK) return vp_node_fail(err, VP_ERR_INVALID, n, "lists %d axes", k);
    for (int i = 0; i < k; i++) axes[i] = a[i];
    *n_axes = k > 0 ? k : 0;
    return VP_OK;
}

static vp_status reduce_check_dtype(const vp_node *n, vp_dtype dt, vp_error *err) {
    if (!strcmp(n->op_type, "ReduceMax") || !strcmp(n->op_type, "ReduceMin"))
        return vp_shape_check_dtype(n, 0, dt, min_max_types, COUNT(min_max_types), err);
    if (!strcmp(n->op_type, "ReduceLogSumExp") && !vp_dtype_is_float(dt))
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "integer input (%s) is not supported: exp and log are "
                            "float operations (ONNX drops integer types in opset 28)", vp_dtype_name(dt));
    return vp_shape_check_dtype(n, 0, dt, numeric_types, COUNT(numeric_types), err);
}

static vp_status shape_reduce(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 1, reduce_axes_are_input(n) ? 2 : 1, 1, 1, err);
    if (s) return s;
    const vp_value *x = vp_shape_in(g, n, 0);
    if ((s = reduce_check_dtype(n, x->dtype, err))) return s;
    int64_t axes[VP_MAX_RANK], dims[VP_MAX_RANK];
    int n_axes, rank = 0;
    unsigned mask;
    if ((s = reduce_axes(g, n, axes, &n_axes, err))) return s;
    if ((s = vp_reduce_axes_mask(n, x->rank, axes, n_axes, &mask, err))) return s;
    int keepdims = vp_attr_int(n, "keepdims", 1) != 0;
    for (int d = 0; d < x->rank; d++) {
        if (!(mask & (1u << d))) dims[rank++] = x->dims[d];
        else if (keepdims) dims[rank++] = 1;
    }
    return vp_shape_set_output(g, n, 0, x->dtype, rank, dims, err);
}

/* ---- ArgMax, ArgMin ---- */

static vp_status shape_arg(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 1, 1, 1, 1, err);
    if (s) return s;
    const vp_value *x = vp_shape_in(g, n, 0);
    if ((s = vp_shape_check_dtype(n, 0, x->dtype, ordered_types, COUNT(ordered_types), err))) return s;
    if (x->rank < 1) return vp_node_fail(err, VP_ERR_INVALID, n, "input is a scalar; it needs an axis");
    int axis;
    if ((s = vp_shape_axis(n, vp_attr_int(n, "axis", 0), x->rank, &axis, err))) return s;
    if (!x->dims[axis]) return vp_node_fail(err, VP_ERR_INVALID, n, "axis %d is empty: there is no extremum", axis);
    int64_t dims[VP_MAX_RANK];
    int rank = 0, keepdims = vp_attr_int(n, "keepdims", 1) != 0;
    for (int d = 0; d < x->rank; d++) {
        if (d != axis) dims[rank++] = x->dims[d];
        else if (keepdims) dims[rank++] = 1;
    }
    return vp_shape_set_output(g, n, 0, VP_I64, rank, dims, err);
}

/* ---- Softmax, LogSoftmax, Hardmax ---- */

static vp_status shape_softmax(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 1, 1, 1, 1, err);
    if (s) return s;
    const vp_value *x = vp_shape_in(g, n, 0);
    if ((s = vp_shape_check_dtype(n, 0, x->dtype, vp_float_types, COUNT(vp_float_types), err))) return s;
    int64_t outer, len, inner;
    if ((s = vp_softmax_split(n, x->rank, x->dims, &outer, &len, &inner, err))) return s;
    return vp_shape_same_as_input(g, n, 0, 0, err);
}

/* ---- SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss ---- */

/* Labels must be scores' shape without the class axis: [N, d1, ..., dk] for [N, C, d1, ..., dk]. */
static vp_status check_labels(const vp_node *n, const vp_value *x, const vp_value *labels, vp_error *err) {
    vp_status s = vp_shape_check_dtype(n, 1, labels->dtype, label_types, COUNT(label_types), err);
    if (s) return s;
    int same = labels->rank == x->rank - 1 && labels->dims[0] == x->dims[0];
    for (int d = 1; same && d < labels->rank; d++) same = labels->dims[d] == x->dims[d + 1];
    if (same) return VP_OK;
    char sx[128], sl[128];
    return vp_node_fail(err, VP_ERR_INVALID, n, "labels of shape %s do not match scores of shape %s",
                        vp_shape_str(labels->rank, labels->dims, sl, sizeof sl),
                        vp_shape_str(x->rank, x->dims, sx, sizeof sx));
}

static vp_status shape_loss(vp_graph *g, vp_node *n, vp_error *err) {
    int sce = !strcmp(n->op_type, "SoftmaxCrossEntropyLoss");
    vp_status s = vp_shape_check_arity(n, 2, 3, 1, sce ? 2 : 1, err);
    if (s) return s;
    const vp_value *x = vp_shape_in(g, n, 0), *labels = vp_shape_in(g, n, 1), *w = vp_shape_in(g, n, 2);
    if ((s = vp_shape_check_dtype(n, 0, x->dtype, vp_float_types, COUNT(vp_float_types), err))) return s;
    if (x->rank < 2) return vp_node_fail(err, VP_ERR_INVALID, n, "scores need shape [N, C, ...], got rank %d", x->rank);
    if ((s = check_labels(n, x, labels, err))) return s;
    if (w && (w->dtype != x->dtype || w->rank != 1 || w->dims[0] != x->dims[1]))
        return vp_node_fail(err, VP_ERR_INVALID, n, "weights must be a 1-D %s tensor of the %lld classes",
                            vp_dtype_name(x->dtype), (long long)x->dims[1]);
    const char *reduction = vp_attr_string(n, "reduction", "mean");
    int per_position = !strcmp(reduction, "none");
    if (!per_position && strcmp(reduction, "sum") && strcmp(reduction, "mean"))
        return vp_node_fail(err, VP_ERR_INVALID, n, "reduction '%s' is not none, sum or mean", reduction);
    if ((s = vp_shape_set_output(g, n, 0, x->dtype, per_position ? labels->rank : 0, labels->dims, err))) return s;
    return sce ? vp_shape_set_output(g, n, 1, x->dtype, x->rank, x->dims, err) : VP_OK;
}

/* ---- QuantizeLinear, DequantizeLinear ---- */

/* Scale and zero point: a scalar (per tensor) or, from opset 13, a 1-D tensor as long
 * as x's axis (per axis).  Blocked quantisation is refused. */
static vp_status check_quant_params(const vp_node *n, const vp_value *x, const vp_value *scale,
                                    const vp_value *zp, vp_error *err) {
    if (vp_attr_int(n, "block_size", 0))
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "blocked quantization (block_size) is not supported");
    vp_status s = vp_shape_check_dtype(n, 1, scale->dtype, quant_float_types, COUNT(quant_float_types), err);
    if (s) return s;
    if (scale->rank > 1)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "blocked quantization (a scale of rank %d) is not supported",
                            scale->rank);
    int64_t k = vp_value_numel(scale);
    if (scale->rank == 1 && k != 1) {
        if (n->opset < 13)
            return vp_node_fail(err, VP_ERR_INVALID, n, "scale must be a scalar before opset 13 (per-axis came then)");
        int axis;
        if ((s = vp_shape_axis(n, vp_attr_int(n, "axis", 1), x->rank, &axis, err))) return s;
        if (x->rank < 1 || x->dims[axis] != k)
            return vp_node_fail(err, VP_ERR_INVALID, n, "per-axis scale has %lld entries, axis %d of x has %lld",
                                (long long)k, axis, (long long)(x->rank ? x->dims[axis] : 1));
    }
    if (zp && (zp->rank != scale->rank || vp_value_numel(zp) != k))
        return vp_node_fail(err, VP_ERR_INVALID, n, "zero point and scale differ in shape");
    return VP_OK;
}

/* The quantised type: the zero point's, else output_dtype, else uint8. */
static vp_status quantized_dtype(const vp_node *n, const vp_value *zp, vp_dtype *out, vp_error *err) {
    vp_dtype attr = (vp_dtype)vp_attr_int(n, "output_dtype", 0);
    if (zp && attr && attr != zp->dtype)
        return vp_node_fail(err, VP_ERR_INVALID, n, "output_dtype %s differs from the zero point's %s",
                            vp_dtype_name(attr), vp_dtype_name(zp->dtype));
    *out = zp ? zp->dtype : attr ? attr : VP_U8;
    if (!in_set(*out, quant_int_types, COUNT(quant_int_types)))
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n,
                            "quantizing to %s (ONNX type %d) is not supported: 8- and 16-bit integers are",
                            vp_dtype_name(*out), (int)*out);
    return VP_OK;
}

static vp_status shape_quantize(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 2, 3, 1, 1, err);
    if (s) return s;
    const vp_value *x = vp_shape_in(g, n, 0), *scale = vp_shape_in(g, n, 1), *zp = vp_shape_in(g, n, 2);
    if ((s = vp_shape_check_dtype(n, 0, x->dtype, quant_float_types, COUNT(quant_float_types), err))) return s;
    vp_dtype yt = VP_U8, precision = (vp_dtype)vp_attr_int(n, "precision", 0);
    if ((s = quantized_dtype(n, zp, &yt, err))) return s;
    if ((s = check_quant_params(n, x, scale, zp, err))) return s;
    if (precision && !in_set(precision, quant_float_types, COUNT(quant_float_types)))
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "division precision %s (ONNX type %d) is not supported",
                            vp_dtype_name(precision), (int)precision);
    return vp_shape_set_output(g, n, 0, yt, x->rank, x->dims, err);
}

static vp_status shape_dequantize(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 2, 3, 1, 1, err);
    if (s) return s;
    const vp_value *x = vp_shape_in(g, n, 0), *scale = vp_shape_in(g, n, 1), *zp = vp_shape_in(g, n, 2);
    if ((s = vp_shape_check_dtype(n, 0, x->dtype, dequant_in_types, COUNT(dequant_in_types), err))) return s;
    if (zp && zp->dtype != x->dtype)
        return vp_node_fail(err, VP_ERR_INVALID, n, "zero point is %s, x is %s", vp_dtype_name(zp->dtype),
                            vp_dtype_name(x->dtype));
    if ((s = check_quant_params(n, x, scale, zp, err))) return s;
    vp_dtype yt = (vp_dtype)vp_attr_int(n, "output_dtype", 0);
    if (!yt) yt = scale->dtype;
    if (!in_set(yt, quant_float_types, COUNT(quant_float_types)))
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "dequantizing to %s (ONNX type %d) is not supported",
                            vp_dtype_name(yt), (int)yt);
    return vp_shape_set_output(g, n, 0, yt, x->rank, x->dims, err);
}

/* y, and the uint8 scale and zero point chosen from x's range: both scalars. */
static vp_status shape_dynamic_quantize(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 1, 1, 1, 3, err);
    if (s) return s;
    const vp_value *x = vp_shape_in(g, n, 0);
    if ((s = vp_shape_check_dtype(n, 0, x->dtype, f32_only, COUNT(f32_only), err))) return s;
    if ((s = vp_shape_set_output(g, n, 0, VP_U8, x->rank, x->dims, err))) return s;
    if ((s = vp_shape_set_output(g, n, 1, VP_F32, 0, NULL, err))) return s;
    return vp_shape_set_output(g, n, 2, VP_U8, 0, NULL, err);
}

/* ---- CumSum, TopK ---- */

static vp_status shape_cumsum(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 2, 2, 1, 1, err);
    if (s) return s;
    const vp_value *x = vp_shape_in(g, n, 0), *axis_v = vp_shape_in(g, n, 1);
    if ((s = vp_shape_check_dtype(n, 0, x->dtype, numeric_types, COUNT(numeric_types), err))) return s;
    if ((s = vp_shape_check_dtype(n, 1, axis_v->dtype, label_types, COUNT(label_types), err))) return s;
    if (x->rank < 1) return vp_node_fail(err, VP_ERR_INVALID, n, "input is a scalar; it needs an axis");
    if (axis_v->rank > 1 || vp_value_numel(axis_v) != 1)
        return vp_node_fail(err, VP_ERR_INVALID, n, "axis input must hold a single value");
    if (axis_v->data) { /* else the kernel checks it when it runs */
        int64_t axis;
        int count, a;
        if ((s = vp_shape_const_ints(g, n, 1, &axis, 1, &count, err))) return s;
        if ((s = vp_shape_axis(n, axis, x->rank, &a, err))) return s;
    }
    return vp_shape_same_as_input(g, n, 0, 0, err);
}

/* K: the k attribute before opset 10, the (constant) second input from then on. */
static vp_status topk_k(vp_graph *g, const vp_node *n, int64_t *k, vp_error *err) {
    if (n->opset < 10) {
        if (!vp_node_attr(n, "k")) return vp_node_fail(err, VP_ERR_INVALID, n, "has no k attribute");
        *k = vp_attr_int(n, "k", 0);
        return VP_OK;
    }
    int count;
    vp_status s = vp_shape_const_ints(g, n, 1, k, 1, &count, err);
    if (!s && count != 1) s = vp_node_fail(err, VP_ERR_INVALID, n, "K must hold one value, it holds %d", count);
    return s;
}

static vp_status shape_topk(vp_graph *g, vp_node *n, vp_error *err) {
    int n_in = n->opset < 10 ? 1 : 2;
    vp_status s = vp_shape_check_arity(n, n_in, n_in, 2, 2, err);
    if (s) return s;
    const vp_value *x = vp_shape_in(g, n, 0);
    if ((s = vp_shape_check_dtype(n, 0, x->dtype, numeric_types, COUNT(numeric_types), err))) return s;
    if (x->rank < 1) return vp_node_fail(err, VP_ERR_INVALID, n, "input is a scalar; it needs an axis");
    int axis;
    int64_t k, dims[VP_MAX_RANK];
    if ((s = vp_shape_axis(n, vp_attr_int(n, "axis", -1), x->rank, &axis, err))) return s;
    if ((s = topk_k(g, n, &k, err))) return s;
    if (k < 0 || k > x->dims[axis])
        return vp_node_fail(err, VP_ERR_INVALID, n, "K = %lld is outside [0, %lld], the size of axis %d",
                            (long long)k, (long long)x->dims[axis], axis);
    memcpy(dims, x->dims, sizeof dims);
    dims[axis] = k;
    if ((s = vp_shape_set_output(g, n, 0, x->dtype, x->rank, dims, err))) return s;
    return vp_shape_set_output(g, n, 1, VP_I64, x->rank, dims, err);
}

/* Designated, so columns added to vp_op_def later (gradient, cost) default to empty. */
#define REDUCE_OP(name_, opset_, shape_, grad_) \
    {.name = name_, .domain = "", .min_opset = opset_, .shape = shape_, .grad = grad_}
/* The same for an op whose output may be written over its input (each fiber is read
 * whole before it is written). */
#define REDUCE_INPLACE_OP(name_, opset_, shape_, grad_) \
    {.name = name_, .domain = "", .min_opset = opset_, .shape = shape_, .flags = VP_OP_INPLACE, .grad = grad_}

const vp_op_def vp_ops_reduce[] = {
    REDUCE_OP("ReduceSum", 1, shape_reduce, vp_grad_reduce_sum),
    REDUCE_OP("ReduceMean", 1, shape_reduce, vp_grad_reduce_mean),
    REDUCE_OP("ReduceMax", 1, shape_reduce, vp_grad_reduce_max_min),
    REDUCE_OP("ReduceMin", 1, shape_reduce, vp_grad_reduce_max_min),
    REDUCE_OP("ReduceProd", 1, shape_reduce, vp_grad_reduce_prod),
    REDUCE_OP("ReduceL1", 1, shape_reduce, vp_grad_reduce_l1),
    REDUCE_OP("ReduceL2", 1, shape_reduce, vp_grad_reduce_l2),
    REDUCE_OP("ReduceSumSquare", 1, shape_reduce, vp_grad_reduce_sum_square),
    REDUCE_OP("ReduceLogSum", 1, shape_reduce, vp_grad_reduce_log_sum),
    REDUCE_OP("ReduceLogSumExp", 1, shape_reduce, vp_grad_reduce_log_sum_exp),
    REDUCE_OP("ArgMax", 1, shape_arg, NULL),
    REDUCE_OP("ArgMin", 1, shape_arg, NULL),
    REDUCE_INPLACE_OP("Softmax", 1, shape_softmax, vp_grad_softmax),
    REDUCE_INPLACE_OP("LogSoftmax", 1, shape_softmax, vp_grad_log_softmax),
    REDUCE_INPLACE_OP("Hardmax", 1, shape_softmax, vp_grad_zero),
    REDUCE_OP("SoftmaxCrossEntropyLoss", 12, shape_loss,
              vp_grad_softmax_cross_entropy_loss),
    REDUCE_OP("NegativeLogLikelihoodLoss", 12, shape_loss, vp_grad_nll_loss),
    REDUCE_OP("QuantizeLinear", 10, shape_quantize, NULL),
    REDUCE_OP("DequantizeLinear", 10, shape_dequantize, NULL),
    REDUCE_OP("DynamicQuantizeLinear", 11, shape_dynamic_quantize, NULL),
    REDUCE_OP("CumSum", 11, shape_cumsum, vp_grad_cumsum),
    REDUCE_OP("TopK", 1, shape_topk, vp_grad_topk),
    {0},
};
