/* Checkpointing under budgets: for each model, from the smallest peak checkpointing
 * reaches to the un-checkpointed peak in about ten steps, the extra compute (recompute
 * time over the step's time without it, from the cost model) of dp, beside sqrtn's single
 * point and the cost of one extra forward pass; and the solve times.
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
    int fits;
    double extra, seconds;
    int recompute;
} point;

static point run(vp_graph *g, const vp_training *t, vp_remat_kind kind, int64_t budget) {
    point pt = {0, 0, 0, 0, 0};
    vp_error err;
    vp_plan p;
    memset(&p, 0, sizeof p);
    vp_graph *planned = NULL;
    vp_remat_result r;
    double t0 = now();
    if (vp_plan_with_remat(g, t, vp_device_find("h100"), 1, budget, kind, &planned, &p, &r, &err)) {
        fprintf(stderr, "plan failed: %s\n", err.msg);
        return pt;
    }
    pt.seconds = now() - t0;
    pt.arena = p.arena_bytes;
    pt.fits = r.fits;
    pt.recompute = r.n_recompute;
    double base = r.step_seconds - r.recompute_seconds;
    pt.extra = base > 0 ? r.recompute_seconds / base : 0;
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
    printf("| budget MiB | dp arena MiB | fits | dp extra compute | recompute nodes | solve s |\n|---|---|---|---|---|---|\n");
    for (int k = 0; k <= 9; k++) {
        int64_t budget = least.arena + (full.arena - least.arena) * k / 9;
        point p = run(g, t, VP_REMAT_DP, budget);
        printf("| %.2f | %.2f | %s | +%.1f%% | %d | %.3f |\n", budget / 1048576.0, p.arena / 1048576.0, p.fits ? "yes" : "no",
               100 * p.extra, p.recompute, p.seconds);
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
    const char *models[] = {"mlp", "cnn", "gpt", "gpt_ln_decomposed"};
    printf("Extra compute is recompute time over the step's time without it, from the cost model on the h100 profile.\n");
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
