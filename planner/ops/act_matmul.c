/* The activation-into-product family (domain "vplan"): an activation and the product
 * that reads it as one op, and its gradient.
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
 *   SwiGluMatMul(G [..., K], U [..., K], W) -> Y [..., N], A [..., K]
 *       attrs transB, gate ("swish", default, or "gelu"), approximate (gelu's form)
 *       A = act(G) * U          (SiLU, Swish at alpha 1: the gated MLP of Llama, Qwen2,
 *                                Mistral; GELU: Gemma's GeGLU; act(G) rounded to G's
 *                                dtype, then the product)
 *       Y = A op(W)
 *
 *   SwiGluMatMulGrad(dY, G, U, W) -> dG, dU, dW (each optional), the forward's attributes
 *       A recomputed into dG's buffer; dW = A^T dY, or dY^T A
 *       dA = dY op(W)^T into dG's buffer, then elementwise
 *       dU = dA act(G),  dG = dA U act'(G),  swish'(g) = s + g s (1 - s), s = sigmoid(g);
 *       gelu'(g) = Phi(g) + g phi(g) (erf form), or tanh form's derivative
 *
 * Why: a Transformer MLP keeps both H (for GELU's gradient) and gelu(H) (for the
 * projection's weight gradient) from the forward to the backward, two tensors of the
 * hidden width 4h per layer, the largest items of its saved set.  Fused, only H is
 * kept: the backward recomputes gelu(H) inside the op, as the fused attention
 * recomputes its probabilities from the row log-sum-exp, at the cost of one more GELU
 * pass per layer.  The gated MLP keeps four tensors of its width unfused (G for Swish's
 * gradient, swish(G) and U for the gate product's, A for the down projection's weight
 * gradient); fused it keeps G and U, which its gradient needs in any form.  A is an
 * output only so that the forward's product operand is a planned buffer (it lives for
 * this step alone), not memory the kernel hides.
 *
 * GeluMatMulGrad's products are the Gemms the FusedMatMul rule builds (one Gemm over the
 * rows folded together) and dH's activation factor is the GeluGrad / FastGeluGrad
 * kernel's, so a fused float32 step equals the unfused one bit for bit
 * (tests/test_fusion.c); SwiGluMatMulGrad's activation factors are computed in one pass
 * in float32 (their order of operations differs from the unfused Sigmoid/Mul/Sub chain),
 * so its fused step agrees with the unfused one to rounding.
 * planner/train/fuse_act_matmul.c puts the ops in place. */
#include <string.h>

#include "ir/op_registry.h"
#include "ops/grad_macros.h"

/* H (input h_in) a float tensor of rank 2 or more and W (input w_in) the matrix its
 * last axis K multiplies; the product's K and N.  GeluMatMul's approximate checked too. */
static vp_status check_act_matmul(vp_graph *g, const vp_node *n, int h_in, int w_in, int64_t *k_out, int64_t *n_out,
                                  vp_error *err) {
    const vp_value *h = vp_shape_in(g, n, h_in), *w = vp_shape_in(g, n, w_in);
    vp_status s = vp_shape_check_dtype(n, h_in, h->dtype, vp_float_types, 4, err);
    if (s) return s;
    const char *approx = vp_attr_string(n, "approximate", "none");
    if (strcmp(approx, "none") && strcmp(approx, "tanh"))
        return vp_node_fail(err, VP_ERR_INVALID, n, "attribute approximate must be none or tanh, got '%s'", approx);
    if (h->rank < 2) return vp_node_fail(err, VP_ERR_INVALID, n, "H (input %d) must have rank 2 or more", h_in);
    int tb = vp_attr_int(n, "transB", 0) != 0;
    int64_t k = h->dims[h->rank - 1];
    if (w->dtype != h->dtype || w->rank != 2 || w->dims[tb ? 1 : 0] != k)
        return vp_node_fail(err, VP_ERR_INVALID, n, "W (input %d) must be a %s matrix [%s] with K = %lld", w_in,
                            vp_dtype_name(h->dtype), tb ? "N, K" : "K, N", (long long)k);
    *k_out = k;
    *n_out = w->dims[tb ? 0 : 1];
    return VP_OK;
}

/* U (input u_in) has G's (input g_in) dtype and shape: SwiGLU's two halves; the gate a
 * known activation. */
static vp_status check_gate_pair(vp_graph *g, const vp_node *n, int g_in, int u_in, vp_error *err) {
    const char *gate = vp_attr_string(n, "gate", "swish");
    if (strcmp(gate, "swish") && strcmp(gate, "gelu"))
        return vp_node_fail(err, VP_ERR_INVALID, n, "attribute gate must be swish or gelu, got '%s'", gate);
    const vp_value *gv = vp_shape_in(g, n, g_in), *u = vp_shape_in(g, n, u_in);
    if (u->dtype != gv->dtype || u->rank != gv->rank || memcmp(u->dims, gv->dims, (size_t)gv->rank * sizeof *gv->dims))
        return vp_node_fail(err, VP_ERR_INVALID, n, "U (input %d) must have G's (input %d) dtype and shape", u_in, g_in);
    return VP_OK;
}

