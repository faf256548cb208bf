/* Checkpointing: the recompute insertion, the chain of blocks, and the strategies.
 * See remat.h. */
#include "remat.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cost.h"

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

/* ---- the chain of blocks ---- */

typedef struct block {
    int first, last;        /* forward positions, inclusive */
    int cut;                /* the value leaving the block, -1 for the last */
    int64_t cut_bytes;
    int64_t all_bytes;      /* activations the backward reads, produced in the block */
    int64_t sel_bytes;      /* of which the outputs of expensive ops */
    double fwd_seconds, cheap_seconds;
    uint64_t signature;     /* identical blocks share a signature */
} block;

static int is_expensive(const char *op) {
    return !strcmp(op, "MatMul") || !strcmp(op, "Gemm") || !strcmp(op, "Conv") || !strcmp(op, "ConvTranspose");
}

static int needed_by_backward(const vp_graph *g, int v) {
    const vp_value *val = &g->values[v];
    for (int c = 0; c < val->n_consumers; c++)
        if (g->nodes[val->consumers[c]].phase == VP_PHASE_BACKWARD) return 1;
    return 0;
}

static int64_t value_bytes(const vp_graph *g, int v) {
    return vp_value_numel(&g->values[v]) * (int64_t)vp_dtype_size(g->values[v].dtype);
}

