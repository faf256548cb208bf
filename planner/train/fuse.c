/* Fusion of exporters' decomposed patterns (fuse.h says which, and when).
 *
 * In: an inferred forward graph.  Out: the same graph with each recognised pattern
 * replaced by one node, at the position of the pattern's last node, producing the
 * pattern's result value; the pattern's nodes are freed, its intermediate values stay
 * behind without producer or consumer (no pass gives those a buffer).
 *
 * Matching starts at the one op each pattern has exactly once (Erf, Tanh, the first
 * ReduceMean) and walks the single-consumer chain from there, so a pattern is found
 * once and two matches never share a node.
 *
 * Not fused: the bias Add after a MatMul (torch's Linear on 3-D inputs).  No kernel here
 * does MatMul and bias in one pass for N-D inputs (Gemm is 2-D; com.microsoft.FusedMatMul
 * has no bias), and fusing would save nothing: Add may write in place over the MatMul
 * output, which nothing else reads, and Add's gradient reads no input, so neither buffer
 * is saved for the backward. */
#include "train/fuse.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/dtype_conv.h"
#include "ir/infer.h"
#include "ir/graph_build.h"

#define MAX_PATTERN 16

typedef enum kind { GELU, FAST_GELU, LAYER_NORM, MATMUL_T, SWISH, RMS_NORM } kind;

typedef struct match {
    kind kind;
    int n_nodes;
    int nodes[MAX_PATTERN]; /* the pattern's node ids */
    int x;                  /* the input */
    int scale, bias;        /* LayerNorm: value ids, -1 when absent (scale: ones); MatMul: scale is W */
    int axes;               /* LayerNorm: the number of trailing axes normalised */
    double eps;
    int out;                /* the pattern's result */
} match;

static void take(match *m, int node) {
    if (m->n_nodes < MAX_PATTERN) m->nodes[m->n_nodes++] = node;
}

static int output0(const vp_graph *g, int node) { return g->nodes[node].outputs[0]; }

/* node is a standard op_type with n_in inputs and one output, computed at run time. */
static int is_op(const vp_graph *g, int node, const char *op_type, int n_in) {
    if (node < 0) return 0;
    const vp_node *n = &g->nodes[node];
    return !n->folded && !n->domain[0] && !strcmp(n->op_type, op_type) && n->n_inputs == n_in && n->n_outputs == 1 &&
           n->outputs[0] >= 0;
}

/* The only node that reads v, when v is an intermediate the pattern may swallow: one
 * use, no graph output, no constant data.  -1 otherwise. */
static int only_use(const vp_graph *g, int v) {
    const vp_value *val = &g->values[v];
    if (val->n_consumers != 1 || (val->flags & VP_VAL_OUTPUT) || val->data) return -1;
    return val->consumers[0];
}

static int producer(const vp_graph *g, int v) { return v >= 0 ? g->values[v].producer : -1; }

/* The other operand of a binary node one of whose inputs is v; -1 when none is. */
static int other(const vp_graph *g, int node, int v) {
    const vp_node *n = &g->nodes[node];
    if (n->inputs[0] == v) return n->inputs[1];
    if (n->inputs[1] == v) return n->inputs[0];
    return -1;
}

/* A constant float scalar (one element, known ahead of time, not trainable). */
static int scalar(const vp_graph *g, int v, double *out) {
    if (v < 0) return 0;
    const vp_value *val = &g->values[v];
    if (!(val->flags & VP_VAL_CONST) || !val->data || !vp_dtype_is_float(val->dtype) || vp_value_numel(val) != 1)
        return 0;
    *out = vp_load(val->data, val->dtype, 0);
    return 1;
}

/* v is the constant want, up to the rounding of its dtype (torch writes sqrt(2) as the
 * float 1.41421354). */
static int is_const(const vp_graph *g, int v, double want) {
    double x;
    if (!scalar(g, v, &x)) return 0;
    vp_dtype t = g->values[v].dtype;
    double tol = t == VP_F16 ? 1e-3 : t == VP_BF16 ? 8e-3 : 1e-6;
    return fabs(x - want) <= tol * fabs(want);
}

