/* Gradient rules of the elementwise family.
 *
 * Binary and variadic ops broadcast, so every input's gradient is summed back to the
 * input's shape (vp_gr_to_input).  Activations whose derivative ONNX Runtime has a
 * gradient op for (Relu, Sigmoid, Tanh, Gelu) use it; the rest are short chains of
 * standard ops.  At kinks the rules take PyTorch's choice: Abs and Relu give 0 at 0,
 * Clip passes the gradient where min <= x <= max, Max and Min split it evenly among
 * inputs that tie for the result (as torch.maximum does). */
#include <math.h>
#include <string.h>

#include "grad_rules.h"

#define IN(k) vp_gr_in(c, node, k)
#define OUT(k) vp_gr_out(c, node, k)
#define DT(v) (vp_gr_val(c, v)->dtype)
#define TRY(call)                     \
    do {                              \
        vp_status s_ = (call);        \
        if (s_) return s_;            \
    } while (0)

static vp_status op1(vp_grad_ctx *c, int node, const char *op, int a, int *out, vp_error *err) {
    return vp_grad_op1(c, node, op, a, out, err);
}

static vp_status op2(vp_grad_ctx *c, int node, const char *op, int a, int b, int *out, vp_error *err) {
    return vp_grad_op2(c, node, op, a, b, out, err);
}

/* An op of an input and a scalar of that input's dtype: op(a, v). */
static vp_status op_scalar(vp_grad_ctx *c, int node, const char *op, int a, double v, int *out, vp_error *err) {
    int k;
    TRY(vp_gr_scalar(c, node, DT(a), v, &k, err));
    return op2(c, node, op, a, k, out, err);
}

static vp_status where3(vp_grad_ctx *c, int node, int cond, int a, int b, int *out, vp_error *err);
static vp_status positive_or(vp_grad_ctx *c, int node, const int *dy, int slope, int *dx, vp_error *err);
static vp_status band(vp_grad_ctx *c, int node, int v, double lo, double hi, int *out, vp_error *err);

/* dx0 = dy * f, the common tail of unary rules. */
static vp_status times_dy(vp_grad_ctx *c, int node, const int *dy, int f, int *dx, vp_error *err) {
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    return op2(c, node, "Mul", dy[0], f, &dx[0], err);
}

/* A com.microsoft gradient op of (dY, t): ReluGrad, SigmoidGrad, ... */
static vp_status ms_grad(vp_grad_ctx *c, int node, const char *op, int dyv, int t, int *out, vp_error *err) {
    int in[2] = {dyv, t};
    int b = vp_grad_begin(c, node, op, "com.microsoft", 2, in, 1);
    return b < 0 ? vp_gr_nomem(err) : vp_grad_end(c, b, out, err);
}

VP_GRAD_RULE(vp_grad_identity) {
    if (vp_grad_needs(c, node, 0)) dx[0] = dy[0];
    (void)err;
    return VP_OK;
}

VP_GRAD_RULE(vp_grad_add) {
    TRY(vp_gr_to_input(c, node, dy[0], 0, dx, err));
    return vp_gr_to_input(c, node, dy[0], 1, dx, err);
}

VP_GRAD_RULE(vp_grad_sub) {
    TRY(vp_gr_to_input(c, node, dy[0], 0, dx, err));
    if (!vp_grad_needs(c, node, 1)) return VP_OK;
    int neg;
    TRY(op1(c, node, "Neg", dy[0], &neg, err));
    return vp_gr_to_input(c, node, neg, 1, dx, err);
}

VP_GRAD_RULE(vp_grad_mul) {
    for (int k = 0; k < 2; k++) {
        if (!vp_grad_needs(c, node, k)) continue;
        int t, other;
        TRY(vp_gr_operand(c, node, 1 - k, &other, err));
        TRY(op2(c, node, "Mul", dy[0], other, &t, err));
        TRY(vp_gr_to_input(c, node, t, k, dx, err));
    }
    return VP_OK;
}

