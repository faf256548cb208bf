/* The arena's placers; see arena_place.h. */
#include "memory/arena/arena_place.h"

#include <stdlib.h>
#include <string.h>

/* ---- greedy placement ----
 *
 * Each item, in the order given, goes into a gap among the placed items that overlap
 * it in time: the smallest gap that holds it (best fit) or the lowest (first fit),
 * else on top of them all.  Scanning those items by offset with a cursor (the highest
 * end seen so far) yields the gaps: [cursor, q.offset) wherever q.offset > cursor. */

/* The reference placer: keeps every placed item sorted by offset and scans them all,
 * O(n^2) over a piece.  It serves small pieces and pieces with lifetimes of no steps
 * (which overlap only what strictly contains them, beyond what the slot tree below
 * expresses).  Returns the arena (max end offset). */
int64_t vp_place_scan(vp_arena_item *items, const int *order, int n, int best_fit, int *placed) {
    int n_placed = 0;
    int64_t arena = 0;
    for (int oi = 0; oi < n; oi++) {
        vp_arena_item *it = &items[order[oi]];
        int64_t cursor = 0, best_off = -1, best_gap = INT64_MAX;
        for (int p = 0; p < n_placed; p++) {
            const vp_arena_item *q = &items[placed[p]];
            if (q->start >= it->end || q->end <= it->start) continue; /* disjoint in time */
            if (q->offset > cursor) {
                int64_t gap = q->offset - cursor;
                if (gap >= it->size) {
                    if (!best_fit) {
                        best_off = cursor;
                        break;
                    }
                    if (gap < best_gap) {
                        best_gap = gap;
                        best_off = cursor;
                    }
                }
            }
            int64_t qend = q->offset + q->size;
            if (qend > cursor) cursor = qend;
        }
        it->offset = best_off >= 0 ? best_off : cursor;
        if (it->offset + it->size > arena) arena = it->offset + it->size;
        /* insert by offset */
        int lo = 0, hi = n_placed;
        while (lo < hi) {
            int mid = (lo + hi) / 2;
            if (items[placed[mid]].offset <= it->offset) lo = mid + 1;
            else hi = mid;
        }
        memmove(placed + lo + 1, placed + lo, (size_t)(n_placed - lo) * sizeof *placed);
        placed[lo] = order[oi];
        n_placed++;
    }
    return arena;
}

/* The block placer: the scan's algorithm on records kept by offset in blocks of at
 * most BLOCK_ITEMS, each block with the time span of its items, so a placement reads
 * memory in order and skips the blocks whose items all miss its lifetime.  It serves
 * pieces where most items overlap most others (nested lifetimes of a training step),
 * where any placer must visit about as many items as the scan does. */

void vp_block_list_free(block_list *l) {
    for (int i = 0; i < l->n_pool; i++) free(l->pool[i]);
    free(l->pool);
    free(l->b);
    memset(l, 0, sizeof *l);
}

/* Room for n items; 0 when out of memory. */
int vp_block_list_prepare(block_list *l, int n) {
    int need = n / (BLOCK_ITEMS / 2) + 2;
    if (need > l->cap) {
        block **b = realloc(l->b, (size_t)need * sizeof *b), **p = b ? realloc(l->pool, (size_t)need * sizeof *p) : NULL;
        if (b) l->b = b;
        if (!b || !p) return 0;
        l->pool = p;
        for (; l->n_pool < need; l->n_pool++)
            if (!(l->pool[l->n_pool] = malloc(sizeof(block)))) return 0;
        l->cap = need;
    }
    return 1;
}

static void block_span(block *b) {
    b->t_lo = INT64_MAX;
    b->t_hi = INT64_MIN;
    for (int i = 0; i < b->n; i++) {
        if (b->r[i].start < b->t_lo) b->t_lo = b->r[i].start;
        if (b->r[i].end > b->t_hi) b->t_hi = b->r[i].end;
    }
}

