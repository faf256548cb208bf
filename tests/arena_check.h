/* What the arena tests check of an assignment, computed from the items alone (never
 * from the solver's own bookkeeping): its top, and that no two buffers overlap. */
#ifndef VP_TEST_ARENA_CHECK_H
#define VP_TEST_ARENA_CHECK_H

#include <stdint.h>
#include <stdio.h>

#include "memory/arena/arena.h"

/* the highest byte any item reaches */
static inline int64_t arena_check_top(const vp_arena_item *it, int n) {
    int64_t top = 0;
    for (int i = 0; i < n; i++)
        if (it[i].offset + it[i].size > top) top = it[i].offset + it[i].size;
    return top;
}

/* Pairwise: 1 when no two items share a step and a byte, else 0 and why.  A lifetime of
 * no steps [a, a) meets what strictly contains a; a buffer of no bytes meets nothing at
 * or below its offset. */
static inline int arena_check_pairs(const vp_arena_item *it, int n, char *why, size_t len) {
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            const vp_arena_item *a = &it[i], *b = &it[j];
            int in_time = a->start < b->end && b->start < a->end;
            int in_bytes = a->offset < b->offset + b->size && b->offset < a->offset + a->size;
            if (in_time && in_bytes) {
                snprintf(why, len, "items %d and %d overlap", i, j);
                return 0;
            }
        }
    return 1;
}

#endif
