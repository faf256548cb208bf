/* The fused attention's inputs read as their producers wrote them: grouped-query K and V
 * without the key/value repeat torch writes before scaled_dot_product_attention
 * (Hugging Face's repeat_kv), and Q, K, V without their head transposes.
 *
 * In: a forward graph after fuse-attention and tp-split (on a tensor-parallel rank the
 * repeat already gives this rank's share of the query heads).  Out: each vplan.Attention
 * whose K (and likewise V) is
 *
 *     U = Unsqueeze(k, [2])                      k [B, Hk, T, D]
 *     E = Expand(U, [B, Hk, rep, T, D]), then an Identity or not (torch's clone)
 *     K = Reshape(E, [B, Hk * rep, T, D])
 *
 * reads k itself (planner/ops/attention.c: K and V of Hk heads, query head h reading
 * key/value head h / rep), and the repeat's nodes go.  So K and V are kept for the
 * backward once at Hk heads, not rep times over, and their gradient is the group sum
 * the attention kernel forms, not a ReduceSum over a repeated gradient.  Then an input
 * Q = Transpose(q, [0, 2, 1, 3]), q [B, S, H, D] as the projection writes it, is read
 * as q with q_bshd=1, and K, V likewise with kv_bshd=1 when both are such transposes:
 * the transposed copies (a tensor of the model width each, per layer, kept for the
 * backward) are never made.
 *
 * Keeps true: only those exact chains are dropped, each intermediate read at run time by
 * the next node alone and no graph output, the shapes as above; anything else stays. */
#include "train/fuse_attention_inputs.h"

#include <stdlib.h>
#include <string.h>

#include "ir/infer.h"
#include "ops/op_semantics.h"

static int is_op(const vp_node *n, const char *op) {
    return !n->folded && !n->domain[0] && !strcmp(n->op_type, op) && n->n_outputs == 1 && n->n_inputs >= 1 &&
           n->inputs[0] >= 0;
}

/* The node producing v when v is read at run time by one consumer only (folded readers,
 * such as a Shape whose result is already a constant, do not count) and is no graph
 * output. */
static int sole_producer(const vp_graph *g, int v) {
    const vp_value *val = &g->values[v];
    int live = 0;
    for (int c = 0; c < val->n_consumers; c++) live += !g->nodes[val->consumers[c]].folded;
    return live == 1 && !(val->flags & VP_VAL_OUTPUT) && !val->data ? val->producer : -1;
}

/* Marks dead the chain's nodes and the folded readers of their outputs (their results are
 * constants already; nothing reads the values they read any more). */
static void drop_chain(const vp_graph *g, const int *chain, int n, char *dead) {
    for (int c = 0; c < n; c++) {
        dead[chain[c]] = 1;
        const vp_value *out = &g->values[g->nodes[chain[c]].outputs[0]];
        for (int k = 0; k < out->n_consumers; k++)
            if (g->nodes[out->consumers[k]].folded) dead[out->consumers[k]] = 1;
    }
}

/* Unsqueeze's axes are exactly {2}: an attribute before opset 13, a constant input from 13. */
static int unsqueezes_axis2(const vp_graph *g, const vp_node *n) {
    const int64_t *axes;
    return vp_node_axes(g, n, &axes) == 1 && (axes[0] == 2 || axes[0] == -3);
}

/* k when value v (an Attention's K or V input) is the repeat of k above, with the chain's
 * nodes in chain[0..*n); -1 otherwise. */
static int repeated_from(const vp_graph *g, int v, int *chain, int *n) {
    *n = 0;
    const vp_value *kv = &g->values[v];
    int r = sole_producer(g, v);
    if (r < 0 || !is_op(&g->nodes[r], "Reshape") || kv->rank != 4) return -1;
    chain[(*n)++] = r;
    int e = sole_producer(g, g->nodes[r].inputs[0]);
    if (e >= 0 && is_op(&g->nodes[e], "Identity")) {
        chain[(*n)++] = e;
        e = sole_producer(g, g->nodes[e].inputs[0]);
    }
    if (e < 0 || !is_op(&g->nodes[e], "Expand")) return -1;
    chain[(*n)++] = e;
    int u = sole_producer(g, g->nodes[e].inputs[0]);
    if (u < 0 || !is_op(&g->nodes[u], "Unsqueeze") || !unsqueezes_axis2(g, &g->nodes[u])) return -1;
    chain[(*n)++] = u;
    int k = g->nodes[u].inputs[0];
    const vp_value *kk = &g->values[k], *ev = &g->values[g->nodes[e].outputs[0]];
    if (kk->rank != 4 || ev->rank != 5 || kk->dtype != kv->dtype) return -1;
    int64_t want[5] = {kk->dims[0], kk->dims[1], kv->dims[1] / (kk->dims[1] ? kk->dims[1] : 1), kk->dims[2], kk->dims[3]};
    if (!kk->dims[1] || kv->dims[1] % kk->dims[1] || memcmp(ev->dims, want, sizeof want) || kv->dims[0] != kk->dims[0] ||
        kv->dims[2] != kk->dims[2] || kv->dims[3] != kk->dims[3])
        return -1;
    return k;
}

