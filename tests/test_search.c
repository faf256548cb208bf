/* The joint search (planner/search) on the bundled GPT with Adam, at budgets from 10%
 * to 100% of the un-checkpointed float32 step's arena: the chosen plan's estimated step
 * time never rises as the budget grows; every chosen plan fits; planned, it runs bit for
 * bit as its own graph does naively; and its losses over three steps stay within its
 * precision's tolerance of the float32 naive step's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "check.h"
#include "cpu_host.h"
#include "cpu_util.h"
#include "exec.h"
#include "model_util.h"
#include "remat/remat.h"
#include "onnx/tensor_proto.h"
#include "search/search.h"

#define STEPS 3
#define BATCH 16
static char dir[4096];

/* The bundled GPT at batch BATCH, as a models/-style folder (meta.json, model.onnx,
 * fixtures/) in the build tree: seeded tokens and next-token labels, so activations
 * outweigh the weights and state, as in real training. */
static vp_status make_model_dir(vp_error *err) {
    char path[3 * sizeof dir + 64];
    snprintf(dir, sizeof dir, "%s/test_search_models", VP_BINARY_DIR);
    snprintf(path, sizeof path, "mkdir -p %s/gpt/fixtures && cp %s/models/gpt/model.onnx %s/gpt/", dir, VP_SOURCE_DIR, dir);
    if (system(path)) return vp_fail(err, VP_ERR_IO, "cannot make %s", dir);
    snprintf(path, sizeof path, "%s/gpt/meta.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) return vp_fail(err, VP_ERR_IO, "%s: cannot create", path);
    fprintf(f, "{\"buffers\": [\"causal_mask\"], \"input\": \"tokens\", \"dims\": {\"batch\": %d}, \"loss\": \"ce:logits\"}\n", BATCH);
    fclose(f);
    int64_t tok[BATCH * 17];
    uint64_t r = 12345;
    for (int i = 0; i < BATCH * 17; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        tok[i] = (int64_t)((r >> 33) % 64);
    }
    int64_t x[BATCH * 16], y[BATCH * 16];
    for (int b = 0; b < BATCH; b++)
        for (int k = 0; k < 16; k++) x[b * 16 + k] = tok[b * 17 + k], y[b * 16 + k] = tok[b * 17 + k + 1];
    vp_tensor tx = {VP_I64, 2, {BATCH, 16}, x}, ty = {VP_I64, 2, {BATCH, 16}, y};
    snprintf(path, sizeof path, "%s/gpt/fixtures/x.pb", dir);
    vp_status s = vp_tensor_write_pb(path, &tx, "tokens", err);
    snprintf(path, sizeof path, "%s/gpt/fixtures/labels.pb", dir);
    if (!s) s = vp_tensor_write_pb(path, &ty, "labels", err);
    return s;
}

static vp_train_spec base_spec(void) {
    vp_train_spec spec;
    memset(&spec, 0, sizeof spec);
    vp_error err;
    if (vp_loss_parse("ce:logits", &spec.loss, &err) || vp_opt_parse("adam", &spec.opt, &err)) abort();
    return spec;
}

/* The naive step's losses over STEPS steps on the fixture batch. */
static vp_status naive_losses(test_model *m, double *losses, vp_error *err) {
    vp_backend *b = vp_backend_cpu_new_with(1);
    vp_exec *x = NULL;
    vp_status s = vp_exec_new(m->g, b, &x, err);
    if (!s) s = test_model_feed(x, m, err);
    if (!s) s = test_model_run_steps(x, m, STEPS, losses, err);
    vp_exec_free(x);
    vp_backend_free(b);
    return s;
}

/* Builds the winner, plans it as the search did, checks it against naive and fp32. */
static void check_chosen(const vp_candidate *c, int64_t budget, const double *ref, int pct) {
    vp_train_spec spec = base_spec();
    int fused;
    vp_search_apply(c, &spec, &fused);
    test_planned pl;
    vp_error err;
    double losses[STEPS];
    vp_status s = test_model_plan_in(&pl, dir, "gpt", &spec, vp_device_find("cpu"), fused,
                                     c->remat == VP_REMAT_NONE ? 0 : budget, c->remat, &err);
    test_model *m = &pl.m;
    const vp_plan *p = &pl.p;
    if (!s) s = naive_losses(m, losses, &err);
    char why[512] = "";
    int same = s ? -1 : test_compare_planned(m, p, STEPS, NULL, 0, why, sizeof why);
    double tol = c->precision == VP_PRECISION_FP32 ? 1e-6 : 2e-2, worst = 0;
    for (int k = 0; !s && k < STEPS; k++) worst = fmax(worst, fabs(losses[k] - ref[k]) / fabs(ref[k]));
    char knobs[128];
    vp_search_knobs(c, knobs, sizeof knobs);
    check(!s && p->arena_bytes == c->arena_bytes && p->arena_bytes <= budget && same == 1 && worst <= tol,
          "%3d%%: %s: arena %lld <= %lld, planned = naive over %d steps%s%s, losses within %.2g of fp32 (tolerance %.0g)", pct,
          knobs, (long long)p->arena_bytes, (long long)budget, STEPS, why[0] ? ": " : "", why, worst, tol);
    if (s) printf("  %s\n", err.msg);
    test_planned_free(&pl);
}

int main(void) {
    vp_cpu_host_install();
    vp_error err;
    const vp_device_profile *dev = vp_device_find("cpu");
    vp_train_spec spec = base_spec();
    test_planned pl;
    memset(&pl, 0, sizeof pl);
    double ref[STEPS];
    vp_status s = make_model_dir(&err);
    if (!s) s = test_model_plan_in(&pl, dir, "gpt", &spec, dev, 1, 0, VP_REMAT_NONE, &err);
    if (!s) s = naive_losses(&pl.m, ref, &err);
    int64_t full = pl.p.arena_bytes;
    test_planned_free(&pl);
    if (s) {
        check(0, "gpt: the un-checkpointed step: %s", err.msg);
        return check_summary();
    }
    printf("gpt, adam, batch %d: un", BATCH); printf("-checkpointed fp32 arena %lld bytes\n", (long long)full);
    static vp_search_result r;
    vp_search_space sp = {1, 0, 0, 0, 1, 1, 0, 0}, all = sp;
    all.exhaustive = 1;
    static vp_search_result full_r;
    /* each candidate runs the pipeline on the folder's model as test_model_load_in does */
    char model[sizeof dir + 32];
    snprintf(model, sizeof model, "%s/gpt/model.onnx", dir);
    vp_dim_binding batch = {"batch", BATCH};
    vp_train_spec search_spec = spec;
    search_spec.freeze = "^(causal_mask)$";
    vp_pipeline_opts base = {.model = model, .dims = &batch, .n_dims = 1, .spec = &search_spec, .device = dev};
    double last = INFINITY;
    int monotone = 1, fitted = 0;
    for (int pct = 10; pct <= 100; pct += 10) {
        int64_t budget = full * pct / 100;
        s = vp_search_run(&sp, &base, budget, &r, &err);
        if (s) {
            check(0, "%d%%: search: %s", pct, err.msg);
            break;
        }
        /* the pruned search chooses what planning every candidate fully chooses */
        if (!vp_search_run(&all, &base, budget, &full_r, &err)) {
            const vp_candidate *a = r.best >= 0 ? &r.c[r.best] : NULL, *b = full_r.best >= 0 ? &full_r.c[full_r.best] : NULL;
            check(r.best == full_r.best && (!a || (a->arena_bytes == b->arena_bytes && a->step_seconds == b->step_seconds)),
                  "%d%%: the search chose %d, planning every candidate fully %d", pct, r.best, full_r.best);
            check(r.n_dp + r.n_pruned == full_r.n_dp, "%d%%: %d checkpointed + %d pruned, %d over the budget", pct, r.n_dp,
                  r.n_pruned, full_r.n_dp);
            printf("        %d of %d checkpointed (%d pruned; every one: %d)\n", r.n_dp, r.n, r.n_pruned, full_r.n_dp);
            /* the floor the pruned search trusts: no candidate's plan, checkpointed or not,
             * holds less (with separate updates, every gradient at once) */
            int under = -1;
            for (int i = 0; i < full_r.n && under < 0; i++)
                if (!full_r.c[i].status && full_r.c[i].arena_bytes < full_r.c[i].floor_bytes) under = i;
            check(under < 0, "%d%%: every candidate's arena at or over its floor%s", pct, under < 0 ? "" : " (one under)");
        } else {
            check(0, "%d%%: exhaustive search: %s", pct, err.msg);
        }
        double t = r.best >= 0 ? r.c[r.best].step_seconds : INFINITY;
        printf("  %3d%% (%lld bytes): %s\n", pct, (long long)budget, r.why);
        monotone &= t <= last;
        last = t;
        if (r.best >= 0) {
            fitted++;
            check_chosen(&r.c[r.best], budget, ref, pct);
        }
    }
    check(monotone && fitted >= 5, "the chosen plan's estimated step time never rises with the budget (%d of 10 budgets fit)", fitted);
    return check_summary();
}
