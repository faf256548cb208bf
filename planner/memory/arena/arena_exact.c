/* The complete search for offsets: what the greedy portfolio (arena_portfolio.c) cannot
 * prove.
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
 *   item can use, which is what makes the bound bite early;
 * - decomposition: once no unplaced item spans a section boundary, the items left on
 *   either side are independent; each group is searched on its own (MiniMalloc's
 *   dynamic decomposition), so a failure in one group is not retried under every
 *   choice made in another.  The groups keep the last offset placed as their
 *   canonical start (every item after it in a canonical assignment stays above it),
 *   and each is ranked again by the attempt's keys with the crowd of what is left in
 *   it (MiniMalloc's subproblems are; it decides MiniMalloc's I).
 *
 * The capacity is searched between the bound (the highest piece's: no piece needs
 * less than the whole) and the incumbent: each round tries the bound with each rank,
 * then probes between the bound and the incumbent with each rank; a probe left
 * undecided moves the next one halfway up to the incumbent (where the bound is far
 * below the optimum, as in MiniMalloc's D and J, probes near it stay undecided and only
 * those near the incumbent lower it).  A capacity proved infeasible raises the
 * proven lower bound, one solved lowers the incumbent; when they meet the arena is
 * proven optimal.  Each attempt is one of three static ranks (MiniMalloc's
 * width/area/total orders) with a budget of work that doubles every round, so a rank
 * that thrashes is left for another (restarts); every second round jitters those ranks
 * at random, seeded by the round, since the outcome follows the order more than any
 * pruning rule (RESULTS.md: it solved perfect_100, perfect_200 and H); whatever is best
 * when the work runs out is kept (anytime).  The decision itself is arena_exact_search.c.
 * A quarter of the work is kept for the neighbourhood search of arena_exact_lns.c, run
 * after the capacities when the arena is not proven: it re-decides a column of the
 * incumbent with the rest held (MiniMalloc's D and J, where every capacity near the
 * optimum stays undecided).  On a flat piece the strip search (arena_strip.c) goes first;
 * where it misses the bound, the strips it placed, completed (arena_strip_fallback.c),
 * are a second start: the neighbourhood search spends half its work from each.
 *
 * Measured: tools/bench/RESULTS.md, bench_arena --hard. */
#include "memory/arena/arena_exact.h"
#include "memory/arena/arena_exact_search.h"
#include "memory/arena/arena_strip.h"

#include "ir/rng.h"

#include <stdlib.h>
#include <string.h>

static int jit_cmp(const void *pa, const void *pb, void *ctx) {
    const int *key = ctx;
    int a = *(const int *)pa, b = *(const int *)pb;
    if (key[a] != key[b]) return key[a] < key[b] ? -1 : 1;
    return a - b;
}

/* Ranks h, then, with a seed, each item moved down by up to `window` places at random
 * (a key of 1024 rank + a draw below 1024 window, so neighbours swap often and far ones
 * rarely): a restart that is not the same three orders again.  Any rank keeps the
 * search complete; the seed keeps it deterministic. */
void vp_exact_set_ranks(vp_exact *x, int h, uint64_t seed, int window, int *tmp) {
    x->heur = h;
    for (int i = 0; i < x->n; i++) {
        tmp[i] = i;
        x->rank[i] = i; /* ties: the item order */
        x->dyn[i] = x->crowd[i];
    }
    qsort_r(tmp, (size_t)x->n, sizeof *tmp, vp_exact_key_cmp, x);
    for (int r = 0; r < x->n; r++) x->rank[tmp[r]] = r;
    if (seed) {
        int *key = x->gkey; /* free until the search starts; n <= 2048, window <= n: fits an int */
        for (int i = 0; i < x->n; i++) {
            vp_rng r = {seed * 1000003u + (uint64_t)i};
            key[i] = 1024 * x->rank[i] + (int)(vp_rng_next(&r) % (uint64_t)(1024 * window));
            tmp[i] = i;
        }
        qsort_r(tmp, (size_t)x->n, sizeof *tmp, jit_cmp, key);
        for (int r = 0; r < x->n; r++) x->rank[tmp[r]] = r;
    }
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
            if (x->width[j] != x->width[i] && h == 0 && !seed) break; /* sorted by width first: no twin further */
        }
    }
}

/* One decision at capacity c with ranks h, jittered when seed is not 0 (see
 * vp_exact_decide). */
