/* Recompute insertion: the mechanism under every checkpointing strategy.
 *
 * In: a training graph and, per value, whether the backward pass keeps it.  Out: for
 * each forward activation the backward reads but does not keep, a copy of its
 * producer (phase RECOMPUTE) placed right before the first backward node that needs
 * it, recursively recomputing its own unkept inputs from the nearest kept values; the
 * backward nodes read the copies, and the node order is rewritten so the graph stays
 * topologically sorted.  A copy of a node with side effects writes them to fresh values
 * nobody reads (a recomputed BatchNorm does not update its running statistics twice),
 * and reads the state the original updated as its storage then holds it: the updated
 * value (the old one has been written over by the time any copy runs).  A carried value
 * a forward node writes (an observer's updated range) is never recomputed either: its
 * storage holds it for the whole step, and a second update would move it again. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "remat/remat.h"

typedef struct remat_ctx {
    vp_graph *g;
    const vp_training *t; /* its carries: state a forward node updates in place */
    const char *keep;
    int n_orig_values;
    int *copy;      /* original value -> its recomputed copy, -1 */
    int *order;     /* the new node order being built */
    int n_order;
    int n_recompute;
    char *carried;  /* per value: the new value of a carry (some carry's to) */
    int *from_head; /* per value: the first carry whose from (the old value written over) it is, -1 */
    int *from_next; /* per carry: the next carry with the same from, -1 */
} remat_ctx;

/* The per-value tables (copy, carries) and room for order_cap nodes in the order; 0 when
 * out of memory (free with ctx_free all the same). */
static int ctx_init(remat_ctx *c, vp_graph *g, const vp_training *t, const char *keep, size_t order_cap) {
    memset(c, 0, sizeof *c);
    c->g = g;
    c->t = t;
    c->keep = keep;
    c->n_orig_values = g->n_values;
    c->copy = malloc(((size_t)g->n_values + 1) * sizeof *c->copy);
    c->order = malloc((order_cap + 1) * sizeof *c->order);
    c->carried = calloc((size_t)g->n_values + 1, 1);
    c->from_head = malloc(((size_t)g->n_values + 1) * sizeof *c->from_head);
    c->from_next = malloc(((size_t)(t ? t->n_carry : 0) + 1) * sizeof *c->from_next);
    if (!c->copy || !c->order || !c->carried || !c->from_head || !c->from_next) return 0;
    for (int v = 0; v < g->n_values; v++) c->copy[v] = c->from_head[v] = -1;
    for (int q = t ? t->n_carry - 1 : -1; q >= 0; q--) { /* lists in carry order */
        int from = t->carry[q].from, to = t->carry[q].to;
        if (to >= 0 && to < g->n_values) c->carried[to] = 1;
        c->from_next[q] = -1;
        if (from < 0 || from >= g->n_values) continue;
        c->from_next[q] = c->from_head[from];
        c->from_head[from] = q;
    }
    return 1;
}

static void ctx_free(remat_ctx *c) {
    free(c->copy);
    free(c->order);
    free(c->carried);
    free(c->from_head);
    free(c->from_next);
}

static int is_forward_activation(const vp_graph *g, int v, int n_orig) {
    if (v < 0 || v >= n_orig) return 0;
    const vp_value *val = &g->values[v];
    if (val->producer < 0 || val->data) return 0;
    const vp_node *p = &g->nodes[val->producer];
    return !p->folded && p->phase == VP_PHASE_FORWARD;
}

/* v is the new value of state carried to the next step. */
static int is_carried(const remat_ctx *c, int v) { return v < c->n_orig_values && c->carried[v]; }

static int needs_recompute(const remat_ctx *c, int v) {
    return is_forward_activation(c->g, v, c->n_orig_values) && !c->keep[v] && !is_carried(c, v);
}

/* A copy of forward node src (phase RECOMPUTE) reading ins, appended to the order;
 * c->copy then maps each of src's outputs to the copy's. */
