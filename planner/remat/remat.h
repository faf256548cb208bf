/* Checkpointing (rematerialisation): which forward activations the backward pass keeps
 * and which it recomputes, chosen under a memory budget.
 *
 * The forward graph is cut into a chain of blocks at its articulation points (a value
 * that is the only activation crossing a boundary: the residual stream between
 * transformer sublayers, the trunk between ResNet stages); where the exporter names the
 * modules (torch 2.x's name_scopes) the pieces of one layer are joined, so a transformer's
 * blocks are its layers (remat_layers.c).  Each block offers a menu,
 * the Pareto frontier of kept bytes against recompute time over which of its nodes to
 * recompute (the selective "expensive ops kept" option among them), from keeping all to
 * recomputing all from its input; options may recompute the block's output too.
 *
 *   none   keep everything.
 *   sqrtn  Chen et al. 2016: keep every ceil(sqrt(k))-th cut of k, recompute the rest.
 *   dp     one option per block, or a longer segment recomputed from an earlier cut, by
 *          dynamic programs over the chain (Rotor-style) that minimise recompute time
 *          under the budget; every choice is planned on the real arena and tightened
 *          until it fits, then improved by local search on the real arena (when nothing
 *          fits, searched locally for the smallest arena instead).  Identical blocks
 *          share one menu.
 *   ilp    Checkmate's MILP (Jain et al. 2020) over every forward node and backward
 *          stage, solved exactly by GLPK within a time limit: the optimality reference.
 *
 * vp_remat_apply inserts the recompute nodes (phase RECOMPUTE) right before the first
 * backward node that needs each value, so liveness and the arena run as before. */
#ifndef VP_REMAT_H
#define VP_REMAT_H

#include "memory/plan.h"
#include "train/training.h"

typedef enum vp_remat_kind { VP_REMAT_NONE = 0, VP_REMAT_SQRTN, VP_REMAT_DP, VP_REMAT_ILP } vp_remat_kind;

vp_status vp_remat_parse(const char *arg, vp_remat_kind *out, vp_error *err);
const char *vp_remat_name(vp_remat_kind k);

/* Per value: 1 when the backward pass keeps it.  Activations with 0 are recomputed.  t
 * (may be NULL) names the state forward nodes update in place (its carries). */
vp_status vp_remat_apply(vp_graph *g, const vp_training *t, const char *keep, int *n_recompute, vp_error *err);
/* The same, and per value of g as it was (copy_of: room for g->n_values before the call)
 * the value recomputing it, or -1. */
vp_status vp_remat_apply_map(vp_graph *g, const vp_training *t, const char *keep, int *n_recompute, int *copy_of,
                             vp_error *err);

/* A recompute schedule (Checkmate's R matrix restricted to the backward pass): before
 * backward node stage_node[t], recompute forward nodes nodes[start[t] .. start[t+1]),
 * in forward order.  Each backward node reads the latest copy of every forward value,
 * so a value may be recomputed at several stages and each copy dies after its last use. */
typedef struct vp_remat_schedule {
    int n_stages;
    int *stage_node;
    int *start; /* n_stages + 1 */
    int *nodes;
} vp_remat_schedule;

vp_status vp_remat_apply_schedule(vp_graph *g, const vp_training *t, const vp_remat_schedule *rs, int *n_recompute,
                                  vp_error *err);
void vp_remat_schedule_free(vp_remat_schedule *rs);
/* The schedule vp_remat_apply follows for keep, without changing g. */
vp_status vp_remat_schedule_from_keep(const vp_graph *g, const char *keep, vp_remat_schedule *out, vp_error *err);

/* Checkmate's MILP (remat_ilp.c): the schedule of least recompute time whose modelled
 * peak fits the budget, from the un-checkpointed plan p0 of g, within time_limit seconds. */
typedef enum vp_ilp_status {
    VP_ILP_NOT_RUN = 0,
    VP_ILP_OPTIMAL,
    VP_ILP_FEASIBLE,    /* the time limit struck with a schedule in hand, not proven optimal */
    VP_ILP_INFEASIBLE,  /* no schedule fits the budget */
    VP_ILP_NO_SOLUTION, /* the time limit struck before any schedule was found */
    VP_ILP_TOO_LARGE,   /* not attempted: too many variables */
} vp_ilp_status;

typedef struct vp_ilp_stats {
    vp_ilp_status status;
    int n_binary, n_continuous, n_rows;
    long n_nonzeros;
    double objective_seconds; /* recompute time of the schedule found */
    double bound_seconds;     /* proven lower bound on it */
    double solve_seconds;
} vp_ilp_stats;

const char *vp_ilp_status_name(vp_ilp_status s);
vp_status vp_remat_ilp_solve(const vp_graph *g, const vp_plan *p0, const vp_training *t, const vp_device_profile *dev,
                             int64_t budget, double time_limit, vp_remat_schedule *out, vp_ilp_stats *st, vp_error *err);
/* The same, offering GLPK the schedule hint (dp's, say) as a first incumbent when it
 * fits the model: the search prunes against it from the start. */
vp_status vp_remat_ilp_solve_hinted(const vp_graph *g, const vp_plan *p0, const vp_training *t,
                                    const vp_device_profile *dev, int64_t budget, double time_limit,
                                    const vp_remat_schedule *hint, vp_remat_schedule *out, vp_ilp_stats *st,
                                    vp_error *err);

typedef struct vp_remat_result {
    vp_remat_kind kind;
    int n_blocks;            /* blocks of the forward chain */
    int n_distinct_blocks;   /* menus computed (identical blocks share one) */
    int n_layers;            /* layers the exporter's module paths name (0: none) */
    int n_layer_blocks;      /* blocks that are one whole layer each, the only block of it */
    int n_recompute;         /* recompute nodes inserted */
    int n_renorm;            /* norms run again for the backward in the step kept (training.h) */
    double step_seconds;     /* estimated time of the whole step on the device profile */
    double recompute_seconds;/* of which recomputation */
    double forward_seconds;  /* the forward pass alone, for "one extra forward" */
    int fits;                /* the arena is within the budget (1 when no budget) */
    int iterations;          /* dp: plans built to land under the budget */
    char choice[256];        /* dp: options per block, e.g. "A A S N N ..." (truncated) */
    vp_ilp_stats ilp;        /* ilp: the last solve (solve_seconds summed over all) */
} vp_remat_result;

typedef struct vp_remat_opts {
    double ilp_time_limit; /* seconds for all of ilp's solves; 0: 60 */
    double arena_time_limit; /* the arena's complete search (vp_arena_opts.exact_seconds; 0: its default, <0: none) */
    int64_t unchecked_arena; /* > 0: the arena of this very step planned without checkpointing,
                                with these options, known over the budget (the joint search
                                planned it just before): dp does not plan it again */
} vp_remat_opts;

/* Chooses what to keep for the training step t of g and builds the plan over *planned:
 * g itself when nothing is recomputed, else a checkpointed copy that borrows g's
 * constant data (free it before g when it is not g). */
vp_status vp_plan_with_remat(vp_graph *g, const vp_training *t, const vp_device_profile *dev, int fused, int64_t budget,
                             vp_remat_kind kind, vp_graph **planned, vp_plan *p, vp_remat_result *r, vp_error *err);
/* The same with options (NULL: the defaults). */
vp_status vp_plan_with_remat_opts(vp_graph *g, const vp_training *t, const vp_device_profile *dev, int fused,
                                  int64_t budget, vp_remat_kind kind, const vp_remat_opts *opts, vp_graph **planned,
                                  vp_plan *p, vp_remat_result *r, vp_error *err);

#endif
