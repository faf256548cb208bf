/* Liveness: one buffer per value the steps touch, with its category and the steps
 * during which it must hold its contents, and the alias groups of buffers that share
 * storage.
 *
 * In: a scheduled plan.  Out: p->buffers and p->buffer_of.  Invariants: parameters,
 * optimizer state and carried values live through the whole step (the next step reads
 * them); a value produced at step i and last read at step j is live on [i, j].  Three
 * kinds of value share their input's storage (an alias group, whose root holds the
 * union lifetime): an update's output (the runtime reads the new value there at the
 * next step), a view (Reshape, Identity: the same bytes under another shape, written
 * by nobody), and the output of an op that may write over an input nothing reads
 * afterwards.  Storage is written again only once every value read from it, directly or
 * through a view, has been read for the last time.  Categories come last, per value
 * and per group (categorize). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "ir/op_registry.h"
#include "memory/plan.h"

const char *vp_category_name(vp_category c) {
    static const char *const names[VP_CAT_COUNT] = {"parameters", "gradients", "optimizer_state", "activations",
                                                    "temporaries", "workspace", "inputs", "constants",
                                                    "weight_copies", "communication", "host"};
    return (int)c >= 0 && c < VP_CAT_COUNT ? names[c] : "?";
}

/* Dropout copies its input unless it trains: training_mode absent (or before opset 12)
 * or a constant false.  A training_mode fed at run time may draw a mask, so no view. */
static int dropout_is_identity(const vp_graph *g, const vp_node *n) {
    int mode = n->opset >= 12 && n->n_inputs > 2 ? n->inputs[2] : -1;
    if (mode < 0) return 1;
    const vp_value *m = &g->values[mode];
    return m->data && m->dtype == VP_BOOL && !((const unsigned char *)m->data)[0];
}

int vp_node_is_view(const vp_graph *g, const vp_node *n) {
    if (!n->op || !(n->op->flags & VP_OP_VIEW) || n->n_inputs < 1 || n->n_outputs < 1) return 0;
    int x = n->inputs[0], y = n->outputs[0];
    if (x < 0 || y < 0) return 0;
    const vp_value *in = &g->values[x], *out = &g->values[y];
    if (in->dtype != out->dtype || vp_value_numel(in) != vp_value_numel(out)) return 0;
    return strcmp(n->op_type, "Dropout") ? 1 : dropout_is_identity(g, n);
}

/* A Cast of a trainable parameter to another float dtype: mixed precision's weight copy. */
static int is_weight_copy(const vp_graph *g, int v) {
    const vp_value *val = &g->values[v];
    if (val->producer < 0 || !vp_dtype_is_float(val->dtype)) return 0;
    const vp_node *n = &g->nodes[val->producer];
    int cast = !n->domain[0] && !strcmp(n->op_type, "Cast");
    int fake_quant = !strcmp(n->domain, "vplan") && !strcmp(n->op_type, "FakeQuant"); /* QAT's quantised weight */
    if (!(cast || fake_quant) || n->n_inputs < 1 || n->inputs[0] < 0) return 0;
    return (g->values[n->inputs[0]].flags & VP_VAL_PARAM) != 0;
}

/* What a value is by its flags; a computed value is a temporary until categorize()
 * knows whether it is saved for the backward pass. */
static vp_category category_by_flags(const vp_plan *p, int v, const char *is_grad) {
    if (p->g->values[v].flags & VP_VAL_HOST) return VP_CAT_HOST;
    const vp_graph *g = p->g;
    const vp_value *val = &g->values[v];
    if (val->flags & VP_VAL_INPUT) return VP_CAT_INPUTS;
    if ((val->flags & VP_VAL_INITIALIZER) && vp_dtype_is_float(val->dtype) && !(val->flags & VP_VAL_CONST))
        return VP_CAT_PARAMETERS;
    if (val->flags & VP_VAL_STATE) return VP_CAT_OPTIMIZER_STATE;
    if (val->flags & (VP_VAL_CONST | VP_VAL_INITIALIZER) || val->producer < 0) return VP_CAT_CONSTANTS;
    if (is_grad[v]) return VP_CAT_GRADIENTS;
    if (is_weight_copy(g, v)) return VP_CAT_WEIGHT_COPIES;
    return VP_CAT_TEMPORARIES;
}

