/* The strip search's best assignment above the bound, for the pieces it does not solve.
 *
 * In: the search as it goes (arena_strip.c, arena_strip_sweep.c): every time a strip is
 * placed on the path from the piece's root (not inside the check of a block, whose
 * offsets are relative), the items placed so far hold offsets that are part of a
 * possible assignment at the bound, and the items still pending are listed on a stack of
 * groups, each with the floor it was to sit on (the rest above the strip; the later
 * pieces of each time cut on the way).  Out: when the pending area (bytes x steps) is
 * the least yet, two completions, the lower kept: (1) each group, innermost first,
 * assigned on its own by the greedy portfolio (arena.c, no search) and dropped whole to
 * the lowest place at or above its floor where it meets nothing placed; (2) every
 * pending item put around the placed ones by the greedy placer (arena_place.c), in three
 * orders, best fit and first fit.  When the search ends without the bound
 * (vp_strip_refine), the point behind the lowest completion has its groups assigned
 * again, each with the complete search as well.  Keeps true: the kept offsets are a
 * complete assignment with no two items live at one step sharing a byte.
 *
 * Why: on a perfect packing the strip search misses, the complete search that follows
 * starts from the greedy portfolio's assignment, 13 to 23% above the bound, and ends 9 to
 * 15% above it (RESULTS.md).  Before it gave up, the strip search had placed most of the
 * piece at the bound (perfect_400_s5, measured before the search ran in passes of other
 * orders, which now solve it: 744 KiB of 1024 KiB, one group of 85 buffers left,
 * 297 KiB at its own bound); what it placed wastes nothing, so completing that is a
 * better start.  A group assigned on its own keeps the shape its own search gives it
 * (s5: 315 KiB, so 1.0176 of the bound in all); put item by item around the rest it
 * loses that (1.0605). */
#include "memory/arena/arena_strip_internal.h"
#include "memory/arena/arena_exact.h"
#include "memory/arena/arena_place.h"

#include <stdlib.h>
#include <string.h>

