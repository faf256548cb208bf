/* What the checkpointing MILP sees of a training step.  See remat_ilp.h.
 *
 * Modelled: the forward nodes whose outputs the backward reads, and their forward
 * ancestors, stopping at nodes whose outputs outlive the step (graph outputs).  Memory
 * that recomputation does not change (parameters, gradients, optimizer state, loss
 * values, carried running statistics) is read off the plan step by step as the base. */
#include <stdlib.h>
#include <string.h>

#include "remat/cost.h"
#include "remat/remat_ilp.h"

int vp_ivec_push(vp_ivec *v, int x) {
    if (v->n == v->cap) {
        int cap = v->cap ? 2 * v->cap : 16;
        int *a = realloc(v->a, (size_t)cap * sizeof *a);
        if (!a) return 0;
        v->a = a;
        v->cap = cap;
    }
    v->a[v->n++] = x;
    return 1;
}

void vp_ilp_model_free(vp_ilp_model *m) {
    for (int i = 0; m->deps && i < m->n; i++) free(m->deps[i].a);
    for (int i = 0; m->users && i < m->n_slot; i++) free(m->users[i].a);
    free(m->deps);
    free(m->users);
    free(m->node); free(m->mi); free(m->cost); free(m->node_mem); free(m->first_slot); free(m->n_slots);
    free(m->last_t); free(m->slot_node); free(m->slot_mem); free(m->slot_pos); free(m->slot_fwd_last);
    free(m->base);
    free(m->stage_step.a); free(m->read_start.a); free(m->read.a); free(m->cand_start.a); free(m->cand.a);
    memset(m, 0, sizeof *m);
}

static int root_of(const vp_plan *p, int b) {
    while (p->buffers[b].alias_of >= 0) b = p->buffers[b].alias_of;
    return b;
}

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

static int read_by_backward(const vp_graph *g, int v) {
    for (int c = 0; c < g->values[v].n_consumers; c++)
        if (g->nodes[g->values[v].consumers[c]].phase == VP_PHASE_BACKWARD) return 1;
    return 0;
}

static int pick_nodes(vp_ilp_model *m, const vp_graph *g, const vp_plan *p0, const int *step_of) {
    int nn = g->n_nodes;
    char *pinned = calloc((size_t)nn + 1, 1), *want = calloc((size_t)nn + 1, 1);
    int *stack = malloc(((size_t)nn + 1) * sizeof *stack), top = 0;
    int ok = pinned && want && stack;
    for (int i = 0; ok && i < nn; i++) {
        const vp_node *n = &g->nodes[i];
        pinned[i] = n->folded || n->phase != VP_PHASE_FORWARD || step_of[i] < 0;
        for (int k = 0; k < n->n_outputs; k++)
            if (n->outputs[k] >= 0 && (g->values[n->outputs[k]].flags & VP_VAL_OUTPUT)) pinned[i] = 1;
    }
    for (int k = m->fr_end; ok && k < p0->n_steps; k++) {
        const vp_node *b = &g->nodes[p0->steps[k]];
        for (int j = 0; b->phase == VP_PHASE_BACKWARD && j < b->n_inputs; j++) {
            int f = b->inputs[j] >= 0 ? g->values[b->inputs[j]].producer : -1;
            if (f >= 0 && !pinned[f] && !want[f]) want[f] = 1, stack[top++] = f;
        }
    }
    while (ok && top > 0) {
        const vp_node *n = &g->nodes[stack[--top]];
        for (int j = 0; j < n->n_inputs; j++) {
            int f = n->inputs[j] >= 0 ? g->values[n->inputs[j]].producer : -1;
            if (f >= 0 && !pinned[f] && !want[f]) want[f] = 1, stack[top++] = f;
        }
    }
    for (int i = 0; ok && i < nn; i++) m->n += want[i];
    m->node = ok ? malloc(((size_t)m->n + 1) * sizeof *m->node) : NULL;
    ok = ok && m->node;
    /* the graph keeps forward nodes in forward (topological) order */
    for (int i = 0, k = 0; ok && i < nn; i++)
        if (want[i]) m->mi[i] = k, m->node[k++] = i;
    free(pinned);
    free(want);
    free(stack);
    return ok;
}

