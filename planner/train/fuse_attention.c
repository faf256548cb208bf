/* The attention fusion (fuse_attention.h says what it matches and what it keeps true).
 *
 * Matching walks up from each MatMul through Softmax, the optional mask and scale ops,
 * to the MatMul of Q and K^T, checking every condition on the way; a rewrite then
 * appends the new nodes (the K transpose where one is needed, the mask, the Attention)
 * and marks the replaced ones dead.  At the end one reorder puts each Attention at its
 * last MatMul's place and drops the dead nodes, so the node order stays topological. */
#include "train/fuse_attention.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/dtype_conv.h"
#include "ir/graph_build.h"
#include "ir/infer.h"
#include "train/pattern.h"

typedef struct match {
    int mm1, scale_node, mask_node, softmax, mm2; /* node ids; -1 where absent */
    int mask2_node;                               /* Add(Add(S, mask), mask2), the outer Add, or -1 */
    int q_scale, k_scale;                         /* Mul(Q, c) / Mul(K^T, c) before mm1, or -1 */
    int guard_isnan, guard_where;                 /* Where(IsNaN(P), 0, P) after the Softmax, or -1 */
    int rows_kept;                                /* Mul(P, R) after the Softmax (R: rows_kept_cond), or -1 */
    int rows_kept_cond;                           /* R from a condition C: ReduceMax(Cast(C)), or -1 (ones) */
    int zero_rows;                                /* rows masked everywhere give 0s (zero_masked_rows) */
    int q, kt, v;                                 /* value ids */
    int mask;                                     /* Add's additive mask, or -1 */
    int mask2;                                    /* a second one added after it, or -1 */
    int cond, fill, fill_then;                    /* Where: condition, fill scalar, fill in the then branch */
    double scale;
} match;

typedef struct fuser {
    vp_graph *g;
    const vp_fuse_attention_opts *o;
    int n_orig_values;
    int n_orig_nodes;
    char *dead;       /* per node (grown as nodes are added) */
    int *insert_at;   /* per original node: first of its inserted nodes in `inserted`, or -1 */
    int *n_insert;
    int *inserted;
    int n_inserted, cap_inserted;
    int *masks, n_masks; /* the constant masks the fused cores read so far, each once */
    int *sums, n_sums;   /* (mask, mask2, their Add's output) made so far, each pair once */
    int causal_seen;     /* the last mask found causal, -1: none */
} fuser;

/* ---- reading the graph ---- */

static const vp_node *producer(const vp_graph *g, int v, const char *op) {
    if (v < 0 || g->values[v].producer < 0) return NULL;
    const vp_node *n = &g->nodes[g->values[v].producer];
    return !strcmp(n->op_type, op) && !n->domain[0] ? n : NULL;
}

/* v is read by exactly one node, `node`, and is no graph output. */
static int only_use(const vp_graph *g, int v, int node) {
    const vp_value *x = &g->values[v];
    return !(x->flags & VP_VAL_OUTPUT) && x->n_consumers == 1 && x->consumers[0] == node;
}

static int in(const vp_node *n, int k) { return k < n->n_inputs ? n->inputs[k] : -1; }

static int fixed_data(const vp_value *v) { return vp_pattern_fixed_data(v); }

static int scalar_const(const vp_graph *g, int v, double *out) { return vp_pattern_fixed_scalar(g, v, out); }

static int node_id(const vp_graph *g, const vp_node *n) { return n ? (int)(n - g->nodes) : -1; }

/* A shape that broadcasts to full [4] without growing it. */
static int fits(const vp_value *m, const int64_t *full) {
    if (m->rank > 4) return 0;
    for (int d = 0; d < m->rank; d++) {
        int64_t md = m->dims[m->rank - 1 - d];
        if (md != 1 && md != full[3 - d]) return 0;
    }
    return 1;
}

/* The mask stage: Add(S, M) / Add(M, S), or Where(C, S, f) / Where(C, f, S) with f
 * -inf or at most -1e30 (there S + f rounds to f for any score under 1e22, so the
 * additive form computes the same).  Sets *chain to the scores before it. */
static int match_mask(const vp_graph *g, const vp_node *n, match *m, int *chain) {
    if (!strcmp(n->op_type, "Add") && n->n_inputs == 2) {
        for (int side = 0; side < 2; side++) {
            int c = n->inputs[side];
            if (producer(g, c, "MatMul") || producer(g, c, "Mul") || producer(g, c, "Div")) {
                *chain = c;
                m->mask = n->inputs[1 - side];
                return 1;
            }
        }
        return 0;
    }
    if (!strcmp(n->op_type, "Where") && n->n_inputs == 3) {
        double f;
        for (int then = 0; then < 2; then++) {
            int fill = n->inputs[then ? 1 : 2];
            if (!scalar_const(g, fill, &f) || !(f <= -1e30)) continue;
            m->cond = n->inputs[0];
            m->fill = fill;
            m->fill_then = then;
            *chain = n->inputs[then ? 2 : 1];
            return g->values[m->cond].dtype == VP_BOOL;
        }
    }
    return 0;
}

