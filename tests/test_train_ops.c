/* The train family's ops (gradient ops, BatchNormInternal, optimizer updates) against
 * PyTorch.
 *
 * Each folder of tests/data/train_ops (written by tools/scripts/make_train_op_fixtures.py) is
 * one case: case.txt names the op, its domain and attributes; in_K.pb and out_K.pb hold
 * the inputs and the outputs torch computed (a missing file is an omitted optional
 * input or output).  The test builds a one-node graph with the IR API, infers it, runs
 * it with the naive executor on the CPU backend and compares every output.
 *
 * Tolerance: |got - want| <= rtol * max(|want|, 1), rtol 1e-10 for float64, 1e-5 for
 * float32 and 1e-2 for float16 (relative for values above 1, absolute below, so
 * gradients near zero do not demand digits their inputs never had); integers and bools
 * exactly.  A case with "expect STATUS" passes when it is refused (or fails while
 * running) with that status.
 *
 * usage: test_train_ops [--dir DIR] [SUBSTR]   (only cases whose name contains SUBSTR; DIR
 * instead of tests/data/train_ops: tests/data/fake_quant holds the quant family's cases)
 * Prints one line per case (with its largest error in those units) and a final
 * "N passed, N failed". */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backend.h"
#include "cpu_host.h"
#include "cpu_util.h"
#include "exec.h"
#include "ir/graph_build.h"
#include "ir/infer.h"
#include "onnx/tensor_proto.h"

#define MAX_IO 16
#define DATA_DIR VP_SOURCE_DIR "/tests/data/train_ops"

typedef struct test_case {
    char dir[1024];
    vp_status expect; /* VP_OK, or the status the case must fail with */
    int n_in, n_out;
    vp_tensor in[MAX_IO], want[MAX_IO]; /* data NULL where omitted */
} test_case;

static int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* Reads <prefix>_K.pb for K = 0.. into t; *count is one past the last present. */
static vp_status read_tensors(const char *dir, const char *prefix, vp_tensor *t, int *count, vp_error *err) {
    *count = 0;
    for (int k = 0; k < MAX_IO; k++) {
        char path[1200];
        snprintf(path, sizeof path, "%s/%s_%d.pb", dir, prefix, k);
        memset(&t[k], 0, sizeof t[k]);
        if (!file_exists(path)) continue;
        vp_status s = vp_tensor_read_pb(path, &t[k], NULL, err);
        if (s) return s;
        *count = k + 1;
    }
    return VP_OK;
}

static void free_case(test_case *c) {
    for (int k = 0; k < MAX_IO; k++) {
        free(c->in[k].data);
        free(c->want[k].data);
    }
}

/* ---- case.txt ---- */

static vp_status add_attr(vp_graph *g, int node, char *line, vp_error *err) {
    char *name = strtok(line, " \n"), *kind = strtok(NULL, " \n"), *val = strtok(NULL, "\n");
    if (!name || !kind || !val) return vp_fail(err, VP_ERR_PARSE, "bad attr line");
    if (!strcmp(kind, "i")) return vp_node_add_attr_int(g, node, name, strtoll(val, NULL, 10));
    if (!strcmp(kind, "f")) return vp_node_add_attr_float(g, node, name, strtof(val, NULL));
    if (!strcmp(kind, "s")) return vp_node_add_attr_string(g, node, name, val);
    if (!strcmp(kind, "ints")) {
        int64_t v[VP_MAX_RANK * 2];
        int count = 0;
        for (char *tok = strtok(val, " "); tok && count < VP_MAX_RANK * 2; tok = strtok(NULL, " "))
            v[count++] = strtoll(tok, NULL, 10);
        return vp_node_add_attr_ints(g, node, name, v, count);
    }
    return vp_fail(err, VP_ERR_PARSE, "unknown attr kind '%s'", kind);
}

/* Builds the node of case.txt over the given value ids; declared outputs get the
 * expected shape before inference. */
static vp_status build_node(vp_graph *g, test_case *c, const int *ins, const int *outs, vp_error *err) {
    char path[1200], line[512], op[128] = "", domain[128] = "";
    snprintf(path, sizeof path, "%s/case.txt", c->dir);
    FILE *f = fopen(path, "r");
    if (!f) return vp_fail(err, VP_ERR_IO, "cannot open %s", path);
    if (!fgets(line, sizeof line, f) || sscanf(line, "op %127s %127s", op, domain) < 1) {
        fclose(f);
        return vp_fail(err, VP_ERR_PARSE, "%s: first line must be 'op NAME [DOMAIN]'", path);
    }
    int node = vp_graph_add_node(g, op, domain, "node", c->n_in, ins, c->n_out, outs);
    vp_status s = node < 0 ? vp_fail(err, VP_ERR_NOMEM, "out of memory") : VP_OK;
    while (!s && fgets(line, sizeof line, f)) {
        int k;
        if (!strncmp(line, "attr ", 5)) {
            s = add_attr(g, node, line + 5, err);
        } else if (!strncmp(line, "expect ", 7)) {
            c->expect = !strncmp(line + 7, "unsupported", 11) ? VP_ERR_UNSUPPORTED
                        : !strncmp(line + 7, "invalid", 7)    ? VP_ERR_INVALID
                                                              : VP_ERR_RUNTIME;
        } else if (sscanf(line, "declare %d", &k) == 1 && k >= 0 && k < c->n_out && outs[k] >= 0) {
            vp_value *v = &g->values[outs[k]];
            v->dtype = c->want[k].dtype;
            v->rank = c->want[k].rank;
            memcpy(v->dims, c->want[k].dims, sizeof v->dims);
        }
    }
    fclose(f);
    return s;
}

