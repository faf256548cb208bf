/* The pipeline driver (pipeline.h): the passes as one table and the loop that runs them.
 *
 * In: the caller's options.  Out: the result the passes fill, one after another.
 * Keeps true: a pass runs only after every pass above it in the table that its stage
 * needs; the loop stops after the last pass of opts->until.  What a stage hands the next
 * is in the result (the graph, the training step, the plan), nothing in globals. */
#include "pipeline/pipeline.h"

#include <stdlib.h>
#include <string.h>

#include "ir/ir_dump.h"

typedef struct run_ctx {
    const vp_pipeline_opts *o;
    vp_pipeline_result *r;
    vp_train_spec spec;     /* o->spec, with the loss scale a saved model carries */
    vp_training_run train;  /* the training build, pass by pass */
} run_ctx;

/* ---- load and infer ---- */

static vp_status pass_load(run_ctx *c, vp_error *err) {
    const vp_pipeline_opts *o = c->o;
    vp_pipeline_result *r = c->r;
    vp_status s;
    if (o->graph) s = VP_OK; /* taken over as the run began */
    else if (o->source) s = o->source(o->source_ctx, &r->g, err);
    else if (o->model) s = vp_onnx_load_with(o->model, &o->load, &r->g, err);
    else s = vp_fail(err, VP_ERR_USAGE, "internal: the pipeline was given no model");
    if (s) return s;
    const vp_graph *g = r->g;
    const char *name = o->model ? o->model : g->path;
    /* a dim no input uses is most likely a misspelt name: said, not fatal (one command
     * line may bind a batch dim over several models, some of them fixed) */
    for (int i = 0; i < o->n_dims; i++) {
        int used = 0;
        for (int k = 0; k < g->n_inputs && !used; k++) {
            const vp_value *v = &g->values[g->inputs[k]];
            for (int d = 0; d < v->rank && !used; d++) used = v->dim_param[d] && !strcmp(v->dim_param[d], o->dims[i].name);
        }
        if (!used) fprintf(stderr, "onnx-vplan: warning: --dim %s: %s has no input dim of that name\n", o->dims[i].name, name);
    }
    return o->n_dims ? vp_bind_dims(r->g, o->dims, o->n_dims, err) : VP_OK;
}

static vp_status pass_infer(run_ctx *c, vp_error *err) {
    vp_status s = c->o->inferred ? VP_OK : vp_infer(c->r->g, NULL, NULL, err);
    c->r->n_forward = c->r->g->n_nodes;
    return s;
}

/* Under fp16 loss scaling, a model `train --save` wrote carries the scale and the
 * clean-step count it reached: training it again resumes from there. */
static vp_status resume_loss_scale(run_ctx *c, vp_error *err) {
    const vp_train_spec *spec = c->o->spec;
    if (!spec || spec->precision != VP_PRECISION_FP16 || spec->no_loss_scaling || spec->loss_scale.init > 0) return VP_OK;
    const vp_graph *g = c->r->g;
    vp_status s = vp_loss_scale_resume(vp_onnx_metadata(g, VP_LOSS_SCALE_KEY), vp_onnx_metadata(g, VP_LOSS_SCALE_COUNT_KEY),
                                       &c->spec.loss_scale, err);
    if (s) vp_error_prefix(err, "%s: ", c->o->model ? c->o->model : g->path);
    return s;
}

/* ---- plan ---- */

/* Checkpointing and the plan of the graph it keeps (schedule, liveness, workspaces,
 * offsets: vp_plan_build_opts, run for each candidate it weighs). */
static vp_status pass_remat(run_ctx *c, vp_error *err) {
    const vp_pipeline_opts *o = c->o;
    vp_pipeline_result *r = c->r;
    if (!o->device) return vp_fail(err, VP_ERR_USAGE, "internal: the pipeline plans for no device profile");
    vp_status s = vp_plan_with_remat_opts(r->g, &r->t, o->device, o->fused_update, o->budget, o->remat, o->remat_opts,
                                          &r->planned, &r->p, &r->remat, err);
    /* the buffers that hold this rank's slice of a split weight, and how it was cut */
    for (int i = 0; !s && i < r->t.tp.n_sliced; i++) {
        const vp_tp_sliced *sl = &r->t.tp.sliced[i];
        int v = vp_graph_find_value(r->p.g, r->g->values[sl->value].name), b = v < 0 ? -1 : r->p.buffer_of[v];
        if (b >= 0) r->p.buffers[b].tp_axis = sl->axis, r->p.buffers[b].tp_blocks = sl->blocks;
    }
    return s;
}

