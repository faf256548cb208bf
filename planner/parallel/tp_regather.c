/* Sequence parallelism's all-gathers, gathered again in the backward (Korthikanti et
 * al. 2022, section 4.2.2).
 *
 * In: rank r's training step right after autodiff, built with --sp: each column-parallel
 * region's input is a TPAllGather of a sequence-split LayerNorm output, read by the
 * column products forward and by their weight gradients backward.  Out: the same step
 * where the backward reads a second TPAllGather of the split value (phase RECOMPUTE,
 * placed right before the first backward node that reads it, by the recompute
 * mechanism of planner/remat), so the forward's gathered [b, s, h] dies after the
 * forward products and only the split [b, s/n, h] is kept across the step: the
 * activations per layer fall from 2sbh(4 + 24/t) to 2sbh(2 + 2/t + 24/t) in float32
 * bytes (tools/bench/RESULTS.md).  A Cast of the gathered value (mixed precision), or a
 * Reshape that flattens its tokens for the products (tp_seq_flat.c), is gathered and
 * cast or reshaped again with it.  The price is one more all-gather a region each
 * step, which vp_tp_step_bytes and the cost model count like any other collective (the
 * runtime counts what it runs). */
#include <stdlib.h>
#include <string.h>

#include "parallel/parallel.h"
#include "remat/remat.h"

static int is_gather(const vp_node *n) {
    return !n->folded && n->phase == VP_PHASE_FORWARD && !strcmp(n->domain, "vplan") && !strcmp(n->op_type, "TPAllGather");
}

/* A Cast of the gathered value, or a Reshape flattening its tokens: done again with it. */
static int is_cast(const vp_node *n) {
    return !n->folded && n->phase == VP_PHASE_FORWARD && !n->domain[0] &&
           (!strcmp(n->op_type, "Cast") || !strcmp(n->op_type, "Reshape"));
}

/* Marks v (and the Casts of it) as not kept; 1 when a backward node reads one of them. */
static int release(const vp_graph *g, int v, char *keep) {
    const vp_value *val = &g->values[v];
    int backward = 0;
    keep[v] = 0;
    for (int c = 0; c < val->n_consumers; c++) {
        const vp_node *r = &g->nodes[val->consumers[c]];
        if (r->phase == VP_PHASE_BACKWARD) backward = 1;
        else if (is_cast(r) && r->outputs[0] >= 0) backward |= release(g, r->outputs[0], keep);
    }
    return backward;
}

vp_status vp_tp_regather(vp_graph *g, const vp_training *t, int *n_regathered, vp_error *err) {
    *n_regathered = 0;
    vp_status s = vp_graph_link(g, err); /* autodiff's readers */
    if (s) return s;
    char *keep = malloc((size_t)g->n_values + 1);
    if (!keep) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    memset(keep, 1, (size_t)g->n_values + 1);
    int any = 0;
    for (int i = 0; i < g->n_nodes; i++)
        if (is_gather(&g->nodes[i]) && g->nodes[i].outputs[0] >= 0) any |= release(g, g->nodes[i].outputs[0], keep);
    int n_copies = 0;
    s = any ? vp_remat_apply(g, t, keep, &n_copies, err) : VP_OK;
    for (int i = 0; !s && n_copies && i < g->n_nodes; i++) {
        const vp_node *n = &g->nodes[i];
        *n_regathered += n->phase == VP_PHASE_RECOMPUTE && !strcmp(n->op_type, "TPAllGather");
    }
    free(keep);
    return s;
}
