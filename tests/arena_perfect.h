/* The perfect packings of bench_arena --hard and --strip, shared with the tests that
 * read one of them: the rectangle [0, steps) x [0, cap KiB) cut in two at random (in
 * time or in bytes), the largest piece again, until n rectangles; each is a buffer.  Its
 * arena at the bound (cap KiB, every step full) exists by construction. */
#ifndef VP_TEST_ARENA_PERFECT_H
#define VP_TEST_ARENA_PERFECT_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "memory/arena/arena.h"
#include "ir/rng.h"

/* n items into it (buffers of no bytes where the cuts run out); 0, or -1 out of memory */
static inline int arena_perfect_packing(vp_arena_item *it, int n, int64_t steps, int64_t cap_kib, uint64_t seed) {
    vp_rng r = {seed};
    int64_t (*rect)[4] = malloc((size_t)n * sizeof *rect); /* t0, t1, b0, b1 */
    if (!rect) return -1;
    int m = 1;
    rect[0][0] = 0, rect[0][1] = steps, rect[0][2] = 0, rect[0][3] = cap_kib;
    while (m < n) {
        int big = 0;
        for (int k = 1; k < m; k++)
            if ((rect[k][1] - rect[k][0]) * (rect[k][3] - rect[k][2]) > (rect[big][1] - rect[big][0]) * (rect[big][3] - rect[big][2]))
                big = k;
        int64_t *b = rect[big], w = b[1] - b[0], h = b[3] - b[2];
        int in_time = (vp_rng_next(&r) & 1) ? w > 1 : h <= 1;
        if (w <= 1 && h <= 1) break;
        int64_t len = in_time ? w : h, cut = 1 + (int64_t)(vp_rng_next(&r) % (uint64_t)(len - 1));
        memcpy(rect[m], b, sizeof rect[m]);
        if (in_time) b[1] = b[0] + cut, rect[m][0] = b[1];
        else b[3] = b[2] + cut, rect[m][2] = b[3];
        m++;
    }
    for (int k = 0; k < n; k++)
        it[k] = k < m ? (vp_arena_item){(rect[k][3] - rect[k][2]) * 1024, rect[k][0], rect[k][1], 0} : (vp_arena_item){0, 0, 1, 0};
    free(rect);
    return 0;
}

#endif
