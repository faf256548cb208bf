/* vplan.GeluMatMul, SwiGluMatMul and their gradients on the GPU, float32, float16 and
 * bfloat16 (the 16-bit kernels compute in float32 and round on store;
 * planner/ops/act_matmul.c says what they compute): the same steps as the CPU kernels,
 * the elementwise family's GELU kernels or cu_swiglu and cuBLAS products, with the
 * activation in the op's planned output A (forward) or in the first gradient's buffer
 * before that gradient is computed (backward); no other memory. */
#include <string.h>

#include "cu_kernels.h"
#include "cuda_internal.h"

static int tanh_form(const vp_node *n) { return !strcmp(vp_attr_string(n, "approximate", "none"), "tanh"); }

static void gm_dims(const vp_node *n, const vp_tensor *h, const vp_tensor *w, int64_t *m, int64_t *k, int64_t *nn) {
    int tb = vp_attr_int(n, "transB", 0) != 0;
    *k = h->dims[h->rank - 1];
    *nn = tb ? w->dims[0] : w->dims[1];
    *m = *k ? vp_tensor_numel(h) / *k : 0;
}

static vp_status need_float(const vp_node *n, const vp_tensor *t, int k, vp_error *err) {
    if (t->dtype == VP_F32 || t->dtype == VP_F16 || t->dtype == VP_BF16) return VP_OK;
    return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "input %d is %s: the CUDA kernel takes float32, float16 or bfloat16", k,
                        vp_dtype_name(t->dtype));
}

static vp_status gelu_into(cuda_ctx *c, const vp_node *n, const vp_tensor *h, void *a, vp_error *err) {
    return LAUNCH(cu_unary((int)h->dtype, tanh_form(n) ? CU_FAST_GELU : CU_GELU, vp_tensor_numel(h), h->data, a, 0, 0, c->stream));
}

static vp_status op_gelu_matmul(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                vp_error *err) {
    const vp_tensor *h = in[0], *w = in[1];
    vp_tensor *a = opt_out(n, out, 1);
    vp_status s = need_float(n, h, 0, err);
    if (!s && w->dtype != h->dtype) s = vp_node_fail(err, VP_ERR_INVALID, n, "W must have H's dtype");
    if (s) return s;
    if (!a) return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "the CUDA kernel writes gelu(H) into output 1, which is omitted");
    int64_t m, k, nn;
    gm_dims(n, h, w, &m, &k, &nn);
    int tb = vp_attr_int(n, "transB", 0) != 0;
    s = gelu_into(c, n, h, a->data, err);
    if (!s) s = vp_cuda_gemm_rm(c, n, h->dtype, 0, tb, m, nn, k, 1.0f, a->data, k, w->data, tb ? k : nn, out[0]->data, err);
    return s;
}

static vp_status op_gelu_matmul_grad(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                     vp_error *err) {
    const vp_tensor *dy = in[0], *h = in[1], *w = in[2];
    vp_tensor *dh = out[0], *dw = opt_out(n, out, 1);
    vp_status s = VP_OK;
    for (int i = 0; i < 3 && !s; i++)
        s = i ? (in[i]->dtype == dy->dtype ? VP_OK : vp_node_fail(err, VP_ERR_INVALID, n, "inputs of mixed dtypes"))
              : need_float(n, in[i], i, err);
    if (s) return s;
    if (!dh) {
        if (!dw) return VP_OK;
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "the CUDA kernel computes gelu(H) in dH's buffer, which is omitted");
    }
    int64_t m, k, nn;
    gm_dims(n, h, w, &m, &k, &nn);
    int tb = vp_attr_int(n, "transB", 0) != 0;
    if (dw) { /* A = gelu(H) in dH's buffer; dW = A^T dY, or dY^T A */
        s = gelu_into(c, n, h, dh->data, err);
        if (!s && tb) s = vp_cuda_gemm_rm(c, n, h->dtype, 1, 0, nn, k, m, 1.0f, dy->data, nn, dh->data, k, dw->data, err);
        else if (!s) s = vp_cuda_gemm_rm(c, n, h->dtype, 1, 0, k, nn, m, 1.0f, dh->data, k, dy->data, nn, dw->data, err);
    }
    if (!s) s = vp_cuda_gemm_rm(c, n, h->dtype, 0, !tb, m, k, nn, 1.0f, dy->data, nn, w->data, tb ? k : nn, dh->data, err);
    if (s) return s;
    cu_nd nd; /* dH = gelu'(H) * dH, elementwise in place */
    memset(&nd, 0, sizeof nd);
    nd.rank = 1;
    nd.dims[0] = vp_tensor_numel(h);
    nd.s0[0] = nd.s1[0] = 1;
    return LAUNCH(cu_binary((int)h->dtype, tanh_form(n) ? CU_FAST_GELU_GRAD : CU_GELU_GRAD, &nd, dh->data, h->data, dh->data, c->stream));
}

