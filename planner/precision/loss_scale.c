/* Dynamic loss scaling: see loss_scale.h. */
#include "precision/loss_scale.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/graph_build.h"
#include "train/training.h"

static vp_status nomem(vp_error *err) { return vp_fail(err, VP_ERR_NOMEM, "out of memory building loss scaling"); }

/* One node with one output, built and inferred. */
static vp_status node1(vp_graph *g, const char *op, const char *domain, const char *name, int n_in, const int *in,
                       vp_phase phase, int *out, vp_error *err) {
    int id = vp_build_node(g, op, domain, name, n_in, in, 1, phase, 0);
    if (id < 0) return nomem(err);
    return vp_build_finish(g, id, out, err);
}

static int scalar_f32(vp_graph *g, const char *stem, double v) {
    float f = (float)v;
    return vp_build_const(g, stem, VP_F32, 0, NULL, &f);
}

static int scalar_i32(vp_graph *g, const char *stem, int64_t v) {
    int32_t i = (int32_t)v;
    return vp_build_const(g, stem, VP_I32, 0, NULL, &i);
}

vp_status vp_loss_scale_begin(vp_graph *g, const vp_loss_scale_opts *o, const vp_training *t, vp_loss_scale *ls,
                              vp_error *err) {
    memset(ls, 0, sizeof *ls);
    double init = o && o->init > 0 ? o->init : 65536.0;
    ls->init = init;
    ls->clean_steps0 = o && o->clean_steps > 0 ? o->clean_steps : 0;
    ls->scale = vp_build_state(g, "loss_scale", VP_F32, 0, NULL);
    ls->count = vp_build_state(g, "loss_scale_clean_steps", VP_I32, 0, NULL);
    float *data = malloc(sizeof *data);
    if (ls->scale < 0 || ls->count < 0 || !data) return free(data), nomem(err);
    *data = (float)init; /* the state's starting contents */
    vp_value_set_data(g, ls->scale, data, VP_DATA_HEAP);
    if (o && o->clean_steps > 0) { /* a resumed run's count; otherwise zero, like all state */
        int32_t *c = malloc(sizeof *c);
        if (!c) return nomem(err);
        *c = (int32_t)o->clean_steps;
        vp_value_set_data(g, ls->count, c, VP_DATA_HEAP);
    }
    int in[2] = {t->loss, ls->scale};
    if (g->values[t->loss].dtype != VP_F32)
        return vp_fail(err, VP_ERR_UNSUPPORTED, "loss scaling: the loss '%s' is %s, not float32", g->values[t->loss].name,
                       vp_dtype_name(g->values[t->loss].dtype));
    return node1(g, "Mul", "", "loss_scale/scaled_loss", 2, in, VP_PHASE_LOSS, &ls->scaled_loss, err);
}

vp_status vp_loss_scale_unscale(vp_graph *g, vp_training *t, vp_loss_scale *ls, vp_error *err) {
    int *grads = malloc(((size_t)t->n_params + 1) * sizeof *grads), n = 0;
    if (!grads) return nomem(err);
    for (int i = 0; i < t->n_params; i++)
        if (t->grads[i] >= 0) grads[n++] = t->grads[i];
    vp_status s = n ? VP_OK : vp_fail(err, VP_ERR_INVALID, "loss scaling: no gradient to check");
    if (!s) s = node1(g, "IsAllFinite", "com.microsoft", "loss_scale/all_finite", n, grads, VP_PHASE_BACKWARD, &ls->finite, err);
    free(grads);
    /* 1/S where the step is kept, 0 where it is skipped (the update then skips itself
     * and reads no gradient): the unscaled gradients, and so the updates, come after
     * the check */
    int inv = -1, zero = scalar_f32(g, "loss_scale/zero_f32", 0.0);
    if (!s && zero < 0) s = nomem(err);
    if (!s) s = node1(g, "Reciprocal", "", "loss_scale/inverse", 1, &ls->scale, VP_PHASE_BACKWARD, &inv, err);
    if (!s) s = node1(g, "Where", "", "loss_scale/inverse_if_finite", 3, (int[]){ls->finite, inv, zero}, VP_PHASE_BACKWARD, &inv, err);
    for (int i = 0; !s && i < t->n_params; i++) {
        if (t->grads[i] < 0) continue;
        char name[600];
        snprintf(name, sizeof name, "%s/unscaled", g->values[t->grads[i]].name);
        int in[2] = {t->grads[i], inv};
        s = node1(g, "Mul", "", name, 2, in, VP_PHASE_BACKWARD, &t->grads[i], err);
    }
    ls->n_opt_carry0 = t->n_carry;
    return s;
}

