/* The plan as a Graphviz digraph.
 *
 * In: a built plan.  Out: a DOT file with one node per step, coloured by phase, edges
 * producer -> consumer labelled with the tensor size, the peak step in bold red.  Steps
 * are grouped in clusters by block ("blocks.0", "layer1.0") and phase group (forward,
 * backward, optimizer), derived from the names torch exports, so a real model reads as
 * a stack of blocks instead of a hairball.  Parameters are not drawn (every block has
 * dozens); each cluster notes their count and size instead.  Backward steps share the
 * rank of the forward step they differentiate (the ladder), which keeps edges
 * short and dot fast.  Past DOT_COLLAPSE_STEPS steps, or past DOT_LOOSE_STEPS when no
 * ladder can be found, each cluster becomes one summary node: dot's layout is
 * superlinear and a 10,000-node drawing is unreadable anyway.
 *
 * This file holds the context and the order of the drawing; dot_internal.h says which
 * file does the rest. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dot_internal.h"
#include "ir/atomic_file.h"
#include "plan_artifacts.h"

/* ---- per-value maps ---- */

static vp_status maps_build(dot_ctx *c) {
    const vp_plan *p = c->p;
    size_t nv = (size_t)c->g->n_values + 1, ns = (size_t)p->n_steps + 1;
    c->producer_step = malloc(nv * sizeof(int));
    c->first_use = malloc(nv * sizeof(int));
    c->cluster_of = malloc(ns * sizeof(int));
    c->cl = calloc(ns, sizeof *c->cl);
    for (c->n_slots = 16; c->n_slots < 2 * (int)ns; c->n_slots *= 2) {}
    c->slots = malloc((size_t)c->n_slots * sizeof(int));
    if (!c->producer_step || !c->first_use || !c->cluster_of || !c->cl || !c->slots) return VP_ERR_NOMEM;
    for (int v = 0; v < c->g->n_values; v++) c->producer_step[v] = c->first_use[v] = -1;
    for (int i = 0; i < c->n_slots; i++) c->slots[i] = -1;
    for (int s = 0; s < p->n_steps; s++) {
        const vp_node *n = &c->g->nodes[p->steps[s]];
        for (int k = 0; k < n->n_outputs; k++)
            if (n->outputs[k] >= 0) c->producer_step[n->outputs[k]] = s;
        for (int k = 0; k < n->n_inputs; k++) {
            int v = n->inputs[k];
            if (v < 0) continue;
            /* prefer a forward reader, so a parameter counts in its block, not its update's */
            int prev = c->first_use[v];
            if (prev < 0 || (c->g->nodes[p->steps[prev]].phase == VP_PHASE_OPTIMIZER && n->phase != VP_PHASE_OPTIMIZER))
                c->first_use[v] = s;
        }
    }
    return VP_OK;
}

static void ctx_free(dot_ctx *c) {
    vp_dot_clusters_clear(c);
    free(c->producer_step);
    free(c->first_use);
    free(c->cluster_of);
    free(c->anchor);
    free(c->cl);
    free(c->slots);
}

/* ---- values ---- */

int vp_dot_is_param(const dot_ctx *c, int v) {
    int b = c->p->buffer_of ? c->p->buffer_of[v] : -1;
    if (b >= 0) return c->p->buffers[b].cat == VP_CAT_PARAMETERS;
    return (c->g->values[v].flags & VP_VAL_PARAM) != 0;
}

int vp_dot_is_state(const dot_ctx *c, int v) {
    int b = c->p->buffer_of ? c->p->buffer_of[v] : -1;
    if (b >= 0) return c->p->buffers[b].cat == VP_CAT_OPTIMIZER_STATE;
    return (c->g->values[v].flags & VP_VAL_STATE) != 0;
}

int64_t vp_dot_value_bytes(const dot_ctx *c, int v) {
    int b = c->p->buffer_of ? c->p->buffer_of[v] : -1;
    if (b >= 0) return c->p->buffers[b].bytes;
    const vp_value *val = &c->g->values[v];
    return val->rank >= 0 ? vp_value_numel(val) * (int64_t)vp_dtype_size(val->dtype) : -1;
}

int vp_dot_drawn_input(const dot_ctx *c, int v) {
    return c->producer_step[v] < 0 && (c->g->values[v].flags & VP_VAL_INPUT) && !vp_dot_is_param(c, v);
}

int vp_dot_seen_before(const vp_node *n, int k) {
    for (int j = 0; j < k; j++)
        if (n->inputs[j] == n->inputs[k]) return 1;
    return 0;
}

/* ---- the drawing ---- */

static vp_status write_graph(dot_ctx *c) {
    vp_status s = vp_dot_clusters_build(c);
    /* too many blocks even collapsed: group their indices in ranges, then drop them */
    int max_summary = c->ladder ? DOT_MAX_SUMMARY : DOT_LOOSE_SUMMARY;
    while (!s && c->collapsed && c->n_cl > max_summary && c->bucket) {
        c->bucket = c->bucket < 1024 ? c->bucket * 4 : 0;
        s = vp_dot_clusters_build(c);
    }
    if (s) return s;
    vp_dot_write_header(c);
    vp_dot_write_legend(c);
    s = c->collapsed ? vp_dot_write_collapsed(c) : vp_dot_write_steps(c);
    if (!s && !c->collapsed) s = vp_dot_write_edges(c);
    if (!s) s = c->collapsed ? vp_dot_write_cluster_ranks(c) : vp_dot_write_ranks(c);
    fprintf(c->f, "}\n");
    return s;
}

vp_status vp_dot_write(const vp_plan *p, const char *path, vp_error *err) {
    if (!p || !p->g) return vp_fail(err, VP_ERR_INVALID, "%s: no plan to draw", path);
    vp_atomic_file af;
    vp_status s = vp_atomic_file_open(&af, path, err);
    if (s) return s;
    FILE *f = af.f;
    dot_ctx c = {.p = p, .g = p->g, .f = f, .bucket = 1, .collapsed = p->n_steps > DOT_COLLAPSE_STEPS};
    s = maps_build(&c);
    if (!s) s = vp_dot_anchors_build(&c);
    if (!c.ladder && p->n_steps > DOT_LOOSE_STEPS) c.collapsed = 1;
    if (!s) s = write_graph(&c);
    ctx_free(&c);
    if (s) vp_atomic_file_abort(&af);
    if (s == VP_ERR_NOMEM) return vp_fail(err, s, "%s: out of memory drawing the plan", path);
    return s ? s : vp_atomic_file_commit(&af, err);
}
