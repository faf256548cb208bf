/* The elementwise family: arithmetic, comparisons and bitwise ops with numpy
 * broadcasting, math functions, activations, logic, Clip, Where, Cast, Identity and
 * Dropout.
 *
 * Shape functions here decide the output dtype and shape and refuse what the kernels
 * (runtime/cpu/k_elementwise*.c) do not compute: dtypes outside each op's ONNX type
 * constraints (float8, int4 and string included) and attribute values ONNX does not
 * define.  Where an opset changed an op's signature (Clip and Dropout moved attributes
 * to inputs), n->opset picks the reading. */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "ir/op_registry.h"
#include "ops/grad_rules.h"
#include "ops/op_semantics.h"

#define EW_SET(a) a, (int)(sizeof a / sizeof a[0])

static const vp_dtype floats[] = {VP_F32, VP_F64, VP_F16, VP_BF16};
static const vp_dtype signed_numeric[] = {VP_F32, VP_F64, VP_F16, VP_BF16, VP_I8, VP_I16, VP_I32, VP_I64};
static const vp_dtype numeric[] = {VP_F32, VP_F64, VP_F16, VP_BF16, VP_I8, VP_I16, VP_I32, VP_I64,
                                   VP_U8,  VP_U16, VP_U32, VP_U64};
static const vp_dtype numeric_or_bool[] = {VP_F32, VP_F64, VP_F16, VP_BF16, VP_I8,  VP_I16, VP_I32,
                                           VP_I64, VP_U8,  VP_U16, VP_U32,  VP_U64, VP_BOOL};
static const vp_dtype integers[] = {VP_I8, VP_I16, VP_I32, VP_I64, VP_U8, VP_U16, VP_U32, VP_U64};
static const vp_dtype unsigned_integers[] = {VP_U8, VP_U16, VP_U32, VP_U64};
static const vp_dtype pow_bases[] = {VP_F32, VP_F64, VP_F16, VP_BF16, VP_I32, VP_I64};
static const vp_dtype bools[] = {VP_BOOL};

/* Dtypes the kernels can copy and convert: every fixed-size real type. */
static int ew_storable(vp_dtype t) {
    for (size_t i = 0; i < sizeof numeric_or_bool / sizeof numeric_or_bool[0]; i++)
        if (numeric_or_bool[i] == t) return 1;
    return 0;
}

static vp_status ew_same_dtype(const vp_node *n, int i, const vp_value *v, vp_dtype want, vp_error *err) {
    if (v->dtype == want) return VP_OK;
    return vp_node_fail(err, VP_ERR_INVALID, n, "input %d ('%s') is %s, expected %s like input 0", i, v->name,
                        vp_dtype_name(v->dtype), vp_dtype_name(want));
}

/* A scalar operand such as Clip's bounds or Dropout's ratio: one element, any rank. */
static vp_status ew_check_scalar(const vp_node *n, int i, const vp_value *v, vp_error *err) {
    if (vp_value_numel(v) == 1) return VP_OK;
    return vp_node_fail(err, VP_ERR_INVALID, n, "input %d ('%s') must hold a single element", i, v->name);
}

/* ---- unary ---- */

static vp_status ew_shape_unary(vp_graph *g, vp_node *n, const vp_dtype *allowed, int n_allowed, vp_dtype out_dtype,
                                vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 1, 1, 1, 1, err);
    if (s) return s;
    const vp_value *x = vp_shape_in(g, n, 0);
    s = vp_shape_check_dtype(n, 0, x->dtype, allowed, n_allowed, err);
    if (s) return s;
    return vp_shape_set_output(g, n, 0, out_dtype ? out_dtype : x->dtype, x->rank, x->dims, err);
}

static vp_status shape_unary_float(vp_graph *g, vp_node *n, vp_error *err) {
    return ew_shape_unary(g, n, EW_SET(floats), VP_UNDEFINED, err);
}

