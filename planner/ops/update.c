/* The update family: the parameter updates and the machinery around them
 * (gradient accumulation, the all-finite check of dynamic loss scaling).
 *
 * In: nodes of these ops in a training graph.  Out: their shape functions' checks
 * and output shapes; the CPU kernels they run are runtime/cpu/k_train_optim.c's.
 *
 * Our updates (domain "vplan") are one node per parameter, elementwise over
 * the parameter, float32 or float64, with exactly PyTorch's semantics and operation
 * order (torch.optim single-tensor paths).  W is the parameter, G its gradient:
 *
 *   SGD(W, G) -> W'                      attrs lr, weight_decay
 *       g  = G + weight_decay * W
 *       W' = W - lr * g                                  (torch.optim.SGD, momentum 0)
 *
 *   Momentum(W, G, B) -> W', B'          attrs lr, momentum, weight_decay
 *       g  = G + weight_decay * W
 *       B' = momentum * B + g           (B starts at zero, so the first step gives
 *                                        B' = g, torch's first-step buf = g, dampening 0)
 *       W' = W - lr * B'                                 (torch.optim.SGD, momentum > 0)
 *
 *   Adam(W, G, M, V, T) -> W', M', V', T'   attrs lr, beta1, beta2, eps, weight_decay,
 *                                               decoupled (0: Adam, 1: AdamW)
 *       T is a float32 scalar step count: T' = T + 1, t = T'
 *       decoupled: W <- W * (1 - lr * weight_decay), g = G
 *       else:      g = G + weight_decay * W
 *       M' = beta1 * M + (1 - beta1) * g
 *       V' = beta2 * V + (1 - beta2) * g * g
 *       step_size = lr / (1 - beta1^t)
 *       denom     = sqrt(V') / sqrt(1 - beta2^t) + eps
 *       W' = W - step_size * M' / denom       (torch.optim.Adam / AdamW, amsgrad off)
 *
 *   Each takes an optional last input, do_update (a bool scalar, as ONNX Runtime's
 *   AdamOptimizer has): false leaves every output equal to its input (W' = W, B' = B,
 *   M' = M, V' = V, T' = T), so fp16 loss scaling skips an overflowing step in place,
 *   without a second copy of the updated values (planner/precision/loss_scale.c).
 *
 *   Scalars (lr, 1 - beta1, step_size, ...) are computed in double from the attribute
 *   values and rounded to the parameter's dtype where torch rounds them, and the
 *   elementwise ops are evaluated as ATen evaluates them (runtime/cpu/k_train_optim.c),
 *   so float32 updates agree with torch 1.13 bit for bit.
 *
 * ONNX's own optimizers (ai.onnx.preview.training) are here too, with ONNX's semantics. */
#include <string.h>

#include "ir/op_registry.h"

static const vp_dtype optimizer_types[] = {VP_F32, VP_F64};

static vp_status check_float(const vp_node *n, int i, const vp_value *v, vp_error *err) {
    return vp_shape_check_dtype(n, i, v->dtype, vp_float_types, 4, err);
}

/* ---- gradient accumulation ---- */

/* InPlaceAccumulatorV2(buffer, value, [overwrite]) -> updated_flag [1], [buffer_out] */
static vp_status shape_inplace_accumulator_v2(vp_graph *g, vp_node *n, vp_error *err) {
    static const vp_dtype bool_type[] = {VP_BOOL};
    vp_status s = vp_shape_check_arity(n, 2, 3, 1, 2, err);
    if (s) return s;
    const vp_value *buf = vp_shape_in(g, n, 0), *val = vp_shape_in(g, n, 1);
    if ((s = check_float(n, 0, buf, err)) || (s = check_float(n, 1, val, err))) return s;
    if (!vp_shape_equal(buf, val)) return vp_shape_fail_like(n, 1, val, buf, 0, err);
    if ((s = vp_shape_check_scalar(g, n, 2, bool_type, 1, err))) return s;
    int64_t one = 1;
    s = vp_shape_set_output(g, n, 0, VP_BOOL, 1, &one, err);
    if (!s) s = vp_shape_same_as_input(g, n, 1, 0, err);
    return s;
}

/* ZeroGradient(old_gradient, reset_signal) -> zeros like old_gradient */
static vp_status shape_zero_gradient(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 2, 2, 1, 1, err);
    if (!s) s = check_float(n, 0, vp_shape_in(g, n, 0), err);
    if (!s) s = vp_shape_same_as_input(g, n, 0, 0, err);
    return s;
}

