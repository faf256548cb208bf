/* Checkpointing, for every model in models/: at budgets from the smallest reachable
 * peak to the un-checkpointed one, dp's plan fits whenever it says so, verifies, and
 * trains bit-identically to the naive un-checkpointed step; so do sqrtn's and ilp's. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cpu_host.h"
#include "model_util.h"
#include "memory/plan.h"
#include "remat/remat.h"
#include "memory/verify.h"


/* ilp's solves are capped so the suite stays quick; where GLPK does not finish in
 * time, the schedule it holds is checked all the same, and none at all is reported */
static const vp_remat_opts ilp_opts = {.ilp_time_limit = 5.0};

/* The un-checkpointed arena of the model under test: a plan that recomputes must be
 * smaller, or its recompute only costs time. */
static int64_t full_arena = -1;

/* Plans m under budget with kind; checks fit, soundness, and equality with naive. */
static int64_t plan_case_r(test_model *m, vp_remat_kind kind, int64_t budget, int expect_fit, vp_remat_result *out) {
    vp_error err;
    vp_plan p;
    memset(&p, 0, sizeof p);
    vp_graph *planned = NULL;
    vp_remat_result r;
    vp_status s = test_plan_step_remat(m->g, &m->t, vp_device_find("cpu"), 1, budget, kind, &ilp_opts, &planned, &p, &r,
                                          &err);
    if (out) *out = r;
    int64_t arena = -1;
    if (s && kind == VP_REMAT_ILP && (r.ilp.status == VP_ILP_NO_SOLUTION || r.ilp.status == VP_ILP_TOO_LARGE)) {
        printf("note: %s ilp budget %lld: %s (%d binaries)\n", m->name, (long long)budget, vp_ilp_status_name(r.ilp.status),
               r.ilp.n_binary);
        return -1;
    }
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
    if (kind != VP_REMAT_SQRTN && r.n_recompute > 0 && full_arena > 0)
        check_quiet(arena < full_arena, "%s %s budget %lld: %d recompute nodes lower the arena (%lld < %lld bytes)", m->name,
                    vp_remat_name(kind), (long long)budget, r.n_recompute, (long long)arena, (long long)full_arena);
    if (kind == VP_REMAT_ILP && r.n_recompute > 0)
        check(r.ilp.objective_seconds > 0 &&
                  (r.recompute_seconds - r.ilp.objective_seconds) <= 1e-9 * (1 + r.recompute_seconds) &&
                  (r.ilp.objective_seconds - r.recompute_seconds) <= 1e-9 * (1 + r.recompute_seconds) &&
                  r.ilp.bound_seconds <= r.ilp.objective_seconds * (1 + 1e-9),
              "%s ilp budget %lld: the plan recomputes what the MILP chose (%.6g s planned, %.6g s in the model, "
              "bound %.6g s)", m->name, (long long)budget, r.recompute_seconds, r.ilp.objective_seconds,
              r.ilp.bound_seconds);
    vp_plan_free(&p);
    if (planned != m->g) vp_graph_free(planned);
    return arena;
}

static int64_t plan_case(test_model *m, vp_remat_kind kind, int64_t budget, int expect_fit) {
    return plan_case_r(m, kind, budget, expect_fit, NULL);
}

/* ilp at budgets from the un-checkpointed peak down: each schedule it returns fits,
 * verifies and trains bit-identically; proven optima never rise as the budget grows;
 * a budget below the parameters and optimizer state alone is infeasible. */
static void ilp_cases(test_model *m, int64_t least, int64_t full) {
    vp_remat_result r;
    vp_error err;
    vp_plan p;
    memset(&p, 0, sizeof p);
    vp_graph *planned = NULL;
    vp_status s = test_plan_step_remat(m->g, &m->t, vp_device_find("cpu"), 1, 1024, VP_REMAT_ILP, &ilp_opts, &planned,
                                          &p, &r, &err);
    check(s == VP_ERR_INVALID && r.ilp.status == VP_ILP_INFEASIBLE && strstr(err.msg, "no recompute schedule fits"),
          "%s ilp budget 1 KiB: infeasible with a clear message (%s)", m->name, s ? err.msg : "planned");
    if (!s) {
        vp_plan_free(&p);
        if (planned != m->g) vp_graph_free(planned);
    }
    double prev = -1;
    for (int k = 4; k >= 1; k--) {
        int64_t budget = least + (full - least) * k / 4;
        if (plan_case_r(m, VP_REMAT_ILP, budget, 0, &r) < 0) break; /* out of time here: so at the tighter ones */
        if (r.ilp.status != VP_ILP_OPTIMAL) continue;
        if (prev >= 0)
            check(r.ilp.objective_seconds >= prev * (1 - 1e-9), "%s ilp: optimum %.6g s at budget %lld, %.6g s above it",
                  m->name, r.ilp.objective_seconds, (long long)budget, prev);
        prev = r.ilp.objective_seconds;
    }
}