static vp_status shape_unary_signed(vp_graph *g, vp_node *n, vp_error *err) {
    return ew_shape_unary(g, n, EW_SET(signed_numeric), VP_UNDEFINED, err);
}

static vp_status shape_unary_numeric(vp_graph *g, vp_node *n, vp_error *err) {
    return ew_shape_unary(g, n, EW_SET(numeric), VP_UNDEFINED, err);
}

static vp_status shape_float_predicate(vp_graph *g, vp_node *n, vp_error *err) {
    return ew_shape_unary(g, n, EW_SET(floats), VP_BOOL, err);
}

static vp_status shape_not(vp_graph *g, vp_node *n, vp_error *err) {
    return ew_shape_unary(g, n, EW_SET(bools), VP_UNDEFINED, err);
}

static vp_status shape_bitwise_not(vp_graph *g, vp_node *n, vp_error *err) {
    return ew_shape_unary(g, n, EW_SET(integers), VP_UNDEFINED, err);
}

static vp_status shape_celu(vp_graph *g, vp_node *n, vp_error *err) {
    if (vp_attr_float(n, "alpha", 1.0f) == 0.0f)
        return vp_node_fail(err, VP_ERR_INVALID, n, "attribute alpha must not be 0");
    return shape_unary_float(g, n, err);
}

static vp_status shape_gelu(vp_graph *g, vp_node *n, vp_error *err) {
    const char *approximate = vp_attr_string(n, "approximate", "none");
    if (strcmp(approximate, "none") && strcmp(approximate, "tanh"))
        return vp_node_fail(err, VP_ERR_INVALID, n, "attribute approximate is '%s', expected 'none' or 'tanh'",
                            approximate);
    return shape_unary_float(g, n, err);
}

/* com.microsoft FastGelu and BiasGelu: X and an optional (FastGelu) or required
 * (BiasGelu) bias along X's last axis. */
static vp_status ew_shape_gelu_bias(vp_graph *g, vp_node *n, int bias_required, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 1 + bias_required, 2, 1, 1, err);
    if (s) return s;
    const vp_value *x = vp_shape_in(g, n, 0), *bias = vp_shape_in(g, n, 1);
    s = vp_shape_check_dtype(n, 0, x->dtype, EW_SET(floats), err);
    if (!s && bias) s = ew_same_dtype(n, 1, bias, x->dtype, err);
    if (s) return s;
    if (bias && (x->rank < 1 || bias->rank != 1 || bias->dims[0] != x->dims[x->rank - 1]))
        return vp_node_fail(err, VP_ERR_INVALID, n, "bias '%s' must be 1-D with the size of the input's last axis",
                            bias->name);
    return vp_shape_same_as_input(g, n, 0, 0, err);
}

static vp_status shape_fast_gelu(vp_graph *g, vp_node *n, vp_error *err) { return ew_shape_gelu_bias(g, n, 0, err); }
static vp_status shape_bias_gelu(vp_graph *g, vp_node *n, vp_error *err) { return ew_shape_gelu_bias(g, n, 1, err); }

/* ---- binary, numpy broadcasting ---- */

/* The broadcast shape of a and b: numpy's, or before opset 7 a's, with b fitted onto it
 * the legacy way (see vp_ew_legacy_shape; channel_slope for PRelu). */
static vp_status ew_broadcast(const vp_node *n, const vp_value *a, const vp_value *b, int channel_slope, int *rank,
                              int64_t *dims, vp_error *err) {
    if (!vp_ew_is_legacy(n)) return vp_shape_broadcast(n, a->rank, a->dims, b->rank, b->dims, rank, dims, err);
    int64_t b_as_a[VP_MAX_RANK];
    char sa[128], sb[128];
    if (!vp_ew_legacy_shape(n, channel_slope, a->rank, a->dims, b->rank, b->dims, b_as_a))
        return vp_node_fail(err, VP_ERR_INVALID, n, "input 1 %s does not broadcast onto input 0 %s (opset %d rules)",
                            vp_shape_str(b->rank, b->dims, sb, sizeof sb), vp_shape_str(a->rank, a->dims, sa, sizeof sa),
                            n->opset);
    *rank = a->rank;
    memcpy(dims, a->dims, sizeof a->dims);
    return VP_OK;
}

