/* Recompute insertion: the mechanism under every checkpointing strategy.
 *
 * In: a training graph and, per value, whether the backward pass keeps it.  Out: for
 * each forward activation the backward reads but does not keep, a copy of its
 * producer (phase RECOMPUTE) placed right before the first backward node that needs
 * it, recursively recomputing its own unkept inputs from the nearest kept values; the
 * backward nodes read the copies, and the node order is rewritten so the graph stays
 * topologically sorted.  A copy of a node with side effects writes them to fresh values
 * nobody reads (a recomputed BatchNorm does not update its running statistics twice). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "remat.h"

typedef struct remat_ctx {
    vp_graph *g;
    const char *keep;
    int n_orig_values;
    int *copy;      /* original value -> its recomputed copy, -1 */
    int *order;     /* the new node order being built */
    int n_order;
    int n_recompute;
} remat_ctx;

static int is_forward_activation(const vp_graph *g, int v, int n_orig) {
    if (v < 0 || v >= n_orig) return 0;
    const vp_value *val = &g->values[v];
    if (val->producer < 0 || val->data) return 0;
    const vp_node *p = &g->nodes[val->producer];
    return !p->folded && p->phase == VP_PHASE_FORWARD;
}

static int needs_recompute(const remat_ctx *c, int v) {
    return is_forward_activation(c->g, v, c->n_orig_values) && !c->keep[v];
}

static vp_status recompute(remat_ctx *c, int v, int *out, vp_error *err) {
    if (c->copy[v] >= 0) {
        *out = c->copy[v];
        return VP_OK;
    }
    vp_graph *g = c->g;
    int src = g->values[v].producer;
    int n_in = g->nodes[src].n_inputs, n_out = g->nodes[src].n_outputs;
    int *ins = malloc(((size_t)n_in + 1) * sizeof *ins), *outs = malloc(((size_t)n_out + 1) * sizeof *outs);
    vp_status s = ins && outs ? VP_OK : vp_fail(err, VP_ERR_NOMEM, "out of memory");
    for (int k = 0; k < n_in && !s; k++) {
        int u = g->nodes[src].inputs[k];
        ins[k] = u;
        if (u >= 0 && needs_recompute(c, u)) s = recompute(c, u, &ins[k], err);
    }
    for (int k = 0; k < n_out && !s; k++) {
        int o = g->nodes[src].outputs[k];
        outs[k] = -1;
        if (o < 0) continue;
        char name[600];
        snprintf(name, sizeof name, "%s/recomputed", g->values[o].name);
        outs[k] = vp_graph_add_unique_value(g, name);
        if (outs[k] < 0) {
            s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
            break;
        }
        vp_value *nv = &g->values[outs[k]];
        const vp_value *ov = &g->values[o];
        nv->dtype = ov->dtype;
        nv->rank = ov->rank;
        memcpy(nv->dims, ov->dims, sizeof nv->dims);
    }
    if (!s) {
        char name[600];
        snprintf(name, sizeof name, "%s/recompute", g->nodes[src].name);
        int id = vp_graph_add_node(g, g->nodes[src].op_type, g->nodes[src].domain, name, n_in, ins, n_out, outs);
        if (id < 0 || vp_node_copy_attrs(g, id, src)) s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
        else {
            vp_node *n = &g->nodes[id];
            n->opset = g->nodes[src].opset;
            n->op = g->nodes[src].op;
            n->phase = VP_PHASE_RECOMPUTE;
            c->order[c->n_order++] = id;
            c->n_recompute++;
            /* every output of the copy stands for the original's (running statistics of a
             * recomputed BatchNorm go to fresh values nobody reads: no second update) */
            for (int k = 0; k < n_out; k++) {
                int o = g->nodes[src].outputs[k];
                if (o >= 0) c->copy[o] = outs[k];
            }
            *out = c->copy[v];
        }
    }
    free(ins);
    free(outs);
    return s;
}

vp_status vp_remat_apply(vp_graph *g, const char *keep, int *n_recompute, vp_error *err) {
    int n0 = g->n_nodes;
    remat_ctx c = {g, keep, g->n_values, NULL, NULL, 0, 0};
    c.copy = malloc(((size_t)g->n_values + 1) * sizeof *c.copy);
    /* at most one copy of each forward node */
    c.order = malloc(((size_t)2 * n0 + 1) * sizeof *c.order);
    if (!c.copy || !c.order) {
        free(c.copy);
        free(c.order);
        return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    }
    for (int v = 0; v < g->n_values; v++) c.copy[v] = -1;
    vp_status s = VP_OK;
    for (int i = 0; i < n0 && !s; i++) {
        if (g->nodes[i].phase == VP_PHASE_BACKWARD) {
            for (int k = 0; k < g->nodes[i].n_inputs && !s; k++) {
                int v = g->nodes[i].inputs[k];
                if (v < 0 || !needs_recompute(&c, v)) continue;
                int r;
                s = recompute(&c, v, &r, err);
                if (!s) g->nodes[i].inputs[k] = r;
            }
        }
        c.order[c.n_order++] = i;
    }
    if (!s) s = vp_graph_reorder(g, c.order, err);
    if (n_recompute) *n_recompute = c.n_recompute;
    free(c.copy);
    free(c.order);
    return s;
}

