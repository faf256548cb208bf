/* dp's searches: each chain model's choices under the budget, tightened on the real
 * arena; sqrtn as a floor; the push to the smallest peak when nothing fits, then local
 * search on the real arena from the smallest plan; descent from the cheapest plan that
 * does not fit and hill climbing from the best that does.
 * See remat_candidates.h. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "remat/remat_candidates.h"

static void choice_letters(const chain *ch, const int *choice, char *out, size_t cap) {
    size_t used = 0;
    for (int k = 0; k < ch->nb && used + 2 < cap; k++) out[used++] = vp_chain_letter(&ch->b[k], choice[k]);
    out[used] = 0;
}

/* Plans one option per block as a candidate, remembering the options. */
static vp_status add_choice(candidate *cands, int *nc, int max, vp_graph *g, const vp_training *t,
                            const vp_device_profile *dev, int fused, const chain *ch, const int *choice, char *keep,
                            int64_t budget, int trial, vp_error *err) {
    if (*nc >= max) return VP_OK;
    char letters[256];
    choice_letters(ch, choice, letters, sizeof letters);
    vp_chain_keep(g, ch, choice, keep);
    vp_status s = vp_remat_candidate_add(cands, nc, max, g, t, dev, fused, keep, NULL, budget, trial, letters, err);
    if (!s) {
        candidate *k = &cands[*nc - 1];
        k->opt = malloc(((size_t)ch->nb + 1) * sizeof *k->opt);
        if (!k->opt) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
        memcpy(k->opt, choice, (size_t)ch->nb * sizeof *choice);
    }
    return s;
}


/* One choice planned alone into *out, for a search that keeps it or drops it. */
static vp_status plan_alone(candidate *out, vp_graph *g, const vp_training *t, const vp_device_profile *dev, int fused,
                            const chain *ch, const int *choice, char *keep, int64_t budget, int trial, vp_error *err) {
    int one = 0;
    return add_choice(out, &one, 1, g, t, dev, fused, ch, choice, keep, budget, trial, err);
}

static void drop_candidate(candidate *c) {
    vp_plan_free(&c->p);
    vp_graph_free(c->g);
    free(c->opt);
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
    int w = vp_remat_candidate_pick(cands, nc);
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
        candidate tmp;
        if ((s = plan_alone(&tmp, g, t, dev, fused, ch, trial, keep, budget, 1, err))) break;
        if (tmp.fits && tmp.recompute_seconds < cands[w].recompute_seconds) {
            drop_candidate(&cands[w]);
            cands[w] = tmp;
        } else {
            drop_candidate(&tmp);
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
    int w = vp_remat_candidate_pick(cands, *nc);
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
        candidate tmp;
        if ((s = plan_alone(&tmp, g, t, dev, fused, ch, cur, keep, budget, 1, err))) break;
        if (tmp.fits && *nc < max) {
            cands[(*nc)++] = tmp;
            break;
        }
        drop_candidate(&tmp);
    }
    free(cur);
    return s;
}

typedef struct trial_move {
    int block, opt;
    int64_t model_peak; /* the prefix model's peak with the move made */
} trial_move;

static int by_model_peak(const void *x, const void *y) {
    const trial_move *a = x, *b = y;
    if (a->model_peak != b->model_peak) return a->model_peak < b->model_peak ? -1 : 1;
    return a->block != b->block ? a->block - b->block : a->opt - b->opt;
}

/* When nothing fits: local search on the real arena for the smallest peak, from the
 * smallest plan so far.  Each block may move one option down or up its menu, to its
 * least option keeping its cut, or into the segment the next block ends; the moves are
 * tried in the order of the prefix model's peak after them, and the first that lowers
 * the real arena is kept, until none does or max_plans plans are spent.  The descent
 * walks toward fitting, which a budget below every peak never reaches; this is what a
 * budget of 1 byte (the smallest peak dp reaches) is answered with. */