/* The non-constant operand of a binary node whose other operand is the constant want. */
static int operand_beside(const vp_graph *g, int node, double want) {
    const vp_node *n = &g->nodes[node];
    if (is_const(g, n->inputs[1], want)) return n->inputs[0];
    if (is_const(g, n->inputs[0], want)) return n->inputs[1];
    return -1;
}

/* Every node of the match outputs x's float dtype, and the result has x's shape. */
static int types_agree(const vp_graph *g, const match *m) {
    const vp_value *x = &g->values[m->x], *y = &g->values[m->out];
    if (!vp_dtype_is_float(x->dtype) || y->rank != x->rank || memcmp(y->dims, x->dims, (size_t)x->rank * sizeof *x->dims))
        return 0;
    for (int i = 0; i < m->n_nodes; i++)
        if (g->values[output0(g, m->nodes[i])].dtype != x->dtype) return 0;
    return 1;
}

/* ---- GELU ---- */

/* The tail both GELU forms share: from a = 1 + f(x), the result 0.5 * x * a in the
 * orders exporters write, (x * a) * 0.5, (x * 0.5) * a and x * (a * 0.5), each Mul's
 * operands either way round. */
static int match_half_x_times(const vp_graph *g, int a, match *m) {
    int x = m->x, m1 = only_use(g, a);
    if (!is_op(g, m1, "Mul", 2)) return 0;
    take(m, m1);
    int o = other(g, m1, a), r1 = output0(g, m1);
    if (o == x || is_const(g, o, 0.5)) {
        int m2 = only_use(g, r1);
        if (!is_op(g, m2, "Mul", 2)) return 0;
        int o2 = other(g, m2, r1);
        if (o == x ? !is_const(g, o2, 0.5) : o2 != x) return 0;
        take(m, m2);
        m->out = output0(g, m2);
        return 1;
    }
    int h = producer(g, o); /* o = x * 0.5 */
    if (!is_op(g, h, "Mul", 2) || only_use(g, o) != m1 || operand_beside(g, h, 0.5) != x) return 0;
    take(m, h);
    m->out = r1;
    return 1;
}

/* 1 + v, where v's only use is that Add; its output, or -1. */
static int one_plus(const vp_graph *g, int v, match *m) {
    int a = only_use(g, v);
    if (!is_op(g, a, "Add", 2) || !is_const(g, other(g, a, v), 1.0)) return -1;
    take(m, a);
    return output0(g, a);
}

/* x * 0.5 * (1 + erf(x / sqrt 2)), the division written as Div by sqrt 2 or Mul by
 * 1 / sqrt 2, from the Erf node. */
static int match_gelu(const vp_graph *g, int erf, match *m) {
    if (!is_op(g, erf, "Erf", 1)) return 0;
    int d = g->nodes[erf].inputs[0], dn = producer(g, d);
    if (only_use(g, d) != erf) return 0;
    if (is_op(g, dn, "Div", 2) && is_const(g, g->nodes[dn].inputs[1], M_SQRT2)) m->x = g->nodes[dn].inputs[0];
    else if (is_op(g, dn, "Mul", 2)) m->x = operand_beside(g, dn, M_SQRT1_2);
    else return 0;
    if (m->x < 0) return 0;
    m->kind = GELU;
    take(m, dn);
    take(m, erf);
    int a = one_plus(g, output0(g, erf), m);
    return a >= 0 && match_half_x_times(g, a, m) && types_agree(g, m);
}

/* c is x^3 as Pow(x, 3), x * (x * x) or (x * x) * x. */
static int is_cube(const vp_graph *g, int c, int x, match *m) {
    int cn = producer(g, c);
    if (is_op(g, cn, "Pow", 2) && g->nodes[cn].inputs[0] == x && is_const(g, g->nodes[cn].inputs[1], 3.0)) {
        take(m, cn);
        return 1;
    }
    if (!is_op(g, cn, "Mul", 2)) return 0;
    int sq = other(g, cn, x), sn = producer(g, sq);
    if (!is_op(g, sn, "Mul", 2) || g->nodes[sn].inputs[0] != x || g->nodes[sn].inputs[1] != x ||
        only_use(g, sq) != cn)
        return 0;
    take(m, sn);
    take(m, cn);
    return 1;
}

/* 1 + 0.044715 * x^2 as BLOOM writes it, (x * 0.044715) * x or (x * x) * 0.044715, each
 * Mul's operands either way round: v its output. */
