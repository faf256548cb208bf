/* The joint search (search.h): every combination of the free knobs, each run through the
 * pipeline (pipeline/pipeline.h) to a verified plan once as it is and, when that is over
 * the budget, again with checkpointing by dp under it. */
#include "search/search.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ir/op_registry.h"
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

static int better(const vp_candidate *a, const vp_candidate *b) {
    if (a->step_seconds != b->step_seconds) return a->step_seconds < b->step_seconds;
    return a->arena_bytes < b->arena_bytes;
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
    int n_builds = 0, build_of[VP_SEARCH_MAX];
    kept_plan kept = {.build = -1};
    if (!builds) {
        vp_pipeline_result_free(&loaded);
        return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    }
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
                    vp_error e;
                    build *bd = f ? &builds[n_builds - 1] : &builds[n_builds];
                    if (!f) { /* the first of its knob set: the step built */
                        memset(bd, 0, sizeof *bd);
                        bd->status = build_step(bd, c, base, loaded.g, &e);
                        if (bd->status) snprintf(bd->note, sizeof bd->note, "%.190s", e.msg);
                        n_builds++;
                    }
                    build_of[out->n++] = (int)(bd - builds);
                    c->status = bd->status;
                    if (c->status) snprintf(c->note, sizeof c->note, "%s", bd->note);
                    else if ((c->status = plan_one(c, bd, base, budget, VP_REMAT_NONE, &e)))
                        snprintf(c->note, sizeof c->note, "%.190s", e.msg);
                    if (!c->status && c->fits && (out->best < 0 || better(c, &out->c[out->best]))) {
                        out->best = (int)(c - out->c);
                        if (sp->keep_winner) keep_plan(&kept, builds, build_of[out->best]);
                    }
                    /* a step none of whose candidates will be checkpointed, and that holds
                     * no kept plan, is done with: freed now (tensor-parallel steps hold
                     * their split weights) */
                    int bi = (int)(bd - builds), needed = kept.build == bi;
                    for (int i = 0; f == n_fused - 1 && i < out->n && !needed; i++)
                        needed = build_of[i] == bi && !out->c[i].status && !out->c[i].fits;
                    if (f == n_fused - 1 && !needed) vp_pipeline_result_free(&bd->r);
                }
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
    for (int k = 0; k < n_over; k++) {
        vp_candidate *c = &out->c[order[k]];
        const vp_candidate *best = out->best >= 0 ? &out->c[out->best] : NULL;
        if (!sp->exhaustive && best && c->step_seconds > best->step_seconds) {
            c->pruned = 1;
            snprintf(c->note, sizeof c->note, "not checkpointed: unchecked it already takes %.4g ms, more than %.4g ms",
                     1e3 * c->step_seconds, 1e3 * best->step_seconds);
        } else if (!sp->exhaustive && c->resident_bytes > budget) {
            c->pruned = 1;
            snprintf(c->note, sizeof c->note, "not checkpointed: its parameters, state, inputs and constants alone "
                     "take %lld bytes", (long long)c->resident_bytes);
        } else {
            checkpoint(c, &builds[build_of[order[k]]], base, budget);
            out->n_dp++;
        }
        out->n_pruned += c->pruned;
        if (!c->status && c->fits && (out->best < 0 || better(c, &out->c[out->best]))) {
            out->best = order[k];
            if (sp->keep_winner) keep_plan(&kept, builds, build_of[out->best]); /* its dp plan: it fits */
        }
    }
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
