/* The joint search (search.h): every combination of the free knobs, each run through the
 * pipeline (pipeline/pipeline.h) to a verified plan once as it is and, when that is over
 * the budget, again with checkpointing by dp under it. */
#include "search/search.h"

#include <assert.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ir/op_registry.h"
#include "search/task_pool.h"
#include "remat/cost.h"

void vp_search_knobs(const vp_candidate *c, char *buf, size_t len) {
    snprintf(buf, len, "tp %d, %s, %s%s, %s", c->tp, vp_precision_name(c->precision), c->fused ? "fused update" : "separate update",
             c->offload ? " on the host" : "", c->remat == VP_REMAT_NONE ? "no recompute" : "dp checkpointing");
}

void vp_search_apply(const vp_candidate *c, vp_train_spec *spec, int *fused) {
    spec->precision = c->precision;
    spec->tp.n = c->tp;
    spec->tp.rank = 0;
    spec->offload = c->offload;
    *fused = c->fused;
}

/* Seconds the planned step spends in all-reduces, in casts and on the host (offload's
 * copies and update), by the cost model. */
static void split_seconds(const vp_plan *p, const vp_device_profile *dev, vp_candidate *c) {
    for (int i = 0; i < p->n_steps; i++) {
        const vp_node *n = &p->g->nodes[p->steps[i]];
        vp_node_cost k = vp_cost_node(p->g, n);
        int comm = n->op && (n->op->flags & VP_OP_COLLECTIVE), host = k.host_link_bytes > 0 || k.on_host;
        int cast = !host && !strcmp(n->op_type, "Cast");
        if (!comm && !cast && !host) continue;
        double s = vp_cost_seconds(&k, dev, 0);
        if (comm) c->comm_seconds += s;
        else if (host) c->host_seconds += s;
        else c->cast_seconds += s;
    }
}

/* One knob set's training step, built once through the pipeline (pipeline/pipeline.h)
 * and planned for every candidate that shares it: fused and separate updates differ in
 * the plan only. */
typedef struct build {
    int tp, offload;
    vp_precision precision;
    vp_status status;
    char note[200];
    int over;           /* a candidate of it is over the budget: to be checkpointed */
    vp_pipeline_result r;
} build;

/* The knob set's step from a copy of the model as loaded and inferred (loaded once for
 * all: the knobs act from the training build on; the copy borrows its data). */
static vp_status build_step(build *b, const vp_candidate *c, const vp_pipeline_opts *base, const vp_graph *inferred,
                            vp_error *err) {
    vp_train_spec spec = *base->spec;
    vp_pipeline_opts o = *base;
    vp_search_apply(c, &spec, &o.fused_update);
    o.spec = &spec;
    o.until = VP_PIPELINE_TRAIN;
    o.model = NULL;
    o.source = NULL;
    o.dims = NULL; /* bound already */
    o.n_dims = 0;
    o.inferred = 1;
    memset(&b->r, 0, sizeof b->r);
    if (!(o.graph = vp_graph_clone(inferred))) return vp_fail(err, VP_ERR_NOMEM, "out of memory copying the model");
    return vp_pipeline_run(&o, &b->r, err);
}

/* The bytes of every parameter's gradient, each storage once.  With the updates run
 * after the backward (or after fp16's check of every gradient), all of them are live at
 * once when the first runs, whatever checkpointing recomputes: with the resident bytes,
 * a floor that no plan of the step gets under. */
static int64_t all_gradients_bytes(const vp_pipeline_result *r) {
    const vp_plan *p = &r->p;
    const vp_graph *pg = p->g;
    char *seen = calloc((size_t)p->n_buffers + 1, 1);
    int64_t bytes = 0;
    for (int i = 0; seen && i < r->t.n_params; i++) {
        int v = r->t.grads ? r->t.grads[i] : -1;
        if (v < 0) continue;
        if (pg != r->g) v = vp_graph_find_value(pg, r->g->values[v].name);
        int b = v >= 0 ? p->buffer_of[v] : -1;
        while (b >= 0 && p->buffers[b].alias_of >= 0) b = p->buffers[b].alias_of;
        if (b < 0 || seen[b] || p->buffers[b].cat == VP_CAT_HOST) continue;
        seen[b] = 1;
        bytes += p->buffers[b].size;
    }
    free(seen);
    return bytes;
}

