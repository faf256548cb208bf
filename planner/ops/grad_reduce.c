/* Gradient rules of the reduce family.
 *
 * A reduction's gradient is dY put back at the reduced axes (Reshape to the keep-dims
 * shape, Expand to the input's) times the local derivative.  ReduceMax and ReduceMin
 * split dY evenly among the elements that tie for the extreme, as PyTorch's amax/amin
 * do (torch.max(dim) instead picks one index; for distinct values the two agree).
 * ReduceL2 gives 0 where the norm is 0, as torch.linalg.norm does.  Softmax, LogSoftmax
 * and SoftmaxCrossEntropyLoss use ONNX Runtime's gradient ops. */
#include <stdio.h>
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

/* What a Reduce* node did: the input's shape, its shape with the reduced axes kept as
 * 1, and how many elements each output element reduced. */
typedef struct reduction {
    int noop;
    int rank, n_axes;
    int64_t dims[VP_MAX_RANK], kept[VP_MAX_RANK], axes[VP_MAX_RANK];
    int64_t count;
} reduction;

static vp_status reduction_of(vp_grad_ctx *c, int node, reduction *r, vp_error *err) {
    int mask[VP_MAX_RANK];
    TRY(vp_gr_reduce_axes(c, node, mask, &r->noop, err));
    const vp_value *x = vp_gr_val(c, IN(0));
    r->rank = x->rank;
    r->n_axes = 0;
    r->count = 1;
    for (int d = 0; d < x->rank; d++) {
        r->dims[d] = x->dims[d];
        r->kept[d] = mask[d] && !r->noop ? 1 : x->dims[d];
        if (mask[d] && !r->noop) {
            r->axes[r->n_axes++] = d;
            r->count *= x->dims[d];
        }
    }
    return VP_OK;
}

/* A reduced-shape value v back in the keep-dims shape (and, when expand, the input's). */
static vp_status put_back(vp_grad_ctx *c, int node, const reduction *r, int v, int expand, int *out, vp_error *err) {
    TRY(vp_gr_reshape(c, node, v, r->rank, r->kept, out, err));
    return expand ? vp_gr_expand(c, node, *out, r->rank, r->dims, out, err) : VP_OK;
}

/* dX = dY spread back over the reduced axes, times `scale`. */
static vp_status spread_scaled(vp_grad_ctx *c, int node, const int *dy, int *dx, int mean, vp_error *err) {
    reduction r;
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    TRY(reduction_of(c, node, &r, err));
    int g;
    TRY(put_back(c, node, &r, dy[0], 1, &g, err));
    return vp_gr_scale(c, node, g, mean && r.count ? 1.0 / (double)r.count : 1.0, &dx[0], err);
}

VP_GRAD_RULE(vp_grad_reduce_sum) { return spread_scaled(c, node, dy, dx, 0, err); }

VP_GRAD_RULE(vp_grad_reduce_mean) { return spread_scaled(c, node, dy, dx, 1, err); }

/* dX = dY * [x == y] / (number of ties) */
VP_GRAD_RULE(vp_grad_reduce_max_min) {
    reduction r;
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    TRY(reduction_of(c, node, &r, err));
    int yk, g, eq, mask, count, share;
    TRY(put_back(c, node, &r, OUT(0), 0, &yk, err));
    TRY(put_back(c, node, &r, dy[0], 0, &g, err));
    TRY(vp_grad_op2(c, node, "Equal", IN(0), yk, &eq, err));
    TRY(vp_gr_cast(c, node, eq, DT(IN(0)), &mask, err));
    count = mask;
    if (r.n_axes) TRY(vp_gr_reduce_sum(c, node, mask, r.n_axes, r.axes, 1, &count, err));
    TRY(vp_grad_op2(c, node, "Div", g, count, &share, err));
    return vp_grad_op2(c, node, "Mul", share, mask, &dx[0], err);
}

/* dX = 2 x dY */
VP_GRAD_RULE(vp_grad_reduce_sum_square) {
    reduction r;
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    TRY(reduction_of(c, node, &r, err));
    int g, x2;
    TRY(put_back(c, node, &r, dy[0], 0, &g, err));
    TRY(vp_gr_scale(c, node, IN(0), 2.0, &x2, err));
    return vp_grad_op2(c, node, "Mul", x2, g, &dx[0], err);
}

/* dX = sign(x) dY (0 at 0, as torch.abs) */
VP_GRAD_RULE(vp_grad_reduce_l1) {
    reduction r;
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    TRY(reduction_of(c, node, &r, err));
    int g, sg;
    TRY(put_back(c, node, &r, dy[0], 0, &g, err));
    TRY(vp_grad_op1(c, node, "Sign", IN(0), &sg, err));
    return vp_grad_op2(c, node, "Mul", sg, g, &dx[0], err);
}

/* y = log(sum x): dX = dY / exp(y) */
VP_GRAD_RULE(vp_grad_reduce_log_sum) {
    reduction r;
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    TRY(reduction_of(c, node, &r, err));
    int sum, q;
    TRY(vp_grad_op1(c, node, "Exp", OUT(0), &sum, err));
    TRY(vp_grad_op2(c, node, "Div", dy[0], sum, &q, err));
    TRY(put_back(c, node, &r, q, 1, &dx[0], err));
    return VP_OK;
}

