/* The joint choice: one memory budget, every knob the user left free.
 *
 * In: a training spec (what the user fixed), a device profile, a budget, the knobs
 * left free (tensor-parallel degree up to a maximum, precision among those the device
 * computes natively, fused or separate optimizer updates, optimizer-state offload) and
 * the pipeline's options that load the model (pipeline/pipeline.h), which the search
 * runs through planning once for each candidate.  Out: every candidate weighed, each planned with
 * checkpointing by dp under the budget and costed by the cost model (compute,
 * recompute, casts, all-reduces, host transfers: vp_remat_result.step_seconds over the planned graph),
 * and the index of the fastest that fits, with the reason it won.
 *
 * Keeps true: a candidate "fits" only when its real arena (rank 0's, ranks being
 * symmetric) is within the budget; the winner is the least estimated step time among
 * those, ties to the smaller arena.  A candidate's un-checkpointed plan is weighed
 * before its dp plan, so once a knob set fits without checkpointing it stays at its best
 * time for every larger budget; below that, dp (a heuristic on the real arena, not an
 * exact optimum) decides, so that the winner's time does not rise with the budget is
 * checked rather than proven: tests/test_search.c, on a GPT from 10% to 100% of the
 * un-checkpointed step.
 *
 * The search plans every candidate without checkpointing first (cheap), then runs dp on
 * those over the budget in order of their un-checkpointed time, skipping a candidate
 * whose un-checkpointed time already exceeds the best that fits (checkpointing only adds
 * recompute, so it cannot win) or whose parameters, state, inputs and constants alone
 * exceed the budget (checkpointing frees none of them): the winner is the one planning
 * every candidate fully would choose (exhaustive, which tests/test_search.c compares). */
#ifndef VP_SEARCH_H
#define VP_SEARCH_H

#include "memory/plan.h"
#include "pipeline/pipeline.h"
#include "remat/remat.h"
#include "train/training.h"

#define VP_SEARCH_MAX 64

typedef struct vp_search_space {
    int max_tp;          /* tensor-parallel degrees 1, 2, 4, ... up to this; 0 or 1: none */
    int tp_fixed;        /* the user gave --tp: spec's degree only */
    int precision_fixed; /* the user gave --precision: spec's only */
    int fused_fixed;     /* the user gave --fused-update or --no-fused-update */
    int fused;           /* that choice when fixed */
    int offload_free;    /* try optimizer-state offload on and off (Adam, the user gave no --offload) */
    int exhaustive;      /* checkpoint every candidate over the budget, none pruned (tests compare) */
    int keep_winner;     /* hand back the winner's planned step (vp_search_result.winner) */
} vp_search_space;

typedef struct vp_candidate {
    int tp;
    vp_precision precision;
    int fused;
    int offload;               /* Adam's state on the host (train/offload.h) */
    vp_remat_kind remat;       /* none or dp: what the plan weighed used */
    vp_status status;          /* VP_OK, or why the candidate could not be built (note) */
    int64_t arena_bytes;
    double step_seconds;       /* estimated, the whole step on the profile */
    double recompute_seconds, comm_seconds, cast_seconds;
    double host_seconds;       /* offload: the copies over the host link and the update on the host */
    int64_t host_bytes;        /* offload: the host block beside the arena */
    int n_recompute;
    int fits;
    int pruned;                /* over the budget unchecked, and dp not run: it could not win (note) */
    int64_t resident_bytes;    /* parameters, optimizer state, inputs and constants: no checkpointing
                                  frees them, so a budget under them cannot be met */
    int64_t floor_bytes;       /* resident_bytes, and with separate updates or fp16's loss
                                  scaling every parameter's gradient (all live when the first
                                  update runs): no plan of the step holds less */
    char note[200];
} vp_candidate;

typedef struct vp_search_result {
    int n;
    vp_candidate c[VP_SEARCH_MAX];
    int best;       /* index into c, -1 when nothing fits */
    char why[600];  /* one paragraph: why the winner won */
    double seconds; /* the whole search's wall time */
    int threads;    /* it planned candidates of different builds on (VP_SEARCH_THREADS, else the processors) */
    int n_dp;       /* candidates planned with dp checkpointing */
    int n_pruned;   /* candidates whose dp plan was skipped: it could not fit or win */
    vp_pipeline_result *winner; /* keep_winner: the winner's step and verified plan, as the
                                   pipeline run with its knobs (until the plan, remat_opts
                                   NULL) makes them; NULL when nothing fits */
    vp_graph *model;            /* with winner: the model as loaded and inferred, whose data
                                   the winner's step borrows */
} vp_search_result;

/* base: the model (a file or a source, not a graph: each candidate loads its own), its
 * dims, the spec the user fixed (base->spec) and the device (base->device); the
 * stage, the knobs and the checkpointing are the search's. */
vp_status vp_search_run(const vp_search_space *sp, const vp_pipeline_opts *base, int64_t budget, vp_search_result *out,
                        vp_error *err);

/* Frees r->winner (the rest of r is plain data). */
void vp_search_result_free(vp_search_result *r);

/* The spec and fused flag of candidate c (the user's spec with its knobs set). */
void vp_search_apply(const vp_candidate *c, vp_train_spec *spec, int *fused);

/* "tp 2, bf16, fused, dp" */
void vp_search_knobs(const vp_candidate *c, char *buf, size_t len);

#endif