/* Both inputs of one dtype from allowed; the output broadcast, of out_dtype
 * (VP_UNDEFINED: the inputs'). */
static vp_status ew_shape_binary(vp_graph *g, vp_node *n, const vp_dtype *allowed, int n_allowed, vp_dtype out_dtype,
                                 int channel_slope, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 2, 2, 1, 1, err);
    if (s) return s;
    const vp_value *a = vp_shape_in(g, n, 0), *b = vp_shape_in(g, n, 1);
    s = vp_shape_check_dtype(n, 0, a->dtype, allowed, n_allowed, err);
    if (!s) s = ew_same_dtype(n, 1, b, a->dtype, err);
    int rank;
    int64_t dims[VP_MAX_RANK];
    if (!s) s = ew_broadcast(n, a, b, channel_slope, &rank, dims, err);
    if (s) return s;
    return vp_shape_set_output(g, n, 0, out_dtype ? out_dtype : a->dtype, rank, dims, err);
}

static vp_status shape_arith(vp_graph *g, vp_node *n, vp_error *err) {
    return ew_shape_binary(g, n, EW_SET(numeric), VP_UNDEFINED, 0, err);
}

static vp_status shape_compare(vp_graph *g, vp_node *n, vp_error *err) {
    return ew_shape_binary(g, n, EW_SET(numeric), VP_BOOL, 0, err);
}

static vp_status shape_equal(vp_graph *g, vp_node *n, vp_error *err) {
    return ew_shape_binary(g, n, EW_SET(numeric_or_bool), VP_BOOL, 0, err);
}

static vp_status shape_logic(vp_graph *g, vp_node *n, vp_error *err) {
    return ew_shape_binary(g, n, EW_SET(bools), VP_BOOL, 0, err);
}

static vp_status shape_bitwise(vp_graph *g, vp_node *n, vp_error *err) {
    return ew_shape_binary(g, n, EW_SET(integers), VP_UNDEFINED, 0, err);
}

static vp_status shape_bit_shift(vp_graph *g, vp_node *n, vp_error *err) {
    const char *direction = vp_attr_string(n, "direction", "");
    if (strcmp(direction, "LEFT") && strcmp(direction, "RIGHT"))
        return vp_node_fail(err, VP_ERR_INVALID, n, "attribute direction is '%s', expected 'LEFT' or 'RIGHT'",
                            direction);
    return ew_shape_binary(g, n, EW_SET(unsigned_integers), VP_UNDEFINED, 0, err);
}

static vp_status shape_mod(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = shape_arith(g, n, err);
    if (s) return s;
    if (vp_dtype_is_float(vp_shape_in(g, n, 0)->dtype) && !vp_attr_int(n, "fmod", 0))
        return vp_node_fail(err, VP_ERR_INVALID, n, "floating-point Mod needs attribute fmod=1");
    return VP_OK;
}

/* Pow: the exponent may be of any numeric dtype; the output takes the base's. */
static vp_status shape_pow(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 2, 2, 1, 1, err);
    if (s) return s;
    const vp_value *x = vp_shape_in(g, n, 0), *y = vp_shape_in(g, n, 1);
    s = vp_shape_check_dtype(n, 0, x->dtype, EW_SET(pow_bases), err);
    if (!s) s = vp_shape_check_dtype(n, 1, y->dtype, EW_SET(numeric), err);
    int rank;
    int64_t dims[VP_MAX_RANK];
    if (!s) s = ew_broadcast(n, x, y, 0, &rank, dims, err);
    if (s) return s;
    return vp_shape_set_output(g, n, 0, x->dtype, rank, dims, err);
}

