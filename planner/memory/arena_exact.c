/* The complete search for offsets: what the greedy portfolio in arena.c cannot prove.
 *
 * In: one piece of items (sizes, lifetimes), the bound no assignment beats (the most
 * bytes live at one step), the portfolio's assignment already in the items (the
 * incumbent), and a budget of work.  Out: an assignment no larger, written into the
 * items only when smaller, and the capacity below which the search proved no
 * assignment exists.  Keeps true: never worse than the incumbent; bounded by a count of
 * work (about one unit per item or section a node visits), never by the clock, so a
 * given limit gives the same answer on any machine and under any load (arena.c turns
 * seconds into work at VP_ARENA_EXACT_WORK_PER_SECOND, measured on one machine).
 *
 * The decision at a capacity C (the method of MiniMalloc, Moffitt, ASPLOS 2023, written
 * anew here).  Canonical assignments: any assignment can be pushed down until each item
 * rests on 0 or on the top of an item live with it; such an assignment is rebuilt by
 * placing its items in increasing (offset, rank) order, each at its "floor", the
 * highest top of the placed items it overlaps in time.  So a node only picks which
 * unplaced item comes next, at its floor, among those whose (floor, rank) is not below
 * the last one placed.  Pruning, each keeping at least one canonical assignment whenever
 * any exists:
 * - dominance: an item whose floor is at or above the top some other unplaced item
 *   would have at its own floor is not placed next (that other item fits beneath it, so
 *   an assignment with it lower exists and is reached elsewhere);
 * - identical items (size and lifetime) go in rank order only;
 * - an item that overlaps no unplaced item changes nothing for the rest: when the
 *   subtree under it fails, no other choice at this node can succeed;
 * - inference over sections of time (spans between lifetime boundaries): what is
 *   still to place in a section sits above max(the section's floor, the last offset,
 *   the lowest floor of its unplaced items), so a section where that plus its unplaced
 *   bytes exceeds C ends the branch.  The space lost under that line is waste no later
 *   item can use, which is what makes the bound bite early.
 *
 * The capacity is searched between the bound and the incumbent: first at the bound
 * (where the portfolio failed, the optimum usually is), then by bisection; a capacity
 * proved infeasible raises the proven lower bound, one solved lowers the incumbent.
 * Each attempt is one of three static ranks (MiniMalloc's width/area/total orders) with
 * a node limit that doubles every round, so a rank that thrashes is left for another
 * (restarts); whatever is best when the work runs out is kept (anytime).
 *
 * Measured (tools/bench/RESULTS.md, bench_arena --hard): at 5 s it reaches the bound
 * on MiniMalloc's A, B and C in about 1 s and improves D, E, G, I, J, K on the
 * portfolio, but stays 3.5 to 17% above the best known there (F, H: no better).
 * What MiniMalloc has and this lacks: splitting the search where no unplaced item spans
 * a section boundary (dynamic decomposition). */
#include "memory/arena_exact.h"

#include <stdlib.h>
#include <string.h>

typedef struct undo_rec {
    int what;      /* >= 0: item whose floor changed; < 0: section -1 - what */
    int64_t old;
} undo_rec;

typedef struct exact {
    int n, m;                 /* items, sections */
    int64_t *size;            /* [n] */
    int *lo, *hi;             /* [n] the sections [lo, hi) the item lives in */
    int *ov_at, *ov;          /* overlaps of item i: ov[ov_at[i] .. ov_at[i + 1]) */
    int *sec_at, *sec;        /* items of section s: sec[sec_at[s] .. sec_at[s + 1]), the
                                 sec_left[s] unplaced ones first */
    int *sec_left;            /* [m] */
    int *span_at, *pos;       /* where item i sits in section s: pos[span_at[i] + s - lo[i]] */
    int64_t *width, *crowd;   /* [n] for the ranks: lifetime, most bytes live in its sections */
    int *rank;                /* [n] position in the static order of this attempt */
    int *twin;                /* [n] the identical item ranked just before, or -1 */
    int64_t *minoff;          /* [n] floor: top of the placed items it overlaps */
    int64_t *off;             /* [n] offset while placed, -1 while not */
    int64_t *best_off;        /* [n] the last assignment found */
    int64_t *floor_, *total;  /* [m] lowest offset still usable; unplaced bytes */
    int *stamp, stamp_now;    /* [m] sections touched at this node */
    int *touched;             /* [m] their list */
    int *ord;                 /* orderings per depth, a triangular stack */
    undo_rec *undo;
    int64_t undo_top, undo_cap;
    int64_t capacity;
    int64_t work, work_limit;    /* about one unit per item or section visited */
    int out_of_work;
    int64_t found_arena;
} exact;

