/* Gradient rules of the linalg family's normalisations.
 *
 * BatchNormInternal (the training form vp_training_build makes of BatchNormalization)
 * and LayerNormalization use ONNX Runtime's BatchNormalizationGrad and
 * LayerNormalizationGrad, reading the statistics the forward saved (LayerNormalization's
 * Mean and InvStdDev outputs are added to the forward node when the model left them
 * out); SimplifiedLayerNormalization (RMSNorm) likewise SimplifiedLayerNormalizationGrad.
 * InstanceNormalization, BatchNormalization as exported (training_mode=1, or
 * inference) and LRN, which ONNX Runtime has no gradient op for, are built from
 * standard ops. */
#include <string.h>

#include "ops/grad_macros.h"
#include "ops/op_semantics.h"


/* Fails when a gradient reaches one of outputs [from, n_outputs): statistics the
 * forward saves for the backward pass, which the rules do not differentiate. */
static vp_status refuse_stat_grads(vp_grad_ctx *c, int node, const int *dy, int from, vp_error *err) {
    const vp_node *n = vp_gr_node(c, node);
    for (int k = from; k < n->n_outputs; k++)
        if (n->outputs[k] >= 0 && dy[k] >= 0)
            return vp_node_fail(err, VP_ERR_UNSUPPORTED, n,
                                "output %d ('%s') reaches the loss; only Y has a gradient rule", k,
                                vp_gr_val(c, n->outputs[k])->name);
    return VP_OK;
}

/* BatchNormInternal (training mode): BatchNormalizationGrad(dY, X, scale, saved_mean,
 * saved_inv_std) -> dX, dscale, dbias.  The running statistics get none. */
VP_GRAD_RULE(vp_grad_batch_norm_internal) {
    int mean, inv_std, outs[3];
    TRY(refuse_stat_grads(c, node, dy, 1, err));
    TRY(vp_gr_forward_output(c, node, 3, "saved_mean", &mean, err));
    TRY(vp_gr_forward_output(c, node, 4, "saved_inv_std", &inv_std, err));
    int want[3] = {vp_grad_needs(c, node, 0), vp_grad_needs(c, node, 1), vp_grad_needs(c, node, 2)};
    int in[5] = {dy[0], IN(0), IN(1), mean, inv_std};
    int b = vp_grad_begin(c, node, "BatchNormalizationGrad", "com.microsoft", 5, in, 3);
    if (b < 0) return vp_gr_nomem(err);
    TRY(vp_gr_attr_float(c, b, "epsilon", vp_attr_float(vp_gr_node(c, node), "epsilon", 1e-5f), err));
    vp_node *n = &vp_grad_graph(c)->nodes[b];
    for (int k = 0; k < 3; k++)
        if (!want[k]) n->outputs[k] = -1;
    TRY(vp_grad_end(c, b, outs, err));
    for (int k = 0; k < 3; k++)
        if (want[k]) dx[k] = outs[k];
    return VP_OK;
}

/* LayerNormalization: LayerNormalizationGrad(dY, X, scale, mean, inv_std_dev) -> dX,
 * dscale, dbias, reading the statistics the forward saved. */
VP_GRAD_RULE(vp_grad_layer_norm) {
    const vp_node *n = vp_gr_node(c, node);
    int64_t axis = vp_attr_int(n, "axis", -1);
    float eps = vp_attr_float(n, "epsilon", 1e-5f);
    int mean, inv_std, outs[3];
    TRY(refuse_stat_grads(c, node, dy, 1, err));
    TRY(vp_gr_forward_output(c, node, 1, "mean", &mean, err));
    TRY(vp_gr_forward_output(c, node, 2, "inv_std_dev", &inv_std, err));
    int want[3] = {vp_grad_needs(c, node, 0), vp_grad_needs(c, node, 1), IN(2) >= 0 && vp_grad_needs(c, node, 2)};
    int in[5] = {dy[0], IN(0), IN(1), mean, inv_std};
    int b = vp_grad_begin(c, node, "LayerNormalizationGrad", "com.microsoft", 5, in, 3);
    if (b < 0) return vp_gr_nomem(err);
    TRY(vp_gr_attr_int(c, b, "axis", axis, err));
    TRY(vp_gr_attr_float(c, b, "epsilon", eps, err));
    vp_node *bn = &vp_grad_graph(c)->nodes[b];
    for (int k = 0; k < 3; k++)
        if (!want[k]) bn->outputs[k] = -1;
    TRY(vp_grad_end(c, b, outs, err));
    for (int k = 0; k < 3; k++)
        if (want[k]) dx[k] = outs[k];
    return VP_OK;
}

