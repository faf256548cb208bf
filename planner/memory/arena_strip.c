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
 * such buffer x in turn (T containing x), with a budget of nodes that doubles every round
 * (which x leads to a small strip is not known; a strip through a thin buffer can be the
 * whole piece).  Remembered: a (set, height) proved impossible; a sweep state (step, bytes
 * pending by end step, the open block) from which no flat T follows; strips already
 * tried at a level.  When the sweep through some x finishes without a strip that works
 * the level fails: complete for assignments made of strips and time cuts (guillotine
 * ones), which is what the perfect packings are; on others it may miss, and the caller
 * goes on with its own search.
 *
 * Measured: tools/bench/RESULTS.md, bench_arena --hard (perfect_400). */
#include "memory/arena_strip.h"

#include <stdlib.h>
#include <string.h>

enum { FAIL = 0, DONE = 1, OUT = -1, PAUSE = 2 };

/* Work is counted at about VP_ARENA_EXACT_WORK_PER_SECOND's rate: 2 units per step a
 * sweep state's key reads and per candidate it tries, 8 per item a level copies and
 * sorts, 32 per item a sweep lists (measured on a quiet machine: 1.25G units in 4.1 to
 * 4.7 s on a perfect packing it does not solve; perfect_400 in 77M, 0.19 to 0.29 s). */

/* frames of the recursion (solve, sweep, pick) before the search gives up: the stack of
 * a planning thread, not the work, is what this protects */
#define STRIP_MAX_DEPTH 20000

typedef struct key2 {
    uint64_t a, b;
} key2;

/* a set of 128-bit keys, open addressing (an all-zero key marks an empty slot, so every
 * key has its low bit set) */
typedef struct keyset {
    key2 *slot;
    size_t cap, used;
} keyset;