static int undo_push(exact *x, int what, int64_t old) {
    if (x->undo_top == x->undo_cap) {
        int64_t cap = x->undo_cap * 2 + 64;
        undo_rec *u = realloc(x->undo, (size_t)cap * sizeof *u);
        if (!u) return 0;
        x->undo = u;
        x->undo_cap = cap;
    }
    x->undo[x->undo_top++] = (undo_rec){what, old};
    return 1;
}

static void undo_to(exact *x, int64_t mark) {
    while (x->undo_top > mark) {
        undo_rec r = x->undo[--x->undo_top];
        if (r.what >= 0) x->minoff[r.what] = r.old;
        else x->floor_[-1 - r.what] = r.old;
    }
}

static int before(const exact *x, int a, int b) {
    if (x->minoff[a] != x->minoff[b]) return x->minoff[a] < x->minoff[b];
    return x->rank[a] < x->rank[b];
}

/* Places item i at its floor and propagates; returns 1 when every section can still
 * hold what is left, 0 when not, -1 out of memory.  *hatless: i overlaps no unplaced item. */
static int place(exact *x, int i, int *hatless) {
    int64_t o = x->minoff[i], top = o + x->size[i];
    x->off[i] = o;
    *hatless = 1;
    int nt = 0;
    int64_t work = x->m + (x->ov_at[i + 1] - x->ov_at[i]) + (x->hi[i] - x->lo[i]);
    x->stamp_now++;
    for (int k = x->ov_at[i]; k < x->ov_at[i + 1]; k++) {
        int j = x->ov[k];
        if (x->off[j] >= 0) continue;
        *hatless = 0;
        if (x->minoff[j] >= top) continue;
        if (!undo_push(x, j, x->minoff[j])) return -1;
        x->minoff[j] = top;
        work += x->hi[j] - x->lo[j];
        for (int s = x->lo[j]; s < x->hi[j]; s++)
            if (x->stamp[s] != x->stamp_now) {
                x->stamp[s] = x->stamp_now;
                x->touched[nt++] = s;
            }
    }
    for (int s = x->lo[i]; s < x->hi[i]; s++) {
        if (!undo_push(x, -1 - s, x->floor_[s])) return -1;
        x->floor_[s] = top;
        x->total[s] -= x->size[i];
        /* out of the section's unplaced items: swapped to the end of them (unplace,
         * undoing in reverse, only has to count it back in) */
        int p = x->pos[x->span_at[i] + s - x->lo[i]], q = x->sec_at[s] + --x->sec_left[s], j = x->sec[q];
        x->sec[p] = j;
        x->pos[x->span_at[j] + s - x->lo[j]] = p;
        x->sec[q] = i;
        x->pos[x->span_at[i] + s - x->lo[i]] = q;
    }
    /* a section's floor is at least the lowest floor of the items still to place there */
    for (int t = 0; t < nt; t++) {
        int s = x->touched[t];
        if (x->floor_[s] >= top) continue; /* its raised items are no higher than the floor */
        int64_t low = INT64_MAX, f = x->floor_[s];
        int k = x->sec_at[s];
        for (int e = k + x->sec_left[s]; k < e && low > f; k++)
            if (x->minoff[x->sec[k]] < low) low = x->minoff[x->sec[k]];
        work += k - x->sec_at[s];
        if (low != INT64_MAX && low > x->floor_[s]) {
            if (!undo_push(x, -1 - s, x->floor_[s])) return -1;
            x->floor_[s] = low;
        }
    }
    x->work += work;
    for (int s = 0; s < x->m; s++) {
        if (!x->total[s]) continue;
        int64_t base = x->floor_[s] > o ? x->floor_[s] : o;
        if (base + x->total[s] > x->capacity) return 0;
    }
    return 1;
}