static int decide(vp_exact *x, int h, uint64_t seed, int window, int64_t c, int64_t work, int *scratch) {
    vp_exact_set_ranks(x, h, seed, window, scratch);
    return vp_exact_decide(x, c, work);
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

void vp_exact_free(vp_exact *x) {
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
    free(x->cuts);
    free(x->gkey);
    free(x->gcount);
    free(x->pre);
    free(x->suf);
    free(x->mark_of);
    free(x->placed);
    free(x->dyn);
    free(x->undo);
    free(x->base);
}

/* Fills x from the items that take space (a size and at least one step); loc[k] is
 * the piece index of search item k.  Returns 0 when out of memory. */
int vp_exact_build(vp_exact *x, const vp_arena_item *items, const int *idx, const int *loc, int n) {
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
    x->ord = malloc((3 * N + N * N + 1) * sizeof *x->ord);
    x->gkey = malloc(N * sizeof *x->gkey);
    x->mark_of = malloc(N * sizeof *x->mark_of);
    x->placed = malloc(N * sizeof *x->placed);
    x->dyn = malloc(N * sizeof *x->dyn);
    if (!times || !x->size || !x->lo || !x->hi || !x->ov_at || !x->width || !x->crowd || !x->rank || !x->twin ||
        !x->minoff || !x->off || !x->best_off || !x->ord || !x->gkey || !x->mark_of || !x->placed || !x->dyn) {
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
    x->cuts = malloc(M * sizeof *x->cuts);
    x->gcount = malloc((M + 1) * sizeof *x->gcount);
    x->pre = malloc((M + 1) * sizeof *x->pre);
    x->suf = malloc((M + 1) * sizeof *x->suf);
    if (!x->sec_at || !x->floor_ || !x->total || !x->stamp || !x->touched || !x->cuts || !x->gcount || !x->pre || !x->suf)
        return 0;
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

/* the arena of items idx[0..n) at offsets off[] (by position), or at their own offsets */
static int64_t top_of(const vp_arena_item *items, const int *idx, int n, const int64_t *off) {
    int64_t top = 0;
    for (int i = 0; i < n; i++) {
        int64_t t = (off ? off[i] : items[idx[i]].offset) + items[idx[i]].size;
        if (t > top) top = t;
    }
    return top;
}

vp_status vp_arena_exact_piece(vp_arena_item *items, const int *idx, int n, int64_t lower, int64_t enough,
                               int64_t work_budget, vp_arena_exact_result *res, vp_error *err) {
    memset(res, 0, sizeof *res);
    int64_t incumbent = top_of(items, idx, n, NULL);
    res->arena = incumbent;
    res->proven_lower = lower < incumbent ? lower : incumbent;
    if (incumbent <= lower || n == 0 || n > VP_ARENA_EXACT_MAX_ITEMS || work_budget <= 0) return VP_OK;
    /* A piece full at every step of its span: strips and time cuts first (arena_strip.c),
     * with up to half the work; what it finds is the piece's bound, so optimal. */
    int64_t *fallback = NULL, fallback_top = INT64_MAX;
    if (n <= VP_ARENA_STRIP_MAX_ITEMS) {
        int64_t used = 0;
        fallback = malloc((size_t)n * sizeof *fallback);
        if (!fallback) return vp_fail(err, VP_ERR_NOMEM, "out of memory in the arena search (%d buffers)", n);
        int r = vp_arena_strip_piece(items, idx, n, work_budget / 2, &used, fallback);
        if (r < 0) {
            free(fallback);
            return vp_fail(err, VP_ERR_NOMEM, "out of memory in the arena search (%d buffers)", n);
        }
        res->work += used;
        if (r == 2) fallback_top = top_of(items, idx, n, fallback);
        if (r == 1) {
            int64_t top = top_of(items, idx, n, NULL);
            res->arena = top;
            res->proven_lower = top;
            res->attempts = 1;
            free(fallback);
            return VP_OK;
        }
    }
    /* items without bytes or steps sit at 0 and take no part */
    int *loc = malloc((size_t)n * sizeof *loc), *scratch = malloc((size_t)n * sizeof *scratch);
    /* Items of no bytes sit at 0 and take no part.  An item of no steps [a, a) still
     * overlaps what strictly spans a (arena_place.c's placers treat it so); sections do not
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
    vp_exact x;
    memset(&x, 0, sizeof x);
    vp_status s = VP_OK;
    if (loc && scratch && (!ns || instant)) goto done;
    if (!loc || !scratch || !vp_exact_build(&x, items, idx, loc, ns)) {
        s = vp_fail(err, VP_ERR_NOMEM, "out of memory in the arena search (%d buffers)", n);
        goto done;
    }
    /* Every top is a sum of sizes, so capacities need only be multiples of their gcd. */
    /* a quarter of the work is kept for the neighbourhood search around the incumbent
     * (arena_exact_lns.c) after the capacities: on MiniMalloc's D and J the last rounds
     * of the decision search lowered nothing (a tenth to a half kept: the same arenas) */
    int64_t lns_work = work_budget / 4;
    int64_t lo = (lower + g - 1) / g * g, hi = incumbent, left = work_budget - lns_work - res->work;
    int64_t limit = 4 * (int64_t)ns * (ns + x.m); /* about 4n nodes' work */
    int h = 0, round = 0, up = 0;
    while (lo < hi && hi > enough && left > 0) {
        /* a round: the bound with every rank, then three probes between the bound and
         * the incumbent, one per rank (the rank that solves a capacity quickly differs
         * by instance: on MiniMalloc's J only the third finds 1048576, in 400 nodes).
         * A probe left undecided moves the next one up, halfway to the incumbent: where
         * the bound is far below the optimum (MiniMalloc's D and J) probes near it stay
         * undecided and only those near the incumbent lower it. */
        int attempts = 6;
        round++;
        for (int a = 0; a < attempts && lo < hi && hi > enough && left > 0; a++) {
            int64_t c = lo;
            if (a >= 3) {
                int64_t step = (hi - lo) >> (up < 62 ? up + 1 : 62);
                c = (hi - step) / g * g;
                if (c >= hi) c = hi - g;
                if (c <= lo) break;
            }
            int64_t lim = limit < left ? limit : left;
            /* rounds 2, 4, 6, ... jitter the bound's ranks, seeded by the round, within n/8
             * and n/2 places in turn (the probes keep the static ranks: jittered, D and
             * perfect_400 got worse) */
            uint64_t seed = round > 1 && !(round & 1) ? (uint64_t)round : 0;
            int window = (round / 2) & 1 ? ns / 8 + 1 : ns / 2 + 1;
            int r = decide(&x, a < 3 ? a : (a - 3 + h) % 3, a < 3 ? seed : 0, window, c, lim, scratch);
            left -= x.work;
            res->work += x.work;
            res->attempts++;
            if (r < 0) {
                s = vp_fail(err, VP_ERR_NOMEM, "out of memory in the arena search (%d buffers)", n);
                goto done;
            }
            if (r == 1) {
                hi = x.found_arena;
                up = 0;
                for (int i = 0; i < n; i++) items[idx[i]].offset = 0;
                for (int k = 0; k < ns; k++) items[idx[loc[k]]].offset = x.best_off[k];
            } else if (r == 0) {
                lo = c + g; /* no assignment fits c, so none fits below it */
                up = 0;
                if (a < 3) a = -1; /* the bound moved: its ranks again */
            } else if (a >= 3) {
                up++;
            }
        }
        h = (h + 1) % 3;
        limit *= 2;
    }
    /* The strip search's completion (arena_strip_fallback.c): the neighbourhood search gets
     * half its work from the capacities' incumbent and half from the completion, and the
     * lower is kept.  What the strips placed wastes nothing, so the steps from there often
     * go further, even from a higher start, but not always: measured (before the
     * completion's groups got a search of their own) on 40 perfect packings of 400
     * buffers, the steps from the completion alone lowered k = 14, 15, 25, 33 by 3 to 4%
     * and left k = 10, 11, 37, 40 up to 0.7% higher; with both halves none is higher and
     * the 18 misses average 1.0990 of the bound instead of 1.1155 (1.0809 now).  The
     * capacities start from the portfolio's assignment all the same: started from the
     * completion, their probes moved, and one seed ended 1.6% higher.  With a short budget
     * (the solver's quick pass before its improving search) the completion is only kept
     * where it is lower: started from, it changed what the improving search and the full
     * search got, and 3 of 40 ended up to 0.8% higher. */
    int full = work_budget > VP_ARENA_QUICK_WORK;
    if (lo < hi && hi > enough) {
        int64_t used = res->work, floor = lo > enough ? lo : enough;
        int both = full && fallback_top < INT64_MAX;
        if (vp_exact_lns(items, idx, loc, ns, g, floor, &hi, both ? used + (work_budget - used) / 2 : work_budget, &used,
                         &res->attempts) < 0)
            goto nomem;
        if (both && lo < hi && hi > enough) {
            /* the capacities' assignment, lowered, kept in fallback's place */
            int64_t from_completion = fallback_top;
            for (int i = 0; i < n; i++) {
                int64_t o = items[idx[i]].offset;
                items[idx[i]].offset = fallback[i];
                fallback[i] = o;
            }
            fallback_top = hi;
            if (vp_exact_lns(items, idx, loc, ns, g, floor, &from_completion, work_budget, &used, &res->attempts) < 0)
                goto nomem;
            hi = from_completion;
        }
        res->work = used;
    }
    if (fallback_top < hi) {
        for (int i = 0; i < n; i++) items[idx[i]].offset = fallback[i];
        hi = fallback_top;
    }
    if (lo > hi) lo = hi;
    res->arena = hi;
    res->proven_lower = lo > lower ? lo : lower;
    if (res->proven_lower > hi) res->proven_lower = hi;
    goto done;
nomem:
    s = vp_fail(err, VP_ERR_NOMEM, "out of memory in the arena search (%d buffers)", n);
done:
    free(loc);
    free(scratch);
    free(fallback);
    vp_exact_free(&x);
    return s;
}
