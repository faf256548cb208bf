/* Cast fusion: see cast_fuse.h.
 *
 * Which producers: what the CUDA backend can store converted (runtime/cuda/
 * cuda_store_cast.c); the CPU backend converts any op's output on store
 * (runtime/cpu/cpu_store_cast.c), so the device decides.  Views never: they compute
 * nothing, their output is their input's bytes.
 * What a fusion saves: the producer's own output (the float32 activation a low Cast
 * read, or the low result a float32 Cast widened), a buffer and a pass over it. */
#include "precision/cast_fuse.h"

#include <stdlib.h>
#include <string.h>

#include "ir/infer.h"
#include "memory/plan.h"
#include "memory/workspace.h"
#include "train/training.h"

typedef struct op_name {
    const char *domain, *op;
} op_name;

/* Narrowing (float32 to the low dtype) leaves no room in the output for the float32
 * result, so only kernels that round on store take it: these.  Widening (a low result
 * cast to float32) fuses into any op that computes: the backends run its kernel
 * unchanged and widen on store (the CUDA backend in the output's own bytes). */
static const op_name narrowing[] = {
    {"", "LayerNormalization"},
};

static int fusable(const vp_graph *g, const vp_node *p, vp_dtype from, vp_dtype to) {
    if (!p->op || p->folded || !strcmp(p->op_type, "Cast") || vp_node_is_view(g, p)) return 0;
    if (vp_dtype_size(to) > vp_dtype_size(from)) return 1;
    for (size_t i = 0; i < sizeof narrowing / sizeof *narrowing; i++)
        if (!strcmp(narrowing[i].domain, p->domain) && !strcmp(narrowing[i].op, p->op_type)) return 1;
    return 0;
}

static int is_float_cast(const vp_graph *g, const vp_node *c) {
    if (strcmp(c->op_type, "Cast") || c->domain[0] || c->n_inputs != 1 || c->n_outputs != 1) return 0;
    if (c->inputs[0] < 0 || c->outputs[0] < 0) return 0;
    vp_dtype a = g->values[c->inputs[0]].dtype, b = g->values[c->outputs[0]].dtype;
    int lo_a = a == VP_F16 || a == VP_BF16, lo_b = b == VP_F16 || b == VP_BF16;
    return (a == VP_F32 && lo_b) || (lo_a && b == VP_F32);
}

/* The step names values that keep their dtype beyond their readers: the loss, the
 * gradients it reports, what is carried to the next step. */
static int named_by_step(const vp_training *t, int v) {
    if (!t) return 0;
    if (v == t->loss) return 1;
    for (int i = 0; i < t->n_params; i++)
        if (t->params[i] == v || (t->grads && t->grads[i] == v)) return 1;
    for (int i = 0; i < t->n_carry; i++)
        if (t->carry[i].from == v || t->carry[i].to == v) return 1;
    return 0;
}

/* Output index of value v in node p, -1 when p does not write it. */
static int output_index(const vp_node *p, int v) {
    for (int k = 0; k < p->n_outputs; k++)
        if (p->outputs[k] == v) return k;
    return -1;
}

static vp_status add_triple(vp_graph *g, int node, int k, vp_dtype from, vp_dtype to, vp_error *err) {
    vp_node *p = &g->nodes[node];
    const int64_t *old = NULL;
    int m = vp_attr_ints(p, VP_CAST_ATTR, &old);
    if (m < 0) m = 0;
    int64_t *t = malloc(((size_t)m + 3) * sizeof *t);
    if (!t) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    if (m) memcpy(t, old, (size_t)m * sizeof *t);
    t[m] = k;
    t[m + 1] = from;
    t[m + 2] = to;
    /* replace the attribute: drop the old one first */
    for (int a = 0; a < p->n_attrs; a++)
        if (!strcmp(p->attrs[a].name, VP_CAST_ATTR)) {
            free(p->attrs[a].name);
            free(p->attrs[a].ints);
            p->attrs[a] = p->attrs[--p->n_attrs];
            break;
        }
    vp_status s = vp_node_add_attr_ints(g, node, VP_CAST_ATTR, t, m + 3);
    free(t);
    return s;
}

typedef struct candidate {
    int cast, producer, k;
} candidate;

/* The schedules a fusion is weighed in: the device's, with updates fused, last, or
 * both when the step's plan is not known yet. */
typedef struct target {
    const vp_device_profile *dev;
    int n, fused[2];
} target;

