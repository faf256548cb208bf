/* The sweep for a strip: a subset of a flat level whose own load is flat.
 *
 * In: a level of the strip search (items flat at H over [T0, T1), no time cut, no item
 * spanning it), its steps in the sweep's direction (strip_steps, listed once a level and
 * pass by vp_strip_steps_build: every buffer's sweep in every round reads the same ones)
 * and one item x at its first step (or, swept back, its last).  Out: every
 * flat subset through x whose first block closes inside the span, each tried as the
 * level's bottom strip by the recursion (arena_strip.c), until one works, none is left,
 * or the round's budget of nodes runs out.  Keeps true: the subsets it tries are flat;
 * a sweep state is remembered as failed only when nothing below it was tried (what was
 * tried depends on the blocks before it, which its key leaves out); the key is in times
 * and names the items still to come, so it holds across rounds, buffers and levels (the
 * rests of neighbouring strips share most of their sweeps).  See arena_strip.c for the
 * method. */
#include "memory/arena/arena_strip_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- the sweep for a flat subset through one buffer ---- */

typedef struct sweep_ctx {
    strip *st;
    const int *S; /* the level's items */
    int ns;
    int64_t T0, T1, H, base; /* the level's span, its bytes and where it sits */
    int rev;            /* the sweep runs back from T1: its steps are the negated times */
    int64_t t0, t1;     /* the span in the sweep's direction */
    int E;              /* the level's steps in that direction (strip_steps) */
    const int64_t *ev;
    const int *eend, *cs, *cl;
    const int64_t *suf;
    const uint64_t *za, *zb;
    int64_t *ending;    /* per step: the strip's bytes ending there */
    int *chosen, nch;   /* the strip so far (positions in S) */
    int *ids, *rest;    /* scratch lists of items */
    int64_t budget;     /* nodes left this round */
    int64_t cuts;       /* strips completed (tried or skipped as tried) */
    strip_keyset *tried; /* strips tried at this level */
} sweep_ctx;

/* an item's first step and end in the sweep's direction */
static int64_t sweep_lo(const sweep_ctx *f, int it) { return f->rev ? -f->st->hi[it] : f->st->lo[it]; }
static int64_t sweep_hi(const sweep_ctx *f, int it) { return f->rev ? -f->st->lo[it] : f->st->hi[it]; }

static int64_t pos_size(const sweep_ctx *f, int p) { return f->st->sz[f->S[p]]; }

/* at one step: biggest first (smallest in a pass so ordered), then the earliest end (so
 * identical buffers sit together) */
static int by_size(const void *pa, const void *pb, void *ctx) {
    const sweep_ctx *f = ctx;
    int a = *(const int *)pa, b = *(const int *)pb;
    if (pos_size(f, a) != pos_size(f, b))
        return (pos_size(f, a) > pos_size(f, b)) != f->st->order.small_first ? -1 : 1;
    if (f->eend[a] != f->eend[b]) return f->eend[a] < f->eend[b] ? -1 : 1;
    return a - b;
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
    strip_key key = vp_strip_set_key(f->st, f->ids, k, h);
    if (vp_strip_keyset_has(&f->st->solved, key)) return STRIP_DONE; /* the same block met again: its offsets are not needed */
    f->st->relative++;
    int r = f->rev ? vp_strip_solve(f->st, f->ids, k, -t, -lm, h, 0) : vp_strip_solve(f->st, f->ids, k, lm, t, h, 0);
    f->st->relative--;
    if (r == STRIP_DONE && vp_strip_keyset_add(&f->st->solved, key) < 0) f->st->oom = 1, r = STRIP_OUT;
    return r;
}

