/* Checkpointing: the recompute insertion, the chain of blocks, and the strategies.
 * See remat.h. */
#include "remat.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cost.h"
#include "remat_chain.h"

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

/* ---- planning with checkpointing ---- */

static double step_seconds(const vp_graph *g, const vp_device_profile *dev, vp_phase only, int all) {
    double t = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const vp_node *n = &g->nodes[i];
        if (n->folded || (!all && n->phase != only)) continue;
        vp_node_cost c = vp_cost_node(g, n);
        t += vp_cost_seconds(&c, dev, 0);
    }
    return t;
}

/* Clones g, applies keep (or the schedule rs), plans.  On success *out is the clone and
 * p the plan. */
static vp_status plan_candidate(vp_graph *g, const vp_training *t, const vp_device_profile *dev, int fused,
                                const char *keep, const vp_remat_schedule *rs, vp_graph **out, vp_plan *p,
                                int *n_recompute, vp_error *err) {
    vp_graph *c = vp_graph_clone(g);
    if (!c) return vp_fail(err, VP_ERR_NOMEM, "out of memory copying the graph");
    vp_status s = rs ? vp_remat_apply_schedule(c, rs, n_recompute, err) : vp_remat_apply(c, keep, n_recompute, err);
    /* candidates are weighed with one order (size, best fit: the one that lands on the
     * bound most often) and no improving search; the plan kept gets the full solver */
    vp_arena_opts quick = {0, -1, 0};
    if (!s) s = vp_plan_build_opts(p, c, t, dev, fused, &quick, err);
    if (s) {
        vp_plan_free(p);
        vp_graph_free(c);
        return s;
    }
    *out = c;
    return VP_OK;
}

typedef struct candidate {
    vp_plan p;
    vp_graph *g;
    int *opt;          /* dp's option per block, NULL for other candidates */
    vp_ilp_stats ilp;  /* ilp: the solve that gave this schedule */
    int n_recompute;
    int fits;
    double recompute_seconds;
    char choice[256];
} candidate;

static double step_seconds(const vp_graph *g, const vp_device_profile *dev, vp_phase only, int all);

static vp_status add_candidate(candidate *c, int *n, int max, vp_graph *g, const vp_training *t, const vp_device_profile *dev,
                               int fused, const char *keep, const vp_remat_schedule *rs, int64_t budget, const char *choice,
                               vp_error *err) {
    if (*n >= max) return VP_OK;
    candidate *k = &c[*n];
    memset(k, 0, sizeof *k);
    vp_status s = plan_candidate(g, t, dev, fused, keep, rs, &k->g, &k->p, &k->n_recompute, err);
    if (s) return s;
    k->fits = !budget || k->p.arena_bytes <= budget;
    k->recompute_seconds = step_seconds(k->g, dev, VP_PHASE_RECOMPUTE, 0);
    snprintf(k->choice, sizeof k->choice, "%s", choice);
    (*n)++;
    return VP_OK;
}

/* The fitting candidate with the least recompute time, else the smallest arena. */
static int pick_candidate(const candidate *c, int n) {
    int best = -1;
    for (int i = 0; i < n; i++) {
        if (!c[i].fits) continue;
        if (best < 0 || c[i].recompute_seconds < c[best].recompute_seconds ||
            (c[i].recompute_seconds == c[best].recompute_seconds && c[i].p.arena_bytes < c[best].p.arena_bytes))
            best = i;
    }
    if (best >= 0) return best;
    best = 0;
    for (int i = 1; i < n; i++)
        if (c[i].p.arena_bytes < c[best].p.arena_bytes) best = i;
    return best;
}

/* Chen et al.: keep every ceil(sqrt(k))-th cut, recompute everything else. */
static void sqrtn_keep(const vp_graph *g, const chain *ch, char *keep) {
    int stride = (int)ceil(sqrt((double)(ch->nb > 0 ? ch->nb : 1)));
    vp_chain_keep(g, ch, NULL, keep);
    for (int k = 0; k < ch->nb; k++)
        if (ch->b[k].cut >= 0 && (k + 1) % stride != 0) keep[ch->b[k].cut] = 0;
}


static void choice_letters(const chain *ch, const int *choice, char *out, size_t cap) {
    size_t used = 0;
    for (int k = 0; k < ch->nb && used + 2 < cap; k++) out[used++] = vp_chain_letter(&ch->b[k], choice[k]);
    out[used] = 0;
}