/* ---- comparison ---- */

/* Also raises *worst to the largest |got - want| / max(|want|, 1) seen. */
static int compare(const vp_tensor *got, const vp_tensor *want, double *worst, char *why, size_t len) {
    int same = got->dtype == want->dtype && got->rank == want->rank;
    for (int d = 0; same && d < got->rank; d++) same = got->dims[d] == want->dims[d];
    if (!same) {
        char s1[128], s2[128];
        snprintf(why, len, "got %s %s, expected %s %s", vp_dtype_name(got->dtype),
                 vp_shape_str(got->rank, got->dims, s1, sizeof s1), vp_dtype_name(want->dtype),
                 vp_shape_str(want->rank, want->dims, s2, sizeof s2));
        return 0;
    }
    double rtol = want->dtype == VP_F64 ? 1e-10 : want->dtype == VP_F32 ? 1e-5 : vp_dtype_is_float(want->dtype) ? 1e-2 : 0;
    for (int64_t i = 0; i < vp_tensor_numel(want); i++) {
        double g = vp_load(got->data, got->dtype, i), w = vp_load(want->data, want->dtype, i);
        double e = fabs(g - w) / fmax(fabs(w), 1.0);
        if (e > *worst) *worst = e;
        if (e <= rtol) continue;
        snprintf(why, len, "element %lld: got %.17g, expected %.17g", (long long)i, g, w);
        return 0;
    }
    return 1;
}

/* ---- one case ---- */

static vp_status run_graph(vp_graph *g, const test_case *c, const int *outs, double *worst, char *why, size_t len,
                           vp_error *err) {
    vp_status s = vp_infer(g, NULL, NULL, err);
    if (s) return s;
    vp_backend *b = vp_backend_cpu_new();
    vp_exec *x = NULL;
    if (!b) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    s = vp_exec_new(g, b, &x, err);
    if (!s) s = vp_exec_run(x, err);
    for (int k = 0; k < c->n_out && !s; k++) {
        if (!c->want[k].data) continue;
        vp_tensor got;
        s = vp_exec_get(x, outs[k], &got, err);
        if (s) break;
        char detail[512];
        if (!compare(&got, &c->want[k], worst, detail, sizeof detail)) {
            snprintf(why, len, "output %d: %s", k, detail);
            s = vp_fail(err, VP_ERR_RUNTIME, "mismatch");
        }
        free(got.data);
    }
    vp_exec_free(x);
    vp_backend_free(b);
    return s;
}

static const char *data_dir = DATA_DIR;

static int run_case(const char *name, double *worst, char *why, size_t len) {
    test_case c;
    memset(&c, 0, sizeof c);
    snprintf(c.dir, sizeof c.dir, "%s/%s", data_dir, name);
    vp_error err = {{0}};
    vp_graph *g = vp_graph_new();
    int ins[MAX_IO], outs[MAX_IO];
    vp_status s = g ? VP_OK : vp_fail(&err, VP_ERR_NOMEM, "out of memory");
    if (!s) s = read_tensors(c.dir, "in", c.in, &c.n_in, &err);
    if (!s) s = read_tensors(c.dir, "out", c.want, &c.n_out, &err);
    if (!s) {
        g->path = strdup(name);
        g->opset_onnx = 17;
        g->opset_ms = 1;
    }
    for (int k = 0; k < c.n_in && !s; k++) {
        char vname[32];
        snprintf(vname, sizeof vname, "in_%d", k);
        ins[k] = -1;
        if (!c.in[k].data) continue;
        s = vp_build_input(g, vname, c.in[k].dtype, c.in[k].rank, c.in[k].dims, &ins[k], &err);
        if (!s) s = vp_bind_input_data(g, vname, &c.in[k], &err);
    }
    for (int k = 0; k < c.n_out && !s; k++) {
        char vname[32];
        snprintf(vname, sizeof vname, "out_%d", k);
        outs[k] = c.want[k].data ? vp_graph_add_value(g, vname) : -1;
    }
    if (!s) s = build_node(g, &c, ins, outs, &err);
    if (!s) s = vp_graph_link(g, &err);
    why[0] = 0;
    if (!s) s = run_graph(g, &c, outs, worst, why, len, &err);
    int ok = s == c.expect && !why[0];
    if (s && c.expect && !why[0]) /* an expected refusal: say what it said */
        snprintf(why, len, "%s %.900s", ok ? "refused as expected:" : "failed otherwise:", err.msg);
    else if (s && !why[0])
        snprintf(why, len, "%.1000s", err.msg);
    else if (!s && c.expect)
        snprintf(why, len, "ran, but %s was expected", vp_status_name(c.expect));
    vp_graph_free(g);
    free_case(&c);
    return ok;
}

