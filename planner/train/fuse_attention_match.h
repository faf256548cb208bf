/* The attention fusion's matching (fuse_attention_match.c), shared with its rewriting
 * (fuse_attention.c): what one match of the patterns fuse_attention.h lists holds, and
 * the small readers of the graph both sides use.  Internal to the pass. */
#ifndef VP_FUSE_ATTENTION_MATCH_H
#define VP_FUSE_ATTENTION_MATCH_H

#include <string.h>

#include "ir/ir.h"
#include "train/pattern.h"

typedef struct match {
    int mm1, scale_node, mask_node, softmax, mm2; /* node ids; -1 where absent */
    int mask2_node;                               /* Add(Add(S, mask), mask2), the outer Add, or -1 */
    int q_scale, k_scale;                         /* Mul(Q, c) / Mul(K^T, c) before mm1, or -1 */
    int guard_isnan, guard_where;                 /* Where(IsNaN(P), 0, P) after the Softmax, or -1 */
    int rows_kept;                                /* Mul(P, R) after the Softmax (R: rows_kept_cond), or -1 */
    int rows_kept_cond;                           /* R from a condition C: ReduceMax(Cast(C)), or -1 (ones) */
    int cap_div, cap_tanh, cap_mul;               /* Mul(Tanh(Div(S, c)), c), the soft-capping, or -1 */
    int p_cast;                                   /* a Cast of P to its own dtype before mm2, or -1 */
    int clamp;                                    /* Max(S, c) before the Softmax (c <= -1e30), or -1 */
    int dropout;                                  /* a training Dropout of P before mm2 (ours: vplan_step), or -1 */
    double dropout_ratio;                         /* its ratio, 0 where absent */
    int64_t dropout_seed;                         /* its seed */
    int zero_rows;                                /* rows masked everywhere give 0s (zero_masked_rows) */
    int q, kt, v;                                 /* value ids */
    int mask;                                     /* Add's additive mask, or -1 */
    int mask2;                                    /* a second one added after it, or -1 */
    int cond, fill, fill_then;                    /* Where: condition, fill scalar, fill in the then branch */
    double scale;
    double softcap;                               /* its c, 0 where absent */
} match;

static inline const vp_node *producer(const vp_graph *g, int v, const char *op) {
    if (v < 0 || g->values[v].producer < 0) return NULL;
    const vp_node *n = &g->nodes[g->values[v].producer];
    return !strcmp(n->op_type, op) && !n->domain[0] ? n : NULL;
}

/* v is read by exactly one node, `node`, and is no graph output. */
static inline int only_use(const vp_graph *g, int v, int node) {
    const vp_value *x = &g->values[v];
    return !(x->flags & VP_VAL_OUTPUT) && x->n_consumers == 1 && x->consumers[0] == node;
}

static inline int in(const vp_node *n, int k) { return k < n->n_inputs ? n->inputs[k] : -1; }

static inline int fixed_data(const vp_value *v) { return vp_pattern_fixed_data(v); }

static inline int node_id(const vp_graph *g, const vp_node *n) { return n ? (int)(n - g->nodes) : -1; }

/* Walks up from the MatMul `node` through the Softmax, the mask and scale stages to the
 * MatMul of Q and K^T; fills m and returns 1 when every condition holds. */
int vp_attention_match(const vp_graph *g, int node, match *m);

#endif
