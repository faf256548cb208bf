/* Gradient rules of the linalg family's products, convolutions and pooling: MatMul
 * and Gemm with standard ops and ONNX Runtime's FusedMatMul (a product with a
 * transposed operand, for batched MatMul); Conv, ConvTranspose and pooling with ONNX Runtime's
 * gradient ops (ConvGrad, MaxPoolGrad, AveragePoolGrad), whose attributes are the
 * forward node's.  MaxPool's Indices output, which MaxPoolGrad reads, is added to the
 * forward node when the model left it out.  Normalisations are in grad_norm.c. */
#include <string.h>

#include "ops/grad_macros.h"
#include "ops/op_semantics.h"


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
static vp_gr_shape as_matrix(vp_gr_shape s, int left) {
    if (s.rank != 1) return s;
    vp_gr_shape m = {2, {left ? 1 : s.dims[0], left ? s.dims[0] : 1}, s.dtype};
    return m;
}

static vp_status gemm(vp_grad_ctx *c, int node, int a, int b, int ta, int tb, float alpha, int *out, vp_error *err);

/* com.microsoft.FusedMatMul(a, b) with one operand's last two axes swapped, as ONNX
 * Runtime's MatMul gradient has it: no Transpose node, no transposed copy. */
static vp_status fused_matmul(vp_grad_ctx *c, int node, int a, int b, int ta, int tb, int *out, vp_error *err) {
    int in[2] = {a, b};
    int n = vp_grad_begin(c, node, "FusedMatMul", "com.microsoft", 2, in, 1);
    if (n < 0) return vp_gr_nomem(err);
    if (ta) TRY(vp_gr_attr_int(c, n, "transA", 1, err));
    if (tb) TRY(vp_gr_attr_int(c, n, "transB", 1, err));
    return vp_grad_end(c, n, out, err);
}

/* MatMul by a matrix B [K, N] (a Linear layer's weight): A's batch axes fold into its
 * rows, so both gradients are one Gemm over [R, K] and [R, N] views, with no batched
 * intermediate and no reduction over the batch.  (FusedMatMul(dY, B^T) would spare
 * dA's Reshape back, but while a Reshape is a copy it keeps dY alive beside its [R, N]
 * copy, which raised gpt_ln_decomposed's peak by 7 KiB.) */