/* a complete flat strip: it at the bottom, the rest above */
static int try_cut(sweep_ctx *f, int64_t h) {
    strip *st = f->st;
    f->cuts++;
    for (int i = 0; i < f->nch; i++) f->ids[i] = f->S[f->chosen[i]];
    strip_key k = vp_strip_set_key(st, f->ids, f->nch, h);
    if (vp_strip_keyset_has(f->tried, k)) return STRIP_FAIL;
    int nr = 0;
    for (int i = 0; i < f->nch; i++) st->mark[f->ids[i]] = 1;
    for (int i = 0; i < f->ns; i++)
        if (!st->mark[f->S[i]]) f->rest[nr++] = f->S[i];
    for (int i = 0; i < f->nch; i++) st->mark[f->ids[i]] = 0;
    if (vp_strip_pend_push(st, f->rest, nr, f->base + h) < 0) return STRIP_OUT;
    int r = vp_strip_solve(st, f->ids, f->nch, f->T0, f->T1, h, f->base);
    if (r == STRIP_DONE) vp_strip_snapshot(st);
    vp_strip_pend_pop(st);
    if (r == STRIP_DONE) r = vp_strip_solve(st, f->rest, nr, f->T0, f->T1, f->H - h, f->base + h);
    if (r == STRIP_FAIL && vp_strip_keyset_add(f->tried, k) < 0) st->oom = 1, r = STRIP_OUT;
    return r;
}

static int sweep(sweep_ctx *f, int ei, int bs, int64_t lm, int64_t h, uint64_t b1, uint64_t b2);

/* the buffers starting at step ei from entry j on that make up `need` bytes */
static int pick(sweep_ctx *f, int ei, int j, int64_t need, int bs, int64_t lm, int64_t h, uint64_t b1, uint64_t b2) {
    if (need == 0) return sweep(f, ei + 1, bs, lm, h, b1, b2);
    strip *st = f->st;
    if (++st->depth > STRIP_MAX_DEPTH) {
        st->depth--;
        return STRIP_OUT;
    }
    int r = STRIP_FAIL;
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
        if (r != STRIP_FAIL) break;
        /* an identical buffer (bytes and end) in its place makes the same strip */
        while (j + 1 < end && st->sz[f->S[f->cl[j + 1]]] == s && f->eend[f->cl[j + 1]] == f->eend[p]) j++;
    }
    st->depth--;
    return r;
}

static int sweep(sweep_ctx *f, int ei, int bs, int64_t lm, int64_t h, uint64_t b1, uint64_t b2) {
    strip *st = f->st;
    st->work += 2 * (1 + f->E - ei); /* the state's key reads the steps left */
    if (st->work > st->limit) return STRIP_OUT;
    if (--f->budget < 0) return STRIP_PAUSE;
    while (ei < f->E && !f->ending[ei]) ei++;
    if (ei == f->E) {
        if (lm > f->t0) {
            int r = check_block(f, bs, lm, f->t1, h);
            if (r != STRIP_DONE) return r;
        }
        return try_cut(f, h);
    }
    int64_t need = f->ending[ei], t = f->ev[ei];
    if (need == h) { /* everything of the strip ends here: a time cut of the strip */
        int r = check_block(f, bs, lm, t, h);
        if (r != STRIP_DONE) return r;
        bs = f->nch, lm = t, b1 = b2 = 0;
    }
    /* The state in times, not step numbers, with the items still to come: what follows
     * from it depends on nothing else, so the key holds in every sweep of the piece (other
     * rounds, other buffers, other levels) */
    uint64_t span = vp_strip_mix((uint64_t)f->t0 * 0x9e3779b97f4a7c15ull ^ (uint64_t)f->t1) ^ vp_strip_mix((uint64_t)h + 3 * (uint64_t)f->rev);
    strip_key k = {span ^ vp_strip_mix((uint64_t)t) ^ vp_strip_mix((uint64_t)lm + 0x632be5abu) ^ b1 ^ f->za[ei],
                   vp_strip_mix(span + (uint64_t)t + 0x7f4a7c15u) ^ b2 ^ f->zb[ei]};
    for (int q = ei; q < f->E; q++)
        if (f->ending[q])
            k.a ^= vp_strip_mix((uint64_t)f->ev[q] * 0x100000001b3ull ^ (uint64_t)f->ending[q]),
                k.b ^= vp_strip_mix((uint64_t)f->ending[q] * 31 + (uint64_t)f->ev[q]);
    k.b |= 1;
    if (vp_strip_cache_has(&st->dead, k)) return STRIP_FAIL;
    int64_t cuts = f->cuts;
    if (++st->depth > STRIP_MAX_DEPTH) {
        st->depth--;
        return STRIP_OUT;
    }
    int r = pick(f, ei, f->cs[ei], need, bs, lm, h, b1, b2);
    st->depth--;
    /* remembered only when no strip came out of it: a strip that did depends on the
     * blocks before this state, which the key leaves out */
    if (r == STRIP_FAIL && f->cuts == cuts) vp_strip_cache_add(&st->dead, k);
    return r;
}

