/* Gradient rules of the linalg family: MatMul and Gemm with standard ops; Conv,
 * ConvTranspose, pooling and normalisation with ONNX Runtime's gradient ops (ConvGrad,
 * MaxPoolGrad, AveragePoolGrad, BatchNormalizationGrad, LayerNormalizationGrad), whose
 * attributes are the forward node's; InstanceNormalization and BatchNormalization as
 * exported, which ONNX Runtime has no gradient op for, with standard ops.  Forward
 * outputs those ops read (MaxPool's Indices, LayerNormalization's Mean and InvStdDev)
 * are added to the forward node when the model left them out. */
#include <string.h>

#include "grad_rules.h"
#include "k_linalg.h"

#define IN(k) vp_gr_in(c, node, k)
#define OUT(k) vp_gr_out(c, node, k)
#define TRY(call)              \
    do {                       \
        vp_status s_ = (call); \
        if (s_) return s_;     \
    } while (0)

typedef struct shape {
    int rank;
    int64_t dims[VP_MAX_RANK];
} shape;

static shape shape_of(vp_grad_ctx *c, int v) {
    const vp_value *x = vp_gr_val(c, v);
    shape s = {x->rank, {0}};
    memcpy(s.dims, x->dims, sizeof s.dims);
    return s;
}

/* ---- MatMul ---- */

/* x with its last two axes swapped. */
static vp_status swap_last2(vp_grad_ctx *c, int node, int x, int *out, vp_error *err) {
    int rank = vp_gr_val(c, x)->rank;
    int64_t perm[VP_MAX_RANK];
    for (int a = 0; a < rank; a++) perm[a] = a;
    perm[rank - 2] = rank - 1;
    perm[rank - 1] = rank - 2;
    return vp_gr_transpose(c, node, x, rank, perm, out, err);
}

/* The matrix form of a MatMul operand: a vector becomes [1, k] (left) or [k, 1] (right). */
static shape as_matrix(shape s, int left) {
    if (s.rank != 1) return s;
    shape m = {2, {left ? 1 : s.dims[0], left ? s.dims[0] : 1}};
    return m;
}

static vp_status gemm(vp_grad_ctx *c, int node, int a, int b, int ta, int tb, float alpha, int *out, vp_error *err);

/* MatMul by a matrix B [K, N] (a Linear layer's weight): A's batch axes fold into its
 * rows, so both gradients are one Gemm over [R, K] and [R, N] views, with no batched
 * intermediate and no reduction over the batch. */
static vp_status matmul_by_matrix(vp_grad_ctx *c, int node, const int *dy, shape a, shape b, shape am, shape bm,
                                  int *dx, vp_error *err) {
    int64_t k = bm.dims[0], n = bm.dims[1], rows = 1, gdims[2], adims[2];
    for (int d = 0; d + 1 < am.rank; d++) rows *= am.dims[d];
    gdims[0] = adims[0] = rows;
    gdims[1] = n;
    adims[1] = k;
    int g, bv, av, t;
    TRY(vp_gr_reshape(c, node, dy[0], 2, gdims, &g, err));
    TRY(vp_gr_reshape(c, node, IN(1), 2, bm.dims, &bv, err));
    if (vp_grad_needs(c, node, 0)) {
        TRY(gemm(c, node, g, bv, 0, 1, 1.0f, &t, err));
        TRY(vp_gr_reshape(c, node, t, a.rank, a.dims, &dx[0], err));
    }
    if (vp_grad_needs(c, node, 1)) {
        TRY(vp_gr_reshape(c, node, IN(0), 2, adims, &av, err));
        TRY(gemm(c, node, av, g, 1, 0, 1.0f, &t, err));
        TRY(vp_gr_reshape(c, node, t, b.rank, b.dims, &dx[1], err));
    }
    return VP_OK;
}

/* dA = dY' B'^T and dB = A'^T dY' on the matrix forms, each summed over the batch axes
 * it was broadcast along, then shaped like its operand. */
