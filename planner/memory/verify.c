#include "memory/verify.h"

#include <stdlib.h>
#include <string.h>

#include "ir/op_registry.h"

typedef struct group {
    int root;
    int64_t offset, size;
    int first, last; /* -1 first: never touched */
} group;

typedef struct ev {
    int step;
    int kind; /* 0 start, 1 end (after the step) */
    int g;
} ev;

static int by_step(const void *a, const void *b) {
    const ev *x = a, *y = b;
    if (x->step != y->step) return x->step - y->step;
    return y->kind - x->kind; /* ends of the previous step before starts */
}

/* A value written into a group's storage, and the steps that read it (directly or
 * through a view of it). */
typedef struct version {
    int g, buffer;
    int written, last_read; /* -1 written: before the first step */
} version;

static int by_group_write(const void *a, const void *b) {
    const version *x = a, *y = b;
    if (x->g != y->g) return x->g - y->g;
    return x->written - y->written;
}

static int root_of(const vp_plan *p, int b) {
    int hops = 0;
    while (p->buffers[b].alias_of >= 0 && hops++ <= p->n_buffers) b = p->buffers[b].alias_of;
    return hops > p->n_buffers ? -1 : b;
}

static const char *name_of(const vp_plan *p, int b) { return p->g->values[p->buffers[b].value].name; }

/* A step's scratch memory (memory/workspace.h): no node reads or writes it as a tensor. */
static int is_workspace(const vp_plan *p, int b) {
    return p->buffers[b].cat == VP_CAT_WORKSPACE || (p->g->values[p->buffers[b].value].flags & VP_VAL_WORKSPACE);
}

/* Step st's workspace, when it has one, is live during st and no other step. */
static vp_status note_workspace(const vp_plan *p, int st, const vp_node *n, const int *gid, group *gr, vp_error *err) {
    int b = p->workspace ? p->workspace[st] : -1;
    if (b < 0) return VP_OK;
    if (b >= p->n_buffers || !is_workspace(p, b))
        return vp_fail(err, VP_ERR_INVALID, "step %d ('%s') names buffer %d as its workspace, which is not one", st, n->name, b);
    group *G = &gr[gid[b]];
    if (G->first >= 0)
        return vp_fail(err, VP_ERR_INVALID, "the workspace '%s' serves steps %d and %d", name_of(p, b), G->first, st);
    G->first = G->last = st;
    return VP_OK;
}

/* Step st writes output k of node n into its buffer.  Into storage that holds one of
 * its inputs only as a view (output 0 over input 0: the same bytes, no new version) or
 * as an op that reads every element before writing it (VP_OP_INPLACE, the input as
 * large as the output), or as an update of the parameter or state it reads; anything
 * but a view writes a new version of the group's storage. */
static vp_status note_write(const vp_plan *p, int st, const vp_node *n, int k, const int *gid, int *written, version *vers,
                            int *nv, vp_error *err) {
    const vp_graph *g = p->g;
    int b = p->buffer_of[n->outputs[k]];
    int in0 = n->n_inputs > 0 && n->inputs[0] >= 0 ? p->buffer_of[n->inputs[0]] : -1;
    if (k == 0 && in0 >= 0 && gid[in0] == gid[b] && written[in0] && vp_node_is_view(g, n)) {
        written[b] = written[in0];
        return VP_OK;
    }
    for (int j = 0; j < n->n_inputs; j++) {
        int ib = n->inputs[j] >= 0 ? p->buffer_of[n->inputs[j]] : -1;
        if (ib < 0 || gid[ib] != gid[b]) continue;
        /* an update writes the parameter or state it reads (a carried value) */
        const version *old = written[ib] ? &vers[written[ib] - 1] : NULL;
        int carried = old && old->written < 0 && (g->values[p->buffers[ib].value].flags & (VP_VAL_PARAM | VP_VAL_STATE));
        /* in place: only over inputs 0 and 1, which in-place kernels read before writing */
        int ok = carried || (k == 0 && j < 2 && n->op && (n->op->flags & VP_OP_INPLACE) &&
                             p->buffers[ib].bytes == p->buffers[b].bytes);
        if (!ok)
            return vp_fail(err, VP_ERR_INVALID, "step %d ('%s', %s) writes '%s' over its input '%s', which the op does not allow",
                           st, n->name, n->op_type, name_of(p, b), name_of(p, ib));
    }
    vers[*nv] = (version){gid[b], b, st, st};
    written[b] = ++*nv;
    return VP_OK;
}

