/* The greedy portfolio on one piece of the arena: five orders (size, lifetime, area,
 * conflicts, start), each placed best fit and first fit by the placers of
 * arena_place.c, then a bounded search that perturbs the best order.
 *
 * In: a piece of items (indices into the caller's items), its bound, a budget of
 * placements for the search.  Out: the best offsets found written into the items, the
 * arena, which algorithm gave it, and each algorithm's own arena and time.  Keeps true:
 * the offsets written are the best placement seen (never worse than any order alone);
 * the search's budget is a count of placements, so a budget gives the same offsets
 * anywhere.  arena.c splits the timeline into pieces and runs the complete search
 * after this. */
#include "memory/arena/arena_portfolio.h"
#include "memory/arena/arena_place.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ir/rng.h"

double vp_arena_clock(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int vp_arena_event_cmp(const void *a, const void *b) {
    const vp_arena_event *x = a, *y = b;
    if (x->t != y->t) return x->t < y->t ? -1 : 1;
    return x->delta < y->delta ? -1 : x->delta > y->delta; /* ends before starts at one time */
}

/* ---- orders ---- */

typedef struct keyed {
    int idx;
    int64_t k1, k2, k3; /* compared descending, descending, ascending */
} keyed;

static int by_keys(const void *a, const void *b) {
    const keyed *x = a, *y = b;
    if (x->k1 != y->k1) return x->k1 > y->k1 ? -1 : 1;
    if (x->k2 != y->k2) return x->k2 > y->k2 ? -1 : 1;
    if (x->k3 != y->k3) return x->k3 < y->k3 ? -1 : 1;
    return x->idx - y->idx;
}

enum { ORDER_SIZE, ORDER_LIFETIME, ORDER_AREA, ORDER_CONFLICT, ORDER_START, N_ORDERS };
_Static_assert(N_ORDERS * 2 == VP_ARENA_N_ALGOS, "arena_portfolio.h counts the algorithms");

int vp_arena_algo_count(void) { return N_ORDERS * 2; }

/* One constant name per algorithm: each order (size, lifetime, area, conflicts,
 * start) with best fit, then first fit (plans are made on several threads at once: the
 * joint search's). */
const char *vp_arena_algo_name(int i) {
    static const char *const names[N_ORDERS * 2] = {"size/best-fit",      "size/first-fit",     "lifetime/best-fit",
                                                    "lifetime/first-fit", "area/best-fit",      "area/first-fit",
                                                    "conflicts/best-fit", "conflicts/first-fit", "start/best-fit",
                                                    "start/first-fit"};
    return i >= 0 && i < N_ORDERS * 2 ? names[i] : "?";
}

/* For ORDER_CONFLICT: the most live bytes at any step of an item's lifetime, i.e. how
 * crowded the steps it must fit into are (the tightest items go first). */
static void crowding(const vp_arena_item *items, const int *idx, int n, int64_t *out) {
    vp_arena_event *ev = malloc((size_t)(2 * n + 1) * sizeof *ev);
    int64_t *times = malloc((size_t)(2 * n + 1) * sizeof *times), *live = malloc((size_t)(2 * n + 1) * sizeof *live);
    if (!ev || !times || !live) {
        for (int i = 0; i < n; i++) out[i] = items[idx[i]].size;
        free(ev); free(times); free(live);
        return;
    }
    for (int i = 0; i < n; i++) {
        ev[2 * i] = (vp_arena_event){items[idx[i]].start, items[idx[i]].size};
        ev[2 * i + 1] = (vp_arena_event){items[idx[i]].end, -items[idx[i]].size};
    }
    qsort(ev, (size_t)(2 * n), sizeof *ev, vp_arena_event_cmp);
    /* live[k] = bytes live on [times[k], times[k+1]) */
    int m = 0;
    int64_t cur = 0;
    for (int i = 0; i < 2 * n;) {
        int64_t t = ev[i].t;
        while (i < 2 * n && ev[i].t == t) cur += ev[i++].delta;
        times[m] = t;
        live[m++] = cur;
    }
    /* sparse table of maxima over live[] */
    int levels = 1;
    while ((1 << levels) <= m) levels++;
    int64_t **st = malloc((size_t)levels * sizeof *st);
    st[0] = live;
    for (int l = 1; l < levels; l++) {
        st[l] = malloc((size_t)m * sizeof **st);
        for (int k = 0; k + (1 << l) <= m; k++) {
            int64_t a = st[l - 1][k], b = st[l - 1][k + (1 << (l - 1))];
            st[l][k] = a > b ? a : b;
        }
    }
    for (int i = 0; i < n; i++) {
        const vp_arena_item *it = &items[idx[i]];
        int lo = 0, hi = m; /* first k with times[k] >= start */
        while (lo < hi) {
            int mid = (lo + hi) / 2;
            if (times[mid] < it->start) lo = mid + 1;
            else hi = mid;
        }
        int a = lo;
        lo = a, hi = m; /* first k with times[k] >= end */
        while (lo < hi) {
            int mid = (lo + hi) / 2;
            if (times[mid] < it->end) lo = mid + 1;
            else hi = mid;
        }
        int b = lo; /* range [a, b) */
        if (b <= a) {
            out[i] = it->size;
            continue;
        }
        int l = 0;
        while ((1 << (l + 1)) <= b - a) l++;
        int64_t x = st[l][a], y = st[l][b - (1 << l)];
        out[i] = x > y ? x : y;
    }
    for (int l = 1; l < levels; l++) free(st[l]);
    free(st);
    free(ev);
    free(times);
    free(live);
}

static void make_order(const vp_arena_item *items, const int *idx, int n, int which, const int64_t *crowd, int *order,
                       keyed *scratch) {
    for (int i = 0; i < n; i++) {
        const vp_arena_item *it = &items[idx[i]];
        int64_t life = it->end - it->start;
        keyed *k = &scratch[i];
        k->idx = idx[i];
        switch (which) {
        case ORDER_SIZE: k->k1 = it->size; k->k2 = life; k->k3 = it->start; break;
        case ORDER_LIFETIME: k->k1 = life; k->k2 = it->size; k->k3 = it->start; break;
        case ORDER_AREA: k->k1 = it->size * (life > 0 ? life : 1); k->k2 = it->size; k->k3 = it->start; break;
        case ORDER_CONFLICT: k->k1 = crowd[i]; k->k2 = it->size; k->k3 = it->start; break;
        default: k->k1 = -it->start; k->k2 = it->size; k->k3 = 0; break; /* execution order */
        }
    }
    qsort(scratch, (size_t)n, sizeof *scratch, by_keys);
    for (int i = 0; i < n; i++) order[i] = scratch[i].idx;
}

/* ---- one piece ---- */

struct vp_portfolio {
    vp_arena_item *items;
    const vp_arena_opts *opts;
    vp_arena_result *res;
    int *order, *best_order, *placed, *top;
    keyed *scratch;
    int64_t *offsets_best;
    int64_t *crowd;
    vp_rng rng;
    slot_tree tree;
    block_list blocks;
    int placer;    /* how this piece is placed: PLACE_SCAN, PLACE_BLOCKS, PLACE_TREE */
    double pairs;  /* the piece's overlapping pairs (a placement's work) */
    int64_t best;  /* the best arena of the piece so far (best_order, offsets_best) */
    int best_algo; /* the algorithm that gave the best order */
};

enum { PLACE_SCAN, PLACE_BLOCKS, PLACE_TREE };

/* Pieces smaller than this are placed by the scan, which is faster there (the result
 * is the same either way). */
#ifndef VP_ARENA_SCAN_BELOW
#define VP_ARENA_SCAN_BELOW 48
#endif

/* Past this many items in one piece only the size and lifetime orders run unless
 * asked (run_all, only): one placement of 100,000 items with thousands live at once
 * takes up to seconds, so the whole portfolio would take half a minute. */
#ifndef VP_ARENA_LARGE_PIECE
#define VP_ARENA_LARGE_PIECE 50000
#endif

static int64_t place(vp_portfolio *st, const int *order, int n, int best_fit) {
    if (st->placer == PLACE_TREE) return vp_place_tree(&st->tree, st->items, order, n, best_fit);
    if (st->placer == PLACE_BLOCKS) return vp_place_blocks(&st->blocks, st->items, order, n, best_fit);
    return vp_place_scan(st->items, order, n, best_fit, st->placed);
}

/* Work (items plus overlapping pairs) placements get through per second, by placer
 * (scan, blocks, tree), measured on 150 to 3,000 random and MiniMalloc items. */
static const double place_work_per_second[3] = {1e8, 1.5e8, 1e7};

#ifndef VP_ARENA_FORCE
#define VP_ARENA_FORCE -1
#endif

/* All placers give the same offsets; this picks the one likely fastest for the piece:
 * the slot tree where an item overlaps few others, the blocks where it overlaps a
 * quarter of the piece or more (the tree's lists then hold about as many runs as there
 * are items and merging them costs more than reading the blocks in order; measured at
 * 100,000 items: an eighth, the tree twice as fast; a half, the blocks four times). */
/* Pairs of items live at once (counted twice), the measure of a placement's work.
 * tmp: room for 2n values. */
static double overlap_pairs(const vp_arena_item *items, const int *idx, int n, int64_t *tmp) {
    /* item i overlaps the items that neither start at or after its end nor end at or
     * before its start */
    int64_t *starts = tmp, *ends = tmp + n;
    for (int i = 0; i < n; i++) {
        starts[i] = items[idx[i]].start;
        ends[i] = items[idx[i]].end;
    }
    qsort(starts, (size_t)n, sizeof *starts, vp_cmp_i64);
    qsort(ends, (size_t)n, sizeof *ends, vp_cmp_i64);
    double pairs = 0;
    for (int i = 0; i < n; i++) {
        int start_after = n - vp_lower_index(starts, n, items[idx[i]].end);
        int end_before = vp_upper_index(ends, n, items[idx[i]].start);
        pairs += n - start_after - end_before;
    }
    return pairs;
}

static int choose_placer(const vp_arena_item *items, const int *idx, int n, double pairs) {
    int zero_life = 0;
    for (int i = 0; i < n; i++)
        if (items[idx[i]].start == items[idx[i]].end) zero_life = 1;
    if (VP_ARENA_FORCE >= 0) return VP_ARENA_FORCE == PLACE_TREE && zero_life ? PLACE_BLOCKS : VP_ARENA_FORCE;
    if (n < VP_ARENA_SCAN_BELOW) return PLACE_SCAN;
    if (zero_life) return PLACE_BLOCKS;
    return pairs > (double)n * n / 4 ? PLACE_BLOCKS : PLACE_TREE;
}

static void record_offsets(const vp_arena_item *items, const int *idx, int n, int64_t *out) {
    for (int i = 0; i < n; i++) out[i] = items[idx[i]].offset;
}

static void restore_offsets(vp_arena_item *items, const int *idx, int n, const int64_t *in) {
    for (int i = 0; i < n; i++) items[idx[i]].offset = in[i];
}

/* Positions in the best order of the items that reach the arena's top (items[] holds
 * the best placement); returns their count. */
static int top_positions(const vp_portfolio *st, int n, int64_t arena) {
    int k = 0;
    for (int i = 0; i < n; i++) {
        const vp_arena_item *it = &st->items[st->best_order[i]];
        if (it->offset + it->size == arena) st->top[k++] = i;
    }
    return k;
}
int64_t vp_portfolio_piece(vp_portfolio *st, const int *idx, int n, int64_t bound, int64_t *piece_algo_arena,
                           const char **kept, double search_budget) {
    vp_arena_item *items = st->items;
    int64_t best = INT64_MAX;
    int best_algo = -1;
    int have_crowd = 0;
    double pairs = overlap_pairs(items, idx, n, st->tree.times);
    st->placer = choose_placer(items, idx, n, pairs);
    if (st->placer == PLACE_TREE && !vp_slot_tree_prepare(&st->tree, items, idx, n)) return -1;
    if (st->placer == PLACE_BLOCKS && !vp_block_list_prepare(&st->blocks, n)) return -1;
    int large = n > VP_ARENA_LARGE_PIECE && !st->opts->run_all;
    for (int a = 0; a < N_ORDERS * 2; a++) {
        if (st->opts->only >= 0 && a != st->opts->only) continue;
        if (large && st->opts->only < 0 && a / 2 != ORDER_SIZE && a / 2 != ORDER_LIFETIME) continue;
        int which = a / 2;
        double t0 = vp_arena_clock();
        if (which == ORDER_CONFLICT && !have_crowd) {
            crowding(items, idx, n, st->crowd);
            have_crowd = 1;
        }
        make_order(items, idx, n, which, st->crowd, st->order, st->scratch);
        int64_t arena = place(st, st->order, n, a % 2 == 0);
        if (arena < 0) return -1;
        double t2 = vp_arena_clock();
        st->res->algos[a].seconds += t2 - t0;
        piece_algo_arena[a] = arena;
        if (arena < best) {
            best = arena;
            best_algo = a;
            memcpy(st->best_order, st->order, (size_t)n * sizeof *st->order);
            record_offsets(items, idx, n, st->offsets_best);
        }
        if (best <= bound && !st->opts->run_all) break;
    }
    *kept = vp_arena_algo_name(best_algo);
    restore_offsets(items, idx, n, st->offsets_best);
    st->pairs = pairs;
    st->best = best;
    st->best_algo = best_algo;
    return vp_portfolio_improve(st, idx, n, bound, kept, search_budget);
}

int64_t vp_portfolio_improve(vp_portfolio *st, const int *idx, int n, int64_t bound, const char **kept,
                             double search_budget) {
    vp_arena_item *items = st->items;
    int64_t best = st->best;
    double pairs = st->pairs;
    restore_offsets(items, idx, n, st->offsets_best);
    /* bounded search: perturb the best order and keep what does not get worse (so the
     * walk crosses plateaus; "search" is named only when it beats the portfolio).  Half
     * the moves take an item that reaches the top (those decide the arena) to an
     * earlier place in the order, the rest move a random item anywhere.  Together the
     * two cut the gap left after 0.3 s from 2.7% to 2.0% on average over 24 random
     * instances of 300 to 1,700 buffers (either alone: 2.7%).  The budget is a count
     * of placements, not the clock, so a given budget gives the same result anywhere:
     * a placement's work is taken as its items plus their overlapping pairs, at
     * place_work_per_second (calibrated on one machine; elsewhere the time spent
     * follows the machine's speed, the result does not). */
    int64_t placements = (int64_t)(search_budget * place_work_per_second[st->placer] / ((double)n + pairs));
    int fit = st->best_algo % 2 == 0;
    int n_top = best > bound && n > 2 ? top_positions(st, n, best) : 0;
    while (best > bound && n > 2 && placements-- > 0) {
        memcpy(st->order, st->best_order, (size_t)n * sizeof *st->order);
        int i, j;
        uint64_t r = vp_rng_next(&st->rng);
        if ((r & 1) && n_top) {
            i = st->top[(r >> 1) % (uint64_t)n_top];
            if (!i) continue;
            j = (int)(vp_rng_next(&st->rng) % (uint64_t)i);
        } else {
            i = (int)((r >> 1) % (uint64_t)n);
            j = (int)(vp_rng_next(&st->rng) % (uint64_t)n);
        }
        if (i == j) continue;
        int moved = st->order[i];
        if (i < j) {
            memmove(st->order + i, st->order + i + 1, (size_t)(j - i) * sizeof *st->order);
        } else {
            memmove(st->order + j + 1, st->order + j, (size_t)(i - j) * sizeof *st->order);
        }
        st->order[j] = moved;
        int64_t arena = place(st, st->order, n, fit);
        if (arena < 0) return -1;
        if (arena <= best) { /* equal arenas too: the walk crosses plateaus */
            if (arena < best) *kept = "search";
            best = arena;
            memcpy(st->best_order, st->order, (size_t)n * sizeof *st->order);
            record_offsets(items, idx, n, st->offsets_best);
            n_top = top_positions(st, n, best);
        }
    }
    restore_offsets(items, idx, n, st->offsets_best);
    st->best = best;
    return best;
}

vp_portfolio *vp_portfolio_new(vp_arena_item *items, int n, const vp_arena_opts *opts, vp_arena_result *res) {
    vp_portfolio *st = calloc(1, sizeof *st);
    if (!st) return NULL;
    st->items = items;
    st->opts = opts;
    st->res = res;
    st->rng.state = 0x5eed;
    st->order = malloc((size_t)n * sizeof *st->order);
    st->best_order = malloc((size_t)n * sizeof *st->best_order);
    st->placed = malloc((size_t)n * sizeof *st->placed);
    st->scratch = malloc((size_t)n * sizeof *st->scratch);
    st->offsets_best = malloc((size_t)n * sizeof *st->offsets_best);
    st->crowd = malloc((size_t)n * sizeof *st->crowd);
    st->top = malloc((size_t)n * sizeof *st->top);
    st->tree.lo = malloc((size_t)n * sizeof *st->tree.lo);
    st->tree.hi = malloc((size_t)n * sizeof *st->tree.hi);
    st->tree.times = malloc((size_t)(2 * n) * sizeof *st->tree.times);
    if (!st->order || !st->best_order || !st->placed || !st->scratch || !st->offsets_best || !st->crowd || !st->top ||
        !st->tree.lo || !st->tree.hi || !st->tree.times) {
        vp_portfolio_free(st);
        return NULL;
    }
    return st;
}

void vp_portfolio_free(vp_portfolio *st) {
    if (!st) return;
    free(st->order);
    free(st->best_order);
    free(st->placed);
    free(st->scratch);
    free(st->offsets_best);
    free(st->crowd);
    free(st->top);
    vp_slot_tree_free(&st->tree);
    vp_block_list_free(&st->blocks);
    free(st);
}