/* y = a / b: da = dy / b, db = -dy * y / b. */
VP_GRAD_RULE(vp_grad_div) {
    int t, b;
    TRY(vp_gr_operand(c, node, 1, &b, err));
    if (vp_grad_needs(c, node, 0)) {
        TRY(op2(c, node, "Div", dy[0], b, &t, err));
        TRY(vp_gr_to_input(c, node, t, 0, dx, err));
    }
    if (vp_grad_needs(c, node, 1)) {
        int q, m;
        TRY(op2(c, node, "Div", OUT(0), b, &q, err));
        TRY(op2(c, node, "Mul", dy[0], q, &m, err));
        TRY(op1(c, node, "Neg", m, &t, err));
        TRY(vp_gr_to_input(c, node, t, 1, dx, err));
    }
    return VP_OK;
}

/* y = a ^ b: da = dy * b * a^(b-1), db = dy * y * log(a).  b may be an integer. */
VP_GRAD_RULE(vp_grad_pow) {
    int a = IN(0), b, t, u;
    TRY(vp_gr_operand(c, node, 1, &b, err));
    if (vp_grad_needs(c, node, 0)) {
        int bf, bm1, p;
        TRY(vp_gr_cast(c, node, b, DT(a), &bf, err));
        TRY(op_scalar(c, node, "Sub", bf, 1.0, &bm1, err));
        TRY(op2(c, node, "Pow", a, bm1, &p, err));
        TRY(op2(c, node, "Mul", p, bf, &u, err));
        TRY(op2(c, node, "Mul", dy[0], u, &t, err));
        TRY(vp_gr_to_input(c, node, t, 0, dx, err));
    }
    if (vp_grad_needs(c, node, 1)) {
        int la, tb;
        TRY(op1(c, node, "Log", a, &la, err));
        TRY(op2(c, node, "Mul", OUT(0), la, &u, err));
        TRY(op2(c, node, "Mul", dy[0], u, &t, err));
        TRY(vp_gr_cast(c, node, t, DT(b), &tb, err));
        TRY(vp_gr_to_input(c, node, tb, 1, dx, err));
    }
    return VP_OK;
}

VP_GRAD_RULE(vp_grad_neg) {
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    return op1(c, node, "Neg", dy[0], &dx[0], err);
}

VP_GRAD_RULE(vp_grad_abs) {
    int sg;
    TRY(op1(c, node, "Sign", IN(0), &sg, err));
    return times_dy(c, node, dy, sg, dx, err);
}

/* y = sqrt(x): dx = dy * 0.5 / y */
VP_GRAD_RULE(vp_grad_sqrt) {
    int h;
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    TRY(vp_gr_scale(c, node, dy[0], 0.5, &h, err));
    return op2(c, node, "Div", h, OUT(0), &dx[0], err);
}

VP_GRAD_RULE(vp_grad_exp) { return times_dy(c, node, dy, OUT(0), dx, err); }

VP_GRAD_RULE(vp_grad_log) {
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    return op2(c, node, "Div", dy[0], IN(0), &dx[0], err);
}

/* y = 1/x: dx = -dy * y^2 */
VP_GRAD_RULE(vp_grad_reciprocal) {
    int y2, m;
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    TRY(op2(c, node, "Mul", OUT(0), OUT(0), &y2, err));
    TRY(op2(c, node, "Mul", dy[0], y2, &m, err));
    return op1(c, node, "Neg", m, &dx[0], err);
}

/* dx = dy * 2/sqrt(pi) * exp(-x^2) */
VP_GRAD_RULE(vp_grad_erf) {
    int x2, e, f;
    TRY(op2(c, node, "Mul", IN(0), IN(0), &x2, err));
    TRY(op1(c, node, "Neg", x2, &e, err));
    TRY(op1(c, node, "Exp", e, &e, err));
    TRY(vp_gr_scale(c, node, e, 2.0 / sqrt(M_PI), &f, err));
    return times_dy(c, node, dy, f, dx, err);
}

VP_GRAD_RULE(vp_grad_relu) {
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    return ms_grad(c, node, "ReluGrad", dy[0], IN(0), &dx[0], err);
}

VP_GRAD_RULE(vp_grad_sigmoid) {
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    return ms_grad(c, node, "SigmoidGrad", dy[0], OUT(0), &dx[0], err);
}

