/* Gradient rules of the activations and transcendental functions of the elementwise
 * family.
 *
 * Where ONNX Runtime has a gradient op for the derivative (ReluGrad, LeakyReluGrad,
 * SigmoidGrad, TanhGrad, GeluGrad, FastGeluGrad) the rule emits it; the rest are short
 * chains of standard ops written from the derivative given above each rule.  At kinks
 * the rules take PyTorch's choice (Relu: 0 at 0; the hard activations: the linear
 * band's slope strictly inside it).
 *
 * A rule reads the forward output rather than the input wherever the output decides
 * the derivative (Relu, LeakyRelu with alpha >= 0, Elu, Selu, Celu, Sigmoid, Tanh, and
 * Exp, Sqrt, Reciprocal in grad_elementwise.c), as PyTorch's derivatives.yaml does:
 * the output is saved for the next op's backward anyway, so the pre-activation dies
 * in the forward pass instead of living until the backward. */
#include <math.h>
#include <string.h>

#include "ops/grad_macros.h"


static vp_status op1(vp_grad_ctx *c, int node, const char *op, int a, int *out, vp_error *err) {
    return vp_grad_op1(c, node, op, a, out, err);
}

static vp_status op2(vp_grad_ctx *c, int node, const char *op, int a, int b, int *out, vp_error *err) {
    return vp_grad_op2(c, node, op, a, b, out, err);
}

/* ReluGrad(dY, Y): Y > 0 exactly where X > 0 (ONNX Runtime passes Y too when it is
 * stashed; the op reads its second input only for its sign). */
VP_GRAD_RULE(vp_grad_relu) {
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    return vp_gr_ms2(c, node, "ReluGrad", dy[0], OUT(0), &dx[0], err);
}

VP_GRAD_RULE(vp_grad_sigmoid) {
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    return vp_gr_ms2(c, node, "SigmoidGrad", dy[0], OUT(0), &dx[0], err);
}

VP_GRAD_RULE(vp_grad_tanh) {
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    return vp_gr_ms2(c, node, "TanhGrad", dy[0], OUT(0), &dx[0], err);
}

/* dx = where(v > 0, dy, dy * slope) with v the input, or the output where it has the
 * input's sign: LeakyRelu (slope alpha), Elu (slope y + alpha), Celu. */
static vp_status positive_or(vp_grad_ctx *c, int node, const int *dy, int v, int slope, int *dx, vp_error *err) {
    int pos, neg;
    TRY(vp_gr_op_scalar(c, node, "Greater", v, 0.0, &pos, err));
    TRY(op2(c, node, "Mul", dy[0], slope, &neg, err));
    int in[3] = {pos, dy[0], neg};
    int b = vp_grad_begin(c, node, "Where", "", 3, in, 1);
    return b < 0 ? vp_gr_nomem(err) : vp_grad_end(c, b, &dx[0], err);
}

/* alpha >= 0: LeakyReluGrad(dY, Y) with alpha, as ONNX Runtime builds it (Y has X's
 * sign).  A negative alpha flips the sign below zero, so the input decides there. */
VP_GRAD_RULE(vp_grad_leaky_relu) {
    int slope;
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    float alpha = vp_attr_float(vp_gr_node(c, node), "alpha", 0.01f);
    if (alpha >= 0) {
        int b = vp_grad_begin(c, node, "LeakyReluGrad", "com.microsoft", 2, (int[]){dy[0], OUT(0)}, 1);
        if (b < 0) return vp_gr_nomem(err);
        TRY(vp_gr_attr_float(c, b, "alpha", alpha, err));
        return vp_grad_end(c, b, &dx[0], err);
    }
    TRY(vp_gr_scalar(c, node, DT(IN(0)), alpha, &slope, err));
    return positive_or(c, node, dy, IN(0), slope, dx, err);
}

/* alpha > 0: y = alpha (e^x - 1) <= 0 below zero, so y > 0 exactly where x > 0. */
VP_GRAD_RULE(vp_grad_elu) {
    int slope;
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    float alpha = vp_attr_float(vp_gr_node(c, node), "alpha", 1.0f);
    TRY(vp_gr_op_scalar(c, node, "Add", OUT(0), alpha, &slope, err));
    return positive_or(c, node, dy, alpha > 0 ? OUT(0) : IN(0), slope, dx, err);
}

/* dx = dy * sigmoid(x) */
VP_GRAD_RULE(vp_grad_softplus) {
    int sg;
    TRY(op1(c, node, "Sigmoid", IN(0), &sg, err));
    return vp_gr_times_dy(c, node, dy, sg, dx, err);
}

/* GELU with the tanh approximation, y = x/2 (1 + t), t = tanh(k (x + a x^3)):
 * dy/dx = (1 + t)/2 + x/2 (1 - t^2) k (1 + 3 a x^2). */