VP_GRAD_RULE(vp_grad_matmul) {
    shape a = shape_of(c, IN(0)), b = shape_of(c, IN(1)), y = shape_of(c, OUT(0));
    shape am = as_matrix(a, 1), bm = as_matrix(b, 0), ym = y;
    if (a.rank == 1 || b.rank == 1) { /* dY' restores the axes the vectors dropped */
        int batch = y.rank - (a.rank == 1 ? 0 : 1) - (b.rank == 1 ? 0 : 1);
        ym.rank = 0;
        for (int d = 0; d < batch; d++) ym.dims[ym.rank++] = y.dims[d];
        ym.dims[ym.rank++] = a.rank == 1 ? 1 : y.dims[batch];
        ym.dims[ym.rank++] = b.rank == 1 ? 1 : y.dims[y.rank - 1];
    }
    if (bm.rank == 2) return matmul_by_matrix(c, node, dy, a, b, am, bm, dx, err);
    int g, am_v, bm_v, t, prod;
    TRY(vp_gr_reshape(c, node, dy[0], ym.rank, ym.dims, &g, err));
    if (vp_grad_needs(c, node, 0)) {
        TRY(vp_gr_reshape(c, node, IN(1), bm.rank, bm.dims, &bm_v, err));
        TRY(swap_last2(c, node, bm_v, &t, err));
        TRY(vp_grad_op2(c, node, "MatMul", g, t, &prod, err));
        TRY(vp_gr_sum_to_dims(c, node, prod, am.rank, am.dims, &t, err));
        TRY(vp_gr_reshape(c, node, t, a.rank, a.dims, &dx[0], err));
    }
    if (vp_grad_needs(c, node, 1)) {
        TRY(vp_gr_reshape(c, node, IN(0), am.rank, am.dims, &am_v, err));
        TRY(swap_last2(c, node, am_v, &t, err));
        TRY(vp_grad_op2(c, node, "MatMul", t, g, &prod, err));
        TRY(vp_gr_sum_to_dims(c, node, prod, bm.rank, bm.dims, &t, err));
        TRY(vp_gr_reshape(c, node, t, b.rank, b.dims, &dx[1], err));
    }
    return VP_OK;
}

/* ---- Gemm ---- */

static vp_status gemm(vp_grad_ctx *c, int node, int a, int b, int ta, int tb, float alpha, int *out, vp_error *err) {
    int in[2] = {a, b};
    int n = vp_grad_begin(c, node, "Gemm", "", 2, in, 1);
    if (n < 0) return vp_gr_nomem(err);
    TRY(vp_gr_attr_int(c, n, "transA", ta, err));
    TRY(vp_gr_attr_int(c, n, "transB", tb, err));
    TRY(vp_gr_attr_float(c, n, "alpha", alpha, err));
    return vp_grad_end(c, n, out, err);
}

/* Y = alpha A' B' + beta C with A' = A or A^T, B' = B or B^T:
 * dA' = alpha dY B'^T and dB' = alpha A'^T dY, each written as one Gemm that yields
 * the operand's own layout. */
VP_GRAD_RULE(vp_grad_gemm) {
    const vp_node *n = vp_gr_node(c, node);
    int ta = vp_attr_int(n, "transA", 0) != 0, tb = vp_attr_int(n, "transB", 0) != 0;
    float alpha = vp_attr_float(n, "alpha", 1.0f), beta = vp_attr_float(n, "beta", 1.0f);
    int a = IN(0), b = IN(1), g = dy[0];
    if (vp_grad_needs(c, node, 0)) {
        if (!ta) TRY(gemm(c, node, g, b, 0, !tb, alpha, &dx[0], err));
        else TRY(gemm(c, node, b, g, tb, 1, alpha, &dx[0], err));
    }
    if (vp_grad_needs(c, node, 1)) {
        if (!tb) TRY(gemm(c, node, a, g, !ta, 0, alpha, &dx[1], err));
        else TRY(gemm(c, node, g, a, 1, ta, alpha, &dx[1], err));
    }
    if (vp_grad_needs(c, node, 2)) {
        int t;
        TRY(vp_gr_scale(c, node, g, beta, &t, err));
        TRY(vp_gr_to_input(c, node, t, 2, dx, err));
    }
    return VP_OK;
}

/* ---- ONNX Runtime gradient ops ---- */