/* the last pass: what `run` and `codegen` will check again at load */
static vp_status pass_verify(run_ctx *c, vp_error *err) {
    vp_status s = vp_plan_verify(&c->r->p, &c->r->verify, err);
    if (s) vp_error_prefix(err, "internal: the planner made an unsound plan (please report it): ");
    return s;
}

/* ---- the list ----
 * The training build's passes (train/training.c's table) stand between infer and remat;
 * the entries here with no run function are done inside the pass before them. */
typedef struct entry {
    vp_pipeline_pass info;
    vp_status (*run)(run_ctx *c, vp_error *err);
} entry;

static const entry before_training[] = {
    {{"load", "the ONNX model into the IR (external data, attribute schemas checked)", VP_PIPELINE_LOAD,
      VP_PIPELINE_SHOWS_IR},
     pass_load},
    {{"infer", "shapes and dtypes (--dim), shape subgraphs folded; sequences, Attention, RMSNormalization, GroupNormalization, Einsum, Col2Im, DFT expanded",
      VP_PIPELINE_INFER, VP_PIPELINE_SHOWS_IR},
     pass_infer},
};

static const entry after_training[] = {
    {{"remat", "plan: checkpoint segments, recompute nodes before their backward use (--remat)", VP_PIPELINE_PLAN,
      VP_PIPELINE_SHOWS_STEPS},
     pass_remat},
    {{"schedule", "plan: one step order, fused updates right after their gradient", VP_PIPELINE_PLAN,
      VP_PIPELINE_SHOWS_STEPS},
     NULL},
    {{"liveness", "plan: [first, last] step of every buffer; views share their base", VP_PIPELINE_PLAN,
      VP_PIPELINE_SHOWS_NOTHING},
     NULL},
    {{"workspaces", "plan: per-step library scratch as planned buffers", VP_PIPELINE_PLAN, VP_PIPELINE_SHOWS_NOTHING},
     NULL},
    {{"offsets", "plan: one offset per buffer in one arena, against its lower bound", VP_PIPELINE_PLAN,
      VP_PIPELINE_SHOWS_NOTHING},
     NULL},
    {{"verify", "plan: every lifetime re-derived from the steps; no overlap", VP_PIPELINE_PLAN, VP_PIPELINE_SHOWS_NOTHING},
     pass_verify},
};

enum { N_BEFORE = (int)(sizeof before_training / sizeof before_training[0]),
       N_AFTER = (int)(sizeof after_training / sizeof after_training[0]) };

int vp_pipeline_pass_count(void) { return N_BEFORE + vp_training_pass_count() + N_AFTER; }

vp_pipeline_pass vp_pipeline_pass_at(int i) {
    int nt = vp_training_pass_count();
    if (i >= 0 && i < N_BEFORE) return before_training[i].info;
    if (i >= N_BEFORE && i < N_BEFORE + nt) {
        const vp_pass_info *p = vp_training_pass(i - N_BEFORE);
        return (vp_pipeline_pass){p->name, p->what, VP_PIPELINE_TRAIN, VP_PIPELINE_SHOWS_IR};
    }
    if (i >= N_BEFORE + nt && i < vp_pipeline_pass_count()) return after_training[i - N_BEFORE - nt].info;
    return (vp_pipeline_pass){NULL, NULL, VP_PIPELINE_LOAD, VP_PIPELINE_SHOWS_NOTHING};
}

static vp_status run_pass(run_ctx *c, int i, vp_error *err) {
    int nt = vp_training_pass_count();
    if (i < N_BEFORE) return before_training[i].run(c, err);
    if (i < N_BEFORE + nt) {
        if (i == N_BEFORE) vp_training_begin(&c->train, c->r->g, &c->spec, &c->r->t);
        return vp_training_run_pass(&c->train, i - N_BEFORE, err);
    }
    const entry *e = &after_training[i - N_BEFORE - nt];
    return e->run ? e->run(c, err) : VP_OK;
}