static vp_status gelu_tanh_derivative(vp_grad_ctx *c, int node, int *out, vp_error *err) {
    const double k = sqrt(2.0 / M_PI), a = 0.044715;
    int x = IN(0), x2, p, u, t, half1, tt, om, q, xo, sum;
    TRY(op2(c, node, "Mul", x, x, &x2, err));
    TRY(vp_gr_scale(c, node, x2, a, &p, err));
    TRY(vp_gr_op_scalar(c, node, "Add", p, 1.0, &p, err));
    TRY(op2(c, node, "Mul", x, p, &u, err));
    TRY(vp_gr_scale(c, node, u, k, &u, err));
    TRY(op1(c, node, "Tanh", u, &t, err));
    TRY(vp_gr_op_scalar(c, node, "Add", t, 1.0, &half1, err));
    TRY(vp_gr_scale(c, node, half1, 0.5, &half1, err));
    TRY(op2(c, node, "Mul", t, t, &tt, err));
    TRY(vp_gr_op_scalar(c, node, "Sub", tt, 1.0, &om, err)); /* t^2 - 1: the sign goes into q */
    TRY(vp_gr_scale(c, node, x2, -0.5 * 3.0 * a * k, &q, err));
    TRY(vp_gr_op_scalar(c, node, "Add", q, -0.5 * k, &q, err));
    TRY(op2(c, node, "Mul", x, om, &xo, err));
    TRY(op2(c, node, "Mul", xo, q, &xo, err));
    TRY(op2(c, node, "Add", half1, xo, &sum, err));
    *out = sum;
    return VP_OK;
}

/* Gelu (ai.onnx from opset 20, com.microsoft): GeluGrad for the exact form. */
VP_GRAD_RULE(vp_grad_gelu) {
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    const char *approx = vp_attr_string(vp_gr_node(c, node), "approximate", "none");
    if (!strcmp(approx, "none")) return vp_gr_ms2(c, node, "GeluGrad", dy[0], IN(0), &dx[0], err);
    if (strcmp(approx, "tanh"))
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, vp_gr_node(c, node), "approximate='%s' has no gradient rule",
                            approx);
    int f;
    TRY(gelu_tanh_derivative(c, node, &f, err));
    return vp_gr_times_dy(c, node, dy, f, dx, err);
}

VP_GRAD_RULE(vp_grad_sin) {
    int f;
    TRY(op1(c, node, "Cos", IN(0), &f, err));
    return vp_gr_times_dy(c, node, dy, f, dx, err);
}

VP_GRAD_RULE(vp_grad_cos) {
    int f;
    TRY(op1(c, node, "Sin", IN(0), &f, err));
    TRY(op1(c, node, "Neg", f, &f, err));
    return vp_gr_times_dy(c, node, dy, f, dx, err);
}

/* Where(lo < v < hi, a, b) for a value v: the band test of the hard activations. */
static vp_status band(vp_grad_ctx *c, int node, int v, double lo, double hi, int *out, vp_error *err) {
    int above, below;
    TRY(vp_gr_op_scalar(c, node, "Greater", v, lo, &above, err));
    TRY(vp_gr_op_scalar(c, node, "Less", v, hi, &below, err));
    return op2(c, node, "And", above, below, out, err);
}

/* y = max(0, min(1, alpha x + beta)): dx = alpha dy inside the linear band. */
VP_GRAD_RULE(vp_grad_hard_sigmoid) {
    const vp_node *n = vp_gr_node(c, node);
    double alpha = vp_attr_float(n, "alpha", 0.2f), beta = vp_attr_float(n, "beta", 0.5f);
    int v, inside, slope, zero;
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    TRY(vp_gr_scale(c, node, IN(0), alpha, &v, err));
    TRY(vp_gr_op_scalar(c, node, "Add", v, beta, &v, err));
    TRY(band(c, node, v, 0.0, 1.0, &inside, err));
    TRY(vp_gr_scale(c, node, dy[0], alpha, &slope, err));
    TRY(vp_gr_scalar(c, node, DT(dy[0]), 0.0, &zero, err));
    return vp_gr_where(c, node, inside, slope, zero, &dx[0], err);
}

/* y = x relu6(x + 3) / 6: dy/dx = 0 below -3, 1 above 3, (2x + 3) / 6 on [-3, 3]
 * (ends included, as torch's hardswish_backward). */