/* Slots, their sizes and forward lifetimes; costs; which slots each node reads. */
static int make_slots(vp_ilp_model *m, const vp_graph *g, const vp_plan *p0, const vp_device_profile *dev,
                      const int *step_of, const char *carried, int *slot_of_value, char *counted) {
    int n = m->n;
    m->cost = calloc((size_t)n + 1, sizeof *m->cost);
    m->node_mem = calloc((size_t)n + 1, sizeof *m->node_mem);
    m->first_slot = malloc(((size_t)n + 1) * sizeof *m->first_slot);
    m->n_slots = calloc((size_t)n + 1, sizeof *m->n_slots);
    m->last_t = malloc(((size_t)n + 1) * sizeof *m->last_t);
    m->deps = calloc((size_t)n + 1, sizeof *m->deps);
    m->slot_node = malloc(((size_t)2 * n + 1) * sizeof *m->slot_node);
    m->slot_mem = calloc((size_t)2 * n + 1, sizeof *m->slot_mem);
    m->slot_pos = malloc(((size_t)2 * n + 1) * sizeof *m->slot_pos);
    m->slot_fwd_last = malloc(((size_t)2 * n + 1) * sizeof *m->slot_fwd_last);
    m->users = calloc((size_t)2 * n + 1, sizeof *m->users);
    if (!m->cost || !m->node_mem || !m->first_slot || !m->n_slots || !m->last_t || !m->deps || !m->slot_node ||
        !m->slot_mem || !m->slot_pos || !m->slot_fwd_last || !m->users)
        return 0;
    const double mib = 1.0 / 1048576.0;
    for (int i = 0; i < n; i++) {
        const vp_node *nd = &g->nodes[m->node[i]];
        vp_node_cost c = vp_cost_node(g, nd);
        m->cost[i] = 1e6 * vp_cost_seconds(&c, dev, 0);
        m->last_t[i] = -1;
        m->first_slot[i] = m->n_slot;
        int slot[2] = {-1, -1}; /* [1]: read by the backward, [0]: by the forward only */
        for (int k = 0; k < nd->n_outputs; k++) {
            int v = nd->outputs[k];
            /* carried state (BatchNorm's running statistics) lives the whole step anyway */
            if (v < 0 || carried[v] || p0->buffer_of[v] < 0) continue;
            int cls = read_by_backward(g, v);
            if (slot[cls] < 0) {
                slot[cls] = m->n_slot++;
                m->slot_node[slot[cls]] = i;
                m->slot_pos[slot[cls]] = m->slot_fwd_last[slot[cls]] = step_of[m->node[i]];
                m->n_slots[i]++;
            }
            int s = slot[cls];
            slot_of_value[v] = s;
            counted[v] = 1;
            m->slot_mem[s] += (double)p0->buffers[p0->buffer_of[v]].size * mib;
            m->node_mem[i] += (double)p0->buffers[p0->buffer_of[v]].size * mib;
            for (int c2 = 0; c2 < g->values[v].n_consumers; c2++) {
                int cs = step_of[g->values[v].consumers[c2]];
                if (cs >= 0 && cs < m->fr_end && cs > m->slot_fwd_last[s]) m->slot_fwd_last[s] = cs;
            }
        }
        for (int j = 0; j < nd->n_inputs; j++) {
            int v = nd->inputs[j], f = v >= 0 ? g->values[v].producer : -1;
            int s = f >= 0 && m->mi[f] >= 0 ? slot_of_value[v] : -1, seen = 0;
            for (int q = 0; s >= 0 && q < m->deps[i].n; q++) seen |= m->deps[i].a[q] == s;
            if (s >= 0 && !seen && (!vp_ivec_push(&m->deps[i], s) || !vp_ivec_push(&m->users[s], i))) return 0;
        }
    }
    return 1;
}

/* The memory outside the model at each step: every buffer it does not count (an
 * in-place output over a modelled value counts on its own lifetime). */
static int make_base(vp_ilp_model *m, const vp_plan *p0, const char *counted) {
    int ns = p0->n_steps;
    double *diff = calloc((size_t)ns + 2, sizeof *diff);
    m->base = calloc((size_t)ns + 1, sizeof *m->base);
    if (!diff || !m->base) {
        free(diff);
        return 0;
    }
    for (int b = 0; b < p0->n_buffers; b++) {
        const vp_buffer *bf = &p0->buffers[b];
        if (counted[bf->value]) continue;
        if (bf->alias_of >= 0 && !counted[p0->buffers[root_of(p0, b)].value]) continue;
        diff[bf->first] += (double)bf->size / 1048576.0;
        diff[bf->last + 1] -= (double)bf->size / 1048576.0;
    }
    for (int k = 0; k < ns; k++) m->base[k] = (k ? m->base[k - 1] : 0) + diff[k];
    free(diff);
    return 1;
}

/* Stages: backward nodes reading slots; candidates: the nodes of those slots and their
 * forward ancestors. */
