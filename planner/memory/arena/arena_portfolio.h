/* The greedy portfolio on one piece (arena_portfolio.c), and what it shares with the
 * solver in arena.c: the events of a sweep over time and a clock for reports.  Private
 * to the arena solver. */
#ifndef VP_ARENA_PORTFOLIO_H
#define VP_ARENA_PORTFOLIO_H

#include <stdint.h>

#include "memory/arena/arena.h"

/* A sweep over time: +size where an item starts, -size where it ends. */
typedef struct vp_arena_event {
    int64_t t;
    int64_t delta;
} vp_arena_event;

/* qsort order of events: by time, ends before starts at one time. */
int vp_arena_event_cmp(const void *a, const void *b);

/* Seconds on a monotonic clock (the report's times only; no budget reads it). */
double vp_arena_clock(void);

/* Algorithms of the portfolio: orders x {best fit, first fit} (vp_arena_algo_name). */
#define VP_ARENA_N_ALGOS 10

typedef struct vp_portfolio vp_portfolio;

/* Room for pieces of up to n of items[] (kept, written by vp_portfolio_piece); opts and
 * res are read and filled (res->algos[] seconds) while it lives.  NULL: out of memory. */
vp_portfolio *vp_portfolio_new(vp_arena_item *items, int n, const vp_arena_opts *opts, vp_arena_result *res);
void vp_portfolio_free(vp_portfolio *p);

/* Solves the piece items idx[0..n): every algorithm (or opts->only; past
 * VP_ARENA_LARGE_PIECE items the size and lifetime orders) until one reaches bound,
 * then search_budget seconds' worth of placements of the improving search.  Writes the
 * best offsets into the items, each algorithm's arena into piece_algo_arena[] (left -1
 * where it did not run) and the algorithm kept into *kept.  Returns the arena, or -1
 * when out of memory. */
int64_t vp_portfolio_piece(vp_portfolio *p, const int *idx, int n, int64_t bound, int64_t *piece_algo_arena,
                           const char **kept, double search_budget);

/* The improving search alone, from where the last vp_portfolio_piece on the same piece
 * left its best order (so a caller can try something between the greedy orders and the
 * search without placing them twice): writes the best offsets into the items, names
 * "search" in *kept when it beats the orders, returns the arena or -1 out of memory. */
int64_t vp_portfolio_improve(vp_portfolio *p, const int *idx, int n, int64_t bound, const char **kept,
                             double search_budget);

#endif