static int is_one_plus_c_square(const vp_graph *g, int v, int x, match *m) {
    int an = producer(g, v);
    if (!is_op(g, an, "Add", 2)) return 0;
    int r = operand_beside(g, an, 1.0), rn = producer(g, r);
    if (r < 0 || only_use(g, r) != an || !is_op(g, rn, "Mul", 2)) return 0;
    int t = other(g, rn, x), tn = producer(g, t); /* (x * c) * x */
    if (t >= 0 && is_op(g, tn, "Mul", 2) && only_use(g, t) == rn && operand_beside(g, tn, 0.044715) == x) {
        take(m, tn);
    } else { /* (x * x) * c */
        int sq = operand_beside(g, rn, 0.044715), sn = producer(g, sq);
        if (sq < 0 || only_use(g, sq) != rn || !is_op(g, sn, "Mul", 2) || g->nodes[sn].inputs[0] != x ||
            g->nodes[sn].inputs[1] != x)
            return 0;
        take(m, sn);
    }
    take(m, rn);
    take(m, an);
    return 1;
}

/* From the tanh's argument (the product un) on: the Tanh, 1 + it, times 0.5 x. */
static int tanh_gelu_tail(const vp_graph *g, int un, int tanh, match *m) {
    take(m, un);
    take(m, tanh);
    int a = one_plus(g, output0(g, tanh), m);
    return a >= 0 && match_half_x_times(g, a, m) && types_agree(g, m);
}

/* BLOOM's tanh GELU, the same function factored: x * 0.5 * (1 + tanh((sqrt(2/pi) * x) *
 * (1 + 0.044715 * x^2))), from the Tanh node. */
static int match_fast_gelu_factored(const vp_graph *g, int tanh, match *m) {
    int u = g->nodes[tanh].inputs[0], un = producer(g, u);
    if (only_use(g, u) != tanh || !is_op(g, un, "Mul", 2)) return 0;
    for (int k = 0; k < 2; k++) { /* which operand of the Mul is sqrt(2/pi) * x */
        int p = g->nodes[un].inputs[k], q = g->nodes[un].inputs[1 - k], pn = producer(g, p);
        if (!is_op(g, pn, "Mul", 2) || only_use(g, p) != un || only_use(g, q) != un) continue;
        int x = operand_beside(g, pn, sqrt(2.0 / M_PI));
        if (x < 0) continue;
        m->x = x;
        m->n_nodes = 0;
        if (!is_one_plus_c_square(g, q, x, m)) continue;
        take(m, pn);
        return tanh_gelu_tail(g, un, tanh, m);
    }
    return 0;
}

/* x * 0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))), from the Tanh node; or the
 * factored form above. */
static int match_fast_gelu(const vp_graph *g, int tanh, match *m) {
    if (!is_op(g, tanh, "Tanh", 1)) return 0;
    if (match_fast_gelu_factored(g, tanh, m)) {
        m->kind = FAST_GELU;
        return 1;
    }
    m->n_nodes = 0;
    int u = g->nodes[tanh].inputs[0], un = producer(g, u);
    if (only_use(g, u) != tanh || !is_op(g, un, "Mul", 2)) return 0;
    int s = operand_beside(g, un, sqrt(2.0 / M_PI)), sn = producer(g, s);
    if (s < 0 || only_use(g, s) != un || !is_op(g, sn, "Add", 2)) return 0;
    m->kind = FAST_GELU;
    for (int k = 0; k < 2; k++) { /* which operand of the Add is x */
        int x = g->nodes[sn].inputs[k], p = g->nodes[sn].inputs[1 - k], pn = producer(g, p);
        if (!is_op(g, pn, "Mul", 2) || only_use(g, p) != sn) continue;
        int c = operand_beside(g, pn, 0.044715);
        if (c < 0 || only_use(g, c) != pn) continue;
        m->x = x;
        m->n_nodes = 0;
        if (!is_cube(g, c, x, m)) continue;
        take(m, pn);
        take(m, sn);
        return tanh_gelu_tail(g, un, tanh, m);
    }
    return 0;
}

/* ---- LayerNorm ---- */

/* A ReduceMean with keepdims over the last axes of its input, as many as it says in
 * *k (0: any); sets *k. */
