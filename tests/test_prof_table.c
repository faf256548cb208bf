/* The profilers' timed rows (runtime/prof_table.h), on samples with known times:
 *   - one row per (key, variant), NULL and literal variants apart, counts and totals
 *     summed, keys past 199 characters cut there and matched on what is kept;
 *   - a round's least: the fewest seconds of any closed round, 0 for a row that sat one
 *     out (new after the first round, or absent from a later one);
 *   - sorted by total, largest first; printed in that order; cleared to empty. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "cpu_host.h"
#include "prof_table.h"

static void collect(FILE *f, const vp_prof_row *r, void *ctx) {
    (void)f;
    char *out = ctx;
    size_t at = strlen(out);
    snprintf(out + at, 256 - at, "%s%s%s;", r->key, r->variant ? "/" : "", r->variant ? r->variant : "");
}

int main(void) {
    vp_cpu_host_install();
    vp_prof_table t = {0};
    /* round 1: Conv twice on oneDNN, once on the kernel; Relu */
    vp_prof_table_add(&t, "Conv", "onednn", 0.010, 0.020);
    vp_prof_table_add(&t, "Conv", "onednn", 0.030, 0.040);
    vp_prof_table_add(&t, "Conv", "kernel", 0.005, 0.005);
    vp_prof_table_add(&t, "Relu", NULL, 0.001, 0.001);
    vp_prof_table_end_round(&t);
    /* round 2: Conv faster, Relu absent, Gemm new */
    vp_prof_table_add(&t, "Conv", "onednn", 0.015, 0.015);
    vp_prof_table_add(&t, "Gemm", NULL, 0.100, 0.200);
    vp_prof_table_end_round(&t);
    check(t.n == 4 && t.rounds == 2, "4 rows of (key, variant) over 2 rounds (%d, %d)", t.n, t.rounds);
    const vp_prof_row *conv = &t.rows[0], *relu = &t.rows[2], *gemm = &t.rows[3];
    check(conv->count == 3 && conv->total == 0.010 + 0.030 + 0.015 && conv->cpu == 0.020 + 0.040 + 0.015,
          "Conv/onednn: 3 samples, wall and CPU seconds summed");
    check(conv->least == 0.015 && relu->least == 0 && gemm->least == 0 && t.rows[1].least == 0,
          "least round: Conv/onednn's faster second (%g), 0 for the rows that sat one out", conv->least);

    char longer[300], cut[300];
    memset(longer, 'x', sizeof longer - 1);
    longer[sizeof longer - 1] = 0;
    vp_prof_table_add(&t, longer, NULL, 0.5, 0);
    memcpy(cut, longer, 199);
    cut[199] = 0;
    vp_prof_table_add(&t, cut, NULL, 0.5, 0);
    check(t.n == 5 && strlen(t.rows[4].key) == 199 && t.rows[4].count == 2,
          "a 299-character key is kept as its first 199, and its cut form finds the same row");

    vp_prof_table_sort(&t);
    char order[256] = "";
    vp_prof_table_print(&t, stdout, collect, order);
    const char *want_tail = ";Gemm;Conv/onednn;Conv/kernel;Relu;";
    check(t.rows[0].total == 1.0 && strlen(order) > strlen(want_tail) &&
              !strcmp(order + strlen(order) - strlen(want_tail), want_tail),
          "sorted and printed largest total first: ...%s", order + strlen(order) - strlen(want_tail));

    vp_prof_table_clear(&t);
    check(!t.n && !t.rows && !t.rounds, "cleared: empty, as zero-initialised");
    vp_prof_table_add(&t, "Add", NULL, 0.001, 0);
    check(t.n == 1 && t.rows[0].least == -1, "a row before any round closes has no least yet");
    vp_prof_table_clear(&t);
    return check_summary();
}