static void unplace(exact *x, int i, int64_t mark) {
    for (int s = x->lo[i]; s < x->hi[i]; s++) {
        x->total[s] += x->size[i];
        x->sec_left[s]++;
    }
    undo_to(x, mark);
    x->off[i] = -1;
}

/* Depth-first over canonical orders.  prev[0..pu) held the unplaced items at the parent
 * (one of them now placed); cur gets the u unplaced ones sorted by (floor, rank).
 * Returns 1 found, 0 none in this branch (or the work ran out), -1 out of memory. */
static int search(exact *x, const int *prev, int pu, int *cur, int u, int64_t last_off, int last_rank) {
    if (!u) {
        int64_t top = 0;
        for (int i = 0; i < x->n; i++)
            if (x->off[i] + x->size[i] > top) top = x->off[i] + x->size[i];
        memcpy(x->best_off, x->off, (size_t)x->n * sizeof *x->off);
        x->found_arena = top;
        return 1;
    }
    x->work += pu;
    if (x->work > x->work_limit) {
        x->out_of_work = 1;
        return 0;
    }
    int c = 0;
    for (int k = 0; k < pu; k++) { /* insertion sort: the parent's order is nearly right */
        int i = prev[k];
        if (x->off[i] >= 0) continue;
        int at = c++;
        while (at > 0 && before(x, i, cur[at - 1])) {
            cur[at] = cur[at - 1];
            at--;
        }
        cur[at] = i;
    }
    int64_t min_top = INT64_MAX;
    for (int k = 0; k < u; k++) {
        int64_t t = x->minoff[cur[k]] + x->size[cur[k]];
        if (t < min_top) min_top = t;
    }
    if (min_top > x->capacity) return 0;
    int *next = cur + u;
    for (int k = 0; k < u; k++) {
        int i = cur[k];
        int64_t o = x->minoff[i];
        if (o < last_off || (o == last_off && x->rank[i] < last_rank)) continue; /* not canonical */
        if (o >= min_top) break;                       /* dominated, and so is every later one */
        if (o + x->size[i] > x->capacity) continue;
        if (x->twin[i] >= 0 && x->off[x->twin[i]] < 0) continue; /* its twin goes first */
        int64_t mark = x->undo_top;
        int hatless;
        int ok = place(x, i, &hatless);
        int r = ok < 0 ? -1 : ok ? search(x, cur, u, next, u - 1, o, x->rank[i]) : 0;
        unplace(x, i, mark);
        if (r || x->out_of_work) return r;
        if (hatless) break;
    }
    return 0;
}

/* Ranks for attempt h: 0 width, area, crowd; 1 crowd, area, width; 2 crowd, width, area
 * (all descending; MiniMalloc's WAT, TAW, TWA). */
static const exact *g_rank_x; /* qsort has no context argument in C17 */
static int g_rank_h;

static int rank_cmp(const void *pa, const void *pb) {
    const exact *x = g_rank_x;
    int a = *(const int *)pa, b = *(const int *)pb;
    int64_t ka[3], kb[3];
    int64_t wa = x->width[a], wb = x->width[b];
    int64_t aa = x->size[a] * wa, ab = x->size[b] * wb;
    int64_t ta = x->crowd[a], tb = x->crowd[b];
    if (g_rank_h == 0) ka[0] = wa, ka[1] = aa, ka[2] = ta, kb[0] = wb, kb[1] = ab, kb[2] = tb;
    else if (g_rank_h == 1) ka[0] = ta, ka[1] = aa, ka[2] = wa, kb[0] = tb, kb[1] = ab, kb[2] = wb;
    else ka[0] = ta, ka[1] = wa, ka[2] = aa, kb[0] = tb, kb[1] = wb, kb[2] = ab;
    for (int k = 0; k < 3; k++)
        if (ka[k] != kb[k]) return ka[k] > kb[k] ? -1 : 1;
    return a - b;
}

