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
 * one, spending at most node_budget nodes; writes the offsets only when it finds one. */
vp_status vp_arena_exact_piece(vp_arena_item *items, const int *idx, int n, int64_t lower, int64_t node_budget,
                               vp_arena_exact_result *res, vp_error *err);

/* Nodes the search visits per second of the time limit on one core (calibrated on the
 * benchmark instances); the limit is turned into nodes so results do not vary by load. */
#define VP_ARENA_EXACT_NODES_PER_SECOND 400000

#endif
