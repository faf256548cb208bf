/* What the pieces of the DOT writer share, and nothing callers see (they include
 * plan_artifacts.h).
 *
 *   dot.c            the entry point: per-value maps, what a value is, the drawing's order
 *   dot_clusters.c   names -> block keys -> clusters of steps by block and phase group
 *   dot_ladder.c     backward steps on the rank of their forward step, and the rank groups
 *   dot_style.c      escaping, colours, the graph header, the legend, input nodes
 *   dot_full.c       one node per step, inside its cluster, and the edges between steps
 *   dot_collapsed.c  one summary node per cluster, and the summed edges between them */
#ifndef VP_DOT_INTERNAL_H
#define VP_DOT_INTERNAL_H

#include <stdint.h>
#include <stdio.h>

#include "memory/plan.h"

#define DOT_COLLAPSE_STEPS 2000 /* more steps than this: one node per cluster */
#define DOT_MAX_SUMMARY 400     /* more summary nodes than this: coarser block keys */
/* Without the ladder (see dot_ladder.c) long edges make dot slow from a few hundred steps
 * on, measured: 136 steps 4 s, 266 steps 80 s; 240 summary nodes 12 s. */
#define DOT_LOOSE_STEPS 100
#define DOT_LOOSE_SUMMARY 100
#define DOT_KEY_LEN 200
#define DOT_SHORT_LEN 28

enum { GROUP_FWD, GROUP_BWD, GROUP_OPT, GROUP_COMM, GROUP_COUNT };

typedef struct dot_cluster {
    char *key;                /* dotted block path, "" for the top level */
    int group;
    int n_steps;
    int n_params, n_state;    /* producerless values first used here */
    int64_t param_bytes, state_bytes;
    int has_peak;
} dot_cluster;

typedef struct dot_ctx {
    const vp_plan *p;
    const vp_graph *g;
    FILE *f;
    int bucket;               /* block indices per key: 1 exact, 0 none (see cut_key, dot_clusters.c) */
    int collapsed;
    int *producer_step;       /* value -> the step writing it, -1 */
    int *first_use;           /* value -> first non-optimizer step reading it, or first step at all */
    int *cluster_of;          /* step -> cluster, -1 when drawn at the top level */
    int *anchor;              /* step -> the forward step whose rank it shares, -1 */
    int ladder;               /* most backward steps found their forward step */
    dot_cluster *cl;
    int n_cl;
    int *slots;               /* open addressing: (group, key) -> cluster */
    int n_slots;
} dot_ctx;

/* ---- values (dot.c) ---- */

int vp_dot_is_param(const dot_ctx *c, int v);
int vp_dot_is_state(const dot_ctx *c, int v);
/* The value's buffer size, or its own when it has no buffer; -1 when its shape is unknown. */
int64_t vp_dot_value_bytes(const dot_ctx *c, int v);
/* Fed inputs are drawn (there are few); parameters, state and constants are not. */
int vp_dot_drawn_input(const dot_ctx *c, int v);
/* Whether input k of n already appeared among its earlier inputs (one edge per value). */
int vp_dot_seen_before(const vp_node *n, int k);

/* ---- clusters (dot_clusters.c) ---- */

/* The phase group (GROUP_*) a step of phase ph is clustered in. */
int vp_dot_group_of(vp_phase ph);
/* Fills c->cl and c->cluster_of from the step names at c->bucket; VP_ERR_NOMEM. */
vp_status vp_dot_clusters_build(dot_ctx *c);
void vp_dot_clusters_clear(dot_ctx *c);

/* ---- the ladder (dot_ladder.c) ---- */

/* Fills c->anchor and c->ladder; needs the per-value maps. */
vp_status vp_dot_anchors_build(dot_ctx *c);
vp_status vp_dot_write_ranks(const dot_ctx *c);
vp_status vp_dot_write_cluster_ranks(const dot_ctx *c);

/* ---- style (dot_style.c) ---- */

/* Fill and border per phase (vp_phase, through vp_dot_phase_index), and per group. */
extern const char *const vp_dot_phase_fill[];
extern const char *const vp_dot_phase_line[];
extern const char *const vp_dot_group_name[GROUP_COUNT];
extern const char *const vp_dot_group_fill[GROUP_COUNT];
extern const char *const vp_dot_group_line[GROUP_COUNT];

int vp_dot_phase_index(vp_phase ph);
void vp_dot_put_esc(FILE *f, const char *s);
void vp_dot_write_header(const dot_ctx *c);
void vp_dot_write_legend(const dot_ctx *c);
void vp_dot_write_weights_note(FILE *f, const dot_cluster *k);
void vp_dot_write_input(const dot_ctx *c, int v);

/* ---- the two drawings (dot_full.c, dot_collapsed.c) ---- */

vp_status vp_dot_write_steps(const dot_ctx *c);
vp_status vp_dot_write_edges(const dot_ctx *c);
vp_status vp_dot_write_collapsed(const dot_ctx *c);

#endif
