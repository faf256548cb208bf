/* Checkpointing: the strategies (none, sqrtn, dp, ilp) and the plan they keep.  See
 * remat.h; the candidates and dp's searches are in remat_candidates.c and
 * remat_search.c, the chain and its menus in remat_blocks.c, remat_menu.c and
 * remat_dp.c, the MILP in remat_ilp*.c, recompute insertion in recompute.c. */
#include "remat/remat.h"
#include "remat/recompute_norms.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "remat/remat_candidates.h"

vp_status vp_remat_parse(const char *arg, vp_remat_kind *out, vp_error *err) {
    if (!strcmp(arg, "none")) *out = VP_REMAT_NONE;
    else if (!strcmp(arg, "sqrtn")) *out = VP_REMAT_SQRTN;
    else if (!strcmp(arg, "dp")) *out = VP_REMAT_DP;
    else if (!strcmp(arg, "ilp")) *out = VP_REMAT_ILP;
    else return vp_fail(err, VP_ERR_USAGE, "--remat expects none, sqrtn, dp or ilp, got '%s'", arg);
    return VP_OK;
}

const char *vp_remat_name(vp_remat_kind k) {
    static const char *n[] = {"none", "sqrtn", "dp", "ilp"};
    return (int)k >= 0 && k <= VP_REMAT_ILP ? n[k] : "?";
}

static double seconds_since(const struct timespec *t0) {
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0->tv_nsec);
}

/* dp's schedule under the budget, to seed ilp's search with an incumbent; an empty
 * schedule when dp finds nothing that fits. */
static vp_status dp_hint(vp_graph *g, const vp_training *t, const vp_device_profile *dev, int fused, int64_t budget,
                         const chain *ch, char *keep, int *choice, vp_remat_schedule *hint, vp_error *err) {
    enum { MAX_CANDS = 32 };
    candidate cands[MAX_CANDS];
    int nc = 0;
    vp_remat_result scratch;
    memset(&scratch, 0, sizeof scratch);
    memset(hint, 0, sizeof *hint);
    vp_status s = vp_remat_dp_candidates(g, t, dev, fused, budget, ch, keep, choice, cands, &nc, MAX_CANDS, &scratch, err);
    int w = nc ? vp_remat_candidate_pick(cands, nc) : -1;
    if (!s && w >= 0 && cands[w].fits && cands[w].opt) {
        vp_chain_keep(g, ch, cands[w].opt, keep);
        s = vp_remat_schedule_from_keep(g, keep, hint, err);
    }
    for (int i = 0; i < nc; i++) {
        vp_plan_free(&cands[i].p);
        vp_graph_free(cands[i].g);
        free(cands[i].opt);
    }
    return s;
}

/* ilp's candidates: Checkmate's MILP on the un-checkpointed plan p0, each schedule
 * planned on the real arena.  The model ignores in-place reuse and fragmentation, so
 * the budget given to it is searched: lowered by what the arena exceeded, raised by what
 * it left unused, then bisected, for the largest model budget whose plan fits. */