/* Within a group, each version must be read for the last time no later than the step
 * that writes the next one (at that step only the writer reads it, element before
 * element).  Storage that exists before the step and is not a parameter or state (an
 * input, a constant) is read again at the next step, so nothing may write over it. */
static vp_status check_versions(const vp_plan *p, version *vers, int nv, vp_error *err) {
    const vp_graph *g = p->g;
    qsort(vers, (size_t)nv, sizeof *vers, by_group_write);
    for (int i = 1; i < nv; i++) {
        const version *a = &vers[i - 1], *b = &vers[i];
        if (a->g != b->g) continue;
        const vp_value *av = &g->values[p->buffers[a->buffer].value];
        if (a->written < 0 && !(av->flags & (VP_VAL_PARAM | VP_VAL_STATE)))
            return vp_fail(err, VP_ERR_INVALID, "step %d writes '%s' over '%s', which the next step reads again", b->written,
                           name_of(p, b->buffer), name_of(p, a->buffer));
        if (a->written == b->written || a->last_read > b->written)
            return vp_fail(err, VP_ERR_INVALID, "step %d writes '%s' over '%s', which step %d still reads", b->written,
                           name_of(p, b->buffer), name_of(p, a->buffer), a->last_read);
    }
    return VP_OK;
}

vp_status vp_plan_verify(const vp_plan *p, vp_verify_report *rep, vp_error *err) {
    const vp_graph *g = p->g;
    int nb = p->n_buffers, last_step = p->n_steps ? p->n_steps - 1 : 0;
    memset(rep, 0, sizeof *rep);
    rep->n_buffers = nb;
    rep->n_steps = p->n_steps;
    group *gr = calloc((size_t)nb + 1, sizeof *gr);
    /* written[b]: 0 before a step writes b, else 1 + the version b holds */
    int *gid = malloc(((size_t)nb + 1) * sizeof *gid), *written = calloc((size_t)nb + 1, sizeof *written);
    int *active = malloc(((size_t)nb + 1) * sizeof *active);
    ev *evs = malloc(((size_t)nb * 2 + 1) * sizeof *evs);
    version *vers = malloc(((size_t)nb + 1) * sizeof *vers);
    int nv = 0;
    vp_status s = VP_OK;
    if (!gr || !gid || !written || !active || !evs || !vers) {
        s = vp_fail(err, VP_ERR_NOMEM, "out of memory verifying");
        goto done;
    }
    if (p->n_steps <= 0) {
        s = vp_fail(err, VP_ERR_INVALID, "the plan has no steps");
        goto done;
    }
    int ng = 0;
    for (int b = 0; b < nb; b++) {
        const vp_buffer *buf = &p->buffers[b];
        int r = root_of(p, b);
        if (r < 0) {
            s = vp_fail(err, VP_ERR_INVALID, "buffer '%s': its alias chain has a cycle", name_of(p, b));
            goto done;
        }
        int64_t limit = buf->cat == VP_CAT_HOST ? p->host_bytes : p->arena_bytes;
        /* no sum that could overflow: an offset near 2^63 is input like any other */
        if (buf->bytes < 0 || buf->size < buf->bytes || buf->offset < 0 || buf->size > limit ||
            buf->offset > limit - buf->size) {
            s = vp_fail(err, VP_ERR_INVALID, "buffer '%s' (%lld bytes at offset %lld) does not fit the %lld-byte %s",
                        name_of(p, b), (long long)buf->bytes, (long long)buf->offset, (long long)limit,
                        buf->cat == VP_CAT_HOST ? "host block" : "arena");
            goto done;
        }
        if (r != b && (is_workspace(p, b) || is_workspace(p, r))) {
            s = vp_fail(err, VP_ERR_INVALID, "buffer '%s' shares storage with '%s', and one is a workspace", name_of(p, b),
                        name_of(p, r));
            goto done;
        }
        if (r != b && (buf->offset != p->buffers[r].offset || buf->bytes > p->buffers[r].size)) {
            s = vp_fail(err, VP_ERR_INVALID, "buffer '%s' aliases '%s' but has another offset or a larger size",
                        name_of(p, b), name_of(p, r));
            goto done;
        }
        gid[b] = -1;
    }
    for (int b = 0; b < nb; b++) {
        int r = root_of(p, b);
        if (gid[r] < 0) {
            gid[r] = ng;
            /* the host block checked in the same sweep, past the arena's addresses */
            int64_t base = p->buffers[r].cat == VP_CAT_HOST ? p->arena_bytes : 0;
            gr[ng] = (group){r, base + p->buffers[r].offset, p->buffers[r].size, -1, -1};
            ng++;
        }
        gid[b] = gid[r];
    }
    rep->n_groups = ng;
    /* what exists before the first step, and what must survive the last */
    for (int b = 0; b < nb; b++) {
        const vp_value *v = &g->values[p->buffers[b].value];
        group *G = &gr[gid[b]];
        int pre = (v->flags & (VP_VAL_INPUT | VP_VAL_INITIALIZER | VP_VAL_STATE | VP_VAL_CONST)) || v->data;
        if (pre) {
            vers[nv] = (version){gid[b], b, -1, -1};
            written[b] = ++nv;
            G->first = 0;
        }
        /* read after the step (outputs, the loss) or at the next step (parameters and
         * state; an update writing over one shares its group, so lives on with it) */
        if (pre || (v->flags & (VP_VAL_OUTPUT | VP_VAL_PARAM | VP_VAL_STATE)) || b == p->loss_buffer)
            G->last = last_step;
    }
    for (int st = 0; st < p->n_steps; st++) {
        const vp_node *n = &g->nodes[p->steps[st]];
        s = note_workspace(p, st, n, gid, gr, err);
        if (s) goto done;
        for (int k = 0; k < n->n_inputs; k++) {
            int v = n->inputs[k];
            if (v < 0) continue;
            int b = p->buffer_of[v];
            if (b >= 0 && is_workspace(p, b)) {
                s = vp_fail(err, VP_ERR_INVALID, "step %d ('%s') reads the workspace '%s' as a tensor", st, n->name, name_of(p, b));
                goto done;
            }
            if (b < 0 || !written[b]) {
                s = vp_fail(err, VP_ERR_INVALID, "step %d ('%s') reads '%s' before any step writes it", st, n->name,
                            g->values[v].name);
                goto done;
            }
            group *G = &gr[gid[b]];
            if (st > G->last) G->last = st;
            vers[written[b] - 1].last_read = st;
        }
        for (int k = 0; k < n->n_outputs; k++) {
            int v = n->outputs[k];
            if (v < 0) continue;
            int b = p->buffer_of[v];
            if (b < 0) {
                s = vp_fail(err, VP_ERR_INVALID, "step %d ('%s') writes '%s', which has no buffer", st, n->name, g->values[v].name);
                goto done;
            }
            if (is_workspace(p, b)) {
                s = vp_fail(err, VP_ERR_INVALID, "step %d ('%s') writes the workspace '%s' as a tensor", st, n->name, name_of(p, b));
                goto done;
            }
            s = note_write(p, st, n, k, gid, written, vers, &nv, err);
            if (s) goto done;
            group *G = &gr[gid[b]];
            if (G->first < 0) G->first = st;
            if (st > G->last) G->last = st;
        }
    }
    /* the loss the caller reads after the step: a float32 scalar a step computed, never an
     * input, a parameter or a constant that would be reported as a loss */
    if (p->loss_buffer >= nb) {
        s = vp_fail(err, VP_ERR_INVALID, "the loss buffer %d does not exist", p->loss_buffer);
        goto done;
    }
    if (p->loss_buffer >= 0) {
        const vp_value *v = &g->values[p->buffers[p->loss_buffer].value];
        const char *is = v->flags & VP_VAL_INPUT ? "an input"
                         : v->flags & (VP_VAL_INITIALIZER | VP_VAL_CONST | VP_VAL_PARAM | VP_VAL_STATE)
                             ? "an initializer, a constant or carried state"
                         : !written[p->loss_buffer] ? "written by no step"
                         : v->dtype != VP_F32 || vp_value_numel(v) != 1 ? "not a float32 scalar"
                                                                          : NULL;
        if (is) {
            s = vp_fail(err, VP_ERR_INVALID, "the loss buffer '%s' is %s: the loss is a float32 scalar a step computes",
                        name_of(p, p->loss_buffer), is);
            goto done;
        }
    }
    /* read by the caller after the step */
    for (int b = 0; b < nb; b++) {
        const vp_value *v = &g->values[p->buffers[b].value];
        if (written[b] && ((v->flags & VP_VAL_OUTPUT) || b == p->loss_buffer)) vers[written[b] - 1].last_read = p->n_steps;
    }
    /* a parameter's gradient is read by its update (or by the caller, as an output): one
     * no step reads means the update was dropped and that parameter stops training
     * without a word */
    for (int i = 0; i < nv; i++) {
        const vp_buffer *bu = &p->buffers[vers[i].buffer];
        if (vers[i].written < 0 || bu->cat != VP_CAT_GRADIENTS || vers[i].last_read > vers[i].written ||
            (g->values[bu->value].flags & VP_VAL_OUTPUT))
            continue;
        s = vp_fail(err, VP_ERR_INVALID, "step %d writes the gradient '%s', which no step reads (the update that reads it is missing)",
                    vers[i].written, name_of(p, vers[i].buffer));
        goto done;
    }
    s = check_versions(p, vers, nv, err);
    if (s) goto done;
    /* sweep the steps keeping the live groups sorted by offset; a group entering
     * overlaps some live group iff it overlaps its neighbour on either side */
    int ne = 0;
    for (int i = 0; i < ng; i++) {
        if (gr[i].first < 0 || gr[i].size == 0) continue;
        evs[ne++] = (ev){gr[i].first, 0, i};
        evs[ne++] = (ev){gr[i].last + 1, 1, i};
    }
    qsort(evs, (size_t)ne, sizeof *evs, by_step);
    int na = 0;
    int64_t live = 0;
    for (int e = 0; e < ne; e++) {
        group *G = &gr[evs[e].g];
        int lo = 0, hi = na;
        while (lo < hi) {
            int mid = (lo + hi) / 2;
            if (gr[active[mid]].offset < G->offset || (gr[active[mid]].offset == G->offset && active[mid] < evs[e].g))
                lo = mid + 1;
            else hi = mid;
        }
        if (evs[e].kind == 1) {
            if (lo < na && active[lo] == evs[e].g) {
                memmove(active + lo, active + lo + 1, (size_t)(na - lo - 1) * sizeof *active);
                na--;
                live -= G->size;
            }
            continue;
        }
        const group *other = NULL;
        if (lo > 0 && gr[active[lo - 1]].offset + gr[active[lo - 1]].size > G->offset) other = &gr[active[lo - 1]];
        if (!other && lo < na && gr[active[lo]].offset < G->offset + G->size) other = &gr[active[lo]];
        if (other) {
            s = vp_fail(err, VP_ERR_INVALID,
                        "buffers '%s' [%lld, %lld) and '%s' [%lld, %lld) overlap in the arena while both are live at step %d",
                        name_of(p, G->root), (long long)G->offset, (long long)(G->offset + G->size), name_of(p, other->root),
                        (long long)other->offset, (long long)(other->offset + other->size), evs[e].step);
            goto done;
        }
        memmove(active + lo + 1, active + lo, (size_t)(na - lo) * sizeof *active);
        active[lo] = evs[e].g;
        na++;
        live += G->size;
        if (live > rep->max_live_bytes) rep->max_live_bytes = live;
    }
done:
    free(gr);
    free(gid);
    free(written);
    free(active);
    free(evs);
    free(vers);
    return s;
}