/* The Casts that may fold into their producers, narrowing or widening ones. */
static int collect(const vp_graph *g, const vp_training *t, int widening, candidate *out) {
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const vp_node *c = &g->nodes[i];
        if (!is_float_cast(g, c)) continue;
        int x = c->inputs[0];
        const vp_value *xv = &g->values[x];
        vp_dtype from = xv->dtype, to = g->values[c->outputs[0]].dtype;
        if ((vp_dtype_size(to) > vp_dtype_size(from)) != widening || xv->producer < 0 || xv->n_consumers != 1) continue;
        if (xv->flags & (VP_VAL_INPUT | VP_VAL_OUTPUT | VP_VAL_INITIALIZER | VP_VAL_CONST | VP_VAL_STATE | VP_VAL_PARAM |
                         VP_VAL_HOST) ||
            named_by_step(t, x))
            continue;
        const vp_node *p = &g->nodes[xv->producer];
        int k = output_index(p, x);
        if (k < 0 || !fusable(g, p, from, to) || vp_node_cast_output(p, k, NULL, NULL)) continue;
        out[n++] = (candidate){i, xv->producer, k};
    }
    return n;
}

/* One schedule the planner may make and the bytes live at each of its steps, a GPU's
 * product workspaces included (a late product beside every gradient). */
typedef struct step_live {
    vp_plan p;
    int *pos;      /* per node: its step, -1 when not scheduled */
    int64_t *live; /* per step */
} step_live;

static vp_status step_live_make(vp_graph *g, const vp_training *t, const vp_device_profile *dev, int fused_update,
                                step_live *sl, vp_error *err) {
    memset(sl, 0, sizeof *sl);
    sl->p.g = g;
    sl->p.device = *dev;
    sl->p.fused_update = fused_update;
    vp_status s = vp_schedule(&sl->p, t, err);
    if (!s) s = vp_liveness(&sl->p, t, err);
    if (s) return s;
    sl->pos = malloc(((size_t)g->n_nodes + 1) * sizeof *sl->pos);
    sl->live = calloc((size_t)sl->p.n_steps + 1, sizeof *sl->live);
    if (!sl->pos || !sl->live) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    for (int i = 0; i < g->n_nodes; i++) sl->pos[i] = -1;
    for (int i = 0; i < sl->p.n_steps; i++) sl->pos[sl->p.steps[i]] = i;
    for (int b = 0; b < sl->p.n_buffers; b++) {
        const vp_buffer *bu = &sl->p.buffers[b];
        if (bu->alias_of >= 0 || bu->cat == VP_CAT_HOST) continue;
        for (int st = bu->first; st <= bu->last && st < sl->p.n_steps; st++)
            if (st >= 0) sl->live[st] += bu->size;
    }
    for (int st = 0; st < sl->p.n_steps; st++)
        sl->live[st] += vp_workspace_bytes(g, &g->nodes[sl->p.steps[st]], &sl->p.device);
    return VP_OK;
}

static void step_live_free(step_live *sl) {
    free(sl->pos);
    free(sl->live);
    vp_plan_free(&sl->p);
}

/* Whether fusing cast c keeps the live bytes from its producer to it at or under their
 * maximum there in this schedule; with commit, records the fusion's bytes. */
static int step_live_fits(step_live *sl, const vp_graph *g, const candidate *c, int commit) {
    int x = g->nodes[c->cast].inputs[0], y = g->nodes[c->cast].outputs[0];
    const vp_plan *p = &sl->p;
    int bx = p->buffer_of[x], by = p->buffer_of[y], sp = sl->pos[c->producer], sc = sl->pos[c->cast];
    int ok = bx >= 0 && by >= 0 && sp >= 0 && sc > sp && p->buffers[bx].alias_of < 0 && p->buffers[by].alias_of < 0;
    if (!ok) return 0;
    int64_t grow = p->buffers[by].size - p->buffers[bx].size, local = sl->live[sc];
    for (int st = sp; st < sc; st++)
        if (sl->live[st] > local) local = sl->live[st];
    for (int st = sp; ok && st < sc; st++) ok = sl->live[st] + grow <= local;
    if (ok && commit) {
        for (int st = sp; st < sc; st++) sl->live[st] += grow;
        sl->live[sc] -= p->buffers[bx].size;
    }
    return ok;
}

/* Widening moves the float32 buffer's start from the Cast back to the producer and
 * drops the low buffer: between the two, live bytes grow by the difference.  Keeps a
 * widening only where, in each schedule the planner may make (target: updates fused or
 * run last, which order the backward differently), the live bytes from the producer to the
 * Cast stay at or under their own maximum there, which the Cast's step (low and float32
 * both live) often is: a local rule, so that a schedule that moves the peak
 * (checkpointing under a budget) finds no fused range above what the unfused step had
 * there.  Greedy in step order; the rest are cleared (cast = -1).  A heuristic for the
 * arena, never a question of correctness. */
