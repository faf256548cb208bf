/* Offset assignment: every buffer gets an offset in one arena so that no two buffers
 * live at the same time share a byte.
 *
 * In: items with a size and a lifetime [start, end) in steps.  Out: offsets, the arena
 * size, and the lower bound no assignment can beat (the largest sum of live sizes at
 * one step).  The solver splits the timeline where no item spans a step boundary,
 * solves each piece with a portfolio of greedy orders (size, lifetime, area,
 * conflicts, start) and placements (best fit, first fit), stops a piece as soon as one
 * reaches its bound, and then spends a bounded search on what gap remains (moving
 * items, most often those that reach the top, earlier in the best order).  A piece
 * still above its bound then gets the complete search of arena_exact.c (up to 2,048
 * items), which keeps the best found and may prove the result optimal.  Both budgets
 * are counts of work, not the clock: the same options give the same offsets anywhere.
 *
 * Speed: a placement visits only what overlaps the item in time, kept as unions of
 * byte ranges in a segment tree over time (or, where most items overlap most others,
 * records in offset-sorted blocks); 100,000 buffers with thousands live at once take
 * seconds per algorithm (tools/bench/RESULTS.md).  Pieces of more than 50,000 items run
 * only the size and lifetime orders unless run_all or only asks for more. */
#ifndef VP_ARENA_H
#define VP_ARENA_H

#include <stdint.h>

#include "ir/vp_status.h"

typedef struct vp_arena_item {
    int64_t size;    /* bytes, already aligned by the caller */
    int64_t start;   /* first step live */
    int64_t end;     /* one past the last step live */
    int64_t offset;  /* out */
} vp_arena_item;

#define VP_ARENA_MAX_ALGOS 16

typedef struct vp_arena_algo_result {
    char name[48];       /* "size/best-fit" */
    int64_t arena;       /* summed over pieces as max; what this algorithm alone reaches */
    double seconds;
} vp_arena_algo_result;

typedef struct vp_arena_result {
    int64_t arena;           /* bytes of the assignment kept */
    int64_t lower_bound;     /* max live bytes at one step */
    int n_pieces;            /* independent pieces the buffers split into, besides... */
    int n_pinned;            /* ...the buffers live at every step, stacked at the bottom */
    int n_replayed;          /* pieces too large for the greedy orders, placed by the allocator's replay */
    double greedy_charged;   /* seconds of greedy orders (estimated from their pairs) taken off the searches' limits */
    double seconds;
    char kept[48];           /* the algorithm whose result was kept ("mixed" when pieces differ) */
    int64_t proven_lower;    /* no assignment is smaller: the bound, or more where the search proved it */
    int64_t exact_work;     /* work the complete search spent (0: none ran), see arena_exact.h */
    int n_algos;
    vp_arena_algo_result algos[VP_ARENA_MAX_ALGOS];
} vp_arena_result;

typedef struct vp_arena_opts {
    int run_all;            /* run every algorithm on every piece (benchmarks), not stop at the bound */
    double search_seconds;  /* budget of the improving search (0: default 0.2 s, <0: none), as placements */
    int only;               /* -1 all algorithms; otherwise only this index (benchmarks) */
    double exact_seconds;   /* limit of the complete search on pieces left above their bound
                               (0: default 1 s, <0: none), turned into a count of search
                               work so a limit gives the same result anywhere; see
                               arena_exact.c */
    int64_t stop_above;     /* > 0: vp_assign_offsets places nothing when the lower bound
                               exceeds it (no arena can be smaller: such a plan is known
                               not to fit a budget of stop_above without the solve) */
} vp_arena_opts;

vp_status vp_arena_solve(vp_arena_item *items, int n, const vp_arena_opts *opts, vp_arena_result *res, vp_error *err);

/* What is known of the arena kept: "reached the lower bound", "proven optimal" (above
 * the bound, the complete search proved nothing smaller fits) or "best found". */
const char *vp_arena_outcome(const vp_arena_result *r);

/* Max over steps of the live bytes (for verifiers and reports). */
int64_t vp_arena_lower_bound(const vp_arena_item *items, int n);

/* Names of the algorithms in the portfolio, by index, and their count. */
int vp_arena_algo_count(void);
const char *vp_arena_algo_name(int i);

/* Reads the MiniMalloc CSV format "id,lower,upper,size" (a header line is allowed); the
 * ids, in the items' order, into *ids when ids is not NULL (the caller frees both). */
vp_status vp_arena_read_csv(const char *path, vp_arena_item **items, int *n, int64_t **ids, vp_error *err);

#endif