static vp_status emit_copy(remat_ctx *c, int src, int *ins, vp_error *err) {
    vp_graph *g = c->g;
    int n_in = g->nodes[src].n_inputs, n_out = g->nodes[src].n_outputs;
    /* an input that is state src itself updates reads the updated value: carries in
     * order, each matching the input as the earlier ones left it */
    for (int k = 0; k < n_in; k++)
        for (int q = -1;;) {
            int cur = ins[k], next = -1;
            if (cur < 0 || cur >= c->n_orig_values) break;
            for (int e = c->from_head[cur]; e >= 0 && next < 0; e = c->from_next[e])
                if (e > q && c->t->carry[e].to >= 0 && g->values[c->t->carry[e].to].producer == src) next = e;
            if (next < 0) break;
            ins[k] = c->t->carry[next].to;
            q = next;
        }
    int *outs = malloc(((size_t)n_out + 1) * sizeof *outs);
    vp_status s = outs ? VP_OK : vp_fail(err, VP_ERR_NOMEM, "out of memory");
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
        }
    }
    free(outs);
    return s;
}

static vp_status recompute(remat_ctx *c, int v, int *out, vp_error *err) {
    if (c->copy[v] >= 0) {
        *out = c->copy[v];
        return VP_OK;
    }
    vp_graph *g = c->g;
    int src = g->values[v].producer;
    int n_in = g->nodes[src].n_inputs;
    int *ins = malloc(((size_t)n_in + 1) * sizeof *ins);
    vp_status s = ins ? VP_OK : vp_fail(err, VP_ERR_NOMEM, "out of memory");
    for (int k = 0; k < n_in && !s; k++) {
        int u = g->nodes[src].inputs[k];
        ins[k] = u;
        if (u >= 0 && needs_recompute(c, u)) s = recompute(c, u, &ins[k], err);
    }
    if (!s) s = emit_copy(c, src, ins, err);
    if (!s) *out = c->copy[v];
    free(ins);
    return s;
}

vp_status vp_remat_apply(vp_graph *g, const vp_training *t, const char *keep, int *n_recompute, vp_error *err) {
    return vp_remat_apply_map(g, t, keep, n_recompute, NULL, err);
}

vp_status vp_remat_apply_map(vp_graph *g, const vp_training *t, const char *keep, int *n_recompute, int *copy_of,
                             vp_error *err) {
    int n0 = g->n_nodes;
    remat_ctx c;
    if (!ctx_init(&c, g, t, keep, (size_t)2 * n0)) { /* at most one copy of each forward node */
        ctx_free(&c);
        return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    }
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
    for (int v = 0; copy_of && v < c.n_orig_values; v++) copy_of[v] = c.copy[v];
    ctx_free(&c);
    return s;
}


void vp_remat_schedule_free(vp_remat_schedule *rs) {
    free(rs->stage_node);
    free(rs->start);
    free(rs->nodes);
    memset(rs, 0, sizeof *rs);
}

/* The latest copy of a forward activation, or the value itself. */
static int current(const remat_ctx *c, int v) {
    return v >= 0 && is_forward_activation(c->g, v, c->n_orig_values) && c->copy[v] >= 0 && !is_carried(c, v) ? c->copy[v] : v;
}