static int is_mean_over_last(const vp_graph *g, int node, int *k) {
    if (node < 0) return 0;
    const vp_node *n = &g->nodes[node];
    if (n->folded || n->domain[0] || strcmp(n->op_type, "ReduceMean") || n->n_outputs != 1 || n->n_inputs < 1 ||
        vp_attr_int(n, "keepdims", 1) != 1)
        return 0;
    int64_t axes[VP_MAX_RANK];
    int count = 0;
    if (n->opset < 18) { /* axes an attribute before opset 18, an input from 18 */
        const int64_t *a;
        count = vp_attr_ints(n, "axes", &a);
        if (n->n_inputs != 1 || count < 1 || count > VP_MAX_RANK) return 0;
        memcpy(axes, a, (size_t)count * sizeof *a);
    } else {
        const vp_value *av = n->n_inputs == 2 && n->inputs[1] >= 0 ? &g->values[n->inputs[1]] : NULL;
        if (!av || !av->data || av->dtype != VP_I64 || av->rank != 1) return 0;
        count = (int)av->dims[0];
        if (count < 1 || count > VP_MAX_RANK) return 0;
        memcpy(axes, av->data, (size_t)count * sizeof *axes);
    }
    int rank = g->values[n->inputs[0]].rank;
    unsigned seen = 0;
    for (int i = 0; i < count; i++) {
        int64_t a = axes[i] < 0 ? axes[i] + rank : axes[i];
        if (a < rank - count || a >= rank || (seen & (1u << a))) return 0;
        seen |= 1u << a;
    }
    if (*k && *k != count) return 0;
    *k = count;
    return 1;
}

/* A scale or bias LayerNormalization takes: x's dtype, the normalised axes' shape. */
static int fits_last_axes(const vp_graph *g, int v, const match *m) {
    if (v < 0) return 0;
    const vp_value *p = &g->values[v], *x = &g->values[m->x];
    return p->dtype == x->dtype && p->rank == m->axes &&
           !memcmp(p->dims, x->dims + x->rank - m->axes, (size_t)m->axes * sizeof *p->dims);
}

static void take_scale(const vp_graph *g, match *m);

/* (x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps), then * scale and + bias when
 * present, from the first ReduceMean. */
static int match_layer_norm(const vp_graph *g, int r1, match *m) {
    m->axes = 0;
    if (!is_mean_over_last(g, r1, &m->axes)) return 0;
    m->kind = LAYER_NORM;
    m->x = g->nodes[r1].inputs[0];
    m->scale = m->bias = -1;
    take(m, r1);
    int mean = output0(g, r1), sub = only_use(g, mean);
    if (!is_op(g, sub, "Sub", 2) || g->nodes[sub].inputs[0] != m->x || g->nodes[sub].inputs[1] != mean) return 0;
    take(m, sub);
    /* the deviation feeds the square and the division, nothing else */
    int dev = output0(g, sub), pw = -1, div = -1;
    const vp_value *dv = &g->values[dev];
    if (dv->n_consumers != 2 || (dv->flags & VP_VAL_OUTPUT)) return 0;
    for (int c = 0; c < 2; c++) {
        int k = dv->consumers[c];
        if (is_op(g, k, "Pow", 2) && g->nodes[k].inputs[0] == dev && is_const(g, g->nodes[k].inputs[1], 2.0)) pw = k;
        else if (is_op(g, k, "Div", 2) && g->nodes[k].inputs[0] == dev) div = k;
    }
    if (pw < 0 || div < 0) return 0;
    take(m, pw);
    int r2 = only_use(g, output0(g, pw));
    if (!is_mean_over_last(g, r2, &m->axes) || g->nodes[r2].inputs[0] != output0(g, pw)) return 0;
    take(m, r2);
    int add = only_use(g, output0(g, r2));
    if (!is_op(g, add, "Add", 2) || !scalar(g, other(g, add, output0(g, r2)), &m->eps) || !(m->eps >= 0) ||
        !isfinite(m->eps))
        return 0;
    take(m, add);
    int sq = only_use(g, output0(g, add));
    if (!is_op(g, sq, "Sqrt", 1) || only_use(g, output0(g, sq)) != div || g->nodes[div].inputs[1] != output0(g, sq))
        return 0;
    take(m, sq);
    take(m, div);
    m->out = output0(g, div);
    /* the affine part, when its operands have the normalised shape */
    take_scale(g, m);
    int badd = only_use(g, m->out);
    if (is_op(g, badd, "Add", 2) && fits_last_axes(g, other(g, badd, m->out), m)) {
        m->bias = other(g, badd, m->out);
        take(m, badd);
        m->out = output0(g, badd);
    }
    return types_agree(g, m);
}