static void block_insert(block_list *l, rec x) {
    if (!l->n) {
        l->b[0] = l->pool[0];
        l->b[0]->n = 0;
        l->n = 1;
    }
    /* the last block whose first item is at or below x.off */
    int lo = 1, hi = l->n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (l->b[mid]->r[0].off <= x.off) lo = mid + 1;
        else hi = mid;
    }
    int bi = lo - 1;
    block *b = l->b[bi];
    if (b->n == BLOCK_ITEMS) { /* split in halves; the pool holds a block per slot of b[] */
        block *nb = l->pool[l->n];
        memmove(l->b + bi + 2, l->b + bi + 1, (size_t)(l->n - bi - 1) * sizeof *l->b);
        l->b[bi + 1] = nb;
        l->n++;
        int half = BLOCK_ITEMS / 2;
        memcpy(nb->r, b->r + half, (size_t)(BLOCK_ITEMS - half) * sizeof *b->r);
        nb->n = BLOCK_ITEMS - half;
        b->n = half;
        block_span(b);
        block_span(nb);
        if (x.off >= nb->r[0].off) b = nb;
    }
    int p = 0, q = b->n; /* after the items at or below x.off */
    while (p < q) {
        int mid = (p + q) / 2;
        if (b->r[mid].off <= x.off) p = mid + 1;
        else q = mid;
    }
    memmove(b->r + p + 1, b->r + p, (size_t)(b->n - p) * sizeof *b->r);
    b->r[p] = x;
    if (!b->n++) b->t_lo = x.start, b->t_hi = x.end;
    if (x.start < b->t_lo) b->t_lo = x.start;
    if (x.end > b->t_hi) b->t_hi = x.end;
}

int64_t vp_place_blocks(block_list *l, vp_arena_item *items, const int *order, int n, int best_fit) {
    int64_t arena = 0;
    l->n = 0;
    for (int oi = 0; oi < n; oi++) {
        vp_arena_item *it = &items[order[oi]];
        const int64_t s = it->start, e = it->end, size = it->size;
        int64_t cursor = 0, best_off = -1, best_gap = INT64_MAX;
        for (int bi = 0; bi < l->n; bi++) {
            const block *b = l->b[bi];
            if (b->t_lo >= e || b->t_hi <= s) continue;
            for (int j = 0; j < b->n; j++) { /* branch-free but for the exit: overlaps are unpredictable */
                const rec *q = &b->r[j];
                int live = (q->start < e) & (q->end > s);
                int64_t gap = q->off - cursor;
                int fits = live & (gap > 0) & (gap >= size) & (gap < best_gap);
                best_gap = fits ? gap : best_gap;
                best_off = fits ? cursor : best_off;
                if (fits && (!best_fit || gap == size)) goto found; /* nothing later fits tighter */
                cursor = live && q->top > cursor ? q->top : cursor;
            }
        }
    found:
        it->offset = best_off >= 0 ? best_off : cursor;
        if (it->offset + size > arena) arena = it->offset + size;
        block_insert(l, (rec){it->offset, it->offset + size, s, e});
    }
    return arena;
}

/* The tree placer.  The gaps the scan finds depend only on the union of the byte
 * ranges [offset, offset + size) of the overlapping items (a zero-size item is a point
 * that splits a gap it lies strictly inside), not on the items themselves, duplicates
 * or the order of equal offsets.  So the placer keeps unions ("runs": sorted, disjoint,
 * touching ranges merged) in a segment tree over the piece's time slots: at each node
 * the union of the items whose slot range covers the node and no ancestor (cov, the
 * canonical cover) and of those stored there or below (all).  The items overlapping
 * slots [l, r) are those stored at a node of the canonical cover of [l, r) or below
 * one (all) and those stored above one (cov of the ancestors), so a placement merges
 * O(log T) run lists by offset, however many items they stand for.  The result is the
 * scan's, byte for byte (tests/test_arena.c checks the properties; the change that
 * brought this placer compared it with the scan on thousands of random instances). */

