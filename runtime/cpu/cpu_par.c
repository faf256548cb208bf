/* vp_par_for on OpenMP: a static split of [0, n) into one contiguous block per thread. */
#include "cpu_par.h"

#ifdef _OPENMP
#include <omp.h>
#endif

/* Below this much work (element-operations) one thread does it all. */
#define VP_PAR_MIN_WORK ((int64_t)1 << 15)

static int64_t min_work = VP_PAR_MIN_WORK;

void vp_par_set_min_work(int64_t work) { min_work = work > 0 ? work : VP_PAR_MIN_WORK; }

int vp_par_threads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

int vp_par_inside(void) {
#ifdef _OPENMP
    return omp_in_parallel();
#else
    return 0;
#endif
}

void vp_par_set_threads(int threads) {
#ifdef _OPENMP
    if (threads > 0) omp_set_num_threads(threads);
#else
    (void)threads;
#endif
}

void vp_par_for(int64_t n, int64_t cost, vp_par_body body, void *ctx) {
    if (n <= 0) return;
    int threads = vp_par_threads();
    if (cost < 1) cost = 1;
    int64_t blocks = n > INT64_MAX / cost ? threads : n * cost / min_work;
    if (blocks > threads) blocks = threads;
    if (blocks > n) blocks = n;
    if (blocks <= 1) {
        body(0, n, ctx);
        return;
    }
#ifdef _OPENMP
#pragma omp parallel for num_threads((int)blocks) schedule(static, 1)
#endif
    for (int64_t b = 0; b < blocks; b++) body(n * b / blocks, n * (b + 1) / blocks, ctx);
}
