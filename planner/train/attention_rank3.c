/* Attention written through rank-3 batched products, put in the rank-4 form the attention
 * fusion takes (see attention_rank3.h).
 *
 * In: an inferred forward graph.  Out: each match of
 *
 *     S3 = MatMul(Q3, K3t)                 Q3 [B*H,S,D], K3t [B*H,D,T] (K3t may be
 *                                           divided by a scalar first: DeBERTa)
 *     S3 = Mul(S3, c) | Div(S3, c)          c a scalar constant        (optional)
 *     S3 = Add(S3, M3)                      M3 [1|B*H, 1|S, T]          (optional)
 *     S4 = Reshape(S3, [B,H,S,T])
 *     ... = Softmax(... S4 ...)             through at most two Adds of rank-4 masks or
 *                                           Wheres (masked_fill), and a Max (XGLM's
 *                                           clamp at torch.finfo.min), three at most
 *     P3 = Reshape(P4, [B*H,S,T])           P4 that Softmax's output (or a Cast of it
 *                                           to the dtype it has, which goes)
 *     Y3 = MatMul(P3, V3)                   V3 [B*H,T,Dv]
 *     Y4 = Reshape(Y3, [B,H,S,Dv])
 *
 * (Hugging Face's BLOOM: baddbmm of its ALiBi bias, then the causal mask; XGLM) rewritten as
 * S4 = [Add]([Mul](MatMul(Q4, K4t), c), M4), Y4 = MatMul(P4, V4), with Q4, K4t, V4 and M4
 * the rank-3 values reshaped to [B,H,...] (or, for Q and V, the rank-4 values they were
 * reshaped from), so S4 and Y4 keep their value ids and every reader stays.
 * First, a softmax taken over the rank-3 view of rank-4 scores,
 *
 *     P4 = Reshape(Softmax(Reshape(X4, [B*H,S,T]), axis=-1), [B,H,S,T])   (XGLM)
 *
 * becomes Softmax(X4) writing P4 (the two Reshapes go): the same rows, each normalised
 * over its last axis as before.
 *
 * Keeps true: the same numbers (a Reshape that merges or splits the leading axis moves
 * no element; each product is the same batch of matrix products); every intermediate
 * swallowed has one reader and is no graph output; anything else stays as it was. */
#include "train/attention_rank3.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/graph_build.h"
#include "ir/infer.h"
#include "train/pattern.h"

static int is_op(const vp_graph *g, int node, const char *op) {
    if (node < 0) return 0;
    const vp_node *n = &g->nodes[node];
    return !n->folded && !n->domain[0] && !strcmp(n->op_type, op) && n->n_outputs == 1 && n->outputs[0] >= 0;
}

static int producer(const vp_graph *g, int v) { return v >= 0 ? g->values[v].producer : -1; }

static int sole_reader(const vp_graph *g, int v) { return vp_pattern_sole_reader(g, v); }

static int has_dims(const vp_value *v, int rank, int64_t a, int64_t b, int64_t c, int64_t d) {
    const int64_t want[4] = {a, b, c, d};
    if (v->rank != rank) return 0;
    for (int i = 0; i < rank; i++)
        if (v->dims[i] != want[i]) return 0;
    return 1;
}

static int scalar_const(const vp_graph *g, int v) { return vp_pattern_fixed_scalar(g, v, NULL); }

typedef struct match {
    int mm1, scale, add, rs;      /* the score side's nodes (scale, add: -1 when absent) */
    int rp, mm2, ry;              /* the value side's */
    int cast;                     /* a Cast of P4 to its own dtype before rp, or -1 */
    int q3, kt3, bias3, c, v3, p4; /* value ids */
    int scale_k;                  /* the scale's operand index of c */
    int64_t B, H, S, T, D, Dv;
} match;

