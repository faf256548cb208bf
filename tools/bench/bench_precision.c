/* Mixed precision's effect on memory and on checkpointing, per bundled model (issue #13).
 *
 * For each model in models/ at batch 8, Adam: the arena without checkpointing at fp32,
 * bf16 and fp16 (fp16 with its dynamic loss scaling), as a ratio to fp32, with the
 * saved activations and the weight copies; then, under one budget (85% of the fp32
 * arena), dp's estimated recompute overhead at each precision (h100 cost profile, where
 * low precision also runs the matrix products at the half-precision peak).
 * Prints markdown tables for tools/bench/RESULTS.md. */
#include <stdio.h>
#include <string.h>

#include "cpu_host.h"
#include "memory/plan.h"
#include "model_util.h"
#include "remat/remat.h"

typedef struct point {
    int ok, fits;
    int64_t arena, activations, copies;
    double extra;      /* recompute over the step without it */
    int casts, fused;  /* Casts in the step before cast fusion, and of them fused */
} point;

static point plan_at(const char *name, vp_precision prec, int64_t budget, int no_cast_fusion) {
    point pt = {0};
    test_model m;
    vp_error err;
    vp_train_spec spec;
    memset(&spec, 0, sizeof spec);
    vp_loss_parse("ce:logits", &spec.loss, &err);
    vp_opt_parse("adam", &spec.opt, &err);
    spec.precision = prec;
    spec.no_cast_fusion = no_cast_fusion;
    vp_status s = test_model_load(&m, name, &spec, &err);
    if (s) {
        printf("<!-- %s %s: %s -->\n", name, vp_precision_name(prec), err.msg);
        return pt;
    }
    vp_graph *planned = NULL;
    vp_plan p;
    memset(&p, 0, sizeof p);
    vp_remat_result r;
    s = test_plan_step_remat(m.g, &m.t, vp_device_find("h100"), 1, budget, budget ? VP_REMAT_DP : VP_REMAT_NONE, NULL, &planned,
                           &p, &r, &err);
    if (!s) {
        pt.ok = 1;
        pt.casts = m.t.cast_fusion.casts_before;
        pt.fused = m.t.cast_fusion.fused;
        pt.fits = r.fits;
        pt.arena = p.arena_bytes;
        pt.activations = p.category_bytes[VP_CAT_ACTIVATIONS];
        pt.copies = p.category_bytes[VP_CAT_WEIGHT_COPIES];
        pt.extra = r.step_seconds > r.recompute_seconds ? r.recompute_seconds / (r.step_seconds - r.recompute_seconds) : 0;
    } else {
        printf("<!-- %s %s budget %lld: %s -->\n", name, vp_precision_name(prec), (long long)budget, err.msg);
    }
    vp_plan_free(&p);
    if (planned && planned != m.g) vp_graph_free(planned);
    test_model_free(&m);
    return pt;
}

int main(void) {
    vp_cpu_host_install();
    char names[32][64];
    int n = test_model_list(names, 32);
    printf("Batch as in each model's meta.json, Adam, h100 profile. Arena without checkpointing, and its ratio to fp32,\n"
           "with cast fusion (the default) and without (--no-cast-fusion); the bf16 step's Casts and how many fused into\n"
           "their producers; activations and weight copies in KiB. Under a budget of 85%% of the fp32 arena: dp's\n"
           "recompute overhead.\n\n");
    printf("| model | fp32 arena KiB | bf16 / fp32 | fp16 / fp32 | unfused bf16 / fp32 | unfused fp16 / fp32 |"
           " bf16 casts fused | activations fp32 -> bf16 | bf16 weight copies | budget KiB | fp32 recompute |"
           " bf16 recompute | fp16 recompute |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < n; i++) {
        point f = plan_at(names[i], VP_PRECISION_FP32, 0, 0), b = plan_at(names[i], VP_PRECISION_BF16, 0, 0),
              h = plan_at(names[i], VP_PRECISION_FP16, 0, 0), bu = plan_at(names[i], VP_PRECISION_BF16, 0, 1),
              hu = plan_at(names[i], VP_PRECISION_FP16, 0, 1);
        if (!f.ok || !b.ok || !h.ok || !bu.ok || !hu.ok) continue;
        int64_t budget = f.arena * 85 / 100;
        point fb = plan_at(names[i], VP_PRECISION_FP32, budget, 0), bb = plan_at(names[i], VP_PRECISION_BF16, budget, 0),
              hb = plan_at(names[i], VP_PRECISION_FP16, budget, 0);
        char e[3][48];
        const point *pts[3] = {&fb, &bb, &hb};
        for (int k = 0; k < 3; k++) {
            if (!pts[k]->ok) snprintf(e[k], sizeof e[k], "error");
            else if (!pts[k]->fits) snprintf(e[k], sizeof e[k], "does not fit (%.0f KiB)", pts[k]->arena / 1024.0);
            else snprintf(e[k], sizeof e[k], "+%.1f%%", 100 * pts[k]->extra);
        }
        double fa = (double)f.arena;
        printf("| %s | %.1f | %.3f | %.3f | %.3f | %.3f | %d of %d | %.1f -> %.1f | %.1f | %.1f | %s | %s | %s |\n", names[i],
               f.arena / 1024.0, (double)b.arena / fa, (double)h.arena / fa, (double)bu.arena / fa, (double)hu.arena / fa,
               b.fused, b.casts, f.activations / 1024.0, b.activations / 1024.0, b.copies / 1024.0, budget / 1024.0, e[0],
               e[1], e[2]);
    }
    return 0;
}
