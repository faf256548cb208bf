/* A small pool for the joint search (search.c): tasks side by side on pthreads.
 *
 * In: n tasks and a thread count.  Out: every task run once.  Keeps true: the caller's
 * thread works too, a thread that cannot start leaves its share to the others, and each
 * worker's OpenMP team is one thread while several plan at once (restored after). */
#include "search/task_pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

/* Tasks 0 .. n-1 of fn, on up to `threads` threads (this one among them), each task
 * taken by the first thread free.  The planner keeps no state between plans but the
 * oneDNN workspace memo, which locks (runtime/cpu/dn_memo.c), so candidates of
 * different builds plan side by side; fn writes only what its task owns. */
typedef struct task_pool {
    void (*fn)(void *ctx, int task);
    void *ctx;
    int n, threads;
    atomic_int next;
} task_pool;

/* Side by side, each task's CPU kernels (constant folding) run on its own thread: an
 * OpenMP team per task would spin on the cores the other tasks plan on. */
static void *pool_worker(void *arg) {
    task_pool *tp = arg;
#ifdef _OPENMP
    int omp_threads = omp_get_max_threads();
    if (tp->threads > 1) omp_set_num_threads(1);
#endif
    for (int i; (i = atomic_fetch_add(&tp->next, 1)) < tp->n;) tp->fn(tp->ctx, i);
#ifdef _OPENMP
    omp_set_num_threads(omp_threads);
#endif
    return NULL;
}

void vp_run_tasks(int n, int threads, void (*fn)(void *ctx, int task), void *ctx) {
    if (threads > n) threads = n;
    task_pool tp = {fn, ctx, n, threads, 0};
    enum { MAX_THREADS = 16 };
    pthread_t th[MAX_THREADS];
    int started = 0;
    for (int t = 1; t < threads && t < n && started < MAX_THREADS; t++)
        if (!pthread_create(&th[started], NULL, pool_worker, &tp)) started++;
    pool_worker(&tp); /* a thread that could not start leaves its tasks to the others */
    for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
}

int vp_search_threads_valid(void) {
    const char *env = getenv("VP_SEARCH_THREADS");
    char *end = NULL;
    if (!env || !*env) return 1;
    long n = strtol(env, &end, 10);
    return *end == 0 && n >= 1;
}

int vp_search_threads(void) {
    const char *env = getenv("VP_SEARCH_THREADS");
    long n = vp_search_threads_valid() && env && *env ? strtol(env, NULL, 10) : sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 16 ? 16 : (int)n;
}