/* Plans candidate c on its built step with remat kind under budget (0: none): the
 * pipeline's plan stage, verified; fills its figures. */
static vp_status plan_one(vp_candidate *c, build *b, const vp_pipeline_opts *base, int64_t budget, vp_remat_kind kind,
                          vp_error *err) {
    vp_pipeline_opts o = *base;
    /* dp runs on a candidate planned as it is just before, over the budget: that arena
     * (the same plan, the same options) is handed on rather than planned again */
    vp_remat_opts ro = {.unchecked_arena = kind == VP_REMAT_DP ? c->arena_bytes : 0};
    o.fused_update = c->fused;
    o.budget = kind == VP_REMAT_NONE ? 0 : budget;
    o.remat = kind;
    o.remat_opts = &ro;
    o.dump_after = NULL;
    vp_status s = vp_pipeline_plan(&o, &b->r, err);
    if (!s) {
        const vp_plan *p = &b->r.p;
        const vp_remat_result *rr = &b->r.remat;
        c->remat = kind;
        c->arena_bytes = p->arena_bytes;
        c->step_seconds = rr->step_seconds;
        c->recompute_seconds = rr->recompute_seconds;
        c->n_recompute = rr->n_recompute;
        c->comm_seconds = c->cast_seconds = c->host_seconds = 0;
        c->host_bytes = p->host_bytes;
        split_seconds(p, base->device, c);
        c->fits = p->arena_bytes <= budget;
        c->resident_bytes = p->category_bytes[VP_CAT_PARAMETERS] + p->category_bytes[VP_CAT_OPTIMIZER_STATE] +
                            p->category_bytes[VP_CAT_INPUTS] + p->category_bytes[VP_CAT_CONSTANTS];
        /* the updates wait for the whole backward when run after it, or for fp16's check
         * of every gradient (loss scaling) */
        c->floor_bytes = c->resident_bytes + (c->fused && !b->r.t.loss_scaled ? 0 : all_gradients_bytes(&b->r));
    }
    return s;
}

/* Checkpoints candidate c, over the budget as it is; dp's plan is kept when it fits or
 * at least comes closer. */
static void checkpoint(vp_candidate *c, build *b, const vp_pipeline_opts *base, int64_t budget) {
    vp_error err;
    vp_candidate dp = *c;
    vp_status s = plan_one(&dp, b, base, budget, VP_REMAT_DP, &err);
    if (!s && (dp.fits || dp.arena_bytes < c->arena_bytes)) *c = dp;
}


/* The plan of the best candidate so far, taken out of its build's result before the
 * build plans the next candidate (which would free it): the winner's is handed back
 * whole, so the caller need not plan it again. */
typedef struct kept_plan {
    int build;             /* -1: none */
    vp_graph *planned;     /* the build's graph, or a checkpointed copy borrowing its data */
    vp_plan p;
    vp_remat_result remat;
    vp_verify_report verify;
} kept_plan;

static void kept_free(kept_plan *k, const build *builds) {
    vp_plan_free(&k->p);
    if (k->build >= 0 && k->planned != builds[k->build].r.g) vp_graph_free(k->planned);
    memset(k, 0, sizeof *k);
    k->build = -1;
}

static void keep_plan(kept_plan *k, build *builds, int bi) {
    kept_free(k, builds);
    vp_pipeline_result *r = &builds[bi].r;
    *k = (kept_plan){bi, r->planned, r->p, r->remat, r->verify};
    r->planned = NULL; /* the build plans its next candidate afresh */
    memset(&r->p, 0, sizeof r->p);
}

