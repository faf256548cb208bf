/* Per-op time of the CPU backend, for finding where a step's time goes (VP_PROFILE=1).
 *
 * In: the wall time of each node the backend runs, under a key (its op type, and
 * whether oneDNN or the reference kernel ran it), and of oneDNN's reorders (keys in
 * parentheses, parts of their nodes' time).  Out: on stderr, when the backend is freed,
 * a table of keys by total time with counts and shares of the nodes' total.  Keeps
 * true: off (the default) it costs one branch per node and changes nothing; on, it only
 * reads clocks, so every result keeps its bits.  One table per process: for one backend
 * running at a time (what `run` and `train` do). */
#ifndef VP_CPU_PROFILE_H
#define VP_CPU_PROFILE_H

/* Whether VP_PROFILE is set (and not "0"); read once. */
int vp_prof_on(void);

/* Monotonic seconds. */
double vp_prof_now(void);

/* Adds seconds to the row of (key, variant): key is copied (its first 39 characters),
 * variant must be a string literal. */
void vp_prof_add(const char *key, const char *variant, double seconds);

/* Prints the table to stderr and clears it (nothing when empty). */
void vp_prof_report(void);

#endif