VP_GRAD_RULE(vp_grad_tanh) {
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    return ms_grad(c, node, "TanhGrad", dy[0], OUT(0), &dx[0], err);
}

/* dx = where(x > 0, dy, dy * slope): LeakyRelu (slope alpha) and Elu (slope y + alpha). */
static vp_status positive_or(vp_grad_ctx *c, int node, const int *dy, int slope, int *dx, vp_error *err) {
    int pos, neg;
    TRY(op_scalar(c, node, "Greater", IN(0), 0.0, &pos, err));
    TRY(op2(c, node, "Mul", dy[0], slope, &neg, err));
    int in[3] = {pos, dy[0], neg};
    int b = vp_grad_begin(c, node, "Where", "", 3, in, 1);
    return b < 0 ? vp_gr_nomem(err) : vp_grad_end(c, b, &dx[0], err);
}

VP_GRAD_RULE(vp_grad_leaky_relu) {
    int slope;
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    TRY(vp_gr_scalar(c, node, DT(IN(0)), vp_attr_float(vp_gr_node(c, node), "alpha", 0.01f), &slope, err));
    return positive_or(c, node, dy, slope, dx, err);
}

VP_GRAD_RULE(vp_grad_elu) {
    int slope;
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    TRY(op_scalar(c, node, "Add", OUT(0), vp_attr_float(vp_gr_node(c, node), "alpha", 1.0f), &slope, err));
    return positive_or(c, node, dy, slope, dx, err);
}

/* dx = dy * sigmoid(x) */
VP_GRAD_RULE(vp_grad_softplus) {
    int sg;
    TRY(op1(c, node, "Sigmoid", IN(0), &sg, err));
    return times_dy(c, node, dy, sg, dx, err);
}

/* GELU with the tanh approximation, y = x/2 (1 + t), t = tanh(k (x + a x^3)):
 * dy/dx = (1 + t)/2 + x/2 (1 - t^2) k (1 + 3 a x^2). */
static vp_status gelu_tanh_derivative(vp_grad_ctx *c, int node, int *out, vp_error *err) {
    const double k = sqrt(2.0 / M_PI), a = 0.044715;
    int x = IN(0), x2, p, u, t, half1, tt, om, q, xo, sum;
    TRY(op2(c, node, "Mul", x, x, &x2, err));
    TRY(vp_gr_scale(c, node, x2, a, &p, err));
    TRY(op_scalar(c, node, "Add", p, 1.0, &p, err));
    TRY(op2(c, node, "Mul", x, p, &u, err));
    TRY(vp_gr_scale(c, node, u, k, &u, err));
    TRY(op1(c, node, "Tanh", u, &t, err));
    TRY(op_scalar(c, node, "Add", t, 1.0, &half1, err));
    TRY(vp_gr_scale(c, node, half1, 0.5, &half1, err));
    TRY(op2(c, node, "Mul", t, t, &tt, err));
    TRY(op_scalar(c, node, "Sub", tt, 1.0, &om, err)); /* t^2 - 1: the sign goes into q */
    TRY(vp_gr_scale(c, node, x2, -0.5 * 3.0 * a * k, &q, err));
    TRY(op_scalar(c, node, "Add", q, -0.5 * k, &q, err));
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
    if (!strcmp(approx, "none")) return ms_grad(c, node, "GeluGrad", dy[0], IN(0), &dx[0], err);
    if (strcmp(approx, "tanh"))
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, vp_gr_node(c, node), "approximate='%s' has no gradient rule", approx);
    int f;
    TRY(gelu_tanh_derivative(c, node, &f, err));
    return times_dy(c, node, dy, f, dx, err);
}

/* The bound of a Clip side: input k (opset 11+) or attribute (before), -1 when none. */
static vp_status clip_bound(vp_grad_ctx *c, int node, int k, const char *attr, int *out, vp_error *err) {
    const vp_node *n = vp_gr_node(c, node);
    *out = -1;
    if (n->opset >= 11) {
        *out = IN(k);
        return VP_OK;
    }
    if (!vp_node_attr(n, attr)) return VP_OK;
    return vp_gr_scalar(c, node, DT(IN(0)), vp_attr_float(n, attr, 0.0f), out, err);
}