int vp_strip_pend_push(strip *st, const int *S, int ns, int64_t floor) {
    if (st->npend == st->pend_cap) {
        int cap = st->pend_cap ? 2 * st->pend_cap : 64;
        struct strip_pending *p = realloc(st->pend, (size_t)cap * sizeof *p);
        if (!p) {
            st->oom = 1;
            return -1;
        }
        st->pend = p, st->pend_cap = cap;
    }
    st->pend[st->npend++] = (struct strip_pending){S, ns, floor};
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

static void keep(strip *st, const vp_arena_item *it, int64_t top) {
    if (top >= st->fb_top) return;
    st->fb_top = top;
    for (int k = 0; k < st->m; k++) st->fb_off[k] = it[k].offset;
}

/* (2): the pending items one by one around the placed ones */
static void complete_greedy(strip *st, const unsigned char *pending, vp_arena_item *it, int *order, int *placed) {
    int m = st->m;
    for (int by = 0; by < 3; by++) {
        fallback_order o = {st, pending, by};
        for (int k = 0; k < m; k++) order[k] = k;
        qsort_r(order, (size_t)m, sizeof *order, by_fallback, &o);
        for (int fit = 0; fit < 2; fit++) {
            for (int k = 0; k < m; k++) it[k] = (vp_arena_item){st->sz[k], st->lo[k], st->hi[k], 0};
            keep(st, it, vp_place_scan(it, order, m, fit, placed));
            st->work += (int64_t)m * m / 3; /* each placement reads the placed items (see below) */
        }
    }
}

typedef struct span {
    int64_t a, b; /* shifts [a, b] that collide */
} span;

static int by_start(const void *pa, const void *pb) {
    const span *a = pa, *b = pb;
    return (a->a > b->a) - (a->a < b->a);
}

/* (1): each group on its own (the greedy portfolio, and the complete search for
 * `exact` units where more than 0), innermost first, then dropped whole; the arena, or
 * -1 out of memory */
static int64_t complete_by_groups(strip *st, const strip_snap *sn, int64_t exact, vp_arena_item *it) {
    int m = st->m;
    int64_t top = 0;
    unsigned char *placed = malloc((size_t)m);
    vp_arena_item *g = malloc((size_t)m * sizeof *g);
    span *sp = NULL;
    size_t nsp = 0, cap = 0;
    if (!placed || !g) goto oom;
    for (int k = 0; k < m; k++) {
        placed[k] = !sn->pending[k];
        it[k] = (vp_arena_item){st->sz[k], st->lo[k], st->hi[k], sn->off[k]};
        if (placed[k] && it[k].offset + it[k].size > top) top = it[k].offset + it[k].size;
    }
    for (int q = 0; q < sn->groups; q++) {
        const int *S = sn->items + sn->start[q];
        int n = sn->start[q + 1] - sn->start[q];
        for (int j = 0; j < n; j++) g[j] = (vp_arena_item){st->sz[S[j]], st->lo[S[j]], st->hi[S[j]], 0};
        vp_arena_opts o = {.search_seconds = -1, .only = -1,
                           .exact_seconds = exact > 0 ? (double)exact / VP_ARENA_EXACT_WORK_PER_SECOND : -1};
        vp_arena_result res;
        vp_error err;
        if (vp_arena_solve(g, n, &o, &res, &err) != VP_OK) goto oom;
        /* ten greedy orders, each placement reading the placed items, and the search: a
         * snapshot is charged at about the rate the strip search's own steps take (on
         * perfect packings of 400 buffers, 0.4 to 0.6G units a CPU second; these charges
         * at three times these counts came to 1.3 to 2.0G) */
        st->work += 21 * (int64_t)n * n + res.exact_work;
        /* the shifts at which some item of the group meets a placed one, merged */
        nsp = 0;
        for (int j = 0; j < n; j++)
            for (int k = 0; k < m; k++) {
                if (!placed[k] || it[k].start >= g[j].end || g[j].start >= it[k].end) continue;
                if (nsp == cap) {
                    size_t c = cap ? 2 * cap : 1024;
                    span *t = realloc(sp, c * sizeof *t);
                    if (!t) goto oom;
                    sp = t, cap = c;
                }
                sp[nsp++] = (span){it[k].offset - g[j].offset - g[j].size + 1, it[k].offset + it[k].size - g[j].offset - 1};
            }
        st->work += 2 * (int64_t)n * m / 3;
        qsort(sp, nsp, sizeof *sp, by_start);
        int64_t shift = sn->floor[q];
        for (size_t i = 0; i < nsp && sp[i].a <= shift; i++)
            if (sp[i].b >= shift) shift = sp[i].b + 1;
        for (int j = 0; j < n; j++) {
            int k = S[j];
            it[k].offset = shift + g[j].offset;
            placed[k] = 1;
            if (it[k].offset + it[k].size > top) top = it[k].offset + it[k].size;
        }
    }
    free(placed), free(g), free(sp);
    return top;
oom:
    free(placed), free(g), free(sp);
    return -1;
}

/* the snapshot's groups, innermost first, from the stack */
static void take_snap(const strip *st, strip_snap *sn) {
    memcpy(sn->off, st->off, (size_t)st->m * sizeof *sn->off);
    memset(sn->pending, 0, (size_t)st->m);
    int at = 0;
    sn->groups = 0;
    for (int q = st->npend - 1; q >= 0; q--) {
        const struct strip_pending *p = &st->pend[q];
        if (!p->n) continue;
        sn->start[sn->groups] = at;
        sn->floor[sn->groups++] = p->floor;
        for (int j = 0; j < p->n; j++) sn->items[at++] = p->S[j], sn->pending[p->S[j]] = 1;
    }
    sn->start[sn->groups] = at;
}

int vp_strip_snap_alloc(strip_snap *sn, int m) {
    sn->off = malloc((size_t)m * sizeof *sn->off);
    sn->pending = malloc((size_t)m);
    sn->items = malloc((size_t)m * sizeof *sn->items);
    sn->start = malloc(((size_t)m + 1) * sizeof *sn->start);
    sn->floor = malloc((size_t)m * sizeof *sn->floor);
    sn->groups = -1;
    return sn->off && sn->pending && sn->items && sn->start && sn->floor ? 0 : -1;
}

void vp_strip_snap_free(strip_snap *sn) {
    free(sn->off), free(sn->pending), free(sn->items), free(sn->start), free(sn->floor);
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
    if (!it || !order || !placed) {
        st->oom = 1;
        goto done;
    }
    take_snap(st, &st->snap);
    int64_t before = st->fb_top, top = complete_by_groups(st, &st->snap, 0, it);
    if (top < 0) {
        st->oom = 1;
        goto done;
    }
    keep(st, it, top);
    complete_greedy(st, st->snap.pending, it, order, placed);
    /* the snapshot behind the best completion, for vp_strip_refine */
    if (st->fb_top < before) {
        strip_snap t = st->best;
        st->best = st->snap, st->snap = t;
    }
done:
    free(it), free(order), free(placed);
}

void vp_strip_refine(strip *st, int64_t exact) {
    if (!st->fb_off || st->best.groups <= 0) return;
    vp_arena_item *it = malloc((size_t)st->m * sizeof *it);
    int64_t top = it ? complete_by_groups(st, &st->best, exact, it) : -1;
    if (top < 0) st->oom = 1;
    else keep(st, it, top);
    free(it);
}
