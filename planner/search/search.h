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
 * un-checkpointed step. */
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
    char note[200];
} vp_candidate;

typedef struct vp_search_result {
    int n;
    vp_candidate c[VP_SEARCH_MAX];
    int best;       /* index into c, -1 when nothing fits */
    char why[600];  /* one paragraph: why the winner won */
} vp_search_result;

/* base: the model (a file or a source, not a graph: each candidate loads its own), its
 * dims, the spec the user fixed (base->spec) and the device (base->device); the
 * stage, the knobs and the checkpointing are the search's. */
vp_status vp_search_run(const vp_search_space *sp, const vp_pipeline_opts *base, int64_t budget, vp_search_result *out,
                        vp_error *err);

/* The spec and fused flag of candidate c (the user's spec with its knobs set). */
void vp_search_apply(const vp_candidate *c, vp_train_spec *spec, int *fused);

/* "tp 2, bf16, fused, dp" */
void vp_search_knobs(const vp_candidate *c, char *buf, size_t len);

#endif
