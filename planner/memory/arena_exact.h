/* The complete search for offsets, run on a piece the greedy portfolio left above its
 * bound.  See arena_exact.c for the method. */
#ifndef VP_ARENA_EXACT_H
#define VP_ARENA_EXACT_H

#include "memory/arena.h"

typedef struct vp_arena_exact_result {
    int64_t arena;         /* the piece's arena after the search (never above the incumbent) */
    int64_t proven_lower;  /* no assignment of the piece is smaller: equal to arena when proved optimal */
    int64_t nodes;         /* search nodes spent */
    int attempts;          /* capacities tried */
} vp_arena_exact_result;

/* Searches items idx[0..n) (their offsets hold the incumbent assignment) for a smaller
 * one, spending at most node_budget nodes; writes the offsets only when it finds one.
 * Stops early once the arena is at most `enough` (what another piece already needs). */
vp_status vp_arena_exact_piece(vp_arena_item *items, const int *idx, int n, int64_t lower, int64_t enough,
                               int64_t node_budget, vp_arena_exact_result *res, vp_error *err);

/* Pieces of more items than this are left to the portfolio (the search keeps one
 * ordering per depth: memory grows with the square of the items). */
#define VP_ARENA_EXACT_MAX_ITEMS 2048

/* Nodes the search visits per second of the time limit on one core (calibrated on the
 * benchmark instances); the limit is turned into nodes so results do not vary by load. */
#define VP_ARENA_EXACT_NODES_PER_SECOND 25000

#endif
