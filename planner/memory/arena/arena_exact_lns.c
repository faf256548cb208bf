/* A neighbourhood search around the complete search's incumbent (arena_exact.c).
 *
 * In: the piece's items holding an assignment (the incumbent, arena *hi), the search
 * items loc[0..ns) that take space, the gcd g of their sizes, the bound, a budget of
 * work.  Out: a smaller assignment written into the items whenever a step finds one,
 * *hi lowered to it.  Keeps true: the items always hold a valid assignment no larger
 * than before; bounded by work only (deterministic for a budget).
 *
 * A step frees a column and what rests on it: the items reaching the top, the items
 * live at a time t (drawn, seeded by the step, inside a top item's lifetime) from some
 * depth up, and, closed upward, every item above a freed one and live with it; the
 * depth is the lowest whose set has at most k items.  The rest stay where they are,
 * and the decision search of arena_exact_search.c is asked whether the freed items fit
 * below the arena less g above the skyline the fixed ones leave (x->base: in each
 * section the highest top of a fixed item live there).  Since the set is closed
 * upward, every fixed item live with a freed one lies below it, so the incumbent's
 * freed items sit above the skyline and the decision keeps its canonical form (items
 * resting on the skyline or on each other); every fixed top is below the arena, so any
 * fit is a smaller arena.  Every second step works on the mirror image (offset ->
 * arena - top): the column is then cut from the bottom up.  Steps cycle through the
 * three ranks and k = 32, 64, 128.  Measured (RESULTS.md): it lowers MiniMalloc's D
 * and J, where the decision search stays undecided near the optimum; the same steps
 * on a band of the highest tops alone (no column) were all proved infeasible; on the
 * 400-buffer perfect packing no step finds a fit. */
#include "memory/arena/arena_exact.h"
#include "memory/arena/arena_exact_search.h"
#include "memory/arena/arena_place.h"

#include "ir/rng.h"

#include <stdlib.h>
#include <string.h>

typedef struct lns {
    vp_arena_item *items;
    const int *idx, *loc;
    int ns;
    int64_t *top;   /* [ns] tops in the step's image */
    int *by_top;    /* [ns] search items by top, highest first; then the freed first */
    int *sub;       /* [ns] piece indices of the freed items */
    int *scratch;   /* [ns] */
    int64_t *times; /* [2 ns] */
    char *mark;     /* [ns] freed by the column neighbourhood */
    int *queue;     /* [ns] */
    int64_t *depth; /* [ns] */
} lns;

static int by_top_desc(const void *pa, const void *pb, void *ctx) {
    const int64_t *top = ctx;
    int a = *(const int *)pa, b = *(const int *)pb;
    if (top[a] != top[b]) return top[a] > top[b] ? -1 : 1;
    return a - b;
}

/* Marks in L->mark the upward closure of seeds: what sits above a marked item and
 * overlaps it in time is marked too (so every unmarked item live with a marked one is
 * below it); returns the count. */
static int closure(lns *L, const vp_arena_item *items, int64_t *work) {
    int ns = L->ns, n_q = 0, count = 0;
    for (int q = 0; q < ns; q++)
        if (L->mark[q]) L->queue[n_q++] = q, count++;
    for (int h = 0; h < n_q; h++) {
        int i = L->queue[h];
        const vp_arena_item *a = &items[L->idx[L->loc[i]]];
        for (int j = 0; j < ns; j++) {
            if (L->mark[j]) continue;
            const vp_arena_item *b = &items[L->idx[L->loc[j]]];
            if (b->start >= a->end || a->start >= b->end) continue;
            if (L->top[j] - b->size >= L->top[i]) {
                L->mark[j] = 1;
                L->queue[n_q++] = j;
                count++;
            }
        }
        *work += ns;
    }
    return count;
}

/* Seeds: the n_top items reaching the top, those live at t from depth d up. */
static void mark_column(lns *L, const vp_arena_item *items, int n_top, int64_t t, int64_t d) {
    for (int q = 0; q < L->ns; q++) {
        const vp_arena_item *it = &items[L->idx[L->loc[q]]];
        L->mark[q] = it->start <= t && t < it->end && L->top[q] - it->size >= d;
    }
    for (int p = 0; p < n_top; p++) L->mark[L->by_top[p]] = 1;
}

/* The column neighbourhood: the items reaching the top, and those live at a time t
 * (drawn by seed from the lifetimes of the top items) from a depth down, closed upward;
 * the deepest such set of at most k items.  Leaves by_top with them first; returns
 * their count. */
static int column(lns *L, const vp_arena_item *items, uint64_t seed, int k, int64_t *work) {
    int ns = L->ns, n_top = 0;
    int64_t hi = L->top[L->by_top[0]];
    while (n_top < ns && L->top[L->by_top[n_top]] == hi) n_top++;
    vp_rng rng = {seed * 0x9e3779b97f4a7c15u + 1};
    const vp_arena_item *pk = &items[L->idx[L->loc[L->by_top[vp_rng_next(&rng) % (uint64_t)n_top]]]];
    int64_t t = pk->start + (int64_t)(vp_rng_next(&rng) % (uint64_t)(pk->end - pk->start));
    /* depths: offsets (in the image) of the items live at t, highest first */
    int nd = 0;
    for (int p = 0; p < ns; p++) {
        int q = L->by_top[p];
        const vp_arena_item *it = &items[L->idx[L->loc[q]]];
        if (it->start <= t && t < it->end) L->depth[nd++] = L->top[q] - it->size;
    }
    qsort(L->depth, (size_t)nd, sizeof *L->depth, vp_cmp_i64);
    int best = 0;
    int64_t best_d = -1;
    for (int d = nd - 1; d >= 0; d--) {
        mark_column(L, items, n_top, t, L->depth[d]);
        int c = closure(L, items, work);
        if (c > k && best) break;
        best = c;
        best_d = L->depth[d];
        if (c > k) break;
    }
    mark_column(L, items, n_top, t, best_d);
    int c = closure(L, items, work), a = 0, b = c;
    for (int q = 0; q < ns; q++) {
        if (L->mark[q]) L->queue[a++] = q;
        else L->queue[b++] = q;
    }
    memcpy(L->by_top, L->queue, (size_t)ns * sizeof *L->by_top);
    return c;
}