/* The score side from the Reshape rs to [B,H,S,T] up to its MatMul. */
static int match_scores(const vp_graph *g, int rs, match *m) {
    const vp_node *r = &g->nodes[rs];
    int x = r->inputs[0], n = producer(g, x);
    if (sole_reader(g, x) != rs) return 0;
    m->add = m->scale = m->bias3 = m->c = -1;
    if (is_op(g, n, "Add") && g->nodes[n].n_inputs == 2) {
        const vp_node *a = &g->nodes[n];
        for (int k = 0; k < 2 && m->add < 0; k++) {
            int s = a->inputs[k], b = a->inputs[1 - k], sn = producer(g, s);
            if (!is_op(g, sn, "MatMul") && !is_op(g, sn, "Mul") && !is_op(g, sn, "Div")) continue;
            const vp_value *bv = &g->values[b];
            if (bv->rank != 3 || (bv->dims[0] != 1 && bv->dims[0] != m->B * m->H) || (bv->dims[1] != 1 && bv->dims[1] != m->S) ||
                (bv->dims[2] != 1 && bv->dims[2] != m->T) || bv->dtype != g->values[x].dtype)
                continue;
            m->add = n;
            m->bias3 = b;
            x = s;
            n = sn;
        }
        if (m->add < 0 || sole_reader(g, x) != m->add) return 0;
    }
    if ((is_op(g, n, "Mul") || is_op(g, n, "Div")) && g->nodes[n].n_inputs == 2) {
        const vp_node *s = &g->nodes[n];
        int div = !strcmp(s->op_type, "Div");
        m->scale_k = scalar_const(g, s->inputs[1]) ? 1 : !div && scalar_const(g, s->inputs[0]) ? 0 : -1;
        if (m->scale_k < 0) return 0;
        m->scale = n;
        m->c = s->inputs[m->scale_k];
        int from = m->add >= 0 ? m->add : rs;
        x = s->inputs[1 - m->scale_k];
        if (sole_reader(g, s->outputs[0]) != from) return 0;
        n = producer(g, x);
    }
    if (!is_op(g, n, "MatMul") || g->nodes[n].n_inputs != 2 ||
        sole_reader(g, x) != (m->scale >= 0 ? m->scale : m->add >= 0 ? m->add : rs))
        return 0;
    m->mm1 = n;
    m->q3 = g->nodes[n].inputs[0];
    m->kt3 = g->nodes[n].inputs[1];
    /* K^T divided (or multiplied) by a scalar before the product (DeBERTa): with no scale
     * after it, the scale moves after the product, so K^T is the transpose of K itself,
     * which the fused core reads without a copy */
    int kd = producer(g, m->kt3);
    if (m->scale < 0 && (is_op(g, kd, "Div") || is_op(g, kd, "Mul")) && g->nodes[kd].n_inputs == 2 &&
        sole_reader(g, m->kt3) == n) {
        const vp_node *d = &g->nodes[kd];
        int div = !strcmp(d->op_type, "Div"), k = scalar_const(g, d->inputs[1]) ? 1 : !div && scalar_const(g, d->inputs[0]) ? 0 : -1;
        if (k >= 0) {
            m->scale = kd;
            m->scale_k = 1; /* the scale node is made as Op(S, c) */
            m->c = d->inputs[k];
            m->kt3 = d->inputs[1 - k];
        }
    }
    const vp_value *q = &g->values[m->q3], *kt = &g->values[m->kt3];
    if (q->rank != 3 || kt->rank != 3) return 0;
    m->D = q->dims[2];
    return has_dims(q, 3, m->B * m->H, m->S, m->D, 0) && has_dims(kt, 3, m->B * m->H, m->D, m->T, 0);
}

/* Softmax node sm over the last axis of a Reshape of X4 [B,H,S,T] to [B*H,S,T], read
 * only by a Reshape back to X4's dims: Softmax(X4) writes that Reshape's output in
 * place (the node keeps its position: X4 is made before the first Reshape, P4 read after
 * the second); both Reshapes are unlinked and marked dead.  Returns 1 when it rewrote. */
