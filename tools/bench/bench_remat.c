/* Checkpointing under budgets: for each model, from the smallest peak checkpointing
 * reaches to the un-checkpointed peak in ten steps, the extra compute (recompute time over
 * the step's time without it, from the cost model) of dp and of ilp (Checkmate's MILP
 * solved by GLPK, within VP_BENCH_ILP_SECONDS, default 60), dp's gap to ilp's optimum in
 * step time, beside sqrtn's single point and the cost of one extra forward pass; and the
 * solve times.  ilp runs from the loosest budget down and stops after two budgets in a
 * row that it does not finish.
 *
 * usage: bench_remat [NAME...]   (only the tables whose title contains a NAME) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu_host.h"
#include "gpt_graph.h"
#include "light_step.h"
#include "ir/infer.h"
#include "onnx/onnx_load.h"
#include "memory/plan.h"
#include "pipeline/pipeline.h"
#include "remat/remat.h"
#include "train/training.h"
#include "model_util.h"

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
static const char *device = "h100"; /* the cost profile of the table being made */

static point run(vp_graph *g, const vp_training *t, vp_remat_kind kind, int64_t budget) {
    point pt;
    memset(&pt, 0, sizeof pt);
    vp_error err;
    vp_plan p;
    memset(&p, 0, sizeof p);
    vp_graph *planned = NULL;
    vp_remat_result r;
    vp_remat_opts o = {.ilp_time_limit = ilp_seconds};
    double t0 = now();
    vp_status s = test_plan_step_remat(g, t, vp_device_find(device), 1, budget, kind, &o, &planned, &p, &r, &err);
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

static int selected(const char *name);

/* dp's gap to ilp in step time, (1 + dp extra) / (1 + ilp extra) - 1, into buf: exact
 * where ilp proved its optimum, else an upper bound against ilp's proven lower bound. */
static void gap(const point *p, const point *q, char *buf, size_t n) {
    int proven = q->ok && q->fits && q->ilp.status == VP_ILP_OPTIMAL;
    int bounded = q->ilp.status == VP_ILP_FEASIBLE || q->ilp.status == VP_ILP_NO_SOLUTION || (q->ok && !proven);
    if (!p->fits) snprintf(buf, n, "-");
    else if (proven) snprintf(buf, n, "%+.2f%%", 100 * ((1 + p->extra) / (1 + q->extra) - 1));
    else if (bounded && q->bound_extra > 0)
        snprintf(buf, n, "at most %+.2f%% (bound +%.1f%%)", 100 * ((1 + p->extra) / (1 + q->bound_extra) - 1),
                 100 * q->bound_extra);
    else snprintf(buf, n, "-");
}

static void table(const char *name, vp_graph *g, const vp_training *t) {
    if (!selected(name)) return;
    point full = run(g, t, VP_REMAT_NONE, 0);
    point least = run(g, t, VP_REMAT_DP, 1);
    point sq = run(g, t, VP_REMAT_SQRTN, 0);
    point dp_at_sq = run(g, t, VP_REMAT_DP, sq.arena);
    printf("\n### %s\n\nun-checkpointed peak %.2f MiB; smallest dp peak %.2f MiB; one extra forward pass = +%.1f%%\n", name,
           full.arena / 1048576.0, least.arena / 1048576.0, 100 * full.extra);
    printf("sqrtn: %.2f MiB at +%.1f%% (%d recompute nodes); dp at that memory: %.2f MiB at +%.1f%% -> %s\n\n",
           sq.arena / 1048576.0, 100 * sq.extra, sq.recompute, dp_at_sq.arena / 1048576.0, 100 * dp_at_sq.extra,
           dp_at_sq.fits && dp_at_sq.extra <= sq.extra + 1e-12 ? "dp no worse than sqrtn" : "dp WORSE than sqrtn");
    enum { ROWS = 10 };
    int64_t budget[ROWS];
    point dp[ROWS], ilp[ROWS];
    int tried[ROWS] = {0};
    for (int k = 0; k < ROWS; k++) {
        budget[k] = least.arena + (full.arena - least.arena) * k / (ROWS - 1);
        dp[k] = run(g, t, VP_REMAT_DP, budget[k]);
    }
    /* ilp from the loosest budget down, the easiest first; two in a row that it cannot
     * finish (or a model too large) end its column */
    for (int k = ROWS - 2, misses = 0; k >= 0 && misses < 2; k--) {
        ilp[k] = run(g, t, VP_REMAT_ILP, budget[k]);
        tried[k] = 1;
        if (ilp[k].ilp.status == VP_ILP_TOO_LARGE) break;
        misses = ilp[k].ilp.status == VP_ILP_OPTIMAL ? 0 : misses + 1;
    }
    printf("| budget MiB | dp arena MiB | fits | dp extra | recompute nodes | dp s | ilp extra | ilp | ilp s | dp gap to "
           "ilp |\n|---|---|---|---|---|---|---|---|---|---|\n");
    for (int k = 0; k < ROWS; k++) {
        const point *p = &dp[k], *q = &ilp[k];
        printf("| %.2f | %.2f | %s | +%.1f%% | %d | %.3f |", budget[k] / 1048576.0, p->arena / 1048576.0,
               p->fits ? "yes" : "no", 100 * p->extra, p->recompute, p->seconds);
        if (k == ROWS - 1) {
            printf(" +0.0%% | nothing to recompute | - | - |\n");
            continue;
        }
        if (!tried[k]) {
            printf(" - | not tried | - | - |\n");
            continue;
        }
        const char *what = vp_ilp_status_name(q->ilp.status);
        if (q->ok && q->fits) printf(" +%.1f%% | %s, %d binaries |", 100 * q->extra, what, q->ilp.n_binary);
        else if (q->ilp.status == VP_ILP_TOO_LARGE) printf(" - | too large (over %d binaries) |", q->ilp.n_binary);
        else printf(" - | %s, %d binaries |", q->ok ? "over the budget" : what, q->ilp.n_binary);
        char buf[96];
        gap(p, q, buf, sizeof buf);
        printf(" %.2f | %s |\n", q->seconds, buf);
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
    vp_pipeline_opts po = {.model = path, .dims = &b, .n_dims = 1, .spec = &spec, .until = VP_PIPELINE_TRAIN};
    vp_pipeline_result r;
    vp_status s = vp_pipeline_run(&po, &r, &err);
    *g = r.g;
    *t = r.t;
    if (s) fprintf(stderr, "%s: %s\n", path, err.msg);
    return !s;
}

static int n_names;
static char **names;

/* With names on the command line, only the tables whose title contains one of them. */
static int selected(const char *title) {
    for (int i = 0; i < n_names; i++)
        if (strstr(title, names[i])) return 1;
    return n_names == 0;
}

int main(int argc, char **argv) {
    vp_cpu_host_install();
    n_names = argc - 1;
    names = argv + 1;
    const char *lim = getenv("VP_BENCH_ILP_SECONDS");
    if (lim && atof(lim) > 0) ilp_seconds = atof(lim);
    const char *models[] = {"mlp", "cnn", "gpt", "gpt_ln_decomposed"};
    printf("Extra compute is recompute time over the step's time without it, from the cost model on the h100 profile\n"
           "(and for cnn also on the cpu profile, where a Conv costs far more than the elementwise ops around it).\n"
           "ilp: Checkmate's MILP solved by GLPK within %.0f s per budget, from the loosest budget down; after two budgets\n"
           "in a row where it does not finish, the tighter ones are not tried.  dp gap to ilp: dp's step time over\n"
           "ilp's where ilp proved its optimum; elsewhere an upper bound, against the lower bound GLPK proved.\n",
           ilp_seconds);
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
            if (!strcmp(models[i], "cnn")) { /* where compute and memory weigh differently */
                device = "cpu";
                table("models/cnn, batch 32, on the cpu cost profile", g, &t);
                device = "h100";
            }
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
    vp_train_spec spec;
    memset(&spec, 0, sizeof spec);
    vp_loss_parse("ce:logits", &spec.loss, &err);
    vp_opt_parse("adamw", &spec.opt, &err);
    vp_pipeline_opts po = {.inferred = 1, .spec = &spec, .until = VP_PIPELINE_TRAIN};
    vp_pipeline_result r = {0};
    if (!gpt_graph_build(&c, &po.graph, &err) && !vp_pipeline_run(&po, &r, &err))
        table("GPT-style 12 layers, h 768, s 1024, b 8 (built in the IR)", r.g, &r.t);
    vp_pipeline_result_free(&r);
    return 0;
}
