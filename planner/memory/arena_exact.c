/* The complete search for offsets: what the greedy portfolio in arena.c cannot prove.
 *
 * In: one piece of items (sizes, lifetimes), the bound no assignment beats (the most
 * bytes live at one step) and the portfolio's assignment, already in the items (the
 * incumbent).  Out: an assignment no larger, written into the items only when smaller,
 * and the capacity below which the search proved no assignment exists.  Keeps true:
 * the result is never worse than the incumbent; the search is bounded by a count of
 * nodes, never by the clock, so a given limit always gives the same answer.
 *
 * Canonical assignments (the idea MiniMalloc, Moffitt 2023, builds on; this code is
 * ours).  Any assignment can be pushed down until every item rests on another (offset
 * 0, or the top of an item live at the same time).  Such an assignment is rebuilt by
 * placing its items in increasing (offset, index) order, each at its "height": the
 * highest top of the placed items live when it is.  So the search only chooses which
 * item comes next, among those whose height keeps (offset, index) increasing, and
 * every assignment the capacity admits is reached.
 *
 * Inference over sections of time (the spans between consecutive lifetime boundaries):
 * every item still to place sits at or above the last offset placed and at or above the
 * floor of each section it lives in, with nothing else between; so a section where
 * max(floor, last offset) plus the sizes of the items still to place exceeds the
 * capacity ends the branch.  The space a section loses below the last offset is waste
 * that no later item can use, and this is what makes the bound bite.  Identical items
 * (same size and lifetime) are placed in index order only.
 *
 * Candidates are tried lowest height first (least waste), larger area first among
 * equals.  The capacity starts just below the incumbent and drops below each assignment
 * found, so the search is anytime: whatever it found when the nodes run out is kept. */
#include "memory/arena_exact.h"

#include <stdlib.h>
#include <string.h>

typedef struct exact {
    int n, m;               /* items, sections */
    int64_t *size;          /* [n] */
    int *lo, *hi;           /* [n] sections [lo, hi) the item lives in */
    int *twin;              /* [n] the previous identical item, or -1 */
    int *order;             /* [n] candidate order: larger area first */
    int64_t *floor;         /* [m] top of what is placed in the section */
    int64_t *rem;           /* [m] bytes still to place in the section */
    int64_t *off;           /* [n] offset while placed, -1 while not */
    int64_t *best_off;      /* [n] the last assignment found */
    int64_t *height;        /* [n] scratch: candidates' heights */
    int *cand_stack;        /* [n * (n + 1) / 2 at most] candidates per depth, a stack */
    int64_t cand_top;
    int64_t *undo;          /* saved floors, a stack */
    int64_t undo_top, undo_cap;
    int64_t capacity;
    int64_t nodes, node_limit;
    int found, out_of_nodes;
    int64_t found_arena;
} exact;

static int64_t height_of(const exact *x, int i) {
    int64_t h = 0;
    for (int k = x->lo[i]; k < x->hi[i]; k++)
        if (x->floor[k] > h) h = x->floor[k];
    return h;
}

/* Whether every section can still hold what is left above max(floor, last). */
static int sections_fit(const exact *x, int64_t last) {
    for (int k = 0; k < x->m; k++) {
        if (!x->rem[k]) continue;
        int64_t base = x->floor[k] > last ? x->floor[k] : last;
        if (base + x->rem[k] > x->capacity) return 0;
    }
    return 1;
}

static int push_floors(exact *x, int i) {
    int64_t need = x->undo_top + (x->hi[i] - x->lo[i]);
    if (need > x->undo_cap) {
        int64_t cap = x->undo_cap * 2 > need ? x->undo_cap * 2 : need;
        int64_t *u = realloc(x->undo, (size_t)cap * sizeof *u);
        if (!u) return 0;
        x->undo = u;
        x->undo_cap = cap;
    }
    for (int k = x->lo[i]; k < x->hi[i]; k++) x->undo[x->undo_top++] = x->floor[k];
    return 1;
}

static void pop_floors(exact *x, int i) {
    for (int k = x->hi[i] - 1; k >= x->lo[i]; k--) x->floor[k] = x->undo[--x->undo_top];
}

/* Depth-first over canonical orders; placed items so far have the largest (offset,
 * index) pair (last_off, last_i).  Returns 1 when an assignment was found, 0 when this
 * branch has none, -1 on out of memory. */