static vp_status where3(vp_grad_ctx *c, int node, int cond, int a, int b, int *out, vp_error *err) {
    int in[3] = {cond, a, b};
    int w = vp_grad_begin(c, node, "Where", "", 3, in, 1);
    return w < 0 ? vp_gr_nomem(err) : vp_grad_end(c, w, out, err);
}

/* Clip: dx = dy where min <= x <= max; a bound given as a float input gets the
 * gradient of the elements it clipped (as torch.clamp with tensor bounds). */
VP_GRAD_RULE(vp_grad_clip) {
    static const char *const cmp[2] = {"Less", "Greater"}, *const attr[2] = {"min", "max"};
    int zero, g = dy[0];
    TRY(vp_gr_scalar(c, node, DT(dy[0]), 0.0, &zero, err));
    for (int side = 0; side < 2; side++) {
        int bound, mask, t;
        TRY(clip_bound(c, node, side + 1, attr[side], &bound, err));
        if (bound < 0) continue;
        TRY(op2(c, node, cmp[side], IN(0), bound, &mask, err));
        if (vp_gr_node(c, node)->opset >= 11 && vp_grad_needs(c, node, side + 1)) {
            TRY(where3(c, node, mask, dy[0], zero, &t, err));
            TRY(vp_gr_to_input(c, node, t, side + 1, dx, err));
        }
        TRY(where3(c, node, mask, zero, g, &g, err));
    }
    if (vp_grad_needs(c, node, 0)) dx[0] = g;
    return VP_OK;
}

/* Where(cond, a, b): the condition gets none. */
VP_GRAD_RULE(vp_grad_where) {
    int zero, t;
    TRY(vp_gr_scalar(c, node, DT(dy[0]), 0.0, &zero, err));
    if (vp_grad_needs(c, node, 1)) {
        TRY(where3(c, node, IN(0), dy[0], zero, &t, err));
        TRY(vp_gr_to_input(c, node, t, 1, dx, err));
    }
    if (vp_grad_needs(c, node, 2)) {
        TRY(where3(c, node, IN(0), zero, dy[0], &t, err));
        TRY(vp_gr_to_input(c, node, t, 2, dx, err));
    }
    return VP_OK;
}

/* Cast between float types: the gradient is cast back. */
VP_GRAD_RULE(vp_grad_cast) {
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    return vp_gr_cast(c, node, dy[0], DT(IN(0)), &dx[0], err);
}

VP_GRAD_RULE(vp_grad_sum) {
    for (int k = 0; k < vp_gr_node(c, node)->n_inputs; k++) TRY(vp_gr_to_input(c, node, dy[0], k, dx, err));
    return VP_OK;
}

/* Max, Min: input k gets dy * [x_k == y] / (number of inputs equal to y). */
VP_GRAD_RULE(vp_grad_max_min) {
    int n_in = vp_gr_node(c, node)->n_inputs, y = OUT(0), mask[16], count = -1;
    if (n_in == 1) return vp_grad_identity(c, node, dy, dx, err);
    if (n_in > 16) return vp_node_fail(err, VP_ERR_UNSUPPORTED, vp_gr_node(c, node), "has more than 16 inputs");
    for (int k = 0; k < n_in; k++) {
        int eq;
        TRY(op2(c, node, "Equal", IN(k), y, &eq, err));
        TRY(vp_gr_cast(c, node, eq, DT(y), &mask[k], err));
        if (count < 0) count = mask[k];
        else TRY(op2(c, node, "Add", count, mask[k], &count, err));
    }
    int share;
    TRY(op2(c, node, "Div", dy[0], count, &share, err));
    for (int k = 0; k < n_in; k++) {
        if (!vp_grad_needs(c, node, k)) continue;
        int t;
        TRY(op2(c, node, "Mul", share, mask[k], &t, err));
        TRY(vp_gr_to_input(c, node, t, k, dx, err));
    }
    return VP_OK;
}

/* Whether a Dropout node trains: from opset 12 its training_mode input, which must be
 * known ahead of time; before, Dropout in an exported model is the identity. */
