/* Gradient rules of the reduce family.
 *
 * A reduction's gradient is dY put back at the reduced axes (Reshape to the keep-dims
 * shape, Expand to the input's) times the local derivative.  ReduceMax and ReduceMin
 * split dY evenly among the elements that tie for the extreme, as PyTorch's amax/amin
 * do (torch.max(dim) instead picks one index; for distinct values the two agree).
 * ReduceL2 gives 0 where the norm is 0, as torch.linalg.norm does.  Softmax, LogSoftmax
 * and SoftmaxCrossEntropyLoss use ONNX Runtime's gradient ops. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/grad_macros.h"
#include "ir/graph_build.h"


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

/* dX = dY spread back over the reduced axes (divided by their size for a mean, before
 * spreading, while it is small). */
static vp_status spread_scaled(vp_grad_ctx *c, int node, const int *dy, int *dx, int mean, vp_error *err) {
    reduction r;
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    TRY(reduction_of(c, node, &r, err));
    int g;
    TRY(vp_gr_scale(c, node, dy[0], mean && r.count ? 1.0 / (double)r.count : 1.0, &g, err));
    return put_back(c, node, &r, g, 1, &dx[0], err);
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
    int g;
    TRY(vp_gr_scale(c, node, dy[0], 2.0, &g, err));
    TRY(put_back(c, node, &r, g, 0, &g, err));
    return vp_grad_op2(c, node, "Mul", IN(0), g, &dx[0], err);
}

/* ReduceProd of x over the node's axes, kept as 1 (axes an input from opset 18). */
static vp_status keep_prod(vp_grad_ctx *c, int node, const reduction *r, int x, int *out, vp_error *err) {
    int opset = vp_gr_node(c, node)->opset, ax = -1, b;
    opset = opset > 13 ? opset : 13; /* the opset vp_grad_begin gives the node */
    if (opset >= 18) TRY(vp_gr_ints(c, r->axes, r->n_axes, &ax, err));
    int in[2] = {x, ax};
    if ((b = vp_grad_begin(c, node, "ReduceProd", "", ax >= 0 ? 2 : 1, in, 1)) < 0) return vp_gr_nomem(err);
    TRY(vp_gr_attr_int(c, b, "keepdims", 1, err));
    if (opset < 18) TRY(vp_gr_attr_ints(c, b, "axes", r->axes, r->n_axes, err));
    return vp_grad_end(c, b, out, err);
}

/* y = prod x: dx_i = dy * (product of the others), exact with zeros (as PyTorch): with
 * no zero in the group it is y / x_i; with one, the zero's is the product of the rest
 * and the others' 0; with more, all 0. */