/* SimplifiedLayerNormalization (RMSNorm): SimplifiedLayerNormalizationGrad(dY, X, scale,
 * inv_std_var) -> dX, dscale, reading the statistic the forward saved; Y itself is not
 * read, so the normalised X is never kept beside X and Y. */
VP_GRAD_RULE(vp_grad_simplified_layer_norm) {
    const vp_node *n = vp_gr_node(c, node);
    int inv_std, outs[2];
    TRY(refuse_stat_grads(c, node, dy, 1, err));
    TRY(vp_gr_forward_output(c, node, 1, "inv_std_var", &inv_std, err));
    int want[2] = {vp_grad_needs(c, node, 0), vp_grad_needs(c, node, 1)};
    int in[4] = {dy[0], IN(0), IN(1), inv_std};
    int b = vp_grad_begin(c, node, "SimplifiedLayerNormalizationGrad", "com.microsoft", 4, in, 2);
    if (b < 0) return vp_gr_nomem(err);
    TRY(vp_gr_attr_int(c, b, "axis", vp_attr_int(n, "axis", -1), err));
    TRY(vp_gr_attr_float(c, b, "epsilon", vp_attr_float(n, "epsilon", 1e-5f), err));
    vp_node *bn = &vp_grad_graph(c)->nodes[b];
    for (int k = 0; k < 2; k++)
        if (!want[k]) bn->outputs[k] = -1;
    TRY(vp_grad_end(c, b, outs, err));
    for (int k = 0; k < 2; k++)
        if (want[k]) dx[k] = outs[k];
    return VP_OK;
}

/* ---- LRN ---- */

/* Sums of v over windows of channels [c - lo, c + hi] (zeros past the ends): a Conv of
 * v seen as [N, 1, C, rest] with a ones kernel of height lo + hi + 1. */
static vp_status channel_window_sum(vp_grad_ctx *c, int node, int v, int64_t lo, int64_t hi, int *out, vp_error *err) {
    const vp_value *x = vp_gr_val(c, v);
    vp_dtype dt = x->dtype;
    int64_t back[VP_MAX_RANK], view[4] = {x->dims[0], 1, x->dims[1], 1}, kdims[4] = {1, 1, lo + hi + 1, 1};
    int rank = x->rank;
    memcpy(back, x->dims, sizeof back);
    for (int d = 2; d < rank; d++) view[3] *= back[d];
    int64_t pads[4] = {lo, 0, hi, 0};
    int t, one, ones, b;
    TRY(vp_gr_reshape(c, node, v, 4, view, &t, err));
    TRY(vp_gr_scalar(c, node, dt, 1.0, &one, err));
    TRY(vp_gr_expand(c, node, one, 4, kdims, &ones, err));
    int in[2] = {t, ones};
    if ((b = vp_grad_begin(c, node, "Conv", "", 2, in, 1)) < 0) return vp_gr_nomem(err);
    TRY(vp_gr_attr_ints(c, b, "pads", pads, 4, err));
    TRY(vp_grad_end(c, b, &t, err));
    return vp_gr_reshape(c, node, t, rank, back, out, err);
}

/* y = x d^-beta, d = bias + alpha/size * (sum of x^2 over the channel window
 * [c - lo, c + hi], lo = (size-1)/2 rounded down, hi rounded up):
 * dx_j = dy_j d_j^-beta - (2 alpha beta / size) x_j * sum over the windows holding j of
 * dy_c y_c / d_c, those windows being [j - hi, j + lo]. */
