/* The joint search (search.h): every combination of the free knobs, each run through the
 * pipeline (pipeline/pipeline.h) to a verified plan once as it is and, when that is over
 * the budget, again with checkpointing by dp under it. */
#include "search/search.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

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

/* Plans candidate c with remat kind under budget (0: none); fills its figures. */
static vp_status plan_one(vp_candidate *c, const vp_pipeline_opts *base, int64_t budget, vp_remat_kind kind, vp_error *err) {
    vp_train_spec spec = *base->spec;
    vp_pipeline_opts o = *base;
    vp_search_apply(c, &spec, &o.fused_update);
    o.spec = &spec;
    o.until = VP_PIPELINE_PLAN;
    o.budget = kind == VP_REMAT_NONE ? 0 : budget;
    o.remat = kind;
    o.remat_opts = NULL;
    vp_pipeline_result r;
    vp_status s = vp_pipeline_run(&o, &r, err);
    if (!s) {
        c->remat = kind;
        c->arena_bytes = r.p.arena_bytes;
        c->step_seconds = r.remat.step_seconds;
        c->recompute_seconds = r.remat.recompute_seconds;
        c->n_recompute = r.remat.n_recompute;
        c->comm_seconds = c->cast_seconds = c->host_seconds = 0;
        c->host_bytes = r.p.host_bytes;
        split_seconds(&r.p, base->device, c);
        c->fits = r.p.arena_bytes <= budget;
    }
    vp_pipeline_result_free(&r);
    return s;
}

/* Weighs one knob set: as it is, then checkpointed when that is over the budget. */
static void weigh(vp_candidate *c, const vp_pipeline_opts *base, int64_t budget) {
    vp_error err;
    c->status = plan_one(c, base, budget, VP_REMAT_NONE, &err);
    if (!c->status && !c->fits) {
        vp_candidate dp = *c;
        vp_status s = plan_one(&dp, base, budget, VP_REMAT_DP, &err);
        /* dp's plan is kept when it fits or at least comes closer */
        if (!s && (dp.fits || dp.arena_bytes < c->arena_bytes)) *c = dp;
    }
    if (c->status) snprintf(c->note, sizeof c->note, "%.190s", err.msg);
}

static int better(const vp_candidate *a, const vp_candidate *b) {
    if (a->step_seconds != b->step_seconds) return a->step_seconds < b->step_seconds;
    return a->arena_bytes < b->arena_bytes;
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
    for (int a = 0; a < n_tp; a++)
        for (int b = 0; b < n_prec; b++)
            for (int o = 0; o < n_off; o++)
                for (int f = 0; f < n_fused && out->n < VP_SEARCH_MAX; f++) {
                    vp_candidate *c = &out->c[out->n++];
                    memset(c, 0, sizeof *c);
                    c->tp = tps[a];
                    c->precision = precs[b];
                    c->fused = fuseds[f];
                    c->offload = offs[o];
                    weigh(c, base, budget);
                    if (!c->status && c->fits && (out->best < 0 || better(c, &out->c[out->best])))
                        out->best = (int)(c - out->c);
                }
    int built = 0;
    for (int i = 0; i < out->n; i++) built += !out->c[i].status;
    if (!built) return vp_fail(err, out->c[0].status, "no candidate could be built: %s", out->c[0].note);
    explain(out, budget);
    return VP_OK;
}
