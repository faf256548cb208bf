/* Checkpointing (rematerialisation): which forward activations the backward pass keeps
 * and which it recomputes, chosen under a memory budget.
 *
 * The forward graph is cut into a chain of blocks at its articulation points (a value
 * that is the only activation crossing a boundary: the residual stream between
 * transformer sublayers, the trunk between ResNet stages).  Each block offers a menu:
 * keep all its activations, keep only the expensive ones (MatMul, Gemm, Conv outputs)
 * and recompute the cheap rest, or keep nothing and recompute it from its input.
 *
 *   none   keep everything.
 *   sqrtn  Chen et al. 2016: keep every ceil(sqrt(k))-th cut of k, recompute the rest.
 *   dp     one option per block by a dynamic program over the chain (Rotor-style) that
 *          minimises recompute time under the budget, then checked on the real arena
 *          and tightened until the plan fits.  Identical blocks share one menu.
 *
 * vp_remat_apply inserts the recompute nodes (phase RECOMPUTE) right before the first
 * backward node that needs each value, so liveness and the arena run as before. */
#ifndef VP_REMAT_H
#define VP_REMAT_H

#include "plan.h"
#include "training.h"

typedef enum vp_remat_kind { VP_REMAT_NONE = 0, VP_REMAT_SQRTN, VP_REMAT_DP, VP_REMAT_ILP } vp_remat_kind;

vp_status vp_remat_parse(const char *arg, vp_remat_kind *out, vp_error *err);
const char *vp_remat_name(vp_remat_kind k);

/* Per value: 1 when the backward pass keeps it.  Activations with 0 are recomputed. */
vp_status vp_remat_apply(vp_graph *g, const char *keep, int *n_recompute, vp_error *err);

typedef struct vp_remat_result {
    vp_remat_kind kind;
    int n_blocks;            /* blocks of the forward chain */
    int n_distinct_blocks;   /* menus computed (identical blocks share one) */
    int n_recompute;         /* recompute nodes inserted */
    double step_seconds;     /* estimated time of the whole step on the device profile */
    double recompute_seconds;/* of which recomputation */
    double forward_seconds;  /* the forward pass alone, for "one extra forward" */
    int fits;                /* the arena is within the budget (1 when no budget) */
    int iterations;          /* dp: plans built to land under the budget */
    char choice[256];        /* dp: options per block, e.g. "A A S N N ..." (truncated) */
} vp_remat_result;

/* Chooses what to keep for the training step t of g and builds the plan over *planned:
 * g itself when nothing is recomputed, else a checkpointed copy that borrows g's
 * constant data (free it before g when it is not g). */
vp_status vp_plan_with_remat(vp_graph *g, const vp_training *t, const vp_device_profile *dev, int fused, int64_t budget,
                             vp_remat_kind kind, vp_graph **planned, vp_plan *p, vp_remat_result *r, vp_error *err);

#endif