/* Plans one option per block as a candidate, remembering the options. */
static vp_status add_choice(candidate *cands, int *nc, int max, vp_graph *g, const vp_training *t,
                            const vp_device_profile *dev, int fused, const chain *ch, const int *choice, char *keep,
                            int64_t budget, vp_error *err) {
    if (*nc >= max) return VP_OK;
    char letters[256];
    choice_letters(ch, choice, letters, sizeof letters);
    vp_chain_keep(g, ch, choice, keep);
    vp_status s = add_candidate(cands, nc, max, g, t, dev, fused, keep, NULL, budget, letters, err);
    if (!s) {
        candidate *k = &cands[*nc - 1];
        k->opt = malloc(((size_t)ch->nb + 1) * sizeof *k->opt);
        if (!k->opt) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
        memcpy(k->opt, choice, (size_t)ch->nb * sizeof *choice);
    }
    return s;
}

static double seconds_since(const struct timespec *t0) {
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0->tv_nsec);
}

static int seen_choice(const candidate *c, int n, const int *choice, int nb) {
    for (int i = 0; i < n; i++)
        if (c[i].opt && !memcmp(c[i].opt, choice, (size_t)nb * sizeof *choice)) return 1;
    return 0;
}

typedef struct chain_model {
    int64_t (*peak)(const block *, int, const int *);
    int (*choose)(const block *, int, int64_t, int *);
} chain_model;

static const chain_model models[] = {{vp_chain_peak, vp_chain_dp_prefix},
                                     {vp_chain_peak, vp_chain_dp_prefix_kept_cuts},
                                     {vp_chain_peak_working_set, vp_chain_dp_working_set}};

/* A block's option raised to keep more: the previous block, if it was inside the same
 * recomputed segment, becomes that segment's end. */
static void raise_option(const block *b, int *choice, int k, int o) {
    if (k > 0 && choice[k - 1] == OPT_DROPPED) choice[k - 1] = vp_chain_none(&b[k - 1]);
    choice[k] = o;
}

typedef struct move {
    int block, opt;
    double saves;
} move;

static int by_saving(const void *x, const void *y) {
    const move *a = x, *b = y;
    return a->saves < b->saves ? 1 : a->saves > b->saves ? -1 : a->block - b->block;
}

/* Greedy improvement of the best fitting candidate on the real arena: each block that
 * recomputes, in order of the time it would save, tries keeping more (everything, or
 * one option less of its menu); a move stays when the plan still fits and recomputes
 * less.  The chain models miss what the
 * arena reuses; this catches it.  Bounded by the time planning has taken so far. */
static vp_status refine(vp_graph *g, const vp_training *t, const vp_device_profile *dev, int fused, int64_t budget,
                        const chain *ch, char *keep, candidate *cands, int nc, int max_plans, vp_error *err) {
    int w = pick_candidate(cands, nc);
    if (!budget || !cands[w].fits || !cands[w].opt) return VP_OK;
    const block *b = ch->b;
    int nb = ch->nb;
    move *mv = malloc(((size_t)nb * 2 + 1) * sizeof *mv);
    int *trial = malloc(((size_t)nb + 1) * sizeof *trial);
    vp_status s = mv && trial ? VP_OK : vp_fail(err, VP_ERR_NOMEM, "out of memory");
    int n = 0;
    for (int k = 0; !s && k < nb; k++) {
        int o = cands[w].opt[k];
        int less = o == OPT_DROPPED ? vp_chain_none(&b[k]) - 1 : o - 1;
        double now_t = o == OPT_DROPPED ? b[k].fwd_seconds : b[k].time[o];
        if (o != OPT_ALL) mv[n++] = (move){k, OPT_ALL, now_t};
        if (less > OPT_ALL) mv[n++] = (move){k, less, now_t - b[k].time[less]};
    }
    if (!s) qsort(mv, (size_t)n, sizeof *mv, by_saving);
    for (int i = 0, plans = 0; !s && i < n && plans < max_plans; i++) {
        int cur = cands[w].opt[mv[i].block];
        /* an earlier move may have raised this block already */
        if (mv[i].saves <= 0 || (cur != OPT_DROPPED && cur <= mv[i].opt)) continue;
        memcpy(trial, cands[w].opt, (size_t)nb * sizeof *trial);
        raise_option(b, trial, mv[i].block, mv[i].opt);
        plans++;
        candidate tmp[1];
        int one = 0;
        s = add_choice(tmp, &one, 1, g, t, dev, fused, ch, trial, keep, budget, err);
        if (s) break;
        if (tmp[0].fits && tmp[0].recompute_seconds < cands[w].recompute_seconds) {
            vp_plan_free(&cands[w].p);
            vp_graph_free(cands[w].g);
            free(cands[w].opt);
            cands[w] = tmp[0];
        } else {
            vp_plan_free(&tmp[0].p);
            vp_graph_free(tmp[0].g);
            free(tmp[0].opt);
        }
    }
    free(mv);
    free(trial);
    return s;
}

