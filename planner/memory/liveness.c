/* Liveness: one buffer per value the steps touch, with its category and the steps
 * during which it must hold its contents.
 *
 * In: a scheduled plan.  Out: p->buffers and p->buffer_of.  Invariants: parameters,
 * optimizer state and carried values live through the whole step (the next step reads
 * them); a value produced at step i and last read at step j is live on [i, j]; an
 * update's output shares its input's storage (alias group) because the runtime reads
 * the new value there at the next step. */
#include <stdlib.h>
#include <string.h>

#include "ir/op_registry.h"
#include "memory/plan.h"

const char *vp_category_name(vp_category c) {
    static const char *const names[VP_CAT_COUNT] = {"parameters", "gradients", "optimizer_state", "activations",
                                                    "temporaries", "workspace", "inputs", "constants"};
    return (int)c >= 0 && c < VP_CAT_COUNT ? names[c] : "?";
}

static vp_category categorize(const vp_plan *p, const vp_training *t, int v, const char *is_grad) {
    const vp_graph *g = p->g;
    const vp_value *val = &g->values[v];
    if (val->flags & VP_VAL_INPUT) return VP_CAT_INPUTS;
    if ((val->flags & VP_VAL_INITIALIZER) && vp_dtype_is_float(val->dtype) && !(val->flags & VP_VAL_CONST))
        return VP_CAT_PARAMETERS;
    if (val->flags & VP_VAL_STATE) return VP_CAT_OPTIMIZER_STATE;
    if (val->flags & (VP_VAL_CONST | VP_VAL_INITIALIZER) || val->producer < 0) return VP_CAT_CONSTANTS;
    if (is_grad[v]) return VP_CAT_GRADIENTS;
    vp_phase ph = g->nodes[val->producer].phase;
    if (ph == VP_PHASE_FORWARD || ph == VP_PHASE_LOSS) {
        for (int c = 0; c < val->n_consumers; c++)
            if (g->nodes[val->consumers[c]].phase == VP_PHASE_BACKWARD) return VP_CAT_ACTIVATIONS;
    }
    (void)t;
    return VP_CAT_TEMPORARIES;
}

static int64_t align_up(int64_t x, int64_t a) { return a > 1 ? (x + a - 1) / a * a : x; }

static int root_of(const vp_plan *p, int b) {
    while (p->buffers[b].alias_of >= 0) b = p->buffers[b].alias_of;
    return b;
}

/* In-place reuse, as ggml-alloc does: an op that allows it writes its output over an
 * input that nothing reads afterwards (same size and dtype), so the two share storage. */
static void share_in_place(vp_plan *p, const vp_training *t) {
    const vp_graph *g = p->g;
    for (int s = 0; s < p->n_steps; s++) {
        const vp_node *n = &g->nodes[p->steps[s]];
        if (!n->op || !(n->op->flags & VP_OP_INPLACE) || n->n_outputs < 1 || n->outputs[0] < 0) continue;
        int ob = p->buffer_of[n->outputs[0]];
        if (ob < 0 || p->buffers[ob].alias_of >= 0) continue;
        const vp_value *out = &g->values[n->outputs[0]];
        if (out->flags & (VP_VAL_OUTPUT | VP_VAL_PARAM | VP_VAL_STATE) || (t && n->outputs[0] == t->loss)) continue;
        for (int k = 0; k < 2 && k < n->n_inputs; k++) {
            int v = n->inputs[k];
            if (v < 0) continue;
            const vp_value *in = &g->values[v];
            int ib = p->buffer_of[v];
            if (ib < 0) continue;
            int root = root_of(p, ib);
            const vp_value *rv = &g->values[p->buffers[root].value];
            /* only storage some step wrote this time, read for the last time here */
            if (rv->producer < 0 || rv->data || (rv->flags & (VP_VAL_INPUT | VP_VAL_OUTPUT | VP_VAL_PARAM | VP_VAL_STATE)))
                continue;
            if (in->dtype != out->dtype || p->buffers[ib].bytes != p->buffers[ob].bytes) continue;
            if (p->buffers[root].last != s || (t && v == t->loss)) continue;
            if (k == 1 && n->inputs[0] == v) continue;
            p->buffers[ob].alias_of = root;
            vp_buffer *r = &p->buffers[root];
            if (p->buffers[ob].last > r->last) {
                r->last = p->buffers[ob].last;
                r->cat = p->buffers[ob].cat; /* the group lives on as what the output is */
            }
            break;
        }
    }
}