/* The [B, S, H, D] tensor that v is the head transpose of (perm [0, 2, 1, 3]), with the
 * Transpose in *node; -1 when v is no such transpose read by one node alone. */
static int transposed_from(const vp_graph *g, int v, int *node) {
    int t = sole_producer(g, v);
    const int64_t *perm;
    if (t < 0 || !is_op(&g->nodes[t], "Transpose") || vp_attr_ints(&g->nodes[t], "perm", &perm) != 4 || perm[0] != 0 ||
        perm[1] != 2 || perm[2] != 1 || perm[3] != 3)
        return -1;
    *node = t;
    return g->nodes[t].inputs[0];
}

/* Attention a reads Q, and K with V, through their head transposes where they are. */
static vp_status read_through_transposes(vp_graph *g, int a, char *dead, int *n_read, vp_error *err) {
    vp_node *n = &g->nodes[a];
    int tq, tk, tv;
    int q = vp_attr_int(n, "q_bshd", 0) ? -1 : transposed_from(g, n->inputs[0], &tq);
    int k = vp_attr_int(n, "kv_bshd", 0) ? -1 : transposed_from(g, n->inputs[1], &tk);
    int v = k < 0 ? -1 : transposed_from(g, n->inputs[2], &tv);
    if (q >= 0) {
        n->inputs[0] = q;
        drop_chain(g, &tq, 1, dead);
        if (vp_node_add_attr_int(g, a, "q_bshd", 1)) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
        ++*n_read;
    }
    if (k >= 0 && v >= 0) {
        n = &g->nodes[a];
        n->inputs[1] = k;
        n->inputs[2] = v;
        drop_chain(g, &tk, 1, dead);
        drop_chain(g, &tv, 1, dead);
        if (vp_node_add_attr_int(g, a, "kv_bshd", 1)) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
        *n_read += 2;
    }
    return VP_OK;
}

vp_status vp_fuse_attention_inputs(vp_graph *g, int *n_fused, int *n_read, vp_error *err) {
    *n_fused = *n_read = 0;
    vp_status s = vp_graph_link(g, err);
    if (s) return s;
    int n0 = g->n_nodes;
    char *dead = calloc((size_t)n0 + 1, 1);
    int *keep = malloc(((size_t)n0 + 1) * sizeof *keep);
    if (!dead || !keep) s = vp_fail(err, VP_ERR_NOMEM, "out of memory reading the attention's inputs");
    for (int i = 0; !s && i < n0; i++) {
        vp_node *a = &g->nodes[i];
        if (a->folded || strcmp(a->domain, "vplan") || strcmp(a->op_type, "Attention") || a->n_inputs < 3) continue;
        int chain[2][4], len[2], k[2];
        for (int slot = 0; slot < 2; slot++) k[slot] = a->inputs[slot + 1] >= 0 ? repeated_from(g, a->inputs[slot + 1], chain[slot], &len[slot]) : -1;
        /* K and V together: the op takes them at one head count */
        if (k[0] >= 0 && k[1] >= 0 && g->values[k[0]].dims[1] == g->values[k[1]].dims[1]) {
            for (int slot = 0; slot < 2; slot++) {
                a->inputs[slot + 1] = k[slot];
                drop_chain(g, chain[slot], len[slot], dead);
            }
            ++*n_fused;
        }
        if (a->n_inputs >= 3) s = read_through_transposes(g, i, dead, n_read, err);
    }
    int n = 0;
    for (int i = 0; !s && i < n0; i++)
        if (!dead[i]) keep[n++] = i;
    if (!s && (*n_fused || *n_read)) s = vp_graph_keep_nodes(g, keep, n, err);
    /* the Attention nodes' shapes, checked against their new K and V */
    for (int i = 0; !s && (*n_fused || *n_read) && i < g->n_nodes; i++)
        if (!strcmp(g->nodes[i].domain, "vplan") && !strcmp(g->nodes[i].op_type, "Attention"))
            s = vp_infer_node(g, i, 0, NULL, err);
    free(dead);
    free(keep);
    return s;
}