static int64_t align_up(int64_t x, int64_t a) { return a > 1 ? (x + a - 1) / a * a : x; }

static int root_of(const vp_plan *p, int b) {
    while (p->buffers[b].alias_of >= 0) b = p->buffers[b].alias_of;
    return b;
}

/* What the group passes keep per buffer while groups form. */
typedef struct groups {
    char *pinned;    /* root: some member exists before the step or is read after it */
    char *has_alias; /* some buffer aliases this one */
    int *next_write; /* root: step at which a carried value is written over the group, INT_MAX none */
    int *view_of;    /* the buffer this one is a view of, sharing its storage; -1 */
    int *own_last;   /* the last step reading this buffer's own value (not its group's) */
    char *carried;   /* a carried value (an update's output) written over its old value */
} groups;

/* b (a root) joins the group of root r: r's storage now also holds b's lifetime. */
static void join(vp_plan *p, groups *gs, int b, int r) {
    vp_buffer *rb = &p->buffers[r], *bb = &p->buffers[b];
    bb->alias_of = r;
    gs->has_alias[r] = 1;
    gs->pinned[r] |= gs->pinned[b];
    if (bb->first < rb->first) rb->first = bb->first;
    if (bb->last > rb->last) rb->last = bb->last;
}

/* Views: a view's output is its input's bytes, so it joins its input's group, unless
 * the group's storage is written again (a carried value: an update) while the view is
 * still read; the schedule places updates after every reader through a view, so that
 * happens only in hand-made orders, and then the view stays a copy. */
static void share_views(vp_plan *p, groups *gs) {
    const vp_graph *g = p->g;
    for (int s = 0; s < p->n_steps; s++) {
        const vp_node *n = &g->nodes[p->steps[s]];
        if (!vp_node_is_view(g, n)) continue;
        int ob = p->buffer_of[n->outputs[0]], ib = p->buffer_of[n->inputs[0]];
        if (ob < 0 || ib < 0 || p->buffers[ob].alias_of >= 0 || gs->has_alias[ob]) continue;
        const vp_value *out = &g->values[n->outputs[0]];
        if (out->data || (out->flags & (VP_VAL_INPUT | VP_VAL_INITIALIZER | VP_VAL_PARAM | VP_VAL_STATE))) continue;
        if (p->buffers[ob].bytes != p->buffers[ib].bytes) continue;
        if ((out->flags ^ g->values[n->inputs[0]].flags) & VP_VAL_HOST) continue; /* host and device never share */
        int r = root_of(p, ib);
        int w = gs->next_write[r];
        if (w > s && w != INT_MAX && p->buffers[ob].last >= w) continue;
        join(p, gs, ob, r);
        gs->view_of[ob] = ib;
    }
}

/* In-place reuse, as ggml-alloc does: an op that allows it writes its output over an
 * input whose storage nothing reads afterwards (same size and dtype; the whole alias
 * group read for the last time here), so the two share storage. */
static void share_in_place(vp_plan *p, const vp_training *t, groups *gs) {
    const vp_graph *g = p->g;
    for (int s = 0; s < p->n_steps; s++) {
        const vp_node *n = &g->nodes[p->steps[s]];
        if (!n->op || !(n->op->flags & VP_OP_INPLACE) || n->n_outputs < 1 || n->outputs[0] < 0) continue;
        /* a fused cast's kernel writes the output in another dtype than it reads */
        if (n->n_attrs && vp_node_attr(n, VP_CAST_ATTR)) continue;
        int ob = p->buffer_of[n->outputs[0]];
        if (ob < 0 || p->buffers[ob].alias_of >= 0 || gs->pinned[ob]) continue;
        const vp_value *out = &g->values[n->outputs[0]];
        if (out->flags & (VP_VAL_OUTPUT | VP_VAL_PARAM | VP_VAL_STATE) || (t && n->outputs[0] == t->loss)) continue;
        for (int k = 0; k < 2 && k < n->n_inputs; k++) {
            int v = n->inputs[k];
            if (v < 0) continue;
            const vp_value *in = &g->values[v];
            int ib = p->buffer_of[v];
            if (ib < 0) continue;
            int root = root_of(p, ib);
            /* only storage some step wrote this time, read for the last time here */
            if (gs->pinned[root] || p->buffers[root].last != s) continue;
            if (in->dtype != out->dtype || p->buffers[ib].bytes != p->buffers[ob].bytes) continue;
            if ((in->flags ^ out->flags) & VP_VAL_HOST) continue; /* host and device never share */
            /* another input read from the same storage must be read element for element
             * (its own shape is the output's), or the write would clobber what it reads;
             * and in-place kernels read only inputs 0 and 1 before writing: a variadic
             * Sum adds input 2 on into the output afterwards, so no later input may
             * share the storage at all */
            int clash = 0;
            for (int j = 0; j < n->n_inputs && !clash; j++) {
                int u = n->inputs[j];
                if (j == k || u < 0 || p->buffer_of[u] < 0 || root_of(p, p->buffer_of[u]) != root) continue;
                clash = j >= 2 || p->buffers[p->buffer_of[u]].bytes != p->buffers[ob].bytes;
            }
            if (clash) continue;
            join(p, gs, ob, root);
            break;
        }
    }
}