/* Add(Add(S, M1), M2) (either order at either Add): T5 adds its trained position bias,
 * then the padding or causal mask.  The inner Add is read only by the outer one. */
static int match_two_masks(const vp_graph *g, const vp_node *outer, match *m, int *chain, const vp_node **inner) {
    if (strcmp(outer->op_type, "Add") || outer->n_inputs != 2) return 0;
    for (int side = 0; side < 2; side++) {
        int c = outer->inputs[side];
        const vp_node *a = producer(g, c, "Add");
        if (!a || !only_use(g, c, node_id(g, outer)) || !match_mask(g, a, m, chain)) continue;
        m->mask2 = outer->inputs[1 - side];
        m->mask2_node = node_id(g, outer);
        *inner = a;
        return 1;
    }
    return 0;
}

/* Add(Where(C, S, f), M) (either order): GPT-Neo fills the causal window's outside with
 * torch.finfo.min, then adds the padding mask.  The Where is read only by the Add; C
 * and f become the mask as in match_mask, M a second mask added to it (f + M where C
 * masks, S + M where it keeps: the same sums as the fused core's S + (where-mask + M)). */
static int match_fill_then_mask(const vp_graph *g, const vp_node *add, match *m, int *chain, const vp_node **where) {
    if (strcmp(add->op_type, "Add") || add->n_inputs != 2) return 0;
    for (int side = 0; side < 2; side++) {
        int c = add->inputs[side], scores;
        const vp_node *w = producer(g, c, "Where");
        if (!w || !only_use(g, c, node_id(g, add)) || !match_mask(g, w, m, &scores)) continue;
        if (!producer(g, scores, "MatMul") && !producer(g, scores, "Mul") && !producer(g, scores, "Div")) {
            m->cond = m->fill = -1;
            continue;
        }
        *chain = scores;
        m->mask2 = add->inputs[1 - side];
        m->mask2_node = node_id(g, add);
        *where = w;
        return 1;
    }
    return 0;
}

/* Where(IsNaN(P), 0, P) with P read by those two nodes only. */
static int match_nan_guard(const vp_graph *g, const vp_node *gw, match *m) {
    double zero;
    int p = in(gw, 2);
    const vp_node *isnan = producer(g, in(gw, 0), "IsNaN");
    if (gw->n_inputs != 3 || !isnan || in(isnan, 0) != p || !scalar_const(g, in(gw, 1), &zero) || zero != 0) return 0;
    if (!only_use(g, in(gw, 0), node_id(g, gw))) return 0;
    const vp_value *pv = &g->values[p];
    if ((pv->flags & VP_VAL_OUTPUT) || pv->n_consumers != 2) return 0;
    for (int c = 0; c < 2; c++)
        if (pv->consumers[c] != node_id(g, gw) && pv->consumers[c] != node_id(g, isnan)) return 0;
    m->guard_isnan = node_id(g, isnan);
    m->guard_where = node_id(g, gw);
    return 1;
}

/* Mul(P, R) (either order), R a constant of ones: ONNX's Attention (opset 23), as
 * planner/ir/attention_op.c expands it, zeroes the rows its mask keeps no key of by
 * multiplying the probabilities by whether each row keeps any; with a constant mask that
 * keeps a key in every row (a causal one), R is all ones and the product changes nothing.
 * Sets *p to P. */
static int match_rows_kept(const vp_graph *g, const vp_node *mul, int *p, int *cond) {
    if (mul->n_inputs != 2) return 0;
    for (int k = 0; k < 2; k++) {
        int rv = in(mul, 1 - k);
        const vp_value *r = &g->values[rv];
        if (!producer(g, in(mul, k), "Softmax") || !vp_dtype_is_float(r->dtype)) continue;
        if (fixed_data(r)) {
            int64_t n = vp_value_numel(r), i = 0;
            while (i < n && vp_load(r->data, r->dtype, i) == 1.0) i++;
            if (i < n) return 0;
            *p = in(mul, k);
            *cond = -1;
            return 1;
        }
        /* R = ReduceMax(Cast(C), axes = the last, keepdims): whether row i keeps a key */
        const vp_node *rm = producer(g, rv, "ReduceMax"), *cast = rm ? producer(g, in(rm, 0), "Cast") : NULL;
        const vp_value *a = rm && in(rm, 1) >= 0 ? &g->values[in(rm, 1)] : NULL;
        const vp_value *cv = cast ? &g->values[in(cast, 0)] : NULL;
        if (!cast || !a || !fixed_data(a) || vp_value_numel(a) != 1 || vp_attr_int(rm, "keepdims", 1) != 1 ||
            cv->dtype != VP_BOOL)
            return 0;
        int64_t axis = (int64_t)vp_load(a->data, a->dtype, 0);
        if (axis != -1 && axis != cv->rank - 1) return 0;
        *p = in(mul, k);
        *cond = in(cast, 0);
        return 1;
    }
    return 0;
}