/* The forward of either op: n_act activation inputs (1: H; 2: G, U), then W. */
static vp_status shape_forward(vp_graph *g, vp_node *n, int n_act, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, n_act + 1, n_act + 1, 1, 2, err);
    int64_t k, nn;
    if (!s) s = check_act_matmul(g, n, 0, n_act, &k, &nn, err);
    if (!s && n_act == 2) s = check_gate_pair(g, n, 0, 1, err);
    if (s) return s;
    const vp_value *h = vp_shape_in(g, n, 0);
    int64_t y[VP_MAX_RANK];
    memcpy(y, h->dims, sizeof y);
    y[h->rank - 1] = nn;
    s = vp_shape_set_output(g, n, 0, h->dtype, h->rank, y, err);
    if (!s && n->n_outputs > 1) s = vp_shape_same_as_input(g, n, 1, 0, err);
    return s;
}

/* The gradient of either op: dY, the n_act activation inputs, W -> one gradient each. */
static vp_status shape_backward(vp_graph *g, vp_node *n, int n_act, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, n_act + 2, n_act + 2, 1, n_act + 1, err);
    int64_t k, nn;
    if (!s) s = check_act_matmul(g, n, 1, n_act + 1, &k, &nn, err);
    if (!s && n_act == 2) s = check_gate_pair(g, n, 1, 2, err);
    if (s) return s;
    const vp_value *dy = vp_shape_in(g, n, 0), *h = vp_shape_in(g, n, 1);
    int ok = dy->dtype == h->dtype && dy->rank == h->rank && dy->dims[dy->rank - 1] == nn;
    for (int d = 0; ok && d + 1 < h->rank; d++) ok = dy->dims[d] == h->dims[d];
    if (!ok) return vp_node_fail(err, VP_ERR_INVALID, n, "dY must have input 1's leading dims and N = %lld", (long long)nn);
    for (int o = 0; !s && o < n->n_outputs; o++) s = vp_shape_same_as_input(g, n, o, o + 1, err);
    return s;
}

static vp_status shape_gelu_matmul(vp_graph *g, vp_node *n, vp_error *err) { return shape_forward(g, n, 1, err); }
static vp_status shape_gelu_matmul_grad(vp_graph *g, vp_node *n, vp_error *err) { return shape_backward(g, n, 1, err); }
static vp_status shape_swiglu_matmul(vp_graph *g, vp_node *n, vp_error *err) { return shape_forward(g, n, 2, err); }
static vp_status shape_swiglu_matmul_grad(vp_graph *g, vp_node *n, vp_error *err) {
    return shape_backward(g, n, 2, err);
}

/* The gradient op of either family member: grad_op(dY, the forward's inputs) with the
 * forward's attributes, one output per input; output 1, the activation A, carries no
 * gradient. */
static vp_status grad_act_matmul(vp_grad_ctx *c, int node, const int *dy, int *dx, const char *grad_op,
                                 const char *what, vp_error *err) {
    const vp_node *n = vp_gr_node(c, node);
    if (n->n_outputs > 1 && n->outputs[1] >= 0 && dy[1] >= 0)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "%s (output 1) reaches the loss; only Y has a gradient rule", what);
    if (dy[0] < 0) return VP_OK;
    int n_in = n->n_inputs, want[3], outs[3], in[4] = {dy[0]};
    for (int k = 0; k < n_in; k++) {
        want[k] = vp_grad_needs(c, node, k);
        in[k + 1] = IN(k);
    }
    int b = vp_grad_begin(c, node, grad_op, "vplan", n_in + 1, in, n_in);
    if (b < 0) return vp_gr_nomem(err);
    TRY(vp_gr_copy_attrs(c, node, b, err));
    vp_node *bn = &vp_grad_graph(c)->nodes[b];
    for (int k = 0; k < n_in; k++)
        if (!want[k]) bn->outputs[k] = -1;
    TRY(vp_grad_end(c, b, outs, err));
    for (int k = 0; k < n_in; k++)
        if (want[k]) dx[k] = outs[k];
    return VP_OK;
}

static VP_GRAD_RULE(grad_gelu_matmul) { return grad_act_matmul(c, node, dy, dx, "GeluMatMulGrad", "gelu(H)", err); }
static VP_GRAD_RULE(grad_swiglu_matmul) {
    return grad_act_matmul(c, node, dy, dx, "SwiGluMatMulGrad", "swish(G) U", err);
}

const vp_op_def vp_ops_act_matmul[] = {
    {.name = "GeluMatMul", .domain = "vplan", .shape = shape_gelu_matmul, .grad = grad_gelu_matmul},
    {.name = "GeluMatMulGrad", .domain = "vplan", .shape = shape_gelu_matmul_grad},
    {.name = "SwiGluMatMul", .domain = "vplan", .shape = shape_swiglu_matmul, .grad = grad_swiglu_matmul},
    {.name = "SwiGluMatMulGrad", .domain = "vplan", .shape = shape_swiglu_matmul_grad},
    {0},
};