static vp_status dropout_training(vp_grad_ctx *c, int node, int *training, vp_error *err) {
    const vp_node *n = vp_gr_node(c, node);
    *training = 0;
    if (n->opset < 12 || IN(2) < 0) return VP_OK;
    const vp_value *tm = vp_gr_val(c, IN(2));
    if (!tm->data || tm->dtype != VP_BOOL || vp_value_numel(tm) != 1)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n,
                            "training_mode ('%s') must be a boolean constant for a gradient to be built", tm->name);
    *training = *(const unsigned char *)tm->data != 0;
    return VP_OK;
}

/* Dropout: training uses the mask output (added when the model omits it), DropoutGrad. */
VP_GRAD_RULE(vp_grad_dropout) {
    int training, mask;
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    TRY(dropout_training(c, node, &training, err));
    if (!training) return vp_grad_identity(c, node, dy, dx, err);
    TRY(vp_gr_forward_output(c, node, 1, "mask", &mask, err));
    int in[4] = {dy[0], mask, IN(1), IN(2)};
    int b = vp_grad_begin(c, node, "DropoutGrad", "com.microsoft", 4, in, 1);
    return b < 0 ? vp_gr_nomem(err) : vp_grad_end(c, b, &dx[0], err);
}

/* Mean: each input gets dY / n, summed to its shape. */
VP_GRAD_RULE(vp_grad_mean) {
    int n_in = vp_gr_node(c, node)->n_inputs, share;
    TRY(vp_gr_scale(c, node, dy[0], 1.0 / n_in, &share, err));
    for (int k = 0; k < n_in; k++) TRY(vp_gr_to_input(c, node, share, k, dx, err));
    return VP_OK;
}

/* PRelu(x, slope): dx = dy where x > 0, dy * slope elsewhere; dslope = dy * x where
 * x <= 0. */
VP_GRAD_RULE(vp_grad_prelu) {
    int slope, pos, zero, t, u;
    TRY(vp_gr_operand(c, node, 1, &slope, err));
    TRY(op_scalar(c, node, "Greater", IN(0), 0.0, &pos, err));
    TRY(vp_gr_scalar(c, node, DT(dy[0]), 0.0, &zero, err));
    if (vp_grad_needs(c, node, 0)) {
        TRY(op2(c, node, "Mul", dy[0], slope, &u, err));
        TRY(where3(c, node, pos, dy[0], u, &t, err));
        TRY(vp_gr_to_input(c, node, t, 0, dx, err));
    }
    if (vp_grad_needs(c, node, 1)) {
        TRY(op2(c, node, "Mul", dy[0], IN(0), &u, err));
        TRY(where3(c, node, pos, zero, u, &t, err));
        TRY(vp_gr_to_input(c, node, t, 1, dx, err));
    }
    return VP_OK;
}

VP_GRAD_RULE(vp_grad_sin) {
    int f;
    TRY(op1(c, node, "Cos", IN(0), &f, err));
    return times_dy(c, node, dy, f, dx, err);
}

VP_GRAD_RULE(vp_grad_cos) {
    int f;
    TRY(op1(c, node, "Sin", IN(0), &f, err));
    TRY(op1(c, node, "Neg", f, &f, err));
    return times_dy(c, node, dy, f, dx, err);
}

/* Where(lo < v < hi, a, b) for a value v: the band test of the hard activations. */
static vp_status band(vp_grad_ctx *c, int node, int v, double lo, double hi, int *out, vp_error *err) {
    int above, below;
    TRY(op_scalar(c, node, "Greater", v, lo, &above, err));
    TRY(op_scalar(c, node, "Less", v, hi, &below, err));
    return op2(c, node, "And", above, below, out, err);
}

