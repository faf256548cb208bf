/* The allocator's replay: an offset for every item of a piece in O(n log n), whatever
 * the piece's overlap, for pieces too large for the greedy orders (arena_alloc.h).
 *
 * In: items[idx[0..n)] of one piece, any order.  Out: every item's offset; the arena
 * (the highest end offset) is returned, -1 when memory runs out.
 *
 * The piece is replayed as a malloc replays a program: its lifetimes' ends and starts in
 * time order (at one step the ends first, since lifetimes are half-open; the larger
 * buffers first among the starts of one step, then the input order, so the result does
 * not depend on qsort), each start taking the lowest hole that holds it (first fit by
 * address) or the bytes above everything live, each end giving its bytes back, merged
 * with the holes beside it.  The holes are a treap ordered by offset whose nodes carry
 * the largest hole beneath them: the first fit is one walk down, each step O(log n).
 *
 * Keeps true: holes never overlap each other or a live item, and two holes never touch
 * (they would have been merged), so no two items live at one step share a byte. */
#include "memory/arena/arena_alloc.h"

#include <stdlib.h>

typedef struct hole {
    int64_t off, len, max; /* max: the largest len in this subtree */
    uint64_t prio;
    int left, right;
} hole;

typedef struct treap {
    hole *h;
    int root, n_used, free_list; /* free_list threads released nodes through .left */
    uint64_t rng;
} treap;

static int64_t max_of(const treap *t, int i) { return i < 0 ? 0 : t->h[i].max; }

static void update(treap *t, int i) {
    hole *x = &t->h[i];
    x->max = x->len;
    if (max_of(t, x->left) > x->max) x->max = max_of(t, x->left);
    if (max_of(t, x->right) > x->max) x->max = max_of(t, x->right);
}

/* Splits i into offsets below key (*l) and at or above it (*r). */
static void split(treap *t, int i, int64_t key, int *l, int *r) {
    if (i < 0) {
        *l = *r = -1;
        return;
    }
    if (t->h[i].off < key) {
        split(t, t->h[i].right, key, &t->h[i].right, r);
        *l = i;
    } else {
        split(t, t->h[i].left, key, l, &t->h[i].left);
        *r = i;
    }
    update(t, i);
}

/* Every offset in a below every offset in b. */
static int merge(treap *t, int a, int b) {
    if (a < 0) return b;
    if (b < 0) return a;
    if (t->h[a].prio > t->h[b].prio) {
        t->h[a].right = merge(t, t->h[a].right, b);
        update(t, a);
        return a;
    }
    t->h[b].left = merge(t, a, t->h[b].left);
    update(t, b);
    return b;
}

static void insert(treap *t, int64_t off, int64_t len) {
    int i = t->free_list;
    t->free_list = t->h[i].left;
    t->rng ^= t->rng << 13, t->rng ^= t->rng >> 7, t->rng ^= t->rng << 17; /* xorshift: fixed seed, same result anywhere */
    t->h[i] = (hole){off, len, len, t->rng, -1, -1};
    int l, r;
    split(t, t->root, off, &l, &r);
    t->root = merge(t, merge(t, l, i), r);
}

static void erase(treap *t, int64_t off) {
    int l, m, r;
    split(t, t->root, off, &l, &r);
    split(t, r, off + 1, &m, &r);
    if (m >= 0) { /* one node: offsets are distinct */
        t->h[m].left = t->free_list;
        t->free_list = m;
    }
    t->root = merge(t, l, r);
}

/* The lowest hole of at least len bytes, or -1. */
static int first_fit(const treap *t, int64_t len) {
    int i = t->root;
    while (i >= 0 && t->h[i].max >= len) {
        if (max_of(t, t->h[i].left) >= len) i = t->h[i].left;
        else if (t->h[i].len >= len) return i;
        else i = t->h[i].right;
    }
    return -1;
}

/* The hole with the largest offset below key (below = 1) or the smallest at or above it. */
static int neighbour(const treap *t, int64_t key, int below) {
    int i = t->root, found = -1;
    while (i >= 0) {
        if ((t->h[i].off < key) == below) {
            found = i;
            i = below ? t->h[i].right : t->h[i].left;
        } else {
            i = below ? t->h[i].left : t->h[i].right;
        }
    }
    return found;
}

