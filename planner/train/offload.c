/* Optimizer-state offload: each Adam update moved to the host (train/offload.h). */
#include "train/offload.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/graph_build.h"

/* A same-dtype Cast of v: the copy between the spaces.  Returns the node id or -1. */
static int copy_node(vp_graph *g, int v, const char *name, int *out, vp_error *err) {
    int n = vp_build_node(g, "Cast", "", name, 1, &v, 1, VP_PHASE_OPTIMIZER, 0);
    if (n < 0 || vp_node_add_attr_int(g, n, "to", g->values[v].dtype)) {
        vp_fail(err, VP_ERR_NOMEM, "out of memory offloading the optimizer");
        return -1;
    }
    return vp_build_finish(g, n, out, err) ? -1 : n;
}

/* Moves update node u to the host; *before and *after get the copies' node ids. */
static vp_status move_one(vp_graph *g, vp_training *t, int u, int *before, int *after, int64_t *state_bytes, vp_error *err) {
    int w = g->nodes[u].inputs[0], gr = g->nodes[u].inputs[1], wp = g->nodes[u].outputs[0];
    char name[600];
    snprintf(name, sizeof name, "%s/to_host", g->nodes[u].name);
    int gh;
    *before = copy_node(g, gr, name, &gh, err);
    if (*before < 0) return VP_ERR_NOMEM;
    snprintf(name, sizeof name, "%s.master", g->values[w].name);
    int64_t dims[VP_MAX_RANK]; /* copied: building a value may move the array */
    memcpy(dims, g->values[w].dims, sizeof dims);
    int wh = vp_build_state(g, name, g->values[w].dtype, g->values[w].rank, dims);
    if (wh < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory offloading the optimizer");
    /* the master starts as the weight (borrowed: the graph owns both) */
    if (g->values[w].data) vp_value_set_data(g, wh, g->values[w].data, VP_DATA_BORROWED);
    g->nodes[u].inputs[0] = wh;
    g->nodes[u].inputs[1] = gh;
    g->values[gh].flags |= VP_VAL_HOST;
    g->values[wh].flags |= VP_VAL_HOST;
    for (int k = 2; k < g->nodes[u].n_inputs; k++) {
        int v = g->nodes[u].inputs[k];
        if (v < 0) continue;
        g->values[v].flags |= VP_VAL_HOST;
        *state_bytes += vp_value_numel(&g->values[v]) * (int64_t)vp_dtype_size(g->values[v].dtype);
    }
    for (int k = 0; k < g->nodes[u].n_outputs; k++)
        if (g->nodes[u].outputs[k] >= 0) g->values[g->nodes[u].outputs[k]].flags |= VP_VAL_HOST;
    snprintf(name, sizeof name, "%s/to_device", g->nodes[u].name);
    int wd;
    *after = copy_node(g, wp, name, &wd, err);
    if (*after < 0) return VP_ERR_NOMEM;
    for (int c = 0; c < t->n_carry; c++)
        if (t->carry[c].from == w) t->carry[c].to = wd;
    return vp_training_add_carry(t, wh, wp, err);
}

vp_status vp_offload_apply(vp_graph *g, vp_training *t, int *moved, int64_t *state_bytes, vp_error *err) {
    *moved = 0;
    *state_bytes = 0;
    int n0 = g->n_nodes;
    int *order = malloc(((size_t)n0 * 3 + 1) * sizeof *order), n = 0;
    if (!order) return vp_fail(err, VP_ERR_NOMEM, "out of memory offloading the optimizer");
    vp_status s = VP_OK;
    for (int i = 0; i < n0 && !s; i++) {
        const vp_node *nd = &g->nodes[i];
        int adam = i >= t->first_optimizer_node && !strcmp(nd->domain, "vplan") && !strcmp(nd->op_type, "Adam") &&
                   nd->n_inputs >= 5 && nd->n_outputs >= 1 && nd->inputs[1] >= 0 && nd->outputs[0] >= 0;
        if (!adam) {
            order[n++] = i;
            continue;
        }
        int before, after;
        s = move_one(g, t, i, &before, &after, state_bytes, err);
        if (s) break;
        order[n++] = before;
        order[n++] = i;
        order[n++] = after;
        ++*moved;
    }
    if (!s && !*moved) s = vp_fail(err, VP_ERR_USAGE, "--offload moves Adam's state to the host: the step has no Adam update (use --optimizer adam or adamw)");
    if (!s) s = vp_graph_keep_nodes(g, order, n, err);
    free(order);
    return s;
}
