/* vplan.GeluMatMul, SwiGluMatMul and their gradients on the CPU (planner/ops/act_matmul.c
 * says what they compute).  GeluMatMul's are sequences of the kernels the unfused graph
 * runs (Gelu or FastGelu, FusedMatMul, the two Gemms of FusedMatMul's gradient, GeluGrad
 * or FastGeluGrad) on the same operands, so fused and unfused float32 steps agree bit
 * for bit, and 16-bit ones round where the unfused kernels round.  SwiGluMatMul's forward
 * is the unfused Swish (or Gelu), Mul and FusedMatMul kernels (bit for bit again); its
 * gradient's activation factors are one elementwise pass, computed in float32 (float64
 * for float64), rounded once on store. */
#include "k_train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "k_elementwise.h"
#include "k_linalg.h"
#include "k_vmath.h"
#include "cpu_par.h"
#include "ir/dtype_conv.h"

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

/* *t when the node has a planned buffer for it, else own: a scratch copy of like's
 * shape and dtype (*scratch, freed by the caller), for a model that names fewer
 * outputs.  NULL when out of memory. */
static vp_tensor *planned_or_scratch(vp_tensor *t, const vp_tensor *like, vp_tensor *own, void **scratch) {
    if (t) return t;
    *own = *like;
    if (!(*scratch = vp_lin_alloc(vp_tensor_numel(like), vp_dtype_size(like->dtype)))) return NULL;
    own->data = *scratch;
    return own;
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
    void *scratch = NULL; /* no planned buffer for gelu(H): a model that names only Y */
    vp_tensor *a = planned_or_scratch(n->n_outputs > 1 ? out[1] : NULL, h, &own_a, &scratch);
    if (!a) return vp_node_fail(err, VP_ERR_NOMEM, n, "out of memory for gelu(H)");
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
    if (!dh && !dw) return VP_OK;
    if (!(dh = planned_or_scratch(dh, h, &own_dh, &scratch))) /* dW alone still needs gelu(H) somewhere */
        return vp_node_fail(err, VP_ERR_NOMEM, n, "out of memory for gelu(H)");
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

/* ---- SwiGluMatMul ---- */

static int gelu_gate(const vp_node *n) { return !strcmp(vp_attr_string(n, "gate", "swish"), "gelu"); }

vp_status vp_cpu_swiglu_matmul(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    const vp_tensor *g = in[0], *u = in[1], *w = in[2];
    vp_tensor *y = out[0], own_a;
    void *scratch = NULL; /* no planned buffer for swish(G) U: a model that names only Y */
    vp_tensor *a = planned_or_scratch(n->n_outputs > 1 ? out[1] : NULL, g, &own_a, &scratch);
    if (!a) return vp_node_fail(err, VP_ERR_NOMEM, n, "out of memory for swish(G) U");
    /* act(G) into A, then A U in place: the Swish (alpha 1 by default) or Gelu, and Mul
     * kernels */
    vp_node v = as_arity(n, 1, 1);
    const vp_tensor *sw_in[1] = {g}, *mul_in[2] = {a, u}, *mm_in[2] = {a, w};
    vp_tensor *a_out[1] = {a}, *mm_out[1] = {y};
    vp_status s = gelu_gate(n) ? gelu_into(n, g, a, err) : vp_cpu_swish(&v, sw_in, a_out, err);
    v = as_arity(n, 2, 1);
    if (!s) s = vp_cpu_mul(&v, mul_in, a_out, err);
    if (!s) s = vp_cpu_fused_matmul(&v, mm_in, mm_out, err);
    free(scratch);
    return s;
}

/* The elementwise passes of the gradient over [lo, hi): A = act(G) U into a (recompute),
 * or from dA in da: dU = dA act(G) into du, dG = dA U act'(G) into da. */
typedef enum gate_kind { GATE_SWISH, GATE_GELU, GATE_GELU_TANH } gate_kind;

typedef struct swiglu_pass {
    const vp_tensor *g, *u;
    void *a_or_da, *du;
    int backward;
    gate_kind gate;
} swiglu_pass;

/* act(x) into A and act'(x) into D, in C's precision (EXP, ERF, TANH of its width):
 * swish x sigmoid(x); GELU x Phi(x); its tanh form x (1 + tanh(k (x + 0.044715 x^3))) / 2 */
#define GATE_ACT(C, EXP, ERF, TANH, X, A, D)                                                        \
    do {                                                                                            \
        if (p->gate == GATE_SWISH) {                                                                \
            C sg_ = (C)1 / ((C)1 + EXP(-(X)));                                                      \
            A = (X) * sg_;                                                                          \
            D = sg_ + A * ((C)1 - sg_);                                                             \
        } else if (p->gate == GATE_GELU) {                                                          \
            C cdf_ = (C)0.5 * ((C)1 + ERF((X) * (C)0.70710678118654752440));                        \
            A = (X) * cdf_;                                                                         \
            D = cdf_ + (X) * (C)0.39894228040143267794 * EXP((C)-0.5 * (X) * (X));                  \
        } else {                                                                                    \
            C t_ = TANH((C)0.79788456080286535588 * ((X) + (C)0.044715 * (X) * (X) * (X)));         \
            A = (C)0.5 * (X) * ((C)1 + t_);                                                         \
            D = (C)0.5 * ((C)1 + t_) + (C)0.5 * (X) * ((C)1 - t_ * t_) * (C)0.79788456080286535588 * \
                                         ((C)1 + (C)3 * (C)0.044715 * (X) * (X));                   \
        }                                                                                           \
    } while (0)

#define SWIGLU_BODY(C, EXP, ERF, TANH, LOAD, STORE)                                        \
    for (int64_t i = lo; i < hi; i++) {                                                  \
        C x = (C)LOAD(p->g->data, i), up = (C)LOAD(p->u->data, i), act, dact;           \
        GATE_ACT(C, EXP, ERF, TANH, x, act, dact);                                       \
        if (!p->backward) {                                                              \
            STORE(p->a_or_da, i, act * up);                                              \
            continue;                                                                    \
        }                                                                                \
        C da = (C)LOAD(p->a_or_da, i);                                                   \
        if (p->du) STORE(p->du, i, da * act);                                            \
        STORE(p->a_or_da, i, da * up * dact);                                            \
    }

#define F32_LOAD(d, i) (((const float *)(d))[i])
#define F32_STORE(d, i, v) (((float *)(d))[i] = (v))
#define ANY_LOAD(d, i) vp_load((d), dt, (i))
#define ANY_STORE(d, i, v) vp_store((d), dt, (i), (double)(v))

static void swiglu_body(int64_t lo, int64_t hi, void *ctx) {
    const swiglu_pass *p = ctx;
    vp_dtype dt = p->g->dtype;
    if (dt == VP_F32) {
        SWIGLU_BODY(float, expf, erff, vp_vm_tanhf, F32_LOAD, F32_STORE)
    } else if (dt == VP_F64) {
        SWIGLU_BODY(double, exp, erf, tanh, ANY_LOAD, ANY_STORE)
    } else { /* 16-bit: float32 arithmetic, rounded on store */
        SWIGLU_BODY(float, expf, erff, vp_vm_tanhf, ANY_LOAD, ANY_STORE)
    }
}

vp_status vp_cpu_swiglu_matmul_grad(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                    vp_error *err) {
    const vp_tensor *dy = in[0], *g = in[1], *u = in[2], *w = in[3];
    vp_tensor *dg = out[0], *du = n->n_outputs > 1 ? out[1] : NULL, *dw = n->n_outputs > 2 ? out[2] : NULL, own_dg;
    int tb = vp_attr_int(n, "transB", 0) != 0;
    int64_t k = g->dims[g->rank - 1], nn = tb ? w->dims[0] : w->dims[1], m = k ? vp_tensor_numel(g) / k : 0;
    void *scratch = NULL;
    if (!dg && !du && !dw) return VP_OK;
    if (!(dg = planned_or_scratch(dg, g, &own_dg, &scratch))) /* dU or dW without dG still need A and dA */
        return vp_node_fail(err, VP_ERR_NOMEM, n, "out of memory for swish(G) U");
    vp_tensor dym = as_matrix(dy, m, nn), am = as_matrix(dg, m, k);
    swiglu_pass p = {.g = g, .u = u, .a_or_da = dg->data, .du = du ? du->data : NULL,
                     .gate = !gelu_gate(n) ? GATE_SWISH : tanh_form(n) ? GATE_GELU_TANH : GATE_GELU};
    vp_status s = VP_OK;
    if (dw) { /* A = swish(G) U in dG's buffer; dW = A^T dY, or dY^T A */
        vp_par_for(vp_tensor_numel(g), 8, swiglu_body, &p);
        s = tb ? gemm(n, 1, 0, &dym, &am, dw, err) : gemm(n, 1, 0, &am, &dym, dw, err);
    }
    if (!s && (out[0] || du)) { /* dA = dY op(W)^T in dG's buffer, then dU and dG from it */
        s = gemm(n, 0, !tb, &dym, w, &am, err);
        p.backward = 1;
        if (!s) vp_par_for(vp_tensor_numel(g), 12, swiglu_body, &p);
    }
    free(scratch);
    return s;
}