/* the strips through x: the buffers taken with it at the first step, fewest first */
static int first_step(sweep_ctx *f, const int *c0, int nc, int from, int left, int64_t h, uint64_t b1, uint64_t b2) {
    if (left == 0) {
        if (h >= f->H) return STRIP_FAIL;
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
        if (r != STRIP_FAIL) return r;
    }
    return STRIP_FAIL;
}

/* the level's steps in one direction, and per step the items starting there in the pass's
 * size order: the same for every buffer swept through and every round, so built once */
int vp_strip_steps_build(strip *st, const int *S, int ns, int64_t T0, int64_t T1, int rev, strip_steps *sp) {
    memset(sp, 0, sizeof *sp);
    sweep_ctx f = {.st = st, .S = S, .ns = ns, .rev = rev, .t0 = rev ? -T1 : T0, .t1 = rev ? -T0 : T1};
    int64_t t0 = f.t0, t1 = f.t1;
    sp->ev = malloc(2 * (size_t)ns * sizeof *sp->ev);
    sp->eend = malloc((size_t)ns * sizeof *sp->eend);
    sp->sidx = malloc((size_t)ns * sizeof *sp->sidx);
    sp->cs = calloc(2 * (size_t)ns + 2, sizeof *sp->cs);
    sp->cl = malloc((size_t)ns * sizeof *sp->cl);
    sp->suf = malloc((size_t)ns * sizeof *sp->suf);
    int *fill = malloc((2 * (size_t)ns + 2) * sizeof *fill);
    if (!sp->ev || !sp->eend || !sp->sidx || !sp->cs || !sp->cl || !sp->suf || !fill) goto oom;
    int m = 0;
    for (int i = 0; i < ns; i++) {
        if (sweep_lo(&f, S[i]) > t0) sp->ev[m++] = sweep_lo(&f, S[i]);
        if (sweep_hi(&f, S[i]) < t1) sp->ev[m++] = sweep_hi(&f, S[i]);
    }
    qsort(sp->ev, (size_t)m, sizeof *sp->ev, vp_strip_cmp_i64);
    for (int i = 0; i < m; i++)
        if (!sp->E || sp->ev[sp->E - 1] != sp->ev[i]) sp->ev[sp->E++] = sp->ev[i];
    f.ev = sp->ev, f.E = sp->E;
    for (int i = 0; i < ns; i++) {
        sp->eend[i] = sweep_hi(&f, S[i]) < t1 ? find_step(&f, sweep_hi(&f, S[i])) : sp->E;
        sp->sidx[i] = sweep_lo(&f, S[i]) > t0 ? find_step(&f, sweep_lo(&f, S[i])) : -1;
        if (sp->sidx[i] >= 0) sp->cs[sp->sidx[i] + 1]++;
    }
    sp->za = calloc((size_t)sp->E + 1, sizeof *sp->za);
    sp->zb = calloc((size_t)sp->E + 1, sizeof *sp->zb);
    if (!sp->za || !sp->zb) goto oom;
    for (int i = 0; i < ns; i++)
        if (sp->sidx[i] >= 0) sp->za[sp->sidx[i]] ^= st->z1[S[i]], sp->zb[sp->sidx[i]] ^= st->z2[S[i]];
    for (int e = sp->E - 1; e >= 0; e--) sp->za[e] ^= sp->za[e + 1], sp->zb[e] ^= sp->zb[e + 1];
    for (int e = 0; e < sp->E; e++) sp->cs[e + 1] += sp->cs[e];
    for (int e = 0; e <= sp->E; e++) fill[e] = sp->cs[e];
    for (int i = 0; i < ns; i++)
        if (sp->sidx[i] >= 0) sp->cl[fill[sp->sidx[i]]++] = i;
    f.eend = sp->eend;
    for (int e = 0; e < sp->E; e++) {
        qsort_r(sp->cl + sp->cs[e], (size_t)(sp->cs[e + 1] - sp->cs[e]), sizeof *sp->cl, by_size, &f);
        int64_t acc = 0;
        for (int j = sp->cs[e + 1] - 1; j >= sp->cs[e]; j--) acc += st->sz[S[sp->cl[j]]], sp->suf[j] = acc;
    }
    free(fill);
    sp->built = 1;
    return 0;
oom:
    free(fill);
    vp_strip_steps_free(sp);
    st->oom = 1;
    return -1;
}

