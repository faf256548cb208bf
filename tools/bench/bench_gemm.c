/* The float32 products of the GPT export's training step (batch 8, 128 tokens, width
 * 256, MLP 1024, vocabulary 1024): oneDNN's sgemm, OpenBLAS's cblas_sgemm, and what
 * the CPU fast path's vp_lin_gemm picks (runtime/cpu/k_linalg.c), measured in one run.
 *
 * usage: bench_gemm [--repeat N]
 * In: nothing (operands are fixed patterns).  Out: a markdown table, per shape the
 * median milliseconds of N calls (default 7) after one warm-up call, each side at the
 * process's threads (OpenMP's for oneDNN and the fast path, OpenBLAS's own for
 * cblas_sgemm).  On a shared machine read the columns against each other, row by row. */
#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu_host.h"
#include "dn.h"
#include "k_linalg.h"

typedef struct shape {
    int ta, tb;
    int64_t m, n, k;
    const char *what;
} shape;

static const shape shapes[] = {
    {0, 1, 1024, 768, 256, "x W^T (QKV)"},       {0, 1, 1024, 1024, 256, "x W^T (MLP up, head)"},
    {0, 0, 1024, 256, 1024, "dY W (MLP down)"},  {0, 0, 1024, 256, 768, "dY W (QKV)"},
    {1, 0, 256, 1024, 1024, "dY^T x (MLP up)"}, {1, 0, 1024, 256, 1024, "dY^T x (MLP down)"},
    {1, 0, 768, 256, 1024, "dY^T x (QKV)"},     {1, 0, 256, 256, 1024, "dY^T x (projection)"},
};

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

enum { MAX_REPEAT = 101 };

/* which: 0 oneDNN, 1 OpenBLAS, 2 vp_lin_gemm on the fast path; median ms */
static double time_side(int which, const shape *s, const float *a, const float *b, float *c, int repeat) {
    int64_t lda = s->ta ? s->m : s->k, ldb = s->tb ? s->k : s->n;
    double t[MAX_REPEAT];
    vp_error err;
    for (int r = 0; r <= repeat; r++) {
        double t0 = now();
        if (which == 0)
            dnnl_sgemm(s->ta ? 'T' : 'N', s->tb ? 'T' : 'N', s->m, s->n, s->k, 1.0f, a, lda, b, ldb, 0.0f, c, s->n);
        else if (which == 1)
            cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans, s->tb ? CblasTrans : CblasNoTrans, (int)s->m,
                        (int)s->n, (int)s->k, 1.0f, a, (int)lda, b, (int)ldb, 0.0f, c, (int)s->n);
        else if (vp_lin_gemm(NULL, VP_F32, s->ta, s->tb, s->m, s->n, s->k, 1.0, a, lda, b, ldb, 0.0, c, s->n, &err))
            return -1;
        if (r) t[r - 1] = 1e3 * (now() - t0);
    }
    qsort(t, (size_t)repeat, sizeof *t, by_value);
    return t[repeat / 2];
}

int main(int argc, char **argv) {
    vp_cpu_host_install();
    int repeat = 7;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--repeat") && i + 1 < argc) repeat = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_gemm [--repeat N]\n");
            return 2;
        }
    }
    if (repeat < 1 || repeat > MAX_REPEAT) repeat = 7;
    size_t elems = (size_t)1024 * 1024;
    float *a = malloc(elems * sizeof *a), *b = malloc(elems * sizeof *b), *c = malloc(elems * sizeof *c);
    if (!a || !b || !c) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < elems; i++) {
        a[i] = (float)(i % 17) / 17.0f - 0.5f;
        b[i] = (float)(i % 13) / 13.0f - 0.5f;
    }
    vp_dn_gemm_select(1);
    printf("The GPT export's products, median of %d calls (ms); *fast path*: what `run` calls.\n\n", repeat);
    printf("| product | op(A) op(B), m x n x k | oneDNN sgemm | OpenBLAS | **fast path** |\n|---|---|---|---|---|\n");
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        const shape *s = &shapes[i];
        double d = time_side(0, s, a, b, c, repeat), o = time_side(1, s, a, b, c, repeat);
        double f = time_side(2, s, a, b, c, repeat);
        printf("| %s | %s%s %lldx%lldx%lld | %.2f | %.2f | **%.2f** |\n", s->what, s->ta ? "A^T" : "A",
               s->tb ? " B^T" : " B", (long long)s->m, (long long)s->n, (long long)s->k, d, o, f);
    }
    free(a);
    free(b);
    free(c);
    return 0;
}