/* The affine scale of a normalisation's result, when its only reader multiplies it by a
 * tensor of the normalised axes' shape: taken into the match. */
static void take_scale(const vp_graph *g, match *m) {
    int mul = only_use(g, m->out);
    if (is_op(g, mul, "Mul", 2) && fits_last_axes(g, other(g, mul, m->out), m)) {
        m->scale = other(g, mul, m->out);
        take(m, mul);
        m->out = output0(g, mul);
    }
}

/* x / sqrt(mean(x^2) + eps) then * scale when present (RMSNorm, as torch writes Llama's,
 * Qwen2's and Gemma's, x^2 as Pow(x, 2) or Mul(x, x), the division as Div or as Mul by
 * the Reciprocal; ONNX's RMSNormalization as infer expands it), from the ReduceMean. */
static int match_rms_norm(const vp_graph *g, int r, match *m) {
    m->axes = 0;
    if (!is_mean_over_last(g, r, &m->axes)) return 0;
    int sq = g->nodes[r].inputs[0], sn = producer(g, sq);
    if (only_use(g, sq) != r) return 0;
    if (is_op(g, sn, "Pow", 2) && is_const(g, g->nodes[sn].inputs[1], 2.0)) m->x = g->nodes[sn].inputs[0];
    else if (is_op(g, sn, "Mul", 2) && g->nodes[sn].inputs[0] == g->nodes[sn].inputs[1]) m->x = g->nodes[sn].inputs[0];
    else return 0;
    m->kind = RMS_NORM;
    m->scale = m->bias = -1;
    take(m, sn);
    take(m, r);
    int add = only_use(g, output0(g, r));
    if (!is_op(g, add, "Add", 2) || !scalar(g, other(g, add, output0(g, r)), &m->eps) || !(m->eps >= 0) ||
        !isfinite(m->eps))
        return 0;
    take(m, add);
    int sqr = only_use(g, output0(g, add));
    if (!is_op(g, sqr, "Sqrt", 1)) return 0;
    take(m, sqr);
    int rms = output0(g, sqr), d = only_use(g, rms);
    if (is_op(g, d, "Div", 2) && g->nodes[d].inputs[0] == m->x && g->nodes[d].inputs[1] == rms) {
        take(m, d);
        m->out = output0(g, d);
    } else if (is_op(g, d, "Reciprocal", 1)) {
        int inv = output0(g, d), mul = only_use(g, inv);
        if (!is_op(g, mul, "Mul", 2) || other(g, mul, inv) != m->x) return 0;
        take(m, d);
        take(m, mul);
        m->out = output0(g, mul);
    } else {
        return 0;
    }
    take_scale(g, m);
    return types_agree(g, m);
}

/* MatMul(A, Transpose(W)) with W a matrix, as torch.onnx writes nn.Linear without
 * constant folding (training exports): the Transpose copies the weight at every step
 * and the copy stays alive for the backward.  FusedMatMul(A, W, transB=1) reads W in
 * place.  Only matrices: the attention core's K^T (rank 4) is the attention pass's. */
static int match_matmul_t(const vp_graph *g, int mm, match *m) {
    if (!is_op(g, mm, "MatMul", 2)) return 0;
    const vp_node *n = &g->nodes[mm];
    int a = n->inputs[0], bt = n->inputs[1], t = producer(g, bt);
    if (a < 0 || bt < 0 || !is_op(g, t, "Transpose", 1) || only_use(g, bt) != mm) return 0;
    int w = g->nodes[t].inputs[0];
    if (w < 0 || g->values[w].rank != 2 || g->values[a].rank < 2) return 0;
    const int64_t *perm = NULL;
    int np = vp_attr_ints(&g->nodes[t], "perm", &perm);
    if (np > 0 && !(np == 2 && perm[0] == 1 && perm[1] == 0)) return 0;
    if (g->values[a].dtype != g->values[w].dtype || !vp_dtype_is_float(g->values[w].dtype)) return 0;
    m->kind = MATMUL_T;
    take(m, t);
    take(m, mm);
    m->x = a;
    m->scale = w;
    m->bias = -1;
    m->out = output0(g, mm);
    return 1;
}