VP_GRAD_RULE(vp_grad_reduce_prod) {
    reduction r;
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    TRY(reduction_of(c, node, &r, err));
    if (r.noop || !r.n_axes) return vp_grad_identity(c, node, dy, dx, err);
    vp_dtype dt = DT(IN(0));
    int x = IN(0), zero, one, is0, zeros, x1, p1, ratio, none, single, own, g, t;
    TRY(vp_gr_scalar(c, node, dt, 0.0, &zero, err));
    TRY(vp_gr_scalar(c, node, dt, 1.0, &one, err));
    TRY(vp_grad_op2(c, node, "Equal", x, zero, &is0, err));
    TRY(vp_gr_cast(c, node, is0, dt, &zeros, err));
    TRY(vp_gr_reduce_sum(c, node, zeros, r.n_axes, r.axes, 1, &zeros, err));
    TRY(vp_gr_where(c, node, is0, one, x, &x1, err));
    TRY(keep_prod(c, node, &r, x1, &p1, err));
    TRY(vp_grad_op2(c, node, "Div", p1, x1, &ratio, err));
    TRY(vp_gr_op_scalar(c, node, "Equal", zeros, 0.0, &none, err));
    TRY(vp_gr_op_scalar(c, node, "Equal", zeros, 1.0, &single, err));
    TRY(vp_grad_op2(c, node, "And", single, is0, &own, err));
    TRY(vp_gr_where(c, node, own, p1, zero, &t, err));
    TRY(vp_gr_where(c, node, none, ratio, t, &t, err));
    TRY(put_back(c, node, &r, dy[0], 0, &g, err));
    return vp_grad_op2(c, node, "Mul", t, g, &dx[0], err);
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

/* ---- NegativeLogLikelihoodLoss, with standard ops ---- */

/* Per-position weights w[t] (the class weight of each label, 0 where the label is
 * ignore_index), or -1 when every weight is 1; *labels gets the labels with ignored
 * entries replaced by class 0 so that they index safely. */
static vp_status nll_weights(vp_grad_ctx *c, int node, vp_dtype dt, int *labels, int *w, vp_error *err) {
    const vp_node *n = vp_gr_node(c, node);
    int t = IN(1), has_ignore = vp_node_attr(n, "ignore_index") != NULL, valid = -1;
    *labels = t;
    *w = -1;
    if (has_ignore) {
        vp_dtype lt = DT(t);
        int64_t ig = vp_attr_int(n, "ignore_index", 0), zero64 = 0;
        int32_t ig32 = (int32_t)ig, zero32 = 0;
        int ign =
            vp_build_const(vp_grad_graph(c), "ignore_index", lt, 0, NULL, lt == VP_I32 ? (void *)&ig32 : (void *)&ig);
        int z =
            vp_build_const(vp_grad_graph(c), "class0", lt, 0, NULL, lt == VP_I32 ? (void *)&zero32 : (void *)&zero64);
        int is_ign, in[3];
        if (ign < 0 || z < 0) return vp_gr_nomem(err);
        TRY(vp_grad_op2(c, node, "Equal", t, ign, &is_ign, err));
        in[0] = is_ign, in[1] = z, in[2] = t;
        int b = vp_grad_begin(c, node, "Where", "", 3, in, 1);
        if (b < 0) return vp_gr_nomem(err);
        TRY(vp_grad_end(c, b, labels, err));
        TRY(vp_grad_op1(c, node, "Not", is_ign, &valid, err));
        TRY(vp_gr_cast(c, node, valid, dt, &valid, err));
    }
    if (IN(2) >= 0) {
        TRY(vp_grad_op2(c, node, "Gather", IN(2), *labels, w, err));
        if (valid >= 0) TRY(vp_grad_op2(c, node, "Mul", *w, valid, w, err));
    } else {
        *w = valid;
    }
    return VP_OK;
}

/* The class ids 0..C-1 in the labels' integer dtype, shaped dims ([1, C, 1, ...]). */
static vp_status class_ids(vp_grad_ctx *c, vp_dtype lt, int rank, const int64_t *dims, int *out, vp_error *err) {
    int64_t n = dims[1];
    void *p = malloc((size_t)(n ? n : 1) * vp_dtype_size(lt));
    if (!p) return vp_gr_nomem(err);
    for (int64_t i = 0; i < n; i++) {
        if (lt == VP_I32) ((int32_t *)p)[i] = (int32_t)i;
        else ((int64_t *)p)[i] = i;
    }
    *out = vp_build_const(vp_grad_graph(c), "classes", lt, rank, dims, p);
    free(p);
    return *out < 0 ? vp_gr_nomem(err) : VP_OK;
}

/* loss_i = -x[i, t_i] w[t_i]; dX[i, c] = -[c == t_i] w[t_i] g_i with g = dY (none, sum)
 * or dY / sum_i w[t_i] (mean). */
VP_GRAD_RULE(vp_grad_nll_loss) {
    const vp_node *n = vp_gr_node(c, node);
    if (vp_grad_needs(c, node, 2))
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "the class weights ('%s') have no gradient rule; freeze them",
                            vp_gr_val(c, IN(2))->name);
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    const char *reduction = vp_attr_string(n, "reduction", "mean");
    const vp_value *x = vp_gr_val(c, IN(0));
    vp_dtype dt = x->dtype;
    int rank = x->rank;
    int64_t dims[VP_MAX_RANK], ones[VP_MAX_RANK];
    memcpy(dims, x->dims, sizeof dims);
    int64_t n_cls = dims[1];
    int labels, w, g = dy[0], t;
    TRY(nll_weights(c, node, dt, &labels, &w, err));
    if (!strcmp(reduction, "mean")) {
        int denom;
        if (w >= 0) {
            int64_t all[VP_MAX_RANK];
            int lr = vp_gr_val(c, w)->rank;
            for (int d = 0; d < lr; d++) all[d] = d;
            TRY(vp_gr_reduce_sum(c, node, w, lr, all, 0, &denom, err));
        } else {
            TRY(vp_gr_scalar(c, node, dt, (double)(vp_value_numel(vp_gr_val(c, IN(1)))), &denom, err));
        }
        TRY(vp_grad_op2(c, node, "Div", g, denom, &g, err));
    } else if (strcmp(reduction, "sum") && strcmp(reduction, "none")) {
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "reduction '%s' has no gradient rule", reduction);
    }
    if (w >= 0) TRY(vp_grad_op2(c, node, "Mul", g, w, &g, err));
    /* labels and g at x's rank with a 1 for the class axis, against classes [1, C, 1..] */
    int64_t ldims[VP_MAX_RANK];
    for (int d = 0; d < rank; d++) {
        ldims[d] = d == 1 ? 1 : dims[d];
        ones[d] = d == 1 ? n_cls : 1;
    }
    int classes = -1;
    TRY(class_ids(c, DT(labels), rank, ones, &classes, err));
    int lab, hot;
    TRY(vp_gr_reshape(c, node, labels, rank, ldims, &lab, err));
    TRY(vp_grad_op2(c, node, "Equal", lab, classes, &hot, err));
    TRY(vp_gr_cast(c, node, hot, dt, &hot, err));
    if (vp_gr_val(c, g)->rank) TRY(vp_gr_reshape(c, node, g, rank, ldims, &g, err));
    TRY(vp_grad_op2(c, node, "Mul", hot, g, &t, err));
    TRY(vp_grad_op1(c, node, "Neg", t, &t, err));
    return vp_gr_expand(c, node, t, rank, dims, &dx[0], err);
}

