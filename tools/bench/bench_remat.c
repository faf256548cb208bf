/* Checkpointing under budgets: for each model, from the smallest peak checkpointing
 * reaches to the un-checkpointed peak in ten steps, the extra compute (recompute time over
 * the step's time without it, from the cost model) of dp and of ilp (Checkmate's MILP
 * solved by GLPK, within VP_BENCH_ILP_SECONDS, default 60), dp's gap to ilp's optimum in
 * step time, beside sqrtn's single point and the cost of one extra forward pass; and the
 * solve times.  Once ilp runs out of time on a model it is not tried at its other budgets.
 *
 * usage: bench_remat */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpt_graph.h"
#include "light_step.h"
#include "infer.h"
#include "onnx_load.h"
#include "plan.h"
#include "remat.h"
#include "training.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct point {
    int64_t arena;
    int fits, ok;
    double extra, seconds;
    int recompute;
    vp_ilp_stats ilp;
    double bound_extra; /* ilp: the proven lower bound on extra compute */
} point;

static double ilp_seconds = 60;

static point run(vp_graph *g, const vp_training *t, vp_remat_kind kind, int64_t budget) {
    point pt;
    memset(&pt, 0, sizeof pt);
    vp_error err;
    vp_plan p;
    memset(&p, 0, sizeof p);
    vp_graph *planned = NULL;
    vp_remat_result r;
    vp_remat_opts o = {ilp_seconds};
    double t0 = now();
    vp_status s = vp_plan_with_remat_opts(g, t, vp_device_find("h100"), 1, budget, kind, &o, &planned, &p, &r, &err);
    pt.seconds = now() - t0;
    pt.ilp = r.ilp;
    if (s) {
        if (kind != VP_REMAT_ILP) fprintf(stderr, "plan failed: %s\n", err.msg);
        return pt;
    }
    pt.ok = 1;
    pt.arena = p.arena_bytes;
    pt.fits = r.fits;
    pt.recompute = r.n_recompute;
    double base = r.step_seconds - r.recompute_seconds;
    pt.extra = base > 0 ? r.recompute_seconds / base : 0;
    pt.bound_extra = base > 0 ? r.ilp.bound_seconds / base : 0;
    if (kind == VP_REMAT_NONE) pt.extra = base > 0 ? r.forward_seconds / base : 0; /* one extra forward */
    vp_plan_free(&p);
    if (planned != g) vp_graph_free(planned);
    return pt;
}

static void table(const char *name, vp_graph *g, const vp_training *t) {
    point full = run(g, t, VP_REMAT_NONE, 0);
    point least = run(g, t, VP_REMAT_DP, 1);
    point sq = run(g, t, VP_REMAT_SQRTN, 0);
    point dp_at_sq = run(g, t, VP_REMAT_DP, sq.arena);
    printf("\n### %s\n\nun-checkpointed peak %.2f MiB; smallest dp peak %.2f MiB; one extra forward pass = +%.1f%%\n", name,
           full.arena / 1048576.0, least.arena / 1048576.0, 100 * full.extra);
    printf("sqrtn: %.2f MiB at +%.1f%% (%d recompute nodes); dp at that memory: %.2f MiB at +%.1f%% -> %s\n\n",
           sq.arena / 1048576.0, 100 * sq.extra, sq.recompute, dp_at_sq.arena / 1048576.0, 100 * dp_at_sq.extra,
           dp_at_sq.fits && dp_at_sq.extra <= sq.extra + 1e-12 ? "dp no worse than sqrtn" : "dp WORSE than sqrtn");
    printf("| budget MiB | dp arena MiB | fits | dp extra | recompute nodes | dp s | ilp extra | ilp | ilp s | dp gap to "
           "ilp |\n|---|---|---|---|---|---|---|---|---|---|\n");
    int ilp_gave_up = 0;
    for (int k = 0; k <= 9; k++) {
        int64_t budget = least.arena + (full.arena - least.arena) * k / 9;
        point p = run(g, t, VP_REMAT_DP, budget);
        printf("| %.2f | %.2f | %s | +%.1f%% | %d | %.3f |", budget / 1048576.0, p.arena / 1048576.0, p.fits ? "yes" : "no",
               100 * p.extra, p.recompute, p.seconds);
        if (ilp_gave_up) {
            printf(" - | not tried | - | - |\n");
            continue;
        }
        point q = run(g, t, VP_REMAT_ILP, budget);
        const char *what = vp_ilp_status_name(q.ilp.status);
        if (q.ok && q.fits) printf(" +%.1f%% | %s, %d binaries |", 100 * q.extra, what, q.ilp.n_binary);
        else if (q.ilp.status == VP_ILP_TOO_LARGE) printf(" - | too large (over %d binaries) |", q.ilp.n_binary);
        else printf(" - | %s, %d binaries |", q.ok ? "over the budget" : what, q.ilp.n_binary);
        printf(" %.2f |", q.seconds);
        /* in step time: (1 + dp extra) / (1 + ilp extra); against the bound when not proven */
        if (q.ok && q.fits && q.ilp.status == VP_ILP_OPTIMAL && p.fits)
            printf(" %+.2f%% |\n", 100 * ((1 + p.extra) / (1 + q.extra) - 1));
        else if (q.ok && q.fits && p.fits)
            printf(" at most %+.2f%% (bound +%.1f%%) |\n", 100 * ((1 + p.extra) / (1 + q.bound_extra) - 1),
                   100 * q.bound_extra);
        else
            printf(" - |\n");
        if (q.ilp.status == VP_ILP_TOO_LARGE || q.ilp.status == VP_ILP_NO_SOLUTION ||
            q.ilp.status == VP_ILP_FEASIBLE)
            ilp_gave_up = 1;
    }
}