/* dX = x dY / y, 0 where y == 0 */
VP_GRAD_RULE(vp_grad_reduce_l2) {
    reduction r;
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    TRY(reduction_of(c, node, &r, err));
    int y = OUT(0), zero, is0, q, safe, g;
    TRY(vp_gr_scalar(c, node, DT(y), 0.0, &zero, err));
    TRY(vp_grad_op2(c, node, "Equal", y, zero, &is0, err));
    TRY(vp_grad_op2(c, node, "Div", dy[0], y, &q, err));
    int in[3] = {is0, zero, q};
    int b = vp_grad_begin(c, node, "Where", "", 3, in, 1);
    if (b < 0) return vp_gr_nomem(err);
    TRY(vp_grad_end(c, b, &safe, err));
    TRY(put_back(c, node, &r, safe, 0, &g, err));
    return vp_grad_op2(c, node, "Mul", IN(0), g, &dx[0], err);
}

/* dX = dY * exp(x - y) */
VP_GRAD_RULE(vp_grad_reduce_log_sum_exp) {
    reduction r;
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    TRY(reduction_of(c, node, &r, err));
    int yk, g, d, e;
    TRY(put_back(c, node, &r, OUT(0), 0, &yk, err));
    TRY(put_back(c, node, &r, dy[0], 0, &g, err));
    TRY(vp_grad_op2(c, node, "Sub", IN(0), yk, &d, err));
    TRY(vp_grad_op1(c, node, "Exp", d, &e, err));
    return vp_grad_op2(c, node, "Mul", e, g, &dx[0], err);
}

/* SoftmaxGrad_13 / LogSoftmaxGrad_13 (opset 13: one axis), SoftmaxGrad /
 * LogSoftmaxGrad (before: the input coerced to 2-D at axis), of (dY, Y). */
static vp_status softmax_like(vp_grad_ctx *c, int node, const char *op, const int *dy, int *dx, vp_error *err) {
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    const vp_node *n = vp_gr_node(c, node);
    int v13 = n->opset >= 13;
    int64_t axis = vp_attr_int(n, "axis", v13 ? -1 : 1);
    char name[64];
    snprintf(name, sizeof name, "%s%s", op, v13 ? "_13" : "");
    int in[2] = {dy[0], OUT(0)};
    int b = vp_grad_begin(c, node, name, "com.microsoft", 2, in, 1);
    if (b < 0) return vp_gr_nomem(err);
    TRY(vp_gr_attr_int(c, b, "axis", axis, err));
    return vp_grad_end(c, b, &dx[0], err);
}

VP_GRAD_RULE(vp_grad_softmax) { return softmax_like(c, node, "SoftmaxGrad", dy, dx, err); }

VP_GRAD_RULE(vp_grad_log_softmax) { return softmax_like(c, node, "LogSoftmaxGrad", dy, dx, err); }

/* SoftmaxCrossEntropyLoss(scores, labels, [weights]) -> loss, [log_prob]:
 * SoftmaxCrossEntropyLossGrad(dLoss, log_prob, labels, [weights]) with the forward's
 * reduction and ignore_index, plus LogSoftmaxGrad_13 over the class axis when a
 * gradient also reaches log_prob.  Labels get none; trainable class weights are
 * refused. */
VP_GRAD_RULE(vp_grad_softmax_cross_entropy_loss) {
    const vp_node *n = vp_gr_node(c, node);
    if (vp_grad_needs(c, node, 2))
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "the class weights ('%s') have no gradient rule; freeze them",
                            vp_gr_val(c, IN(2))->name);
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    int had_log_prob = n->n_outputs > 1; /* dy[1] exists only then */
    int log_prob, from_loss = -1, from_log_prob = -1, b;
    TRY(vp_gr_forward_output(c, node, 1, "log_prob", &log_prob, err));
    if (dy[0] >= 0) {
        int in[4] = {dy[0], log_prob, IN(1), IN(2)};
        b = vp_grad_begin(c, node, "SoftmaxCrossEntropyLossGrad", "com.microsoft", IN(2) >= 0 ? 4 : 3, in, 1);
        if (b < 0) return vp_gr_nomem(err);
        TRY(vp_gr_copy_attrs(c, node, b, err));
        TRY(vp_grad_end(c, b, &from_loss, err));
    }
    if (had_log_prob && dy[1] >= 0) {
        int in[2] = {dy[1], log_prob};
        b = vp_grad_begin(c, node, "LogSoftmaxGrad_13", "com.microsoft", 2, in, 1);
        if (b < 0) return vp_gr_nomem(err);
        TRY(vp_gr_attr_int(c, b, "axis", 1, err));
        TRY(vp_grad_end(c, b, &from_log_prob, err));
    }
    if (from_loss >= 0 && from_log_prob >= 0) return vp_grad_op2(c, node, "Add", from_loss, from_log_prob, &dx[0], err);
    dx[0] = from_loss >= 0 ? from_loss : from_log_prob;
    return VP_OK;
}
