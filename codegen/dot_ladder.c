/* The ladder: backward beside forward.
 *
 * Drawn top to bottom in step order, a saved activation's edge would run from its
 * forward node down past the loss and back up to its backward reader: N^2 long edges
 * that make dot's crossing minimisation take minutes at a few hundred steps.  Putting
 * each backward node on the rank of the forward node it differentiates (and each update
 * on the rank of its parameter's first reader) keeps every edge short and reads as a
 * ladder: forward going down on the left, backward coming up beside it.
 *
 * In: the plan and the per-value maps (dot.c).  Out: c->anchor per step, c->ladder when
 * most backward steps found their forward step, and the "rank=same" groups that say so
 * to dot, per step in the full drawing or per cluster in the collapsed one. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dot_internal.h"

static uint32_t name_hash(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

/* Forward step named exactly name[0..n), or -1. */
static int forward_find(const dot_ctx *c, const int *slots, int n_slots, const char *name, size_t n) {
    for (uint32_t i = name_hash(name, n) & (uint32_t)(n_slots - 1); slots[i] >= 0; i = (i + 1) & (uint32_t)(n_slots - 1)) {
        const char *other = c->g->nodes[c->p->steps[slots[i]]].name;
        if (!strncmp(other, name, n) && other[n] == 0) return slots[i];
    }
    return -1;
}

static int is_forward(const dot_ctx *c, int s) {
    vp_phase ph = c->g->nodes[c->p->steps[s]].phase;
    return ph == VP_PHASE_FORWARD || ph == VP_PHASE_LOSS;
}

/* A backward step whose name does not say its forward step (graphs from other tools)
 * sits by the latest forward step whose output it reads: the activation it was saved for. */
static int saved_input_anchor(const dot_ctx *c, const vp_node *n) {
    int best = -1;
    for (int k = 0; k < n->n_inputs; k++) {
        int v = n->inputs[k], ps = v >= 0 ? c->producer_step[v] : -1;
        if (ps > best && is_forward(c, ps)) best = ps;
    }
    return best;
}

static void anchor_fill(dot_ctx *c, const int *slots, int n_slots) {
    for (int s = 0; s < c->p->n_steps; s++) {
        const vp_node *n = &c->g->nodes[c->p->steps[s]];
        const char *grad = n->name ? strstr(n->name, "_grad/") : NULL;
        c->anchor[s] = -1;
        if (n->phase == VP_PHASE_BACKWARD && grad) c->anchor[s] = forward_find(c, slots, n_slots, n->name, (size_t)(grad - n->name));
        if (n->phase == VP_PHASE_BACKWARD && c->anchor[s] < 0) c->anchor[s] = saved_input_anchor(c, n);
        for (int k = 0; n->phase == VP_PHASE_OPTIMIZER && k < n->n_inputs && c->anchor[s] < 0; k++) {
            int v = n->inputs[k], u = v >= 0 ? c->first_use[v] : -1;
            if (u >= 0 && is_forward(c, u)) c->anchor[s] = u;
        }
    }
}

vp_status vp_dot_anchors_build(dot_ctx *c) {
    int n_slots = 16;
    while (n_slots < 2 * c->p->n_steps + 2) n_slots *= 2;
    int *slots = malloc((size_t)n_slots * sizeof *slots);
    c->anchor = malloc(((size_t)c->p->n_steps + 1) * sizeof *c->anchor);
    if (!slots || !c->anchor) {
        free(slots);
        return VP_ERR_NOMEM;
    }
    for (int i = 0; i < n_slots; i++) slots[i] = -1;
    for (int s = 0; s < c->p->n_steps; s++) {
        const char *name = c->g->nodes[c->p->steps[s]].name;
        if (!is_forward(c, s) || !name || forward_find(c, slots, n_slots, name, strlen(name)) >= 0) continue;
        uint32_t i = name_hash(name, strlen(name)) & (uint32_t)(n_slots - 1);
        while (slots[i] >= 0) i = (i + 1) & (uint32_t)(n_slots - 1);
        slots[i] = s;
    }
    anchor_fill(c, slots, n_slots);
    free(slots);
    int n_bwd = 0, n_pinned = 0;
    for (int s = 0; s < c->p->n_steps; s++) {
        if (c->g->nodes[c->p->steps[s]].phase != VP_PHASE_BACKWARD) continue;
        n_bwd++;
        n_pinned += c->anchor[s] >= 0;
    }
    c->ladder = 2 * n_pinned >= n_bwd;
    return VP_OK;
}

/* One "rank=same" group per forward step that has anchored steps. */
vp_status vp_dot_write_ranks(const dot_ctx *c) {
    int n = c->p->n_steps;
    int *head = malloc(((size_t)n + 1) * sizeof *head), *next = malloc(((size_t)n + 1) * sizeof *next);
    if (!head || !next) {
        free(head);
        free(next);
        return VP_ERR_NOMEM;
    }
    for (int s = 0; s < n; s++) head[s] = -1;
    for (int s = n - 1; s >= 0; s--)
        if (c->anchor[s] >= 0) next[s] = head[c->anchor[s]], head[c->anchor[s]] = s;
    for (int s = 0; s < n; s++) {
        if (head[s] < 0) continue;
        fprintf(c->f, "  { rank=same; s%d;", s);
        for (int t = head[s]; t >= 0; t = next[t]) fprintf(c->f, " s%d;", t);
        fprintf(c->f, " }\n");
    }
    free(head);
    free(next);
    return VP_OK;
}

/* The same ladder for summary nodes: a backward or optimizer cluster shares the rank of
 * the forward cluster its first anchored step points into. */
vp_status vp_dot_write_cluster_ranks(const dot_ctx *c) {
    int *anchor = malloc(((size_t)c->n_cl + 1) * sizeof *anchor);
    if (!anchor) return VP_ERR_NOMEM;
    for (int k = 0; k < c->n_cl; k++) anchor[k] = -1;
    for (int s = 0; s < c->p->n_steps; s++) {
        int k = c->cluster_of[s], a = c->anchor[s] >= 0 ? c->cluster_of[c->anchor[s]] : -1;
        if (anchor[k] < 0 && a >= 0 && a != k && c->cl[a].group == GROUP_FWD) anchor[k] = a;
    }
    for (int a = 0; a < c->n_cl; a++) {
        int any = 0;
        for (int k = 0; k < c->n_cl; k++) {
            if (anchor[k] != a) continue;
            if (!any++) fprintf(c->f, "  { rank=same; c%d;", a);
            fprintf(c->f, " c%d;", k);
        }
        if (any) fprintf(c->f, " }\n");
    }
    free(anchor);
    return VP_OK;
}
