/* Folding over frozen initializers (fold_frozen.h says what goes in, what comes out and
 * what it keeps true).
 *
 * One walk in node order: the graph is topological, so a node's inputs folded by this
 * pass are folded before it is looked at, and a chain (Identity, Slice, Slice, Equal,
 * Cast) folds whole.  The folding itself is the constant folder's (ir/infer.h); this
 * file says which initializers count as constant and which folds are worth their bytes. */
#include "train/fold_frozen.h"

#include <stdlib.h>

#include "ir/infer.h"

/* The caps.  A folded output is a constant: it is held for the whole step and stored in
 * the plan file (and in the planner's memory while it plans), where the step's own output
 * was a temporary that lived a few steps.  Folding trades per-step work for those bytes,
 * which is a good trade while they stay small next to what the step already holds:
 *  - an output of up to CHEAP_BYTES folds whatever it reads (a 512 x 512 float mask);
 *  - a larger one folds only when it is at most GROWTH times the bytes it reads, so a
 *    Cast from bool to float (4x) folds, an Expand or Tile that repeats frozen data over
 *    a batch does not;
 *  - and never past MAX_BYTES (a 4096 x 4096 float mask), so that the planner does not
 *    copy a huge frozen weight (a LoRA base model's, gigabytes) into a second, cast or
 *    transposed, constant of the same size. */
#define CHEAP_BYTES ((int64_t)1 << 20)
#define GROWTH 4
#define MAX_BYTES ((int64_t)64 << 20)

static int64_t value_bytes(const vp_value *v) { return vp_value_numel(v) * (int64_t)vp_dtype_size(v->dtype); }

/* A float initializer the step reads but never writes: not trained, not carried from step
 * to step (running statistics, optimizer state), not fed or kept on the host. */
static int is_frozen(const vp_value *v) {
    return (v->flags & VP_VAL_INITIALIZER) && v->data && vp_dtype_is_float(v->dtype) &&
           !(v->flags & (VP_VAL_PARAM | VP_VAL_STATE | VP_VAL_INPUT | VP_VAL_FED | VP_VAL_HOST | VP_VAL_OUTER));
}

/* Node n reads something only this pass makes constant, and folding it stays within the
 * caps.  A node over older constants alone was left by vp_infer on purpose (its size). */
static int worth_folding(const vp_graph *g, const vp_node *n, const char *frozen) {
    int64_t in = 0, out = 0;
    int reads_frozen = 0;
    for (int k = 0; k < n->n_inputs; k++) {
        if (n->inputs[k] < 0) continue;
        reads_frozen |= frozen[n->inputs[k]];
        in += value_bytes(&g->values[n->inputs[k]]);
    }
    for (int k = 0; k < n->n_outputs; k++)
        if (n->outputs[k] >= 0) out += value_bytes(&g->values[n->outputs[k]]);
    if (!reads_frozen) return 0;
    if (out <= CHEAP_BYTES) return 1;
    return out <= MAX_BYTES && out / GROWTH <= in;
}

vp_status vp_fold_frozen(vp_graph *g, const vp_training *t, int *n_folded, vp_error *err) {
    *n_folded = 0;
    /* per value: frozen data, or an output this pass folded (data as constant as it) */
    char *frozen = calloc((size_t)g->n_values + 1, 1);
    if (!frozen) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    for (int v = 0; v < g->n_values; v++) frozen[v] = (char)is_frozen(&g->values[v]);
    for (int c = 0; c < t->n_carry; c++) { /* carried: written at the end of every step */
        if (t->carry[c].from >= 0) frozen[t->carry[c].from] = 0;
        if (t->carry[c].to >= 0) frozen[t->carry[c].to] = 0;
    }
    /* an adapted weight is frozen while training, but its adapters merge into it on
     * export (train/lora.h): a constant made of it would not follow */
    for (int a = 0; a < t->lora.n; a++) frozen[t->lora.adapters[a].weight] = 0;
    vp_status s = VP_OK;
    for (int i = 0; i < g->n_nodes && !s; i++) {
        const vp_node *n = &g->nodes[i];
        if (n->folded || !n->op || !worth_folding(g, n, frozen)) continue;
        int folded = 0;
        s = vp_fold_node(g, i, frozen, INT64_MAX, &folded, err);
        if (s || !folded) continue;
        ++*n_folded;
        for (int k = 0; k < n->n_outputs; k++)
            if (n->outputs[k] >= 0) frozen[n->outputs[k]] = 1;
    }
    free(frozen);
    return s;
}