static int search(exact *x, int left, int64_t last_off, int last_i) {
    if (!left) {
        int64_t top = 0;
        for (int i = 0; i < x->n; i++)
            if (x->off[i] + x->size[i] > top) top = x->off[i] + x->size[i];
        memcpy(x->best_off, x->off, (size_t)x->n * sizeof *x->off);
        x->found_arena = top;
        x->found = 1;
        return 1;
    }
    if (++x->nodes > x->node_limit) {
        x->out_of_nodes = 1;
        return 0;
    }
    /* candidates, lowest height first (least waste), larger area first among equals */
    int *cand = x->cand_stack + x->cand_top, nc = 0;
    for (int c = 0; c < x->n; c++) {
        int i = x->order[c];
        if (x->off[i] >= 0 || (x->twin[i] >= 0 && x->off[x->twin[i]] < 0)) continue;
        int64_t h = height_of(x, i);
        if (h < last_off || (h == last_off && i < last_i)) continue;
        if (h + x->size[i] > x->capacity) return 0; /* its height only grows: it can never fit */
        x->height[i] = h;
        int at = nc++;
        while (at > 0 && x->height[cand[at - 1]] > h) { /* stable insertion: order breaks ties */
            cand[at] = cand[at - 1];
            at--;
        }
        cand[at] = i;
    }
    x->cand_top += nc;
    int r = 0;
    for (int c = 0; c < nc && !r; c++) {
        int i = cand[c];
        int64_t h = x->height[i];
        if (!push_floors(x, i)) {
            r = -1;
            break;
        }
        x->off[i] = h;
        for (int k = x->lo[i]; k < x->hi[i]; k++) {
            x->floor[k] = h + x->size[i];
            x->rem[k] -= x->size[i];
        }
        r = sections_fit(x, h) ? search(x, left - 1, h, i) : 0;
        for (int k = x->lo[i]; k < x->hi[i]; k++) x->rem[k] += x->size[i];
        pop_floors(x, i);
        x->off[i] = -1;
        if (x->out_of_nodes) break;
    }
    x->cand_top -= nc;
    return r;
}

/* One feasibility search at capacity c: 1 found (best_off, found_arena), 0 proved none,
 * 2 undecided (nodes ran out), -1 out of memory. */