/* IsAllFinite(X1, ..., Xn) -> Y: bool scalar, true when no element of any input is inf
 * or NaN (ONNX Runtime's training op; dynamic loss scaling's one check over all
 * gradients).  Attributes isinf_only, isnan_only as ONNX Runtime's. */
static vp_status shape_is_all_finite(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 1, 4096, 1, 1, err);
    for (int i = 0; !s && i < n->n_inputs; i++) s = check_float(n, i, vp_shape_in(g, n, i), err);
    if (!s && vp_attr_int(n, "isinf_only", 0) && vp_attr_int(n, "isnan_only", 0))
        s = vp_node_fail(err, VP_ERR_INVALID, n, "isinf_only and isnan_only are exclusive");
    return s ? s : vp_shape_set_output(g, n, 0, VP_BOOL, 0, NULL, err);
}

/* ---- optimizers (vplan) ---- */

static vp_status check_hyper(const vp_node *n, const char *name, float dflt, float lo, float hi, int hi_open,
                             vp_error *err) {
    float v = vp_attr_float(n, name, dflt);
    if (v >= lo && (hi_open ? v < hi : v <= hi)) return VP_OK;
    return vp_node_fail(err, VP_ERR_INVALID, n, "attribute %s = %g is outside [%g, %g%s", name, (double)v, (double)lo,
                        (double)hi, hi_open ? ")" : "]");
}

/* W float32/float64; inputs 1..n_like (gradient, state) have W's dtype and shape, and
 * outputs 0..n_like-1 are W' and the new state, shaped like W and the state inputs. */
static vp_status check_param_inputs(vp_graph *g, const vp_node *n, int n_like, vp_error *err) {
    const vp_value *w = vp_shape_in(g, n, 0);
    vp_status s = vp_shape_check_dtype(n, 0, w->dtype, optimizer_types, 2, err);
    for (int i = 1; i <= n_like && !s; i++) s = vp_shape_check_like(g, n, i, 0, err);
    for (int i = 0; i < n_like && !s; i++) s = vp_shape_same_as_input(g, n, i, i ? i + 1 : 0, err);
    if (!s) s = check_hyper(n, "lr", 0, 0, 1e30f, 0, err);
    if (!s) s = check_hyper(n, "weight_decay", 0, 0, 1e30f, 0, err);
    return s;
}

/* The optional do_update input k: a bool scalar. */
static vp_status check_do_update(vp_graph *g, const vp_node *n, int k, vp_error *err) {
    if (n->n_inputs <= k || n->inputs[k] < 0) return VP_OK;
    const vp_value *f = vp_shape_in(g, n, k);
    if (f->dtype != VP_BOOL || vp_value_numel(f) != 1)
        return vp_node_fail(err, VP_ERR_INVALID, n, "do_update (input %d) must be a bool scalar, got %s", k,
                            vp_dtype_name(f->dtype));
    return VP_OK;
}

static vp_status shape_sgd(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 2, 3, 1, 1, err);
    if (!s) s = check_param_inputs(g, n, 1, err);
    if (!s) s = check_do_update(g, n, 2, err);
    return s;
}

static vp_status shape_momentum(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 3, 4, 1, 2, err);
    if (!s) s = check_param_inputs(g, n, 2, err);
    if (!s) s = check_do_update(g, n, 3, err);
    if (!s) s = check_hyper(n, "momentum", 0, 0, 1e30f, 0, err);
    return s;
}

static vp_status shape_adam(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 5, 6, 1, 4, err);
    if (!s) s = check_param_inputs(g, n, 3, err);
    if (!s) s = check_do_update(g, n, 5, err);
    if (s) return s;
    const vp_value *t = vp_shape_in(g, n, 4);
    if (t->dtype != VP_F32 || vp_value_numel(t) != 1)
        return vp_node_fail(err, VP_ERR_INVALID, n, "T (input 4) must be a float32 scalar step count");
    if ((s = check_hyper(n, "beta1", 0.9f, 0, 1, 1, err)) || (s = check_hyper(n, "beta2", 0.999f, 0, 1, 1, err)) ||
        (s = check_hyper(n, "eps", 1e-8f, 0, 1e30f, 0, err)))
        return s;
    int64_t decoupled = vp_attr_int(n, "decoupled", 0);
    if (decoupled != 0 && decoupled != 1)
        return vp_node_fail(err, VP_ERR_INVALID, n, "attribute decoupled must be 0 (Adam) or 1 (AdamW)");
    return vp_shape_same_as_input(g, n, 3, 4, err);
}