/* The step where the backward pass starts (its first backward or recompute node);
 * n_steps when there is none. */
static int backward_start(const vp_plan *p) {
    for (int s = 0; s < p->n_steps; s++) {
        vp_phase ph = p->g->nodes[p->steps[s]].phase;
        if (ph == VP_PHASE_BACKWARD || ph == VP_PHASE_RECOMPUTE) return s;
    }
    return p->n_steps;
}

/* Read or written by a tensor-parallel collective: the partial sums and what the
 * all-reduce makes of them. */
static int touches_collective(const vp_graph *g, int v) {
    const vp_value *val = &g->values[v];
    if (val->producer >= 0 && g->nodes[val->producer].op && (g->nodes[val->producer].op->flags & VP_OP_COLLECTIVE)) return 1;
    for (int k = 0; k < val->n_consumers; k++) {
        const vp_node *n = &g->nodes[val->consumers[k]];
        if (n->op && (n->op->flags & VP_OP_COLLECTIVE)) return 1;
    }
    return 0;
}

static int cat_rank(vp_category c) {
    return c == VP_CAT_ACTIVATIONS ? 3 : c == VP_CAT_GRADIENTS ? 2 : c == VP_CAT_TEMPORARIES ? 0 : 1;
}

/* Categories, once the groups have formed.  A buffer's own: a forward value (forward or
 * loss phase) still live when the backward pass starts, whoever reads it (a backward
 * node, a recompute node, the caller) and whether directly or through a view, is an
 * activation; other computed values are gradients or temporaries; a view of storage
 * that exists before the step, and an update's output, are what that storage is.  A
 * group's category, its root's (the byte counts use it): the storage's own when it
 * exists before the step, else an activation if it holds one, else a gradient if it
 * holds one, else what its values are. */
static void categorize(vp_plan *p, groups *gs, int *ext_last, vp_category *group_cat) {
    const vp_graph *g = p->g;
    int start = backward_start(p);
    /* a value lives as long as its views are read: views come after what they view */
    for (int b = 0; b < p->n_buffers; b++) ext_last[b] = gs->own_last[b];
    for (int b = p->n_buffers - 1; b >= 0; b--)
        if (gs->view_of[b] >= 0 && ext_last[b] > ext_last[gs->view_of[b]]) ext_last[gs->view_of[b]] = ext_last[b];
    for (int b = 0; b < p->n_buffers; b++) {
        vp_buffer *buf = &p->buffers[b];
        const vp_value *v = &g->values[buf->value];
        int root = root_of(p, b), pre = gs->pinned[root] & 2;
        if (buf->cat != VP_CAT_TEMPORARIES) continue;
        if ((gs->carried[b] || gs->view_of[b] >= 0) && pre) buf->cat = p->buffers[root].cat;
        else if (v->producer >= 0 && buf->first < start && ext_last[b] >= start &&
                 (g->nodes[v->producer].phase == VP_PHASE_FORWARD || g->nodes[v->producer].phase == VP_PHASE_LOSS))
            buf->cat = VP_CAT_ACTIVATIONS;
    }
    for (int b = 0; b < p->n_buffers; b++)
        if (p->buffers[b].cat == VP_CAT_TEMPORARIES && touches_collective(g, p->buffers[b].value))
            p->buffers[b].cat = VP_CAT_COMM;
    for (int b = 0; b < p->n_buffers; b++) group_cat[b] = p->buffers[b].cat;
    for (int b = 0; b < p->n_buffers; b++) {
        int root = root_of(p, b);
        if (gs->pinned[root] & 2) continue; /* the storage is what exists before the step */
        if (cat_rank(p->buffers[b].cat) > cat_rank(group_cat[root])) group_cat[root] = p->buffers[b].cat;
    }
    for (int b = 0; b < p->n_buffers; b++)
        if (p->buffers[b].alias_of < 0) p->buffers[b].cat = group_cat[b];
}