/* ---- CumSum, TopK ---- */

/* CumSum: each input element feeds the sums after it (before it when reversed), so
 * dX is dY's cumulative sum the other way, exclusive as the forward. */
VP_GRAD_RULE(vp_grad_cumsum) {
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    const vp_node *n = vp_gr_node(c, node);
    int64_t exclusive = vp_attr_int(n, "exclusive", 0), reverse = vp_attr_int(n, "reverse", 0);
    int in[2] = {dy[0], IN(1)};
    int b = vp_grad_begin(c, node, "CumSum", "", 2, in, 1);
    if (b < 0) return vp_gr_nomem(err);
    TRY(vp_gr_attr_int(c, b, "exclusive", exclusive, err));
    TRY(vp_gr_attr_int(c, b, "reverse", !reverse, err));
    return vp_grad_end(c, b, &dx[0], err);
}

/* TopK: the values' gradient goes back to the positions the Indices output names. */
VP_GRAD_RULE(vp_grad_topk) {
    if (!vp_grad_needs(c, node, 0) || dy[0] < 0) return VP_OK;
    const vp_value *x = vp_gr_val(c, IN(0));
    int64_t dims[VP_MAX_RANK];
    int rank = x->rank, axis, indices;
    memcpy(dims, x->dims, sizeof dims);
    TRY(vp_shape_axis(vp_gr_node(c, node), vp_attr_int(vp_gr_node(c, node), "axis", -1), rank, &axis, err));
    TRY(vp_gr_forward_output(c, node, 1, "indices", &indices, err));
    return vp_gr_scatter_add(c, node, dy[0], indices, axis, rank, dims, &dx[0], err);
}
