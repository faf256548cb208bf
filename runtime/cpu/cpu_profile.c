/* VP_PROFILE's table: one process-wide table of timed rows (runtime/prof_table.h),
 * keyed by op type and path, printed by total time.  See cpu_profile.h. */
#include "cpu_profile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prof_table.h"

static vp_prof_table table;

int vp_prof_on(void) {
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("VP_PROFILE");
        on = e && e[0] && strcmp(e, "0");
    }
    return on;
}

double vp_prof_now(void) { return vp_prof_clock(CLOCK_MONOTONIC); }

void vp_prof_add(const char *key, const char *variant, double seconds) {
    char k[40]; /* the table's column holds this much */
    snprintf(k, sizeof k, "%s", key);
    vp_prof_table_add(&table, k, variant, seconds, 0);
}

static void line(FILE *f, const vp_prof_row *r, void *ctx) {
    double total = *(const double *)ctx;
    fprintf(f, "%-28s %-10s %8ld %10.1f %5.1f%%\n", r->key, r->variant, r->count, r->total * 1e3,
            total > 0 ? 100 * r->total / total : 0);
}

void vp_prof_report(void) {
    if (!table.n) return;
    vp_prof_table_sort(&table);
    /* rows named "(...)" are parts of a node's time (oneDNN's reorders), not nodes */
    double total = 0;
    for (int i = 0; i < table.n; i++)
        if (table.rows[i].key[0] != '(') total += table.rows[i].total;
    fprintf(stderr, "VP_PROFILE: %.1f ms in nodes (rows in parentheses: parts of the oneDNN rows)\n", total * 1e3);
    fprintf(stderr, "%-28s %-10s %8s %10s %6s\n", "op", "path", "count", "ms", "share");
    vp_prof_table_print(&table, stderr, line, &total);
    vp_prof_table_clear(&table);
}