/* Forward node ids in order, and the blocks between articulation points. */
static vp_status find_blocks(const vp_graph *g, const vp_device_profile *dev, int **fwd_out, int *n_fwd_out,
                             block **blocks_out, int *n_blocks_out, vp_error *err) {
    int *fwd = malloc(((size_t)g->n_nodes + 1) * sizeof *fwd), *pos = malloc(((size_t)g->n_nodes + 1) * sizeof *pos);
    int *cross = NULL;
    block *b = NULL;
    int nf = 0, nb = 0;
    vp_status s = fwd && pos ? VP_OK : vp_fail(err, VP_ERR_NOMEM, "out of memory");
    for (int i = 0; !s && i < g->n_nodes; i++) {
        pos[i] = -1;
        const vp_node *n = &g->nodes[i];
        if (!n->folded && n->phase == VP_PHASE_FORWARD) {
            pos[i] = nf;
            fwd[nf++] = i;
        }
    }
    if (!s) {
        cross = calloc((size_t)nf + 1, sizeof *cross);
        b = calloc((size_t)nf + 1, sizeof *b);
        if (!cross || !b) s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
    }
    /* cross[i]: forward activations live across the boundary after position i */
    for (int i = 0; !s && i < nf; i++) {
        const vp_node *n = &g->nodes[fwd[i]];
        for (int k = 0; k < n->n_outputs; k++) {
            int v = n->outputs[k];
            if (v < 0) continue;
            int last = i;
            const vp_value *val = &g->values[v];
            for (int c = 0; c < val->n_consumers; c++) {
                const vp_node *cn = &g->nodes[val->consumers[c]];
                int cp = pos[val->consumers[c]];
                if (cp < 0 && cn->phase == VP_PHASE_LOSS) cp = nf; /* the loss reads past the end */
                if (cp > last) last = cp;
            }
            for (int j = i; j < last && j < nf; j++) cross[j]++;
        }
    }
    int start = 0;
    for (int i = 0; !s && i < nf; i++) {
        int cut = -1;
        if (cross[i] == 1 && i + 1 < nf) {
            const vp_node *n = &g->nodes[fwd[i]];
            for (int k = 0; k < n->n_outputs; k++) {
                int v = n->outputs[k];
                if (v < 0) continue;
                for (int c = 0; c < g->values[v].n_consumers; c++)
                    if (pos[g->values[v].consumers[c]] > i) cut = v;
            }
        }
        if (cut < 0 && i + 1 < nf) continue;
        block *bk = &b[nb++];
        bk->first = start;
        bk->last = i;
        bk->cut = cut;
        start = i + 1;
    }
    /* a block's signature: its ops, output sizes and which outputs the backward reads;
     * identical blocks (transformer layers) get their menu once and share it */
    for (int k = 0; !s && k < nb; k++) {
        block *bk = &b[k];
        uint64_t h = 1469598103934665603ull;
        for (int i = bk->first; i <= bk->last; i++) {
            const vp_node *n = &g->nodes[fwd[i]];
            for (const char *p = n->op_type; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
            for (int k2 = 0; k2 < n->n_inputs; k2++) /* the shapes read decide the cost */
                if (n->inputs[k2] >= 0) h = (h ^ (uint64_t)value_bytes(g, n->inputs[k2])) * 1099511628211ull;
            for (int o = 0; o < n->n_outputs; o++) {
                int v = n->outputs[o];
                if (v < 0) continue;
                h = (h ^ (uint64_t)value_bytes(g, v) ^ ((uint64_t)(v == bk->cut) << 62) ^
                     ((uint64_t)needed_by_backward(g, v) << 63)) * 1099511628211ull;
            }
        }
        h = (h ^ (uint64_t)(bk->last - bk->first)) * 1099511628211ull;
        bk->signature = h;
        bk->cut_bytes = bk->cut >= 0 ? value_bytes(g, bk->cut) : 0;
        int same = -1;
        for (int j = k - 1; j >= 0 && same < 0; j--)
            if (b[j].signature == h) same = j;
        if (same >= 0) {
            bk->all_bytes = b[same].all_bytes;
            bk->sel_bytes = b[same].sel_bytes;
            bk->fwd_seconds = b[same].fwd_seconds;
            bk->cheap_seconds = b[same].cheap_seconds;
            continue;
        }
        for (int i = bk->first; i <= bk->last; i++) {
            const vp_node *n = &g->nodes[fwd[i]];
            vp_node_cost c = vp_cost_node(g, n);
            double t = vp_cost_seconds(&c, dev, 0);
            bk->fwd_seconds += t;
            if (!is_expensive(n->op_type)) bk->cheap_seconds += t;
            for (int o = 0; o < n->n_outputs; o++) {
                int v = n->outputs[o];
                if (v < 0 || v == bk->cut || !needed_by_backward(g, v)) continue;
                bk->all_bytes += value_bytes(g, v);
                if (is_expensive(n->op_type)) bk->sel_bytes += value_bytes(g, v);
            }
        }
    }
    free(pos);
    free(cross);
    if (s) {
        free(fwd);
        free(b);
        return s;
    }
    *fwd_out = fwd;
    *n_fwd_out = nf;
    *blocks_out = b;
    *n_blocks_out = nb;
    return VP_OK;
}

/* Options of a block: keep all its activations, keep the expensive ones, keep none (its
 * output, the cut, still kept), or D: part of a longer segment recomputed from the last
 * kept cut, its own cut dropped too. */
enum { OPT_ALL = 0, OPT_SELECTIVE, OPT_NONE, N_OPTS, OPT_DROPPED = N_OPTS };
static const char opt_letter[N_OPTS + 1] = {'A', 'S', 'N', 'D'};

static int64_t opt_kept(const block *b, int o) { return o == OPT_ALL ? b->all_bytes : o == OPT_SELECTIVE ? b->sel_bytes : 0; }
static double opt_time(const block *b, int o) { return o == OPT_ALL ? 0 : o == OPT_SELECTIVE ? b->cheap_seconds : b->fwd_seconds; }

/* keep[] from one option per block; sqrtn passes choice NULL (all N, then drops cuts). */
static void keep_from_choice(const vp_graph *g, const int *fwd, const block *b, int nb, const int *choice, char *keep) {
    for (int v = 0; v < g->n_values; v++) keep[v] = 1;
    for (int k = 0; k < nb; k++) {
        int o = choice ? choice[k] : OPT_NONE;
        if (o == OPT_ALL) continue;
        if (o == OPT_DROPPED && b[k].cut >= 0) keep[b[k].cut] = 0;
        for (int i = b[k].first; i <= b[k].last; i++) {
            const vp_node *n = &g->nodes[fwd[i]];
            if (o == OPT_SELECTIVE && is_expensive(n->op_type)) continue;
            for (int j = 0; j < n->n_outputs; j++)
                if (n->outputs[j] >= 0 && n->outputs[j] != b[k].cut) keep[n->outputs[j]] = 0;
        }
    }
}

/* Minimises recompute time subject to  sum(kept) + max(working set) <= room  over
 * a partition of the chain into segments (Rotor-style): a one-block segment keeps its
 * cut and takes option A, S or N; a longer one keeps only its last cut and recomputes
 * all of it from the previous kept cut, its working set being all its activations.
 * For each candidate bound W on the working set, a knapsack over the chain in Q memory
 * units; the best over W wins. */
typedef struct seg_pick {
    short from;  /* segment start block */
    char opt;    /* option of a one-block segment; OPT_DROPPED for longer ones */
} seg_pick;

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static int dp_choose(const block *b, int nb, int64_t room, int *choice) {
    enum { Q = 512, MAX_W = 32 };
    if (room < 0 || nb <= 0 || nb > 30000) return 0;
    int64_t total = 0;
    for (int k = 0; k < nb; k++) total += b[k].all_bytes + b[k].cut_bytes;
    double unit = (double)(total > 0 ? total : 1) / Q;
    /* candidate working-set bounds: quantiles of the one-block and segment values */
    int64_t *cand = malloc(((size_t)nb * 12 + 16) * sizeof *cand); /* 3 per block + one per doubling length */
    int nc = 0;
    for (int k = 0; k < nb; k++) {
        cand[nc++] = b[k].all_bytes;
        cand[nc++] = b[k].all_bytes - b[k].sel_bytes;
        cand[nc++] = 0;
        int64_t w = b[k].all_bytes;
        for (int e = k + 1, len = 2; e < nb && len <= 64; e++, len *= 2) {
            w = 0;
            for (int i = k; i <= e; i++) w += b[i].all_bytes + (i < e ? b[i].cut_bytes : 0);
            cand[nc++] = w;
        }
    }
    qsort(cand, (size_t)nc, sizeof *cand, cmp_i64);
    int64_t ws[MAX_W];
    int nw = 0;
    for (int q = 0; q < MAX_W && nc; q++) {
        int64_t w = cand[(size_t)((double)q / (MAX_W - 1) * (nc - 1))];
        if (!nw || ws[nw - 1] != w) ws[nw++] = w;
    }
    free(cand);
    size_t cells = (size_t)(nb + 1) * (Q + 1);
    double *dp = malloc(cells * sizeof *dp);
    seg_pick *pick = malloc(cells * sizeof *pick);
    int *tmp = malloc((size_t)nb * sizeof *tmp);
    double best = INFINITY;
    int found = 0;
    for (int wi = 0; dp && pick && tmp && wi < nw; wi++) {
        int64_t W = ws[wi];
        if (room - W < 0) continue;
        int cap = (double)(room - W) / unit > Q ? Q : (int)((double)(room - W) / unit);
        for (size_t i = 0; i < cells; i++) dp[i] = INFINITY;
        dp[0] = 0;
        for (int j = 0; j < nb; j++) { /* segments starting at block j */
            for (int m = 0; m <= cap; m++) {
                double base = dp[(size_t)j * (Q + 1) + m];
                if (base == INFINITY) continue;
                for (int o = 0; o < N_OPTS; o++) {
                    int64_t kept = opt_kept(&b[j], o);
                    if (b[j].all_bytes - kept > W) continue;
                    int m2 = m + (int)ceil((double)(kept + b[j].cut_bytes) / unit);
                    if (m2 > cap) continue;
                    size_t at = (size_t)(j + 1) * (Q + 1) + m2;
                    double t = base + opt_time(&b[j], o);
                    if (t < dp[at]) {
                        dp[at] = t;
                        pick[at] = (seg_pick){(short)j, (char)o};
                    }
                }
                int64_t wseg = b[j].all_bytes;
                double tseg = b[j].fwd_seconds;
                for (int e = j + 1; e < nb; e++) {
                    wseg += b[e - 1].cut_bytes + b[e].all_bytes;
                    tseg += b[e].fwd_seconds;
                    if (wseg > W) break;
                    int m2 = m + (int)ceil((double)b[e].cut_bytes / unit);
                    if (m2 > cap) continue;
                    size_t at = (size_t)(e + 1) * (Q + 1) + m2;
                    if (base + tseg < dp[at]) {
                        dp[at] = base + tseg;
                        pick[at] = (seg_pick){(short)j, OPT_DROPPED};
                    }
                }
            }
        }
        int bm = -1;
        for (int m = 0; m <= cap; m++) {
            double v = dp[(size_t)nb * (Q + 1) + m];
            if (v < INFINITY && (bm < 0 || v < dp[(size_t)nb * (Q + 1) + bm])) bm = m;
        }
        if (bm < 0 || dp[(size_t)nb * (Q + 1) + bm] >= best) continue;
        /* walk back through the segments, recovering each one's memory from its pick */
        int k = nb, m = bm, ok = 1;
        while (k > 0 && ok) {
            seg_pick sp = pick[(size_t)k * (Q + 1) + m];
            int j = sp.from;
            if (sp.opt == OPT_DROPPED) {
                for (int i = j; i < k - 1; i++) tmp[i] = OPT_DROPPED;
                tmp[k - 1] = OPT_NONE;
                m -= (int)ceil((double)b[k - 1].cut_bytes / unit);
            } else {
                tmp[j] = sp.opt;
                m -= (int)ceil((double)(opt_kept(&b[j], sp.opt) + b[j].cut_bytes) / unit);
            }
            ok = m >= 0 && j < k;
            k = j;
        }
        if (!ok) continue;
        best = dp[(size_t)nb * (Q + 1) + bm];
        memcpy(choice, tmp, (size_t)nb * sizeof *choice);
        found = 1;
    }
    free(dp);
    free(pick);
    free(tmp);
    return found;
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
static void sqrtn_keep(const vp_graph *g, const int *fwd, const block *b, int nb, char *keep) {
    int stride = (int)ceil(sqrt((double)(nb > 0 ? nb : 1)));
    keep_from_choice(g, fwd, b, nb, NULL, keep);
    for (int k = 0; k < nb; k++)
        if (b[k].cut >= 0 && (k + 1) % stride != 0) keep[b[k].cut] = 0;
}

/* The chain to choose from, shared by the strategies' candidate generators. */
typedef struct chain {
    const int *fwd;
    const block *b;
    int nb;
} chain;

/* dp's candidates: recompute every block from its cut; dp's choices under the budget,
 * tightened by what the real arena exceeded; sqrtn's segments unless a dp choice that
 * fits recomputes less (so dp is never worse than sqrtn); and when nothing fits, dp's
 * choices pushed down to the smallest peak it finds, to report it. */
static vp_status dp_candidates(vp_graph *g, const vp_training *t, const vp_device_profile *dev, int fused, int64_t budget,
                               const chain *ch, char *keep, int *choice, candidate *cands, int *nc, int max,
                               vp_remat_result *r, vp_error *err) {
    const block *b = ch->b;
    int nb = ch->nb;
    for (int k = 0; k < nb; k++) choice[k] = OPT_NONE;
    keep_from_choice(g, ch->fwd, b, nb, choice, keep);
    vp_status s = add_candidate(cands, nc, max, g, t, dev, fused, keep, NULL, budget, "N", err);
    int64_t max_all = 0, cuts = 0;
    for (int k = 0; k < nb; k++) {
        if (b[k].all_bytes > max_all) max_all = b[k].all_bytes;
        cuts += b[k].cut_bytes;
    }
    /* calibrated so the estimate of the all-N plan is its real arena */
    int64_t base = s ? 0 : cands[0].p.arena_bytes - max_all - cuts;
    int64_t target = budget > 0 ? budget : INT64_MAX / 4;
    for (int it = 0; !s && it < 8 && *nc < max; it++) {
        r->iterations++;
        if (!dp_choose(b, nb, target - base, choice)) break;
        keep_from_choice(g, ch->fwd, b, nb, choice, keep);
        char letters[256];
        size_t used = 0;
        for (int k = 0; k < nb && used + 3 < sizeof letters; k++)
            used += (size_t)snprintf(letters + used, sizeof letters - used, "%c", opt_letter[choice[k]]);
        letters[used] = 0;
        s = add_candidate(cands, nc, max, g, t, dev, fused, keep, NULL, budget, letters, err);
        if (s || !budget || cands[*nc - 1].fits) break;
        target -= cands[*nc - 1].p.arena_bytes - budget; /* the estimate was optimistic by that much */
    }
    double one_forward = 0, best_rt = INFINITY;
    for (int k = 0; k < nb; k++) one_forward += b[k].fwd_seconds;
    for (int i = 0; i < *nc; i++)
        if (cands[i].fits && cands[i].recompute_seconds < best_rt) best_rt = cands[i].recompute_seconds;
    if (!s && !(best_rt < one_forward)) {
        sqrtn_keep(g, ch->fwd, b, nb, keep);
        s = add_candidate(cands, nc, max, g, t, dev, fused, keep, NULL, budget, "sqrtn", err);
    }
    int any_fits = 0;
    for (int i = 0; i < *nc; i++) any_fits |= cands[i].fits;
    for (int it = 0; !s && !any_fits && it < 4 && *nc < max; it++) {
        int small = pick_candidate(cands, *nc);
        int64_t goal = cands[small].p.arena_bytes - 1;
        if (!dp_choose(b, nb, goal - base, choice)) break;
        keep_from_choice(g, ch->fwd, b, nb, choice, keep);
        s = add_candidate(cands, nc, max, g, t, dev, fused, keep, NULL, budget, "dp (smallest)", err);
        if (s || cands[*nc - 1].p.arena_bytes >= cands[small].p.arena_bytes) break;
    }
    return s;
}

static double seconds_since(const struct timespec *t0) {
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0->tv_nsec);
}

/* ilp's candidates: Checkmate's MILP on the un-checkpointed plan p0, its schedule
 * planned on the real arena; when that lands over the budget (the model ignores
 * fragmentation), solved again under a budget lowered by the excess. */
static vp_status ilp_candidates(vp_graph *g, const vp_training *t, const vp_device_profile *dev, int fused, int64_t budget,
                                const vp_plan *p0, double limit, candidate *cands, int *nc, int max, vp_remat_result *r,
                                vp_error *err) {
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int64_t model_budget = budget;
    vp_status s = VP_OK;
    for (int it = 0; !s && it < 4 && *nc < max; it++) {
        double left = limit - seconds_since(&t0);
        if (it > 0 && left < 0.5) break;
        vp_remat_schedule rs;
        vp_ilp_stats st;
        s = vp_remat_ilp_solve(g, p0, t, dev, model_budget, left, &rs, &st, err);
        r->iterations++;
        double spent = r->ilp.solve_seconds + st.solve_seconds;
        r->ilp = st;
        r->ilp.solve_seconds = spent;
        if (s || (st.status != VP_ILP_OPTIMAL && st.status != VP_ILP_FEASIBLE)) break;
        s = add_candidate(cands, nc, max, g, t, dev, fused, NULL, &rs, budget, vp_ilp_status_name(st.status), err);
        vp_remat_schedule_free(&rs);
        if (s || cands[*nc - 1].fits) break;
        model_budget -= cands[*nc - 1].p.arena_bytes - budget;
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
                   "--remat ilp: GLPK found no schedule within %.0f s (%d binaries, %d rows); raise --ilp-time-limit "
                   "or use --remat dp", limit, st->n_binary, st->n_rows);
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
    int *fwd = NULL, nf = 0, nb = 0;
    block *b = NULL;
    s = find_blocks(g, dev, &fwd, &nf, &b, &nb, err);
    if (s) return s;
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
    enum { MAX_CANDS = 12 };
    candidate cands[MAX_CANDS];
    int nc = 0;
    chain ch = {fwd, b, nb};
    /* the un-checkpointed plan: kept when it fits; ilp's memory model is read off it */
    vp_status full = VP_ERR_INVALID;
    if (!s && kind != VP_REMAT_SQRTN && (budget > 0 || kind == VP_REMAT_ILP)) full = vp_plan_build(p, g, t, dev, fused, err);
    if (!s && kind == VP_REMAT_SQRTN) {
        sqrtn_keep(g, fwd, b, nb, keep);
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
        snprintf(r->choice, sizeof r->choice, "%s", cands[w].choice);
        cands[w].g = NULL;
    }
    for (int i = 0; i < nc; i++)
        if (cands[i].g) {
            vp_plan_free(&cands[i].p);
            vp_graph_free(cands[i].g);
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
    free(fwd);
    free(b);
    return s;
}
