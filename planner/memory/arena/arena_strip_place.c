/* A level of the strip search tried by the placement search first.
 *
 * In: a level (items flat at H over [T0, T1), no time cut, no item spanning it) and a
 * budget of work.  Out: an assignment at H found by the complete placement search of
 * arena_exact_search.c, or its proof that none exists (no assignment at all, so none of
 * strips either), or STRIP_PAUSE when the budget ran out first.
 *
 * Why: on small levels whose buffers have many sizes that add up alike (a window of a
 * perfect packing: 39 buffers over 7 steps), the strips that are flat are many, and the
 * strip search tries them one by one (111M units on one such level), while the placement
 * search, placing buffer by buffer at the lowest offset, decides it in 0.4M. */
#include "memory/arena/arena_strip_internal.h"
#include "memory/arena/arena.h"
#include "memory/arena/arena_exact_search.h"

#include <stdlib.h>
#include <string.h>

int vp_strip_place(strip *st, const int *S, int ns, int64_t H, int64_t base, int64_t work) {
    vp_arena_item *items = malloc((size_t)ns * sizeof *items);
    int *idx = malloc((size_t)ns * sizeof *idx), *scratch = malloc((size_t)ns * sizeof *scratch);
    vp_exact x;
    memset(&x, 0, sizeof x);
    int r = STRIP_PAUSE;
    if (!items || !idx || !scratch) goto oom;
    for (int k = 0; k < ns; k++) {
        int it = S[k];
        items[k] = (vp_arena_item){st->sz[it], st->lo[it], st->hi[it], 0};
        idx[k] = k;
    }
    if (!vp_exact_build(&x, items, idx, idx, ns)) goto oom;
    /* MiniMalloc's three orders in turn: the one that decides a level soonest differs */
    for (int h = 0; h < 3 && r == STRIP_PAUSE; h++) {
        int64_t left = st->limit - st->work;
        if (left <= 0) {
            r = STRIP_OUT;
            break;
        }
        vp_exact_set_ranks(&x, h, 0, 0, scratch);
        int d = vp_exact_decide(&x, H, work < left ? work : left);
        st->work += x.work;
        if (d < 0) goto oom;
        if (d == 1)
            for (int k = 0; k < ns; k++) st->off[S[k]] = base + x.best_off[k];
        r = d == 1 ? STRIP_DONE : d == 0 ? STRIP_FAIL : STRIP_PAUSE;
    }
    free(items), free(idx), free(scratch);
    vp_exact_free(&x);
    return r;
oom:
    st->oom = 1;
    free(items), free(idx), free(scratch);
    vp_exact_free(&x);
    return STRIP_OUT;
}