/* The winner's build with its kept plan, as one pipeline result (out->winner). */
static vp_status hand_back(vp_search_result *out, kept_plan *k, build *builds, vp_error *err) {
    vp_pipeline_result *r = &builds[k->build].r;
    out->winner = malloc(sizeof *out->winner);
    if (!out->winner) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    vp_plan_free(&r->p);
    if (r->planned && r->planned != r->g) vp_graph_free(r->planned);
    r->planned = k->planned;
    r->p = k->p;
    r->remat = k->remat;
    r->verify = k->verify;
    *out->winner = *r;
    memset(r, 0, sizeof *r);
    memset(k, 0, sizeof *k);
    k->build = -1;
    return VP_OK;
}

void vp_search_result_free(vp_search_result *r) {
    if (r->winner) vp_pipeline_result_free(r->winner);
    free(r->winner);
    vp_graph_free(r->model); /* after the winner, which borrows from it */
    r->winner = NULL;
    r->model = NULL;
}

/* A total order on the candidates of one result (a and b point into it): the least
 * estimated time, then the smallest arena, then the first in the table, so the winner
 * does not depend on the order in which candidates are weighed. */
static int better(const vp_candidate *a, const vp_candidate *b) {
    if (a->step_seconds != b->step_seconds) return a->step_seconds < b->step_seconds;
    if (a->arena_bytes != b->arena_bytes) return a->arena_bytes < b->arena_bytes;
    return a < b;
}

