/* Norm outputs recomputed for the backward, rather than held from the forward.
 *
 * In: a built training step, its consumers linked.  A LayerNormalization or RMSNorm
 * (com.microsoft.SimplifiedLayerNormalization) reads X and writes Y; its gradient reads
 * X (with the saved mean and inverse deviation), and the products that read Y (a
 * transformer's Q, K, V or its first MLP product) read Y again for their weight
 * gradients.  So both X and Y live from the forward to the backward: two activations of
 * the model's width per norm where the backward needs one in any form.
 * Out: the same step in which each backward reader of Y (or of a view or Cast of Y: a
 * Reshape before a Gemm, the low-precision copy under --precision) reads a second run
 * of the norm from X (remat's recompute insertion places it right before the first
 * backward node that reads it; named "<norm>/renorm", it joins the backward), so Y dies
 * after its last forward reader.  A norm is memory-bound: one more read of X and write of Y, small beside the
 * products that read Y (about 1% of a transformer layer's step).
 *
 * Keeps true: every value has the bits it had (the second run is the same kernel on the
 * same X, scale and bias, and a fused update writes a weight only after its last
 * reader), so the step trains exactly as before.  Only norms whose X the backward keeps
 * anyway are touched, so no activation lives longer than before; Y's that are state, a
 * graph output or read by a recompute node already (sequence parallelism's re-gather)
 * are left alone. */
#include "remat/recompute_norms.h"

#include "remat/remat.h"

#include <stdlib.h>
#include <string.h>

static int is_norm(const vp_node *n) {
    return n->phase == VP_PHASE_FORWARD && !n->folded &&
           ((!n->domain[0] && !strcmp(n->op_type, "LayerNormalization")) ||
            (!strcmp(n->domain, "com.microsoft") && !strcmp(n->op_type, "SimplifiedLayerNormalization")));
}

static int read_in_phase(const vp_graph *g, int v, vp_phase ph) {
    const vp_value *val = &g->values[v];
    for (int c = 0; c < val->n_consumers; c++)
        if (g->nodes[val->consumers[c]].phase == ph) return 1;
    return 0;
}

/* A forward node that only moves or narrows its first input: a view (Reshape,
 * Squeeze, ...: its storage) or a Cast.  Recomputing through it costs nothing more. */
static int passes_through(const vp_graph *g, const vp_node *n) {
    if (n->folded || n->phase != VP_PHASE_FORWARD || n->n_outputs != 1 || n->outputs[0] < 0) return 0;
    if (!n->domain[0] && !strcmp(n->op_type, "Cast") && n->n_inputs == 1) return 1;
    return vp_node_is_view(g, n);
}

/* Lists in members[] Y and every value reached from it through passes_through nodes,
 * marking them in closure[]; returns their count, or -1 when one of them must stay as
 * it is (marks undone). */
static int collect(const vp_graph *g, int y, char *closure, int *members) {
    int n = 0, ok = 1;
    closure[y] = 1;
    members[n++] = y;
    for (int i = 0; i < n; i++) {
        const vp_value *val = &g->values[members[i]];
        if (val->flags & (VP_VAL_OUTPUT | VP_VAL_STATE) || read_in_phase(g, members[i], VP_PHASE_RECOMPUTE)) ok = 0;
        for (int c = 0; c < val->n_consumers; c++) {
            const vp_node *r = &g->nodes[val->consumers[c]];
            if (!passes_through(g, r) || r->inputs[0] != members[i] || closure[r->outputs[0]]) continue;
            closure[r->outputs[0]] = 1;
            members[n++] = r->outputs[0];
        }
    }
    int read_back = 0;
    for (int i = 0; i < n && !read_back; i++) read_back = read_in_phase(g, members[i], VP_PHASE_BACKWARD);
    if (ok && read_back) return n;
    for (int i = 0; i < n; i++) closure[members[i]] = 0;
    return -1;
}