/* ---- ONNX's optimizers (ai.onnx.preview.training): Adagrad, Momentum, Adam ----
 *
 * (R, T, X_1..X_k, G_1..G_k, [V_1..V_k], [H_1..H_k]) -> (X_new_1..k, [V_new_1..k], [H_new_1..k]):
 * R a float learning rate, T an int64 step count (both one element), then `groups`
 * lists of k tensors, each X_i's list partner of X_i's dtype and shape. */
static vp_status shape_onnx_optimizer(vp_graph *g, vp_node *n, int groups, vp_error *err) {
    static const vp_dtype step_type[] = {VP_I64};
    int k = n->n_inputs > 2 ? (n->n_inputs - 2) / groups : 0;
    if (k < 1 || (n->n_inputs - 2) % groups)
        return vp_node_fail(err, VP_ERR_INVALID, n, "has %d inputs, expected R, T and %d lists of equal length",
                            n->n_inputs, groups);
    vp_status s = vp_shape_check_arity(n, n->n_inputs, n->n_inputs, k * (groups - 1), k * (groups - 1), err);
    if (!s && !vp_shape_in(g, n, 0)) s = vp_node_fail(err, VP_ERR_INVALID, n, "input R is empty");
    if (!s) s = vp_shape_check_scalar(g, n, 0, optimizer_types, 2, err);
    if (!s && !vp_shape_in(g, n, 1)) s = vp_node_fail(err, VP_ERR_INVALID, n, "input T is empty");
    if (!s) s = vp_shape_check_scalar(g, n, 1, step_type, 1, err);
    for (int i = 0; i < k && !s; i++) {
        int x = 2 + i;
        for (int j = 0; j < groups && !s; j++)
            if (!vp_shape_in(g, n, x + j * k)) s = vp_node_fail(err, VP_ERR_INVALID, n, "input %d is empty", x + j * k);
        if (!s) s = vp_shape_check_dtype(n, x, vp_shape_in(g, n, x)->dtype, optimizer_types, 2, err);
        for (int j = 1; j < groups && !s; j++) s = vp_shape_check_like(g, n, x + j * k, x, err);
        /* outputs: the new X_i, then the new state lists (skipping the gradients) */
        for (int j = 0; j < groups - 1 && !s; j++) s = vp_shape_same_as_input(g, n, i + j * k, j ? x + (j + 1) * k : x, err);
    }
    return s;
}

static vp_status shape_onnx_adagrad(vp_graph *g, vp_node *n, vp_error *err) {
    return shape_onnx_optimizer(g, n, 3, err);
}

static vp_status shape_onnx_momentum(vp_graph *g, vp_node *n, vp_error *err) {
    const char *mode = vp_attr_string(n, "mode", "");
    if (strcmp(mode, "standard") && strcmp(mode, "nesterov"))
        return vp_node_fail(err, VP_ERR_INVALID, n, "mode '%s' is not standard or nesterov", mode);
    if (!vp_node_attr(n, "alpha") || !vp_node_attr(n, "beta") || !vp_node_attr(n, "norm_coefficient"))
        return vp_node_fail(err, VP_ERR_INVALID, n, "attributes alpha, beta and norm_coefficient are required");
    return shape_onnx_optimizer(g, n, 3, err);
}

static vp_status shape_onnx_adam(vp_graph *g, vp_node *n, vp_error *err) {
    return shape_onnx_optimizer(g, n, 4, err);
}

#define MS_OP(op, shape_fn) {.name = op, .domain = "com.microsoft", .min_opset = 0, .shape = shape_fn}
#define VPLAN_OP(op, shape_fn) \
    {.name = op, .domain = "vplan", .min_opset = 0, .shape = shape_fn, .flags = VP_OP_NO_FOLD}

#define PREVIEW_OP(op, shape_fn) \
    {.name = op, .domain = "ai.onnx.preview.training", .min_opset = 0, .shape = shape_fn, \
     .flags = VP_OP_NO_FOLD}

const vp_op_def vp_ops_update[] = {
    MS_OP("InPlaceAccumulatorV2", shape_inplace_accumulator_v2),
    MS_OP("ZeroGradient", shape_zero_gradient),
    {.name = "IsAllFinite", .domain = "com.microsoft", .min_opset = 0, .shape = shape_is_all_finite,
     .flags = VP_OP_NO_FOLD},
    VPLAN_OP("SGD", shape_sgd),
    VPLAN_OP("Momentum", shape_momentum),
    VPLAN_OP("Adam", shape_adam),
    PREVIEW_OP("Adagrad", shape_onnx_adagrad),
    PREVIEW_OP("Momentum", shape_onnx_momentum),
    PREVIEW_OP("Adam", shape_onnx_adam),
    {0},
};