vp_status vp_pipeline_check_dump(const char *name, vp_pipeline_stage until, vp_error *err) {
    for (int i = 0; i < vp_pipeline_pass_count(); i++) {
        vp_pipeline_pass p = vp_pipeline_pass_at(i);
        if (strcmp(p.name, name)) continue;
        if (p.shows == VP_PIPELINE_SHOWS_NOTHING)
            return vp_fail(err, VP_ERR_USAGE,
                           "--dump-after %s: the IR does not change there; `show PLAN --steps` prints the plan it makes", name);
        if (p.stage > until)
            return vp_fail(err, VP_ERR_USAGE,
                           "--dump-after %s: a pass of `plan` only (this command builds the step, it does not plan it)", name);
        return VP_OK;
    }
    return vp_fail(err, VP_ERR_USAGE, "--dump-after: no pass named '%s' (onnx-vplan plan --passes lists them)", name);
}

static void dump(const run_ctx *c, const vp_pipeline_pass *p) {
    const vp_pipeline_opts *o = c->o;
    FILE *f = o->dump_to ? o->dump_to : stdout;
    char title[96];
    if (p->shows == VP_PIPELINE_SHOWS_STEPS) { /* the graph as planned, in the plan's step order */
        snprintf(title, sizeof title, "IR after %s (rank %d, in step order)", p->name, c->spec.tp.rank);
        vp_ir_dump(f, c->r->p.g, c->r->p.steps, c->r->p.n_steps, title);
    } else {
        snprintf(title, sizeof title, "IR after %s", p->name);
        vp_ir_dump(f, c->r->g, NULL, 0, title);
    }
    fflush(f);
}

vp_status vp_pipeline_run(const vp_pipeline_opts *o, vp_pipeline_result *r, vp_error *err) {
    memset(r, 0, sizeof *r);
    r->g = o->graph;
    run_ctx c = {.o = o, .r = r};
    if (o->spec) c.spec = *o->spec;
    c.spec.plan_device = o->device;
    c.spec.plan_fused_update = o->fused_update;
    vp_status s = o->dump_after ? vp_pipeline_check_dump(o->dump_after, o->until, err) : VP_OK;
    if (!s && o->until >= VP_PIPELINE_TRAIN && !o->spec)
        s = vp_fail(err, VP_ERR_USAGE, "internal: the pipeline builds a training step without a spec");
    int last_training = N_BEFORE + vp_training_pass_count() - 1;
    for (int i = 0; i < vp_pipeline_pass_count() && !s; i++) {
        vp_pipeline_pass p = vp_pipeline_pass_at(i);
        if (p.stage > o->until) break;
        s = run_pass(&c, i, err);
        if (s) break;
        if (o->dump_after && !strcmp(o->dump_after, p.name)) dump(&c, &p);
        /* after load's dump: a saved model's loss scale, read before inference as ever */
        if (p.stage == VP_PIPELINE_LOAD && o->until >= VP_PIPELINE_TRAIN) s = resume_loss_scale(&c, err);
        if (i == last_training && r->t.warning[0]) fprintf(stderr, "onnx-vplan: warning: %s\n", r->t.warning);
    }
    return s;
}

vp_status vp_pipeline_plan(const vp_pipeline_opts *o, vp_pipeline_result *r, vp_error *err) {
    if (!r->g || !r->t.params)
        return vp_fail(err, VP_ERR_USAGE, "internal: vp_pipeline_plan needs a training step built (stage train)");
    vp_plan_free(&r->p);
    if (r->planned && r->planned != r->g) vp_graph_free(r->planned);
    r->planned = NULL;
    memset(&r->remat, 0, sizeof r->remat);
    memset(&r->verify, 0, sizeof r->verify);
    run_ctx c = {.o = o, .r = r};
    if (o->spec) c.spec = *o->spec;
    vp_status s = o->dump_after ? vp_pipeline_check_dump(o->dump_after, VP_PIPELINE_PLAN, err) : VP_OK;
    int first_plan = N_BEFORE + vp_training_pass_count();
    for (int i = first_plan; i < vp_pipeline_pass_count() && !s; i++) {
        vp_pipeline_pass p = vp_pipeline_pass_at(i);
        if ((s = run_pass(&c, i, err))) break;
        if (o->dump_after && !strcmp(o->dump_after, p.name)) dump(&c, &p);
    }
    return s;
}

void vp_pipeline_result_free(vp_pipeline_result *r) {
    vp_plan_free(&r->p);
    vp_training_free(&r->t);
    if (r->planned && r->planned != r->g) vp_graph_free(r->planned);
    vp_graph_free(r->g);
    memset(r, 0, sizeof *r);
}