/* Descent on the real arena from the cheapest candidate that does not fit: one block at
 * a time moves one option down its menu (recomputes more), the block that frees the most
 * kept bytes per second of recompute first, until the plan fits.  The chain models
 * misjudge the peak most at tight budgets; this walks down from the cheap side.  Each
 * step plans the step for real: at most max_plans of them. */
static vp_status descend(vp_graph *g, const vp_training *t, const vp_device_profile *dev, int fused, int64_t budget,
                         const chain *ch, char *keep, candidate *cands, int *nc, int max, int max_plans,
                         vp_error *err) {
    int start = -1;
    for (int i = 0; i < *nc; i++)
        if (cands[i].opt && !cands[i].fits &&
            (start < 0 || cands[i].recompute_seconds < cands[start].recompute_seconds))
            start = i;
    int w = pick_candidate(cands, *nc);
    if (!budget || start < 0 || *nc >= max || (cands[w].fits && cands[w].recompute_seconds <= cands[start].recompute_seconds))
        return VP_OK;
    const block *b = ch->b;
    int nb = ch->nb;
    int *cur = malloc(((size_t)nb + 1) * sizeof *cur);
    if (!cur) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    memcpy(cur, cands[start].opt, (size_t)nb * sizeof *cur);
    vp_status s = VP_OK;
    for (int step = 0, plans = 0; !s && step < 4 * nb && plans < max_plans; step++) {
        int best = -1, best_o = 0;
        double best_ratio = 0;
        for (int k = 0; k < nb; k++) { /* any option further down the menu, cut included */
            int o = cur[k];
            if (o == OPT_DROPPED) continue;
            for (int o2 = o + 1; o2 < b[k].n_opts; o2++) {
                int64_t freed = b[k].kept[o] + vp_chain_cut(&b[k], o) - b[k].kept[o2] - vp_chain_cut(&b[k], o2);
                double cost = b[k].time[o2] - b[k].time[o];
                double ratio = (double)freed / (cost > 1e-12 ? cost : 1e-12);
                if (freed > 0 && (best < 0 || ratio > best_ratio)) best = k, best_o = o2, best_ratio = ratio;
            }
            /* or into the segment the next block ends: recomputed whole, its cut dropped */
            int next = k + 1 < nb ? cur[k + 1] : -2;
            if (next == OPT_DROPPED || next == vp_chain_none(&b[k + 1 < nb ? k + 1 : k])) {
                int64_t freed = b[k].kept[o] + vp_chain_cut(&b[k], o);
                double cost = b[k].fwd_seconds - b[k].time[o];
                double ratio = (double)freed / (cost > 1e-12 ? cost : 1e-12);
                if (freed > 0 && (best < 0 || ratio > best_ratio)) best = k, best_o = OPT_DROPPED, best_ratio = ratio;
            }
        }
        if (best < 0) break;
        cur[best] = best_o;
        if (seen_choice(cands, *nc, cur, nb)) continue;
        plans++;
        candidate tmp[1];
        int one = 0;
        s = add_choice(tmp, &one, 1, g, t, dev, fused, ch, cur, keep, budget, err);
        if (s) break;
        if (tmp[0].fits && *nc < max) {
            cands[(*nc)++] = tmp[0];
            break;
        }
        vp_plan_free(&tmp[0].p);
        vp_graph_free(tmp[0].g);
        free(tmp[0].opt);
    }
    free(cur);
    return s;
}

/* dp's candidates: recompute every block from its cut; each chain model's choice under
 * the budget, tightened by what the real arena exceeded; sqrtn's segments unless a
 * choice that fits recomputes less (so dp is never worse than sqrtn); when nothing fits,
 * choices pushed down to the smallest peak found, to report it; then the greedy
 * improvement of the best on the real arena. */
