/* Offsets for a piece whose load is flat: strips and time cuts.
 *
 * In: one piece of items whose live bytes are the same, B, at every step of its span.
 * Out: an assignment of arena B (every step exactly full), or nothing.  Keeps true:
 * offsets are written only for a complete assignment; bounded by a count of work, never
 * by the clock, so a limit gives the same answer on any machine.
 *
 * Why: at the bound every step is full, so the searches that place one buffer at a time
 * (arena_exact_search.c) must guess the whole packing's shape from the bottom up; on the
 * generated perfect packings of 400 buffers none reached it (RESULTS.md).  Seen as a
 * flow, a flat piece is a set of edges (a buffer runs from its first step to its end)
 * carrying B bytes from the first step to the last, and an assignment of such a piece
 * made of strips is a series-parallel split of that flow:
 * - a time cut: a step no buffer spans splits the piece into pieces side by side, each
 *   flat at B, placed independently;
 * - a buffer spanning the whole span goes to the bottom (whatever sits below it can be
 *   lifted over it; nothing crosses it);
 * - otherwise a strip: a subset T whose own load is flat (h bytes at every step, so the
 *   rest is flat at B - h too) is placed in [0, h) and the rest above it, each solved
 *   the same way.
 * A subset is flat when at every step the bytes of its buffers that end there equal the
 * bytes of those that start there, so T is built by a sweep over the piece's steps: the
 * buffers it takes at the first step fix h, and at each later step the buffers ending
 * are replaced by a subset, of exactly their bytes, of the buffers starting there.  A
 * step where all of T's buffers end is a time cut of the strip: the block behind it is
 * solved at once (height h), which prunes most sweeps long before T is complete.  Only
 * strips with such a cut inside are built: the strips between two neighbouring full-width
 * cuts of a guillotine assignment have one (their first cut cannot be full-width), so the
 * first block takes no buffer that ends at the level's last step.  Every
 * strip contains a buffer that starts at the first step, so the sweep is run for each
 * such buffer x in turn (T containing x), thinnest first, the k-th with 1/k of a budget
 * of nodes that doubles every round (which x leads to a small strip is not known; a
 * strip through a thin buffer can be the whole piece).  Remembered: a (set, height)
 * proved impossible; a sweep state (step, bytes pending by end step, the open block, the
 * items still to come) from which no flat T follows, in one table for every sweep of the
 * piece; strips already tried at a level.  When the sweep through some
 * x finishes without a strip that works the level fails: complete for assignments made
 * of strips and time cuts (guillotine ones), which is what the perfect packings are; on
 * others it may miss, and the caller goes on with its own search.  A level of few items is first given, with a little
 * work, to the placement search (arena_strip_place.c), whose answers hold for every
 * assignment, not only strips: where sizes add up alike in many ways the flat strips are
 * many and the sweep tries them one by one, while placing buffer by buffer decides the
 * level soon (a window of 7 steps, 39 buffers, of the level left after perfect_400_s5's
 * wrong third strip: 111.6M units by strips, under 0.01M with this step).
 *
 * The search runs in four passes (strip_passes), each in other orders: the sweep's
 * buffers at a step biggest or smallest first; a level's sweeps through its thinnest
 * buffers first, its thickest, or the two alternating.  The first pass has half the work,
 * the others a sixth each; what a pass proves stays proved for the next.  Why: which strip
 * a level takes first decides whether the search finds the packing or stays below a wrong
 * strip until the work runs out, and that follows the order far more than the work: on the
 * 400-buffer perfect packings k = 1..80 at 625M units, one order reaches the bound on 41 to
 * 45, any of them on 55, half of those in under 10M units.  Alternating: with the k-th
 * buffer's sweep given 1/k of a round, a thick buffer whose strip is quickly found waits
 * behind thin ones whose sweeps never end (perfect_400_s5, smallest first: a 338-buffer
 * level decided by the strip through its 172 KiB buffer, 26th of 28, in 20.6M units, after
 * 230M units of rounds on the thinner ones; alternating, the whole piece in 49.6M).
 *
 * Measured: tools/bench/RESULTS.md, bench_arena --hard (perfect_400). */
#include "memory/arena/arena_strip.h"
#include "memory/arena/arena_strip_internal.h"

#include <stdlib.h>
#include <string.h>