/* *x = Mul(x0, c) (or Mul(c, x0)), c a scalar constant, read only by `user`: *x becomes x0,
 * *scale is multiplied by c; returns the Mul's id, or -1 (nothing changed). */
static int split_scale(const vp_graph *g, int *x, int user, double *scale) {
    const vp_node *mul = producer(g, *x, "Mul");
    double c;
    if (!mul || mul->n_inputs != 2 || !only_use(g, *x, user)) return -1;
    for (int k = 0; k < 2; k++)
        if (scalar_const(g, in(mul, 1 - k), &c)) {
            *scale *= c;
            *x = in(mul, k);
            return node_id(g, mul);
        }
    return -1;
}

/* Whether the mask keeps at least one key in every row: none, or a constant one. */
static int mask_keeps_every_row(const vp_graph *g, const match *m) {
    int v = m->mask >= 0 ? m->mask : m->cond;
    if (v < 0) return 1;
    const vp_value *x = &g->values[v];
    if (!fixed_data(x) || x->rank < 1) return 0;
    int64_t t = x->dims[x->rank - 1], rows = t ? vp_value_numel(x) / t : 0;
    for (int64_t r = 0; r < rows; r++) {
        int kept = 0;
        for (int64_t j = 0; j < t && !kept; j++) {
            if (m->mask >= 0) kept = !(vp_load(x->data, x->dtype, r * t + j) <= -1e30);
            else kept = (((const unsigned char *)x->data)[r * t + j] != 0) != m->fill_then;
        }
        if (!kept) return 0;
    }
    return 1;
}

