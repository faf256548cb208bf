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

#include <stdio.h>
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
    int *ord;                 /* orderings per depth and the groups of decompositions: a stack
                                 of at most n + n * n entries (see search) */
    int *cuts;                /* [m - 1] unplaced items live on both sides of the boundary
                                 after section s; 0 splits the search there */
    int new_cut;              /* set by place: a boundary it spans lost its last unplaced item */
    int *gkey, *gcount;       /* [n], [m + 1] scratch of a decomposition */
    int64_t *mark_of;         /* [n] undo mark of a placed item */
    int *placed, n_placed;    /* [n] placed items in order, so a failed decomposition unwinds */
    int64_t *pre, *suf;       /* [m + 1] scratch of a node: the most unplaced bytes in a section
                                 of the group before s, and from s on */
    undo_rec *undo;
    int64_t undo_top, undo_cap;
    int64_t capacity;
    int64_t work, work_limit;    /* about one unit per item or section visited */
    int out_of_work;
    int64_t found_arena;
    int64_t nodes;
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

/* Places item i at its floor and propagates; returns 1 when every section whose floor
 * it raised can still hold what is left there, 0 when not, -1 out of memory.  The
 * caller has checked the rest (search).  *hatless: i overlaps no unplaced item. */
static int place(exact *x, int i, int *hatless) {
    int64_t o = x->minoff[i], top = o + x->size[i], c = x->capacity;
    x->off[i] = o;
    x->mark_of[i] = x->undo_top;
    x->placed[x->n_placed++] = i;
    *hatless = 1;
    int nt = 0, fail = 0;
    int64_t work = (x->ov_at[i + 1] - x->ov_at[i]) + 2 * (x->hi[i] - x->lo[i]);
    x->new_cut = 0;
    for (int s = x->lo[i]; s + 1 < x->hi[i]; s++)
        if (--x->cuts[s] == 0) x->new_cut = 1;
    for (int s = x->lo[i]; s < x->hi[i]; s++) {
        if (!undo_push(x, -1 - s, x->floor_[s])) return -1;
        x->floor_[s] = top;
        x->total[s] -= x->size[i];
        if (x->total[s] && top + x->total[s] > c) fail = 1;
        /* out of the section's unplaced items: swapped to the end of them (unplace,
         * undoing in reverse, only has to count it back in) */
        int p = x->pos[x->span_at[i] + s - x->lo[i]], q = x->sec_at[s] + --x->sec_left[s], j = x->sec[q];
        x->sec[p] = j;
        x->pos[x->span_at[j] + s - x->lo[j]] = p;
        x->sec[q] = i;
        x->pos[x->span_at[i] + s - x->lo[i]] = q;
    }
    x->stamp_now++;
    for (int k = x->ov_at[i]; k < x->ov_at[i + 1]; k++) {
        int j = x->ov[k];
        if (x->off[j] >= 0) continue;
        *hatless = 0;
        if (x->minoff[j] >= top) continue;
        int64_t was = x->minoff[j];
        if (!undo_push(x, j, was)) return -1;
        x->minoff[j] = top;
        /* Sections whose floor may rise: those where j was the lowest item left.  An
         * unplaced item never sits below its sections' floors (placing raises both
         * alike), so that is where the floor equals j's old floor; i's own sections
         * are at top already, so only j's sections outside i's span are read. */
        int a = x->lo[j], b = x->hi[j];
        work += (x->lo[i] > a ? x->lo[i] - a : 0) + (b > x->hi[i] ? b - x->hi[i] : 0);
        for (int s = a; s < b; s++) {
            if (s == x->lo[i]) s = x->hi[i];
            if (s >= b) break;
            if (x->floor_[s] == was && x->stamp[s] != x->stamp_now) {
                x->stamp[s] = x->stamp_now;
                x->touched[nt++] = s;
            }
        }
    }
    /* a section's floor is at least the lowest floor of the items still to place there */
    for (int t = 0; t < nt; t++) {
        int s = x->touched[t];
        int64_t low = INT64_MAX, f = x->floor_[s];
        int k = x->sec_at[s];
        for (int e = k + x->sec_left[s]; k < e && low > f; k++)
            if (x->minoff[x->sec[k]] < low) low = x->minoff[x->sec[k]];
        work += k - x->sec_at[s];
        if (low != INT64_MAX && low > f) {
            if (!undo_push(x, -1 - s, f)) return -1;
            x->floor_[s] = low;
            if (low + x->total[s] > c) fail = 1;
        }
    }
    /* What is left in a section sits above its floor (checked above where floors
     * changed) and above o (the canonical order; search checked that before placing). */
    x->work += work;
    return !fail;
}