vp_status vp_loss_scale_finish(vp_graph *g, const vp_loss_scale_opts *o, vp_training *t, vp_loss_scale *ls,
                               vp_error *err) {
    vp_status s = VP_OK;
    /* the skip is the updates' own: each reads the check as its do_update input
     * (planner/train/optimizer.c) and leaves what it carries as it was, in place */
    double growth = o && o->growth > 0 ? o->growth : 2.0, backoff = o && o->backoff > 0 ? o->backoff : 0.5;
    int64_t interval = o && o->interval > 0 ? o->interval : 2000;
    int one = scalar_i32(g, "loss_scale/one", 1), zero = scalar_i32(g, "loss_scale/zero", 0);
    int every = scalar_i32(g, "loss_scale/interval", interval);
    int kg = scalar_f32(g, "loss_scale/growth", growth), kb = scalar_f32(g, "loss_scale/backoff", backoff);
    if (!s && (one < 0 || zero < 0 || every < 0 || kg < 0 || kb < 0)) s = nomem(err);
    int next = -1, grow = -1, count_ok = -1, grown = -1, scale_ok = -1, backed = -1;
    const vp_phase P = VP_PHASE_OPTIMIZER;
    if (!s) s = node1(g, "Add", "", "loss_scale/next_count", 2, (int[]){ls->count, one}, P, &next, err);
    if (!s) s = node1(g, "Equal", "", "loss_scale/grow", 2, (int[]){next, every}, P, &grow, err);
    if (!s) s = node1(g, "Where", "", "loss_scale/count_if_finite", 3, (int[]){grow, zero, next}, P, &count_ok, err);
    if (!s) s = node1(g, "Where", "", "loss_scale/new_count", 3, (int[]){ls->finite, count_ok, zero}, P, &ls->new_count, err);
    if (!s) s = node1(g, "Mul", "", "loss_scale/grown", 2, (int[]){ls->scale, kg}, P, &grown, err);
    if (!s) s = node1(g, "Where", "", "loss_scale/scale_if_finite", 3, (int[]){grow, grown, ls->scale}, P, &scale_ok, err);
    if (!s) s = node1(g, "Mul", "", "loss_scale/backed_off", 2, (int[]){ls->scale, kb}, P, &backed, err);
    if (!s) s = node1(g, "Where", "", "loss_scale/new_scale", 3, (int[]){ls->finite, scale_ok, backed}, P, &ls->new_scale, err);
    if (!s) s = vp_training_add_carry(t, ls->scale, ls->new_scale, err);
    if (!s) s = vp_training_add_carry(t, ls->count, ls->new_count, err);
    return s;
}

vp_status vp_loss_scale_resume(const char *scale, const char *count, vp_loss_scale_opts *o, vp_error *err) {
    if (scale) {
        char *end;
        errno = 0;
        double v = strtod(scale, &end);
        int e;
        /* a power of two keeps scaling exact; float32 holds it (the scale is float32) */
        if (end == scale || *end || errno || !(v > 0) || !isfinite(v) || frexp(v, &e) != 0.5 || e < -125 || e > 128)
            return vp_fail(err, VP_ERR_INVALID, "metadata '%s': '%s' is not a power of two a float32 holds",
                           VP_LOSS_SCALE_KEY, scale);
        o->init = v;
    }
    if (count) {
        char *end;
        errno = 0;
        long long c = strtoll(count, &end, 10);
        int64_t interval = o->interval > 0 ? o->interval : 2000;
        if (end == count || *end || errno || c < 0 || c >= interval)
            return vp_fail(err, VP_ERR_INVALID, "metadata '%s': '%s' is not a count of clean steps in [0, %lld)",
                           VP_LOSS_SCALE_COUNT_KEY, count, (long long)interval);
        o->clean_steps = c;
    }
    return VP_OK;
}

void vp_loss_scale_format(double scale, int64_t count, char *scale_buf, char *count_buf) {
    snprintf(scale_buf, 32, "%a", scale);
    snprintf(count_buf, 32, "%lld", (long long)count);
}