static int model_step(const char *path, int64_t batch, vp_graph **g, vp_training *t) {
    vp_error err;
    vp_dim_binding b = {"batch", batch};
    vp_train_spec spec;
    memset(&spec, 0, sizeof spec);
    vp_loss_parse("ce:logits", &spec.loss, &err);
    vp_opt_parse("adamw", &spec.opt, &err);
    spec.freeze = "^causal_mask$";
    vp_status s = vp_onnx_load(path, g, &err);
    if (!s) s = vp_bind_dims(*g, &b, 1, &err);
    if (!s) s = vp_infer(*g, NULL, NULL, &err);
    if (!s) s = vp_training_build(*g, &spec, t, &err);
    if (s) fprintf(stderr, "%s: %s\n", path, err.msg);
    return !s;
}

int main(void) {
    const char *lim = getenv("VP_BENCH_ILP_SECONDS");
    if (lim && atof(lim) > 0) ilp_seconds = atof(lim);
    const char *models[] = {"mlp", "cnn", "gpt", "gpt_ln_decomposed"};
    printf("Extra compute is recompute time over the step's time without it, from the cost model on the h100 profile.\n"
           "ilp: Checkmate's MILP solved by GLPK within %.0f s per budget; once it runs out of time on a model, its other\n"
           "budgets are not tried.  dp gap to ilp: dp's step time over ilp's, where ilp proved its optimum (else\n"
           "against ilp's proven lower bound).\n", ilp_seconds);
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/models/%s/model.onnx", VP_SOURCE_DIR, models[i]);
        vp_graph *g = NULL;
        vp_training t;
        memset(&t, 0, sizeof t);
        if (model_step(path, 32, &g, &t)) {
            char title[128];
            snprintf(title, sizeof title, "models/%s, batch 32", models[i]);
            table(title, g, &t);
        }
        vp_training_free(&t);
        vp_graph_free(g);
    }
    const char *light[] = {"light_resnet50", "light_vgg19", "light_inception_v1", "light_squeezenet", "light_densenet121"};
    for (size_t i = 0; i < sizeof light / sizeof light[0]; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/light/%s.onnx", VP_ONNX_TESTS, light[i]);
        vp_graph *g = NULL;
        vp_training t;
        vp_error e;
        int mse;
        if (light_step_build(path, &g, &t, &mse, &e)) {
            fprintf(stderr, "%s: %s\n", path, e.msg);
            continue;
        }
        char title[128];
        snprintf(title, sizeof title, "light/%s as a training step, batch 1%s", light[i] + 6, mse ? " (mse loss)" : "");
        table(title, g, &t);
        vp_training_free(&t);
        vp_graph_free(g);
    }
    gpt_config c = {12, 768, 12, 1024, 8, 50257};
    vp_error err;
    vp_graph *g = NULL;
    vp_training t;
    memset(&t, 0, sizeof t);
    vp_train_spec spec;
    memset(&spec, 0, sizeof spec);
    vp_loss_parse("ce:logits", &spec.loss, &err);
    vp_opt_parse("adamw", &spec.opt, &err);
    if (!gpt_graph_build(&c, &g, &err) && !vp_training_build(g, &spec, &t, &err))
        table("GPT-style 12 layers, h 768, s 1024, b 8 (built in the IR)", g, &t);
    vp_training_free(&t);
    vp_graph_free(g);
    return 0;
}
