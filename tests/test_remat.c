/* Checkpointing, for every model in models/: at budgets from the smallest reachable
 * peak to the un-checkpointed one, dp's plan fits whenever it says so, verifies, and
 * trains bit-identically to the naive un-checkpointed step; so does sqrtn's. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "model_util.h"
#include "plan.h"
#include "remat.h"
#include "verify.h"


/* Plans m under budget with kind; checks fit, soundness, and equality with naive. */
static int64_t plan_case(test_model *m, vp_remat_kind kind, int64_t budget, int expect_fit) {
    vp_error err;
    vp_plan p;
    memset(&p, 0, sizeof p);
    vp_graph *planned = NULL;
    vp_remat_result r;
    vp_status s = vp_plan_with_remat(m->g, &m->t, vp_device_find("cpu"), 1, budget, kind, &planned, &p, &r, &err);
    int64_t arena = -1;
    if (s) {
        check(0, "%s %s budget %lld: %s", m->name, vp_remat_name(kind), (long long)budget, err.msg);
        return -1;
    }
    arena = p.arena_bytes;
    vp_verify_report rep;
    vp_status vs = vp_plan_verify(&p, &rep, &err);
    char why[1024];
    int same = test_compare_planned(m, &p, 2, m->t.params, m->t.n_params, why, sizeof why);
    int ok = !vs && same == 1 && (!r.fits || !budget || arena <= budget) && (!expect_fit || r.fits);
    check(ok, "%s %s budget %lld: arena %lld (%s), %d recompute nodes, +%.1f%% compute, %s, %s", m->name,
          vp_remat_name(kind), (long long)budget, (long long)arena, r.fits ? "fits" : "over", r.n_recompute,
          r.step_seconds > r.recompute_seconds ? 100.0 * r.recompute_seconds / (r.step_seconds - r.recompute_seconds) : 0.0,
          vs ? err.msg : "sound", same == 1 ? "bit-identical to naive" : why);
    vp_plan_free(&p);
    if (planned != m->g) vp_graph_free(planned);
    return arena;
}

int main(void) {
    char names[32][64];
    int n = test_model_list(names, 32);
    for (int i = 0; i < n; i++) {
        test_model m;
        vp_error err;
        vp_train_spec spec;
        memset(&spec, 0, sizeof spec);
        vp_loss_parse("ce:logits", &spec.loss, &err);
        vp_opt_parse("momentum", &spec.opt, &err);
        if (test_model_load(&m, names[i], &spec, &err)) {
            check(0, "%s: %s", names[i], err.msg);
            continue;
        }
        int64_t full = plan_case(&m, VP_REMAT_NONE, 0, 1);
        int64_t least = plan_case(&m, VP_REMAT_DP, 1, 0); /* nothing fits 1 byte: the smallest peak */
        plan_case(&m, VP_REMAT_SQRTN, 0, 1);
        check(least > 0 && least <= full, "%s: checkpointing lowers the peak from %lld to %lld bytes (%.0f%%)", names[i],
              (long long)full, (long long)least, full > 0 ? 100.0 * (double)least / (double)full : 0.0);
        for (int k = 0; k <= 4 && least > 0 && full > least; k++) {
            int64_t budget = least + (full - least) * k / 4;
            plan_case(&m, VP_REMAT_DP, budget, 1);
        }
        test_model_free(&m);
    }
    return check_summary();
}
