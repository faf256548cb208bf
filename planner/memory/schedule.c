/* Schedule: one step order for the training graph.
 *
 * In: a training graph whose nodes are in a valid order (forward, loss, backward,
 * optimizer as the builder appended them).  Out: p->steps, every node that is not
 * folded, topologically ordered.  With fused_update each optimizer node moves right
 * after the last step that writes one of its inputs (the gradient) or reads the value
 * it updates in place, directly or through a view (which shares its storage), so the
 * gradient dies at once; without it all updates run last (the classic order, for
 * comparison).  An optimizer node may read another's output (loss scaling's scale
 * update reads the check the updates read): it is placed no earlier than that node, and after it among
 * those placed at the same step (the builder appends nodes in a valid order).  The
 * backward's own order is backward_order.c's. */
#include <stdlib.h>
#include <string.h>

#include "memory/backward_order.h"
#include "memory/plan.h"

typedef struct placed_update {
    int node;
    int after; /* step index among the other nodes */
} placed_update;

/* The latest position among v's readers other than node self, following views. */
static int last_reader(const vp_graph *g, const int *pos, int v, int self, int after) {
    const vp_value *val = &g->values[v];
    for (int c = 0; c < val->n_consumers; c++) {
        int r = val->consumers[c];
        if (r == self) continue;
        if (pos[r] > after) after = pos[r];
        const vp_node *n = &g->nodes[r];
        if (vp_node_is_view(g, n) && n->inputs[0] == v) after = last_reader(g, pos, n->outputs[0], self, after);
    }
    return after;
}

static int by_after(const void *a, const void *b) {
    const placed_update *x = a, *y = b;
    if (x->after != y->after) return x->after - y->after;
    return x->node - y->node;
}

vp_status vp_schedule(vp_plan *p, const vp_training *t, vp_error *err) {
    vp_graph *g = p->g;
    /* carried_from[v]: the value a carried v is written over (its storage), or -1 */
    int *carried_from = malloc(((size_t)g->n_values + 1) * sizeof *carried_from);
    if (!carried_from) return vp_fail(err, VP_ERR_NOMEM, "out of memory scheduling");
    for (int v = 0; v < g->n_values; v++) carried_from[v] = -1;
    for (int c = 0; t && c < t->n_carry; c++)
        if (t->carry[c].to >= 0 && t->carry[c].from >= 0) carried_from[t->carry[c].to] = t->carry[c].from;
    int *pos = malloc(((size_t)g->n_nodes + 1) * sizeof *pos);
    int *order = malloc(((size_t)g->n_nodes + 1) * sizeof *order);
    placed_update *ups = malloc(((size_t)g->n_nodes + 1) * sizeof *ups);
    int *up_after = malloc(((size_t)g->n_nodes + 1) * sizeof *up_after);
    if (!pos || !order || !ups || !up_after) {
        free(pos); free(order); free(ups); free(up_after); free(carried_from);
        return vp_fail(err, VP_ERR_NOMEM, "out of memory scheduling");
    }
    int n_main = 0, n_ups = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        pos[i] = -1;
        up_after[i] = -1;
        if (g->nodes[i].folded) continue;
        if (g->nodes[i].phase == VP_PHASE_OPTIMIZER) continue;
        pos[i] = n_main;
        order[n_main++] = i;
    }
    /* the backward segment: from the first backward or recompute node on */
    int seg = n_main;
    for (int m = 0; m < n_main && seg == n_main; m++) {
        vp_phase ph = g->nodes[order[m]].phase;
        if (ph == VP_PHASE_BACKWARD || ph == VP_PHASE_RECOMPUTE) seg = m;
    }
    vp_status os = vp_order_backward(g, order, seg, n_main, pos, p->fused_update);
    if (os) {
        free(pos); free(order); free(ups); free(up_after); free(carried_from);
        return os == VP_ERR_NOMEM ? vp_fail(err, VP_ERR_NOMEM, "out of memory scheduling")
                                  : vp_fail(err, VP_ERR_RUNTIME, "%s: internal: the backward pass has no node ready to run "
                                            "(a cycle, or consumers not relinked)", g->path ? g->path : "graph");
    }
    for (int m = seg; m < n_main; m++) pos[order[m]] = m;
    for (int i = 0; i < g->n_nodes; i++) {
        const vp_node *n = &g->nodes[i];
        if (n->folded || n->phase != VP_PHASE_OPTIMIZER) continue;
        int after = n_main - 1;
        if (p->fused_update) {
            after = -1;
            for (int k = 0; k < n->n_inputs; k++) {
                const vp_value *v = n->inputs[k] >= 0 ? &g->values[n->inputs[k]] : NULL;
                if (!v) continue;
                if (v->producer >= 0 && pos[v->producer] > after) after = pos[v->producer];
                if (v->producer >= 0 && g->nodes[v->producer].phase == VP_PHASE_OPTIMIZER &&
                    up_after[v->producer] > after)
                    after = up_after[v->producer];
                after = last_reader(g, pos, n->inputs[k], i, after);
            }
            /* a carried output overwrites the old value's storage (the weight an offloaded
             * update's copy back writes): after the old value's last reader too */
            for (int k = 0; k < n->n_outputs; k++)
                if (n->outputs[k] >= 0 && carried_from[n->outputs[k]] >= 0)
                    after = last_reader(g, pos, carried_from[n->outputs[k]], i, after);
        }
        up_after[i] = after;
        ups[n_ups++] = (placed_update){i, after};
    }
    free(up_after);
    free(carried_from);
    qsort(ups, (size_t)n_ups, sizeof *ups, by_after);
    p->steps = malloc(((size_t)(n_main + n_ups) + 1) * sizeof *p->steps);
    if (!p->steps) {
        free(pos); free(order); free(ups);
        return vp_fail(err, VP_ERR_NOMEM, "out of memory scheduling");
    }
    int k = 0, u = 0;
    while (u < n_ups && ups[u].after < 0) p->steps[k++] = ups[u++].node;
    for (int m = 0; m < n_main; m++) {
        p->steps[k++] = order[m];
        while (u < n_ups && ups[u].after == m) p->steps[k++] = ups[u++].node;
    }
    while (u < n_ups) p->steps[k++] = ups[u++].node;
    p->n_steps = k;
    free(pos);
    free(order);
    free(ups);
    return VP_OK;
}