void vp_slot_tree_free(slot_tree *t) {
    for (int i = 0; t->node && i < t->cap_nodes; i++) {
        free(t->node[i].cov.r);
        free(t->node[i].all.r);
    }
    free(t->node);
    free(t->stamp);
    free(t->lo);
    free(t->hi);
    free(t->times);
    memset(t, 0, sizeof *t);
}

int vp_cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

int vp_upper_index(const int64_t *v, int m, int64_t x) {
    int lo = 0, hi = m;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (v[mid] <= x) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

int vp_lower_index(const int64_t *v, int m, int64_t x) {
    int lo = 0, hi = m;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (v[mid] < x) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* Maps the piece's lifetimes to slot ranges and sizes the tree; 0 when out of memory. */
int vp_slot_tree_prepare(slot_tree *t, const vp_arena_item *items, const int *idx, int n) {
    int m = 0;
    for (int i = 0; i < n; i++) {
        t->times[m++] = items[idx[i]].start;
        t->times[m++] = items[idx[i]].end;
    }
    qsort(t->times, (size_t)m, sizeof *t->times, vp_cmp_i64);
    int u = 0;
    for (int i = 0; i < m; i++)
        if (!u || t->times[u - 1] != t->times[i]) t->times[u++] = t->times[i];
    for (int i = 0; i < n; i++) {
        const vp_arena_item *it = &items[idx[i]];
        t->lo[idx[i]] = vp_lower_index(t->times, u, it->start);
        t->hi[idx[i]] = vp_lower_index(t->times, u, it->end);
    }
    int leaves = 1;
    while (leaves < u - 1) leaves *= 2;
    t->leaves = leaves;
    if (2 * leaves > t->cap_nodes) {
        seg_node *nn = realloc(t->node, (size_t)(2 * leaves) * sizeof *nn);
        int *ns = realloc(t->stamp, (size_t)(2 * leaves) * sizeof *ns);
        if (nn) t->node = nn;
        if (ns) t->stamp = ns;
        if (!nn || !ns) return 0;
        memset(t->node + t->cap_nodes, 0, (size_t)(2 * leaves - t->cap_nodes) * sizeof *nn);
        memset(t->stamp + t->cap_nodes, 0, (size_t)(2 * leaves - t->cap_nodes) * sizeof *ns);
        t->cap_nodes = 2 * leaves;
    }
    return 1;
}

/* Adds [a, b) to a run list, merging the runs it touches; 0 when out of memory. */
static int runlist_add(runlist *l, int64_t a, int64_t b) {
    int lo = 0, hi = l->n; /* first run with end >= a */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (l->r[mid].b < a) lo = mid + 1;
        else hi = mid;
    }
    int j = lo;
    while (j < l->n && l->r[j].a <= b) j++;
    if (j > lo) { /* runs lo..j-1 touch [a, b]: they become one */
        run merged = {l->r[lo].a < a ? l->r[lo].a : a, l->r[j - 1].b > b ? l->r[j - 1].b : b};
        l->r[lo] = merged;
        memmove(l->r + lo + 1, l->r + j, (size_t)(l->n - j) * sizeof *l->r);
        l->n -= j - lo - 1;
        return 1;
    }
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 4;
        run *r = realloc(l->r, (size_t)cap * sizeof *r);
        if (!r) return 0;
        l->r = r;
        l->cap = cap;
    }
    memmove(l->r + lo + 1, l->r + lo, (size_t)(l->n - lo) * sizeof *l->r);
    l->r[lo] = (run){a, b};
    l->n++;
    return 1;
}

/* The canonical nodes of slots [l, r) and their strict ancestors. */
static void slot_tree_nodes(slot_tree *t, int l, int r) {
    t->n_canon = t->n_anc = 0;
    t->cur_stamp++;
    for (l += t->leaves, r += t->leaves; l < r; l >>= 1, r >>= 1) {
        if (l & 1) t->canon[t->n_canon++] = l++;
        if (r & 1) t->canon[t->n_canon++] = --r;
    }
    for (int k = 0; k < t->n_canon; k++)
        for (int a = t->canon[k] >> 1; a >= 1 && t->stamp[a] != t->cur_stamp; a >>= 1) {
            t->stamp[a] = t->cur_stamp;
            t->anc[t->n_anc++] = a;
        }
}