void vp_strip_steps_free(strip_steps *sp) {
    free(sp->ev), free(sp->eend), free(sp->sidx), free(sp->cs), free(sp->cl), free(sp->suf), free(sp->za), free(sp->zb);
    memset(sp, 0, sizeof *sp);
}

int vp_strip_through(strip *st, const int *S, int ns, int64_t T0, int64_t T1, int64_t H, int64_t base, int x, int rev,
                     const strip_steps *sp, int64_t budget, strip_keyset *tried) {
    sweep_ctx f = {.st = st, .S = S, .ns = ns, .T0 = T0, .T1 = T1, .H = H, .base = base, .rev = rev,
                   .t0 = rev ? -T1 : T0, .t1 = rev ? -T0 : T1, .E = sp->E, .ev = sp->ev, .eend = sp->eend,
                   .cs = sp->cs, .cl = sp->cl, .suf = sp->suf, .za = sp->za, .zb = sp->zb, .budget = budget,
                   .tried = tried};
    int r = STRIP_OUT;
    /* charged as when every sweep built the level's steps itself (the rate the work was
     * calibrated at); built once a level now, so a sweep takes less time than charged */
    st->work += 32 * (int64_t)ns;
    f.ending = calloc((size_t)sp->E + 1, sizeof *f.ending);
    f.chosen = malloc((size_t)ns * sizeof *f.chosen);
    f.ids = malloc((size_t)ns * sizeof *f.ids);
    f.rest = malloc((size_t)ns * sizeof *f.rest);
    int *c0 = malloc((size_t)ns * sizeof *c0);
    if (!f.ending || !f.chosen || !f.ids || !f.rest || !c0) {
        st->oom = 1;
        goto done;
    }
    int nc = 0, xp = -1;
    for (int i = 0; i < ns; i++) {
        if (sp->sidx[i] >= 0) continue;
        if (S[i] == x) xp = i;
        else c0[nc++] = i;
    }
    if (xp < 0) { /* x does not start at t0: no strip through it is built here */
        r = STRIP_FAIL;
        goto done;
    }
    f.chosen[f.nch++] = xp;
    f.ending[f.eend[xp]] += st->sz[x];
    r = STRIP_FAIL;
    for (int left = 0; left <= nc && r == STRIP_FAIL; left++)
        r = first_step(&f, c0, nc, 0, left, st->sz[x], st->z1[x], st->z2[x]);
done:
    free(f.ending), free(f.chosen), free(f.ids), free(f.rest), free(c0);
    return st->oom ? STRIP_OUT : r;
}