/* Walks up from the MatMul `node`; fills m and returns 1 when every condition holds. */
static int match_at(const fuser *fz, int node, match *m) {
    const vp_graph *g = fz->g;
    const vp_node *mm2 = &g->nodes[node], *sm, *mk = NULL, *sc = NULL, *mm1;
    memset(m, -1, sizeof *m);
    m->scale = 1.0;
    if (strcmp(mm2->op_type, "MatMul") || mm2->domain[0] || mm2->n_inputs != 2) return 0;
    int p = mm2->inputs[0], p_user = node;
    const vp_node *gw = producer(g, p, "Where");
    const vp_node *keep = producer(g, p, "Mul");
    if (gw && only_use(g, p, node) && match_nan_guard(g, gw, m)) { /* torch 2.x's guard of fully masked rows */
        p_user = -1;
        p = in(gw, 2);
    } else if (keep && only_use(g, p, node) && match_rows_kept(g, keep, &p, &m->rows_kept_cond)) {
        m->rows_kept = p_user = node_id(g, keep); /* ONNX Attention's, expanded */
    }
    if (!(sm = producer(g, p, "Softmax")) || (p_user >= 0 && !only_use(g, p, p_user))) return 0;
    const vp_value *pv = &g->values[p];
    int64_t axis = vp_attr_int(sm, "axis", sm->opset >= 13 ? -1 : 1);
    if (pv->rank != 4 || (axis != -1 && axis != 3)) return 0;
    int x = in(sm, 0), chain = x, fill_first = 0;
    const vp_node *up = g->values[x].producer >= 0 ? &g->nodes[g->values[x].producer] : NULL;
    if (up && !up->domain[0] && (!strcmp(up->op_type, "Add") || !strcmp(up->op_type, "Where"))) {
        if (!only_use(g, x, node_id(g, sm))) return 0;
        if (!match_mask(g, up, m, &chain)) {
            m->mask = m->cond = -1;
            fill_first = match_fill_then_mask(g, up, m, &chain, &mk); /* the Where reads the scores */
            if (!fill_first && !match_two_masks(g, up, m, &chain, &mk)) return 0;
        } else {
            mk = up;
            /* masked_fill over the scores plus a bias (DeBERTa's relative position terms,
             * computed from parameters): the bias a second mask, under the Where's */
            const vp_node *inner = m->cond >= 0 ? producer(g, chain, "Add") : NULL;
            for (int side = 0; inner && inner->n_inputs == 2 && only_use(g, chain, node_id(g, up)) && side < 2; side++) {
                int c = inner->inputs[side];
                if (!producer(g, c, "MatMul") && !producer(g, c, "Mul") && !producer(g, c, "Div")) continue;
                m->mask2 = inner->inputs[1 - side];
                m->mask2_node = node_id(g, inner);
                chain = c;
                break;
            }
        }
    }
    /* the node reading the scores: the Add under DeBERTa's Where, else the mask stage */
    int after = m->mask2_node >= 0 && m->cond >= 0 && !fill_first ? m->mask2_node : node_id(g, mk ? mk : sm);
    if ((sc = producer(g, chain, "Mul")) || (sc = producer(g, chain, "Div"))) {
        double c;
        int div = !strcmp(sc->op_type, "Div"), k;
        if (!only_use(g, chain, after)) return 0;
        if (scalar_const(g, in(sc, 1), &c)) k = 0;
        else if (!div && scalar_const(g, in(sc, 0), &c)) k = 1;
        else return 0;
        if (div && c == 0) return 0;
        m->scale = div ? 1.0 / c : c;
        chain = in(sc, k);
        after = node_id(g, sc);
    }
    if (!(mm1 = producer(g, chain, "MatMul")) || !only_use(g, chain, after)) return 0;
    m->q = in(mm1, 0);
    m->kt = in(mm1, 1);
    /* torch 2.x scales Q and K^T each by sqrt(scale) before their product */
    m->q_scale = split_scale(g, &m->q, node_id(g, mm1), &m->scale);
    m->k_scale = split_scale(g, &m->kt, node_id(g, mm1), &m->scale);
    m->v = mm2->inputs[1];
    const vp_value *q = &g->values[m->q], *kt = &g->values[m->kt], *v = &g->values[m->v], *s = &g->values[chain];
    if (q->rank != 4 || kt->rank != 4 || v->rank != 4 || !vp_dtype_is_float(q->dtype)) return 0;
    if (kt->dtype != q->dtype || v->dtype != q->dtype || s->dtype != q->dtype) return 0;
    int64_t B = q->dims[0], H = q->dims[1], S = q->dims[2], T = kt->dims[3];
    if (kt->dims[0] != B || kt->dims[1] != H || kt->dims[2] != q->dims[3]) return 0;
    if (v->dims[0] != B || v->dims[1] != H || v->dims[2] != T) return 0;
    int64_t full[4] = {B, H, S, T};
    for (int k = 0; k < 2; k++) { /* masks that depend on a parameter get their gradient from AttentionGrad */
        int mv = k ? m->mask2 : m->mask;
        if (mv >= 0 && (g->values[mv].dtype != q->dtype || !fits(&g->values[mv], full))) return 0;
    }
    if (m->cond >= 0 && (!fits(&g->values[m->cond], full) || g->values[m->fill].dtype != q->dtype)) return 0;
    /* the guard turns a row masked whole into 0s, which Attention does not: it goes only
     * where no row can be (no mask, or a constant one keeping a key in every row) */
    /* the guard turns a row masked whole (-inf everywhere) into 0s: unless no row can be
     * (no mask, or a constant one keeping a key in every row), Attention does the same
     * under zero_masked_rows */
    m->zero_rows = m->guard_where >= 0 && (m->mask2 >= 0 || !mask_keeps_every_row(g, m)); /* (one mask checked) */
    /* ONNX Attention's zeroing, computed from the Where's own condition C (the keep
     * side in its then branch): C keeping no key of a row is every score -inf once the
     * fill is -inf, which changes no row that keeps one */
    if (m->rows_kept_cond >= 0) {
        if (m->rows_kept_cond != m->cond || m->fill_then || m->mask2 >= 0) return 0;
        m->zero_rows = 1;
    }
    m->mm1 = node_id(g, mm1);
    m->scale_node = node_id(g, sc);
    m->mask_node = node_id(g, mk);
    m->softmax = node_id(g, sm);
    m->mm2 = node;
    return 1;
}

/* ---- rewriting ---- */

static vp_status nomem(vp_error *err) { return vp_fail(err, VP_ERR_NOMEM, "out of memory fusing attention"); }

static vp_status note_insert(fuser *fz, int at, int node, vp_error *err) {
    if (fz->n_inserted == fz->cap_inserted) {
        int cap = fz->cap_inserted ? 2 * fz->cap_inserted : 16;
        int *p = realloc(fz->inserted, (size_t)cap * sizeof *p);
        if (!p) return nomem(err);
        fz->inserted = p;
        fz->cap_inserted = cap;
    }
    if (fz->insert_at[at] < 0) fz->insert_at[at] = fz->n_inserted;
    fz->inserted[fz->n_inserted++] = node;
    fz->n_insert[at]++;
    char *d = realloc(fz->dead, (size_t)fz->g->n_nodes);
    if (!d) return nomem(err);
    fz->dead = d;
    d[node] = 0;
    return VP_OK;
}