/* SiLU as exporters write it, Mul(x, Sigmoid(x)) (torch's F.silu, Hugging Face's gated
 * MLPs): the sigmoid's output is kept for the backward beside x and the product; ONNX's
 * Swish (opset 24) at alpha 1 computes the same and its gradient recomputes the sigmoid
 * from x, keeping x and y only, as torch's silu_backward does. */
static int match_swish(const vp_graph *g, int sg, match *m) {
    if (!is_op(g, sg, "Sigmoid", 1)) return 0;
    int x = g->nodes[sg].inputs[0], s = output0(g, sg), mul = only_use(g, s);
    if (x < 0 || !is_op(g, mul, "Mul", 2) || other(g, mul, s) != x) return 0;
    if (!vp_dtype_is_float(g->values[x].dtype) || g->values[x].dtype != g->values[output0(g, mul)].dtype) return 0;
    m->kind = SWISH;
    take(m, sg);
    take(m, mul);
    m->x = x;
    m->scale = m->bias = -1;
    m->out = output0(g, mul);
    return 1;
}

/* ---- rewriting ---- */

/* Adds the fused node for m (inputs and attributes, its output the pattern's result);
 * returns its id or -1 when out of memory. */
static int add_fused(vp_graph *g, const match *m) {
    int first = m->nodes[0];
    for (int i = 1; i < m->n_nodes; i++)
        if (m->nodes[i] < first) first = m->nodes[i];
    char name[600];
    snprintf(name, sizeof name, "%s", g->nodes[first].name);
    const vp_value *x = &g->values[m->x];
    if (m->kind == MATMUL_T) {
        int in[2] = {m->x, m->scale};
        int id = vp_graph_add_node(g, "FusedMatMul", "com.microsoft", name, 2, in, 1, &m->out);
        if (id < 0) return -1;
        if (!g->nodes[id].opset) g->nodes[id].opset = 1;
        return vp_node_add_attr_int(g, id, "transB", 1) ? -1 : id;
    }
    if (m->kind == SWISH) {
        int id = vp_graph_add_node(g, "Swish", "", name, 1, &m->x, 1, &m->out);
        if (id < 0) return -1;
        g->nodes[id].opset = 24; /* the opset that defines it, whatever the model imports */
        return vp_node_add_attr_float(g, id, "alpha", 1.0f) ? -1 : id;
    }
    if (m->kind != LAYER_NORM && m->kind != RMS_NORM) {
        int id = vp_graph_add_node(g, m->kind == GELU ? "Gelu" : "FastGelu", "com.microsoft", name, 1, &m->x, 1, &m->out);
        if (id >= 0 && !g->nodes[id].opset) g->nodes[id].opset = 1; /* the model imports no com.microsoft */
        return id;
    }
    int scale = m->scale;
    if (scale < 0) { /* no affine part: LayerNormalization needs a scale, ones */
        int64_t n = 1, dims[VP_MAX_RANK];
        memcpy(dims, x->dims + x->rank - m->axes, (size_t)m->axes * sizeof *dims);
        for (int d = 0; d < m->axes; d++) n *= dims[d];
        void *ones = malloc((size_t)n * vp_dtype_size(x->dtype) + 1);
        if (!ones) return -1;
        for (int64_t i = 0; i < n; i++) vp_store(ones, x->dtype, i, 1.0);
        char stem[640];
        snprintf(stem, sizeof stem, "%s/ones", name);
        scale = vp_build_const(g, stem, g->values[m->x].dtype, m->axes, dims, ones);
        free(ones);
        if (scale < 0) return -1;
    }
    int in[3] = {m->x, scale, m->bias};
    /* ONNX Runtime's LayerNormFusion writes the op in the default domain at the model's
     * opset; the op table accepts it there (planner/ops/linalg.c); its
     * SimplifiedLayerNormFusion writes ONNX Runtime's RMSNorm */
    int rms = m->kind == RMS_NORM;
    int id = vp_graph_add_node(g, rms ? "SimplifiedLayerNormalization" : "LayerNormalization", rms ? "com.microsoft" : "",
                               name, m->bias >= 0 ? 3 : 2, in, 1, &m->out);
    if (id < 0) return -1;
    if (rms && !g->nodes[id].opset) g->nodes[id].opset = 1;
    vp_dtype stash = g->values[m->x].dtype == VP_F64 ? VP_F64 : VP_F32;
    if (vp_node_add_attr_int(g, id, "axis", -m->axes) || vp_node_add_attr_float(g, id, "epsilon", (float)m->eps) ||
        vp_node_add_attr_int(g, id, "stash_type", stash))
        return -1;
    return id;
}