static double vp_search_clock(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void explain(vp_search_result *r, int64_t budget) {
    char k[128], k2[128];
    int fits = 0, fastest = -1, runner = -1;
    for (int i = 0; i < r->n; i++) {
        const vp_candidate *c = &r->c[i];
        if (c->status) continue;
        fits += c->fits;
        if (fastest < 0 || better(c, &r->c[fastest])) fastest = i;
        if (c->fits && i != r->best && (runner < 0 || better(c, &r->c[runner]))) runner = i;
    }
    if (r->best < 0) {
        snprintf(r->why, sizeof r->why, "none of the %d candidates fits %lld bytes", r->n, (long long)budget);
        return;
    }
    const vp_candidate *w = &r->c[r->best];
    vp_search_knobs(w, k, sizeof k);
    size_t used = (size_t)snprintf(r->why, sizeof r->why, "%s won: the least estimated step time (%.4g ms) of the %d of %d candidates that fit",
                                   k, 1e3 * w->step_seconds, fits, r->n);
    if (fastest >= 0 && fastest != r->best && used < sizeof r->why) {
        vp_search_knobs(&r->c[fastest], k2, sizeof k2);
        used += (size_t)snprintf(r->why + used, sizeof r->why - used, "; the fastest of all (%s, %.4g ms) needs %lld bytes",
                                 k2, 1e3 * r->c[fastest].step_seconds, (long long)r->c[fastest].arena_bytes);
    }
    if (runner >= 0 && used < sizeof r->why) {
        vp_search_knobs(&r->c[runner], k2, sizeof k2);
        snprintf(r->why + used, sizeof r->why - used, "; the runner-up (%s) takes %.4g ms", k2, 1e3 * r->c[runner].step_seconds);
    }
}

/* Work the search's threads share: the candidates, their steps (build_of: candidate ->
 * build), and per task the plans kept for a later turn (taken out of the build before
 * it plans another candidate). */
typedef struct batch {
    vp_search_result *out;
    build *builds;
    const int *build_of;
    const vp_pipeline_opts *base;
    int64_t budget;
    const vp_graph *inferred; /* the model the steps are built from */
    int keep;                 /* keep the winner's plan */
    int n, cand[VP_SEARCH_MAX]; /* checkpoint_task's candidates */
    kept_plan *stash; /* VP_SEARCH_MAX: build_task's per build, then checkpoint_task's per candidate */
    pthread_mutex_t lock;     /* build_task: guards win and win_cand */
    kept_plan win;            /* the plan of the best that fits among the builds done */
    int win_cand;
} batch;

/* A step done with: its graph and plans freed unless a candidate of it is to be
 * checkpointed (tensor-parallel steps hold their split weights). */
static void build_done(build *bd) {
    if (!bd->over) vp_pipeline_result_free(&bd->r);
}

/* Knob set bi's step built and its candidates planned as they are, in table order; the
 * build's best fitting candidate's plan stashed. */
static void build_task(void *ctx, int bi) {
    batch *bb = ctx;
    build *bd = &bb->builds[bi];
    int best = -1, built = 0, over = 0;
    for (int i = 0; i < bb->out->n; i++) {
        if (bb->build_of[i] != bi) continue;
        vp_candidate *c = &bb->out->c[i];
        vp_error e;
        if (!built++) { /* the first of its knob set: the step built */
            bd->status = build_step(bd, c, bb->base, bb->inferred, &e);
            if (bd->status) snprintf(bd->note, sizeof bd->note, "%.190s", e.msg);
        }
        c->status = bd->status;
        if (c->status) snprintf(c->note, sizeof c->note, "%s", bd->note);
        else if ((c->status = plan_one(c, bd, bb->base, bb->budget, VP_REMAT_NONE, &e)))
            snprintf(c->note, sizeof c->note, "%.190s", e.msg);
        if (!c->status && c->fits && (best < 0 || better(c, &bb->out->c[best]))) {
            best = i;
            if (bb->keep) keep_plan(&bb->stash[bi], bb->builds, bi);
        }
        over |= !c->status && !c->fits;
    }
    bd->over = over;
    /* its best against the best of the builds done so far (a total order: the same
     * winner whatever order the builds finish in); the loser's plan, and its step if
     * it is done with, freed */
    kept_plan drop = bb->stash[bi];
    memset(&bb->stash[bi], 0, sizeof bb->stash[bi]);
    bb->stash[bi].build = -1;
    pthread_mutex_lock(&bb->lock);
    if (drop.build >= 0 && (bb->win_cand < 0 || better(&bb->out->c[best], &bb->out->c[bb->win_cand]))) {
        kept_plan t = bb->win;
        bb->win = drop;
        bb->win_cand = best;
        drop = t;
    }
    int mine = bb->win.build == bi; /* once another takes its place, that one's task frees it */
    pthread_mutex_unlock(&bb->lock);
    int dropped = drop.build;
    kept_free(&drop, bb->builds);
    if (dropped >= 0 && dropped != bi) build_done(&bb->builds[dropped]);
    if (!mine) build_done(bd);
}

/* Candidate cand[task] checkpointed on its build; its dp plan stashed when it fits. */
static void checkpoint_task(void *ctx, int task) {
    batch *cb = ctx;
    int i = cb->cand[task];
    checkpoint(&cb->out->c[i], &cb->builds[cb->build_of[i]], cb->base, cb->budget);
    if (cb->keep && !cb->out->c[i].status && cb->out->c[i].fits) keep_plan(&cb->stash[i], cb->builds, cb->build_of[i]);
}

vp_status vp_search_run(const vp_search_space *sp, const vp_pipeline_opts *base, int64_t budget, vp_search_result *out,
                        vp_error *err) {
    memset(out, 0, sizeof *out);
    out->best = -1;
    if (budget <= 0) return vp_fail(err, VP_ERR_USAGE, "the joint search needs a budget");
    if (!base->spec || !base->device || base->graph)
        return vp_fail(err, VP_ERR_USAGE, "internal: the joint search needs a spec, a device and a model it can load again");
    const vp_train_spec *spec = base->spec;
    const vp_device_profile *dev = base->device;
    int tps[16], n_tp = 0;
    if (sp->tp_fixed) tps[n_tp++] = spec->tp.n > 1 ? spec->tp.n : 1;
    else
        for (int d = 1; d <= (sp->max_tp > 1 ? sp->max_tp : 1) && n_tp < 16; d *= 2) tps[n_tp++] = d;
    vp_precision precs[3];
    int n_prec = 0;
    if (sp->precision_fixed) precs[n_prec++] = spec->precision;
    else
        for (int k = VP_PRECISION_FP32; k <= VP_PRECISION_FP16; k++) {
            const char *list = dev->precisions ? dev->precisions : "fp32";
            if (strstr(list, vp_precision_name((vp_precision)k))) precs[n_prec++] = (vp_precision)k;
        }
    int fuseds[2] = {1, 0}, n_fused = sp->fused_fixed ? 1 : 2;
    if (sp->fused_fixed) fuseds[0] = sp->fused;
    int offs[2] = {spec->offload, 1}, n_off = sp->offload_free ? 2 : 1;
    if (sp->offload_free) offs[0] = 0;
    double t0 = vp_search_clock();
    /* the model loaded and inferred once: every knob set's step is built from a copy */
    vp_pipeline_result loaded;
    vp_pipeline_opts lo = *base;
    lo.until = VP_PIPELINE_INFER;
    lo.spec = NULL;
    lo.dump_after = NULL;
    vp_status ls = vp_pipeline_run(&lo, &loaded, err);
    if (ls) {
        vp_pipeline_result_free(&loaded);
        vp_error_prefix(err, "no candidate could be built: ");
        return ls;
    }
    /* every knob set as it is: cheap, and a lower bound on its time checkpointed */
    build *builds = calloc(VP_SEARCH_MAX, sizeof *builds); /* each knob set's step, freed below */
    kept_plan *stash = calloc(VP_SEARCH_MAX, sizeof *stash); /* plans waiting for their turn */
    int n_builds = 0, build_of[VP_SEARCH_MAX];
    kept_plan kept = {.build = -1};
    if (!builds || !stash) {
        free(builds);
        free(stash);
        vp_pipeline_result_free(&loaded);
        return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    }
    int threads = out->threads = vp_search_threads();
    for (int a = 0; a < n_tp; a++)
        for (int b = 0; b < n_prec; b++)
            for (int o = 0; o < n_off; o++)
                for (int f = 0; f < n_fused && out->n < VP_SEARCH_MAX; f++) {
                    vp_candidate *c = &out->c[out->n];
                    memset(c, 0, sizeof *c);
                    c->tp = tps[a];
                    c->precision = precs[b];
                    c->fused = fuseds[f];
                    c->offload = offs[o];
                    if (!f) n_builds++; /* the first of its knob set: a step of its own */
                    build_of[out->n++] = n_builds - 1;
                }
    /* each knob set's step built and planned as it is, side by side */
    batch bb = {.out = out, .builds = builds, .build_of = build_of, .base = base, .budget = budget,
                .inferred = loaded.g, .keep = sp->keep_winner, .stash = stash, .win = {.build = -1}, .win_cand = -1};
    pthread_mutex_init(&bb.lock, NULL);
    for (int i = 0; i < n_builds; i++) bb.stash[i].build = -1;
    vp_run_tasks(n_builds, threads, build_task, &bb);
    pthread_mutex_destroy(&bb.lock);
    for (int i = 0; i < out->n; i++) {
        vp_candidate *c = &out->c[i];
        if (!c->status && c->fits && (out->best < 0 || better(c, &out->c[out->best]))) out->best = i;
    }
    assert(!sp->keep_winner || bb.win_cand == out->best);
    kept = bb.win;
    /* then those over the budget checkpointed, fastest first, unless they cannot win */
    int order[VP_SEARCH_MAX], n_over = 0;
    for (int i = 0; i < out->n; i++)
        if (!out->c[i].status && !out->c[i].fits) order[n_over++] = i;
    for (int i = 1; i < n_over; i++) /* insertion sort by the un-checkpointed time */
        for (int j = i; j > 0 && better(&out->c[order[j]], &out->c[order[j - 1]]); j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    /* Decided in that order, as if one at a time: a candidate is pruned when the best
     * known before it (in that order) already beats it, else its dp result is taken.
     * The dp runs themselves go ahead in batches, one candidate per thread, each of
     * another build (a build plans one candidate at a time; a result that fits takes
     * its plan out of the build, waiting for its turn); a result that its turn finds
     * pruned is put back as it was before dp, so the table, the counts and the winner
     * are the same on any number of threads (only some planning is wasted). */
    char ran[VP_SEARCH_MAX] = {0};
    vp_candidate before[VP_SEARCH_MAX];
    batch cb = {.out = out, .builds = builds, .build_of = build_of, .base = base, .budget = budget,
                           .keep = sp->keep_winner, .stash = stash}; /* phase 1 left every entry empty */
    for (int i = 0; i < VP_SEARCH_MAX; i++) cb.stash[i].build = -1;
    for (int next = 0; next < n_over;) {
        vp_candidate *c = &out->c[order[next]];
        const vp_candidate *best = out->best >= 0 ? &out->c[out->best] : NULL;
        const vp_candidate *was = ran[next] ? &before[next] : c;
        if (!sp->exhaustive && best && was->step_seconds > best->step_seconds) {
            *c = *was;
            kept_free(&cb.stash[order[next]], builds);
            c->pruned = 1;
            snprintf(c->note, sizeof c->note, "not checkpointed: unchecked it already takes %.4g ms, more than %.4g ms",
                     1e3 * c->step_seconds, 1e3 * best->step_seconds);
        } else if (!sp->exhaustive && c->floor_bytes > budget) {
            c->pruned = 1;
            if (c->floor_bytes > c->resident_bytes)
                snprintf(c->note, sizeof c->note, "not checkpointed: its parameters, state, inputs and constants, and "
                         "every gradient at once (updates after the backward or its check), take %lld bytes", (long long)c->floor_bytes);
            else
                snprintf(c->note, sizeof c->note, "not checkpointed: its parameters, state, inputs and constants alone "
                         "take %lld bytes", (long long)c->resident_bytes);
        } else if (ran[next]) {
            out->n_dp++;
            if (!c->status && c->fits && (!best || better(c, best))) {
                out->best = order[next];
                kept_free(&kept, builds);
                kept = cb.stash[order[next]]; /* its dp plan: it fits */
                memset(&cb.stash[order[next]], 0, sizeof cb.stash[order[next]]);
                cb.stash[order[next]].build = -1;
            }
            kept_free(&cb.stash[order[next]], builds);
        } else { /* its turn, not run yet: a batch from here on */
            cb.n = 0;
            for (int k = next; k < n_over && cb.n < threads; k++) {
                const vp_candidate *ck = &out->c[order[k]];
                if (ran[k] || (!sp->exhaustive && ((best && ck->step_seconds > best->step_seconds) ||
                                                   ck->floor_bytes > budget)))
                    continue;
                int busy = 0;
                for (int j = 0; j < cb.n && !busy; j++) busy = build_of[cb.cand[j]] == build_of[order[k]];
                if (busy) continue;
                before[k] = *ck;
                ran[k] = 1;
                cb.cand[cb.n++] = order[k];
            }
            assert(cb.n > 0 && cb.cand[0] == order[next]); /* the first left: nothing clashes with it */
            vp_run_tasks(cb.n, threads, checkpoint_task, &cb);
            continue; /* decide this one again, now with its result */
        }
        out->n_pruned += c->pruned;
        next++;
    }

    for (int i = 0; i < VP_SEARCH_MAX; i++) kept_free(&cb.stash[i], builds);
    free(stash);
    vp_status hs = kept.build >= 0 ? hand_back(out, &kept, builds, err) : VP_OK;
    kept_free(&kept, builds);
    for (int i = 0; i < n_builds; i++) vp_pipeline_result_free(&builds[i].r);
    free(builds);
    /* the winner's step borrows the loaded model's data: it goes with the winner */
    if (out->winner) out->model = loaded.g;
    else vp_graph_free(loaded.g);
    loaded.g = NULL;
    vp_pipeline_result_free(&loaded);
    out->seconds = vp_search_clock() - t0;
    int built = 0;
    for (int i = 0; i < out->n; i++) built += !out->c[i].status;
    if (!built) return vp_fail(err, out->c[0].status, "no candidate could be built: %s", out->c[0].note);
    if (hs) return hs;
    explain(out, budget);
    return VP_OK;
}