static vp_status dp_candidates(vp_graph *g, const vp_training *t, const vp_device_profile *dev, int fused, int64_t budget,
                               const chain *ch, char *keep, int *choice, candidate *cands, int *nc, int max,
                               vp_remat_result *r, vp_error *err) {
    const block *b = ch->b;
    int nb = ch->nb;
    for (int k = 0; k < nb; k++) choice[k] = vp_chain_none(&b[k]);
    vp_status s = add_choice(cands, nc, max, g, t, dev, fused, ch, choice, keep, budget, err);
    int64_t all_n = s ? 0 : cands[0].p.arena_bytes;
    for (size_t mi = 0; !s && mi < sizeof models / sizeof models[0]; mi++) {
        for (int k = 0; k < nb; k++) choice[k] = vp_chain_none(&b[k]);
        /* calibrated so the model's estimate of the all-N plan is its real arena */
        int64_t base = all_n - models[mi].peak(b, nb, choice);
        int64_t target = budget > 0 ? budget : INT64_MAX / 4, step = budget / 100 + 1;
        for (int it = 0; !s && it < 12 && *nc < max; it++) {
            r->iterations++;
            if (!models[mi].choose(b, nb, target - base, choice)) break;
            if (seen_choice(cands, *nc, choice, nb)) {
                /* the model still says this fits: lower its target faster */
                step *= 2;
                target -= step;
                continue;
            }
            s = add_choice(cands, nc, max, g, t, dev, fused, ch, choice, keep, budget, err);
            if (s || !budget || cands[*nc - 1].fits) break;
            /* the estimate was optimistic by at least that much */
            step = cands[*nc - 1].p.arena_bytes - budget;
            target -= step;
        }
    }
    double one_forward = 0, best_rt = INFINITY;
    for (int k = 0; k < nb; k++) one_forward += b[k].fwd_seconds;
    for (int i = 0; i < *nc; i++)
        if (cands[i].fits && cands[i].recompute_seconds < best_rt) best_rt = cands[i].recompute_seconds;
    if (!s && !(best_rt < one_forward)) {
        sqrtn_keep(g, ch, keep);
        s = add_candidate(cands, nc, max, g, t, dev, fused, keep, NULL, budget, "sqrtn", err);
    }
    int any_fits = 0;
    for (int i = 0; i < *nc; i++) any_fits |= cands[i].fits;
    for (size_t mi = 0; !s && !any_fits && mi < sizeof models / sizeof models[0]; mi++) {
        /* calibrated on the smallest plan of a choice so far: the models are most
         * nearly right close to where they are asked to go */
        int c0 = 0;
        for (int i = 0; i < *nc; i++)
            if (cands[i].opt && cands[i].p.arena_bytes < cands[c0].p.arena_bytes) c0 = i;
        int64_t base = cands[c0].p.arena_bytes - models[mi].peak(b, nb, cands[c0].opt);
        int64_t goal = cands[pick_candidate(cands, *nc)].p.arena_bytes - 1, step = goal / 100 + 1;
        for (int it = 0; !s && it < 10 && *nc < max; it++) {
            if (!models[mi].choose(b, nb, goal - base, choice)) break;
            if (seen_choice(cands, *nc, choice, nb)) {
                step *= 2;
                goal -= step;
                continue;
            }
            s = add_choice(cands, nc, max, g, t, dev, fused, ch, choice, keep, budget, err);
            int64_t smallest = cands[pick_candidate(cands, *nc)].p.arena_bytes;
            if (!s && smallest - 1 < goal) goal = smallest - 1;
            else if (!s) goal -= step;
        }
    }
    /* each search plans at most a few times per block, within about 40,000 node-plans
     * (eight plans of a 48-layer GPT step, hundreds of a small CNN), and at least as
     * often as the models did: the result does not depend on the clock */
    int live_nodes = 0;
    for (int i = 0; i < g->n_nodes; i++) live_nodes += !g->nodes[i].folded;
    int plans = 40000 / (live_nodes > 0 ? live_nodes : 1);
    if (plans > 4 * nb) plans = 4 * nb;
    if (plans < *nc) plans = *nc;
    if (!s) s = descend(g, t, dev, fused, budget, ch, keep, cands, nc, max, plans, err);
    if (!s) s = refine(g, t, dev, fused, budget, ch, keep, cands, *nc, plans, err);
    return s;
}


/* ilp's candidates: Checkmate's MILP on the un-checkpointed plan p0, each schedule
 * planned on the real arena.  The model ignores in-place reuse and fragmentation, so
 * the budget given to it is searched: lowered by what the arena exceeded, raised by what
 * it left unused, then bisected, for the largest model budget whose plan fits. */
