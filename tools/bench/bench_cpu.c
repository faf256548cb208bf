/* CPU reference backend speed: forward passes of ResNet-50 (the light/ graph, batch 1)
 * and the GPT-style model (models/gpt), and a training step of each model in models/,
 * beside OpenBLAS's own sgemm measured in the same run as the ceiling.
 *
 * usage: bench_cpu [--repeat N] [--markdown]
 * Times are the median of N runs (default 5) after one warm-up run. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "cpu_host.h"
#include "remat/cost.h"
#include "exec.h"
#include "ir/infer.h"
#include "onnx/onnx_load.h"
#include "ir/rng.h"
#include "pipeline/pipeline.h"
#include "train/training.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* GFLOP/s of a square sgemm: the best this machine's BLAS does. */
static double sgemm_gflops(int n, int repeat) {
    float *a = malloc((size_t)n * n * sizeof *a), *b = malloc((size_t)n * n * sizeof *b), *c = malloc((size_t)n * n * sizeof *c);
    vp_rng r = {7};
    for (int i = 0; i < n * n; i++) {
        a[i] = (float)vp_rng_uniform(&r);
        b[i] = (float)vp_rng_uniform(&r);
    }
    double t[32];
    for (int k = 0; k <= repeat; k++) {
        double t0 = now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        if (k) t[k - 1] = now() - t0;
    }
    free(a);
    free(b);
    free(c);
    return 2.0 * n * (double)n * n / median(t, repeat) / 1e9;
}

static double graph_flops(const vp_graph *g) {
    double f = 0;
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].folded) f += vp_cost_node(g, &g->nodes[i]).flops;
    return f;
}

typedef struct row {
    char name[96];
    double seconds, gflop, rate;
} row;

/* Runs the graph (forward, or a training step when train is set) repeat times. */
static int bench_graph(const char *label, const char *path, const char *dim, int64_t dim_value, int train, int repeat,
                       row *out) {
    vp_error err;
    vp_dim_binding b = {dim, dim_value};
    vp_train_spec spec;
    memset(&spec, 0, sizeof spec);
    vp_loss_parse("ce:logits", &spec.loss, &err);
    vp_opt_parse("adamw", &spec.opt, &err);
    spec.freeze = "^causal_mask$";
    vp_pipeline_opts po = {.model = path, .dims = &b, .n_dims = dim != NULL, .spec = &spec,
                           .until = train ? VP_PIPELINE_TRAIN : VP_PIPELINE_INFER};
    vp_pipeline_result res;
    vp_status s = vp_pipeline_run(&po, &res, &err);
    vp_graph *g = res.g;
    vp_training t = res.t;
    vp_backend *be = vp_backend_cpu_new();
    vp_exec *x = NULL;
    if (!s) s = vp_exec_new(g, be, &x, &err);
    vp_rng r = {1};
    for (int k = 0; !s && k < g->n_inputs; k++) {
        const vp_value *v = &g->values[g->inputs[k]];
        vp_tensor in = vp_value_tensor(v);
        size_t n = (size_t)vp_value_numel(v);
        in.data = calloc(n ? n : 1, vp_dtype_size(v->dtype));
        for (size_t i = 0; i < n; i++) {
            if (v->dtype == VP_F32) ((float *)in.data)[i] = (float)vp_rng_uniform(&r);
            else if (v->dtype == VP_I64) ((int64_t *)in.data)[i] = (int64_t)(vp_rng_uniform(&r) * (t.label_classes ? (double)t.label_classes : 10.0));
        }
        s = vp_exec_set_input(x, v->name, &in, &err);
        free(in.data);
    }
    double times[64];
    for (int k = 0; !s && k <= repeat; k++) {
        double t0 = now();
        s = vp_exec_run(x, &err);
        if (k) times[k - 1] = now() - t0;
    }
    if (s) fprintf(stderr, "bench %s: %s\n", label, err.msg);
    else {
        snprintf(out->name, sizeof out->name, "%s", label);
        out->seconds = median(times, repeat);
        out->gflop = graph_flops(g) / 1e9;
        out->rate = out->gflop / out->seconds;
    }
    vp_exec_free(x);
    vp_backend_free(be);
    vp_training_free(&t);
    vp_graph_free(g);
    return s == VP_OK;
}

int main(int argc, char **argv) {
    vp_cpu_host_install();
    int repeat = 5;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--repeat") && i + 1 < argc) repeat = atoi(argv[++i]);
    if (repeat < 1 || repeat > 64) repeat = 5;
    row rows[16];
    int n = 0;
    double ceiling = sgemm_gflops(1024, repeat);
    struct {
        const char *label, *path, *dim;
        int64_t v;
        int train;
    } cases[] = {
        {"ResNet-50 forward, batch 1 (light/)", VP_ONNX_TESTS "/light/light_resnet50.onnx", NULL, 0, 0},
        {"GPT-style forward, batch 4 (models/gpt)", VP_SOURCE_DIR "/models/gpt/model.onnx", "batch", 4, 0},
        {"GPT-style forward, batch 64", VP_SOURCE_DIR "/models/gpt/model.onnx", "batch", 64, 0},
        {"GPT-style training step, batch 64, AdamW", VP_SOURCE_DIR "/models/gpt/model.onnx", "batch", 64, 1},
        {"CNN training step, batch 64, AdamW", VP_SOURCE_DIR "/models/cnn/model.onnx", "batch", 64, 1},
        {"MLP training step, batch 256, AdamW", VP_SOURCE_DIR "/models/mlp/model.onnx", "batch", 256, 1},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        if (bench_graph(cases[c].label, cases[c].path, cases[c].dim, cases[c].v, cases[c].train, repeat, &rows[n])) n++;
    printf("| case | median time | GFLOP | GFLOP/s | of sgemm ceiling |\n|---|---|---|---|---|\n");
    printf("| OpenBLAS sgemm 1024x1024x1024 (ceiling, same run) | | | %.1f | 1.00 |\n", ceiling);
    for (int i = 0; i < n; i++)
        printf("| %s | %.4f s | %.3f | %.1f | %.2f |\n", rows[i].name, rows[i].seconds, rows[i].gflop, rows[i].rate,
               rows[i].rate / ceiling);
    return n == (int)(sizeof cases / sizeof cases[0]) ? 0 : 1;
}