vp_status vp_liveness(vp_plan *p, const vp_training *t, vp_error *err) {
    vp_graph *g = p->g;
    p->buffer_of = malloc(((size_t)g->n_values + 1) * sizeof *p->buffer_of);
    p->buffers = calloc((size_t)g->n_values + 1, sizeof *p->buffers);
    char *is_grad = calloc((size_t)g->n_values + 1, 1);
    int *step_of = malloc(((size_t)g->n_nodes + 1) * sizeof *step_of);
    if (!p->buffer_of || !p->buffers || !is_grad || !step_of) {
        free(is_grad);
        free(step_of);
        return vp_fail(err, VP_ERR_NOMEM, "out of memory in liveness");
    }
    for (int v = 0; v < g->n_values; v++) p->buffer_of[v] = -1;
    for (int i = 0; i < g->n_nodes; i++) step_of[i] = -1;
    for (int s = 0; s < p->n_steps; s++) step_of[p->steps[s]] = s;
    for (int i = 0; t && i < t->n_params; i++)
        if (t->grads && t->grads[i] >= 0) is_grad[t->grads[i]] = 1;
    int last_step = p->n_steps ? p->n_steps - 1 : 0;

    for (int s = 0; s < p->n_steps; s++) {
        const vp_node *n = &g->nodes[p->steps[s]];
        for (int io = 0; io < 2; io++) {
            int cnt = io ? n->n_outputs : n->n_inputs;
            const int *ids = io ? n->outputs : n->inputs;
            for (int k = 0; k < cnt; k++) {
                int v = ids[k];
                if (v < 0 || p->buffer_of[v] >= 0) continue;
                const vp_value *val = &g->values[v];
                vp_buffer *b = &p->buffers[p->n_buffers];
                b->value = v;
                b->cat = categorize(p, t, v, is_grad);
                b->bytes = vp_value_numel(val) * (int64_t)vp_dtype_size(val->dtype);
                b->size = align_up(b->bytes, p->device.alignment);
                b->alias_of = -1;
                int produced = val->producer >= 0 && step_of[val->producer] >= 0;
                b->first = produced ? step_of[val->producer] : 0;
                b->last = b->first;
                for (int c = 0; c < val->n_consumers; c++) {
                    int cs = step_of[val->consumers[c]];
                    if (cs > b->last) b->last = cs;
                }
                /* read again next step, or read by the caller after the step */
                if (!produced || (val->flags & (VP_VAL_OUTPUT | VP_VAL_PARAM | VP_VAL_STATE)) ||
                    (t && v == t->loss))
                    b->last = last_step;
                if (!produced) b->first = 0;
                p->buffer_of[v] = p->n_buffers++;
            }
        }
    }
    /* carried values: the new value is written over the old one */
    for (int c = 0; t && c < t->n_carry; c++) {
        int from = p->buffer_of[t->carry[c].from], to = p->buffer_of[t->carry[c].to];
        if (from < 0 || to < 0) continue;
        vp_buffer *root = &p->buffers[from], *b = &p->buffers[to];
        b->alias_of = from;
        b->cat = root->cat;
        b->last = last_step;
        root->first = 0;
        root->last = last_step;
    }
    share_in_place(p, t);
    free(is_grad);
    free(step_of);
    return VP_OK;
}