VP_GRAD_RULE(vp_grad_lrn) {
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    const vp_node *n = vp_gr_node(c, node);
    int64_t size = vp_attr_int(n, "size", 0), lo = (size - 1) / 2, hi = size - 1 - lo;
    double alpha = vp_attr_float(n, "alpha", 1e-4f), beta = vp_attr_float(n, "beta", 0.75f);
    double bias = vp_attr_float(n, "bias", 1.0f);
    if (size < 1) return vp_node_fail(err, VP_ERR_INVALID, n, "size must be positive");
    int x = IN(0), y = OUT(0), x2, d, dpow, direct, u, w, t;
    TRY(vp_grad_op2(c, node, "Mul", x, x, &x2, err));
    TRY(channel_window_sum(c, node, x2, lo, hi, &d, err));
    TRY(vp_gr_scale(c, node, d, alpha / (double)size, &d, err));
    TRY(vp_gr_op_scalar(c, node, "Add", d, bias, &d, err));
    TRY(vp_gr_op_scalar(c, node, "Pow", d, -beta, &dpow, err));
    TRY(vp_grad_op2(c, node, "Mul", dy[0], dpow, &direct, err));
    TRY(vp_grad_op2(c, node, "Mul", dy[0], y, &u, err));
    TRY(vp_grad_op2(c, node, "Div", u, d, &u, err));
    TRY(channel_window_sum(c, node, u, hi, lo, &w, err));
    TRY(vp_grad_op2(c, node, "Mul", x, w, &t, err));
    TRY(vp_gr_scale(c, node, t, 2.0 * alpha * beta / (double)size, &t, err));
    return vp_grad_op2(c, node, "Sub", direct, t, &dx[0], err);
}

/* ---- InstanceNormalization, BatchNormalization: standard ops ---- */

/* What a normalisation did: y = scale xhat + B with xhat = (x - mean) / sqrt(var + eps). */
typedef struct norm_plan {
    int n_stat, n_param;
    int64_t stat[VP_MAX_RANK];  /* the axes each mean and variance reduce */
    int64_t param[VP_MAX_RANK]; /* the axes scale's and B's gradients sum over */
    vp_gr_shape pshape;               /* scale's vp_gr_shape as it broadcasts against x */
    double inv_count;           /* 1 / elements per statistic */
    int mean, var;              /* given statistics (inference BatchNormalization), -1: the batch's */
    double eps;
} norm_plan;

static vp_status axes_mean(vp_grad_ctx *c, int node, int v, const norm_plan *p, int *out, vp_error *err) {
    TRY(vp_gr_reduce_sum(c, node, v, p->n_stat, p->stat, 1, out, err));
    return vp_gr_scale(c, node, *out, p->inv_count, out, err);
}

/* A given statistic reshaped to broadcast against x, in x's dtype. */
static vp_status given_stat(vp_grad_ctx *c, int node, int v, const norm_plan *p, int *out, vp_error *err) {
    TRY(vp_gr_reshape(c, node, v, p->pshape.rank, p->pshape.dims, out, err));
    return vp_gr_cast(c, node, *out, vp_gr_val(c, IN(0))->dtype, out, err);
}

/* xhat and 1 / sqrt(var + eps), recomputed from x (or the given statistics). */
static vp_status normalized(vp_grad_ctx *c, int node, const norm_plan *p, int *xhat, int *inv, vp_error *err) {
    int mean, xc, var, t;
    if (p->mean >= 0) TRY(given_stat(c, node, p->mean, p, &mean, err));
    else TRY(axes_mean(c, node, IN(0), p, &mean, err));
    TRY(vp_grad_op2(c, node, "Sub", IN(0), mean, &xc, err));
    if (p->var >= 0) {
        TRY(given_stat(c, node, p->var, p, &var, err));
    } else {
        TRY(vp_grad_op2(c, node, "Mul", xc, xc, &t, err));
        TRY(axes_mean(c, node, t, p, &var, err));
    }
    TRY(vp_gr_op_scalar(c, node, "Add", var, p->eps, &var, err));
    TRY(vp_grad_op1(c, node, "Sqrt", var, &t, err));
    TRY(vp_grad_op1(c, node, "Reciprocal", t, inv, err));
    return vp_grad_op2(c, node, "Mul", xc, *inv, xhat, err);
}

/* With g = dY scale: dX = g / sqrt(var + eps) for given statistics, and
 * (g - mean(g) - xhat mean(g xhat)) / sqrt(var + eps) for the batch's, whose mean and
 * variance depend on x too.  dscale = sum(dY xhat), dB = sum(dY). */