/* Emits ONNX Runtime's gradient op `op` of domain `domain` (com.microsoft, or ai.onnx
 * for MaxPoolGrad and AveragePoolGrad, which ONNX Runtime defines there since opset 9)
 * with the forward node's attributes and n_out outputs; outputs whose input needs no
 * gradient (want[k] == 0) are left out, as ONNX Runtime allows.  Each output k kept is
 * declared with input k's shape beforehand: a strided pooling or convolution window
 * cannot recover it from dY alone. */
static vp_status ort_op(vp_grad_ctx *c, int node, const char *op, const char *domain, int n_in, const int *in,
                        int n_out, const int *want, int *outs, vp_error *err) {
    int b = vp_grad_begin(c, node, op, domain, n_in, in, n_out);
    if (b < 0) return vp_gr_nomem(err);
    TRY(vp_gr_copy_attrs(c, node, b, err));
    vp_graph *g = vp_grad_graph(c);
    for (int k = 0; k < n_out; k++) {
        int *o = &g->nodes[b].outputs[k], x = IN(k);
        if (!want[k]) {
            *o = -1;
        } else if (x >= 0) {
            vp_value *v = &g->values[*o];
            const vp_value *xv = &g->values[x];
            v->dtype = xv->dtype;
            v->rank = xv->rank;
            memcpy(v->dims, xv->dims, sizeof v->dims);
        }
    }
    return vp_grad_end(c, b, outs, err);
}

/* ConvGrad(dY, X, W) -> dX, dW, dB. */
VP_GRAD_RULE(vp_grad_conv) {
    int has_bias = IN(2) >= 0, outs[3];
    int want[3] = {vp_grad_needs(c, node, 0), vp_grad_needs(c, node, 1), has_bias && vp_grad_needs(c, node, 2)};
    int in[3] = {dy[0], IN(0), IN(1)};
    TRY(ort_op(c, node, "ConvGrad", "com.microsoft", 3, in, 3, want, outs, err));
    for (int k = 0; k < 3; k++)
        if (want[k]) dx[k] = outs[k];
    return VP_OK;
}

/* ---- ConvTranspose ---- */

/* The window of a ConvTranspose node, with the pads its auto_pad or output_shape
 * derive, checked to be one a Conv over its output can invert: non-negative pads, and
 * a Conv of the output extent giving back the input's. */
static vp_status transpose_window(vp_grad_ctx *c, int node, vp_window *w, vp_error *err) {
    const vp_node *n = vp_gr_node(c, node);
    shape x = shape_of(c, IN(0)), wt = shape_of(c, IN(1));
    TRY(vp_window_resolve(n, VP_WINDOW_CONV_TRANSPOSE, x.rank - 2, x.dims + 2, wt.dims + 2, w, err));
    for (int d = 0; d < w->n_sp; d++) {
        int64_t ext = (w->kernel[d] - 1) * w->dilation[d] + 1;
        int64_t back = (w->out[d] + w->pad_begin[d] + w->pad_end[d] - ext) / w->stride[d] + 1;
        if (w->pad_begin[d] < 0 || w->pad_end[d] < 0 || back != w->in[d])
            return vp_node_fail(err, VP_ERR_UNSUPPORTED, n,
                                "spatial axis %d: its padding (output_shape, output_padding) has no gradient rule", d);
    }
    return VP_OK;
}

/* The forward's window as explicit Conv attributes on node b. */
static vp_status window_attrs(vp_grad_ctx *c, int b, const vp_window *w, int64_t group, vp_error *err) {
    int64_t pads[2 * VP_MAX_SPATIAL];
    for (int d = 0; d < w->n_sp; d++) {
        pads[d] = w->pad_begin[d];
        pads[w->n_sp + d] = w->pad_end[d];
    }
    TRY(vp_gr_attr_ints(c, b, "kernel_shape", w->kernel, w->n_sp, err));
    TRY(vp_gr_attr_ints(c, b, "strides", w->stride, w->n_sp, err));
    TRY(vp_gr_attr_ints(c, b, "dilations", w->dilation, w->n_sp, err));
    TRY(vp_gr_attr_ints(c, b, "pads", pads, 2 * w->n_sp, err));
    return vp_gr_attr_int(c, b, "group", group, err);
}

/* ConvTranspose is the adjoint of Conv with the same weight and window, so
 * dX = Conv(dY, W), and dW is Conv's weight gradient with the roles of input and output
 * swapped: ConvGrad(dY := X, X := dY, W).  dB sums dY over the batch and spatial axes. */
