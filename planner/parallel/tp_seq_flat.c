/* Sequence parallelism on products over flattened tokens (GPT-2's Conv1D as the exporter
 * writes it: Reshape [batch, seq, hidden] -> [batch * seq, hidden], Gemm, Reshape back).
 *
 * In: rank r's forward graph as tp_split.c left it, linked and inferred, where a
 * region's TPCopy reads such a flattening Reshape, or a TPAllReduce (and the row Gemm's
 * bias Add after it) writes what a Reshape turns back into [batch, seq, hidden].  Out:
 * the same computation with each of those collectives on the [batch, seq, hidden] side
 * of its Reshape (the TPCopy, then the Reshape; the Reshape, then the all-reduce and the
 * bias), so tp_seq.c can split the sequence around them: in the flattened layout a
 * rank's positions are no contiguous rows.  Keeps true: the Reshapes only regroup the
 * leading axes, and the collectives and a bias of [hidden] treat every element alike, so
 * the reordered nodes compute what the old ones did; nodes move between their own slots
 * (none added or removed), each moved one inferred again; the graph is linked again. */
#include <stdio.h>
#include <string.h>

#include "ir/infer.h"
#include "parallel/tp_internal.h"

static int is_node(const vp_node *n, const char *domain, const char *op) {
    return !n->folded && !strcmp(n->domain, domain) && !strcmp(n->op_type, op);
}

/* The lone reader of v when it is such a node, else -1. */
static int only_reader(const vp_graph *g, int v, const char *domain, const char *op) {
    const vp_value *x = &g->values[v];
    if (x->n_consumers != 1 || (x->flags & VP_VAL_OUTPUT)) return -1;
    return is_node(&g->nodes[x->consumers[0]], domain, op) ? x->consumers[0] : -1;
}

/* [b, s, h] and [b * s, h]. */
static int flattened(const vp_value *x3, const vp_value *x2) {
    return x3->rank == 3 && x2->rank == 2 && x2->dims[0] == x3->dims[0] * x3->dims[1] && x2->dims[1] == x3->dims[2];
}

static int new_value(vp_graph *g, int like, const char *suffix) {
    char stem[512];
    snprintf(stem, sizeof stem, "%s%s", g->values[like].name, suffix);
    return vp_graph_add_unique_value(g, stem);
}

/* Slot slots[i] gets the node that stood at slots[from[i]]; each is inferred again. */
static vp_status rotate(vp_graph *g, const int *slots, const int *from, int k, vp_error *err) {
    vp_node keep[3];
    for (int i = 0; i < k; i++) keep[i] = g->nodes[slots[i]];
    for (int i = 0; i < k; i++) g->nodes[slots[i]] = keep[from[i]];
    vp_status s = VP_OK;
    for (int i = 0; i < k && !s; i++) s = vp_infer_node(g, slots[i], 0, NULL, err);
    return s;
}

/* R: y2 = flat(x3); C: c = TPCopy(y2)  ->  C: c3 = TPCopy(x3); R: c = flat(c3). */
static vp_status copy_first(vp_graph *g, int c, int *moved, vp_error *err) {
    int y2 = g->nodes[c].inputs[0], r = g->values[y2].producer;
    if (r < 0 || !is_node(&g->nodes[r], "", "Reshape") || only_reader(g, y2, "vplan", "TPCopy") != c) return VP_OK;
    int x3 = g->nodes[r].inputs[0];
    if (!flattened(&g->values[x3], &g->values[y2])) return VP_OK;
    int c3 = new_value(g, x3, "_tpcopy");
    if (c3 < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    g->nodes[r].inputs[0] = c3;
    g->nodes[r].outputs[0] = g->nodes[c].outputs[0];
    g->nodes[c].inputs[0] = x3;
    g->nodes[c].outputs[0] = c3;
    (*moved)++;
    return rotate(g, (int[]){r, c}, (int[]){1, 0}, 2, err);
}

/* A: sum = TPAllReduce(p); [B: m = Add(sum, bias[h])]; R: v = unflat(m)  ->
 * R: p3 = unflat(p); A: sum3 = TPAllReduce(p3); [B: v = Add(sum3, bias)]. */
static vp_status reduce_last(vp_graph *g, int a, int *moved, vp_error *err) {
    int sum = g->nodes[a].outputs[0], b = only_reader(g, sum, "", "Add"), m = sum, k = 0;
    if (b >= 0) { /* the row Gemm's bias, added once to the sum (tp_split.c) */
        k = g->nodes[b].inputs[0] == sum ? 0 : 1;
        const vp_value *bias = &g->values[g->nodes[b].inputs[1 - k]];
        if (bias->rank != 1 || bias->dims[0] != g->values[sum].dims[g->values[sum].rank - 1]) return VP_OK;
        m = g->nodes[b].outputs[0];
    }
    int r = only_reader(g, m, "", "Reshape");
    if (r < 0 || !flattened(&g->values[g->nodes[r].outputs[0]], &g->values[m])) return VP_OK;
    int p = g->nodes[a].inputs[0], p3 = new_value(g, p, "_tokens"), v = g->nodes[r].outputs[0];
    int sum3 = b < 0 ? v : new_value(g, sum, "_tokens");
    if (p3 < 0 || sum3 < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    g->nodes[r].inputs[0] = p;
    g->nodes[r].outputs[0] = p3;
    g->nodes[a].inputs[0] = p3;
    g->nodes[a].outputs[0] = sum3;
    (*moved)++;
    if (b < 0) return rotate(g, (int[]){a, r}, (int[]){1, 0}, 2, err);
    g->nodes[b].inputs[k] = sum3;
    g->nodes[b].outputs[0] = v;
    return rotate(g, (int[]){a, b, r}, (int[]){2, 0, 1}, 3, err);
}

vp_status vp_tp_seq_unflatten(vp_graph *g, int *n_moved, vp_error *err) {
    vp_status s = VP_OK;
    *n_moved = 0;
    for (int i = 0; i < g->n_nodes && !s; i++) {
        int moved = 0;
        if (is_node(&g->nodes[i], "vplan", "TPCopy")) s = copy_first(g, i, &moved, err);
        else if (is_node(&g->nodes[i], "vplan", "TPAllReduce")) s = reduce_last(g, i, &moved, err);
        if (!s && moved) s = vp_graph_link(g, err); /* the next match reads producers and readers */
        *n_moved += moved;
    }
    return s;
}
