/* The pipeline driver: the whole planner as one named list of passes, run by one
 * function (as QBE's func() is its compiler).
 *
 * In: vp_pipeline_opts: where the model comes from (an ONNX file, a graph the caller
 * made, or a function that makes one), the values of its symbolic dims, the training
 * spec, and for planning the device profile, the budget and the checkpointing; the stage
 * to stop after; optionally a pass to show the IR after.
 * Out: vp_pipeline_result: the graph, its forward node count, the training step, and
 * when planned the planned graph (the graph or its checkpointed copy), the plan, what
 * checkpointing chose and the verifier's report.
 *
 * Keeps true: the passes run in the order vp_pipeline_pass_at lists them (the order
 * `onnx-vplan plan --passes` prints and README.md's "How it works" copies), each at most
 * once, none after the last pass of the stage asked for; a plan the result holds has
 * been verified (memory/verify.h).  The list:
 *   load -> infer                                   (VP_PIPELINE_LOAD, VP_PIPELINE_INFER)
 *   -> the training build's passes, fuse ... cast-fusion  (VP_PIPELINE_TRAIN, train/training.c)
 *   -> remat -> schedule -> liveness -> workspaces -> offsets -> verify  (VP_PIPELINE_PLAN)
 * Checkpointing weighs its candidates by planning each, so schedule, liveness,
 * workspaces and offsets (memory/plan_build.c, vp_plan_build_opts) run inside remat, for
 * every candidate and then for the graph kept; they are listed after it, where their
 * result stands. */
#ifndef VP_PIPELINE_H
#define VP_PIPELINE_H

#include <stdio.h>

#include "ir/infer.h"
#include "ir/ir.h"
#include "memory/plan.h"
#include "memory/verify.h"
#include "onnx/onnx_load.h"
#include "remat/remat.h"
#include "train/training.h"

/* The stages, in order; a run stops after the one the caller asks for. */
typedef enum vp_pipeline_stage {
    VP_PIPELINE_LOAD = 0, /* the model into the IR, its symbolic dims bound */
    VP_PIPELINE_INFER,    /* shapes and dtypes, shape subgraphs folded */
    VP_PIPELINE_TRAIN,    /* the training step (train/training.h) */
    VP_PIPELINE_PLAN,     /* checkpointing, the plan, its verification */
} vp_pipeline_stage;

/* What --dump-after can show after a pass. */
typedef enum vp_pipeline_shows {
    VP_PIPELINE_SHOWS_IR = 0,    /* the graph as the pass left it */
    VP_PIPELINE_SHOWS_STEPS,     /* the planned graph in the plan's step order */
    VP_PIPELINE_SHOWS_NOTHING,   /* the IR does not change there (the plan does) */
} vp_pipeline_shows;

typedef struct vp_pipeline_pass {
    const char *name; /* `--dump-after NAME` */
    const char *what; /* one line for `--passes` */
    vp_pipeline_stage stage;
    vp_pipeline_shows shows;
} vp_pipeline_pass;

/* The passes in the order they run: the one list (load, infer, the training build's,
 * the plan's). */
int vp_pipeline_pass_count(void);
vp_pipeline_pass vp_pipeline_pass_at(int i);

/* Makes the model's graph in place of reading an ONNX file (a graph built in the IR). */
typedef vp_status (*vp_pipeline_source_fn)(void *ctx, vp_graph **out, vp_error *err);

typedef struct vp_pipeline_opts {
    /* load: the first of these given is the model */
    vp_graph *graph;             /* a graph the caller made: taken over (freed with the result) */
    vp_pipeline_source_fn source; /* or a function that makes one, source_ctx its argument */
    void *source_ctx;
    const char *model;           /* or the ONNX file (its external data beside it) */
    vp_onnx_load_opts load;      /* reading it: lenient attribute schemas */
    const vp_dim_binding *dims;  /* symbolic dims bound after loading (a name no input
                                    uses is warned of on stderr) */
    int n_dims;
    int inferred;                /* the graph given or made is inferred already: infer is skipped */
    vp_pipeline_stage until;     /* the last stage run */
    /* train (until >= VP_PIPELINE_TRAIN) */
    const vp_train_spec *spec;   /* under fp16 loss scaling, the scale and clean-step count a
                                    model written by `train --save` carries in its metadata are
                                    where the step starts, unless spec->loss_scale.init is set */
    /* plan (until == VP_PIPELINE_PLAN) */
    const vp_device_profile *device;
    int fused_update;            /* each optimizer update right after its gradient */
    int64_t budget;              /* bytes the arena should fit (checkpointing's target); 0: none */
    vp_remat_kind remat;
    const vp_remat_opts *remat_opts; /* NULL: the defaults */
    /* --dump-after: the IR after this pass (vp_pipeline_check_dump) printed on dump_to */
    const char *dump_after;      /* NULL: none */
    FILE *dump_to;
} vp_pipeline_opts;

typedef struct vp_pipeline_result {
    vp_graph *g;           /* the model's graph as the last pass left it (owned) */
    int n_forward;         /* its node count after inference: the forward graph's */
    vp_training t;         /* VP_PIPELINE_TRAIN on */
    vp_graph *planned;     /* VP_PIPELINE_PLAN: g, or a checkpointed copy borrowing g's constant
                              data (owned when not g) */
    vp_plan p;             /* of planned */
    vp_remat_result remat; /* what checkpointing chose, the estimated step time */
    vp_verify_report verify;
} vp_pipeline_result;

/* Runs the passes from load (or infer, or the training build, as opts say) through the
 * last of stage opts->until.  On failure the result holds what was made so far (free it
 * all the same); the message names the model and the node where the pass knows it. */
vp_status vp_pipeline_run(const vp_pipeline_opts *opts, vp_pipeline_result *r, vp_error *err);
/* The plan stage alone (checkpointing through verify) on a result the training stage
 * built, with opts' device, fused_update, budget and remat: for callers that plan one
 * step several ways (the joint search's fused and separate updates, a budget sweep).
 * A plan the result held before is freed first; the step stays as built, so each call
 * plans the same step. */
vp_status vp_pipeline_plan(const vp_pipeline_opts *opts, vp_pipeline_result *r, vp_error *err);
/* Frees what the result owns; safe on a zeroed or half-filled one. */
void vp_pipeline_result_free(vp_pipeline_result *r);

/* Whether the IR can be shown after pass `name` of a run that stops after stage until:
 * VP_ERR_USAGE naming why not (no such pass, the IR does not change there, a pass of
 * planning in a run that does not plan). */
vp_status vp_pipeline_check_dump(const char *name, vp_pipeline_stage until, vp_error *err);

#endif