vp_status vp_remat_apply_schedule(vp_graph *g, const vp_training *tr, const vp_remat_schedule *rs, int *n_recompute,
                                  vp_error *err) {
    int n0 = g->n_nodes;
    remat_ctx c;
    int *stage_of = malloc(((size_t)n0 + 1) * sizeof *stage_of);
    int n_copies = rs->n_stages ? rs->start[rs->n_stages] : 0;
    int made = ctx_init(&c, g, tr, NULL, (size_t)n0 + (size_t)n_copies);
    vp_status s = made && stage_of ? VP_OK : vp_fail(err, VP_ERR_NOMEM, "out of memory");
    for (int i = 0; !s && i < n0; i++) stage_of[i] = -1;
    /* a schedule names backward nodes once each and forward nodes in forward order */
    for (int t = 0; !s && t < rs->n_stages; t++) {
        int b = rs->stage_node[t];
        if (b < 0 || b >= n0 || g->nodes[b].phase != VP_PHASE_BACKWARD || stage_of[b] >= 0) {
            s = vp_fail(err, VP_ERR_INVALID, "recompute schedule: stage %d names node %d, not a backward node", t, b);
            break;
        }
        stage_of[b] = t;
        for (int k = rs->start[t]; !s && k < rs->start[t + 1]; k++) {
            int f = rs->nodes[k];
            if (f < 0 || f >= n0 || g->nodes[f].phase != VP_PHASE_FORWARD || g->nodes[f].folded ||
                (k > rs->start[t] && f <= rs->nodes[k - 1]))
                s = vp_fail(err, VP_ERR_INVALID, "recompute schedule: stage %d recomputes node %d out of forward order",
                            t, f);
        }
    }
    int *ins = NULL;
    for (int i = 0; i < n0 && !s; i++) {
        int t = stage_of[i];
        for (int k = t >= 0 ? rs->start[t] : 0; t >= 0 && k < rs->start[t + 1] && !s; k++) {
            int f = rs->nodes[k], n_in = g->nodes[f].n_inputs;
            int *grown = realloc(ins, ((size_t)n_in + 1) * sizeof *ins);
            if (!grown) {
                s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
                break;
            }
            ins = grown;
            for (int j = 0; j < n_in; j++) ins[j] = current(&c, g->nodes[f].inputs[j]);
            s = emit_copy(&c, f, ins, err);
        }
        if (g->nodes[i].phase == VP_PHASE_BACKWARD)
            for (int k = 0; k < g->nodes[i].n_inputs; k++) g->nodes[i].inputs[k] = current(&c, g->nodes[i].inputs[k]);
        c.order[c.n_order++] = i;
    }
    if (!s) s = vp_graph_reorder(g, c.order, err);
    if (n_recompute) *n_recompute = c.n_recompute;
    free(ins);
    free(stage_of);
    ctx_free(&c);
    return s;
}

/* The schedule vp_remat_apply would follow, without touching g: for each backward node,
 * the forward nodes recomputed right before it (dependencies first, then sorted into
 * forward order, which is topological). */
typedef struct sim {
    const vp_graph *g;
    const char *keep;
    char *copied;    /* per value: a copy exists */
    int *list, n;    /* the current stage's nodes */
} sim;

static void sim_recompute(sim *s, int v) {
    const vp_graph *g = s->g;
    int src = g->values[v].producer;
    const vp_node *n = &g->nodes[src];
    for (int k = 0; k < n->n_inputs; k++) {
        int u = n->inputs[k];
        if (u >= 0 && is_forward_activation(g, u, g->n_values) && !s->keep[u] && !s->copied[u]) sim_recompute(s, u);
    }
    for (int k = 0; k < n->n_outputs; k++)
        if (n->outputs[k] >= 0) s->copied[n->outputs[k]] = 1;
    s->list[s->n++] = src;
}

static int cmp_node(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

vp_status vp_remat_schedule_from_keep(const vp_graph *g, const char *keep, vp_remat_schedule *out, vp_error *err) {
    memset(out, 0, sizeof *out);
    sim s = {g, keep, calloc((size_t)g->n_values + 1, 1), malloc(((size_t)g->n_nodes + 1) * sizeof *s.list), 0};
    out->stage_node = malloc(((size_t)g->n_nodes + 1) * sizeof *out->stage_node);
    out->start = malloc(((size_t)g->n_nodes + 2) * sizeof *out->start);
    out->nodes = malloc(((size_t)g->n_nodes + 1) * sizeof *out->nodes);
    if (!s.copied || !s.list || !out->stage_node || !out->start || !out->nodes) {
        free(s.copied);
        free(s.list);
        vp_remat_schedule_free(out);
        return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    }
    int total = 0;
    out->start[0] = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const vp_node *b = &g->nodes[i];
        if (b->folded || b->phase != VP_PHASE_BACKWARD) continue;
        s.n = 0;
        for (int k = 0; k < b->n_inputs; k++) {
            int v = b->inputs[k];
            if (v >= 0 && is_forward_activation(g, v, g->n_values) && !keep[v] && !s.copied[v]) sim_recompute(&s, v);
        }
        if (!s.n) continue;
        qsort(s.list, (size_t)s.n, sizeof *s.list, cmp_node);
        memcpy(out->nodes + total, s.list, (size_t)s.n * sizeof *s.list);
        total += s.n;
        out->stage_node[out->n_stages++] = i;
        out->start[out->n_stages] = total;
    }
    free(s.copied);
    free(s.list);
    return VP_OK;
}