/* Adds a node of one new output named after stem, infers it, notes it for `at`. */
static vp_status add_node(fuser *fz, int at, const char *op, const char *domain, const char *name, int n_in,
                          const int *ins, int n_out, int *outs, vp_error *err) {
    vp_graph *g = fz->g;
    int o[2];
    for (int k = 0; k < n_out; k++) {
        if (outs[k] >= 0) {
            o[k] = outs[k];
            continue;
        }
        char stem[600];
        snprintf(stem, sizeof stem, "%.570s_output_%d", name, k); /* cut: made unique below */
        if ((o[k] = vp_graph_add_unique_value(g, stem)) < 0) return nomem(err);
    }
    int id = vp_graph_add_node(g, op, domain, name, n_in, ins, n_out, o);
    if (id < 0) return nomem(err);
    g->nodes[id].opset = g->nodes[at].opset;
    for (int k = 0; k < n_out; k++) {
        outs[k] = o[k];
        g->values[o[k]].producer = id;
    }
    return note_insert(fz, at, id, err);
}

static vp_status infer_last(fuser *fz, vp_error *err) {
    return vp_infer_node(fz->g, fz->inserted[fz->n_inserted - 1], 0, NULL, err);
}

/* torch 2.x writes K^T [B,H,D,T] as Reshape(Transpose(Reshape(K, [B*H,T,D]), [0,2,1]),
 * [B,H,D,T]): K itself, the Transpose and the outer Reshape marked dead when each
 * output has no other reader (the inner Reshape too when it has none), else -1. */
static int k_of_merged_transpose(fuser *fz, const match *m) {
    vp_graph *g = fz->g;
    const vp_node *r2 = producer(g, m->kt, "Reshape"), *t, *r1;
    if (!r2 || !only_use(g, m->kt, m->k_scale >= 0 ? m->k_scale : m->mm1)) return -1;
    int x3t = in(r2, 0), x3, k4;
    if (!(t = producer(g, x3t, "Transpose")) || !only_use(g, x3t, node_id(g, r2))) return -1;
    const int64_t *perm;
    if (vp_attr_ints(t, "perm", &perm) != 3 || perm[0] != 0 || perm[1] != 2 || perm[2] != 1) return -1;
    x3 = in(t, 0);
    if (!(r1 = producer(g, x3, "Reshape"))) return -1;
    k4 = in(r1, 0);
    const vp_value *kv = &g->values[k4], *kt = &g->values[m->kt];
    if (kv->rank != 4 || kv->dims[0] != kt->dims[0] || kv->dims[1] != kt->dims[1] || kv->dims[2] != kt->dims[3] ||
        kv->dims[3] != kt->dims[2])
        return -1;
    const vp_value *v3 = &g->values[x3];
    if (v3->rank != 3 || v3->dims[0] != kv->dims[0] * kv->dims[1] || v3->dims[1] != kv->dims[2]) return -1;
    /* K's merged view may have other readers (DeBERTa's position terms read K too) */
    if (only_use(g, x3, node_id(g, t))) fz->dead[node_id(g, r1)] = 1;
    fz->dead[node_id(g, t)] = fz->dead[node_id(g, r2)] = 1;
    return k4;
}

/* K [B,H,T,D] from K^T: the producing Transpose changed (or gone), else a new one. */
static vp_status make_k(fuser *fz, const match *m, const char *base, int *k, vp_error *err) {
    vp_graph *g = fz->g;
    const vp_node *t = producer(g, m->kt, "Transpose");
    if (t && only_use(g, m->kt, m->k_scale >= 0 ? m->k_scale : m->mm1) && g->values[in(t, 0)].rank == 4) {
        int tid = node_id(g, t);
        const int64_t *p;
        int64_t perm[4] = {3, 2, 1, 0};
        if (vp_attr_ints(t, "perm", &p) == 4) memcpy(perm, p, sizeof perm);
        int64_t swap = perm[2];
        perm[2] = perm[3];
        perm[3] = swap;
        if (perm[0] == 0 && perm[1] == 1 && perm[2] == 2 && perm[3] == 3) {
            fz->dead[tid] = 1;
            *k = in(t, 0);
            return VP_OK;
        }
        vp_node *tn = &g->nodes[tid];
        for (int a = 0; a < tn->n_attrs; a++)
            if (!strcmp(tn->attrs[a].name, "perm")) memcpy(tn->attrs[a].ints, perm, sizeof perm);
        if (!vp_node_attr(tn, "perm") && vp_node_add_attr_ints(g, tid, "perm", perm, 4)) return nomem(err);
        *k = m->kt;
        return vp_infer_node(g, tid, 0, NULL, err);
    }
    int k4 = k_of_merged_transpose(fz, m);
    if (k4 >= 0) {
        *k = k4;
        return VP_OK;
    }
    static const int64_t swap_last[4] = {0, 1, 3, 2};
    char name[600];
    snprintf(name, sizeof name, "%s/K", base);
    *k = -1;
    vp_status s = add_node(fz, m->mm2, "Transpose", "", name, 1, &m->kt, 1, k, err);
    if (!s && vp_node_add_attr_ints(g, fz->inserted[fz->n_inserted - 1], "perm", swap_last, 4)) s = nomem(err);
    return s ? s : infer_last(fz, err);
}

