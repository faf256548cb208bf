/* vplan.GeluMatMul and GeluMatMulGrad on the CPU (planner/ops/gelu_matmul.c says what
 * they compute).  Each is a sequence of the kernels the unfused graph runs (Gelu or
 * FastGelu, FusedMatMul, the two Gemms of FusedMatMul's gradient, GeluGrad or
 * FastGeluGrad) on the same operands, so fused and unfused float32 steps agree bit for
 * bit, and 16-bit ones round where the unfused kernels round. */
#include "k_train.h"

#include <stdlib.h>
#include <string.h>

#include "k_elementwise.h"
#include "k_linalg.h"

static int tanh_form(const vp_node *n) { return !strcmp(vp_attr_string(n, "approximate", "none"), "tanh"); }

/* The node seen with n_in inputs and n_out outputs, for a kernel of the unfused graph:
 * the attributes it reads (approximate, transB) are the node's, and a kernel that
 * widens 16-bit tensors walks only the tensors it is given. */
static vp_node as_arity(const vp_node *n, int n_in, int n_out) {
    vp_node v = *n;
    v.n_inputs = n_in;
    v.n_outputs = n_out;
    return v;
}

/* gelu(H) into a, with the Gelu kernel of the node's form. */
static vp_status gelu_into(const vp_node *n, const vp_tensor *h, vp_tensor *a, vp_error *err) {
    const vp_tensor *in[1] = {h};
    vp_tensor *out[1] = {a};
    vp_node v = as_arity(n, 1, 1);
    return vp_cpu_gelu(&v, in, out, err);
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
        vp_node v = as_arity(n, 2, 1);
        s = vp_cpu_fused_matmul(&v, mm_in, mm_out, err);
    }
    free(scratch);
    return s;
}

/* t seen as the matrix [rows, cols] (its storage is row-major). */
static vp_tensor as_matrix(const vp_tensor *t, int64_t rows, int64_t cols) {
    vp_tensor m = *t;
    m.rank = 2;
    m.dims[0] = rows;
    m.dims[1] = cols;
    return m;
}

/* Y = op(A) op(B) by the Gemm kernel, as the unfused gradient's Gemm nodes run it (16-bit
 * operands widened and the product rounded once, float32 and float64 through BLAS). */
static vp_status gemm(const vp_node *n, int ta, int tb, const vp_tensor *a, const vp_tensor *b, vp_tensor *y,
                      vp_error *err) {
    vp_attr at[2] = {{.name = (char *)"transA", .type = VP_ATTR_INT, .i = ta},
                     {.name = (char *)"transB", .type = VP_ATTR_INT, .i = tb}};
    vp_node v = as_arity(n, 2, 1);
    v.op_type = (char *)"Gemm";
    v.domain = (char *)"";
    v.n_attrs = 2;
    v.attrs = at;
    const vp_tensor *in[2] = {a, b};
    vp_tensor *out[1] = {y};
    return vp_cpu_gemm(&v, in, out, err);
}

vp_status vp_cpu_gelu_matmul_grad(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    const vp_tensor *dy = in[0], *h = in[1], *w = in[2];
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
    vp_tensor g = as_matrix(dy, m, nn), a = as_matrix(dh, m, k);
    vp_status s = VP_OK;
    if (dw) { /* A = gelu(H) in dH's buffer; dW = A^T dY, or dY^T A */
        s = gelu_into(n, h, dh, err);
        if (!s) s = tb ? gemm(n, 1, 0, &g, &a, dw, err) : gemm(n, 1, 0, &a, &g, dw, err);
    }
    if (!s && out[0]) { /* dH = gelu'(H) * (dY op(W)^T), the activation factor applied in place */
        s = gemm(n, 0, !tb, &g, w, &a, err);
        const vp_tensor *g_in[2] = {dh, h};
        vp_tensor *g_out[1] = {dh};
        vp_node v = as_arity(n, 2, 1);
        if (!s) s = tanh_form(n) ? vp_cpu_fast_gelu_grad(&v, g_in, g_out, err) : vp_cpu_gelu_grad(&v, g_in, g_out, err);
    }
    free(scratch);
    return s;
}
