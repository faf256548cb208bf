/* The GeluMatMul family: a GELU and the product that reads it, as one op (domain
 * "vplan"), and its gradient.
 *
 *   GeluMatMul(H [..., K], W) -> Y [..., N], A [..., K]
 *       attrs transB (int, default 0: W is [K, N]; 1: W is [N, K]),
 *             approximate ("none": erf form, default; "tanh")
 *       A = gelu(H)             (bit for bit the Gelu / FastGelu kernels' result)
 *       Y = A op(W)             (the FusedMatMul kernel's product)
 *
 *   GeluMatMulGrad(dY, H, W) -> dH, dW (each optional), the forward's attributes
 *       dW = A^T dY, or dY^T A under transB, with A = gelu(H) written first into dH's
 *            buffer (H's shape, free until dH is computed)
 *       dH = gelu'(H) * (dY op(W)^T)
 *
 * Why: a Transformer MLP keeps both H (for GELU's gradient) and gelu(H) (for the
 * projection's weight gradient) from the forward to the backward, two tensors of the
 * hidden width 4h per layer, the largest items of its saved set.  Fused, only H is
 * kept: the backward recomputes gelu(H) inside the op, as the fused attention
 * recomputes its probabilities from the row log-sum-exp, at the cost of one more GELU
 * pass per layer.  A is an output only so that the forward's product operand is a
 * planned buffer (it lives for this step alone), not memory the kernel hides.
 *
 * The gradient's products are the Gemms the FusedMatMul rule builds (one Gemm over the
 * rows folded together) and dH's activation factor is the GeluGrad / FastGeluGrad
 * kernel's, so a fused float32 step equals the unfused one bit for bit
 * (tests/test_fusion.c).  planner/train/fuse_gelu_matmul.c puts the op in place. */
#include <string.h>

#include "ir/op_registry.h"
#include "ops/grad_macros.h"

static vp_status check_gelu_matmul(vp_graph *g, const vp_node *n, int h_in, int64_t *k_out, int64_t *n_out,
                                   vp_error *err) {
    const vp_value *h = vp_shape_in(g, n, h_in), *w = vp_shape_in(g, n, h_in + 1);
    vp_status s = vp_shape_check_dtype(n, h_in, h->dtype, vp_float_types, 4, err);
    if (s) return s;
    const char *approx = vp_attr_string(n, "approximate", "none");
    if (strcmp(approx, "none") && strcmp(approx, "tanh"))
        return vp_node_fail(err, VP_ERR_INVALID, n, "attribute approximate must be none or tanh, got '%s'", approx);
    if (h->rank < 2) return vp_node_fail(err, VP_ERR_INVALID, n, "H (input %d) must have rank 2 or more", h_in);
    int tb = vp_attr_int(n, "transB", 0) != 0;
    int64_t k = h->dims[h->rank - 1];
    if (w->dtype != h->dtype || w->rank != 2 || w->dims[tb ? 1 : 0] != k)
        return vp_node_fail(err, VP_ERR_INVALID, n, "W (input %d) must be a %s matrix [%s] with K = %lld", h_in + 1,
                            vp_dtype_name(h->dtype), tb ? "N, K" : "K, N", (long long)k);
    *k_out = k;
    *n_out = w->dims[tb ? 0 : 1];
    return VP_OK;
}

static vp_status shape_gelu_matmul(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 2, 2, 1, 2, err);
    int64_t k, nn;
    if (!s) s = check_gelu_matmul(g, n, 0, &k, &nn, err);
    if (s) return s;
    const vp_value *h = vp_shape_in(g, n, 0);
    int64_t y[VP_MAX_RANK];
    memcpy(y, h->dims, sizeof y);
    y[h->rank - 1] = nn;
    s = vp_shape_set_output(g, n, 0, h->dtype, h->rank, y, err);
    if (!s && n->n_outputs > 1) s = vp_shape_same_as_input(g, n, 1, 0, err);
    return s;
}

static vp_status shape_gelu_matmul_grad(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 3, 3, 1, 2, err);
    int64_t k, nn;
    if (!s) s = check_gelu_matmul(g, n, 1, &k, &nn, err);
    if (s) return s;
    const vp_value *dy = vp_shape_in(g, n, 0), *h = vp_shape_in(g, n, 1);
    int ok = dy->dtype == h->dtype && dy->rank == h->rank && dy->dims[dy->rank - 1] == nn;
    for (int d = 0; ok && d + 1 < h->rank; d++) ok = dy->dims[d] == h->dims[d];
    if (!ok) return vp_node_fail(err, VP_ERR_INVALID, n, "dY must have H's leading dims and N = %lld", (long long)nn);
    s = vp_shape_same_as_input(g, n, 0, 1, err);
    if (!s && n->n_outputs > 1) s = vp_shape_same_as_input(g, n, 1, 2, err);
    return s;
}

/* GeluMatMulGrad(dY, H, W) with the forward's attributes; A carries no gradient. */
static VP_GRAD_RULE(grad_gelu_matmul) {
    const vp_node *n = vp_gr_node(c, node);
    if (n->n_outputs > 1 && n->outputs[1] >= 0 && dy[1] >= 0)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "gelu(H) (output 1) reaches the loss; only Y has a gradient rule");
    if (dy[0] < 0) return VP_OK;
    int want[2] = {vp_grad_needs(c, node, 0), vp_grad_needs(c, node, 1)}, outs[2];
    int in[3] = {dy[0], IN(0), IN(1)};
    int b = vp_grad_begin(c, node, "GeluMatMulGrad", "vplan", 3, in, 2);
    if (b < 0) return vp_gr_nomem(err);
    TRY(vp_gr_copy_attrs(c, node, b, err));
    vp_node *bn = &vp_grad_graph(c)->nodes[b];
    for (int k = 0; k < 2; k++)
        if (!want[k]) bn->outputs[k] = -1;
    TRY(vp_grad_end(c, b, outs, err));
    for (int k = 0; k < 2; k++)
        if (want[k]) dx[k] = outs[k];
    return VP_OK;
}

const vp_op_def vp_ops_gelu_matmul[] = {
    {.name = "GeluMatMul", .domain = "vplan", .shape = shape_gelu_matmul, 
     .grad = grad_gelu_matmul},
    {.name = "GeluMatMulGrad", .domain = "vplan", .shape = shape_gelu_matmul_grad},
    {0},
};
