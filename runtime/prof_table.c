/* Timed rows: a growing array searched linearly (a training step has a few dozen op
 * types, or a few hundred shapes), sorted only to print.  See prof_table.h. */
#include "prof_table.h"

#include <stdlib.h>
#include <string.h>

double vp_prof_clock(clockid_t clock) {
    struct timespec t;
    clock_gettime(clock, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int same_variant(const char *a, const char *b) { return a == b || (a && b && !strcmp(a, b)); }

void vp_prof_table_add(vp_prof_table *t, const char *key, const char *variant, double seconds, double cpu) {
    vp_prof_row *r = NULL;
    for (int i = 0; i < t->n && !r; i++)
        if (!strncmp(t->rows[i].key, key, sizeof t->rows[i].key - 1) && same_variant(t->rows[i].variant, variant))
            r = &t->rows[i];
    if (!r) {
        if (t->n == t->cap) {
            int cap = t->cap ? 2 * t->cap : 64;
            vp_prof_row *rows = realloc(t->rows, (size_t)cap * sizeof *rows);
            if (!rows) return;
            t->rows = rows, t->cap = cap;
        }
        r = &t->rows[t->n++];
        snprintf(r->key, sizeof r->key, "%s", key);
        r->variant = variant;
        r->count = 0;
        r->total = r->cpu = r->round = 0;
        r->least = t->rounds ? 0 : -1; /* new after a round closed: it sat that one out */
    }
    r->count++;
    r->total += seconds, r->round += seconds, r->cpu += cpu;
}

void vp_prof_table_end_round(vp_prof_table *t) {
    for (int i = 0; i < t->n; i++) {
        vp_prof_row *r = &t->rows[i];
        if (r->least < 0 || r->round < r->least) r->least = r->round;
        r->round = 0;
    }
    t->rounds++;
}

static int by_total(const void *a, const void *b) {
    double x = ((const vp_prof_row *)a)->total, y = ((const vp_prof_row *)b)->total;
    return (x < y) - (x > y);
}

void vp_prof_table_sort(vp_prof_table *t) {
    if (t->n) qsort(t->rows, (size_t)t->n, sizeof *t->rows, by_total);
}

void vp_prof_table_print(const vp_prof_table *t, FILE *f, void (*line)(FILE *f, const vp_prof_row *r, void *ctx),
                         void *ctx) {
    for (int i = 0; i < t->n; i++) line(f, &t->rows[i], ctx);
}

void vp_prof_table_clear(vp_prof_table *t) {
    free(t->rows);
    memset(t, 0, sizeof *t);
}
