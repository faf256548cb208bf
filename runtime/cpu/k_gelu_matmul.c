/* vplan.GeluMatMul and GeluMatMulGrad on the CPU (planner/ops/gelu_matmul.c says what
 * they compute).  Each is a sequence of the kernels the unfused graph runs (Gelu or
 * FastGelu, FusedMatMul, the two Gemms of FusedMatMul's gradient, GeluGrad or
 * FastGeluGrad) on the same operands, so fused and unfused float32 steps agree bit for
 * bit; narrower dtypes are widened once for the whole gradient. */
#include "k_train.h"

#include <stdlib.h>
#include <string.h>

#include "k_elementwise.h"
#include "k_linalg.h"

static int tanh_form(const vp_node *n) { return !strcmp(vp_attr_string(n, "approximate", "none"), "tanh"); }

/* gelu(H) into a, with the Gelu kernel of the node's form (the node carries approximate). */
static vp_status gelu_into(const vp_node *n, const vp_tensor *h, vp_tensor *a, vp_error *err) {
    const vp_tensor *in[1] = {h};
    vp_tensor *out[1] = {a};
    return vp_cpu_gelu(n, in, out, err);
}

vp_status vp_cpu_gelu_matmul(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    const vp_tensor *h = in[0], *w = in[1];
    vp_tensor *y = out[0], own_a;
    vp_tensor *a = n->n_outputs > 1 ? out[1] : NULL;
    void *scratch = NULL;
    if (!a) { /* no planned buffer for gelu(H): a model that names only Y */
        own_a = *h;
        if (!(scratch = vp_lin_alloc(vp_tensor_numel(h), vp_dtype_size(h->dtype))))
            return vp_node_fail(err, VP_ERR_NOMEM, n, "out of memory for gelu(H)");
        own_a.data = scratch;
        a = &own_a;
    }
    vp_status s = gelu_into(n, h, a, err);
    if (!s) { /* the FusedMatMul kernel reads transB from the node; transA and alpha default */
        const vp_tensor *mm_in[2] = {a, w};
        vp_tensor *mm_out[1] = {y};
        s = vp_cpu_fused_matmul(n, mm_in, mm_out, err);
    }
    free(scratch);
    return s;
}

vp_status vp_cpu_gelu_matmul_grad(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    const vp_tensor *dy = in[0], *h = in[1], *w = in[2];
    if (vp_lin_is_narrow(h->dtype)) return vp_lin_run_widened(vp_cpu_gelu_matmul_grad, n, in, out, err);
    vp_tensor *dh = out[0], *dw = n->n_outputs > 1 ? out[1] : NULL, own_dh;
    int tb = vp_attr_int(n, "transB", 0) != 0;
    int64_t k = h->dims[h->rank - 1], nn = tb ? w->dims[0] : w->dims[1], m = k ? vp_tensor_numel(h) / k : 0;
    void *scratch = NULL;
    if (!dh) { /* dW alone still needs gelu(H) somewhere */
        if (!dw) return VP_OK;
        own_dh = *h;
        if (!(scratch = vp_lin_alloc(vp_tensor_numel(h), vp_dtype_size(h->dtype))))
            return vp_node_fail(err, VP_ERR_NOMEM, n, "out of memory for gelu(H)");
        own_dh.data = scratch;
        dh = &own_dh;
    }
    vp_status s = VP_OK;
    if (dw) { /* A = gelu(H) in dH's buffer; dW = A^T dY, or dY^T A */
        s = gelu_into(n, h, dh, err);
        if (!s && tb) s = vp_lin_gemm(n, h->dtype, 1, 0, nn, k, m, 1.0, dy->data, nn, dh->data, k, 0.0, dw->data, k, err);
        else if (!s) s = vp_lin_gemm(n, h->dtype, 1, 0, k, nn, m, 1.0, dh->data, k, dy->data, nn, 0.0, dw->data, nn, err);
    }
    if (!s && out[0]) { /* dH = gelu'(H) * (dY op(W)^T), the activation factor applied in place */
        s = vp_lin_gemm(n, h->dtype, 0, !tb, m, k, nn, 1.0, dy->data, nn, w->data, tb ? k : nn, 0.0, dh->data, k, err);
        const vp_tensor *g_in[2] = {dh, h};
        vp_tensor *g_out[1] = {dh};
        if (!s) s = tanh_form(n) ? vp_cpu_fast_gelu_grad(n, g_in, g_out, err) : vp_cpu_gelu_grad(n, g_in, g_out, err);
    }
    free(scratch);
    return s;
}
