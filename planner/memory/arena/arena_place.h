/* The arena's placers (arena_place.c): given an order, each puts every item into a gap
 * among the placed items that overlap it in time, best fit or first fit; they give the
 * same offsets and differ in speed (see choose_placer in arena_portfolio.c).  Private to the
 * arena solver. */
#ifndef VP_ARENA_PLACE_H
#define VP_ARENA_PLACE_H

#include <stdint.h>

#include "memory/arena/arena.h"

enum { BLOCK_ITEMS = 128 };

typedef struct rec {
    int64_t off, top;   /* bytes [off, top) */
    int64_t start, end; /* lifetime */
} rec;

typedef struct block {
    int n;
    int64_t t_lo, t_hi; /* min start, max end of its items */
    rec r[BLOCK_ITEMS];
} block;

typedef struct block_list {
    block **b;          /* in offset order */
    int n, cap;         /* blocks in use, allocated */
    block **pool;
    int n_pool;
} block_list;

typedef struct run {
    int64_t a, b; /* [a, b) occupied; a == b: a zero-size item's point */
} run;

typedef struct runlist {
    run *r;
    int n, cap;
} runlist;

typedef struct seg_node {
    runlist cov, all; /* items stored at this node; at this node or below */
} seg_node;

typedef struct head {
    int64_t a; /* start of the list's next run */
    int k;     /* the list */
} head;

typedef struct slot_tree {
    int leaves;          /* power of two >= slots */
    int cap_nodes;       /* allocated nodes (2 * leaves of the largest piece so far) */
    seg_node *node;
    int *lo, *hi;        /* per item (by index into items[]): slot range [lo, hi) */
    int64_t *times;      /* distinct starts and ends of the piece, sorted */
    /* per placement */
    int canon[128], n_canon, anc[128], n_anc;
    int *stamp, cur_stamp;
    const run *lst_r[256]; /* the lists being merged */
    int lst_n[256], lst_pos[256];
    head heap[256];
} slot_tree;

/* Sorted int64 arrays: qsort's comparison, the first index past x, the first at or past x. */
int vp_cmp_i64(const void *a, const void *b);
int vp_upper_index(const int64_t *v, int m, int64_t x);
int vp_lower_index(const int64_t *v, int m, int64_t x);

/* The reference: scans every placed item (placed: room for n indices). */
int64_t vp_place_scan(vp_arena_item *items, const int *order, int n, int best_fit, int *placed);

/* Offset-ordered blocks of compact records: for pieces where most items overlap. */
void vp_block_list_free(block_list *l);
int vp_block_list_prepare(block_list *l, int n); /* room for n items; 0 when out of memory */
int64_t vp_place_blocks(block_list *l, vp_arena_item *items, const int *order, int n, int best_fit);

/* A segment tree over time holding unions of occupied bytes: for sparse overlap. */
void vp_slot_tree_free(slot_tree *t);
int vp_slot_tree_prepare(slot_tree *t, const vp_arena_item *items, const int *idx, int n);
int64_t vp_place_tree(slot_tree *t, vp_arena_item *items, const int *order, int n, int best_fit);

#endif
