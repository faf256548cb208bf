/* An activation followed by the product that reads it, fused into vplan.GeluMatMul or
 * vplan.SwiGluMatMul (planner/ops/act_matmul.c says why).
 *
 * In: an inferred forward graph after vp_fuse (so GELU and SiLU are one op each and a
 * Linear layer's product is MatMul or FusedMatMul with transB).  Out: each match of
 *
 *     G = Gelu(H) | FastGelu(H) | com.microsoft.Gelu(H);  Y = MatMul(G, W) | FusedMatMul(G, W)
 *
 * replaced by Y, A = vplan.GeluMatMul(H, W) at the product's place, and of the gated MLP
 *
 *     S = Swish(G) (alpha 1) | a GELU of G;  A = Mul(S, U) (either order);
 *     Y = MatMul(A, W) | FusedMatMul(A, W)
 *
 * by Y, A = vplan.SwiGluMatMul(G, U, W) (gate "swish", or "gelu" with the GELU's
 * approximate: Gemma's GeGLU), each producing the same Y (same value, so readers and
 * names stay).  GPT-2's Conv1D reads the GELU through a Reshape that merges the leading
 * axes, as Y = Gemm(Reshape(G), W, C): that becomes Reshape(H), GeluMatMul and Y =
 * Add(product, C).  The activation's value is read by nobody afterwards: it
 * lives for the op's step only.
 *
 * Keeps true: a match needs each intermediate read once, by the next node of the
 * pattern, and no graph output; the activation the product's left operand; W a matrix;
 * FusedMatMul without transA, alpha 1 and no batch transposes; FastGelu without its
 * bias input; H, or G and U (one dtype, one shape), float.  Anything else stays. */
#include "train/fuse_act_matmul.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/graph_build.h"
#include "train/pattern.h"

static int is_op(const vp_node *n, const char *domain, const char *op) {
    return !n->folded && !strcmp(n->domain, domain) && !strcmp(n->op_type, op);
}

/* The GELU form of node gn ("none" or "tanh"), or NULL when it is no bias-free GELU. */
static const char *gelu_form(const vp_node *n) {
    if (n->n_outputs != 1 || n->outputs[0] < 0 || n->n_inputs < 1 || n->inputs[0] < 0) return NULL;
    if (is_op(n, "com.microsoft", "Gelu") && n->n_inputs == 1) return "none";
    if (is_op(n, "com.microsoft", "FastGelu") && (n->n_inputs == 1 || n->inputs[1] < 0)) return "tanh";
    if (is_op(n, "", "Gelu") && n->n_inputs == 1) {
        const char *a = vp_attr_string(n, "approximate", "none");
        return !strcmp(a, "tanh") ? "tanh" : !strcmp(a, "none") ? "none" : NULL;
    }
    return NULL;
}

/* transB of the product node pn reading G as input 0, or -1 when it does not match. */
static int product_trans_b(const vp_graph *g, const vp_node *pn, int gv) {
    if (pn->n_inputs != 2 || pn->inputs[0] != gv || pn->inputs[1] == gv || pn->n_outputs != 1 || pn->outputs[0] < 0)
        return -1;
    if (g->values[pn->inputs[1]].rank != 2) return -1;
    if (is_op(pn, "", "MatMul")) return 0;
    if (!is_op(pn, "com.microsoft", "FusedMatMul")) return -1;
    if (vp_attr_int(pn, "transA", 0) || vp_attr_float(pn, "alpha", 1.0f) != 1.0f || vp_attr_int(pn, "transBatchA", 0) ||
        vp_attr_int(pn, "transBatchB", 0))
        return -1;
    return vp_attr_int(pn, "transB", 0) != 0;
}

static int sole_reader(const vp_graph *g, int v) { return vp_pattern_sole_reader(g, v); }

/* GPT-2's Conv1D after a GELU: G's only reader a Reshape that merges its leading axes
 * (to [rows, G's last]), whose output's only reader is Gemm(V, W[, C]) with alpha 1,
 * beta 1, no transA, W a matrix.  The Gemm's id, the Reshape's in *reshape, transB in
 * *tb; -1 otherwise.  The Reshape commutes with the elementwise GELU, so it moves to H. */