static int softmax_to_rank4(vp_graph *g, int sm, char *dead, vp_error *err, vp_status *s) {
    if (!is_op(g, sm, "Softmax")) return 0;
    vp_node *n = &g->nodes[sm];
    int x3 = n->inputs[0], p3 = n->outputs[0], r1 = producer(g, x3), r2 = sole_reader(g, p3);
    int64_t axis = vp_attr_int(n, "axis", n->opset >= 13 ? -1 : 1);
    if (!is_op(g, r1, "Reshape") || !is_op(g, r2, "Reshape") || sole_reader(g, x3) != sm || (axis != -1 && axis != 2))
        return 0;
    int x4 = g->nodes[r1].inputs[0], p4 = g->nodes[r2].outputs[0];
    const vp_value *a = &g->values[x4], *b = &g->values[x3], *c = &g->values[p4];
    if (a->rank != 4 || !has_dims(b, 3, a->dims[0] * a->dims[1], a->dims[2], a->dims[3], 0) ||
        !has_dims(c, 4, a->dims[0], a->dims[1], a->dims[2], a->dims[3]) || a->dtype != c->dtype || dead[r1] || dead[r2])
        return 0;
    for (int k = 0; k < n->n_attrs; k++)
        if (!strcmp(n->attrs[k].name, "axis")) n->attrs[k].i = -1;
    n->inputs[0] = x4;
    n->outputs[0] = p4;
    g->values[p4].producer = sm;
    for (int k = 0; k < 2; k++) { /* unlinked, so that the next link counts no reader in them */
        vp_node *r = &g->nodes[k ? r2 : r1];
        for (int j = 0; j < r->n_inputs; j++) r->inputs[j] = -1;
        r->outputs[0] = -1;
    }
    dead[r1] = dead[r2] = 1;
    *s = vp_infer_node(g, sm, 0, NULL, err);
    return 1;
}

/* A match whose value side's MatMul is node mm2. */
static int match_at(const vp_graph *g, int mm2, match *m) {
    memset(m, -1, sizeof *m);
    if (!is_op(g, mm2, "MatMul") || g->nodes[mm2].n_inputs != 2) return 0;
    int p3 = g->nodes[mm2].inputs[0], y3 = g->nodes[mm2].outputs[0];
    m->v3 = g->nodes[mm2].inputs[1];
    m->rp = producer(g, p3);
    m->ry = sole_reader(g, y3);
    if (!is_op(g, m->rp, "Reshape") || sole_reader(g, p3) != mm2 || !is_op(g, m->ry, "Reshape")) return 0;
    m->p4 = g->nodes[m->rp].inputs[0];
    int sm = producer(g, m->p4);
    /* BLOOM casts the probabilities to the dtype they have (softmax in float32, then
     * .to(dtype)): a Cast that changes nothing goes with the match */
    m->cast = -1;
    if (is_op(g, sm, "Cast") && sole_reader(g, m->p4) == m->rp &&
        g->values[g->nodes[sm].inputs[0]].dtype == g->values[m->p4].dtype) {
        m->cast = sm;
        m->p4 = g->nodes[sm].inputs[0];
        sm = producer(g, m->p4);
    }
    const vp_value *p4 = &g->values[m->p4], *v3 = &g->values[m->v3], *y4 = &g->values[g->nodes[m->ry].outputs[0]];
    if (!is_op(g, sm, "Softmax") || p4->rank != 4 || v3->rank != 3 || y4->rank != 4) return 0;
    m->B = p4->dims[0];
    m->H = p4->dims[1];
    m->S = p4->dims[2];
    m->T = p4->dims[3];
    m->Dv = v3->dims[2];
    if (!has_dims(&g->values[p3], 3, m->B * m->H, m->S, m->T, 0) || !has_dims(v3, 3, m->B * m->H, m->T, m->Dv, 0) ||
        !has_dims(y4, 4, m->B, m->H, m->S, m->Dv))
        return 0;
    /* up from the Softmax through at most three rank-4 mask Adds, Wheres or a Max to the
     * Reshape */
    int x = g->nodes[sm].inputs[0], user = sm;
    for (int hop = 0; hop < 4; hop++) {
        int n = producer(g, x);
        if (sole_reader(g, x) != user) return 0;
        if (is_op(g, n, "Reshape") && has_dims(&g->values[x], 4, m->B, m->H, m->S, m->T)) {
            m->rs = n;
            m->mm2 = mm2;
            return match_scores(g, n, m);
        }
        int add = is_op(g, n, "Add") && g->nodes[n].n_inputs == 2, where = is_op(g, n, "Where") && g->nodes[n].n_inputs == 3;
        int max = is_op(g, n, "Max") && g->nodes[n].n_inputs == 2;
        if ((!add && !where && !max) || hop == 3) return 0;
        /* the scores: the one operand of the full shape that a Reshape, an Add or a
         * Where wrote (a Where's condition never) */
        const vp_node *a = &g->nodes[n];
        int k = -1;
        for (int j = where; j < a->n_inputs; j++) {
            int v = a->inputs[j], pn = producer(g, v);
            if (v < 0 || !has_dims(&g->values[v], 4, m->B, m->H, m->S, m->T) ||
                (!is_op(g, pn, "Reshape") && !is_op(g, pn, "Add") && !is_op(g, pn, "Where") && !is_op(g, pn, "Max")))
                continue;
            if (k >= 0) return 0; /* two candidates: not a mask */
            k = j;
        }
        if (k < 0) return 0;
        x = a->inputs[k];
        user = n;
    }
    return 0;
}

