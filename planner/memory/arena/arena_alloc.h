/* The allocator's replay (arena_alloc.c): offsets for a piece too large for the greedy
 * orders, in O(n log n) whatever its overlap.
 *
 * The greedy orders (arena_place.h) read, for each item, the items placed beside it in
 * time: work of the order of the overlapping pairs, which grows as the square of a long
 * CSV's length.  vp_arena_solve counts the pairs first (vp_arena_overlap_pairs, n log n)
 * and gives a piece whose greedy orders would outrun the time limits to this replay
 * instead, so that the time the limits promise covers everything the command does. */
#ifndef VP_ARENA_ALLOC_H
#define VP_ARENA_ALLOC_H

#include "memory/arena/arena.h"

/* Pairs of items live at one step that one greedy order visits in a second: measured,
 * 100,000 buffers with 5e7 such pairs took the ten orders (and the rest of the solver)
 * 7.6 s on 2 cores of the CI machine, 6.6e7 pairs a second an order; see
 * tools/bench/arena_scale.sh. */
#define VP_ARENA_GREEDY_PAIRS_PER_SECOND 5e7

/* Greedy orders estimated to take more than this many seconds are charged against the
 * limits (arena.c); below it the searches keep their whole budgets. */
#define VP_ARENA_GREEDY_CHARGED_FROM 0.1

/* Offsets for items[idx[0..n)]: each lifetime's start takes the lowest hole that holds
 * it, as a first-fit malloc would.  Returns the arena (highest end), -1 out of memory. */
int64_t vp_place_alloc(vp_arena_item *items, const int *idx, int n);

/* The number of pairs of items[idx[0..n)] live at one step, -1 out of memory. */
int64_t vp_arena_overlap_pairs(const vp_arena_item *items, const int *idx, int n);

/* qsort's order of int64_t. */
int vp_arena_cmp_i64(const void *a, const void *b);

#endif