/* PRelu: the slope broadcasts to X, never the other way. */
static vp_status shape_prelu(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = ew_shape_binary(g, n, EW_SET(numeric), VP_UNDEFINED, 1, err);
    if (s) return s;
    const vp_value *x = vp_shape_in(g, n, 0), *y = &g->values[n->outputs[0]];
    int same = x->rank == y->rank;
    for (int d = 0; same && d < x->rank; d++) same = x->dims[d] == y->dims[d];
    if (same) return VP_OK;
    char sx[128], sy[128];
    return vp_node_fail(err, VP_ERR_INVALID, n, "slope broadcasts input %s to %s; it must not grow it",
                        vp_shape_str(x->rank, x->dims, sx, sizeof sx), vp_shape_str(y->rank, y->dims, sy, sizeof sy));
}

static vp_status shape_where(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 3, 3, 1, 1, err);
    if (s) return s;
    const vp_value *c = vp_shape_in(g, n, 0), *x = vp_shape_in(g, n, 1), *y = vp_shape_in(g, n, 2);
    s = vp_shape_check_dtype(n, 0, c->dtype, EW_SET(bools), err);
    if (!s) s = vp_shape_check_dtype(n, 1, x->dtype, EW_SET(numeric_or_bool), err);
    if (!s) s = ew_same_dtype(n, 2, y, x->dtype, err);
    int r1, rank;
    int64_t d1[VP_MAX_RANK], dims[VP_MAX_RANK];
    if (!s) s = vp_shape_broadcast(n, c->rank, c->dims, x->rank, x->dims, &r1, d1, err);
    if (!s) s = vp_shape_broadcast(n, r1, d1, y->rank, y->dims, &rank, dims, err);
    if (s) return s;
    return vp_shape_set_output(g, n, 0, x->dtype, rank, dims, err);
}

/* ---- variadic: Sum, Mean, Max, Min ---- */

static vp_status ew_shape_variadic(vp_graph *g, vp_node *n, const vp_dtype *allowed, int n_allowed, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 1, INT_MAX, 1, 1, err);
    if (s) return s;
    const vp_value *first = vp_shape_in(g, n, 0);
    s = vp_shape_check_dtype(n, 0, first->dtype, allowed, n_allowed, err);
    if (s) return s;
    int rank = first->rank;
    int64_t dims[VP_MAX_RANK];
    memcpy(dims, first->dims, sizeof dims);
    for (int i = 1; i < n->n_inputs; i++) {
        const vp_value *v = vp_shape_in(g, n, i);
        if (!v) return vp_node_fail(err, VP_ERR_INVALID, n, "input %d is empty", i);
        s = ew_same_dtype(n, i, v, first->dtype, err);
        if (!s) s = vp_shape_broadcast(n, rank, dims, v->rank, v->dims, &rank, dims, err);
        if (s) return s;
    }
    return vp_shape_set_output(g, n, 0, first->dtype, rank, dims, err);
}

static vp_status shape_variadic_float(vp_graph *g, vp_node *n, vp_error *err) {
    return ew_shape_variadic(g, n, EW_SET(floats), err);
}

static vp_status shape_variadic_numeric(vp_graph *g, vp_node *n, vp_error *err) {
    return ew_shape_variadic(g, n, EW_SET(numeric), err);
}

/* ---- Clip ---- */

/* Before opset 11 the bounds are attributes; since, optional scalar inputs. */
static vp_status shape_clip(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 1, n->opset < 11 ? 1 : 3, 1, 1, err);
    if (s) return s;
    const vp_value *x = vp_shape_in(g, n, 0);
    s = vp_shape_check_dtype(n, 0, x->dtype, EW_SET(numeric), err);
    for (int i = 1; !s && i < n->n_inputs; i++) {
        const vp_value *bound = vp_shape_in(g, n, i);
        if (!bound) continue;
        s = ew_same_dtype(n, i, bound, x->dtype, err);
        if (!s) s = ew_check_scalar(n, i, bound, err);
    }
    if (s) return s;
    return vp_shape_same_as_input(g, n, 0, 0, err);
}

