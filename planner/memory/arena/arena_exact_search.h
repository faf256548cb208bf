/* The decision search of arena_exact.c, shared by its two files: arena_exact.c (the
 * data, the ranks, the capacities tried) and arena_exact_search.c (one decision at one
 * capacity).  Internal to planner/memory. */
#ifndef VP_ARENA_EXACT_SEARCH_H
#define VP_ARENA_EXACT_SEARCH_H

#include <stdint.h>

typedef struct undo_rec {
    int what;      /* >= 0: item whose floor changed; < 0: section -1 - what */
    int64_t old;
} undo_rec;

typedef struct vp_exact {
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
    int64_t *base;            /* [m] or NULL: bytes below it are taken in section s (the
                                 skyline of items held fixed around a neighbourhood) */
    int *stamp, stamp_now;    /* [m] sections touched at this node */
    int *touched;             /* [m] their list */
    int *ord;                 /* orderings per depth and the groups of decompositions: a stack
                                 of at most 3n + n * n entries (see search) */
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
    int64_t nodes;               /* search calls of this decision (for measurements) */
    int heur;                 /* the attempt's rank keys (vp_exact_key_cmp), which a
                                 decomposition's groups are ranked by again */
    int64_t *dyn;             /* [n] scratch of a ranking: the crowd it reads */
    int out_of_work;
    int64_t found_arena;
} vp_exact;

/* qsort_r order of items by the rank keys of attempt heur (descending): 0 width, area,
 * crowd; 1 crowd, area, width; 2 crowd, width, area (MiniMalloc's WAT, TAW, TWA), the
 * crowd read from dyn[]; ties by rank[].  ctx: the vp_exact. */
int vp_exact_key_cmp(const void *a, const void *b, void *ctx);

/* Whether items rank[] (set by the caller) fit capacity c, spending at most work units:
 * 1 found (best_off, found_arena), 0 proved none, 2 undecided (the work ran out), -1
 * out of memory. */
int vp_exact_decide(vp_exact *x, int64_t c, int64_t work);

/* Built by arena_exact.c from the items that take space, loc[k] the piece index
 * (idx[loc[k]] the item) of search item k: returns 0 when out of memory (free it
 * anyway).  set_ranks: the static ranks of attempt h, jittered within window places
 * when seed is not 0 (tmp: room for n). */
struct vp_arena_item;
int vp_exact_build(vp_exact *x, const struct vp_arena_item *items, const int *idx, const int *loc, int n);
void vp_exact_free(vp_exact *x);
void vp_exact_set_ranks(vp_exact *x, int h, uint64_t seed, int window, int *tmp);

/* The neighbourhood search of arena_exact_lns.c: lowers the assignment in the items
 * (search items loc[0..ns), arena *hi, sizes multiples of g) toward lower while
 * *work_used stays below budget; 0, or -1 out of memory.  Neighbourhoods of
 * VP_LNS_ITEMS, twice and four times as many items, each decided with at most
 * VP_LNS_WORK_PER_PAIR units of work per pair of its items. */
#define VP_LNS_ITEMS 32
#define VP_LNS_WORK_PER_PAIR 64
int vp_exact_lns(struct vp_arena_item *items, const int *idx, const int *loc, int ns, int64_t g, int64_t lower,
                 int64_t *hi, int64_t budget, int64_t *work_used, int *attempts);

#endif