static vp_status shrink(vp_graph *g, const vp_training *t, const vp_device_profile *dev, int fused, int64_t budget,
                        const chain *ch, char *keep, candidate *cands, int *nc, int max, int max_plans, vp_error *err) {
    int start = -1;
    for (int i = 0; i < *nc; i++) {
        if (cands[i].fits) return VP_OK;
        if (cands[i].opt && (start < 0 || cands[i].p.arena_bytes < cands[start].p.arena_bytes)) start = i;
    }
    if (start < 0 || *nc >= max) return VP_OK;
    const block *b = ch->b;
    int nb = ch->nb;
    int *cur = malloc(((size_t)nb + 1) * sizeof *cur), *trial = malloc(((size_t)nb + 1) * sizeof *trial);
    trial_move *mv = malloc(((size_t)nb * 5 + 1) * sizeof *mv);
    if (!cur || !trial || !mv) {
        free(cur);
        free(trial);
        free(mv);
        return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    }
    memcpy(cur, cands[start].opt, (size_t)nb * sizeof *cur);
    int64_t best = cands[start].p.arena_bytes;
    vp_status s = VP_OK;
    for (int plans = 0, improved = 1; !s && improved && plans < max_plans && *nc < max;) {
        improved = 0;
        int n = 0;
        for (int k = 0; k < nb; k++) {
            int o = cur[k], none = vp_chain_none(&b[k]);
            int to[4] = {o == OPT_DROPPED ? none : o + 1, o == OPT_DROPPED ? -2 : o - 1, none, -2};
            int next = k + 1 < nb ? cur[k + 1] : -2;
            if (o != OPT_DROPPED && k + 1 < nb && (next == OPT_DROPPED || next == vp_chain_none(&b[k + 1]))) to[3] = OPT_DROPPED;
            for (int q = 0; q < 4; q++) {
                int o2 = to[q], dup = 0;
                if (o2 == -2 || o2 == o || o2 >= b[k].n_opts || (o2 < 0 && o2 != OPT_DROPPED)) continue;
                for (int j = 0; j < q; j++) dup |= to[j] == o2;
                if (dup) continue;
                memcpy(trial, cur, (size_t)nb * sizeof *trial);
                if (o2 == OPT_DROPPED) trial[k] = o2;
                else raise_option(b, trial, k, o2);
                mv[n++] = (trial_move){k, o2, vp_chain_peak(b, nb, trial)};
            }
        }
        qsort(mv, (size_t)n, sizeof *mv, by_model_peak);
        for (int i = 0; !s && i < n && plans < max_plans && !improved; i++) {
            memcpy(trial, cur, (size_t)nb * sizeof *trial);
            if (mv[i].opt == OPT_DROPPED) trial[mv[i].block] = OPT_DROPPED;
            else raise_option(b, trial, mv[i].block, mv[i].opt);
            if (seen_choice(cands, *nc, trial, nb)) continue;
            plans++;
            candidate tmp;
            if ((s = plan_alone(&tmp, g, t, dev, fused, ch, trial, keep, budget, 0, err))) break;
            if (tmp.p.arena_bytes < best) {
                best = tmp.p.arena_bytes;
                memcpy(cur, trial, (size_t)nb * sizeof *cur);
                cands[(*nc)++] = tmp;
                improved = 1;
                continue;
            }
            drop_candidate(&tmp);
        }
    }
    free(cur);
    free(trial);
    free(mv);
    return s;
}

/* dp's candidates: recompute every block from its cut; each chain model's choice under
 * the budget, tightened by what the real arena exceeded; sqrtn's segments unless a
 * choice that fits recomputes less (so dp is never worse than sqrtn); when nothing fits,
 * choices pushed down to the smallest peak found, then shrunk by local search on the
 * real arena, to report it; then the greedy improvement of the best on the real arena. */
vp_status vp_remat_dp_candidates(vp_graph *g, const vp_training *t, const vp_device_profile *dev, int fused, int64_t budget,
                               const chain *ch, char *keep, int *choice, candidate *cands, int *nc, int max,
                               vp_remat_result *r, vp_error *err) {
    const block *b = ch->b;
    int nb = ch->nb;
    for (int k = 0; k < nb; k++) choice[k] = vp_chain_none(&b[k]);
    vp_status s = add_choice(cands, nc, max, g, t, dev, fused, ch, choice, keep, budget, 0, err);
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
            s = add_choice(cands, nc, max, g, t, dev, fused, ch, choice, keep, budget, 0, err);
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
        vp_remat_sqrtn_keep(g, ch, keep);
        s = vp_remat_candidate_add(cands, nc, max, g, t, dev, fused, keep, NULL, budget, 0, "sqrtn", err);
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
        int64_t goal = cands[vp_remat_candidate_pick(cands, *nc)].p.arena_bytes - 1, step = goal / 100 + 1;
        for (int it = 0; !s && it < 10 && *nc < max; it++) {
            if (!models[mi].choose(b, nb, goal - base, choice)) break;
            if (seen_choice(cands, *nc, choice, nb)) {
                step *= 2;
                goal -= step;
                continue;
            }
            s = add_choice(cands, nc, max, g, t, dev, fused, ch, choice, keep, budget, 0, err);
            int64_t smallest = cands[vp_remat_candidate_pick(cands, *nc)].p.arena_bytes;
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
    if (!s && budget) s = shrink(g, t, dev, fused, budget, ch, keep, cands, nc, max, plans, err);
    if (!s) s = refine(g, t, dev, fused, budget, ch, keep, cands, *nc, plans, err);
    return s;
}