static vp_status keep_harmless(vp_graph *g, const vp_training *t, const target *tg, candidate *c, int n, vp_error *err) {
    step_live sl[2];
    memset(sl, 0, sizeof sl);
    vp_status s = VP_OK;
    for (int f = 0; !s && f < tg->n; f++) s = step_live_make(g, t, tg->dev, tg->fused[f], &sl[f], err);
    for (int i = 0; !s && i < n; i++) {
        int ok = 1;
        for (int f = 0; ok && f < tg->n; f++) ok = step_live_fits(&sl[f], g, &c[i], 0);
        for (int f = 0; ok && f < tg->n; f++) step_live_fits(&sl[f], g, &c[i], 1);
        if (!ok) c[i].cast = -1;
    }
    for (int f = 0; f < 2; f++) step_live_free(&sl[f]);
    return s;
}

/* Folds each candidate Cast (cast >= 0) into its producer and re-infers the producers. */
static vp_status apply(vp_graph *g, const candidate *c, int n, vp_cast_fuse_counts *counts, vp_error *err) {
    int *keep = malloc(((size_t)g->n_nodes + 1) * sizeof *keep), n_keep = 0;
    char *drop = calloc((size_t)g->n_nodes + 1, 1), *touched = calloc((size_t)g->n_nodes + 1, 1);
    vp_status s = keep && drop && touched ? VP_OK : vp_fail(err, VP_ERR_NOMEM, "out of memory");
    int fused = 0;
    for (int i = 0; !s && i < n; i++) {
        if (c[i].cast < 0) continue;
        const vp_node *cn = &g->nodes[c[i].cast];
        int x = cn->inputs[0], y = cn->outputs[0];
        vp_dtype from = g->values[x].dtype, to = g->values[y].dtype;
        counts->bytes += vp_value_numel(&g->values[x]) * (int64_t)vp_dtype_size(from);
        s = add_triple(g, c[i].producer, c[i].k, from, to, err);
        if (!s) g->nodes[c[i].producer].outputs[c[i].k] = y;
        drop[c[i].cast] = touched[c[i].producer] = 1;
        fused++;
    }
    for (int i = 0; i < g->n_nodes && !s; i++)
        if (!drop[i]) keep[n_keep++] = i;
    if (!s && fused) s = vp_graph_keep_nodes(g, keep, n_keep, err);
    /* the producers' ids after keep_nodes: their positions in keep */
    for (int j = 0; !s && fused && j < n_keep; j++)
        if (touched[keep[j]]) s = vp_infer_node(g, j, 0, NULL, err);
    counts->fused += fused;
    free(keep);
    free(drop);
    free(touched);
    return s;
}

/* The most bytes live at one step of each schedule of the target. */
static vp_status peaks_of(vp_graph *g, const vp_training *t, const target *tg, int64_t peak[2], vp_error *err) {
    for (int f = 0; f < tg->n; f++) {
        step_live sl;
        vp_status s = step_live_make(g, t, tg->dev, tg->fused[f], &sl, err);
        peak[f] = 0;
        for (int i = 0; !s && i < sl.p.n_steps; i++)
            if (sl.live[i] > peak[f]) peak[f] = sl.live[i];
        step_live_free(&sl);
        if (s) return s;
    }
    return VP_OK;
}

static target target_of(const vp_cast_fuse_opts *o) {
    if (o && o->dev) return (target){o->dev, 1, {!!o->fused_update, 0}};
    return (target){vp_device_find("h100"), 2, {1, 0}};
}

vp_status vp_cast_fuse_peaks(vp_graph *g, const vp_training *t, const vp_cast_fuse_opts *o, int64_t peak[2],
                             vp_error *err) {
    target tg = target_of(o);
    peak[0] = peak[1] = 0;
    vp_status s = vp_graph_link(g, err);
    return s ? s : peaks_of(g, t, &tg, peak, err);
}

vp_status vp_cast_fuse(vp_graph *g, const vp_training *t, const vp_cast_fuse_opts *o, vp_cast_fuse_counts *counts,
                       vp_error *err) {
    memset(counts, 0, sizeof *counts);
    target tg = target_of(o);
    vp_status s = vp_graph_link(g, err);
    if (s) return s;
    for (int i = 0; i < g->n_nodes; i++) counts->casts_before += is_float_cast(g, &g->nodes[i]);
    candidate *c = malloc(((size_t)g->n_nodes + 1) * sizeof *c);
    if (!c) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    /* narrowing first: always a saving where it stands (the float32 result is never stored) */
    int n = collect(g, t, 0, c);
    s = apply(g, c, n, counts, err);
    if (!s && !(o && o->narrow_only)) {
        n = collect(g, t, 1, c);
        if (n) s = keep_harmless(g, t, &tg, c, n, err);
        if (!s) s = apply(g, c, n, counts, err);
    }
    free(c);
    return s;
}