/* y = max(0, min(1, alpha x + beta)): dx = alpha dy inside the linear band. */
VP_GRAD_RULE(vp_grad_hard_sigmoid) {
    const vp_node *n = vp_gr_node(c, node);
    double alpha = vp_attr_float(n, "alpha", 0.2f), beta = vp_attr_float(n, "beta", 0.5f);
    int v, inside, slope, zero;
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    TRY(vp_gr_scale(c, node, IN(0), alpha, &v, err));
    TRY(op_scalar(c, node, "Add", v, beta, &v, err));
    TRY(band(c, node, v, 0.0, 1.0, &inside, err));
    TRY(vp_gr_scale(c, node, dy[0], alpha, &slope, err));
    TRY(vp_gr_scalar(c, node, DT(dy[0]), 0.0, &zero, err));
    return where3(c, node, inside, slope, zero, &dx[0], err);
}

/* y = x relu6(x + 3) / 6: dy/dx = 0 below -3, 1 above 3, (2x + 3) / 6 between (as
 * torch's hardswish_backward). */
VP_GRAD_RULE(vp_grad_hard_swish) {
    int x = IN(0), lin, inside, above, zero, one, f;
    TRY(vp_gr_scale(c, node, x, 1.0 / 3.0, &lin, err));
    TRY(op_scalar(c, node, "Add", lin, 0.5, &lin, err));
    TRY(band(c, node, x, -3.0, 3.0, &inside, err));
    TRY(op_scalar(c, node, "Greater", x, 0.0, &above, err));
    TRY(vp_gr_scalar(c, node, DT(x), 0.0, &zero, err));
    TRY(vp_gr_scalar(c, node, DT(x), 1.0, &one, err));
    TRY(where3(c, node, above, one, zero, &f, err));
    TRY(where3(c, node, inside, lin, f, &f, err));
    return times_dy(c, node, dy, f, dx, err);
}

/* y = x / (1 + |x|): dx = dy / (1 + |x|)^2 */
VP_GRAD_RULE(vp_grad_softsign) {
    int a, d;
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    TRY(op1(c, node, "Abs", IN(0), &a, err));
    TRY(op_scalar(c, node, "Add", a, 1.0, &a, err));
    TRY(op2(c, node, "Mul", a, a, &d, err));
    return op2(c, node, "Div", dy[0], d, &dx[0], err);
}

/* y = gamma x (x > 0), gamma alpha (e^x - 1) elsewhere: dy/dx = gamma, or y + gamma alpha. */
VP_GRAD_RULE(vp_grad_selu) {
    const vp_node *n = vp_gr_node(c, node);
    double alpha = vp_attr_float(n, "alpha", 1.67326319217681884765625f);
    double gamma = vp_attr_float(n, "gamma", 1.05070102214813232421875f);
    int pos, g, neg, f;
    TRY(op_scalar(c, node, "Greater", IN(0), 0.0, &pos, err));
    TRY(vp_gr_scalar(c, node, DT(IN(0)), gamma, &g, err));
    TRY(op_scalar(c, node, "Add", OUT(0), gamma * alpha, &neg, err));
    TRY(where3(c, node, pos, g, neg, &f, err));
    return times_dy(c, node, dy, f, dx, err);
}

/* com.microsoft FastGelu(X, [bias]) and BiasGelu(A, B): the activation of x + bias, so
 * both operands get its derivative (FastGeluGrad, GeluGrad) summed to their shapes. */
static vp_status gelu_of_sum(vp_grad_ctx *c, int node, const char *grad_op, const int *dy, int *dx, vp_error *err) {
    int x = IN(0), g;
    if (IN(1) >= 0) TRY(op2(c, node, "Add", IN(0), IN(1), &x, err));
    TRY(ms_grad(c, node, grad_op, dy[0], x, &g, err));
    TRY(vp_gr_to_input(c, node, g, 0, dx, err));
    return IN(1) >= 0 ? vp_gr_to_input(c, node, g, 1, dx, err) : VP_OK;
}

VP_GRAD_RULE(vp_grad_fast_gelu) { return gelu_of_sum(c, node, "FastGeluGrad", dy, dx, err); }

VP_GRAD_RULE(vp_grad_bias_gelu) { return gelu_of_sum(c, node, "GeluGrad", dy, dx, err); }

/* ---- trigonometric and hyperbolic ---- */

/* dx = dy * f(u) / g, the shape of the inverse functions' derivatives:
 * 1 / sqrt(+-x^2 +- 1) or 1 / (1 +- x^2). */