static int try_capacity(exact *x, int64_t c, int64_t nodes) {
    x->capacity = c;
    x->nodes = 0;
    x->node_limit = nodes;
    x->found = x->out_of_nodes = 0;
    memset(x->floor, 0, (size_t)x->m * sizeof *x->floor);
    memset(x->rem, 0, (size_t)x->m * sizeof *x->rem);
    for (int i = 0; i < x->n; i++) {
        x->off[i] = -1;
        for (int k = x->lo[i]; k < x->hi[i]; k++) x->rem[k] += x->size[i];
    }
    int r = sections_fit(x, 0) ? search(x, x->n, 0, -1) : 0;
    if (r < 0) return -1;
    if (x->found) return 1;
    return x->out_of_nodes ? 2 : 0;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static const vp_arena_item *g_sort_items; /* qsort has no context argument in C17 */
static const int *g_sort_idx;

static int by_area_desc(const void *a, const void *b) {
    const vp_arena_item *p = &g_sort_items[g_sort_idx[*(const int *)a]], *q = &g_sort_items[g_sort_idx[*(const int *)b]];
    int64_t ap = p->size * (p->end - p->start), aq = q->size * (q->end - q->start);
    if (ap != aq) return ap < aq ? 1 : -1;
    return *(const int *)a - *(const int *)b;
}

static void exact_free(exact *x) {
    free(x->size);
    free(x->lo);
    free(x->hi);
    free(x->twin);
    free(x->order);
    free(x->floor);
    free(x->rem);
    free(x->off);
    free(x->best_off);
    free(x->undo);
    free(x->height);
    free(x->cand_stack);
}

vp_status vp_arena_exact_piece(vp_arena_item *items, const int *idx, int n, int64_t lower, int64_t node_budget,
                               vp_arena_exact_result *res, vp_error *err) {
    memset(res, 0, sizeof *res);
    int64_t incumbent = 0;
    for (int i = 0; i < n; i++)
        if (items[idx[i]].offset + items[idx[i]].size > incumbent) incumbent = items[idx[i]].offset + items[idx[i]].size;
    res->arena = incumbent;
    res->proven_lower = lower;
    if (incumbent <= lower || n == 0) {
        res->proven_lower = incumbent;
        return VP_OK;
    }
    exact x;
    memset(&x, 0, sizeof x);
    x.n = n;
    int64_t *times = malloc((size_t)(2 * n) * sizeof *times);
    x.size = malloc((size_t)n * sizeof *x.size);
    x.lo = malloc((size_t)n * sizeof *x.lo);
    x.hi = malloc((size_t)n * sizeof *x.hi);
    x.twin = malloc((size_t)n * sizeof *x.twin);
    x.order = malloc((size_t)n * sizeof *x.order);
    x.off = malloc((size_t)n * sizeof *x.off);
    x.best_off = malloc((size_t)n * sizeof *x.best_off);
    x.floor = malloc((size_t)(2 * n) * sizeof *x.floor);
    x.rem = malloc((size_t)(2 * n) * sizeof *x.rem);
    x.height = malloc((size_t)n * sizeof *x.height);
    /* depth d holds at most n - d candidates */
    x.cand_stack = malloc(((size_t)n * (size_t)(n + 1) / 2 + 1) * sizeof *x.cand_stack);
    vp_status s = VP_OK;
    if (!times || !x.size || !x.lo || !x.hi || !x.twin || !x.order || !x.off || !x.best_off || !x.floor || !x.rem ||
        !x.height || !x.cand_stack) {
        s = vp_fail(err, VP_ERR_NOMEM, "out of memory in the arena search (%d buffers)", n);
        goto done;
    }
    /* sections: the spans between consecutive distinct lifetime boundaries */
    for (int i = 0; i < n; i++) {
        times[2 * i] = items[idx[i]].start;
        times[2 * i + 1] = items[idx[i]].end;
    }
    qsort(times, (size_t)(2 * n), sizeof *times, cmp_i64);
    int nt = 0;
    for (int i = 0; i < 2 * n; i++)
        if (!nt || times[i] != times[nt - 1]) times[nt++] = times[i];
    x.m = nt > 1 ? nt - 1 : 1;
    for (int i = 0; i < n; i++) {
        const vp_arena_item *it = &items[idx[i]];
        x.size[i] = it->size;
        int a = 0, b = nt - 1;
        while (a < b) { /* first boundary >= start */
            int mid = (a + b) / 2;
            if (times[mid] < it->start) a = mid + 1;
            else b = mid;
        }
        x.lo[i] = a;
        int c = a;
        while (c < nt && times[c] < it->end) c++;
        x.hi[i] = c > a ? c : a; /* an empty lifetime occupies no section */
        x.order[i] = i;
    }
    g_sort_items = items;
    g_sort_idx = idx;
    qsort(x.order, (size_t)n, sizeof *x.order, by_area_desc);
    for (int i = 0; i < n; i++) {
        x.twin[i] = -1;
        for (int j = i - 1; j >= 0; j--)
            if (x.size[j] == x.size[i] && x.lo[j] == x.lo[i] && x.hi[j] == x.hi[i]) {
                x.twin[i] = j;
                break;
            }
    }
    x.undo_cap = 4 * (int64_t)n + 16;
    x.undo = malloc((size_t)x.undo_cap * sizeof *x.undo);
    if (!x.undo) {
        s = vp_fail(err, VP_ERR_NOMEM, "out of memory in the arena search (%d buffers)", n);
        goto done;
    }

    /* capacity: just below the incumbent, again below each assignment found, until the
     * bound is met, a capacity is proved infeasible (the assignment is then optimal), or
     * the nodes run out (the best found is kept) */
    int64_t lo = lower, hi = incumbent, left = node_budget;
    while (lo < hi && left > 0) {
        int r = try_capacity(&x, hi - 1, left);
        left -= x.nodes;
        res->nodes += x.nodes;
        res->attempts++;
        if (r < 0) {
            s = vp_fail(err, VP_ERR_NOMEM, "out of memory in the arena search (%d buffers)", n);
            goto done;
        }
        if (r == 1) {
            hi = x.found_arena;
            for (int i = 0; i < n; i++) items[idx[i]].offset = x.best_off[i];
        } else if (r == 0) {
            lo = hi;
        } else {
            break;
        }
    }
    res->arena = hi;
    res->proven_lower = lo < hi ? lo : hi;
done:
    free(times);
    exact_free(&x);
    return s;
}