static uint64_t mix(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int keyset_has(const keyset *s, key2 k) {
    if (!s->cap) return 0;
    size_t m = s->cap - 1;
    for (size_t i = k.a & m; s->slot[i].b; i = (i + 1) & m)
        if (s->slot[i].a == k.a && s->slot[i].b == k.b) return 1;
    return 0;
}

static int keyset_add(keyset *s, key2 k) {
    if (2 * (s->used + 1) > s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 64;
        key2 *slot = calloc(cap, sizeof *slot);
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

typedef struct strip {
    int64_t *lo, *hi, *sz, *off; /* per item of the piece */
    uint64_t *z1, *z2;           /* a random key per item: a set's key is their xor */
    unsigned char *mark;         /* scratch: the items of a strip, while its rest is listed */
    keyset failed;               /* (set, height) with no assignment of strips */
    keyset solved;               /* blocks (set, height) that have one */
    int64_t work, limit;
    int depth, oom;
} strip;

static key2 set_key(const strip *st, const int *S, int ns, int64_t h) {
    key2 k = {mix((uint64_t)h), mix((uint64_t)h ^ 0x5bd1e995u) | 1};
    for (int i = 0; i < ns; i++) k.a ^= st->z1[S[i]], k.b ^= st->z2[S[i]];
    k.b |= 1;
    return k;
}

static int solve(strip *st, const int *S, int ns, int64_t t0, int64_t t1, int64_t h, int64_t base);

/* ---- the sweep for a flat subset through one buffer ---- */

typedef struct sweep_ctx {
    strip *st;
    const int *S; /* the level's items */
    int ns;
    int64_t T0, T1, H, base; /* the level's span, its bytes and where it sits */
    int rev;            /* the sweep runs back from T1: its steps are the negated times */
    int64_t t0, t1;     /* the span in the sweep's direction */
    int E;              /* steps strictly inside (t0, t1) where something starts or ends */
    int64_t *ev;        /* their times */
    int *eend;          /* per position in S: the index of its end step (E: at t1) */
    int *cs, *cl;       /* per step: the positions starting there, by size down */
    int64_t *suf;       /* per entry of cl: its bytes and those after it at its step */
    int64_t *ending;    /* per step: the strip's bytes ending there */
    int *chosen, nch;   /* the strip so far (positions in S) */
    int *ids, *rest;    /* scratch lists of items */
    unsigned char *in;  /* per position: in the strip */
    int64_t budget;     /* nodes left this round */
    int64_t cuts;       /* strips completed (tried or skipped as tried) */
    keyset memo;        /* sweep states from which no flat strip follows */
    keyset *tried;      /* strips tried at this level */
} sweep_ctx;

static int by_lo(const void *pa, const void *pb, void *ctx) {
    const strip *st = ctx;
    int a = *(const int *)pa, b = *(const int *)pb;
    if (st->lo[a] != st->lo[b]) return st->lo[a] < st->lo[b] ? -1 : 1;
    if (st->hi[a] != st->hi[b]) return st->hi[a] < st->hi[b] ? -1 : 1;
    return a - b;
}

/* thin buffers first (the strips through them are often thin), long first among equals */
static int by_thin(const void *pa, const void *pb, void *ctx) {
    const strip *st = ctx;
    int ca = *(const int *)pa, cb = *(const int *)pb, a = ca >> 1, b = cb >> 1;
    if (st->sz[a] != st->sz[b]) return st->sz[a] < st->sz[b] ? -1 : 1;
    int64_t la = st->hi[a] - st->lo[a], lb = st->hi[b] - st->lo[b];
    if (la != lb) return la > lb ? -1 : 1;
    return ca - cb;
}

/* an item's first step and end in the sweep's direction */
static int64_t sweep_lo(const sweep_ctx *f, int it) { return f->rev ? -f->st->hi[it] : f->st->lo[it]; }
static int64_t sweep_hi(const sweep_ctx *f, int it) { return f->rev ? -f->st->lo[it] : f->st->hi[it]; }

static int64_t pos_size(const sweep_ctx *f, int p) { return f->st->sz[f->S[p]]; }

/* at one step: biggest first, then the earliest end (so identical buffers sit together) */
static int by_big(const void *pa, const void *pb, void *ctx) {
    const sweep_ctx *f = ctx;
    int a = *(const int *)pa, b = *(const int *)pb;
    if (pos_size(f, a) != pos_size(f, b)) return pos_size(f, a) > pos_size(f, b) ? -1 : 1;
    if (f->eend[a] != f->eend[b]) return f->eend[a] < f->eend[b] ? -1 : 1;
    return a - b;
}

static int cmp_i64(const void *pa, const void *pb) {
    int64_t a = *(const int64_t *)pa, b = *(const int64_t *)pb;
    return (a > b) - (a < b);
}

static int find_step(const sweep_ctx *f, int64_t t) {
    int a = 0, b = f->E;
    while (a < b) {
        int m = (a + b) / 2;
        if (f->ev[m] < t) a = m + 1;
        else b = m;
    }
    return a;
}

/* the block of the strip from lm to t (everything in it ends by t) must itself fit h */
static int check_block(sweep_ctx *f, int bs, int64_t lm, int64_t t, int64_t h) {
    int k = 0;
    for (int i = bs; i < f->nch; i++) f->ids[k++] = f->S[f->chosen[i]];
    key2 key = set_key(f->st, f->ids, k, h);
    if (keyset_has(&f->st->solved, key)) return DONE; /* the same block met again: its offsets are not needed */
    int r = f->rev ? solve(f->st, f->ids, k, -t, -lm, h, 0) : solve(f->st, f->ids, k, lm, t, h, 0);
    if (r == DONE && keyset_add(&f->st->solved, key) < 0) f->st->oom = 1, r = OUT;
    return r;
}

/* a complete flat strip: it at the bottom, the rest above */
static int try_cut(sweep_ctx *f, int64_t h) {
    strip *st = f->st;
    f->cuts++;
    for (int i = 0; i < f->nch; i++) f->ids[i] = f->S[f->chosen[i]];
    key2 k = set_key(st, f->ids, f->nch, h);
    if (keyset_has(f->tried, k)) return FAIL;
    int nr = 0;
    for (int i = 0; i < f->nch; i++) st->mark[f->ids[i]] = 1;
    for (int i = 0; i < f->ns; i++)
        if (!st->mark[f->S[i]]) f->rest[nr++] = f->S[i];
    for (int i = 0; i < f->nch; i++) st->mark[f->ids[i]] = 0;
    int r = solve(st, f->ids, f->nch, f->T0, f->T1, h, f->base);
    if (r == DONE) r = solve(st, f->rest, nr, f->T0, f->T1, f->H - h, f->base + h);
    if (r == FAIL && keyset_add(f->tried, k) < 0) st->oom = 1, r = OUT;
    return r;
}

static int sweep(sweep_ctx *f, int ei, int bs, int64_t lm, int64_t h, uint64_t b1, uint64_t b2);

/* the buffers starting at step ei from entry j on that make up `need` bytes */
static int pick(sweep_ctx *f, int ei, int j, int64_t need, int bs, int64_t lm, int64_t h, uint64_t b1, uint64_t b2) {
    if (need == 0) return sweep(f, ei + 1, bs, lm, h, b1, b2);
    strip *st = f->st;
    if (++st->depth > STRIP_MAX_DEPTH) {
        st->depth--;
        return OUT;
    }
    int r = FAIL;
    for (int end = f->cs[ei + 1]; j < end && f->suf[j] >= need; j++) {
        int p = f->cl[j], it = f->S[p];
        int64_t s = st->sz[it];
        st->work += 2;
        if (s > need) continue;
        /* a strip's first block closes before its end (below) */
        if (lm == f->t0 && f->eend[p] == f->E) continue;
        f->chosen[f->nch++] = p;
        f->ending[f->eend[p]] += s;
        r = pick(f, ei, j + 1, need - s, bs, lm, h, b1 ^ st->z1[it], b2 ^ st->z2[it]);
        f->ending[f->eend[p]] -= s;
        f->nch--;
        if (r != FAIL) break;
        /* an identical buffer (bytes and end) in its place makes the same strip */
        while (j + 1 < end && st->sz[f->S[f->cl[j + 1]]] == s && f->eend[f->cl[j + 1]] == f->eend[p]) j++;
    }
    st->depth--;
    return r;
}

static int sweep(sweep_ctx *f, int ei, int bs, int64_t lm, int64_t h, uint64_t b1, uint64_t b2) {
    strip *st = f->st;
    st->work += 2 * (1 + f->E - ei); /* the state's key reads the steps left */
    if (st->work > st->limit) return OUT;
    if (--f->budget < 0) return PAUSE;
    while (ei < f->E && !f->ending[ei]) ei++;
    if (ei == f->E) {
        if (lm > f->t0) {
            int r = check_block(f, bs, lm, f->t1, h);
            if (r != DONE) return r;
        }
        return try_cut(f, h);
    }
    int64_t need = f->ending[ei], t = f->ev[ei];
    if (need == h) { /* everything of the strip ends here: a time cut of the strip */
        int r = check_block(f, bs, lm, t, h);
        if (r != DONE) return r;
        bs = f->nch, lm = t, b1 = b2 = 0;
    }
    key2 k = {mix((uint64_t)ei) ^ mix((uint64_t)lm + 0x632be5abu) ^ b1, mix((uint64_t)ei + 0x7f4a7c15u) ^ b2};
    for (int q = ei; q < f->E; q++)
        if (f->ending[q]) k.a ^= mix((uint64_t)q * 0x100000001b3ull ^ (uint64_t)f->ending[q]), k.b ^= mix((uint64_t)f->ending[q] * 31 + (uint64_t)q);
    k.b |= 1;
    if (keyset_has(&f->memo, k)) return FAIL;
    int64_t cuts = f->cuts;
    if (++st->depth > STRIP_MAX_DEPTH) {
        st->depth--;
        return OUT;
    }
    int r = pick(f, ei, f->cs[ei], need, bs, lm, h, b1, b2);
    st->depth--;
    /* remembered only when no strip came out of it: a strip that did depends on the
     * blocks before this state, which the key leaves out */
    if (r == FAIL && f->cuts == cuts && keyset_add(&f->memo, k) < 0) st->oom = 1, r = OUT;
    return r;
}

/* the strips through x: the buffers taken with it at the first step, fewest first */
static int first_step(sweep_ctx *f, const int *c0, int nc, int from, int left, int64_t h, uint64_t b1, uint64_t b2) {
    if (left == 0) {
        if (h >= f->H) return FAIL;
        return sweep(f, 0, 0, f->t0, h, b1, b2);
    }
    for (int k = from; k <= nc - left; k++) {
        int p = c0[k], it = f->S[p];
        int64_t s = f->st->sz[it];
        if (h + s >= f->H) continue;
        f->chosen[f->nch++] = p;
        f->ending[f->eend[p]] += s;
        int r = first_step(f, c0, nc, k + 1, left - 1, h + s, b1 ^ f->st->z1[it], b2 ^ f->st->z2[it]);
        f->ending[f->eend[p]] -= s;
        f->nch--;
        if (r != FAIL) return r;
    }
    return FAIL;
}

static int strips_through(strip *st, const int *S, int ns, int64_t T0, int64_t T1, int64_t H, int64_t base, int x,
                          int rev, int64_t budget, keyset *tried) {
    sweep_ctx f = {.st = st, .S = S, .ns = ns, .T0 = T0, .T1 = T1, .H = H, .base = base, .rev = rev,
                   .t0 = rev ? -T1 : T0, .t1 = rev ? -T0 : T1, .budget = budget, .tried = tried};
    int64_t t0 = f.t0, t1 = f.t1;
    int r = OUT;
    st->work += 32 * (int64_t)ns; /* the steps and lists built again for each buffer and round */
    f.ev = malloc(2 * (size_t)ns * sizeof *f.ev);
    f.eend = malloc((size_t)ns * sizeof *f.eend);
    f.cs = calloc(2 * (size_t)ns + 2, sizeof *f.cs);
    f.cl = malloc((size_t)ns * sizeof *f.cl);
    f.suf = malloc((size_t)ns * sizeof *f.suf);
    f.ending = calloc(2 * (size_t)ns + 1, sizeof *f.ending);
    f.chosen = malloc((size_t)ns * sizeof *f.chosen);
    f.ids = malloc((size_t)ns * sizeof *f.ids);
    f.rest = malloc((size_t)ns * sizeof *f.rest);
    int *c0 = malloc((size_t)ns * sizeof *c0), *sidx = malloc((size_t)ns * sizeof *sidx);
    int *fill = malloc((2 * (size_t)ns + 2) * sizeof *fill);
    if (!f.ev || !f.eend || !f.cs || !f.cl || !f.suf || !f.ending || !f.chosen || !f.ids || !f.rest || !c0 || !sidx || !fill) {
        st->oom = 1;
        goto done;
    }
    int m = 0;
    for (int i = 0; i < ns; i++) {
        if (sweep_lo(&f, S[i]) > t0) f.ev[m++] = sweep_lo(&f, S[i]);
        if (sweep_hi(&f, S[i]) < t1) f.ev[m++] = sweep_hi(&f, S[i]);
    }
    qsort(f.ev, (size_t)m, sizeof *f.ev, cmp_i64);
    f.E = 0;
    for (int i = 0; i < m; i++)
        if (!f.E || f.ev[f.E - 1] != f.ev[i]) f.ev[f.E++] = f.ev[i];
    int nc = 0, xp = -1;
    for (int i = 0; i < ns; i++) {
        f.eend[i] = sweep_hi(&f, S[i]) < t1 ? find_step(&f, sweep_hi(&f, S[i])) : f.E;
        sidx[i] = sweep_lo(&f, S[i]) > t0 ? find_step(&f, sweep_lo(&f, S[i])) : -1;
        if (sidx[i] >= 0) f.cs[sidx[i] + 1]++;
        else if (S[i] == x) xp = i;
        else c0[nc++] = i;
    }
    for (int e = 0; e < f.E; e++) f.cs[e + 1] += f.cs[e];
    for (int e = 0; e <= f.E; e++) fill[e] = f.cs[e];
    for (int i = 0; i < ns; i++)
        if (sidx[i] >= 0) f.cl[fill[sidx[i]]++] = i;
    for (int e = 0; e < f.E; e++) {
        qsort_r(f.cl + f.cs[e], (size_t)(f.cs[e + 1] - f.cs[e]), sizeof *f.cl, by_big, &f);
        int64_t acc = 0;
        for (int j = f.cs[e + 1] - 1; j >= f.cs[e]; j--) acc += st->sz[S[f.cl[j]]], f.suf[j] = acc;
    }
    if (xp < 0) { /* x does not start at t0: no strip through it is built here */
        r = FAIL;
        goto done;
    }
    f.chosen[f.nch++] = xp;
    f.ending[f.eend[xp]] += st->sz[x];
    r = FAIL;
    for (int left = 0; left <= nc && r == FAIL; left++)
        r = first_step(&f, c0, nc, 0, left, st->sz[x], st->z1[x], st->z2[x]);
done:
    free(f.ev), free(f.eend), free(f.cs), free(f.cl), free(f.suf), free(f.ending), free(f.chosen), free(f.ids);
    free(f.rest), free(c0), free(sidx), free(fill), free(f.memo.slot);
    return st->oom ? OUT : r;
}

/* ---- the recursion over time cuts, spanning buffers and strips ---- */

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
            int r = solve(st, v + a, b - a, st->lo[v[a]], reach, H, base);
            if (r != DONE) return r;
            a = b;
        }
        return DONE;
    }
    /* buffers spanning the whole piece go to the bottom */
    int64_t used = 0;
    int nr = 0;
    for (int i = 0; i < ns; i++) {
        if (st->lo[v[i]] == t0 && st->hi[v[i]] == t1) st->off[v[i]] = base + used, used += st->sz[v[i]];
        else v[nr++] = v[i];
    }
    if (used) return used > H ? FAIL : solve(st, v, nr, t0, t1, H - used, base + used);
    /* a strip through each buffer starting at t0 (swept forward) or ending at t1 (swept
     * back) in turn, with a budget that doubles: the end from which a level is proved
     * impossible soonest differs */
    int nc = 0;
    int *c0 = ns > 0 ? malloc(2 * (size_t)ns * sizeof *c0) : NULL;
    if (!c0) {
        st->oom = 1;
        return OUT;
    }
    for (int i = 0; i < ns; i++) {
        if (st->lo[v[i]] == t0) c0[nc++] = 2 * v[i];
        if (st->hi[v[i]] == t1) c0[nc++] = 2 * v[i] + 1;
    }
    qsort_r(c0, (size_t)nc, sizeof *c0, by_thin, st);
    keyset tried = {0};
    int r = FAIL;
    for (int64_t budget = 16;; budget *= 2) {
        int paused = 0;
        for (int i = 0; i < nc; i++) {
            r = strips_through(st, v, ns, t0, t1, H, base, c0[i] >> 1, c0[i] & 1, budget, &tried);
            if (r == PAUSE) paused = 1;
            else break; /* placed; no strip through c0[i] works, so none at all; out */
        }
        if (!paused || r != PAUSE) break;
    }
    free(c0);
    free(tried.slot);
    return r;
}