static int conv1d_gemm(const vp_graph *g, int gv, int *reshape, int *tb) {
    int r = sole_reader(g, gv);
    if (r < 0) return -1;
    const vp_node *rn = &g->nodes[r];
    const vp_value *gval = &g->values[gv];
    if (!is_op(rn, "", "Reshape") || rn->n_inputs != 2 || rn->inputs[0] != gv || rn->inputs[1] < 0 || rn->n_outputs != 1 ||
        rn->outputs[0] < 0 || gval->rank < 2)
        return -1;
    int vv = rn->outputs[0];
    const vp_value *v = &g->values[vv];
    if (v->rank != 2 || v->dims[1] != gval->dims[gval->rank - 1]) return -1;
    int p = sole_reader(g, vv);
    if (p < 0) return -1;
    const vp_node *pn = &g->nodes[p];
    if (!is_op(pn, "", "Gemm") || pn->n_inputs < 2 || pn->n_inputs > 3 || pn->inputs[0] != vv || pn->inputs[1] < 0 ||
        pn->inputs[1] == vv || pn->n_outputs != 1 || pn->outputs[0] < 0 || g->values[pn->inputs[1]].rank != 2 ||
        vp_attr_int(pn, "transA", 0) || vp_attr_float(pn, "alpha", 1.0f) != 1.0f ||
        (pn->n_inputs == 3 && pn->inputs[2] >= 0 && vp_attr_float(pn, "beta", 1.0f) != 1.0f))
        return -1;
    *reshape = r;
    *tb = vp_attr_int(pn, "transB", 0) != 0;
    return p;
}

/* Y = Gemm(Reshape(Gelu(H)), W, C) as Reshape(H) at the GELU's place, GeluMatMul at the
 * Reshape's and the bias Add at the Gemm's (repl[]); Y keeps its id. */