static vp_status matmul_by_matrix(vp_grad_ctx *c, int node, const int *dy, vp_gr_shape a, vp_gr_shape b, vp_gr_shape am, vp_gr_shape bm,
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
    vp_gr_shape a = vp_gr_shape_of(c, IN(0)), b = vp_gr_shape_of(c, IN(1)), y = vp_gr_shape_of(c, OUT(0));
    vp_gr_shape am = as_matrix(a, 1), bm = as_matrix(b, 0), ym = y;
    if (a.rank == 1 || b.rank == 1) { /* dY' restores the axes the vectors dropped */
        int batch = y.rank - (a.rank == 1 ? 0 : 1) - (b.rank == 1 ? 0 : 1);
        ym.rank = 0;
        for (int d = 0; d < batch; d++) ym.dims[ym.rank++] = y.dims[d];
        ym.dims[ym.rank++] = a.rank == 1 ? 1 : y.dims[batch];
        ym.dims[ym.rank++] = b.rank == 1 ? 1 : y.dims[y.rank - 1];
    }
    if (bm.rank == 2) return matmul_by_matrix(c, node, dy, a, b, am, bm, dx, err);
    int g, am_v, bm_v, t, prod;
    if (a.rank >= 2 && b.rank >= 2) { /* batched products: FusedMatMul, summed over broadcast batch axes */
        if (vp_grad_needs(c, node, 0)) {
            TRY(fused_matmul(c, node, dy[0], IN(1), 0, 1, &prod, err));
            TRY(vp_gr_sum_to_dims(c, node, prod, a.rank, a.dims, &dx[0], err));
        }
        if (vp_grad_needs(c, node, 1)) {
            TRY(fused_matmul(c, node, IN(0), dy[0], 1, 0, &prod, err));
            TRY(vp_gr_sum_to_dims(c, node, prod, b.rank, b.dims, &dx[1], err));
        }
        return VP_OK;
    }
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

/* FusedMatMul: Y = alpha op(A) op(B), op a swap of the last two axes where transA or
 * transB says (what the fusion pass makes of MatMul(A, Transpose(W)), so a Linear
 * layer's weight is read in place, never copied transposed).  By a matrix B both
 * gradients are one Gemm over A's rows folded together; otherwise batched FusedMatMuls
 * summed over the batch axes each operand was broadcast along:
 *   dA = alpha dY op(B)^T  (transA: alpha op(B) dY^T)
 *   dB = alpha op(A)^T dY  (transB: alpha dY^T op(A)) */
VP_GRAD_RULE(vp_grad_fused_matmul) {
    const vp_node *n = vp_gr_node(c, node);
    int ta = vp_attr_int(n, "transA", 0) != 0, tb = vp_attr_int(n, "transB", 0) != 0;
    float alpha = vp_attr_float(n, "alpha", 1.0f);
    vp_gr_shape a = vp_gr_shape_of(c, IN(0)), b = vp_gr_shape_of(c, IN(1)), y = vp_gr_shape_of(c, OUT(0));
    if (a.rank < 2 || b.rank < 2 || vp_attr_int(n, "transBatchA", 0) || vp_attr_int(n, "transBatchB", 0))
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "FusedMatMul's gradient needs operands of rank 2 or more and no transBatch");
    int t, prod;
    if (b.rank == 2 && !ta) { /* a Linear layer: A's batch axes fold into its rows */
        int64_t rows = 1, gdims[2] = {0, y.dims[y.rank - 1]}, adims[2] = {0, a.dims[a.rank - 1]};
        for (int d = 0; d + 1 < a.rank; d++) rows *= a.dims[d];
        gdims[0] = adims[0] = rows;
        int g, av;
        TRY(vp_gr_reshape(c, node, dy[0], 2, gdims, &g, err));
        if (vp_grad_needs(c, node, 0)) {
            TRY(gemm(c, node, g, IN(1), 0, !tb, alpha, &t, err));
            TRY(vp_gr_reshape(c, node, t, a.rank, a.dims, &dx[0], err));
        }
        if (vp_grad_needs(c, node, 1)) {
            TRY(vp_gr_reshape(c, node, IN(0), 2, adims, &av, err));
            if (tb) TRY(gemm(c, node, g, av, 1, 0, alpha, &dx[1], err));
            else TRY(gemm(c, node, av, g, 1, 0, alpha, &dx[1], err));
        }
        return VP_OK;
    }
    if (vp_grad_needs(c, node, 0)) {
        if (!ta) TRY(fused_matmul(c, node, dy[0], IN(1), 0, !tb, &prod, err));
        else TRY(fused_matmul(c, node, IN(1), dy[0], tb, 1, &prod, err));
        if (alpha != 1.0f) TRY(vp_gr_scale(c, node, prod, alpha, &prod, err));
        TRY(vp_gr_sum_to_dims(c, node, prod, a.rank, a.dims, &dx[0], err));
    }
    if (vp_grad_needs(c, node, 1)) {
        if (!tb) TRY(fused_matmul(c, node, IN(0), dy[0], !ta, 0, &prod, err));
        else TRY(fused_matmul(c, node, dy[0], IN(0), 1, ta, &prod, err));
        if (alpha != 1.0f) TRY(vp_gr_scale(c, node, prod, alpha, &prod, err));
        TRY(vp_gr_sum_to_dims(c, node, prod, b.rank, b.dims, &dx[1], err));
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
 * declared with input k's vp_gr_shape beforehand: a strided pooling or convolution window
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
    vp_gr_shape x = vp_gr_shape_of(c, IN(0)), wt = vp_gr_shape_of(c, IN(1));
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

/* Whether X is kept for the backward whatever MaxPool's rule reads: the output of an
 * activation whose gradient reads its output (ReLU before the pooling, as in ResNet,
 * VGG and SqueezeNet).  Then re-finding each window's maximum in X costs no bytes,
 * where Indices costs 8 bytes per pooled element. */
static int kept_anyway(vp_grad_ctx *c, int x) {
    const vp_graph *g = vp_grad_graph(c);
    int p = g->values[x].producer;
    if (p < 0) return 1; /* an input or initializer lives through the step */
    const vp_node *n = &g->nodes[p];
    const char *op = n->op_type;
    int reads_output = !n->domain[0] && (!strcmp(op, "Relu") || !strcmp(op, "Clip") ||
                                         (!strcmp(op, "LeakyRelu") && vp_attr_float(n, "alpha", 0.01f) >= 0));
    /* and only where that gradient is built: before a frozen prefix nothing keeps it */
    return reads_output && vp_grad_needs(c, p, 0);
}

/* MaxPool: MaxPoolGrad(dY, Indices) scatters dY to the positions the forward chose, or,
 * where X is kept anyway, vplan.MaxPoolInputGrad(dY, X) finds them again (the same
 * first-largest rule as the forward's Indices, so the two agree bit for bit). */
VP_GRAD_RULE(vp_grad_max_pool) {
    const vp_node *n = vp_gr_node(c, node);
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    int want = 1;
    if (kept_anyway(c, IN(0)) && (n->n_outputs < 2 || n->outputs[1] < 0)) {
        int in[2] = {dy[0], IN(0)};
        /* ort_op declares output k with input k's shape: here dX is X's, input 1 */
        int b = vp_grad_begin(c, node, "MaxPoolInputGrad", "vplan", 2, in, 1);
        if (b < 0) return vp_gr_nomem(err);
        TRY(vp_gr_copy_attrs(c, node, b, err));
        return vp_grad_end(c, b, &dx[0], err);
    }
    if (n->opset < 8)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "MaxPool before opset 8 has no Indices output for a gradient");
    if (vp_attr_int(n, "storage_order", 0))
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "storage_order=1 has no gradient rule");
    int indices;
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
    vp_gr_shape x = vp_gr_shape_of(c, IN(0));
    int64_t area = 1;
    for (int d = 2; d < x.rank; d++) area *= x.dims[d];
    int t;
    TRY(vp_gr_scale(c, node, dy[0], area ? 1.0 / (double)area : 0.0, &t, err));
    return vp_gr_expand(c, node, t, x.rank, x.dims, &dx[0], err);
}

/* GlobalMaxPool: dY to the elements equal to the maximum, split evenly among ties (as
 * ReduceMax). */
VP_GRAD_RULE(vp_grad_global_max_pool) {
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    vp_gr_shape x = vp_gr_shape_of(c, IN(0));
    int64_t axes[VP_MAX_RANK];
    int n_axes = 0, eq, mask, count, share;
    for (int d = 2; d < x.rank; d++) axes[n_axes++] = d;
    TRY(vp_grad_op2(c, node, "Equal", IN(0), OUT(0), &eq, err));
    TRY(vp_gr_cast(c, node, eq, vp_gr_val(c, IN(0))->dtype, &mask, err));
    TRY(vp_gr_reduce_sum(c, node, mask, n_axes, axes, 1, &count, err));
    TRY(vp_grad_op2(c, node, "Div", dy[0], count, &share, err));
    return vp_grad_op2(c, node, "Mul", share, mask, &dx[0], err);
}