static void heap_down(head *h, int n_heap, int i) {
    head x = h[i];
    for (;;) {
        int c = 2 * i + 1;
        if (c >= n_heap) break;
        if (c + 1 < n_heap && h[c + 1].a < h[c].a) c++;
        if (h[c].a >= x.a) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = x;
}

/* The offset the scan would choose for an item of this size among the runs of the
 * lists gathered in t->lst_*, merged by start through a heap of the lists' heads. */
static int64_t choose_offset(slot_tree *t, int n_lists, int64_t size, int best_fit) {
    int64_t cursor = 0, best_off = -1, best_gap = INT64_MAX;
    head *h = t->heap;
    int n_heap = 0;
    for (int k = 0; k < n_lists; k++) {
        t->lst_pos[k] = 0;
        h[n_heap++] = (head){t->lst_r[k][0].a, k};
    }
    for (int i = n_heap / 2 - 1; i >= 0; i--) heap_down(h, n_heap, i);
    while (n_heap) {
        /* take runs from the first list while they come before every other list's */
        int k = h[0].k, pos = t->lst_pos[k], end = t->lst_n[k];
        const run *r = t->lst_r[k];
        int64_t next = n_heap > 1 ? h[1].a : INT64_MAX;
        if (n_heap > 2 && h[2].a < next) next = h[2].a;
        do {
            run q = r[pos++];
            if (q.a > cursor) {
                int64_t gap = q.a - cursor;
                if (gap >= size) {
                    if (!best_fit || gap == size) return cursor; /* no later gap fits tighter */
                    if (gap < best_gap) {
                        best_gap = gap;
                        best_off = cursor;
                    }
                }
            }
            if (q.b > cursor) cursor = q.b;
        } while (pos < end && r[pos].a <= next);
        t->lst_pos[k] = pos;
        if (pos == end) h[0] = h[--n_heap];
        else h[0].a = r[pos].a;
        if (n_heap > 1) heap_down(h, n_heap, 0);
    }
    return best_off >= 0 ? best_off : cursor;
}

static int gather(slot_tree *t, int n_lists, const runlist *l) {
    if (l->n) {
        t->lst_r[n_lists] = l->r;
        t->lst_n[n_lists++] = l->n;
    }
    return n_lists;
}

/* Returns the arena, or -1 when out of memory. */
int64_t vp_place_tree(slot_tree *t, vp_arena_item *items, const int *order, int n, int best_fit) {
    for (int i = 1; i < 2 * t->leaves; i++) t->node[i].cov.n = t->node[i].all.n = 0;
    int64_t arena = 0;
    for (int oi = 0; oi < n; oi++) {
        vp_arena_item *it = &items[order[oi]];
        slot_tree_nodes(t, t->lo[order[oi]], t->hi[order[oi]]);
        int n_lists = 0;
        for (int k = 0; k < t->n_canon; k++) n_lists = gather(t, n_lists, &t->node[t->canon[k]].all);
        for (int k = 0; k < t->n_anc; k++) n_lists = gather(t, n_lists, &t->node[t->anc[k]].cov);
        int64_t off = choose_offset(t, n_lists, it->size, best_fit);
        it->offset = off;
        if (off + it->size > arena) arena = off + it->size;
        for (int k = 0; k < t->n_canon; k++) { /* a leaf's cov is never read: leaves have no descendants */
            seg_node *c = &t->node[t->canon[k]];
            if (!runlist_add(&c->all, off, off + it->size)) return -1;
            if (t->canon[k] < t->leaves && !runlist_add(&c->cov, off, off + it->size)) return -1;
        }
        for (int k = 0; k < t->n_anc; k++)
            if (!runlist_add(&t->node[t->anc[k]].all, off, off + it->size)) return -1;
    }
    return arena;
}