static vp_status fuse_conv1d(vp_graph *g, int gelu, int r, int p, int tb, const char *form, int *repl, vp_error *err) {
    int h = g->nodes[gelu].inputs[0], shape = g->nodes[r].inputs[1], allowzero = (int)vp_attr_int(&g->nodes[r], "allowzero", 0);
    int w = g->nodes[p].inputs[1], c = g->nodes[p].n_inputs == 3 ? g->nodes[p].inputs[2] : -1, y = g->nodes[p].outputs[0];
    vp_phase phase = g->nodes[p].phase;
    char name[600];
    int in_r[2] = {h, shape}, hv, outs[2];
    int rr = vp_build_node(g, "Reshape", "", g->nodes[r].name, 2, in_r, 1, phase, 0);
    if (rr < 0 || (allowzero && vp_node_add_attr_int(g, rr, "allowzero", allowzero)))
        return vp_fail(err, VP_ERR_NOMEM, "out of memory fusing GELU into its product");
    vp_status s = vp_build_finish(g, rr, &hv, err);
    if (s) return s;
    int in_f[2] = {hv, w};
    int f = vp_build_node(g, "GeluMatMul", "vplan", g->nodes[p].name, 2, in_f, 2, phase, 0);
    if (f < 0 || vp_node_add_attr_int(g, f, "transB", tb) || vp_node_add_attr_string(g, f, "approximate", form))
        return vp_fail(err, VP_ERR_NOMEM, "out of memory fusing GELU into its product");
    if ((s = vp_build_finish(g, f, outs, err))) return s;
    repl[gelu] = rr;
    repl[r] = f;
    repl[p] = -1;
    if (c < 0) {
        g->nodes[f].outputs[0] = y; /* Y keeps its id, name and readers */
        return VP_OK;
    }
    snprintf(name, sizeof name, "%s/bias", g->nodes[p].name);
    int in_a[2] = {outs[0], c}, ya;
    int a = vp_build_node(g, "Add", "", name, 2, in_a, 1, phase, 0);
    if (a < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory fusing GELU into its product");
    if ((s = vp_build_finish(g, a, &ya, err))) return s;
    g->nodes[a].outputs[0] = y;
    repl[p] = a;
    return VP_OK;
}

/* Swish node sn at alpha 1, or a bias-free GELU (*gelu its form, else NULL), whose
 * output's only reader is a Mul of it by a tensor of its shape and dtype: that Mul's
 * id, the gate G and the up half U; -1 otherwise. */
static int gated_mul(const vp_graph *g, const vp_node *sn, int *gate, int *up, const char **gelu) {
    *gelu = gelu_form(sn);
    int swish = is_op(sn, "", "Swish") && sn->n_inputs == 1 && sn->inputs[0] >= 0 && sn->n_outputs == 1 &&
                sn->outputs[0] >= 0 && vp_attr_float(sn, "alpha", 1.0f) == 1.0f;
    if (!swish && !*gelu) return -1;
    int sv = sn->outputs[0], mul = sole_reader(g, sv);
    if (mul < 0) return -1;
    const vp_node *mn = &g->nodes[mul];
    if (!is_op(mn, "", "Mul") || mn->n_inputs != 2 || mn->n_outputs != 1 || mn->outputs[0] < 0) return -1;
    int u = mn->inputs[0] == sv ? mn->inputs[1] : mn->inputs[0];
    if (u < 0 || u == sv) return -1;
    const vp_value *gv = &g->values[sn->inputs[0]], *uv = &g->values[u], *av = &g->values[mn->outputs[0]];
    if (!vp_dtype_is_float(gv->dtype) || gv->rank < 2 || uv->dtype != gv->dtype || uv->rank != gv->rank ||
        memcmp(uv->dims, gv->dims, (size_t)gv->rank * sizeof *gv->dims) || av->rank != gv->rank ||
        memcmp(av->dims, gv->dims, (size_t)gv->rank * sizeof *gv->dims))
        return -1;
    *gate = sn->inputs[0];
    *up = u;
    return mul;
}

vp_status vp_fuse_act_matmul(vp_graph *g, int *n_fused, int *n_swiglu, int *n_geglu, vp_error *err) {
    *n_fused = *n_swiglu = *n_geglu = 0;
    vp_status s = vp_graph_link(g, err);
    if (s) return s;
    int n0 = g->n_nodes;
    int *repl = malloc(((size_t)n0 + 1) * sizeof *repl); /* -2 keep, -1 drop, else the new node */
    int *order = malloc(((size_t)n0 + 1) * sizeof *order);
    if (!repl || !order) s = vp_fail(err, VP_ERR_NOMEM, "out of memory fusing GELU into its product");
    for (int i = 0; !s && i < n0; i++) repl[i] = -2;
    for (int i = 0; !s && i < n0; i++) {
        const vp_node *gn = &g->nodes[i];
        const char *gelu_gate = NULL;
        int gate, up, mul = repl[i] == -2 ? gated_mul(g, gn, &gate, &up, &gelu_gate) : -1;
        if (mul >= 0 && repl[mul] == -2) {
            int av = g->nodes[mul].outputs[0], p = sole_reader(g, av);
            int tb = p >= 0 ? product_trans_b(g, &g->nodes[p], av) : -1;
            if (tb < 0 || repl[p] != -2) continue;
            int in[3] = {gate, up, g->nodes[p].inputs[1]}, outs[2];
            int f = vp_build_node(g, "SwiGluMatMul", "vplan", g->nodes[p].name, 3, in, 2, g->nodes[p].phase, 0);
            if (f < 0 || vp_node_add_attr_int(g, f, "transB", tb) ||
                (gelu_gate && (vp_node_add_attr_string(g, f, "gate", "gelu") ||
                               vp_node_add_attr_string(g, f, "approximate", gelu_gate)))) {
                s = vp_fail(err, VP_ERR_NOMEM, "out of memory fusing a gated MLP into its product");
                break;
            }
            if ((s = vp_build_finish(g, f, outs, err))) break;
            g->nodes[f].outputs[0] = g->nodes[p].outputs[0];
            repl[i] = repl[mul] = -1;
            repl[p] = f;
            ++*n_swiglu;
            *n_geglu += gelu_gate != NULL;
            continue;
        }
        const char *form = repl[i] == -2 ? gelu_form(gn) : NULL;
        if (!form) continue;
        int gv = gn->outputs[0];
        const vp_value *gval = &g->values[gv], *h = &g->values[gn->inputs[0]];
        if (gval->n_consumers != 1 || (gval->flags & VP_VAL_OUTPUT) || h->rank < 2 || !vp_dtype_is_float(h->dtype))
            continue;
        int p = gval->consumers[0], tb = product_trans_b(g, &g->nodes[p], gv), r = -1;
        if (tb < 0 && (p = conv1d_gemm(g, gv, &r, &tb)) >= 0 && repl[r] == -2 && repl[p] == -2) {
            if ((s = fuse_conv1d(g, i, r, p, tb, form, repl, err))) break;
            ++*n_fused;
            continue;
        }
        if (tb < 0 || p < 0 || repl[p] != -2) continue;
        int in[2] = {gn->inputs[0], g->nodes[p].inputs[1]}, outs[2];
        int f = vp_build_node(g, "GeluMatMul", "vplan", g->nodes[p].name, 2, in, 2, g->nodes[p].phase, 0);
        if (f < 0 || vp_node_add_attr_int(g, f, "transB", tb) || vp_node_add_attr_string(g, f, "approximate", form)) {
            s = vp_fail(err, VP_ERR_NOMEM, "out of memory fusing GELU into its product");
            break;
        }
        if ((s = vp_build_finish(g, f, outs, err))) break;
        g->nodes[f].outputs[0] = g->nodes[p].outputs[0]; /* Y keeps its id, name and readers */
        repl[i] = -1;
        repl[p] = f;
        ++*n_fused;
    }
    int n = 0;
    for (int i = 0; !s && i < n0; i++) {
        if (repl[i] == -2) order[n++] = i;
        else if (repl[i] >= 0) order[n++] = repl[i];
    }
    if (!s && (*n_fused || *n_swiglu)) s = vp_graph_keep_nodes(g, order, n, err);
    free(repl);
    free(order);
    return s;
}