static int solve(strip *st, const int *S, int ns, int64_t t0, int64_t t1, int64_t h, int64_t base) {
    st->work += 2 * (1 + 4 * (int64_t)ns); /* the key, the copy and the sort */
    if (st->work > st->limit || st->depth >= STRIP_MAX_DEPTH) return OUT;
    if (ns == 0) return h == 0 ? DONE : FAIL;
    if (h <= 0) return FAIL;
    key2 k = set_key(st, S, ns, h);
    if (keyset_has(&st->failed, k)) return FAIL;
    int *v = malloc((size_t)ns * sizeof *v);
    if (!v) {
        st->oom = 1;
        return OUT;
    }
    memcpy(v, S, (size_t)ns * sizeof *v);
    st->depth++;
    int r = solve_in(st, v, ns, t0, t1, h, base);
    st->depth--;
    free(v);
    if (r == FAIL && keyset_add(&st->failed, k) < 0) st->oom = 1, r = OUT;
    return r;
}

/* the piece's bound when its load is the same at every step of its span, else -1 */
static int64_t flat_load(const strip *st, int n) {
    int64_t *d = calloc((size_t)(2 * n), sizeof *d), *tm = malloc((size_t)(2 * n) * sizeof *tm);
    int64_t load = -1;
    if (d && tm) {
        int m = 0;
        for (int i = 0; i < n; i++) tm[m++] = st->lo[i], tm[m++] = st->hi[i];
        qsort(tm, (size_t)m, sizeof *tm, cmp_i64);
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

int vp_arena_strip_piece(vp_arena_item *items, const int *idx, int n, int64_t max_work, int64_t *work) {
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
    int ret = -1;
    if (!loc || !all || !st.lo || !st.hi || !st.sz || !st.off || !st.z1 || !st.z2 || !st.mark) goto done;
    int64_t t0 = INT64_MAX, t1 = INT64_MIN;
    for (int i = 0, k = 0; i < n; i++) {
        const vp_arena_item *it = &items[idx[i]];
        if (it->size == 0) continue;
        loc[k] = i, all[k] = k;
        st.lo[k] = it->start, st.hi[k] = it->end, st.sz[k] = it->size, st.off[k] = 0;
        st.z1[k] = mix(2 * (uint64_t)k + 1), st.z2[k] = mix(~(2 * (uint64_t)k));
        if (it->start < t0) t0 = it->start;
        if (it->end > t1) t1 = it->end;
        k++;
    }
    int64_t load = flat_load(&st, m);
    ret = 0;
    if (load > 0) {
        int r = solve(&st, all, m, t0, t1, load, 0);
        if (r == DONE) { /* buffers of no bytes at 0, as the other searches leave them */
            for (int i = 0; i < n; i++) items[idx[i]].offset = 0;
            for (int k = 0; k < m; k++) items[idx[loc[k]]].offset = st.off[k];
            ret = 1;
        } else if (st.oom) {
            ret = -1;
        }
    }
    *work = st.work < max_work ? st.work : max_work;
done:
    free(loc), free(all), free(st.lo), free(st.hi), free(st.sz), free(st.off), free(st.z1), free(st.z2), free(st.mark);
    free(st.failed.slot);
    free(st.solved.slot);
    return ret;
}