/* The additive mask of a Where(C, S, f) / Where(C, f, S): a constant when C is one. */
static vp_status make_where_mask(fuser *fz, const match *m, const char *base, int *mask, vp_error *err) {
    vp_graph *g = fz->g;
    vp_dtype dt = g->values[m->q].dtype;
    double f = m->rows_kept_cond >= 0 ? -INFINITY : vp_load(g->values[m->fill].data, dt, 0);
    const vp_value *c = &g->values[m->cond];
    char name[600];
    snprintf(name, sizeof name, "%s/mask", base);
    if (fixed_data(c)) {
        int64_t count = vp_value_numel(c), dims[VP_MAX_RANK];
        int rank = c->rank;
        memcpy(dims, c->dims, sizeof dims);
        void *data = malloc((size_t)(count ? count : 1) * vp_dtype_size(dt));
        if (!data) return nomem(err);
        for (int64_t i = 0; i < count; i++)
            vp_store(data, dt, i, (((const unsigned char *)c->data)[i] != 0) == m->fill_then ? f : 0.0);
        *mask = vp_build_const(g, name, dt, rank, dims, data);
        free(data);
        return *mask < 0 ? nomem(err) : VP_OK;
    }
    unsigned char zero_bytes[8] = {0}, fill_bytes[8];
    int zero = vp_build_const(g, "attention_mask_zero", dt, 0, NULL, zero_bytes), fill = m->fill;
    if (m->rows_kept_cond >= 0) {
        vp_store(fill_bytes, dt, 0, -INFINITY);
        fill = vp_build_const(g, "attention_mask_fill", dt, 0, NULL, fill_bytes);
    }
    if (zero < 0 || fill < 0) return nomem(err);
    int ins[3] = {m->cond, m->fill_then ? fill : zero, m->fill_then ? zero : fill};
    *mask = -1;
    vp_status s = add_node(fz, m->mm2, "Where", "", name, 3, ins, 1, mask, err);
    return s ? s : infer_last(fz, err);
}

/* Whether element x of a mask is what a causal mask holds at (i, j): 0 on and below the
 * diagonal, -inf or the dtype's lowest (torch's finfo.min) above. */
#define CAUSAL_AT(x, i, j) ((j) <= (i) ? (x) == 0 : (x) <= -1e30)

/* A constant mask [.., S, T] that is 0 on and below the diagonal and -inf above, in
 * every [S, T] slice (torch 2.x expands it over the batch).  Every layer's core reads
 * its own copy of the same mask, batch x seq x seq: one slice is checked element by
 * element, the others and a copy of the last mask found causal compared as bytes. */
static int causal_mask(fuser *fz, int mask, int64_t S, int64_t T) {
    const vp_graph *g = fz->g;
    const vp_value *m = &g->values[mask];
    if (!fixed_data(m) || m->rank < 2 || S <= 0 || T <= 0) return 0;
    if (m->dims[m->rank - 2] != S || m->dims[m->rank - 1] != T) return 0;
    size_t slice = (size_t)(S * T) * vp_dtype_size(m->dtype), bytes = slice * (size_t)(vp_value_numel(m) / (S * T));
    if (fz->causal_seen >= 0) {
        const vp_value *c = &g->values[fz->causal_seen];
        if (c->dtype == m->dtype && c->rank == m->rank && !memcmp(c->dims, m->dims, (size_t)m->rank * sizeof *m->dims) &&
            !memcmp(c->data, m->data, bytes))
            return 1;
    }
    const float *f = m->dtype == VP_F32 ? m->data : NULL; /* the common case, without a load per element */
    for (int64_t i = 0; i < S; i++)
        for (int64_t j = 0; j < T; j++)
            if (!(f ? CAUSAL_AT(f[i * T + j], i, j) : CAUSAL_AT(vp_load(m->data, m->dtype, i * T + j), i, j))) return 0;
    for (size_t at = slice; at < bytes; at += slice)
        if (memcmp((const char *)m->data + at, m->data, slice)) return 0;
    fz->causal_seen = mask;
    return 1;
}
#undef CAUSAL_AT