static vp_status inverse_like(vp_grad_ctx *c, int node, const int *dy, double sq_sign, double one, int root, int negate,
                              int *dx, vp_error *err) {
    int x2, d, q;
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    TRY(op2(c, node, "Mul", IN(0), IN(0), &x2, err));
    TRY(vp_gr_scale(c, node, x2, sq_sign, &d, err));
    TRY(op_scalar(c, node, "Add", d, one, &d, err));
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
    TRY(op_scalar(c, node, "Add", y2, 1.0, &y2, err));
    return times_dy(c, node, dy, y2, dx, err);
}

VP_GRAD_RULE(vp_grad_sinh) {
    int f;
    TRY(op1(c, node, "Cosh", IN(0), &f, err));
    return times_dy(c, node, dy, f, dx, err);
}

VP_GRAD_RULE(vp_grad_cosh) {
    int f;
    TRY(op1(c, node, "Sinh", IN(0), &f, err));
    return times_dy(c, node, dy, f, dx, err);
}

/* ---- more activations ---- */

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
    return times_dy(c, node, dy, f, dx, err);
}

/* y = alpha (e^(x/alpha) - 1) for x <= 0: dy/dx = y / alpha + 1 there, 1 above. */
VP_GRAD_RULE(vp_grad_celu) {
    double alpha = vp_attr_float(vp_gr_node(c, node), "alpha", 1.0f);
    int slope;
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    TRY(vp_gr_scale(c, node, OUT(0), 1.0 / alpha, &slope, err));
    TRY(op_scalar(c, node, "Add", slope, 1.0, &slope, err));
    return positive_or(c, node, dy, slope, dx, err);
}

/* y = x t, t = tanh(softplus x): dy/dx = t + x sigmoid(x) (1 - t^2). */
VP_GRAD_RULE(vp_grad_mish) {
    int x = IN(0), sp, t, s, tt, om, u, f;
    TRY(op1(c, node, "Softplus", x, &sp, err));
    TRY(op1(c, node, "Tanh", sp, &t, err));
    TRY(op1(c, node, "Sigmoid", x, &s, err));
    TRY(op2(c, node, "Mul", t, t, &tt, err));
    TRY(op_scalar(c, node, "Sub", tt, 1.0, &om, err)); /* t^2 - 1 */
    TRY(op2(c, node, "Mul", x, s, &u, err));
    TRY(op2(c, node, "Mul", u, om, &u, err));
    TRY(op2(c, node, "Sub", t, u, &f, err));
    return times_dy(c, node, dy, f, dx, err);
}

/* dx = dy where the mask holds, 0 elsewhere. */
static vp_status masked_dy(vp_grad_ctx *c, int node, const int *dy, int mask, int *dx, vp_error *err) {
    int zero;
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    TRY(vp_gr_scalar(c, node, DT(dy[0]), 0.0, &zero, err));
    return where3(c, node, mask, dy[0], zero, &dx[0], err);
}

/* Shrink: slope 1 outside [-lambd, lambd], 0 inside. */
VP_GRAD_RULE(vp_grad_shrink) {
    double lambd = vp_attr_float(vp_gr_node(c, node), "lambd", 0.5f);
    int inside, outside;
    TRY(band(c, node, IN(0), -lambd, lambd, &inside, err));
    TRY(op1(c, node, "Not", inside, &outside, err));
    return masked_dy(c, node, dy, outside, dx, err);
}

VP_GRAD_RULE(vp_grad_thresholded_relu) {
    int above;
    TRY(op_scalar(c, node, "Greater", IN(0), vp_attr_float(vp_gr_node(c, node), "alpha", 1.0f), &above, err));
    return masked_dy(c, node, dy, above, dx, err);
}

/* Piecewise-constant ops: a zero gradient, as PyTorch gives. */
VP_GRAD_RULE(vp_grad_zero) {
    (void)dy;
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    const vp_value *x = vp_gr_val(c, IN(0));
    int64_t dims[VP_MAX_RANK];
    memcpy(dims, x->dims, sizeof dims);
    return vp_gr_zeros(c, node, x->dtype, x->rank, dims, &dx[0], err);
}