static vp_status ilp_candidates(vp_graph *g, const vp_training *t, const vp_device_profile *dev, int fused, int64_t budget,
                                const vp_plan *p0, double limit, const vp_remat_schedule *hint, candidate *cands,
                                int *nc, int max, vp_remat_result *r, vp_error *err) {
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int64_t mb = budget, lo = -1, hi = -1; /* model budgets known to fit / known not to */
    vp_status s = VP_OK;
    for (int it = 0; !s && it < 8 && *nc < max; it++) {
        double left = limit - seconds_since(&t0);
        if (it > 0 && left < 0.5) break;
        vp_remat_schedule rs;
        vp_ilp_stats st;
        s = vp_remat_ilp_solve_hinted(g, p0, t, dev, mb, left, hint, &rs, &st, err);
        r->iterations++;
        double spent = r->ilp.solve_seconds + st.solve_seconds;
        if (!*nc || st.status == VP_ILP_OPTIMAL || st.status == VP_ILP_FEASIBLE) r->ilp = st;
        r->ilp.solve_seconds = spent;
        if (s || st.status == VP_ILP_NO_SOLUTION || st.status == VP_ILP_TOO_LARGE) break;
        int64_t arena = -1;
        if (st.status != VP_ILP_INFEASIBLE) {
            s = vp_remat_candidate_add(cands, nc, max, g, t, dev, fused, NULL, &rs, budget, 0, vp_ilp_status_name(st.status), err);
            vp_remat_schedule_free(&rs);
            if (s) break;
            cands[*nc - 1].ilp = st;
            arena = cands[*nc - 1].p.arena_bytes;
        }
        if (arena >= 0 && arena <= budget) lo = mb;
        else if (arena > budget) hi = mb;
        else if (lo < 0 && hi < 0) break; /* infeasible in the model at the budget itself */
        else lo = lo > mb ? lo : mb;      /* infeasible under a lowered model budget: go back up */
        if (lo >= 0 && hi >= 0) {
            if (hi - lo <= budget / 500 + 1) break;
            mb = lo + (hi - lo) / 2;
        } else if (hi >= 0) {
            mb -= arena - budget; /* the estimate was optimistic by that much */
        } else if (arena >= 0 && budget - arena > budget / 500) {
            mb += budget - arena;
        } else {
            break;
        }
    }
    if (s || *nc) return s;
    const vp_ilp_stats *st = &r->ilp;
    if (st->status == VP_ILP_INFEASIBLE)
        return vp_fail(err, VP_ERR_INVALID,
                       "--remat ilp: no recompute schedule fits the budget of %.2f MiB in Checkmate's memory model "
                       "(--remat dp reports the smallest peak it reaches)", (double)budget / 1048576.0);
    if (st->status == VP_ILP_TOO_LARGE)
        return vp_fail(err, VP_ERR_UNSUPPORTED,
                       "--remat ilp: the MILP would have over %d binary variables, too many to solve; use --remat dp",
                       st->n_binary);
    return vp_fail(err, VP_ERR_UNSUPPORTED,
                   "--remat ilp: GLPK found no schedule within %g s (%d binaries, %d rows; it proved the recompute "
                   "needs at least %.4f ms); raise --ilp-time-limit or use --remat dp",
                   limit, st->n_binary, st->n_rows, 1e3 * st->bound_seconds);
}

vp_status vp_plan_with_remat(vp_graph *g, const vp_training *t, const vp_device_profile *dev, int fused, int64_t budget,
                             vp_remat_kind kind, vp_graph **planned, vp_plan *p, vp_remat_result *r, vp_error *err) {
    return vp_plan_with_remat_opts(g, t, dev, fused, budget, kind, NULL, planned, p, r, err);
}