static vp_status norm_grads(vp_grad_ctx *c, int node, const int *dy, const norm_plan *p, int *dx, vp_error *err) {
    int xhat, inv, t;
    TRY(normalized(c, node, p, &xhat, &inv, err));
    if (vp_grad_needs(c, node, 0)) {
        int sc, g, mg, mgx;
        TRY(vp_gr_reshape(c, node, IN(1), p->pshape.rank, p->pshape.dims, &sc, err));
        TRY(vp_grad_op2(c, node, "Mul", dy[0], sc, &g, err));
        if (p->mean < 0) {
            TRY(axes_mean(c, node, g, p, &mg, err));
            TRY(vp_grad_op2(c, node, "Mul", g, xhat, &t, err));
            TRY(axes_mean(c, node, t, p, &mgx, err));
            TRY(vp_grad_op2(c, node, "Mul", xhat, mgx, &mgx, err));
            TRY(vp_grad_op2(c, node, "Sub", g, mg, &g, err));
            TRY(vp_grad_op2(c, node, "Sub", g, mgx, &g, err));
        }
        TRY(vp_grad_op2(c, node, "Mul", g, inv, &dx[0], err));
    }
    if (vp_grad_needs(c, node, 1)) {
        TRY(vp_grad_op2(c, node, "Mul", dy[0], xhat, &t, err));
        TRY(vp_gr_reduce_sum(c, node, t, p->n_param, p->param, 0, &dx[1], err));
    }
    if (vp_grad_needs(c, node, 2)) TRY(vp_gr_reduce_sum(c, node, dy[0], p->n_param, p->param, 0, &dx[2], err));
    return VP_OK;
}

/* Statistics over `from`.. and the batch axis too when with_batch; parameters of [C]. */
static norm_plan channel_plan(vp_gr_shape x, int with_batch, double eps) {
    norm_plan p = {0};
    int64_t count = 1;
    p.param[p.n_param++] = 0;
    if (with_batch) {
        p.stat[p.n_stat++] = 0;
        count *= x.dims[0];
    }
    p.pshape.rank = x.rank - 1;
    p.pshape.dims[0] = x.dims[1];
    for (int d = 2; d < x.rank; d++) {
        p.stat[p.n_stat++] = p.param[p.n_param++] = d;
        p.pshape.dims[d - 1] = 1;
        count *= x.dims[d];
    }
    p.inv_count = count ? 1.0 / (double)count : 0.0;
    p.mean = p.var = -1;
    p.eps = eps;
    return p;
}

/* InstanceNormalization: statistics per image and channel. */
VP_GRAD_RULE(vp_grad_instance_norm) {
    const vp_node *n = vp_gr_node(c, node);
    vp_gr_shape x = vp_gr_shape_of(c, IN(0));
    if (x.rank < 3) return vp_node_fail(err, VP_ERR_INVALID, n, "input must have rank 3 or more");
    norm_plan p = channel_plan(x, 0, vp_attr_float(n, "epsilon", 1e-5f));
    return norm_grads(c, node, dy, &p, dx, err);
}

/* BatchNormalization as the model has it (training_mode=1 from opset 14, or inference):
 * statistics per channel over the batch, or the running ones given as inputs.  (In a
 * training step made by vp_training_build the inference form has become
 * BatchNormInternal, whose rule is above.)  Per-activation statistics (spatial=0 before
 * opset 9) reduce the batch axis alone. */
VP_GRAD_RULE(vp_grad_batch_norm) {
    const vp_node *n = vp_gr_node(c, node);
    TRY(refuse_stat_grads(c, node, dy, 1, err));
    vp_gr_shape x = vp_gr_shape_of(c, IN(0));
    if (x.rank < 2) return vp_node_fail(err, VP_ERR_INVALID, n, "input must have rank 2 or more");
    norm_plan p = channel_plan(x, 1, vp_attr_float(n, "epsilon", 1e-5f));
    if (vp_batchnorm_is_per_activation(n)) {
        p.n_stat = p.n_param = 1;
        p.inv_count = x.dims[0] ? 1.0 / (double)x.dims[0] : 0.0;
        memcpy(p.pshape.dims, x.dims + 1, (size_t)(x.rank - 1) * sizeof *x.dims);
    }
    if (!vp_batchnorm_is_training(n)) {
        for (int k = 3; k < 5; k++)
            if (vp_grad_needs(c, node, k))
                return vp_node_fail(
                    err, VP_ERR_UNSUPPORTED, n,
                    "the running statistics ('%s') have no gradient rule; mark them state or freeze them",
                    vp_gr_val(c, IN(k))->name);
        p.mean = IN(3);
        p.var = IN(4);
    }
    return norm_grads(c, node, dy, &p, dx, err);
}
