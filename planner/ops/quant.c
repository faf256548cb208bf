/* The quant family: fake quantisation for quantisation-aware training (domain "vplan").
 *
 *   FakeQuant(X, scale, zero_point) -> Y, [Mask]   attrs quant_min (-128), quant_max (127),
 *                                                        axis (0), grad_factor (0)
 *       q = nearbyint(X * (1 / scale)) + zero_point      (half to even)
 *       Y = (clamp(q, quant_min, quant_max) - zero_point) * scale
 *       Mask (bool, X's shape) = quant_min <= q <= quant_max: the straight-through mask,
 *       a byte per element, made when X would otherwise be kept for the backward only
 *       to rebuild it (planner/quant/qat_mask.c)
 *   scale and zero_point (float32, integer-valued zero point) hold one element (per
 *   tensor) or one per index of X's `axis` (per channel).  float32 X is computed as
 *   torch.fake_quantize_per_tensor_affine / per_channel_affine compute it, bit for bit.
 *
 *   FakeQuantGrad(dY, X or Mask, scale, zero_point) -> dX, [dScale]   same attrs
 *       dX = dY where quant_min <= q <= quant_max, else 0   (the clipped straight-through
 *                                                           estimator: the mask rebuilt
 *                                                           from X, or read from Mask)
 *       dScale (LSQ, Esser et al. 2020; only when grad_factor > 0), per scale element:
 *         grad_factor * sum dY * (q - zero_point - X / scale)  inside the range
 *                                (quant_min - zero_point)       below it
 *                                (quant_max - zero_point)       above it
 *       with grad_factor = 1 / sqrt(numel(X) * quant_max) as the placement pass sets it
 *       (torch's _LearnableFakeQuantize).  zero_point gets no gradient.
 *
 *   QuantObserver(X, min, max, count) -> min', max', count'
 *       attrs axis (0), averaging_constant (0.01), freeze_after (0: never)
 *       the moving-average min/max observer (torch MovingAverage(PerChannel)MinMaxObserver):
 *       min and max hold one element or one per index of `axis`; count (float32 scalar)
 *       is the number of steps observed.  The first step sets the range from the batch,
 *       later ones move it by averaging_constant (1: the batch's range exactly); once count reaches freeze_after the
 *       range is kept.  count' = count + 1 always.
 *
 *   QuantParams(min, max) -> scale, zero_point   attrs quant_min, quant_max, symmetric
 *       the scale and zero point of that range (planner/quant/qparams.h).
 *
 * The observer's outputs carry no gradient (a scale from an observer is a constant of
 * the step, as torch's observers see detached data); only a learned (LSQ) scale does.
 * Kernels: runtime/cpu/k_fake_quant.c. */
#include <math.h>
#include <string.h>

#include "ir/op_registry.h"
#include "ops/grad_macros.h"

static const vp_dtype fq_types[] = {VP_F32, VP_F64};
static const vp_dtype f32_only[] = {VP_F32};

/* quant_min < quant_max, within 16 bits (the integer types QDQ export can store). */
static vp_status check_range(const vp_node *n, vp_error *err) {
    int64_t lo = vp_attr_int(n, "quant_min", -128), hi = vp_attr_int(n, "quant_max", 127);
    if (lo >= hi || lo < -32768 || hi > 65535)
        return vp_node_fail(err, VP_ERR_INVALID, n, "quant_min %lld and quant_max %lld are not a 16-bit integer range",
                            (long long)lo, (long long)hi);
    return VP_OK;
}

/* Input i (scale, zero point, min, max) is float32 with one element, or [C] where C is
 * X's extent along the axis attribute. */
static vp_status check_qparam(vp_graph *g, const vp_node *n, int i, const vp_value *x, vp_error *err) {
    const vp_value *v = vp_shape_in(g, n, i);
    if (!v) return vp_node_fail(err, VP_ERR_INVALID, n, "input %d is required", i);
    vp_status s = vp_shape_check_dtype(n, i, v->dtype, f32_only, 1, err);
    if (s || vp_value_numel(v) == 1) return s;
    int axis;
    if ((s = vp_shape_axis(n, vp_attr_int(n, "axis", 0), x->rank, &axis, err))) return s;
    if (v->rank != 1 || v->dims[0] != x->dims[axis])
        return vp_node_fail(err, VP_ERR_INVALID, n, "input %d ('%s') must hold one element or %lld (X's axis %d)", i,
                            v->name, (long long)x->dims[axis], axis);
    return VP_OK;
}

static vp_status check_like_scale(vp_graph *g, const vp_node *n, int i, int j, vp_error *err) {
    const vp_value *a = vp_shape_in(g, n, i), *b = vp_shape_in(g, n, j);
    if (vp_value_numel(a) != vp_value_numel(b))
        return vp_node_fail(err, VP_ERR_INVALID, n, "inputs %d and %d must have as many elements", i, j);
    return VP_OK;
}

static vp_status shape_fake_quant(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 3, 3, 1, 2, err);
    const vp_value *x = s ? NULL : vp_shape_in(g, n, 0);
    if (!s) s = vp_shape_check_dtype(n, 0, x->dtype, fq_types, 2, err);
    if (!s) s = check_range(n, err);
    if (!s) s = check_qparam(g, n, 1, x, err);
    if (!s) s = check_qparam(g, n, 2, x, err);
    if (!s) s = check_like_scale(g, n, 1, 2, err);
    if (!s) s = vp_shape_same_as_input(g, n, 0, 0, err);
    if (!s && n->n_outputs > 1 && n->outputs[1] >= 0) s = vp_shape_set_output(g, n, 1, VP_BOOL, x->rank, x->dims, err);
    return s;
}