/* cu_swiglu's gate: swish 0, GELU 1, its tanh form 2 (the node's gate and approximate). */
static int gate_of(const vp_node *n) {
    if (strcmp(vp_attr_string(n, "gate", "swish"), "gelu")) return 0;
    return strcmp(vp_attr_string(n, "approximate", "none"), "tanh") ? 1 : 2;
}

static vp_status op_swiglu_matmul(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                  vp_error *err) {
    const vp_tensor *g = in[0], *u = in[1], *w = in[2];
    vp_tensor *a = opt_out(n, out, 1);
    vp_status s = need_float(n, g, 0, err);
    if (!s && (w->dtype != g->dtype || u->dtype != g->dtype))
        s = vp_node_fail(err, VP_ERR_INVALID, n, "U and W must have G's dtype");
    if (s) return s;
    if (!a) return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "the CUDA kernel writes act(G) U into output 1, which is omitted");
    int64_t m, k, nn;
    gm_dims(n, g, w, &m, &k, &nn);
    int tb = vp_attr_int(n, "transB", 0) != 0;
    s = LAUNCH(cu_swiglu((int)g->dtype, 0, gate_of(n), vp_tensor_numel(g), g->data, u->data, a->data, NULL, c->stream));
    if (!s) s = vp_cuda_gemm_rm(c, n, g->dtype, 0, tb, m, nn, k, 1.0f, a->data, k, w->data, tb ? k : nn, out[0]->data, err);
    return s;
}

static vp_status op_swiglu_matmul_grad(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in,
                                       vp_tensor *const *out, vp_error *err) {
    const vp_tensor *dy = in[0], *g = in[1], *u = in[2], *w = in[3];
    vp_tensor *dg = out[0], *du = opt_out(n, out, 1), *dw = opt_out(n, out, 2);
    vp_status s = VP_OK;
    for (int i = 0; i < 4 && !s; i++)
        s = i ? (in[i]->dtype == dy->dtype ? VP_OK : vp_node_fail(err, VP_ERR_INVALID, n, "inputs of mixed dtypes"))
              : need_float(n, in[i], i, err);
    if (s) return s;
    if (!dg) {
        if (!du && !dw) return VP_OK;
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "the CUDA kernel computes act(G) U in dG's buffer, which is omitted");
    }
    int64_t m, k, nn, count = vp_tensor_numel(g);
    gm_dims(n, g, w, &m, &k, &nn);
    int tb = vp_attr_int(n, "transB", 0) != 0;
    if (dw) { /* A = swish(G) U in dG's buffer; dW = A^T dY, or dY^T A */
        s = LAUNCH(cu_swiglu((int)g->dtype, 0, gate_of(n), count, g->data, u->data, dg->data, NULL, c->stream));
        if (!s && tb) s = vp_cuda_gemm_rm(c, n, g->dtype, 1, 0, nn, k, m, 1.0f, dy->data, nn, dg->data, k, dw->data, err);
        else if (!s) s = vp_cuda_gemm_rm(c, n, g->dtype, 1, 0, k, nn, m, 1.0f, dg->data, k, dy->data, nn, dw->data, err);
    }
    /* dA = dY op(W)^T in dG's buffer; then dU and dG from it */
    if (!s) s = vp_cuda_gemm_rm(c, n, g->dtype, 0, !tb, m, k, nn, 1.0f, dy->data, nn, w->data, tb ? k : nn, dg->data, err);
    if (!s) s = LAUNCH(cu_swiglu((int)g->dtype, 1, gate_of(n), count, g->data, u->data, dg->data, du ? du->data : NULL, c->stream));
    return s;
}

const cuda_op vp_cuda_ops_act_matmul[] = {
    {"GeluMatMul", "vplan", op_gelu_matmul},
    {"GeluMatMulGrad", "vplan", op_gelu_matmul_grad},
    {"SwiGluMatMul", "vplan", op_swiglu_matmul},
    {"SwiGluMatMulGrad", "vplan", op_swiglu_matmul_grad},
    {NULL, NULL, NULL},
};