static int make_stages(vp_ilp_model *m, const vp_graph *g, const vp_plan *p0, const int *slot_of_value, int *too_large) {
    int n = m->n;
    int *stamp = malloc(((size_t)n + 1) * sizeof *stamp), *sstamp = malloc(((size_t)m->n_slot + 1) * sizeof *sstamp);
    int *stack = malloc(((size_t)n + 1) * sizeof *stack);
    int ok = stamp && sstamp && stack;
    for (int i = 0; ok && i < n; i++) stamp[i] = -1;
    for (int i = 0; ok && i < m->n_slot; i++) sstamp[i] = -1;
    long binaries = m->n_slot;
    for (int k = m->fr_end; ok && k < p0->n_steps; k++) {
        const vp_node *b = &g->nodes[p0->steps[k]];
        if (b->phase != VP_PHASE_BACKWARD) continue;
        int t = m->T, r0 = m->read.n, top = 0;
        for (int j = 0; ok && j < b->n_inputs; j++) {
            int v = b->inputs[j], f = v >= 0 ? g->values[v].producer : -1;
            int s = f >= 0 && m->mi[f] >= 0 ? slot_of_value[v] : -1;
            if (s < 0 || sstamp[s] == t) continue;
            sstamp[s] = t;
            ok = vp_ivec_push(&m->read, s);
            int d = m->slot_node[s];
            if (stamp[d] != t) stamp[d] = t, stack[top++] = d;
        }
        if (!ok || m->read.n == r0) continue;
        ok = vp_ivec_push(&m->stage_step, k) && vp_ivec_push(&m->read_start, r0) && vp_ivec_push(&m->cand_start, m->cand.n);
        while (ok && top > 0) {
            int i = stack[--top];
            ok = vp_ivec_push(&m->cand, i);
            m->last_t[i] = t;
            for (int q = 0; q < m->deps[i].n; q++) {
                int d = m->slot_node[m->deps[i].a[q]];
                if (stamp[d] != t) stamp[d] = t, stack[top++] = d;
            }
        }
        if (!ok) break;
        int c0 = m->cand_start.a[t];
        qsort(m->cand.a + c0, (size_t)(m->cand.n - c0), sizeof *m->cand.a, cmp_int);
        m->T++;
        binaries += m->cand.n - c0 + (long)m->n_slot;
        if (binaries > VP_ILP_MAX_BINARIES || (long)m->T * m->n_slot > VP_ILP_MAX_CELLS ||
            (long)m->n_slot * m->fr_end > VP_ILP_MAX_CELLS) {
            *too_large = 1;
            break;
        }
    }
    ok = ok && vp_ivec_push(&m->read_start, m->read.n) && vp_ivec_push(&m->cand_start, m->cand.n);
    free(stamp);
    free(sstamp);
    free(stack);
    return ok;
}

vp_status vp_ilp_model_build(vp_ilp_model *m, const vp_graph *g, const vp_plan *p0, const vp_training *t,
                             const vp_device_profile *dev, int *too_large, vp_error *err) {
    memset(m, 0, sizeof *m);
    *too_large = 0;
    int nn = g->n_nodes, nv = g->n_values, ns = p0->n_steps;
    m->n_steps = ns;
    int *step_of = malloc(((size_t)nn + 1) * sizeof *step_of);
    int *slot_of_value = malloc(((size_t)nv + 1) * sizeof *slot_of_value);
    char *carried = calloc((size_t)nv + 1, 1), *counted = calloc((size_t)nv + 1, 1);
    m->mi = malloc(((size_t)nn + 1) * sizeof *m->mi);
    int ok = step_of && slot_of_value && carried && counted && m->mi;
    for (int i = 0; ok && i < nn; i++) step_of[i] = -1, m->mi[i] = -1;
    for (int v = 0; ok && v < nv; v++) slot_of_value[v] = -1;
    for (int k = 0; ok && k < ns; k++) step_of[p0->steps[k]] = k;
    for (int c = 0; ok && t && c < t->n_carry; c++)
        if (t->carry[c].to >= 0) carried[t->carry[c].to] = 1;
    m->fr_end = ns;
    for (int k = 0; ok && k < ns && m->fr_end == ns; k++)
        if (g->nodes[p0->steps[k]].phase == VP_PHASE_BACKWARD) m->fr_end = k;
    ok = ok && pick_nodes(m, g, p0, step_of) && make_slots(m, g, p0, dev, step_of, carried, slot_of_value, counted) &&
         make_base(m, p0, counted) && make_stages(m, g, p0, slot_of_value, too_large);
    free(step_of);
    free(slot_of_value);
    free(carried);
    free(counted);
    if (!ok) {
        vp_ilp_model_free(m);
        return vp_fail(err, VP_ERR_NOMEM, "out of memory building the checkpointing MILP");
    }
    return VP_OK;
}
