/* The joint search's threads (task_pool.c). */
#ifndef VP_TASK_POOL_H
#define VP_TASK_POOL_H

/* Runs fn(ctx, 0) .. fn(ctx, n - 1) on up to `threads` threads, the caller's among them,
 * each task taken by the first thread free; returns when all are done.  Tasks must
 * write only what they own. */
void vp_run_tasks(int n, int threads, void (*fn)(void *ctx, int task), void *ctx);

/* The threads the search plans on: VP_SEARCH_THREADS when it is a positive number, else
 * the processors online; 1 to 16. */
int vp_search_threads(void);
/* 0 when VP_SEARCH_THREADS is set to something other than a positive number. */
int vp_search_threads_valid(void);

#endif