vp_status vp_plan_with_remat_opts(vp_graph *g, const vp_training *t, const vp_device_profile *dev, int fused,
                                  int64_t budget, vp_remat_kind kind, const vp_remat_opts *opts, vp_graph **planned,
                                  vp_plan *p, vp_remat_result *r, vp_error *err) {
    memset(r, 0, sizeof *r);
    r->kind = kind;
    vp_arena_opts arena_opts = {.only = -1, .exact_seconds = opts ? opts->arena_time_limit : 0};
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    r->forward_seconds = vp_remat_step_seconds(g, dev, VP_PHASE_FORWARD, 0);
    *planned = g;
    vp_status s;
    if (kind == VP_REMAT_NONE) {
        s = vp_plan_build_opts(p, g, t, dev, fused, &arena_opts, err);
        r->step_seconds = vp_remat_step_seconds(g, dev, 0, 1);
        r->fits = !budget || p->arena_bytes <= budget;
        r->n_renorm = t->n_renorm;
        return s;
    }
    /* the strategies weigh the step with each norm's output kept (they may recompute a
     * norm themselves); keeping everything is the step as built, norms run again */
    vp_graph *dg = g;
    if (t->n_renorm_values) {
        dg = vp_graph_clone(g);
        s = dg ? vp_remat_norms_undo(dg, t, err) : vp_fail(err, VP_ERR_NOMEM, "out of memory copying the graph");
        if (s) {
            vp_graph_free(dg);
            return s;
        }
    }
    chain ch;
    s = vp_chain_find(dg, dev, &ch, err);
    if (s) {
        if (dg != g) vp_graph_free(dg);
        return s;
    }
    const block *b = ch.b;
    int nb = ch.nb;
    r->n_blocks = nb;
    for (int k = 0; k < nb; k++) {
        int dup = 0;
        for (int j = 0; j < k && !dup; j++) dup = b[j].signature == b[k].signature;
        r->n_distinct_blocks += !dup;
    }
    r->n_layers = ch.n_layers;
    r->n_layer_blocks = ch.n_layer_blocks;
    vp_graph *best_g = NULL;
    enum { MAX_CANDS = 32 };
    candidate cands[MAX_CANDS];
    int nc = 0;
    /* the un-checkpointed plan: kept when it fits; ilp's memory model is read off it */
    vp_status full = VP_ERR_INVALID;
    int64_t known = kind == VP_REMAT_DP && opts && opts->unchecked_arena > budget && budget > 0 ? opts->unchecked_arena : -1;
    if (kind != VP_REMAT_SQRTN && (budget > 0 || kind == VP_REMAT_ILP) && known < 0)
        full = vp_plan_build_opts(p, g, t, dev, fused, &arena_opts, err);
    int64_t full_arena = full ? known : p->arena_bytes;
    /* sized after that plan, which may add values to g (its steps' workspaces) */
    char *keep = malloc((size_t)(g->n_values > dg->n_values ? g->n_values : dg->n_values) + 1);
    int *choice = calloc((size_t)nb + 1, sizeof *choice);
    if (!keep || !choice) {
        if (!full) vp_plan_free(p);
        full = VP_ERR_INVALID;
        s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
    }
    if (!s && kind == VP_REMAT_SQRTN) {
        vp_remat_sqrtn_keep(dg, &ch, keep);
        s = vp_remat_plan_copy(dg, t, dev, fused, keep, NULL, 0, &best_g, p, &r->n_recompute, err);
        r->iterations = 1;
    } else if (!s && !full && (budget <= 0 || p->arena_bytes <= budget)) {
        best_g = g; /* keeping everything fits: nothing to recompute */
        r->iterations = 1;
        for (int k = 0; k < nb && k + 1 < (int)sizeof r->choice; k++) r->choice[k] = 'A';
    } else if (!s && kind == VP_REMAT_ILP) {
        double limit = opts && opts->ilp_time_limit > 0 ? opts->ilp_time_limit : 60.0;
        vp_remat_schedule hint;
        memset(&hint, 0, sizeof hint);
        if (!full && dg != g) { /* the MILP's memory model is read off the step it weighs */
            vp_plan_free(p);
            full = vp_plan_build_opts(p, dg, t, dev, fused, &arena_opts, err);
        }
        s = full ? full : dp_hint(dg, t, dev, fused, budget, &ch, keep, choice, &hint, err);
        if (!s) s = ilp_candidates(dg, t, dev, fused, budget, p, limit, hint.n_stages ? &hint : NULL, cands, &nc, MAX_CANDS, r, err);
        vp_remat_schedule_free(&hint);
        if (!full) vp_plan_free(p);
    } else if (!s) {
        if (!full) vp_plan_free(p);
        s = vp_remat_dp_candidates(dg, t, dev, fused, budget, &ch, keep, choice, cands, &nc, MAX_CANDS, r, err);
    }
    int w = !s && nc > 0 ? vp_remat_candidate_pick(cands, nc) : -1;
    /* Recompute that does not lower the arena only costs time: when nothing fits and
     * the best candidate is no smaller than keeping everything, keep everything. */
    if (w >= 0 && !cands[w].fits && full_arena >= 0 && cands[w].p.arena_bytes >= full_arena) {
        s = vp_plan_build_opts(p, g, t, dev, fused, &arena_opts, err);
        best_g = g;
        for (int k = 0; k < nb && k + 1 < (int)sizeof r->choice; k++) r->choice[k] = 'A';
        w = -1;
    }
    if (w >= 0) {
        /* polish the plan kept: the arena's improving search, only when it can help */
        if (cands[w].p.arena_bytes > cands[w].p.lower_bound_bytes) s = vp_assign_offsets(&cands[w].p, &arena_opts, err);
        else snprintf(cands[w].p.arena.kept, sizeof cands[w].p.arena.kept, "%s", vp_arena_algo_name(0));
        if (budget) cands[w].fits = cands[w].p.arena_bytes <= budget;
        *p = cands[w].p;
        best_g = cands[w].g;
        r->n_recompute = cands[w].n_recompute;
        if (kind == VP_REMAT_ILP) { /* the stats of the solve kept, the time of them all */
            double total = r->ilp.solve_seconds;
            r->ilp = cands[w].ilp;
            r->ilp.solve_seconds = total;
        }
        snprintf(r->choice, sizeof r->choice, "%s", cands[w].choice);
        cands[w].g = NULL;
    }
    for (int i = 0; i < nc; i++) {
        if (cands[i].g) {
            vp_plan_free(&cands[i].p);
            vp_graph_free(cands[i].g);
        }
        free(cands[i].opt);
    }
    if (!s) {
        p->planning_seconds = seconds_since(&t0);
        *planned = best_g;
        r->step_seconds = vp_remat_step_seconds(best_g, dev, 0, 1);
        r->recompute_seconds = vp_remat_step_seconds(best_g, dev, VP_PHASE_RECOMPUTE, 0);
        r->fits = !budget || p->arena_bytes <= budget;
        r->n_renorm = best_g == g ? t->n_renorm : 0;
    }
    free(keep);
    free(choice);
    vp_chain_free(&ch);
    if (dg != g && best_g != dg) vp_graph_free(dg);
    return s;
}