/* Takes back the last item placed. */
static void unplace(exact *x) {
    int i = x->placed[--x->n_placed];
    for (int s = x->lo[i]; s < x->hi[i]; s++) {
        x->total[s] += x->size[i];
        x->sec_left[s]++;
    }
    for (int s = x->lo[i]; s + 1 < x->hi[i]; s++) x->cuts[s]++;
    undo_to(x, x->mark_of[i]);
    x->off[i] = -1;
}

static int search(exact *x, const int *prev, int pu, int *cur, int u, int slo, int shi, int64_t last_off, int last_rank);

/* Item i, just placed, left no unplaced item across some boundaries of [slo, shi): the
 * other u unplaced items of the group, cur[0..u) less i, fall into independent groups,
 * each searched on its own (so the work adds up over the groups instead of multiplying;
 * MiniMalloc's dynamic decomposition).  They keep the canonical order's last (offset,
 * rank): every item after i in a canonical assignment is still after it, whatever group
 * it is in.  A group that fails fails them all; the groups solved before it are taken
 * back.  Groups are laid out at out[] as [size, items...] ending with 0, their searches
 * after that.  Returns as search does; without two groups, searches on as usual. */
static int decompose(exact *x, const int *cur, int u, int i, int *out, int slo, int shi) {
    /* group of an unplaced item: the count of emptied boundaries at or before its start */
    int ng = 1;
    for (int s = x->lo[i]; s + 1 < x->hi[i]; s++)
        if (!x->cuts[s]) x->gcount[ng++] = s + 1; /* the cuts, ascending */
    int nonempty = 0;
    for (int k = 0; k < u; k++) {
        int j = cur[k];
        if (x->off[j] >= 0) continue;
        int a = 1, b = ng; /* groups: the first cut after lo[j] */
        while (a < b) {
            int mid = (a + b) / 2;
            if (x->gcount[mid] <= x->lo[j]) a = mid + 1;
            else b = mid;
        }
        x->gkey[j] = a - 1;
    }
    for (int g = 0; g < ng; g++) x->gcount[g] = 0;
    for (int k = 0; k < u; k++)
        if (x->off[cur[k]] < 0 && !x->gcount[x->gkey[cur[k]]]++) nonempty++;
    x->work += u;
    if (nonempty < 2) return search(x, cur, u, out, u - 1, slo, shi, x->off[i], x->rank[i]);
    /* starts of the groups in out[], keeping the (floor, rank) order inside each */
    int at = 0;
    for (int g = 0; g < ng; g++) {
        int c = x->gcount[g];
        x->gcount[g] = c ? at + 1 : -1;
        if (c) out[at] = c, at += c + 1;
    }
    out[at++] = 0;
    for (int k = 0; k < u; k++) {
        int j = cur[k];
        if (x->off[j] < 0) out[x->gcount[x->gkey[j]]++] = j;
    }
    int *sub = out + at, depth = x->n_placed - 1; /* i stays placed */
    for (int *p = out; *p; p += 1 + *p) {
        int gs = *p, glo = x->m, ghi = 0;
        for (int k = 1; k <= gs; k++) {
            if (x->lo[p[k]] < glo) glo = x->lo[p[k]];
            if (x->hi[p[k]] > ghi) ghi = x->hi[p[k]];
        }
        int r = search(x, p + 1, gs, sub, gs, glo, ghi, x->off[i], x->rank[i]);
        if (r != 1) {
            while (x->n_placed > depth + 1) unplace(x);
            return r;
        }
    }
    return 1;
}

/* Depth-first over canonical orders of one group of items, those whose sections lie in
 * [slo, shi).  prev[0..pu) held its unplaced items at the parent (one of them perhaps
 * placed since); cur gets the u unplaced ones sorted by (floor, rank).  Returns 1 found
 * (the items stay placed), 0 none in this branch (or the work ran out; all taken back),
 * -1 out of memory.  Stack: cur and what follows take at most u * u entries (u + (u -
 * 1)^2 going down a level, u + 2u - 1 + (u - 2)^2 decomposing into groups of at most
 * u - 2). */
