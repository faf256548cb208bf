/* VP_PROFILE's table: a fixed array of (key, variant) rows, linear search (a training
 * step has a few dozen op types), printed by total time.  See cpu_profile.h. */
#include "cpu_profile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { PROF_ROWS = 256 };

typedef struct prof_row {
    char key[40];
    const char *variant;
    double seconds;
    long count;
} prof_row;

static prof_row rows[PROF_ROWS];
static int n_rows;

int vp_prof_on(void) {
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("VP_PROFILE");
        on = e && e[0] && strcmp(e, "0");
    }
    return on;
}

double vp_prof_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void vp_prof_add(const char *key, const char *variant, double seconds) {
    int i = 0;
    while (i < n_rows && (strncmp(rows[i].key, key, sizeof rows[i].key - 1) || strcmp(rows[i].variant, variant))) i++;
    if (i == n_rows) {
        if (n_rows == PROF_ROWS) return;
        snprintf(rows[n_rows].key, sizeof rows[n_rows].key, "%s", key);
        rows[n_rows].variant = variant;
        rows[n_rows].seconds = 0;
        rows[n_rows++].count = 0;
    }
    rows[i].seconds += seconds;
    rows[i].count++;
}

static int by_time(const void *a, const void *b) {
    double x = ((const prof_row *)a)->seconds, y = ((const prof_row *)b)->seconds;
    return (x < y) - (x > y);
}

void vp_prof_report(void) {
    if (!n_rows) return;
    qsort(rows, (size_t)n_rows, sizeof *rows, by_time);
    /* rows named "(...)" are parts of a node's time (oneDNN's reorders), not nodes */
    double total = 0;
    for (int i = 0; i < n_rows; i++)
        if (rows[i].key[0] != '(') total += rows[i].seconds;
    fprintf(stderr, "VP_PROFILE: %.1f ms in nodes (rows in parentheses: parts of the oneDNN rows)\n", total * 1e3);
    fprintf(stderr, "%-28s %-10s %8s %10s %6s\n", "op", "path", "count", "ms", "share");
    for (int i = 0; i < n_rows; i++)
        fprintf(stderr, "%-28s %-10s %8ld %10.1f %5.1f%%\n", rows[i].key, rows[i].variant, rows[i].count,
                rows[i].seconds * 1e3, total > 0 ? 100 * rows[i].seconds / total : 0);
    n_rows = 0;
}