/* A constant mask of zeros adds nothing to any score (S + 0 is S, bit for bit): the
 * padding mask of a batch with no padding, which Hugging Face builds all the same. */
static int zero_mask(const vp_graph *g, int mask) {
    const vp_value *m = &g->values[mask];
    if (!fixed_data(m) || !vp_dtype_is_float(m->dtype)) return 0;
    for (int64_t i = 0, n = vp_value_numel(m); i < n; i++)
        if (vp_load(m->data, m->dtype, i) != 0) return 0;
    return 1;
}

/* A constant mask with the bits of one an earlier core reads: that one (every layer of a
 * Hugging Face model builds its own copy of the same mask, each a constant of batch x
 * seq x seq otherwise). */
static vp_status shared_mask(fuser *fz, int *mask, vp_error *err) {
    const vp_graph *g = fz->g;
    const vp_value *m = &g->values[*mask];
    if (!fixed_data(m)) return VP_OK;
    size_t bytes = (size_t)vp_value_numel(m) * (size_t)vp_dtype_size(m->dtype);
    for (int i = 0; i < fz->n_masks; i++) {
        const vp_value *o = &g->values[fz->masks[i]];
        if (o->dtype == m->dtype && o->rank == m->rank && !memcmp(o->dims, m->dims, (size_t)m->rank * sizeof *m->dims) &&
            !memcmp(o->data, m->data, bytes)) {
            *mask = fz->masks[i];
            return VP_OK;
        }
    }
    int *grown = realloc(fz->masks, ((size_t)fz->n_masks + 1) * sizeof *grown);
    if (!grown) return nomem(err);
    fz->masks = grown;
    fz->masks[fz->n_masks++] = *mask;
    return VP_OK;
}

/* Two additive masks as one, mask + mask2, made once for each pair (T5's layers add the
 * same position bias and the same padding mask): the Add goes before the first core
 * reading it. */
static vp_status mask_sum(fuser *fz, const match *m, const char *base, int *mask, int mask2, vp_error *err) {
    for (int i = 0; i < fz->n_sums; i++)
        if (fz->sums[3 * i] == *mask && fz->sums[3 * i + 1] == mask2) {
            *mask = fz->sums[3 * i + 2];
            return VP_OK;
        }
    int *grown = realloc(fz->sums, ((size_t)fz->n_sums + 1) * 3 * sizeof *grown);
    if (!grown) return nomem(err);
    fz->sums = grown;
    char name[600];
    snprintf(name, sizeof name, "%s/masks_added", base);
    int out = -1;
    vp_status s = add_node(fz, m->mm2, "Add", "", name, 2, (int[]){*mask, mask2}, 1, &out, err);
    if (!s) s = infer_last(fz, err);
    if (s) return s;
    fz->sums[3 * fz->n_sums] = *mask;
    fz->sums[3 * fz->n_sums + 1] = mask2;
    fz->sums[3 * fz->n_sums++ + 2] = out;
    *mask = out;
    return VP_OK;
}