vp_status vp_remat_norms(vp_graph *g, vp_training *t, int *n_norms, vp_error *err) {
    *n_norms = 0;
    free(t->renorm_values);
    t->renorm_values = NULL;
    t->n_renorm_values = 0;
    vp_status s = vp_graph_link(g, err);
    if (s) return s;
    size_t nv = (size_t)g->n_values + 1;
    char *keep = malloc(nv), *closure = calloc(nv, 1);
    int *members = malloc(nv * sizeof *members);
    if (!keep || !closure || !members) {
        free(keep); free(closure); free(members);
        return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < g->n_nodes; i++) {
        const vp_node *n = &g->nodes[i];
        if (!is_norm(n) || n->n_inputs < 1 || n->inputs[0] < 0 || n->n_outputs < 1 || n->outputs[0] < 0) continue;
        int y = n->outputs[0];
        if (!closure[y] && read_in_phase(g, n->inputs[0], VP_PHASE_BACKWARD) && collect(g, y, closure, members) > 0)
            (*n_norms)++;
    }
    for (size_t v = 0; v < nv; v++) keep[v] = !closure[v];
    int first_new = g->n_values, *copy_of = *n_norms ? malloc(nv * sizeof *copy_of) : NULL;
    if (*n_norms && !copy_of) s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
    if (!s && *n_norms) s = vp_remat_apply_map(g, t, keep, NULL, copy_of, err);
    /* what the second runs wrote, beside the norm's own values (vp_remat_norms_undo) */
    int pairs = 0;
    for (int v = 0; !s && *n_norms && v < first_new; v++) pairs += copy_of[v] >= 0;
    if (pairs && !(t->renorm_values = malloc((size_t)pairs * 2 * sizeof *t->renorm_values)))
        s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
    for (int v = 0; !s && pairs && v < first_new; v++)
        if (copy_of[v] >= 0) {
            t->renorm_values[2 * t->n_renorm_values] = copy_of[v];
            t->renorm_values[2 * t->n_renorm_values + 1] = v;
            t->n_renorm_values++;
        }
    free(copy_of);
    /* The copies join the backward (and are named for why they run): to checkpointing
     * they are backward nodes reading X like the norm's gradient, so a strategy that
     * does not keep X recomputes it for them too, and their outputs are the backward's
     * temporaries, never activations to keep or recompute. */
    for (int i = 0; !s && *n_norms && i < g->n_nodes; i++) {
        vp_node *n = &g->nodes[i];
        if (n->phase != VP_PHASE_RECOMPUTE || n->n_outputs < 1 || n->outputs[0] < first_new) continue;
        n->phase = VP_PHASE_BACKWARD;
        size_t len = strlen(n->name), suf = strlen("/recompute");
        if (len < suf || strcmp(n->name + len - suf, "/recompute")) continue;
        char *name = malloc(len + 1);
        if (!name) {
            s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
            break;
        }
        memcpy(name, n->name, len - suf);
        strcpy(name + len - suf, "/renorm");
        free(n->name);
        n->name = name;
    }
    free(keep);
    free(closure);
    free(members);
    return s;
}

vp_status vp_remat_norms_undo(vp_graph *g, const vp_training *t, vp_error *err) {
    if (!t->n_renorm_values) return VP_OK;
    int *orig = malloc(((size_t)g->n_values + 1) * sizeof *orig), *keep = malloc(((size_t)g->n_nodes + 1) * sizeof *keep);
    if (!orig || !keep) {
        free(orig);
        free(keep);
        return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    }
    for (int v = 0; v < g->n_values; v++) orig[v] = -1;
    for (int i = 0; i < t->n_renorm_values; i++) {
        int c = t->renorm_values[2 * i], o = t->renorm_values[2 * i + 1];
        if (c >= 0 && c < g->n_values && o >= 0 && o < g->n_values) orig[c] = o;
    }
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        vp_node *nd = &g->nodes[i];
        int second = 0;
        for (int k = 0; k < nd->n_outputs && !second; k++) second = nd->outputs[k] >= 0 && orig[nd->outputs[k]] >= 0;
        if (second) continue;
        for (int k = 0; k < nd->n_inputs; k++)
            if (nd->inputs[k] >= 0 && orig[nd->inputs[k]] >= 0) nd->inputs[k] = orig[nd->inputs[k]];
        keep[n++] = i;
    }
    vp_status s = vp_graph_keep_nodes(g, keep, n, err);
    free(orig);
    free(keep);
    return s;
}
