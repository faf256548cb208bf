/* Offsets for a piece whose load is the same at every step: strips and time cuts.
 * See arena_strip.c for the method. */
#ifndef VP_ARENA_STRIP_H
#define VP_ARENA_STRIP_H

#include "memory/arena/arena.h"

/* Items idx[0..n) of one piece.  When every step of the piece holds the same bytes (the
 * piece's bound) and some assignment reaches that bound by strips and time cuts, writes
 * one such assignment into the items' offsets and returns 1.  Otherwise (the load is not
 * flat, no such assignment exists, or max_work units, about one per node, ran out) the
 * offsets are untouched; when fallback (room for n offsets, by position in idx) is given
 * and strips were placed on the way, the least wasteful of them completed greedily
 * (arena_strip_fallback.c) is written there and the return is 2, else 0.  -1 when out
 * of memory.  *work: the work spent. */
int vp_arena_strip_piece(vp_arena_item *items, const int *idx, int n, int64_t max_work, int64_t *work,
                         int64_t *fallback);

/* Pieces of more items than this are left to the other searches (the recursion's depth
 * grows with the items). */
#define VP_ARENA_STRIP_MAX_ITEMS 1024

#endif
