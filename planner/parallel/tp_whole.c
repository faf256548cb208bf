/* Products computed whole on every rank inside a tensor-parallel region: grouped-query
 * attention's key and value projections where n does not divide their heads, which
 * Megatron-LM replicates.
 *
 * In: the finder's walk (tp_find.c) with some candidates marked whole, beside the query
 * projection split by columns.  Such a product reads the region's input (replicated)
 * and writes a whole value: every rank computes the same keys and values and repeats
 * them to the query heads as the exporter wrote it (Unsqueeze, Expand, Reshape, rotary
 * embeddings: any op), and the op that takes the split (the fused Attention, or the
 * plain core's batched product) reads this rank's share of the heads through a Slice
 * (a cut).  Out, from vp_tp_whole_node: those Slices, and a TPCopy in front of each
 * parameter the whole chain reads (the product's weight, its bias).
 *
 * Keeps true: the forward is the one-rank forward (each rank's share of the repeated
 * heads is what its query heads read).  Each rank's backward hands the whole chain only
 * its share's part of the gradient; every op's backward is linear in the gradient it is
 * given, so the ranks' parts summed are the one-rank gradient: the TPCopy in front of
 * the region's input sums them for the activations, the TPCopy of each parameter for
 * its gradient, and the updates agree on every rank.  Hence a whole value meets no
 * other value that a gradient reaches but a parameter read there or another whole
 * value (a replicated activation's part would reach the rest of the graph unsummed),
 * and no graph output. */
#include <stdio.h>
#include <string.h>

#include "ir/graph_build.h"
#include "parallel/tp_internal.h"

int vp_tp_wrap_input(vp_tp_walk *w, int id, int k, int origin) {
    int v = w->g->nodes[id].inputs[k];
    if (v < 0 || !w->grad[v]) return 1;
    if (w->st[v].axis != VP_TP_REPLICATED) return 0;
    vp_tp_wrap *p = vp_tp_walk_push(w, (void **)&w->f->wraps, &w->f->n_wraps, &w->cap_wraps, sizeof *p);
    if (p) *p = (vp_tp_wrap){id, k, origin};
    return p != NULL;
}

static void set_outputs(vp_tp_walk *w, const vp_node *n, int origin) {
    for (int k = 0; k < n->n_outputs; k++)
        if (n->outputs[k] >= 0) w->st[n->outputs[k]] = (vp_tp_state){VP_TP_WHOLE, origin};
}

int vp_tp_whole_product(vp_tp_walk *w, int id) {
    const vp_node *n = &w->g->nodes[id];
    int wi, oa, ia;
    if (!vp_tp_product(w->g, n, &wi, &oa, &ia) || w->st[n->inputs[0]].axis != VP_TP_REPLICATED) return 0;
    for (int k = 1; k < n->n_inputs; k++) /* its weight, a Gemm's bias */
        if (!vp_tp_wrap_input(w, id, k, id)) return 0;
    w->f->is_whole[id] = 1;
    set_outputs(w, n, id);
    return 1;
}

int vp_tp_whole_step(vp_tp_walk *w, int id) {
    const vp_node *n = &w->g->nodes[id];
    if (n->folded) return 1; /* a shape of a whole value: the one-rank shape */
    if (!strcmp(n->domain, "vplan") && !strncmp(n->op_type, "TP", 2)) return 0;
    int origin = -2;
    for (int k = 0; k < n->n_inputs; k++) {
        if (n->inputs[k] < 0 || w->st[n->inputs[k]].axis != VP_TP_WHOLE) continue;
        int o = w->st[n->inputs[k]].origin;
        origin = origin == -2 || origin == o ? o : -1; /* two products' values: no one origin */
    }
    for (int k = 0; k < n->n_inputs; k++)
        if (n->inputs[k] >= 0 && w->st[n->inputs[k]].axis != VP_TP_WHOLE && !vp_tp_wrap_input(w, id, k, origin)) return 0;
    set_outputs(w, n, origin);
    return 1;
}

int vp_tp_cut_whole(vp_tp_walk *w, int id, int k, int axis, int64_t full) {
    const vp_node *n = &w->g->nodes[id];
    const vp_value *x = &w->g->values[n->inputs[k]];
    if (axis >= x->rank || x->dims[axis] != full) return 0;
    vp_tp_divides(w, n, full, "the heads");
    vp_tp_state s = w->st[n->inputs[k]];
    vp_tp_cut *c = vp_tp_walk_push(w, (void **)&w->f->cuts, &w->f->n_cuts, &w->cap_cuts, sizeof *c);
    if (!c) return 0;
    *c = (vp_tp_cut){id, k, axis, full, s.origin};
    if (s.origin >= 0) w->f->whole_at[s.origin] = id;
    return 1;
}

/* Input k of node read through its value's TPCopy (one a value, shared by its readers
 * inside the regions, whose gradients are each rank's part alike). */
static vp_status wrap_input(vp_graph *g, int node, int k, int n, int *copy_of, vp_tp_result *r, vp_error *err) {
    int v = g->nodes[node].inputs[k], fresh = copy_of[v] < 0;
    int y = vp_tp_copy(g, v, copy_of, n);
    if (y < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    g->nodes[node].inputs[k] = y;
    if (g->values[v].flags & VP_VAL_PARAM) r->n_param_copy += fresh;
    else r->n_copy += fresh;
    return VP_OK;
}

/* Slice(x, [rank * full / n], [(rank + 1) * full / n], [axis]) in front of input k. */
static vp_status cut_input(vp_graph *g, const vp_tp_cut *c, int n, int rank, vp_error *err) {
    int x = g->nodes[c->node].inputs[c->input];
    int64_t one = 1, part = c->full / n, at[3] = {rank * part, (rank + 1) * part, c->axis};
    char stem[512];
    snprintf(stem, sizeof stem, "%s/tp_share", g->values[x].name);
    int in[4] = {x, -1, -1, -1};
    for (int j = 0; j < 3; j++) in[j + 1] = vp_build_const(g, stem, VP_I64, 1, &one, &at[j]);
    int opset = g->opset_onnx > 13 ? g->opset_onnx : 13;
    int id = in[1] < 0 || in[2] < 0 || in[3] < 0 ? -1 : vp_build_node(g, "Slice", "", stem, 4, in, 1, VP_PHASE_FORWARD, opset);
    if (id < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    g->nodes[c->node].inputs[c->input] = g->nodes[id].outputs[0];
    return VP_OK;
}

vp_status vp_tp_whole_node(vp_graph *g, const vp_tp_find *f, int node, int n, int rank, int *copy_of, vp_tp_result *r,
                           vp_error *err) {
    vp_status s = VP_OK;
    for (int i = 0; i < f->n_wraps && !s; i++)
        if (f->wraps[i].node == node) s = wrap_input(g, node, f->wraps[i].input, n, copy_of, r, err);
    for (int i = 0; i < f->n_cuts && !s; i++)
        if (f->cuts[i].node == node) {
            s = cut_input(g, &f->cuts[i], n, rank, err);
            r->n_cut++;
        }
    if (!s && f->is_whole[node]) r->n_whole++;
    return s;
}