uint64_t vp_strip_mix(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

int vp_strip_keyset_has(const strip_keyset *s, strip_key k) {
    if (!s->cap) return 0;
    size_t m = s->cap - 1;
    for (size_t i = k.a & m; s->slot[i].b; i = (i + 1) & m)
        if (s->slot[i].a == k.a && s->slot[i].b == k.b) return 1;
    return 0;
}

int vp_strip_keyset_add(strip_keyset *s, strip_key k) {
    if (2 * (s->used + 1) > s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 64;
        strip_key *slot = calloc(cap, sizeof *slot);
        if (!slot) return -1;
        for (size_t j = 0; j < s->cap; j++) {
            if (!s->slot[j].b) continue;
            size_t i = s->slot[j].a & (cap - 1);
            while (slot[i].b) i = (i + 1) & (cap - 1);
            slot[i] = s->slot[j];
        }
        free(s->slot);
        s->slot = slot;
        s->cap = cap;
    }
    size_t m = s->cap - 1, i = k.a & m;
    for (; s->slot[i].b; i = (i + 1) & m)
        if (s->slot[i].a == k.a && s->slot[i].b == k.b) return 0;
    s->slot[i] = k;
    s->used++;
    return 0;
}

int vp_strip_cache_has(const strip_cache *c, strip_key k) {
    const strip_key *b = c->slot + 2 * (k.a & c->mask);
    return (b[0].a == k.a && b[0].b == k.b) || (b[1].a == k.a && b[1].b == k.b);
}

void vp_strip_cache_add(strip_cache *c, strip_key k) {
    strip_key *b = c->slot + 2 * (k.a & c->mask);
    if ((b[0].a == k.a && b[0].b == k.b) || (b[1].a == k.a && b[1].b == k.b)) return;
    b[1] = b[0], b[0] = k;
}

strip_key vp_strip_set_key(const strip *st, const int *S, int ns, int64_t h) {
    strip_key k = {vp_strip_mix((uint64_t)h), vp_strip_mix((uint64_t)h ^ 0x5bd1e995u) | 1};
    for (int i = 0; i < ns; i++) k.a ^= st->z1[S[i]], k.b ^= st->z2[S[i]];
    k.b |= 1;
    return k;
}

/* ---- the recursion over time cuts, spanning buffers and strips ---- */

static int by_lo(const void *pa, const void *pb, void *ctx) {
    const strip *st = ctx;
    int a = *(const int *)pa, b = *(const int *)pb;
    if (st->lo[a] != st->lo[b]) return st->lo[a] < st->lo[b] ? -1 : 1;
    if (st->hi[a] != st->hi[b]) return st->hi[a] < st->hi[b] ? -1 : 1;
    return a - b;
}

/* thin buffers first (the strips through them are often thin; thick first in a pass so
 * ordered), long first among equals */
static int by_thin(const void *pa, const void *pb, void *ctx) {
    const strip *st = ctx;
    int ca = *(const int *)pa, cb = *(const int *)pb, a = ca >> 1, b = cb >> 1;
    if (st->sz[a] != st->sz[b]) return (st->sz[a] < st->sz[b]) != (st->order.lead == STRIP_LEAD_THICK) ? -1 : 1;
    int64_t la = st->hi[a] - st->lo[a], lb = st->hi[b] - st->lo[b];
    if (la != lb) return la > lb ? -1 : 1;
    return ca - cb;
}

/* Levels of up to this many items go to the placement search first, with this much
 * work per pair of items for each of its three orders.  Measured on the 400-buffer
 * perfect packings of seeds k = 11..40 (bench_arena --strip's generator, beyond its ten)
 * at 625M units each: 16 solved instead of 15, and the 15 solved before in 668M units in
 * all instead of 1389M; limits of 60, 80 or 400 items and 4 or 16 per pair did alike, 250
 * items at 2 per pair solved one fewer. */
#define STRIP_PLACE_MAX_ITEMS 120
#define STRIP_PLACE_WORK_PER_PAIR 4

static int solve_in(strip *st, int *v, int ns, int64_t t0, int64_t t1, int64_t H, int64_t base) {
    qsort_r(v, (size_t)ns, sizeof *v, by_lo, st);
    /* time cuts: the items in start order split wherever none spans the step */
    int64_t reach = st->hi[v[0]];
    int k = 1;
    while (k < ns && st->lo[v[k]] < reach) {
        if (st->hi[v[k]] > reach) reach = st->hi[v[k]];
        k++;
    }
    if (k < ns) {
        for (int a = 0; a < ns;) {
            int b = a + 1;
            reach = st->hi[v[a]];
            while (b < ns && st->lo[v[b]] < reach) {
                if (st->hi[v[b]] > reach) reach = st->hi[v[b]];
                b++;
            }
            if (vp_strip_pend_push(st, v + b, ns - b, base) < 0) return STRIP_OUT;
            int r = vp_strip_solve(st, v + a, b - a, st->lo[v[a]], reach, H, base);
            vp_strip_pend_pop(st);
            if (r != STRIP_DONE) return r;
            a = b;
        }
        return STRIP_DONE;
    }
    /* buffers spanning the whole piece go to the bottom */
    int64_t used = 0;
    int nr = 0;
    for (int i = 0; i < ns; i++) {
        if (st->lo[v[i]] == t0 && st->hi[v[i]] == t1) st->off[v[i]] = base + used, used += st->sz[v[i]];
        else v[nr++] = v[i];
    }
    if (used) return used > H ? STRIP_FAIL : vp_strip_solve(st, v, nr, t0, t1, H - used, base + used);
    /* a small level: the placement search first, with a little work (arena_strip_place.c) */
    if (ns <= STRIP_PLACE_MAX_ITEMS) {
        /* once per level: a level met again (the rounds above revisit what ran out) would
         * get the same budget and the same undecided answer */
        strip_key k = vp_strip_set_key(st, v, ns, H);
        if (!vp_strip_keyset_has(&st->placed, k)) {
            int r = vp_strip_place(st, v, ns, H, base, STRIP_PLACE_WORK_PER_PAIR * (int64_t)ns * ns);
            if (r != STRIP_PAUSE) return r;
            if (vp_strip_keyset_add(&st->placed, k) < 0) {
                st->oom = 1;
                return STRIP_OUT;
            }
        }
    }
    /* a strip through each buffer starting at t0 (swept forward) or ending at t1 (swept
     * back) in turn, thinnest first, with a budget that doubles: the end from which a level
     * is proved impossible soonest differs */
    int nc = 0;
    int *c0 = ns > 0 ? malloc(2 * (size_t)ns * sizeof *c0) : NULL;
    if (!c0) {
        st->oom = 1;
        return STRIP_OUT;
    }
    for (int i = 0; i < ns; i++) {
        if (st->lo[v[i]] == t0) c0[nc++] = 2 * v[i];
        if (st->hi[v[i]] == t1) c0[nc++] = 2 * v[i] + 1;
    }
    qsort_r(c0, (size_t)nc, sizeof *c0, by_thin, st);
    if (st->order.lead == STRIP_LEAD_ALTERNATE) { /* the thinnest, the thickest, the next thinnest, ... */
        int *in = c0 + nc; /* room: no buffer spans the level, so each is listed once at most */
        memcpy(in, c0, (size_t)nc * sizeof *c0);
        for (int a = 0, b = nc - 1, k = 0; a <= b;) {
            c0[k++] = in[a++];
            if (a <= b) c0[k++] = in[b--];
        }
    }
    strip_keyset tried = {0};
    strip_steps steps[2] = {{0}}; /* forward and back, built at their first sweep */
    int r = STRIP_FAIL;
    for (int64_t budget = 16;; budget *= 2) {
        int paused = 0;
        for (int i = 0; i < nc; i++) {
            /* the k-th buffer gets 1/k of the round's budget: the thin ones first find
             * the thin strips, and prove a level impossible soonest (perfect_400_s4: 463M
             * units with an equal share, 143M with 1/k; bench_arena --strip) */
            int rev = c0[i] & 1;
            if (!steps[rev].built && vp_strip_steps_build(st, v, ns, t0, t1, rev, &steps[rev]) < 0) {
                r = STRIP_OUT;
                break;
            }
            r = vp_strip_through(st, v, ns, t0, t1, H, base, c0[i] >> 1, rev, &steps[rev], budget / (i + 1) + 16, &tried);
            if (r == STRIP_PAUSE) paused = 1;
            else break; /* placed; no strip through c0[i] works, so none at all; out */
        }
        if (!paused || r != STRIP_PAUSE) break;
    }
    free(c0);
    free(tried.slot);
    vp_strip_steps_free(&steps[0]);
    vp_strip_steps_free(&steps[1]);
    return r;
}

int vp_strip_solve(strip *st, const int *S, int ns, int64_t t0, int64_t t1, int64_t h, int64_t base) {
    st->work += 2 * (1 + 4 * (int64_t)ns); /* the key, the copy and the sort */
    if (st->work > st->limit || st->depth >= STRIP_MAX_DEPTH) return STRIP_OUT;
    if (ns == 0) return h == 0 ? STRIP_DONE : STRIP_FAIL;
    if (h <= 0) return STRIP_FAIL;
    strip_key k = vp_strip_set_key(st, S, ns, h);
    if (vp_strip_keyset_has(&st->failed, k)) return STRIP_FAIL;
    int *v = malloc((size_t)ns * sizeof *v);
    if (!v) {
        st->oom = 1;
        return STRIP_OUT;
    }
    memcpy(v, S, (size_t)ns * sizeof *v);
    st->depth++;
    int r = solve_in(st, v, ns, t0, t1, h, base);
    st->depth--;
    free(v);
    if (r == STRIP_FAIL && vp_strip_keyset_add(&st->failed, k) < 0) st->oom = 1, r = STRIP_OUT;
    return r;
}

/* the piece's bound when its load is the same at every step of its span, else -1 */
static int64_t flat_load(const strip *st, int n) {
    int64_t *d = calloc((size_t)(2 * n), sizeof *d), *tm = malloc((size_t)(2 * n) * sizeof *tm);
    int64_t load = -1;
    if (d && tm) {
        int m = 0;
        for (int i = 0; i < n; i++) tm[m++] = st->lo[i], tm[m++] = st->hi[i];
        qsort(tm, (size_t)m, sizeof *tm, vp_strip_cmp_i64);
        int u = 0;
        for (int i = 0; i < m; i++)
            if (!u || tm[u - 1] != tm[i]) tm[u++] = tm[i];
        for (int i = 0; i < n; i++) {
            int a = 0, b = u;
            while (a < b) {
                int c = (a + b) / 2;
                if (tm[c] < st->lo[i]) a = c + 1;
                else b = c;
            }
            d[a] += st->sz[i];
            a = 0, b = u;
            while (a < b) {
                int c = (a + b) / 2;
                if (tm[c] < st->hi[i]) a = c + 1;
                else b = c;
            }
            d[a] -= st->sz[i];
        }
        int64_t run = 0;
        load = 0;
        for (int i = 0; i + 1 < u; i++) {
            run += d[i];
            if (i == 0) load = run;
            else if (run != load) {
                load = -1;
                break;
            }
        }
    }
    free(d);
    free(tm);
    return load;
}

/* The passes' orders (see the opening).  Measured, the strip search alone on the 400-buffer
 * perfect packings k = 1..80 at 625M units, and k = 81..200 never looked at while choosing:
 * these four 52/80 and 79/120; with smallest first and thinnest first in the second pass,
 * 51 and 79; the first order alone 44 and 68. */
static const strip_order strip_passes[] = {
    {0, STRIP_LEAD_THIN}, {1, STRIP_LEAD_ALTERNATE}, {0, STRIP_LEAD_THICK}, {1, STRIP_LEAD_THICK}};
#define STRIP_PASSES ((int)(sizeof strip_passes / sizeof *strip_passes))

/* Buckets of the table of dead sweep states (two keys each, 2 MiB in all).  Measured on
 * the 400-buffer perfect packings k = 1..60 at 625M units: 32 decided as with a sweep's own
 * exact memo, in 1538M units instead of 2342M; 2^19 buckets (16 MiB) 1242M, but the same
 * work took more CPU time (the table outgrows the caches), and the 32 were the same. */
#define STRIP_DEAD_BUCKETS ((size_t)1 << 16)

/* Where the search misses the bound, the groups left at the point behind its best
 * completion get the complete search with 1/16 of its work more (arena_strip_fallback.c).
 * Measured before the passes in other orders: perfect_400_s5 (which they now solve), the
 * completion 1.0605 of the bound put item by item, 1.0176 with the group searched;
 * bench_arena --perfect's 36 misses average 1.0809 and 1.0707 on its two halves, 1.0777 on
 * the first with 1/4, 1.0809 with 1/64. */
#define STRIP_REFINE_SHARE 16

int vp_arena_strip_piece(vp_arena_item *items, const int *idx, int n, int64_t max_work, int64_t *work,
                         int64_t *fallback) {
    *work = 0;
    int m = 0;
    for (int i = 0; i < n; i++) {
        const vp_arena_item *it = &items[idx[i]];
        if (it->size == 0) continue;
        if (it->end <= it->start) return 0; /* an item of no steps: not a flow */
        m++;
    }
    if (m == 0 || m > VP_ARENA_STRIP_MAX_ITEMS || max_work <= 0) return 0;
    strip st = {.limit = max_work};
    int *loc = malloc((size_t)m * sizeof *loc), *all = malloc((size_t)m * sizeof *all);
    st.lo = malloc((size_t)m * sizeof *st.lo);
    st.hi = malloc((size_t)m * sizeof *st.hi);
    st.sz = malloc((size_t)m * sizeof *st.sz);
    st.off = malloc((size_t)m * sizeof *st.off);
    st.z1 = malloc((size_t)m * sizeof *st.z1);
    st.z2 = malloc((size_t)m * sizeof *st.z2);
    st.mark = calloc((size_t)m, 1);
    st.dead.mask = STRIP_DEAD_BUCKETS - 1;
    st.dead.slot = calloc(2 * STRIP_DEAD_BUCKETS, sizeof *st.dead.slot);
    st.fb_off = fallback ? malloc((size_t)m * sizeof *st.fb_off) : NULL;
    int snaps = !fallback || (!vp_strip_snap_alloc(&st.snap, m) & !vp_strip_snap_alloc(&st.best, m));
    st.m = m, st.fb_pending = INT64_MAX;
    int ret = -1;
    if (!loc || !all || !st.lo || !st.hi || !st.sz || !st.off || !st.z1 || !st.z2 || !st.mark || !st.dead.slot ||
        (fallback && !st.fb_off) || !snaps)
        goto done;
    st.fb_top = INT64_MAX; /* none yet */
    int64_t t0 = INT64_MAX, t1 = INT64_MIN;
    for (int i = 0, k = 0; i < n; i++) {
        const vp_arena_item *it = &items[idx[i]];
        if (it->size == 0) continue;
        loc[k] = i, all[k] = k;
        st.lo[k] = it->start, st.hi[k] = it->end, st.sz[k] = it->size, st.off[k] = 0;
        st.z1[k] = vp_strip_mix(2 * (uint64_t)k + 1), st.z2[k] = vp_strip_mix(~(2 * (uint64_t)k));
        if (it->start < t0) t0 = it->start;
        if (it->end > t1) t1 = it->end;
        k++;
    }
    int64_t load = flat_load(&st, m);
    ret = 0;
    if (load > 0) {
        /* a pass in each order: the first with half the work, each other with an equal
         * share of what is left; what one proves (levels without strips, dead sweep
         * states) holds for the next */
        int r = STRIP_OUT;
        for (int p = 0; p < STRIP_PASSES && r == STRIP_OUT && !st.oom; p++) {
            st.order = strip_passes[p];
            st.limit = p == 0 ? max_work / 2 : st.work + (max_work - st.work) / (STRIP_PASSES - p);
            r = vp_strip_solve(&st, all, m, t0, t1, load, 0);
        }
        if (r != STRIP_DONE && fallback && !st.oom) /* the best point's groups again, with a search */
            vp_strip_refine(&st, max_work / STRIP_REFINE_SHARE);
        if (r == STRIP_DONE) { /* buffers of no bytes at 0, as the other searches leave them */
            for (int i = 0; i < n; i++) items[idx[i]].offset = 0;
            for (int k = 0; k < m; k++) items[idx[loc[k]]].offset = st.off[k];
            ret = 1;
        } else if (st.oom) {
            ret = -1;
        } else if (fallback && st.fb_top < INT64_MAX) { /* a completion */
            for (int i = 0; i < n; i++) fallback[i] = 0;
            for (int k = 0; k < m; k++) fallback[loc[k]] = st.fb_off[k];
            ret = 2;
        }
    }
    int64_t most = max_work + (fallback ? max_work / STRIP_REFINE_SHARE : 0);
    *work = st.work < most ? st.work : most;
done:
    free(loc), free(all), free(st.lo), free(st.hi), free(st.sz), free(st.off), free(st.z1), free(st.z2), free(st.mark);
    free(st.failed.slot);
    free(st.solved.slot);
    free(st.placed.slot);
    free(st.dead.slot);
    free(st.fb_off);
    free(st.pend);
    if (fallback) vp_strip_snap_free(&st.snap), vp_strip_snap_free(&st.best);
    return ret;
}