static vp_status ilp_candidates(vp_graph *g, const vp_training *t, const vp_device_profile *dev, int fused, int64_t budget,
                                const vp_plan *p0, double limit, candidate *cands, int *nc, int max, vp_remat_result *r,
                                vp_error *err) {
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int64_t mb = budget, lo = -1, hi = -1; /* model budgets known to fit / known not to */
    vp_status s = VP_OK;
    for (int it = 0; !s && it < 8 && *nc < max; it++) {
        double left = limit - seconds_since(&t0);
        if (it > 0 && left < 0.5) break;
        vp_remat_schedule rs;
        vp_ilp_stats st;
        s = vp_remat_ilp_solve(g, p0, t, dev, mb, left, &rs, &st, err);
        r->iterations++;
        double spent = r->ilp.solve_seconds + st.solve_seconds;
        if (!*nc || st.status == VP_ILP_OPTIMAL || st.status == VP_ILP_FEASIBLE) r->ilp = st;
        r->ilp.solve_seconds = spent;
        if (s || st.status == VP_ILP_NO_SOLUTION || st.status == VP_ILP_TOO_LARGE) break;
        int64_t arena = -1;
        if (st.status != VP_ILP_INFEASIBLE) {
            s = add_candidate(cands, nc, max, g, t, dev, fused, NULL, &rs, budget, vp_ilp_status_name(st.status), err);
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
                   "--remat ilp: GLPK found no schedule within %.0f s (%d binaries, %d rows; it proved the recompute "
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
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    r->forward_seconds = step_seconds(g, dev, VP_PHASE_FORWARD, 0);
    *planned = g;
    vp_status s;
    if (kind == VP_REMAT_NONE) {
        s = vp_plan_build(p, g, t, dev, fused, err);
        r->step_seconds = step_seconds(g, dev, 0, 1);
        r->fits = !budget || p->arena_bytes <= budget;
        return s;
    }
    chain ch;
    s = vp_chain_find(g, dev, &ch, err);
    if (s) return s;
    const block *b = ch.b;
    int nb = ch.nb;
    r->n_blocks = nb;
    for (int k = 0; k < nb; k++) {
        int dup = 0;
        for (int j = 0; j < k && !dup; j++) dup = b[j].signature == b[k].signature;
        r->n_distinct_blocks += !dup;
    }
    char *keep = malloc((size_t)g->n_values + 1);
    int *choice = calloc((size_t)nb + 1, sizeof *choice);
    if (!keep || !choice) s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
    vp_graph *best_g = NULL;
    enum { MAX_CANDS = 32 };
    candidate cands[MAX_CANDS];
    int nc = 0;
    /* the un-checkpointed plan: kept when it fits; ilp's memory model is read off it */
    vp_status full = VP_ERR_INVALID;
    if (!s && kind != VP_REMAT_SQRTN && (budget > 0 || kind == VP_REMAT_ILP)) full = vp_plan_build(p, g, t, dev, fused, err);
    if (!s && kind == VP_REMAT_SQRTN) {
        sqrtn_keep(g, &ch, keep);
        s = plan_candidate(g, t, dev, fused, keep, NULL, &best_g, p, &r->n_recompute, err);
        r->iterations = 1;
    } else if (!s && !full && (budget <= 0 || p->arena_bytes <= budget)) {
        best_g = g; /* keeping everything fits: nothing to recompute */
        r->iterations = 1;
        for (int k = 0; k < nb && k + 1 < (int)sizeof r->choice; k++) r->choice[k] = 'A';
    } else if (!s && kind == VP_REMAT_ILP) {
        double limit = opts && opts->ilp_time_limit > 0 ? opts->ilp_time_limit : 60.0;
        s = full ? full : ilp_candidates(g, t, dev, fused, budget, p, limit, cands, &nc, MAX_CANDS, r, err);
        if (!full) vp_plan_free(p);
    } else if (!s) {
        if (!full) vp_plan_free(p);
        s = dp_candidates(g, t, dev, fused, budget, &ch, keep, choice, cands, &nc, MAX_CANDS, r, err);
    }
    if (!s && nc > 0) {
        int w = pick_candidate(cands, nc);
        /* polish the plan kept: the arena's improving search, only when it can help */
        if (cands[w].p.arena_bytes > cands[w].p.lower_bound_bytes) s = vp_assign_offsets(&cands[w].p, NULL, err);
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
        r->step_seconds = step_seconds(best_g, dev, 0, 1);
        r->recompute_seconds = step_seconds(best_g, dev, VP_PHASE_RECOMPUTE, 0);
        r->fits = !budget || p->arena_bytes <= budget;
    }
    free(keep);
    free(choice);
    vp_chain_free(&ch);
    return s;
}
