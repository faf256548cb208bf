/* The complete search for offsets, run on a piece the greedy portfolio left above its
 * bound.  See arena_exact.c for the method. */
#ifndef VP_ARENA_EXACT_H
#define VP_ARENA_EXACT_H

#include "memory/arena/arena.h"

typedef struct vp_arena_exact_result {
    int64_t arena;         /* the piece's arena after the search (never above the incumbent) */
    int64_t proven_lower;  /* no assignment of the piece is smaller: equal to arena when proved optimal */
    int64_t work;          /* search work spent: about one unit per item or section visited */
    int attempts;          /* capacities tried */
} vp_arena_exact_result;

/* Searches items idx[0..n) (their offsets hold the incumbent assignment) for a smaller
 * one, spending at most work_budget units of work; writes the offsets only when it finds one.
 * lower: no arena below it matters (the piece's bound, or a higher one another piece
 * needs: arena.c passes the highest of all).  Stops early once the arena is at most
 * `enough` (what another piece is proved to need). */
vp_status vp_arena_exact_piece(vp_arena_item *items, const int *idx, int n, int64_t lower, int64_t enough,
                               int64_t work_budget, vp_arena_exact_result *res, vp_error *err);

/* Pieces of more items than this are left to the portfolio (the search keeps one
 * ordering per depth: memory grows with the square of the items). */
#define VP_ARENA_EXACT_MAX_ITEMS 2048

/* Units of search work per second of the time limit on one core (calibrated on
 * MiniMalloc's challenging instances and the generated perfect packings: at 300M, 5 s
 * of limit took 3.1 to 6.2 s of CPU on the shared, loaded 2-core build machine, the
 * most on the 100-buffer packing); the limit is turned into work so a result does not
 * vary by machine or load. */
#define VP_ARENA_EXACT_WORK_PER_SECOND 250000000

/* The most work of the short search at the bound arena.c tries on a piece before the
 * portfolio's improving search (20 ms). */
#define VP_ARENA_QUICK_WORK 5000000

#endif
