/* The straight-through masks: which FakeQuant keeps a byte mask for its gradient.
 *
 * In: a training graph after autodiff, every FakeQuantGrad reading X (the fake-quantised
 * value) to rebuild its mask.  Out: where nothing else in the backward reads X (a
 * LayerNorm's or a Gelu's output feeding a MatMul: their own gradients read their
 * inputs), the forward FakeQuant also writes Mask, a bool per element, and the
 * FakeQuantGrad reads Mask instead of X, so the step keeps 1 byte per element rather
 * than X's 4 until the backward.  Where X is kept anyway (a ReLU output its gradient
 * reads, a parameter, a graph input, the residual stream), the mask is rebuilt from X
 * and costs nothing.  LSQ's scale gradient reads X itself: never masked. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/graph_build.h"
#include "ir/infer.h"
#include "quant/qat.h"
#include "train/training.h"

static int is_grad(const vp_node *n) { return !strcmp(n->domain, "vplan") && !strcmp(n->op_type, "FakeQuantGrad"); }

/* X is read after the forward by something other than a FakeQuantGrad. */
static int kept_anyway(const vp_graph *g, int x) {
    const vp_value *v = &g->values[x];
    if (v->producer < 0 || v->data || (v->flags & (VP_VAL_OUTPUT | VP_VAL_PARAM | VP_VAL_STATE | VP_VAL_INITIALIZER | VP_VAL_INPUT)))
        return 1;
    for (int j = 0; j < g->n_nodes; j++) {
        const vp_node *n = &g->nodes[j];
        if (n->phase == VP_PHASE_FORWARD || n->phase == VP_PHASE_LOSS || is_grad(n)) continue;
        for (int k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] == x) return 1;
    }
    return 0;
}

/* The forward FakeQuant of (x, scale) and its Mask, made on first use. */
static vp_status mask_of(vp_graph *g, int x, int scale, int *mask, vp_qat_counts *counts, vp_error *err) {
    for (int i = 0; i < g->n_nodes; i++) {
        vp_node *f = &g->nodes[i];
        if (f->phase != VP_PHASE_FORWARD || !vp_qat_is_fake_quant(f) || f->inputs[0] != x || f->inputs[1] != scale) continue;
        if (f->n_outputs > 1 && f->outputs[1] >= 0) {
            *mask = f->outputs[1];
            return VP_OK;
        }
        char name[600];
        snprintf(name, sizeof name, "%s/mask", g->values[f->outputs[0]].name);
        int m = vp_graph_add_unique_value(g, name);
        f = &g->nodes[i];
        int *o = m < 0 ? NULL : realloc(f->outputs, 2 * sizeof *o);
        if (!o) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
        o[1] = m;
        f->outputs = o;
        f->n_outputs = 2;
        vp_status s = vp_infer_node(g, i, 0, NULL, err);
        if (s) return s;
        g->values[m].producer = i;
        counts->masks++;
        counts->mask_bytes += vp_value_numel(&g->values[m]);
        *mask = m;
        return VP_OK;
    }
    return vp_fail(err, VP_ERR_RUNTIME, "internal: no forward FakeQuant of '%s'", g->values[x].name);
}

vp_status vp_qat_masks(vp_graph *g, const vp_qat_opts *o, vp_qat_counts *counts, vp_error *err) {
    if (!o->enabled) return VP_OK;
    int n0 = g->n_nodes;
    for (int i = 0; i < n0; i++) {
        const vp_node *b = &g->nodes[i];
        if (!is_grad(b) || (b->n_outputs > 1 && b->outputs[1] >= 0)) continue;
        int x = b->inputs[1], scale = b->inputs[2], mask;
        if (g->values[x].dtype == VP_BOOL || kept_anyway(g, x)) continue;
        vp_status s = mask_of(g, x, scale, &mask, counts, err);
        if (s) return s;
        g->nodes[i].inputs[1] = mask;
        if ((s = vp_infer_node(g, i, 0, NULL, err))) return s;
    }
    return vp_graph_link(g, err);
}