/* The pattern node i starts, if any. */
static int match_at(const vp_graph *g, int i, match *m) {
    int (*const matchers[6])(const vp_graph *, int, match *) = {match_gelu,     match_fast_gelu, match_layer_norm,
                                                                  match_rms_norm, match_matmul_t,  match_swish};
    for (int k = 0; k < 6; k++) {
        memset(m, 0, sizeof *m);
        if (matchers[k](g, i, m)) return m->n_nodes < MAX_PATTERN;
    }
    return 0;
}

static int claimed_any(const char *claimed, const match *m) {
    for (int i = 0; i < m->n_nodes; i++)
        if (claimed[m->nodes[i]]) return 1;
    return 0;
}

vp_status vp_fuse(vp_graph *g, vp_fuse_counts *counts, vp_error *err) {
    memset(counts, 0, sizeof *counts);
    int n0 = g->n_nodes;
    char *claimed = calloc((size_t)n0 + 1, 1);
    int *fused_at = malloc(((size_t)n0 + 1) * sizeof *fused_at); /* at a pattern's last node: its fused node */
    int *order = NULL;
    vp_status s = VP_OK;
    if (!claimed || !fused_at) {
        s = vp_fail(err, VP_ERR_NOMEM, "out of memory fusing patterns");
        goto done;
    }
    for (int i = 0; i < n0; i++) fused_at[i] = -1;
    int n_fused = 0;
    for (int i = 0; i < n0; i++) {
        match m;
        if (!match_at(g, i, &m) || claimed_any(claimed, &m)) continue;
        int last = m.nodes[0];
        for (int k = 0; k < m.n_nodes; k++) {
            claimed[m.nodes[k]] = 1;
            if (m.nodes[k] > last) last = m.nodes[k];
        }
        int id = add_fused(g, &m);
        if (id < 0) {
            s = vp_fail(err, VP_ERR_NOMEM, "out of memory fusing patterns");
            goto done;
        }
        fused_at[last] = id;
        n_fused++;
        counts->removed += m.n_nodes;
        counts->gelu += m.kind == GELU;
        counts->fast_gelu += m.kind == FAST_GELU;
        counts->layer_norm += m.kind == LAYER_NORM;
        counts->matmul_t += m.kind == MATMUL_T;
        counts->swish += m.kind == SWISH;
        counts->rms_norm += m.kind == RMS_NORM;
    }
    if (!n_fused) goto done;
    order = malloc((size_t)g->n_nodes * sizeof *order);
    if (!order) {
        s = vp_fail(err, VP_ERR_NOMEM, "out of memory fusing patterns");
        goto done;
    }
    int n = 0;
    for (int i = 0; i < n0; i++) {
        if (fused_at[i] >= 0) order[n++] = fused_at[i];
        else if (!claimed[i]) order[n++] = i;
    }
    s = vp_graph_keep_nodes(g, order, n, err);
    /* the fused nodes' shapes: the shape functions check what the matcher checked */
    for (int i = 0; !s && i < n; i++) {
        if (order[i] < n0) continue; /* a node of the model */
        const vp_node *f = &g->nodes[i];
        int out = f->outputs[0];
        vp_value before = g->values[out];
        s = vp_infer_node(g, i, 0, NULL, err);
        const vp_value *after = &g->values[out];
        if (!s && (after->dtype != before.dtype || after->rank != before.rank ||
                   memcmp(after->dims, before.dims, sizeof before.dims)))
            s = vp_node_fail(err, VP_ERR_RUNTIME, f, "internal: the fused op changed its output's shape");
    }
done:
    free(claimed);
    free(fused_at);
    free(order);
    return s;
}
