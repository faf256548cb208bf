#include "memory/verify.h"

#include <stdlib.h>
#include <string.h>

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

static int root_of(const vp_plan *p, int b) {
    int hops = 0;
    while (p->buffers[b].alias_of >= 0 && hops++ <= p->n_buffers) b = p->buffers[b].alias_of;
    return hops > p->n_buffers ? -1 : b;
}

static const char *name_of(const vp_plan *p, int b) { return p->g->values[p->buffers[b].value].name; }

vp_status vp_plan_verify(const vp_plan *p, vp_verify_report *rep, vp_error *err) {
    const vp_graph *g = p->g;
    int nb = p->n_buffers, last_step = p->n_steps ? p->n_steps - 1 : 0;
    memset(rep, 0, sizeof *rep);
    rep->n_buffers = nb;
    rep->n_steps = p->n_steps;
    group *gr = calloc((size_t)nb + 1, sizeof *gr);
    int *gid = malloc(((size_t)nb + 1) * sizeof *gid), *written = calloc((size_t)nb + 1, sizeof *written);
    int *active = malloc(((size_t)nb + 1) * sizeof *active);
    ev *evs = malloc(((size_t)nb * 2 + 1) * sizeof *evs);
    vp_status s = VP_OK;
    if (!gr || !gid || !written || !active || !evs) {
        s = vp_fail(err, VP_ERR_NOMEM, "out of memory verifying");
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
        if (buf->size < buf->bytes || buf->offset < 0 || buf->offset + buf->size > p->arena_bytes) {
            s = vp_fail(err, VP_ERR_INVALID, "buffer '%s' (%lld bytes at offset %lld) does not fit the %lld-byte arena",
                        name_of(p, b), (long long)buf->bytes, (long long)buf->offset, (long long)p->arena_bytes);
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
            gr[ng] = (group){r, p->buffers[r].offset, p->buffers[r].size, -1, -1};
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
            written[b] = 1;
            G->first = 0;
        }
        /* read after the step (outputs, the loss) or at the next step (parameters and
         * state; an update writing over one shares its group, so lives on with it) */
        if (pre || (v->flags & (VP_VAL_OUTPUT | VP_VAL_PARAM | VP_VAL_STATE)) || b == p->loss_buffer)
            G->last = last_step;
    }
    for (int st = 0; st < p->n_steps; st++) {
        const vp_node *n = &g->nodes[p->steps[st]];
        for (int k = 0; k < n->n_inputs; k++) {
            int v = n->inputs[k];
            if (v < 0) continue;
            int b = p->buffer_of[v];
            if (b < 0 || !written[b]) {
                s = vp_fail(err, VP_ERR_INVALID, "step %d ('%s') reads '%s' before any step writes it", st, n->name,
                            g->values[v].name);
                goto done;
            }
            group *G = &gr[gid[b]];
            if (st > G->last) G->last = st;
        }
        for (int k = 0; k < n->n_outputs; k++) {
            int v = n->outputs[k];
            if (v < 0) continue;
            int b = p->buffer_of[v];
            if (b < 0) {
                s = vp_fail(err, VP_ERR_INVALID, "step %d ('%s') writes '%s', which has no buffer", st, n->name, g->values[v].name);
                goto done;
            }
            written[b] = 1;
            group *G = &gr[gid[b]];
            if (G->first < 0) G->first = st;
            if (st > G->last) G->last = st;
        }
    }
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
    return s;
}
