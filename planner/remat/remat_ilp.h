/* The checkpointing MILP's view of a training step (remat_ilp_model.c), read off the
 * un-checkpointed plan; the MILP itself is in remat_ilp.c.  Internal to the planner.
 *
 * Residency is tracked per slot: the outputs of a forward node that the backward pass
 * reads form one slot, the outputs only forward nodes read another, so a BatchNorm's
 * normalised output can die in the forward while its saved statistics stay for the
 * backward.  Recomputation is per node: it refills all of the node's slots. */
#ifndef VP_REMAT_ILP_H
#define VP_REMAT_ILP_H

#include "memory/plan.h"
#include "remat/remat.h"

typedef struct vp_ivec {
    int *a;
    int n, cap;
} vp_ivec;

int vp_ivec_push(vp_ivec *v, int x);

typedef struct vp_ilp_model {
    int n;               /* modelled forward nodes, in forward order */
    int *node;           /* modelled index -> graph node */
    int *mi;             /* graph node -> modelled index, -1 */
    double *cost;        /* microseconds */
    double *node_mem;    /* MiB of all its slots */
    int *first_slot, *n_slots;
    int *last_t;         /* the last stage where the node is a candidate */
    vp_ivec *deps;       /* per node: the slots it reads */

    int n_slot;
    int *slot_node;
    double *slot_mem;    /* MiB */
    int *slot_pos;       /* step of its node */
    int *slot_fwd_last;  /* last step before the backward that reads it */
    vp_ivec *users;      /* per slot: modelled nodes reading it, ascending */

    int fr_end;          /* the first backward step */
    int n_steps;
    double *base;        /* MiB live per step outside the model */
    int T;               /* stages: backward nodes reading a slot */
    vp_ivec stage_step, read_start, read, cand_start, cand; /* read: slots; cand: nodes, ascending */
} vp_ilp_model;

/* Fills m from the un-checkpointed plan p0 of g.  *too_large is set (and m left
 * partial) when the MILP would pass the size limits. */
vp_status vp_ilp_model_build(vp_ilp_model *m, const vp_graph *g, const vp_plan *p0, const vp_training *t,
                             const vp_device_profile *dev, int *too_large, vp_error *err);
void vp_ilp_model_free(vp_ilp_model *m);

/* Past these the MILP is not built: GLPK would not finish anyway. */
enum { VP_ILP_MAX_BINARIES = 200000, VP_ILP_MAX_CELLS = 4000000 };

#endif