static vp_status rewrite(fuser *fz, const match *m, vp_error *err) {
    vp_graph *g = fz->g;
    char base[512];
    const char *name = g->nodes[m->mm2].name, *slash = strrchr(name, '/');
    snprintf(base, sizeof base, "%.*s%s", slash ? (int)(slash - name) : (int)strlen(name), name,
             slash ? "" : "_attention");
    int k, mask = m->mask;
    vp_status s = make_k(fz, m, base, &k, err);
    if (!s && m->cond >= 0) s = make_where_mask(fz, m, base, &mask, err);
    if (s) return s;
    int causal = 0, mask2 = m->mask2;
    int64_t S = g->values[m->q].dims[2], T = g->values[k].dims[2];
    for (int t = 0; t < 2; t++) {
        int *mv = t ? &mask2 : &mask;
        if (*mv >= 0 && fz->o && fz->o->detect_causal && causal_mask(fz, *mv, S, T)) {
            causal = 1;
            *mv = -1;
        }
        if (*mv >= 0 && zero_mask(g, *mv)) *mv = -1;
    }
    if (mask < 0) mask = mask2, mask2 = -1;
    if (mask2 >= 0 && (s = mask_sum(fz, m, base, &mask, mask2, err))) return s;
    if (mask >= 0 && (s = shared_mask(fz, &mask, err))) return s;
    int y = g->nodes[m->mm2].outputs[0];
    g->nodes[m->mm2].outputs[0] = -1; /* Y is the Attention's now */
    /* Y read only by the transpose to [B, S, H, Dv] that merges the heads: the Attention
     * writes that layout itself, so Y is kept once for the backward, not beside its
     * transposed copy (the output projection's input) */
    int bshd = -1, same = -1;
    const vp_value *yv = &g->values[y];
    if (yv->n_consumers == 1 && !(yv->flags & VP_VAL_OUTPUT)) {
        /* torch 2.x's dynamo writes a Reshape to Y's own shape before the transpose */
        const vp_node *r = &g->nodes[yv->consumers[0]];
        if (!strcmp(r->op_type, "Reshape") && !r->domain[0] && r->n_outputs == 1 && r->outputs[0] >= 0) {
            const vp_value *rv = &g->values[r->outputs[0]];
            if (rv->n_consumers == 1 && !(rv->flags & VP_VAL_OUTPUT) && rv->rank == yv->rank &&
                !memcmp(rv->dims, yv->dims, (size_t)yv->rank * sizeof *yv->dims)) {
                same = yv->consumers[0];
                yv = rv;
            }
        }
        const vp_node *t = &g->nodes[yv->consumers[0]];
        const int64_t *perm;
        if (!strcmp(t->op_type, "Transpose") && !t->domain[0] && t->n_outputs == 1 && t->outputs[0] >= 0 &&
            vp_attr_ints(t, "perm", &perm) == 4 && perm[0] == 0 && perm[1] == 2 && perm[2] == 1 && perm[3] == 3)
            bshd = yv->consumers[0];
    }
    if (bshd >= 0) {
        if (same >= 0) fz->dead[same] = 1;
        fz->dead[bshd] = 1;
        y = g->nodes[bshd].outputs[0];
        g->nodes[bshd].outputs[0] = -1;
    }
    int ins[4] = {m->q, k, m->v, mask}, outs[2] = {y, -1};
    char aname[600];
    snprintf(aname, sizeof aname, "%s/Attention", base);
    if ((s = add_node(fz, m->mm2, "Attention", "vplan", aname, mask >= 0 ? 4 : 3, ins, 2, outs, err))) return s;
    int a = fz->inserted[fz->n_inserted - 1];
    if (vp_node_add_attr_float(g, a, "scale", (float)m->scale) || vp_node_add_attr_int(g, a, "causal", causal) ||
        (bshd >= 0 && vp_node_add_attr_int(g, a, "y_bshd", 1)) ||
        (m->zero_rows && vp_node_add_attr_int(g, a, "zero_masked_rows", 1)))
        return nomem(err);
    int gone[11] = {m->mm1, m->scale_node, m->mask_node, m->softmax, m->mm2, m->q_scale, m->k_scale, m->guard_isnan,
                    m->guard_where, m->mask2_node, m->rows_kept};
    for (int i = 0; i < 11; i++)
        if (gone[i] >= 0) fz->dead[gone[i]] = 1;
    return infer_last(fz, err);
}

/* ---- dropping the replaced nodes ---- */

/* Each original node in order with its inserted nodes in its place; the dead go. */
static vp_status compact(fuser *fz, vp_error *err) {
    vp_graph *g = fz->g;
    int *order = malloc(((size_t)g->n_nodes + 1) * sizeof *order), n = 0;
    if (!order) return nomem(err);
    for (int i = 0; i < fz->n_orig_nodes; i++) {
        for (int j = 0; fz->insert_at[i] >= 0 && j < fz->n_insert[i]; j++) order[n++] = fz->inserted[fz->insert_at[i] + j];
        if (!fz->dead[i]) order[n++] = i;
    }
    vp_status s = vp_graph_keep_nodes(g, order, n, err);
    free(order);
    return s;
}

/* ---- the pass ---- */

vp_status vp_fuse_attention(vp_graph *g, const vp_fuse_attention_opts *o, int *n_fused, vp_error *err) {
    fuser fz = {.g = g, .o = o, .n_orig_values = g->n_values, .n_orig_nodes = g->n_nodes,
               .causal_seen = -1};
    *n_fused = 0;
    vp_status s = vp_graph_link(g, err);
    if (s) return s;
    fz.dead = calloc((size_t)g->n_nodes + 1, 1);
    fz.insert_at = malloc(((size_t)g->n_nodes + 1) * sizeof *fz.insert_at);
    fz.n_insert = calloc((size_t)g->n_nodes + 1, sizeof *fz.n_insert);
    if (!fz.dead || !fz.insert_at || !fz.n_insert) s = nomem(err);
    for (int i = 0; !s && i < fz.n_orig_nodes; i++) fz.insert_at[i] = -1;
    for (int i = 0; !s && i < fz.n_orig_nodes; i++) {
        match m;
        if (!match_at(&fz, i, &m)) continue;
        if (!(s = rewrite(&fz, &m, err))) ++*n_fused;
    }
    if (!s && *n_fused) s = compact(&fz, err);
    free(fz.dead);
    free(fz.insert_at);
    free(fz.n_insert);
    free(fz.inserted);
    free(fz.masks);
    free(fz.sums);
    return s;
}