/* ---- Cast, CastLike, Identity, Dropout ---- */

/* Names the dtypes vp_dtype_name knows, numbers the rest (float8, int4, ...). */
static const char *ew_dtype_label(vp_dtype t, char *buf, size_t len) {
    if (t == VP_STRING || vp_dtype_size(t)) return vp_dtype_name(t);
    snprintf(buf, len, "ONNX data type %d", (int)t);
    return buf;
}

static vp_status ew_shape_convert(vp_graph *g, vp_node *n, vp_dtype to, vp_error *err) {
    const vp_value *x = vp_shape_in(g, n, 0);
    char b1[32], b2[32];
    if (!ew_storable(x->dtype) || !ew_storable(to))
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "cast from %s to %s is not supported",
                            ew_dtype_label(x->dtype, b1, sizeof b1), ew_dtype_label(to, b2, sizeof b2));
    return vp_shape_set_output(g, n, 0, to, x->rank, x->dims, err);
}

static vp_status shape_cast(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 1, 1, 1, 1, err);
    if (s) return s;
    const vp_attr *to = vp_node_attr(n, "to");
    if (!to || to->type != VP_ATTR_INT)
        return vp_node_fail(err, VP_ERR_INVALID, n, "needs an integer attribute 'to'");
    if (to->i <= 0 || to->i >= VP_DTYPE_COUNT_)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "cast to ONNX data type %lld is not supported",
                            (long long)to->i);
    return ew_shape_convert(g, n, (vp_dtype)to->i, err);
}

static vp_status shape_cast_like(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 2, 2, 1, 1, err);
    if (s) return s;
    return ew_shape_convert(g, n, vp_shape_in(g, n, 1)->dtype, err);
}

static vp_status shape_identity(vp_graph *g, vp_node *n, vp_error *err) {
    return ew_shape_unary(g, n, EW_SET(numeric_or_bool), VP_UNDEFINED, err);
}

/* Dropout: ratio is an attribute before opset 12, then an optional input beside the
 * optional training_mode; the mask is bool since opset 10, X's dtype before.  Our
 * training steps add a fourth, the int64 step count its mask is drawn for (attribute
 * vplan_step: train/train_mode.c); ONNX's Dropout has no such input. */
static vp_status shape_dropout(vp_graph *g, vp_node *n, vp_error *err) {
    int stepped = n->opset >= 12 && vp_attr_int(n, "vplan_step", 0) == 1;
    vp_status s = vp_shape_check_arity(n, 1, n->opset < 12 ? 1 : 3 + stepped, 1, 2, err);
    if (s) return s;
    const vp_value *x = vp_shape_in(g, n, 0), *ratio = vp_shape_in(g, n, 1), *training = vp_shape_in(g, n, 2);
    s = vp_shape_check_dtype(n, 0, x->dtype, EW_SET(floats), err);
    if (!s && ratio) s = vp_shape_check_dtype(n, 1, ratio->dtype, EW_SET(floats), err);
    if (!s && ratio) s = ew_check_scalar(n, 1, ratio, err);
    if (!s && training) s = vp_shape_check_dtype(n, 2, training->dtype, EW_SET(bools), err);
    if (!s && training) s = ew_check_scalar(n, 2, training, err);
    if (!s) s = vp_shape_check_draws(g, n, x->rank, stepped ? 3 : -1, err);
    if (!s) s = vp_shape_same_as_input(g, n, 0, 0, err);
    if (s) return s;
    return vp_shape_set_output(g, n, 1, n->opset < 10 ? x->dtype : VP_BOOL, x->rank, x->dims, err);
}

/* Oldest opsets: those before them carried the legacy consumed_inputs attribute.  Binary
 * ops older than opset 7 broadcast the legacy way (vp_ew_legacy_shape); variadic ones
 * did not broadcast at all, a subset of what we do. */
