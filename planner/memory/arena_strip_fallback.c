/* The strip search's best assignment above the bound, for the pieces it does not solve.
 *
 * In: the search as it goes (arena_strip.c, arena_strip_sweep.c): every time a strip is
 * placed on the path from the piece's root (not inside the check of a block, whose
 * offsets are relative), the items placed so far hold offsets that are part of a
 * possible assignment at the bound, and the items still pending are listed on a stack
 * (the rest above the strip, the later pieces of each time cut on the way).  Out: when
 * fewer items are pending than at any point before, those placed are kept where they are
 * and the pending ones are put around them by the greedy placer (arena_place.c, best fit
 * and first fit, biggest first); the lowest such arena is kept.  Keeps true: the kept
 * offsets are a complete assignment with no two items live at one step sharing a byte.
 *
 * Why: on a perfect packing the strip search misses, the complete search that follows
 * starts from the greedy portfolio's assignment, 13 to 23% above the bound, and ends 9 to
 * 15% above it (RESULTS.md).  Before it gave up, the strip search had placed most of the
 * piece at the bound (perfect_400_s5: 744 KiB of 1024 KiB, the 85 buffers left needing
 * 315 KiB by the portfolio on their own); what it placed wastes nothing, so completing
 * that is a better start. */
#include "memory/arena_strip_internal.h"
#include "memory/arena_place.h"

#include <stdlib.h>
#include <string.h>

int vp_strip_pend_push(strip *st, const int *S, int ns) {
    if (st->npend == st->pend_cap) {
        int cap = st->pend_cap ? 2 * st->pend_cap : 64;
        struct strip_pending *p = realloc(st->pend, (size_t)cap * sizeof *p);
        if (!p) {
            st->oom = 1;
            return -1;
        }
        st->pend = p, st->pend_cap = cap;
    }
    st->pend[st->npend++] = (struct strip_pending){S, ns};
    return 0;
}

void vp_strip_pend_pop(strip *st) { st->npend--; }

typedef struct fallback_order {
    const strip *st;
    const unsigned char *pending;
    int by; /* the pending ones: 0 biggest, 1 longest, 2 most area (bytes x steps) first */
} fallback_order;

/* the placed items by offset (so a first fit keeps each at or below where it was), then
 * the pending ones */
static int by_fallback(const void *pa, const void *pb, void *ctx) {
    const fallback_order *o = ctx;
    const strip *st = o->st;
    int a = *(const int *)pa, b = *(const int *)pb;
    if (o->pending[a] != o->pending[b]) return o->pending[a] ? 1 : -1;
    if (!o->pending[a]) {
        if (st->off[a] != st->off[b]) return st->off[a] < st->off[b] ? -1 : 1;
        return a - b;
    }
    double ka = (double)st->sz[a], kb = (double)st->sz[b];
    double la = (double)(st->hi[a] - st->lo[a]), lb = (double)(st->hi[b] - st->lo[b]);
    if (o->by == 1) ka = la, kb = lb;
    if (o->by == 2) ka *= la, kb *= lb;
    if (ka != kb) return ka > kb ? -1 : 1;
    return a - b;
}

void vp_strip_snapshot(strip *st) {
    if (st->relative || !st->fb_off) return;
    int64_t pending = 0; /* bytes x steps */
    for (int i = 0; i < st->npend; i++)
        for (int j = 0; j < st->pend[i].n; j++) {
            int k = st->pend[i].S[j];
            pending += st->sz[k] * (st->hi[k] - st->lo[k]);
        }
    if (pending >= st->fb_pending) return;
    st->fb_pending = pending;
    int m = st->m;
    vp_arena_item *it = malloc((size_t)m * sizeof *it);
    int *order = malloc((size_t)m * sizeof *order), *placed = malloc((size_t)m * sizeof *placed);
    unsigned char *pending_mark = calloc((size_t)m, 1);
    if (!it || !order || !placed || !pending_mark) {
        st->oom = 1;
        goto done;
    }
    for (int i = 0; i < st->npend; i++)
        for (int j = 0; j < st->pend[i].n; j++) pending_mark[st->pend[i].S[j]] = 1;
    for (int by = 0; by < 3; by++) {
        fallback_order o = {st, pending_mark, by};
        for (int k = 0; k < m; k++) order[k] = k;
        qsort_r(order, (size_t)m, sizeof *order, by_fallback, &o);
        for (int fit = 0; fit < 2; fit++) {
            for (int k = 0; k < m; k++) it[k] = (vp_arena_item){st->sz[k], st->lo[k], st->hi[k], 0};
            int64_t top = vp_place_scan(it, order, m, fit, placed);
            st->work += (int64_t)m * m; /* each placement reads the placed items */
            if (top < st->fb_top) {
                st->fb_top = top;
                for (int k = 0; k < m; k++) st->fb_off[k] = it[k].offset;
            }
        }
    }
done:
    free(it), free(order), free(placed), free(pending_mark);
}
