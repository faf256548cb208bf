/* onnx-vplan eval: run a model on the CPU backend (VP_CPU_REFERENCE=1: the reference kernels). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "backend.h"
#include "cli.h"
#include "cli_data.h"
#include "cpu_util.h"
#include "exec.h"
#include "ir/rng.h"
#include "onnx/tensor_proto.h"

static void fill_random(vp_tensor *t, vp_rng *rng) {
    int64_t n = vp_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        double u = vp_rng_uniform(rng);
        if (vp_dtype_is_float(t->dtype)) vp_store(t->data, t->dtype, i, 2.0 * u - 1.0);
        else if (t->dtype == VP_BOOL) vp_store(t->data, t->dtype, i, u < 0.5);
        else vp_store(t->data, t->dtype, i, floor(u * 10.0));
    }
}

static void safe_file_name(const char *name, char *out, size_t len) {
    size_t k = 0;
    for (const char *p = name; *p && k + 1 < len; p++)
        out[k++] = (*p == '/' || *p == '\\' || *p == ':' || (unsigned char)*p < 0x20) ? '_' : *p;
    out[k] = 0;
    if (!k || !strcmp(out, ".") || !strcmp(out, "..")) snprintf(out, len, "output");
}

static void print_summary(const vp_value *v, const vp_tensor *t) {
    char shape[256];
    int64_t n = vp_tensor_numel(t);
    double sum = 0, lo = INFINITY, hi = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        double x = vp_load(t->data, t->dtype, i);
        sum += x;
        if (x < lo) lo = x;
        if (x > hi) hi = x;
    }
    printf("  %-24s %-8s %-18s", v->name, vp_dtype_name(t->dtype), vp_shape_str(t->rank, t->dims, shape, sizeof shape));
    if (n) printf(" mean %.6g  min %.6g  max %.6g", sum / (double)n, lo, hi);
    printf("\n");
}

static int run_eval(int argc, char **argv) {
    const char *model = NULL, *out_dir = NULL, *data = NULL;
    cli_pairs given = {0};
    int64_t seed = 0;
    cli_pairs dims = {0};
    const cli_opt table[] = {
        {"MODEL", CLI_POS, &model, NULL, NULL},
        {"--dim", CLI_DIM, &dims, "NAME=VALUE", "bind a symbolic dim (repeatable)"},
        {"--input", CLI_PAIR, &given, "NAME=FILE.pb",
         "feed a graph input from a serialized TensorProto (repeatable);\n"
         "inputs not given are drawn at random from --seed: floats\n"
         "uniform in [-1, 1), integers uniform in [0, 10), bools fair"},
        {"--data", CLI_STR, &data, "DIR",
         "feed the graph inputs --input does not from DIR/<input>.pb\n"
         "(TensorProto) or DIR/<input>.bin (raw bytes), as train --data"},
        {"--output-dir", CLI_STR, &out_dir, "DIR", "write each output as DIR/<output name>.pb (TensorProto)"},
        {"--seed", CLI_INT, &seed, "N", "seed for random inputs (default 0)"},
        {"", CLI_TABLE, cli_load_table, NULL, NULL},
        {0}};
    int rc = cli_parse(&cli_cmd_eval, table, argc, argv);
    if (rc != CLI_CONTINUE) return rc;
    vp_error err;
    vp_status s = VP_OK;
    vp_graph *g = NULL;
    vp_backend *b = NULL;
    vp_exec *x = NULL;
    vp_tensor feeds[CLI_MAX_PAIRS];
    int n_read = 0;
    vp_tensor *inputs = NULL;
    cli_batch batch = {0};
    s = cli_load(model, &dims, &g, &err);
    for (int k = 0; !s && k < given.n; k++) {
        s = vp_tensor_read_pb(given.value[k], &feeds[k], NULL, &err);
        if (s) break;
        n_read++;
        /* bound before inference so inputs that decide shapes are known */
        s = vp_bind_input_data(g, given.name[k], &feeds[k], &err);
    }
    if (!s) s = vp_infer(g, NULL, NULL, &err);
    if (!s) {
        b = vp_backend_cpu_new();
        s = b ? vp_exec_new(g, b, &x, &err) : vp_fail(&err, VP_ERR_NOMEM, "out of memory");
    }
    if (!s) {
        inputs = calloc((size_t)g->n_inputs + 1, sizeof *inputs);
        if (!inputs) s = vp_fail(&err, VP_ERR_NOMEM, "out of memory");
    }
    if (!s && data) s = cli_batch_load(g, data, (uint64_t)seed, 0, &batch, &err);
    vp_rng rng = {(uint64_t)seed};
    for (int k = 0; !s && k < g->n_inputs; k++) {
        const vp_value *v = &g->values[g->inputs[k]];
        int fed = -1;
        for (int f = 0; f < given.n; f++)
            if (!strcmp(given.name[f], v->name)) fed = f;
        if (fed >= 0) {
            s = vp_exec_set_input(x, v->name, &feeds[fed], &err);
            continue;
        }
        for (int f = 0; f < batch.n; f++)
            if (batch.ids[f] == g->inputs[k]) fed = f;
        if (fed >= 0) {
            s = vp_exec_set_input(x, v->name, &batch.data[fed], &err);
            continue;
        }
        inputs[k] = vp_value_tensor(v);
        inputs[k].data = malloc(vp_tensor_nbytes(&inputs[k]) + 1);
        if (!inputs[k].data) {
            s = vp_fail(&err, VP_ERR_NOMEM, "out of memory");
            break;
        }
        fill_random(&inputs[k], &rng);
        s = vp_exec_set_input(x, v->name, &inputs[k], &err);
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (!s) s = vp_exec_run(x, &err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (!s && out_dir && mkdir(out_dir, 0777) != 0 && errno != EEXIST)
        s = vp_fail(&err, VP_ERR_IO, "%s: cannot create directory: %s", out_dir, strerror(errno));
    if (!s) {
        printf("ran %s in %.3f s on cpu\noutputs:\n", model, (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
        for (int k = 0; !s && k < g->n_outputs; k++) {
            vp_tensor t;
            s = vp_exec_get(x, g->outputs[k], &t, &err);
            if (s) break;
            print_summary(&g->values[g->outputs[k]], &t);
            if (out_dir) {
                char file[512], path[4096];
                safe_file_name(g->values[g->outputs[k]].name, file, sizeof file);
                snprintf(path, sizeof path, "%s/%s.pb", out_dir, file);
                s = vp_tensor_write_pb(path, &t, g->values[g->outputs[k]].name, &err);
            }
            free(t.data);
        }
    }
    if (inputs)
        for (int k = 0; k < g->n_inputs; k++) free(inputs[k].data);
    free(inputs);
    cli_batch_free(&batch);
    vp_exec_free(x);
    vp_backend_free(b);
    vp_graph_free(g);
    for (int k = 0; k < n_read; k++) free(feeds[k].data);
    return cli_report(s, &err);
}

const cli_cmd cli_cmd_eval = {
    "eval", run_eval, "MODEL [--dim NAME=VALUE]... [--input NAME=FILE.pb]... [--output-dir DIR] [--seed N]",
    "run the model on the CPU backend and write its outputs as\n"
    "      TensorProto files (inputs not given are drawn at random, seeded)",
    "Runs the model once on the CPU backend (every value in its own buffer)\n"
    "and prints each output's shape and summary statistics.\n",
    NULL};