typedef struct event {
    int64_t time, size;
    int item, kind; /* in this order at one step: */
} event;
enum { END, INSTANT, START }; /* INSTANT: a lifetime of no steps [t, t), placed and freed at once */

static int by_time(const void *a, const void *b) {
    const event *x = a, *y = b;
    if (x->time != y->time) return x->time < y->time ? -1 : 1;
    if (x->kind != y->kind) return x->kind - y->kind; /* ends first */
    if (x->size != y->size) return x->size > y->size ? -1 : 1;
    return x->item - y->item;
}

int64_t vp_place_alloc(vp_arena_item *items, const int *idx, int n) {
    event *ev = malloc((size_t)(2 * n + 1) * sizeof *ev);
    treap t = {malloc((size_t)(n + 1) * sizeof *t.h), -1, 0, 0, 0x9e3779b97f4a7c15ull};
    if (!ev || !t.h) {
        free(ev);
        free(t.h);
        return -1;
    }
    /* n + 1 nodes: every end makes at most one hole, and each live item bounds one */
    for (int i = 0; i <= n; i++) t.h[i].left = i < n ? i + 1 : -1;
    int m = 0;
    for (int k = 0; k < n; k++) {
        vp_arena_item *it = &items[idx[k]];
        it->offset = 0;
        if (it->size == 0 || it->end < it->start) continue; /* holds no byte at any step */
        /* [t, t) still meets what is live across t (arena_check.h's rule, as the greedy
         * orders keep it): it takes a hole among those, after the ends at t and before
         * the starts, and gives it back at once */
        if (it->end == it->start) {
            ev[m++] = (event){it->start, it->size, idx[k], INSTANT};
            continue;
        }
        ev[m++] = (event){it->start, it->size, idx[k], START};
        ev[m++] = (event){it->end, it->size, idx[k], END};
    }
    qsort(ev, (size_t)m, sizeof *ev, by_time);
    int64_t top = 0, arena = 0; /* top: the end of the highest live item; above it all is free */
    for (int e = 0; e < m; e++) {
        vp_arena_item *it = &items[ev[e].item];
        if (ev[e].kind != END) {
            int h = first_fit(&t, it->size);
            if (h < 0) {
                it->offset = top;
                if (top + it->size > arena) arena = top + it->size;
                if (ev[e].kind == START) top += it->size;
                continue;
            }
            int64_t off = t.h[h].off, len = t.h[h].len;
            it->offset = off;
            if (ev[e].kind == START) {
                erase(&t, off);
                if (len > it->size) insert(&t, off + it->size, len - it->size);
            }
            continue;
        }
        int64_t off = it->offset, len = it->size;
        int below = neighbour(&t, off, 1);
        if (below >= 0 && t.h[below].off + t.h[below].len == off) {
            off = t.h[below].off;
            len += t.h[below].len;
            erase(&t, off);
        }
        int above = neighbour(&t, off + len, 0);
        if (above >= 0 && t.h[above].off == off + len) {
            len += t.h[above].len;
            erase(&t, t.h[above].off);
        }
        if (off + len == top) top = off; /* the free bytes at the top are no hole */
        else insert(&t, off, len);
    }
    free(ev);
    free(t.h);
    return arena;
}

int64_t vp_arena_overlap_pairs(const vp_arena_item *items, const int *idx, int n) {
    int64_t *starts = malloc((size_t)(n + 1) * sizeof *starts), *ends = malloc((size_t)(n + 1) * sizeof *ends);
    if (!starts || !ends) {
        free(starts);
        free(ends);
        return -1;
    }
    for (int k = 0; k < n; k++) {
        starts[k] = items[idx[k]].start;
        ends[k] = items[idx[k]].end;
    }
    qsort(starts, (size_t)n, sizeof *starts, vp_arena_cmp_i64);
    qsort(ends, (size_t)n, sizeof *ends, vp_arena_cmp_i64);
    /* item k (by start) overlaps every earlier-starting item that has not ended by its
     * start: k minus the lifetimes ended by then */
    int64_t pairs = 0;
    for (int k = 0, ended = 0; k < n; k++) {
        while (ended < n && ends[ended] <= starts[k]) ended++;
        if (k > ended) pairs += k - ended;
    }
    free(starts);
    free(ends);
    return pairs;
}

int vp_arena_cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}