vp_status vp_liveness(vp_plan *p, const vp_training *t, vp_error *err) {
    vp_graph *g = p->g;
    p->buffer_of = malloc(((size_t)g->n_values + 1) * sizeof *p->buffer_of);
    p->buffers = calloc((size_t)g->n_values + 1, sizeof *p->buffers);
    char *is_grad = calloc((size_t)g->n_values + 1, 1);
    int *step_of = malloc(((size_t)g->n_nodes + 1) * sizeof *step_of);
    size_t nv = (size_t)g->n_values + 1;
    groups gs = {calloc(nv, 1), calloc(nv, 1), malloc(nv * sizeof(int)), malloc(nv * sizeof(int)),
                 malloc(nv * sizeof(int)), calloc(nv, 1)};
    int *ext_last = malloc(nv * sizeof *ext_last);
    vp_category *group_cat = malloc(nv * sizeof *group_cat);
    vp_status s = VP_OK;
    if (!p->buffer_of || !p->buffers || !is_grad || !step_of || !gs.pinned || !gs.has_alias || !gs.next_write ||
        !gs.view_of || !gs.own_last || !gs.carried || !ext_last || !group_cat) {
        s = vp_fail(err, VP_ERR_NOMEM, "out of memory in liveness");
        goto done;
    }
    for (int v = 0; v < g->n_values; v++) p->buffer_of[v] = -1, gs.next_write[v] = INT_MAX, gs.view_of[v] = -1;
    for (int i = 0; i < g->n_nodes; i++) step_of[i] = -1;
    for (int st = 0; st < p->n_steps; st++) step_of[p->steps[st]] = st;
    for (int i = 0; t && i < t->n_params; i++)
        if (t->grads && t->grads[i] >= 0) is_grad[t->grads[i]] = 1;
    int last_step = p->n_steps ? p->n_steps - 1 : 0;

    for (int st = 0; st < p->n_steps; st++) {
        const vp_node *n = &g->nodes[p->steps[st]];
        for (int io = 0; io < 2; io++) {
            int cnt = io ? n->n_outputs : n->n_inputs;
            const int *ids = io ? n->outputs : n->inputs;
            for (int k = 0; k < cnt; k++) {
                int v = ids[k];
                if (v < 0 || p->buffer_of[v] >= 0) continue;
                const vp_value *val = &g->values[v];
                vp_buffer *b = &p->buffers[p->n_buffers];
                b->value = v;
                b->cat = category_by_flags(p, v, is_grad);
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
                    (t && v == t->loss)) {
                    b->last = last_step;
                    gs.pinned[p->n_buffers] = produced ? 1 : 3;
                }
                if (!produced) b->first = 0;
                gs.own_last[p->n_buffers] = b->last;
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
        gs.has_alias[from] = 1;
        gs.pinned[from] |= 1;
        gs.carried[to] = 1;
        int w = g->values[t->carry[c].to].producer;
        if (w >= 0 && step_of[w] >= 0 && step_of[w] < gs.next_write[from]) gs.next_write[from] = step_of[w];
    }
    share_views(p, &gs);
    share_in_place(p, t, &gs);
    categorize(p, &gs, ext_last, group_cat);
done:
    free(is_grad);
    free(step_of);
    free(gs.pinned);
    free(gs.has_alias);
    free(gs.next_write);
    free(gs.view_of);
    free(gs.own_last);
    free(gs.carried);
    free(ext_last);
    free(group_cat);
    return s;
}