static int search(exact *x, const int *prev, int pu, int *cur, int u, int slo, int shi, int64_t last_off, int last_rank) {
    if (!u) return 1;
    x->nodes++;
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
    int have_most = 0; /* pre and suf hold this node's sections */
    for (int k = 0; k < u; k++) {
        int i = cur[k];
        int64_t o = x->minoff[i];
        if (o < last_off || (o == last_off && x->rank[i] < last_rank)) continue; /* not canonical */
        if (o >= min_top) break;                       /* dominated, and so is every later one */
        if (o + x->size[i] > x->capacity) continue;
        if (x->twin[i] >= 0 && x->off[x->twin[i]] < 0) continue; /* its twin goes first */
        /* What place would check of the sections, read first (placing also costs the
         * overlaps): i's own would hold the rest above o + size, every other one
         * above o. */
        if (!have_most) {
            x->pre[0] = x->suf[shi - slo] = 0;
            for (int s = slo; s < shi; s++) {
                int64_t t = x->total[s], p = x->pre[s - slo];
                x->pre[s - slo + 1] = t > p ? t : p;
                t = x->total[shi - 1 - (s - slo)], p = x->suf[shi - slo - (s - slo)];
                x->suf[shi - slo - 1 - (s - slo)] = t > p ? t : p;
            }
            x->work += 2 * (shi - slo);
            have_most = 1;
        }
        int64_t top = o + x->size[i], a = x->pre[x->lo[i] - slo], b = x->suf[x->hi[i] - slo];
        if (o + (a > b ? a : b) > x->capacity) continue;
        int s = x->lo[i], e = x->hi[i];
        while (s < e && (x->total[s] == x->size[i] || top + x->total[s] - x->size[i] <= x->capacity)) s++;
        x->work += s - x->lo[i];
        if (s < e) continue;
        int hatless;
        int ok = place(x, i, &hatless);
        int r = ok < 0 ? -1 : !ok ? 0 : x->new_cut && u > 2 ? decompose(x, cur, u, i, next, slo, shi)
                                                               : search(x, cur, u, next, u - 1, slo, shi, o, x->rank[i]);
        if (ok > 0) have_most = 0; /* the search below used pre and suf */
        if (r == 1) return 1;
        unplace(x);
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
    x->nodes = 0;
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
    memset(x->cuts, 0, (size_t)x->m * sizeof *x->cuts);
    for (int i = 0; i < x->n; i++)
        for (int s = x->lo[i]; s + 1 < x->hi[i]; s++) x->cuts[s]++;
    x->n_placed = 0;
    int *root = x->ord; /* the rank order; the search's levels follow it */
    for (int i = 0; i < x->n; i++) root[x->rank[i]] = i;
    int r = search(x, root, x->n, root + x->n, x->n, 0, x->m, 0, -1);
    if (r < 0) return -1;
    if (r == 0) return x->out_of_work ? 2 : 0;
    int64_t top = 0;
    for (int i = 0; i < x->n; i++)
        if (x->off[i] + x->size[i] > top) top = x->off[i] + x->size[i];
    memcpy(x->best_off, x->off, (size_t)x->n * sizeof *x->off);
    x->found_arena = top;
    return 1;
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
    free(x->cuts);
    free(x->gkey);
    free(x->gcount);
    free(x->pre);
    free(x->suf);
    free(x->mark_of);
    free(x->placed);
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
    x->ord = malloc((N + N * N + 1) * sizeof *x->ord);
    x->gkey = malloc(N * sizeof *x->gkey);
    x->mark_of = malloc(N * sizeof *x->mark_of);
    x->placed = malloc(N * sizeof *x->placed);
    if (!times || !x->size || !x->lo || !x->hi || !x->ov_at || !x->width || !x->crowd || !x->rank || !x->twin ||
        !x->minoff || !x->off || !x->best_off || !x->ord || !x->gkey || !x->mark_of || !x->placed) {
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
#ifdef VP_ARENA_TRACE
            fprintf(stderr, "nodes %lld attempt c %lld rank %d limit %lld -> %d work %lld [lo %lld hi %lld]\n", (long long)x.nodes, (long long)c, a < 3 ? a : h,
                    (long long)lim, r, (long long)x.work, (long long)lo, (long long)hi);
#endif
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
