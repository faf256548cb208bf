/* Threads for the CPU kernels (OpenMP underneath, in cpu_par.c only).
 *
 * In: a range [0, n) of independent work items (elements, rows, channels) and a body
 * that computes items [lo, hi).  Out: every item computed exactly once.  Keeps true:
 * the same bits whatever the thread count, because a body never combines results of
 * different items (a sum stays inside one item, in its own fixed order); only which
 * thread computes an item changes.  Small ranges run inline on the caller's thread: a
 * parallel region costs microseconds, and more on a loaded machine. */
#ifndef VP_CPU_PAR_H
#define VP_CPU_PAR_H

#include <stdint.h>

typedef void (*vp_par_body)(int64_t lo, int64_t hi, void *ctx);

/* Runs body over [0, n) in contiguous blocks; cost is the work of one item (in
 * element-operations, roughly), so that cheap items go parallel only in bulk. */
void vp_par_for(int64_t n, int64_t cost, vp_par_body body, void *ctx);

/* The threads vp_par_for may use (OpenMP's max threads; 1 without OpenMP). */
int vp_par_threads(void);

/* Whether the caller runs inside a parallel region (a body of vp_par_for): nested
 * regions get one thread, so callers that would split work themselves do not. */
int vp_par_inside(void);

/* Sets the threads for the kernels and oneDNN (0: leave as is); for tests. */
void vp_par_set_threads(int threads);

/* Sets the work below which a range runs on one thread (0: the default); tests set 1,
 * so that every kernel splits even on their small tensors. */
void vp_par_set_min_work(int64_t work);

#endif