VP_GRAD_RULE(vp_grad_conv_transpose) {
    vp_window w;
    TRY(transpose_window(c, node, &w, err));
    int64_t group = vp_attr_int(vp_gr_node(c, node), "group", 1);
    int b;
    if (vp_grad_needs(c, node, 0)) {
        int in[2] = {dy[0], IN(1)};
        if ((b = vp_grad_begin(c, node, "Conv", "", 2, in, 1)) < 0) return vp_gr_nomem(err);
        TRY(window_attrs(c, b, &w, group, err));
        TRY(vp_grad_end(c, b, &dx[0], err));
    }
    if (vp_grad_needs(c, node, 1)) {
        int in[3] = {IN(0), dy[0], IN(1)}, outs[3];
        if ((b = vp_grad_begin(c, node, "ConvGrad", "com.microsoft", 3, in, 3)) < 0) return vp_gr_nomem(err);
        TRY(window_attrs(c, b, &w, group, err));
        vp_node *gn = &vp_grad_graph(c)->nodes[b];
        gn->outputs[0] = gn->outputs[2] = -1;
        TRY(vp_grad_end(c, b, outs, err));
        dx[1] = outs[1];
    }
    if (vp_grad_needs(c, node, 2)) {
        int64_t axes[VP_MAX_RANK];
        int rank = vp_gr_val(c, dy[0])->rank, n_axes = 0;
        for (int d = 0; d < rank; d++)
            if (d != 1) axes[n_axes++] = d;
        TRY(vp_gr_reduce_sum(c, node, dy[0], n_axes, axes, 0, &dx[2], err));
    }
    return VP_OK;
}

/* MaxPool: MaxPoolGrad(dY, Indices) scatters dY to the positions the forward chose. */
VP_GRAD_RULE(vp_grad_max_pool) {
    const vp_node *n = vp_gr_node(c, node);
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    if (n->opset < 8)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "MaxPool before opset 8 has no Indices output for a gradient");
    if (vp_attr_int(n, "storage_order", 0))
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "storage_order=1 has no gradient rule");
    int indices, want = 1;
    TRY(vp_gr_forward_output(c, node, 1, "indices", &indices, err));
    int in[2] = {dy[0], indices};
    return ort_op(c, node, "MaxPoolGrad", "", 2, in, 1, &want, &dx[0], err);
}

VP_GRAD_RULE(vp_grad_average_pool) {
    int want = 1;
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    return ort_op(c, node, "AveragePoolGrad", "", 1, &dy[0], 1, &want, &dx[0], err);
}

/* GlobalAveragePool: dX = dY / (spatial size), expanded over the spatial axes. */
VP_GRAD_RULE(vp_grad_global_average_pool) {
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    shape x = shape_of(c, IN(0));
    int64_t area = 1;
    for (int d = 2; d < x.rank; d++) area *= x.dims[d];
    int t;
    TRY(vp_gr_scale(c, node, dy[0], area ? 1.0 / (double)area : 0.0, &t, err));
    return vp_gr_expand(c, node, t, x.rank, x.dims, &dx[0], err);
}

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

/* GlobalMaxPool: dY to the elements equal to the maximum, split evenly among ties (as
 * ReduceMax). */
VP_GRAD_RULE(vp_grad_global_max_pool) {
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    shape x = shape_of(c, IN(0));
    int64_t axes[VP_MAX_RANK];
    int n_axes = 0, eq, mask, count, share;
    for (int d = 2; d < x.rank; d++) axes[n_axes++] = d;
    TRY(vp_grad_op2(c, node, "Equal", IN(0), OUT(0), &eq, err));
    TRY(vp_gr_cast(c, node, eq, vp_gr_val(c, IN(0))->dtype, &mask, err));
    TRY(vp_gr_reduce_sum(c, node, mask, n_axes, axes, 1, &count, err));
    TRY(vp_grad_op2(c, node, "Div", dy[0], count, &share, err));
    return vp_grad_op2(c, node, "Mul", share, mask, &dx[0], err);
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
    shape pshape;               /* scale's shape as it broadcasts against x */
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
static norm_plan channel_plan(shape x, int with_batch, double eps) {
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
    shape x = shape_of(c, IN(0));
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
    shape x = shape_of(c, IN(0));
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