static void set_ranks(exact *x, int h, int *tmp) {
    for (int i = 0; i < x->n; i++) tmp[i] = i;
    g_rank_x = x;
    g_rank_h = h;
    qsort(tmp, (size_t)x->n, sizeof *tmp, rank_cmp);
    for (int r = 0; r < x->n; r++) x->rank[tmp[r]] = r;
    /* twins: identical items keep rank order */
    for (int r = 0; r < x->n; r++) {
        int i = tmp[r];
        x->twin[i] = -1;
        for (int q = r - 1; q >= 0; q--) {
            int j = tmp[q];
            if (x->size[j] == x->size[i] && x->lo[j] == x->lo[i] && x->hi[j] == x->hi[i]) {
                x->twin[i] = j;
                break;
            }
            if (x->width[j] != x->width[i] && g_rank_h == 0) break; /* sorted by width first: no twin further */
        }
    }
}

/* One decision at capacity c with ranks h: 1 found (best_off, found_arena), 0 proved
 * none, 2 undecided (the work ran out), -1 out of memory. */
static int decide(exact *x, int h, int64_t c, int64_t work, int *scratch) {
    x->capacity = c;
    x->work = 0;
    x->work_limit = work;
    x->out_of_work = 0;
    x->undo_top = 0;
    set_ranks(x, h, scratch);
    memset(x->floor_, 0, (size_t)x->m * sizeof *x->floor_);
    memset(x->total, 0, (size_t)x->m * sizeof *x->total);
    for (int i = 0; i < x->n; i++) {
        x->off[i] = -1;
        x->minoff[i] = 0;
        for (int s = x->lo[i]; s < x->hi[i]; s++) x->total[s] += x->size[i];
    }
    for (int s = 0; s < x->m; s++) {
        x->sec_left[s] = x->sec_at[s + 1] - x->sec_at[s];
        if (x->total[s] > c) return 0;
    }
    int *root = x->ord; /* the rank order; the search's levels follow it */
    for (int i = 0; i < x->n; i++) root[x->rank[i]] = i;
    int r = search(x, root, x->n, root + x->n, x->n, 0, -1);
    if (r < 0) return -1;
    if (r == 1) return 1;
    return x->out_of_work ? 2 : 0;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int64_t gcd64(int64_t a, int64_t b) {
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

static void exact_free(exact *x) {
    free(x->size);
    free(x->lo);
    free(x->hi);
    free(x->ov_at);
    free(x->ov);
    free(x->sec_at);
    free(x->sec);
    free(x->sec_left);
    free(x->span_at);
    free(x->pos);
    free(x->width);
    free(x->crowd);
    free(x->rank);
    free(x->twin);
    free(x->minoff);
    free(x->off);
    free(x->best_off);
    free(x->floor_);
    free(x->total);
    free(x->stamp);
    free(x->touched);
    free(x->ord);
    free(x->undo);
}

/* Fills x from the items that take space (a size and at least one step); loc[k] is
 * the piece index of search item k.  Returns 0 when out of memory. */
static int exact_build(exact *x, const vp_arena_item *items, const int *idx, const int *loc, int n) {
    x->n = n;
    size_t N = (size_t)n;
    int64_t *times = malloc(2 * N * sizeof *times);
    x->size = malloc(N * sizeof *x->size);
    x->lo = malloc(N * sizeof *x->lo);
    x->hi = malloc(N * sizeof *x->hi);
    x->ov_at = malloc((N + 1) * sizeof *x->ov_at);
    x->width = malloc(N * sizeof *x->width);
    x->crowd = malloc(N * sizeof *x->crowd);
    x->rank = malloc(N * sizeof *x->rank);
    x->twin = malloc(N * sizeof *x->twin);
    x->minoff = malloc(N * sizeof *x->minoff);
    x->off = malloc(N * sizeof *x->off);
    x->best_off = malloc(N * sizeof *x->best_off);
    x->ord = malloc((N + N * (N + 1) / 2 + 1) * sizeof *x->ord);
    if (!times || !x->size || !x->lo || !x->hi || !x->ov_at || !x->width || !x->crowd || !x->rank || !x->twin ||
        !x->minoff || !x->off || !x->best_off || !x->ord) {
        free(times);
        return 0;
    }
    for (int k = 0; k < n; k++) {
        times[2 * k] = items[idx[loc[k]]].start;
        times[2 * k + 1] = items[idx[loc[k]]].end;
    }
    qsort(times, 2 * N, sizeof *times, cmp_i64);
    int nt = 0;
    for (int i = 0; i < 2 * n; i++)
        if (!nt || times[i] != times[nt - 1]) times[nt++] = times[i];
    x->m = nt > 1 ? nt - 1 : 1; /* every item here has a step, so nt >= 2 */
    for (int k = 0; k < n; k++) {
        const vp_arena_item *it = &items[idx[loc[k]]];
        x->size[k] = it->size;
        x->width[k] = it->end - it->start;
        int a = 0, b = nt - 1;
        while (a < b) {
            int mid = (a + b) / 2;
            if (times[mid] < it->start) a = mid + 1;
            else b = mid;
        }
        x->lo[k] = a;
        a = 0, b = nt - 1;
        while (a < b) {
            int mid = (a + b) / 2;
            if (times[mid] < it->end) a = mid + 1;
            else b = mid;
        }
        x->hi[k] = a;
    }
    free(times);
    size_t M = (size_t)x->m;
    x->sec_at = calloc(M + 1, sizeof *x->sec_at);
    x->floor_ = calloc(M, sizeof *x->floor_);
    x->total = calloc(M, sizeof *x->total);
    x->stamp = calloc(M, sizeof *x->stamp);
    x->touched = malloc(M * sizeof *x->touched);
    if (!x->sec_at || !x->floor_ || !x->total || !x->stamp || !x->touched) return 0;
    int64_t span = 0;
    for (int k = 0; k < n; k++) {
        span += x->hi[k] - x->lo[k];
        for (int s = x->lo[k]; s < x->hi[k]; s++) {
            x->sec_at[s + 1]++;
            x->total[s] += x->size[k];
        }
    }
    for (int s = 0; s < x->m; s++) x->sec_at[s + 1] += x->sec_at[s];
    x->sec = malloc((size_t)(span + 1) * sizeof *x->sec);
    x->pos = malloc((size_t)(span + 1) * sizeof *x->pos);
    x->span_at = malloc(N * sizeof *x->span_at);
    x->sec_left = malloc(M * sizeof *x->sec_left);
    if (!x->sec || !x->pos || !x->span_at || !x->sec_left) return 0;
    for (int k = 0, at = 0; k < n; k++) {
        x->crowd[k] = 0;
        x->span_at[k] = at;
        at += x->hi[k] - x->lo[k];
        for (int s = x->lo[k]; s < x->hi[k]; s++) {
            x->pos[x->span_at[k] + s - x->lo[k]] = x->sec_at[s] + x->stamp[s];
            x->sec[x->sec_at[s] + x->stamp[s]++] = k;
            if (x->total[s] > x->crowd[k]) x->crowd[k] = x->total[s];
        }
    }
    memset(x->stamp, 0, M * sizeof *x->stamp);
    /* overlaps: counted, then filled */
    int64_t pairs = 0;
    x->ov_at[0] = 0;
    for (int i = 0; i < n; i++) {
        int c = 0;
        for (int j = 0; j < n; j++)
            c += j != i && x->lo[i] < x->hi[j] && x->lo[j] < x->hi[i];
        pairs += c;
        x->ov_at[i + 1] = (int)pairs;
    }
    x->ov = malloc((size_t)(pairs + 1) * sizeof *x->ov);
    if (!x->ov) return 0;
    for (int i = 0, p = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            if (j != i && x->lo[i] < x->hi[j] && x->lo[j] < x->hi[i]) x->ov[p++] = j;
    return 1;
}

vp_status vp_arena_exact_piece(vp_arena_item *items, const int *idx, int n, int64_t lower, int64_t enough,
                               int64_t work_budget, vp_arena_exact_result *res, vp_error *err) {
    memset(res, 0, sizeof *res);
    int64_t incumbent = 0;
    for (int i = 0; i < n; i++)
        if (items[idx[i]].offset + items[idx[i]].size > incumbent) incumbent = items[idx[i]].offset + items[idx[i]].size;
    res->arena = incumbent;
    res->proven_lower = lower < incumbent ? lower : incumbent;
    if (incumbent <= lower || n == 0 || n > VP_ARENA_EXACT_MAX_ITEMS || work_budget <= 0) return VP_OK;
    /* items without bytes or steps sit at 0 and take no part */
    int *loc = malloc((size_t)n * sizeof *loc), *scratch = malloc((size_t)n * sizeof *scratch);
    /* Items of no bytes sit at 0 and take no part.  An item of no steps [a, a) still
     * overlaps what strictly spans a (arena.c's placers treat it so); sections do not
     * model that, so a piece with one keeps the portfolio's assignment. */
    int ns = 0, instant = 0;
    int64_t g = 0;
    if (loc)
        for (int i = 0; i < n; i++) {
            if (items[idx[i]].size == 0) continue;
            if (items[idx[i]].end == items[idx[i]].start) instant = 1;
            loc[ns++] = i;
            g = gcd64(items[idx[i]].size, g);
        }
    exact x;
    memset(&x, 0, sizeof x);
    vp_status s = VP_OK;
    if (loc && scratch && (!ns || instant)) goto done;
    if (!loc || !scratch || !exact_build(&x, items, idx, loc, ns)) {
        s = vp_fail(err, VP_ERR_NOMEM, "out of memory in the arena search (%d buffers)", n);
        goto done;
    }
    /* Every top is a sum of sizes, so capacities need only be multiples of their gcd. */
    int64_t lo = (lower + g - 1) / g * g, hi = incumbent, left = work_budget;
    int64_t limit = 4 * (int64_t)ns * (ns + x.m); /* about 4n nodes' work */
    int h = 0, round = 0;
    while (lo < hi && hi > enough && left > 0) {
        /* a round: the bound with every rank, then on every second round one bisection
         * step (which lowers the incumbent where the bound is out of reach, but costs
         * the bound's attempts their budget: with it in every round, MiniMalloc's A and
         * B stay 7 to 10% above the bound at 5 s; without it at all they reach it) */
        int attempts = round++ & 1 ? 4 : 3;
        for (int a = 0; a < attempts && lo < hi && hi > enough && left > 0; a++) {
            int64_t c = a < 3 ? lo : lo + (hi - lo) / 2 / g * g;
            if (a == 3 && c <= lo) break;
            int64_t lim = limit < left ? limit : left;
            int r = decide(&x, a < 3 ? a : h, c, lim, scratch);
            left -= x.work;
            res->work += x.work;
            res->attempts++;
            if (r < 0) {
                s = vp_fail(err, VP_ERR_NOMEM, "out of memory in the arena search (%d buffers)", n);
                goto done;
            }
            if (r == 1) {
                hi = x.found_arena;
                for (int i = 0; i < n; i++) items[idx[i]].offset = 0;
                for (int k = 0; k < ns; k++) items[idx[loc[k]]].offset = x.best_off[k];
            } else if (r == 0) {
                lo = c + g; /* no assignment fits c, so none fits below it */
                if (a < 3) a = -1; /* the bound moved: its ranks again */
            }
        }
        h = (h + 1) % 3;
        limit *= 2;
    }
    if (lo > hi) lo = hi;
    res->arena = hi;
    res->proven_lower = lo > lower ? lo : lower;
    if (res->proven_lower > hi) res->proven_lower = hi;
done:
    free(loc);
    free(scratch);
    exact_free(&x);
    return s;
}