/* v3 [B*H, ...] as rank 4 [d0..d3]: the rank-4 value it was reshaped from when that has
 * these dims, else a new Reshape (a view). */
static vp_status to_rank4(vp_graph *g, int v3, const int64_t *d, const char *name, vp_phase phase, int *nodes, int *n_nodes,
                          int *out, vp_error *err) {
    int pr = producer(g, v3);
    if (is_op(g, pr, "Reshape")) {
        int src = g->nodes[pr].inputs[0];
        if (has_dims(&g->values[src], 4, d[0], d[1], d[2], d[3])) {
            *out = src;
            return VP_OK;
        }
    }
    int64_t rank = 4;
    int shape = vp_build_const(g, "shape", VP_I64, 1, &rank, d);
    int in[2] = {v3, shape};
    int r = shape < 0 ? -1 : vp_build_node(g, "Reshape", "", name, 2, in, 1, phase, 0);
    if (r < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory reshaping attention to rank 4");
    nodes[(*n_nodes)++] = r;
    return vp_build_finish(g, r, out, err);
}

/* One node of op over in, its output out (a value id to keep) or a new one. */
static vp_status add_op(vp_graph *g, const char *op, const char *name, int n_in, const int *in, int keep_out, vp_phase phase,
                        int *nodes, int *n_nodes, int *out, vp_error *err) {
    int id = vp_build_node(g, op, "", name, n_in, in, 1, phase, 0);
    if (id < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory reshaping attention to rank 4");
    nodes[(*n_nodes)++] = id;
    vp_status s = vp_build_finish(g, id, out, err);
    if (!s && keep_out >= 0) g->nodes[id].outputs[0] = *out = keep_out;
    return s;
}

vp_status vp_attention_rank3(vp_graph *g, int *n_rewritten, vp_error *err) {
    *n_rewritten = 0;
    vp_status s = vp_graph_link(g, err);
    if (s) return s;
    int n0 = g->n_nodes;
    /* before[i]: the new nodes that go right before old node i (first, count in span) */
    int *first = malloc(((size_t)n0 + 1) * sizeof *first), *count = calloc((size_t)n0 + 1, sizeof *count);
    char *dead = calloc((size_t)n0 + 1, 1);
    int *made = malloc(((size_t)n0 * 4 + 8) * sizeof *made), n_made = 0, n_softmax = 0;
    if (!first || !count || !dead || !made) s = vp_fail(err, VP_ERR_NOMEM, "out of memory reshaping attention to rank 4");
    for (int i = 0; !s && i < n0; i++) n_softmax += softmax_to_rank4(g, i, dead, err, &s);
    if (!s && n_softmax) s = vp_graph_link(g, err);
    for (int i = 0; !s && i < n0; i++) {
        match m;
        if (!match_at(g, i, &m) || dead[m.mm1] || dead[m.rs] || dead[m.rp] || dead[m.ry]) continue;
        char name[600];
        snprintf(name, sizeof name, "%.560s/rank4", g->nodes[m.mm2].name);
        vp_phase ph = g->nodes[m.mm2].phase;
        int s4 = g->nodes[m.rs].outputs[0], y4 = g->nodes[m.ry].outputs[0];
        const int64_t dq[4] = {m.B, m.H, m.S, m.D}, dk[4] = {m.B, m.H, m.D, m.T}, dv[4] = {m.B, m.H, m.T, m.Dv};
        /* the score side, right before its old Reshape */
        int at = n_made, q4, kt4, x;
        s = to_rank4(g, m.q3, dq, name, ph, made, &n_made, &q4, err);
        if (!s) s = to_rank4(g, m.kt3, dk, name, ph, made, &n_made, &kt4, err);
        int last_keep = m.scale < 0 && m.add < 0 ? s4 : -1;
        if (!s) s = add_op(g, "MatMul", name, 2, (int[]){q4, kt4}, last_keep, ph, made, &n_made, &x, err);
        if (!s && m.scale >= 0) { /* after the product, as S * c or c * S (or S / c) */
            int in[2];
            in[1 - m.scale_k] = x;
            in[m.scale_k] = m.c;
            const char *op = strcmp(g->nodes[m.scale].op_type, "Div") ? "Mul" : "Div"; /* not a pointer into nodes */
            s = add_op(g, op, name, 2, in, m.add < 0 ? s4 : -1, ph, made, &n_made, &x, err);
        }
        if (!s && m.add >= 0) {
            const vp_value *b = &g->values[m.bias3];
            int64_t db[4] = {b->dims[0] == 1 ? 1 : m.B, b->dims[0] == 1 ? 1 : m.H, b->dims[1], b->dims[2]};
            int b4;
            s = to_rank4(g, m.bias3, db, name, ph, made, &n_made, &b4, err);
            if (!s) s = add_op(g, "Add", name, 2, (int[]){x, b4}, s4, ph, made, &n_made, &x, err);
        }
        if (s) break;
        first[m.rs] = at;
        count[m.rs] = n_made - at;
        /* the value side, right before its old Reshape */
        at = n_made;
        int v4, y;
        s = to_rank4(g, m.v3, dv, name, ph, made, &n_made, &v4, err);
        if (!s) s = add_op(g, "MatMul", name, 2, (int[]){m.p4, v4}, y4, ph, made, &n_made, &y, err);
        if (s) break;
        first[m.ry] = at;
        count[m.ry] = n_made - at;
        dead[m.mm1] = dead[m.rs] = dead[m.rp] = dead[m.mm2] = dead[m.ry] = 1;
        if (m.scale >= 0) dead[m.scale] = 1;
        if (m.add >= 0) dead[m.add] = 1;
        if (m.cast >= 0) dead[m.cast] = 1;
        ++*n_rewritten;
    }
    if (!s && (*n_rewritten || n_softmax)) {
        int *order = malloc(((size_t)n0 + (size_t)n_made + 1) * sizeof *order), n = 0;
        if (!order) s = vp_fail(err, VP_ERR_NOMEM, "out of memory reshaping attention to rank 4");
        for (int i = 0; !s && i < n0; i++) {
            for (int k = 0; k < count[i]; k++) order[n++] = made[first[i] + k];
            if (!dead[i]) order[n++] = i;
        }
        if (!s) s = vp_graph_keep_nodes(g, order, n, err);
        free(order);
    }
    free(first);
    free(count);
    free(dead);
    free(made);
    return s;
}