/* MaxPoolGrad fed by a MaxPool takes dX's shape from the pool's input: X [1, 2, 4, 6]
 * holds distinct values, so each 2x2 window's maximum is unique and dX holds dY at the
 * maxima and zeros elsewhere. */
static int maxpool_pair_case(char *why, size_t len) {
    enum { N = 48 };
    float x[N], dy[N / 4];
    for (int i = 0; i < N; i++) x[i] = (float)((i * 17) % N);
    for (int i = 0; i < N / 4; i++) dy[i] = (float)(i + 1);
    vp_tensor tx = {VP_F32, 4, {1, 2, 4, 6}, x}, tdy = {VP_F32, 4, {1, 2, 2, 3}, dy};
    vp_error err = {{0}};
    vp_graph *g = vp_graph_new();
    int ix, idy, pool_out[2] = {-1, -1}, dx = -1;
    vp_status s = g ? VP_OK : vp_fail(&err, VP_ERR_NOMEM, "out of memory");
    if (!s) {
        g->path = strdup("maxpool_pair");
        g->opset_onnx = 17;
        s = vp_build_input(g, "x", VP_F32, 4, tx.dims, &ix, &err);
    }
    if (!s) s = vp_build_input(g, "dy", VP_F32, 4, tdy.dims, &idy, &err);
    if (!s) s = vp_bind_input_data(g, "x", &tx, &err);
    if (!s) s = vp_bind_input_data(g, "dy", &tdy, &err);
    if (!s) {
        pool_out[0] = vp_graph_add_value(g, "y");
        pool_out[1] = vp_graph_add_value(g, "indices");
        dx = vp_graph_add_value(g, "dx");
        int pool = vp_graph_add_node(g, "MaxPool", "", "pool", 1, &ix, 2, pool_out);
        int grad_in[2] = {idy, pool_out[1]};
        int grad = vp_graph_add_node(g, "MaxPoolGrad", "com.microsoft", "grad", 2, grad_in, 1, &dx);
        const int64_t two[2] = {2, 2};
        s = pool < 0 || grad < 0 ? vp_fail(&err, VP_ERR_NOMEM, "out of memory") : VP_OK;
        if (!s) s = vp_node_add_attr_ints(g, pool, "kernel_shape", two, 2);
        if (!s) s = vp_node_add_attr_ints(g, pool, "strides", two, 2);
    }
    if (!s) s = vp_graph_link(g, &err);
    if (!s) s = vp_infer(g, NULL, NULL, &err);
    vp_backend *b = s ? NULL : vp_backend_cpu_new();
    vp_exec *x_run = NULL;
    vp_tensor got = {0};
    if (!s) s = vp_exec_new(g, b, &x_run, &err);
    if (!s) s = vp_exec_run(x_run, &err);
    if (!s) s = vp_exec_get(x_run, dx, &got, &err);
    int ok = !s && got.rank == 4 && vp_tensor_numel(&got) == N;
    double sum = 0, nonzero = 0;
    for (int i = 0; ok && i < N; i++) {
        float v = ((const float *)got.data)[i];
        sum += v;
        nonzero += v != 0;
    }
    ok = ok && sum == 78 && nonzero == N / 4; /* 1 + 2 + ... + 12, once each */
    if (!ok) snprintf(why, len, "%s", s ? err.msg : "dX is not dY scattered to the window maxima");
    free(got.data);
    vp_exec_free(x_run);
    vp_backend_free(b);
    vp_graph_free(g);
    return ok;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv) {
    vp_cpu_host_install();
    int own_dir = argc > 2 && !strcmp(argv[1], "--dir");
    if (own_dir) data_dir = argv[2], argc -= 2, argv += 2;
    const char *filter = argc > 1 ? argv[1] : NULL;
    DIR *d = opendir(data_dir);
    if (!d) {
        fprintf(stderr, "cannot open %s\n", data_dir);
        return 1;
    }
    char *names[512];
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) && n < 512;)
        if (e->d_name[0] != '.' && (!filter || strstr(e->d_name, filter))) names[n++] = strdup(e->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    int passed = 0, failed = 0;
    for (int i = 0; i < n; i++) {
        char why[1024];
        double worst = 0;
        if (run_case(names[i], &worst, why, sizeof why)) {
            if (why[0]) printf("PASS %s (%s)\n", names[i], why);
            else printf("PASS %s (largest error %.1e)\n", names[i], worst);
            passed++;
        } else {
            printf("FAIL %s: %s\n", names[i], why);
            failed++;
        }
        free(names[i]);
    }
    if (!own_dir && (!filter || strstr("maxpool_pair", filter))) {
        char why[1024];
        int ok = maxpool_pair_case(why, sizeof why);
        if (ok) printf("PASS maxpool_pair (dX shaped by the MaxPool's input)\n");
        else printf("FAIL maxpool_pair: %s\n", why);
        passed += ok;
        failed += !ok;
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed || !passed ? 1 : 0;
}