static vp_status shape_fake_quant_grad(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 4, 4, 1, 2, err);
    const vp_value *dy = s ? NULL : vp_shape_in(g, n, 0), *x = s ? NULL : vp_shape_in(g, n, 1);
    int masked = !s && x->dtype == VP_BOOL;
    if (!s) s = vp_shape_check_dtype(n, 0, dy->dtype, fq_types, 2, err);
    if (!s && ((!masked && dy->dtype != x->dtype) || dy->rank != x->rank || memcmp(dy->dims, x->dims, sizeof(int64_t) * x->rank)))
        s = vp_node_fail(err, VP_ERR_INVALID, n, "dY must have X's shape and dtype (or the Mask's shape)");
    if (!s && masked && n->n_outputs > 1 && n->outputs[1] >= 0)
        s = vp_node_fail(err, VP_ERR_INVALID, n, "LSQ's scale gradient reads X, not the Mask");
    if (!s) s = check_range(n, err);
    if (!s) s = check_qparam(g, n, 2, x, err);
    if (!s) s = check_qparam(g, n, 3, x, err);
    if (!s) s = check_like_scale(g, n, 2, 3, err);
    if (!s) s = vp_shape_same_as_input(g, n, 0, 0, err);
    if (!s && n->n_outputs > 1 && n->outputs[1] >= 0) s = vp_shape_same_as_input(g, n, 1, 2, err);
    return s;
}

static vp_status shape_observer(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 4, 4, 3, 3, err);
    const vp_value *x = s ? NULL : vp_shape_in(g, n, 0);
    if (!s) s = vp_shape_check_dtype(n, 0, x->dtype, fq_types, 2, err);
    if (!s) s = check_qparam(g, n, 1, x, err);
    if (!s) s = check_qparam(g, n, 2, x, err);
    if (!s) s = check_like_scale(g, n, 1, 2, err);
    const vp_value *count = s ? NULL : vp_shape_in(g, n, 3);
    if (!s && (!count || count->dtype != VP_F32 || vp_value_numel(count) != 1))
        s = vp_node_fail(err, VP_ERR_INVALID, n, "count (input 3) must be a float32 scalar");
    float c = s ? 0 : vp_attr_float(n, "averaging_constant", 0.01f);
    if (!s && !(c > 0 && c <= 1)) s = vp_node_fail(err, VP_ERR_INVALID, n, "averaging_constant must lie in (0, 1]");
    if (!s && vp_attr_int(n, "freeze_after", 0) < 0) s = vp_node_fail(err, VP_ERR_INVALID, n, "freeze_after must be >= 0");
    for (int k = 0; k < 3 && !s; k++) s = vp_shape_same_as_input(g, n, k, k + 1, err);
    return s;
}

static vp_status shape_qparams(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 2, 2, 2, 2, err);
    if (!s) s = check_range(n, err);
    for (int k = 0; k < 2 && !s; k++) {
        const vp_value *v = vp_shape_in(g, n, k);
        s = vp_shape_check_dtype(n, k, v->dtype, f32_only, 1, err);
    }
    if (!s) s = check_like_scale(g, n, 0, 1, err);
    for (int k = 0; k < 2 && !s; k++) s = vp_shape_same_as_input(g, n, k, k, err);
    return s;
}

/* FakeQuantGrad(dY, X, scale, zero_point) with the forward's attributes: dX, and dScale
 * when the scale is learned (grad_factor > 0) and needs one. */
static VP_GRAD_RULE(grad_fake_quant) {
    const vp_node *n = vp_gr_node(c, node);
    int learned = vp_attr_float(n, "grad_factor", 0) > 0 && vp_grad_needs(c, node, 1);
    if (dy[0] < 0 || (!vp_grad_needs(c, node, 0) && !learned)) return VP_OK;
    int in[4] = {dy[0], IN(0), IN(1), IN(2)}, outs[2];
    int b = vp_grad_begin(c, node, "FakeQuantGrad", "vplan", 4, in, learned ? 2 : 1);
    if (b < 0) return vp_gr_nomem(err);
    TRY(vp_gr_copy_attrs(c, node, b, err));
    TRY(vp_grad_end(c, b, outs, err));
    if (vp_grad_needs(c, node, 0)) dx[0] = outs[0];
    if (learned) dx[1] = outs[1];
    return VP_OK;
}

/* The observer and its parameters: constants of the step, no gradient passes them
 * (a learned activation scale's first-step choice, a Where, offers them one). */
static VP_GRAD_RULE(grad_none) {
    (void)c, (void)node, (void)dy, (void)dx, (void)err;
    return VP_OK;
}

const vp_op_def vp_ops_quant[] = {
    {.name = "FakeQuant", .domain = "vplan", .shape = shape_fake_quant, .grad = grad_fake_quant},
    {.name = "FakeQuantGrad", .domain = "vplan", .shape = shape_fake_quant_grad},
    {.name = "QuantObserver", .domain = "vplan", .shape = shape_observer, 
     .flags = VP_OP_NO_FOLD, .grad = grad_none},
    {.name = "QuantParams", .domain = "vplan", .shape = shape_qparams, .grad = grad_none},
    {0},
};
