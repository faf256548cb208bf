/* Timed rows: what the two profilers share, VP_PLAN_PROFILE (plan_exec.c: planned steps
 * timed from outside, any backend) and VP_PROFILE (cpu/cpu_profile.c: inside the CPU
 * backend, oneDNN against the reference kernels).
 *
 * In: samples, each a key (copied, its first 199 characters), an optional variant (a
 * string literal, or NULL) and seconds of wall and of CPU time, in rounds (a training
 * step each) when the caller closes them.  Out: one row per (key, variant) with its
 * count, totals and least round, in order of first sample until sorted (largest total
 * first) for printing.  Keeps true: it only adds and compares the numbers it is given;
 * a sample that finds no memory for a new row is dropped, never the caller's work. */
#ifndef VP_PROF_TABLE_H
#define VP_PROF_TABLE_H

#include <stdio.h>
#include <time.h>

typedef struct vp_prof_row {
    char key[200];
    const char *variant; /* NULL: none */
    long count;          /* samples */
    double total, cpu;   /* seconds of wall and of CPU time, all samples */
    double round;        /* seconds in the round still open */
    double least;        /* seconds in the least closed round (0 for a round the row sat out);
                            -1 before any round closed */
} vp_prof_row;

typedef struct vp_prof_table {
    vp_prof_row *rows;
    int n, cap;
    int rounds; /* closed */
} vp_prof_table;

/* Seconds on clock (CLOCK_MONOTONIC: wall; CLOCK_PROCESS_CPUTIME_ID: every thread's). */
double vp_prof_clock(clockid_t clock);

/* Adds a sample to the row of (key, variant), made when new. */
void vp_prof_table_add(vp_prof_table *t, const char *key, const char *variant, double seconds, double cpu);

/* Closes a round: each row's least takes this round's seconds when fewer. */
void vp_prof_table_end_round(vp_prof_table *t);

/* Sorts the rows by total, largest first. */
void vp_prof_table_sort(vp_prof_table *t);

/* Calls line for each row, in the table's order (sorted, after vp_prof_table_sort). */
void vp_prof_table_print(const vp_prof_table *t, FILE *f, void (*line)(FILE *f, const vp_prof_row *r, void *ctx),
                         void *ctx);

/* Frees the rows: the table is empty, as zero-initialised. */
void vp_prof_table_clear(vp_prof_table *t);

#endif
