/* Gradient rules of the elementwise family: arithmetic, the basic functions, Clip,
 * Where, Cast, the variadic ops and Dropout (activations are in grad_activation.c).
 *
 * Binary and variadic ops broadcast, so every input's gradient is summed back to the
 * input's shape (vp_gr_to_input).  At kinks the rules take PyTorch's choice: Abs gives
 * 0 at 0, Clip passes the gradient where min < y < max (read off the output), Max and Min split it evenly
 * among inputs that tie for the result (as torch.maximum does); piecewise-constant ops
 * (Floor, Ceil, Round, Sign) get a zero gradient. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir/dtype_conv.h"
#include "ops/grad_macros.h"


static vp_status op1(vp_grad_ctx *c, int node, const char *op, int a, int *out, vp_error *err) {
    return vp_grad_op1(c, node, op, a, out, err);
}

static vp_status op2(vp_grad_ctx *c, int node, const char *op, int a, int b, int *out, vp_error *err) {
    return vp_grad_op2(c, node, op, a, b, out, err);
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

/* db = -dy summed to b's shape: summed first, so the negation runs on the smaller tensor. */
VP_GRAD_RULE(vp_grad_sub) {
    TRY(vp_gr_to_input(c, node, dy[0], 0, dx, err));
    if (!vp_grad_needs(c, node, 1)) return VP_OK;
    int summed[2] = {-1, -1};
    TRY(vp_gr_to_input(c, node, dy[0], 1, summed, err));
    return op1(c, node, "Neg", summed[1], &dx[1], err);
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

/* Whether value v may hold a zero: unknown data may, constant data is looked at. */
static int may_hold_zero(vp_grad_ctx *c, int v) {
    const vp_value *x = vp_gr_val(c, v);
    if (!x->data) return 1;
    for (int64_t i = 0; i < vp_value_numel(x); i++)
        if (vp_dtype_is_float(x->dtype) ? vp_load(x->data, x->dtype, i) == 0.0 : vp_load(x->data, x->dtype, i) == 0)
            return 1;
    return 0;
}

/* where(cond, 0, t) */
static vp_status zero_where(vp_grad_ctx *c, int node, int cond, int t, int *out, vp_error *err) {
    int zero;
    TRY(vp_gr_scalar(c, node, DT(t), 0.0, &zero, err));
    return vp_gr_where(c, node, cond, zero, t, out, err);
}

/* y = a ^ b: da = dy * b * a^(b-1), db = dy * y * log(a).  b may be an integer.  As
 * PyTorch: da is 0 where b == 0 (not 0 * a^-1), db is 0 where a == 0 and b >= 0. */
VP_GRAD_RULE(vp_grad_pow) {
    int a = IN(0), b, bf, t, u;
    TRY(vp_gr_operand(c, node, 1, &b, err));
    TRY(vp_gr_cast(c, node, b, DT(a), &bf, err));
    if (vp_grad_needs(c, node, 0)) {
        int bm1, p;
        TRY(vp_gr_op_scalar(c, node, "Sub", bf, 1.0, &bm1, err));
        TRY(op2(c, node, "Pow", a, bm1, &p, err));
        TRY(op2(c, node, "Mul", p, bf, &u, err));
        if (may_hold_zero(c, IN(1))) {
            int b0;
            TRY(vp_gr_op_scalar(c, node, "Equal", bf, 0.0, &b0, err));
            TRY(zero_where(c, node, b0, u, &u, err));
        }
        TRY(op2(c, node, "Mul", dy[0], u, &t, err));
        TRY(vp_gr_to_input(c, node, t, 0, dx, err));
    }
    if (vp_grad_needs(c, node, 1)) {
        int la, tb, a0, bpos;
        TRY(op1(c, node, "Log", a, &la, err));
        TRY(op2(c, node, "Mul", OUT(0), la, &u, err));
        TRY(vp_gr_op_scalar(c, node, "Equal", a, 0.0, &a0, err));
        TRY(vp_gr_op_scalar(c, node, "GreaterOrEqual", bf, 0.0, &bpos, err));
        TRY(op2(c, node, "And", a0, bpos, &a0, err));
        TRY(zero_where(c, node, a0, u, &u, err));
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
    return vp_gr_times_dy(c, node, dy, sg, dx, err);
}

/* y = sqrt(x): dx = dy * 0.5 / y */
VP_GRAD_RULE(vp_grad_sqrt) {
    int h;
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    TRY(vp_gr_scale(c, node, dy[0], 0.5, &h, err));
    return op2(c, node, "Div", h, OUT(0), &dx[0], err);
}

VP_GRAD_RULE(vp_grad_exp) { return vp_gr_times_dy(c, node, dy, OUT(0), dx, err); }

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
    return vp_gr_times_dy(c, node, dy, f, dx, err);
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

/* Clip: dx = dy where the output lies strictly inside (min, max), read off the output
 * as PyTorch's in-place hardtanh_ (ReLU6) does, so the input need not be kept: a
 * ReLU6 then runs in place over its BatchNorm's output, and the output is what the
 * next convolution keeps anyway.  Only an input exactly on a bound differs from
 * torch.clamp (which passes the gradient there): a set of measure zero.  A bound given
 * as a float input gets the gradient of the elements it clipped. */
VP_GRAD_RULE(vp_grad_clip) {
    static const char *const cmp[2] = {"LessOrEqual", "GreaterOrEqual"}, *const attr[2] = {"min", "max"};
    int zero, g = dy[0];
    TRY(vp_gr_scalar(c, node, DT(dy[0]), 0.0, &zero, err));
    for (int side = 0; side < 2; side++) {
        int bound, mask, t;
        TRY(clip_bound(c, node, side + 1, attr[side], &bound, err));
        if (bound < 0) continue;
        TRY(op2(c, node, cmp[side], OUT(0), bound, &mask, err));
        if (vp_gr_node(c, node)->opset >= 11 && vp_grad_needs(c, node, side + 1)) {
            TRY(vp_gr_where(c, node, mask, dy[0], zero, &t, err));
            TRY(vp_gr_to_input(c, node, t, side + 1, dx, err));
        }
        TRY(vp_gr_where(c, node, mask, zero, g, &g, err));
    }
    if (vp_grad_needs(c, node, 0)) dx[0] = g;
    return VP_OK;
}

/* Where(cond, a, b): the condition gets none. */
VP_GRAD_RULE(vp_grad_where) {
    int zero, t;
    TRY(vp_gr_scalar(c, node, DT(dy[0]), 0.0, &zero, err));
    if (vp_grad_needs(c, node, 1)) {
        TRY(vp_gr_where(c, node, IN(0), dy[0], zero, &t, err));
        TRY(vp_gr_to_input(c, node, t, 1, dx, err));
    }
    if (vp_grad_needs(c, node, 2)) {
        TRY(vp_gr_where(c, node, IN(0), zero, dy[0], &t, err));
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
    int n_in = vp_gr_node(c, node)->n_inputs, y = OUT(0), count = -1, share = -1;
    if (n_in == 1) return vp_grad_identity(c, node, dy, dx, err);
    int *mask = malloc((size_t)n_in * sizeof *mask);
    vp_status s = mask ? VP_OK : vp_gr_nomem(err);
    for (int k = 0; !s && k < n_in; k++) {
        int eq;
        s = op2(c, node, "Equal", IN(k), y, &eq, err);
        if (!s) s = vp_gr_cast(c, node, eq, DT(y), &mask[k], err);
        if (s) break;
        if (count < 0) count = mask[k];
        else s = op2(c, node, "Add", count, mask[k], &count, err);
    }
    if (!s) s = op2(c, node, "Div", dy[0], count, &share, err);
    for (int k = 0; !s && k < n_in; k++) {
        if (!vp_grad_needs(c, node, k)) continue;
        int t;
        s = op2(c, node, "Mul", share, mask[k], &t, err);
        if (!s) s = vp_gr_to_input(c, node, t, k, dx, err);
    }
    free(mask);
    return s;
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
    TRY(vp_gr_op_scalar(c, node, "Greater", IN(0), 0.0, &pos, err));
    TRY(vp_gr_scalar(c, node, DT(dy[0]), 0.0, &zero, err));
    if (vp_grad_needs(c, node, 0)) {
        TRY(op2(c, node, "Mul", dy[0], slope, &u, err));
        TRY(vp_gr_where(c, node, pos, dy[0], u, &t, err));
        TRY(vp_gr_to_input(c, node, t, 0, dx, err));
    }
    if (vp_grad_needs(c, node, 1)) {
        TRY(op2(c, node, "Mul", dy[0], IN(0), &u, err));
        TRY(vp_gr_where(c, node, pos, zero, u, &t, err));
        TRY(vp_gr_to_input(c, node, t, 1, dx, err));
    }
    return VP_OK;
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