VP_GRAD_RULE(vp_grad_hard_swish) {
    int x = IN(0), lin, below, above, zero, one, f;
    TRY(vp_gr_scale(c, node, x, 1.0 / 3.0, &lin, err));
    TRY(vp_gr_op_scalar(c, node, "Add", lin, 0.5, &lin, err));
    TRY(vp_gr_op_scalar(c, node, "Less", x, -3.0, &below, err));
    TRY(vp_gr_op_scalar(c, node, "Greater", x, 3.0, &above, err));
    TRY(vp_gr_scalar(c, node, DT(x), 0.0, &zero, err));
    TRY(vp_gr_scalar(c, node, DT(x), 1.0, &one, err));
    TRY(vp_gr_where(c, node, above, one, lin, &f, err));
    TRY(vp_gr_where(c, node, below, zero, f, &f, err));
    return vp_gr_times_dy(c, node, dy, f, dx, err);
}

/* y = x / (1 + |x|): dx = dy / (1 + |x|)^2 */
VP_GRAD_RULE(vp_grad_softsign) {
    int a, d;
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    TRY(op1(c, node, "Abs", IN(0), &a, err));
    TRY(vp_gr_op_scalar(c, node, "Add", a, 1.0, &a, err));
    TRY(op2(c, node, "Mul", a, a, &d, err));
    return op2(c, node, "Div", dy[0], d, &dx[0], err);
}

/* y = gamma x (x > 0), gamma alpha (e^x - 1) elsewhere: dy/dx = gamma, or y + gamma alpha. */
VP_GRAD_RULE(vp_grad_selu) {
    const vp_node *n = vp_gr_node(c, node);
    double alpha = vp_attr_float(n, "alpha", 1.67326319217681884765625f);
    double gamma = vp_attr_float(n, "gamma", 1.05070102214813232421875f);
    int pos, g, neg, f;
    /* with alpha, gamma > 0 (the defaults) y has x's sign */
    TRY(vp_gr_op_scalar(c, node, "Greater", alpha > 0 && gamma > 0 ? OUT(0) : IN(0), 0.0, &pos, err));
    TRY(vp_gr_scalar(c, node, DT(IN(0)), gamma, &g, err));
    TRY(vp_gr_op_scalar(c, node, "Add", OUT(0), gamma * alpha, &neg, err));
    TRY(vp_gr_where(c, node, pos, g, neg, &f, err));
    return vp_gr_times_dy(c, node, dy, f, dx, err);
}

/* com.microsoft FastGelu(X, [bias]) and BiasGelu(A, B): the activation of x + bias, so
 * both operands get its derivative (FastGeluGrad, GeluGrad) summed to their shapes. */
static vp_status gelu_of_sum(vp_grad_ctx *c, int node, const char *grad_op, const int *dy, int *dx, vp_error *err) {
    int x = IN(0), g;
    if (IN(1) >= 0) TRY(op2(c, node, "Add", IN(0), IN(1), &x, err));
    TRY(vp_gr_ms2(c, node, grad_op, dy[0], x, &g, err));
    TRY(vp_gr_to_input(c, node, g, 0, dx, err));
    return IN(1) >= 0 ? vp_gr_to_input(c, node, g, 1, dx, err) : VP_OK;
}

VP_GRAD_RULE(vp_grad_fast_gelu) { return gelu_of_sum(c, node, "FastGeluGrad", dy, dx, err); }

VP_GRAD_RULE(vp_grad_bias_gelu) { return gelu_of_sum(c, node, "GeluGrad", dy, dx, err); }

/* dx = dy * f(u) / g, the shape of the inverse functions' derivatives:
 * 1 / sqrt(+-x^2 +- 1) or 1 / (1 +- x^2). */
static vp_status inverse_like(vp_grad_ctx *c, int node, const int *dy, double sq_sign, double one, int root, int negate,
                              int *dx, vp_error *err) {
    int x2, d, q;
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    TRY(op2(c, node, "Mul", IN(0), IN(0), &x2, err));
    TRY(vp_gr_scale(c, node, x2, sq_sign, &d, err));
    TRY(vp_gr_op_scalar(c, node, "Add", d, one, &d, err));
    if (root) TRY(op1(c, node, "Sqrt", d, &d, err));
    TRY(op2(c, node, "Div", dy[0], d, &q, err));
    if (!negate) {
        dx[0] = q;
        return VP_OK;
    }
    return op1(c, node, "Neg", q, &dx[0], err);
}

VP_GRAD_RULE(vp_grad_asin) { return inverse_like(c, node, dy, -1, 1, 1, 0, dx, err); }
VP_GRAD_RULE(vp_grad_acos) { return inverse_like(c, node, dy, -1, 1, 1, 1, dx, err); }
VP_GRAD_RULE(vp_grad_atan) { return inverse_like(c, node, dy, 1, 1, 0, 0, dx, err); }
VP_GRAD_RULE(vp_grad_asinh) { return inverse_like(c, node, dy, 1, 1, 1, 0, dx, err); }
VP_GRAD_RULE(vp_grad_acosh) { return inverse_like(c, node, dy, 1, -1, 1, 0, dx, err); }
VP_GRAD_RULE(vp_grad_atanh) { return inverse_like(c, node, dy, -1, 1, 0, 0, dx, err); }