/* One step: frees about k items of the image (flip: mirrored) of the assignment of
 * arena hi and decides them at capacity c.  Returns 1 when it wrote a smaller
 * assignment (*hi updated), 0 proved none, 2 undecided, -1 out of memory. */
static int step(lns *L, int flip, int k, int h, uint64_t seed, int64_t *hi, int64_t c, int64_t lim, int64_t *work) {
    vp_arena_item *items = L->items;
    int ns = L->ns;
    for (int q = 0; q < ns; q++) {
        const vp_arena_item *it = &items[L->idx[L->loc[q]]];
        L->top[q] = flip ? *hi - it->offset : it->offset + it->size;
        L->by_top[q] = q;
    }
    qsort_r(L->by_top, (size_t)ns, sizeof *L->by_top, by_top_desc, L->top);
    int kk = column(L, items, seed, k, work);
    for (int j = 0; j < kk; j++) L->sub[j] = L->loc[L->by_top[j]];
    *work += (int64_t)kk * kk + ns;
    vp_exact y;
    memset(&y, 0, sizeof y);
    int r = -1;
    if (!vp_exact_build(&y, items, L->idx, L->sub, kk)) goto out;
    /* the sections' times again, as vp_exact_build cut them */
    int nt = 0;
    for (int j = 0; j < kk; j++) {
        L->times[2 * j] = items[L->idx[L->sub[j]]].start;
        L->times[2 * j + 1] = items[L->idx[L->sub[j]]].end;
    }
    qsort(L->times, 2 * (size_t)kk, sizeof *L->times, vp_cmp_i64);
    for (int i = 0; i < 2 * kk; i++)
        if (!nt || L->times[i] != L->times[nt - 1]) L->times[nt++] = L->times[i];
    y.base = calloc((size_t)y.m, sizeof *y.base);
    if (!y.base) goto out;
    for (int j = kk; j < ns; j++) {
        int q = L->by_top[j];
        const vp_arena_item *it = &items[L->idx[L->loc[q]]];
        /* sections [times[s], times[s + 1]) the fixed item is live in */
        int s = vp_upper_index(L->times, nt, it->start) - 1;
        for (s = s < 0 ? 0 : s; s + 1 < nt && L->times[s] < it->end; s++)
            if (L->times[s + 1] > it->start && L->top[q] > y.base[s]) y.base[s] = L->top[q];
        *work += 1;
    }
    vp_exact_set_ranks(&y, h, 0, 0, L->scratch);
    r = vp_exact_decide(&y, c, lim);
    *work += y.work;
    if (r == 1) {
        /* new tops in the image; the arena is the highest of them */
        for (int j = 0; j < kk; j++) L->top[L->by_top[j]] = y.best_off[j] + y.size[j];
        int64_t a = 0;
        for (int q = 0; q < ns; q++)
            if (L->top[q] > a) a = L->top[q];
        for (int q = 0; q < ns; q++) {
            vp_arena_item *it = &items[L->idx[L->loc[q]]];
            it->offset = flip ? a - L->top[q] : L->top[q] - it->size;
        }
        *hi = a;
    }
out:
    vp_exact_free(&y);
    return r;
}

int vp_exact_lns(vp_arena_item *items, const int *idx, const int *loc, int ns, int64_t g, int64_t lower, int64_t *hi,
                 int64_t budget, int64_t *work_used, int *attempts) {
    lns L = {items, idx, loc, ns, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    L.mark = malloc((size_t)ns);
    L.queue = malloc((size_t)ns * sizeof *L.queue);
    L.depth = malloc((size_t)ns * sizeof *L.depth);
    L.top = malloc((size_t)ns * sizeof *L.top);
    L.by_top = malloc((size_t)ns * sizeof *L.by_top);
    L.sub = malloc((size_t)ns * sizeof *L.sub);
    L.scratch = malloc((size_t)ns * sizeof *L.scratch);
    L.times = malloc(2 * (size_t)ns * sizeof *L.times);
    int rc = 0;
    if (!L.top || !L.by_top || !L.sub || !L.scratch || !L.times || !L.mark || !L.queue || !L.depth) rc = -1;
    /* steps cycle through the image (plain, mirrored), the rank and the size of the
     * neighbourhood; the seed draws each step's time */
    int flip = 0, h = 0, si = 0;
    uint64_t seed = 0;
    while (!rc && *hi - g >= lower && *work_used < budget) {
        int k = VP_LNS_ITEMS << si;
        int64_t lim = VP_LNS_WORK_PER_PAIR * (int64_t)k * k, left = budget - *work_used;
        if (step(&L, flip, k, h, ++seed, hi, *hi - g, lim < left ? lim : left, work_used) < 0) rc = -1;
        (*attempts)++;
        flip = !flip;
        if (!flip) si = (si + 1) % 3;
        h = (h + 1) % 3;
    }
    free(L.top);
    free(L.by_top);
    free(L.sub);
    free(L.scratch);
    free(L.times);
    free(L.mark);
    free(L.queue);
    free(L.depth);
    return rc;
}