/* A hand-made schedule that recomputes one forward node at two backward stages: each
 * backward node reads the latest copy, both copies verify and train bit-identically. */
static void twice_case(test_model *m) {
    const vp_graph *g = m->g;
    int x = -1, b1 = -1, b2 = -1;
    for (int i = 0; i < g->n_nodes && x < 0; i++) {
        const vp_node *n = &g->nodes[i];
        if (n->folded || n->phase != VP_PHASE_FORWARD || n->n_outputs < 1 || n->outputs[0] < 0) continue;
        const vp_value *v = &g->values[n->outputs[0]];
        b1 = b2 = -1;
        for (int c = 0; c < v->n_consumers; c++) {
            int r = v->consumers[c];
            if (g->nodes[r].phase != VP_PHASE_BACKWARD) continue;
            if (b1 < 0 || r < b1) b2 = b1, b1 = r;
            else if (r != b1 && (b2 < 0 || r < b2)) b2 = r;
        }
        if (b1 >= 0 && b2 >= 0) x = i;
    }
    if (x < 0) {
        printf("note: %s has no forward value read by two backward nodes\n", m->name);
        return;
    }
    if (b2 < b1) {
        int tmp = b1;
        b1 = b2;
        b2 = tmp;
    }
    int stage_node[2] = {b1, b2}, start[3] = {0, 1, 2}, nodes[2] = {x, x};
    vp_remat_schedule rs = {2, stage_node, start, nodes};
    vp_error err;
    vp_graph *c = vp_graph_clone(m->g);
    int n_recompute = 0;
    vp_status s = c ? vp_remat_apply_schedule(c, &m->t, &rs, &n_recompute, &err) : VP_ERR_NOMEM;
    vp_plan p;
    memset(&p, 0, sizeof p);
    if (!s) s = test_plan_step(c, &m->t, vp_device_find("cpu"), 1, &p, &err);
    vp_verify_report rep;
    vp_status vs = s ? s : vp_plan_verify(&p, &rep, &err);
    char why[1024] = "";
    int same = s ? 0 : test_compare_planned(m, &p, 2, m->t.params, m->t.n_params, why, sizeof why);
    check(!s && !vs && n_recompute == 2 && same == 1, "%s: '%s' recomputed before '%s' and again before '%s': %d copies, %s, %s",
          m->name, g->nodes[x].name, g->nodes[b1].name, g->nodes[b2].name, n_recompute, s || vs ? err.msg : "sound",
          same == 1 ? "bit-identical to naive" : why);
    /* a schedule naming a forward node as a stage is refused, not run */
    int bad_stage[1] = {x}, bad_start[2] = {0, 0};
    vp_remat_schedule bad = {1, bad_stage, bad_start, nodes};
    vp_graph *c2 = vp_graph_clone(m->g);
    vp_status bs = c2 ? vp_remat_apply_schedule(c2, &m->t, &bad, NULL, &err) : VP_ERR_NOMEM;
    check(bs == VP_ERR_INVALID && strstr(err.msg, "not a backward node"), "%s: a schedule with a forward stage is refused (%s)",
          m->name, bs ? err.msg : "accepted");
    vp_plan_free(&p);
    vp_graph_free(c);
    vp_graph_free(c2);
}

int main(void) {
    vp_cpu_host_install();
    char names[32][64];
    int n = test_model_list(names, 32);
    for (int i = 0; i < n; i++) {
        test_model m;
        vp_error err;
        if (test_model_load_step(&m, names[i], "momentum", &err)) {
            check(0, "%s: %s", names[i], err.msg);
            continue;
        }
        int64_t full = full_arena = plan_case(&m, VP_REMAT_NONE, 0, 1);
        int64_t least = plan_case(&m, VP_REMAT_DP, 1, 0); /* nothing fits 1 byte: the smallest peak */
        plan_case(&m, VP_REMAT_SQRTN, 0, 1);
        check(least > 0 && least <= full, "%s: checkpointing lowers the peak from %lld to %lld bytes (%.0f%%)", names[i],
              (long long)full, (long long)least, full > 0 ? 100.0 * (double)least / (double)full : 0.0);
        for (int k = 0; k <= 4 && least > 0 && full > least; k++) {
            int64_t budget = least + (full - least) * k / 4;
            plan_case(&m, VP_REMAT_DP, budget, 1);
        }
        if (least > 0 && full > least) ilp_cases(&m, least, full);
        twice_case(&m);
        test_model_free(&m);
    }
    return check_summary();
}