/* y = tan x: dx = dy (1 + y^2) */
VP_GRAD_RULE(vp_grad_tan) {
    int y2;
    TRY(op2(c, node, "Mul", OUT(0), OUT(0), &y2, err));
    TRY(vp_gr_op_scalar(c, node, "Add", y2, 1.0, &y2, err));
    return vp_gr_times_dy(c, node, dy, y2, dx, err);
}

VP_GRAD_RULE(vp_grad_sinh) {
    int f;
    TRY(op1(c, node, "Cosh", IN(0), &f, err));
    return vp_gr_times_dy(c, node, dy, f, dx, err);
}

VP_GRAD_RULE(vp_grad_cosh) {
    int f;
    TRY(op1(c, node, "Sinh", IN(0), &f, err));
    return vp_gr_times_dy(c, node, dy, f, dx, err);
}

/* y = x s, s = sigmoid(alpha x): dy/dx = s + alpha x s (1 - s) = s + alpha (y - y s). */
VP_GRAD_RULE(vp_grad_swish) {
    double alpha = vp_attr_float(vp_gr_node(c, node), "alpha", 1.0f);
    int ax, s, ys, t, f;
    TRY(vp_gr_scale(c, node, IN(0), alpha, &ax, err));
    TRY(op1(c, node, "Sigmoid", ax, &s, err));
    TRY(op2(c, node, "Mul", OUT(0), s, &ys, err));
    TRY(op2(c, node, "Sub", OUT(0), ys, &t, err));
    TRY(vp_gr_scale(c, node, t, alpha, &t, err));
    TRY(op2(c, node, "Add", s, t, &f, err));
    return vp_gr_times_dy(c, node, dy, f, dx, err);
}

/* y = alpha (e^(x/alpha) - 1) for x <= 0: dy/dx = y / alpha + 1 there, 1 above. */
VP_GRAD_RULE(vp_grad_celu) {
    double alpha = vp_attr_float(vp_gr_node(c, node), "alpha", 1.0f);
    int slope;
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    TRY(vp_gr_scale(c, node, OUT(0), 1.0 / alpha, &slope, err));
    TRY(vp_gr_op_scalar(c, node, "Add", slope, 1.0, &slope, err));
    return positive_or(c, node, dy, OUT(0), slope, dx, err); /* y has x's sign for either sign of alpha */
}

/* y = x t, t = tanh(softplus x): dy/dx = t + x sigmoid(x) (1 - t^2). */
VP_GRAD_RULE(vp_grad_mish) {
    int x = IN(0), sp, t, s, tt, om, u, f;
    TRY(op1(c, node, "Softplus", x, &sp, err));
    TRY(op1(c, node, "Tanh", sp, &t, err));
    TRY(op1(c, node, "Sigmoid", x, &s, err));
    TRY(op2(c, node, "Mul", t, t, &tt, err));
    TRY(vp_gr_op_scalar(c, node, "Sub", tt, 1.0, &om, err)); /* t^2 - 1 */
    TRY(op2(c, node, "Mul", x, s, &u, err));
    TRY(op2(c, node, "Mul", u, om, &u, err));
    TRY(op2(c, node, "Sub", t, u, &f, err));
    return vp_gr_times_dy(c, node, dy, f, dx, err);
}

/* dx = dy where the mask holds, 0 elsewhere. */
static vp_status masked_dy(vp_grad_ctx *c, int node, const int *dy, int mask, int *dx, vp_error *err) {
    int zero;
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    TRY(vp_gr_scalar(c, node, DT(dy[0]), 0.0, &zero, err));
    return vp_gr_where(c, node, mask, dy[0], zero, &dx[0], err);
}

/* Shrink: slope 1 outside [-lambd, lambd], 0 on it (ends included: y is 0 there, as
 * torch's hardshrink_backward). */
VP_GRAD_RULE(vp_grad_shrink) {
    double lambd = vp_attr_float(vp_gr_node(c, node), "lambd", 0.5f);
    int below, above, outside;
    TRY(vp_gr_op_scalar(c, node, "Less", IN(0), -lambd, &below, err));
    TRY(vp_gr_op_scalar(c, node, "Greater", IN(0), lambd, &above, err));
    TRY(op2(c, node, "Or", below, above, &outside, err));
    return masked_dy(c, node, dy, outside, dx, err);
}

VP_GRAD_RULE(vp_grad_thresholded_relu) {
    int above;
    TRY(vp_gr_op_scalar(c, node, "Greater", IN(0), vp_attr_float(vp_gr_node(c, node), "alpha", 1.0f), &above, err));
    return masked_dy(c, node, dy, above, dx, err);
}