const vp_op_def vp_ops_elementwise[] = {
    {"Add", "", 6, shape_arith, VP_OP_INPLACE, vp_grad_add},
    {"Sub", "", 6, shape_arith, VP_OP_INPLACE, vp_grad_sub},
    {"Mul", "", 6, shape_arith, VP_OP_INPLACE, vp_grad_mul},
    {"Div", "", 6, shape_arith, VP_OP_INPLACE, vp_grad_div},
    {"Pow", "", 1, shape_pow, VP_OP_INPLACE, vp_grad_pow},
    {"Mod", "", 10, shape_mod, VP_OP_INPLACE, NULL},
    {"PRelu", "", 6, shape_prelu, VP_OP_INPLACE, vp_grad_prelu},
    {"Equal", "", 1, shape_equal, 0, NULL},
    {"Less", "", 1, shape_compare, 0, NULL},
    {"Greater", "", 1, shape_compare, 0, NULL},
    {"LessOrEqual", "", 12, shape_compare, 0, NULL},
    {"GreaterOrEqual", "", 12, shape_compare, 0, NULL},
    {"And", "", 1, shape_logic, VP_OP_INPLACE, NULL},
    {"Or", "", 1, shape_logic, VP_OP_INPLACE, NULL},
    {"Xor", "", 1, shape_logic, VP_OP_INPLACE, NULL},
    {"Not", "", 1, shape_not, VP_OP_INPLACE, NULL},
    {"BitwiseAnd", "", 18, shape_bitwise, 0, NULL},
    {"BitwiseOr", "", 18, shape_bitwise, 0, NULL},
    {"BitwiseXor", "", 18, shape_bitwise, 0, NULL},
    {"BitwiseNot", "", 18, shape_bitwise_not, 0, NULL},
    {"BitShift", "", 11, shape_bit_shift, 0, NULL},
    {"Where", "", 9, shape_where, VP_OP_INPLACE, vp_grad_where},
    {"Sum", "", 6, shape_variadic_float, VP_OP_INPLACE, vp_grad_sum},
    {"Mean", "", 6, shape_variadic_float, VP_OP_INPLACE, vp_grad_mean},
    {"Max", "", 6, shape_variadic_numeric, VP_OP_INPLACE, vp_grad_max_min},
    {"Min", "", 6, shape_variadic_numeric, VP_OP_INPLACE, vp_grad_max_min},

    {"Sqrt", "", 6, shape_unary_float, VP_OP_INPLACE, vp_grad_sqrt},
    {"Exp", "", 6, shape_unary_float, VP_OP_INPLACE, vp_grad_exp},
    {"Log", "", 6, shape_unary_float, VP_OP_INPLACE, vp_grad_log},
    {"Erf", "", 9, shape_unary_float, VP_OP_INPLACE, vp_grad_erf},
    {"Reciprocal", "", 6, shape_unary_float, VP_OP_INPLACE, vp_grad_reciprocal},
    {"Sin", "", 7, shape_unary_float, VP_OP_INPLACE, vp_grad_sin},
    {"Cos", "", 7, shape_unary_float, VP_OP_INPLACE, vp_grad_cos},
    {"Tan", "", 7, shape_unary_float, VP_OP_INPLACE, vp_grad_tan},
    {"Asin", "", 7, shape_unary_float, VP_OP_INPLACE, vp_grad_asin},
    {"Acos", "", 7, shape_unary_float, VP_OP_INPLACE, vp_grad_acos},
    {"Atan", "", 7, shape_unary_float, VP_OP_INPLACE, vp_grad_atan},
    {"Sinh", "", 9, shape_unary_float, VP_OP_INPLACE, vp_grad_sinh},
    {"Cosh", "", 9, shape_unary_float, VP_OP_INPLACE, vp_grad_cosh},
    {"Asinh", "", 9, shape_unary_float, VP_OP_INPLACE, vp_grad_asinh},
    {"Acosh", "", 9, shape_unary_float, VP_OP_INPLACE, vp_grad_acosh},
    {"Atanh", "", 9, shape_unary_float, VP_OP_INPLACE, vp_grad_atanh},
    {"Floor", "", 6, shape_unary_float, VP_OP_INPLACE, vp_grad_zero},
    {"Ceil", "", 6, shape_unary_float, VP_OP_INPLACE, vp_grad_zero},
    {"Round", "", 11, shape_unary_float, VP_OP_INPLACE, vp_grad_zero},
    {"Neg", "", 6, shape_unary_signed, VP_OP_INPLACE, vp_grad_neg},
    {"Abs", "", 6, shape_unary_numeric, VP_OP_INPLACE, vp_grad_abs},
    {"Sign", "", 9, shape_unary_numeric, VP_OP_INPLACE, vp_grad_zero},
    {"Relu", "", 6, shape_unary_signed, VP_OP_INPLACE, vp_grad_relu},
    {"LeakyRelu", "", 6, shape_unary_float, VP_OP_INPLACE, vp_grad_leaky_relu},
    {"Swish", "", 24, shape_unary_float, VP_OP_INPLACE, vp_grad_swish},
    {"Sigmoid", "", 6, shape_unary_float, VP_OP_INPLACE, vp_grad_sigmoid},
    {"HardSigmoid", "", 6, shape_unary_float, VP_OP_INPLACE, vp_grad_hard_sigmoid},
    {"HardSwish", "", 14, shape_unary_float, VP_OP_INPLACE, vp_grad_hard_swish},
    {"Tanh", "", 6, shape_unary_float, VP_OP_INPLACE, vp_grad_tanh},
    {"Softplus", "", 1, shape_unary_float, VP_OP_INPLACE, vp_grad_softplus},
    {"Softsign", "", 1, shape_unary_float, VP_OP_INPLACE, vp_grad_softsign},
    {"Elu", "", 6, shape_unary_float, VP_OP_INPLACE, vp_grad_elu},
    {"Selu", "", 6, shape_unary_float, VP_OP_INPLACE, vp_grad_selu},
    {"Celu", "", 12, shape_celu, VP_OP_INPLACE, vp_grad_celu},
    {"Mish", "", 18, shape_unary_float, VP_OP_INPLACE, vp_grad_mish},
    {"Shrink", "", 9, shape_unary_float, VP_OP_INPLACE, vp_grad_shrink},
    {"ThresholdedRelu", "", 10, shape_unary_float, VP_OP_INPLACE, vp_grad_thresholded_relu},
    {"Gelu", "", 20, shape_gelu, VP_OP_INPLACE, vp_grad_gelu},
    {"Gelu", "com.microsoft", 1, shape_unary_float, VP_OP_INPLACE, vp_grad_gelu},
    {"FastGelu", "com.microsoft", 1, shape_fast_gelu, VP_OP_INPLACE, vp_grad_fast_gelu},
    {"BiasGelu", "com.microsoft", 1, shape_bias_gelu, VP_OP_INPLACE, vp_grad_bias_gelu},
    {"IsNaN", "", 9, shape_float_predicate, 0, NULL},
    {"IsInf", "", 10, shape_float_predicate, 0, NULL},
    {"Clip", "", 6, shape_clip, VP_OP_INPLACE, vp_grad_clip},

    {"Cast", "", 6, shape_cast, 0, vp_grad_cast},
    {"CastLike", "", 15, shape_cast_like, 0, vp_grad_cast},
    {"Identity", "", 1, shape_identity, VP_OP_VIEW, vp_grad_identity},
    /* training mode draws random numbers: never fold it away; a view at inference only
     * (vp_node_is_view) */
    {"Dropout", "", 7, shape_dropout, VP_OP_NO_FOLD | VP_OP_VIEW, vp_grad_dropout},
    {0},
};
