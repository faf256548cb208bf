/* The CUDA backend against the CPU reference, op by op and model by model.
 *
 * Three groups of cases, each run on both backends with the same inputs (the naive
 * executor, one buffer per value) and compared output by output:
 *   ops/     one-node graphs with seeded random inputs, listed in cuda_ops_cases.c
 *            (elementwise with broadcasting, movement, linalg, norms, reductions,
 *            softmax, losses, optimizer updates); MatMul and Gemm again with TF32;
 *   train/   every case of tests/data/train_ops (the train family's fixtures), its
 *            inputs as given, float64 and float16 ones rounded to float32;
 *   models/  the training step of every model in models/ (forward, loss, backward,
 *            optimizer): every value any node computes compared, then the five-step
 *            loss curves against the PyTorch fixtures (cuda_ops_models.c).
 * Tolerance: |cuda - cpu| <= tol * max(|cpu|, 1) with tol 1e-5 for float32, 1e-2 with
 * TF32, 1e-10 for float64, exact for integers and bools; bfloat16 and float16 within one
 * ulp of their dtype plus float32's reassociation allowance, and a two-ulp mutation of
 * each such output must fail (lowp_compare.h); fp32 model values 1e-4 of the value's own
 * scale (long chains; Adam's updates 2 lr), bf16 and fp16 ones node by node in ulps;
 * losses 1e-4 from torch.  No bound depends on the CPU's vector width: tools/test.sh
 * runs this test again under an SSE4.1 cap of OpenBLAS and oneDNN.
 *
 * A case whose op the CUDA backend refuses with VP_ERR_UNSUPPORTED (a dtype or
 * variant without a kernel) is skipped, not failed, and named.
 *
 * Where no GPU is, the build links the backend's host emulation (runtime/cuda/emu:
 * the same kernels and C files on fibers and host memory, VP_CUDA_EMU), so every case
 * runs in CI; the emulation runs threads in a permuted order, which turns a missing
 * __syncthreads into a wrong value here.  VP_CUDA_EMU_STATS=1 lists the kernels
 * launched.  Built with neither (or with CUDA and no device) it checks only that every
 * op of the models' training steps has a CUDA kernel, prints "SKIP: no CUDA device
 * (...)" and "0 passed, 0 failed, N skipped", and exits 0.  The steps the coverage
 * check covers are cuda_ops_coverage.c's: the bundled models at each precision and
 * the torch.onnx training exports where they have been made.
 *
 * usage: test_cuda_ops [SUBSTR]   (only cases whose name contains SUBSTR)
 * VP_CUDA_QUICK=1 (the sanitizer build, where the emulation runs at -O0): the loss
 * curves of the smallest model only; every model's step is still compared value by
 * value, so every kernel the models use still runs. */
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
#include "lowp_compare.h"
#include "ir/graph_build.h"
#include "ir/infer.h"
#include "mini_json.h"
#include "model_util.h"
#include "ir/rng.h"
#include "onnx/tensor_proto.h"
#ifdef VP_HAVE_CUDA
#include "cuda_backend.h"
#endif

/* OpenBLAS's, declared here in case cblas.h is another BLAS's header */
char *openblas_get_corename(void);

#define MAX_IO 16
#define TRAIN_DIR VP_SOURCE_DIR "/tests/data/train_ops"

static const char *filter;

#include "cuda_ops_cases.h"


static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int list_train_cases(char ***out) {
    DIR *d = opendir(TRAIN_DIR);
    int n = 0, cap = 0;
    char **names = NULL;
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            names = realloc(names, (size_t)cap * sizeof *names);
        }
        names[n++] = strdup(e->d_name);
    }
    if (d) closedir(d);
    if (n) qsort(names, (size_t)n, sizeof *names, by_name);
    *out = names;
    return n;
}

#ifdef VP_HAVE_CUDA
static int passes, failures, skips;

static int selected(const char *name) { return !filter || strstr(name, filter); }

/* ---- a one-node graph with its inputs ---- */

typedef struct graph_case {
    vp_graph *g;
    int n_in, n_out;
    int in_id[MAX_IO], out_id[MAX_IO];
    vp_tensor in[MAX_IO]; /* data fed at run time (NULL data: constant or omitted) */
    void *bound[MAX_IO];  /* data bound into the graph, freed after it */
} graph_case;

static void graph_case_free(graph_case *c) {
    vp_graph_free(c->g);
    for (int k = 0; k < MAX_IO; k++) {
        free(c->in[k].data);
        free(c->bound[k]);
    }
    memset(c, 0, sizeof *c);
}

static int parse_dims(const char *s, int64_t *dims) {
    int rank = 0;
    while (*s && *s != ':' && rank < VP_MAX_RANK) {
        char *end;
        dims[rank++] = strtoll(s, &end, 10);
        if (end == s) break;
        s = end;
        if (*s == ',') s++;
    }
    return rank;
}

static vp_status add_attrs(vp_graph *g, int node, const char *spec, vp_error *err) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s", spec);
    vp_status s = VP_OK;
    for (char *save = NULL, *item = strtok_r(buf, ";", &save); item && !s; item = strtok_r(NULL, ";", &save)) {
        char *eq = strchr(item, '='), *colon = eq ? strchr(eq, ':') : NULL;
        if (!eq || !colon) return vp_fail(err, VP_ERR_PARSE, "bad attr '%s'", item);
        *eq = *colon = 0;
        const char *kind = eq + 1, *val = colon + 1;
        if (!strcmp(kind, "i")) s = vp_node_add_attr_int(g, node, item, strtoll(val, NULL, 10));
        else if (!strcmp(kind, "f")) s = vp_node_add_attr_float(g, node, item, strtof(val, NULL));
        else if (!strcmp(kind, "s")) s = vp_node_add_attr_string(g, node, item, val);
        else {
            int64_t v[16];
            int k = 0;
            for (const char *p = val; *p && k < 16;) {
                char *end;
                v[k++] = strtoll(p, &end, 10);
                if (end == p) break;
                p = end;
                if (*p == ',') p++;
            }
            s = vp_node_add_attr_ints(g, node, item, v, k);
        }
    }
    return s;
}

/* Builds inputs from the case's specs with data drawn from rng. */
static vp_status build_random(const op_case *oc, graph_case *c, vp_rng *rng, vp_error *err) {
    c->g = vp_graph_new();
    if (!c->g) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    c->g->path = strdup(oc->name);
    c->g->opset_onnx = oc->opset;
    c->g->opset_ms = 1;
    vp_status s = VP_OK;
    for (int k = 0; k < 8 && oc->inputs[k] && !s; k++) {
        const char *spec = oc->inputs[k], *colon = strchr(spec, ':');
        char name[16], kind[8];
        snprintf(name, sizeof name, "in_%d", k);
        snprintf(kind, sizeof kind, "%.*s", colon ? (int)(colon - spec) : 7, spec);
        c->n_in = k + 1;
        c->in_id[k] = -1;
        if (!strcmp(kind, "-")) continue;
        int64_t dims[VP_MAX_RANK];
        int rank = colon && strcmp(kind, "c32f") ? parse_dims(colon + 1, dims) : 0;
        if (!strcmp(kind, "cbool")) {
            uint8_t flag = colon && atoi(colon + 1) != 0;
            c->in_id[k] = vp_build_const(c->g, name, VP_BOOL, 0, NULL, &flag);
            if (c->in_id[k] < 0) s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
            continue;
        }
        if (!strcmp(kind, "c64") || !strcmp(kind, "c64s") || !strcmp(kind, "c32f")) {
            /* constants: values, not shapes */
            int64_t v[VP_MAX_RANK];
            float f = 0;
            int count = rank;
            memcpy(v, dims, sizeof v);
            if (!strcmp(kind, "c32f")) f = strtof(colon + 1, NULL);
            int64_t shape[1] = {count};
            int is_scalar = strcmp(kind, "c64");
            c->in_id[k] = !strcmp(kind, "c32f") ? vp_build_const(c->g, name, VP_F32, 0, shape, &f)
                                                : vp_build_const(c->g, name, VP_I64, is_scalar ? 0 : 1, shape, v);
            if (c->in_id[k] < 0) s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
            continue;
        }
        vp_dtype dt = !strcmp(kind, "f64") ? VP_F64 : !strcmp(kind, "i64") ? VP_I64 : !strcmp(kind, "bool") ? VP_BOOL
                      : !strcmp(kind, "f16") || !strcmp(kind, "f16nan") ? VP_F16
                      : !strcmp(kind, "bf16") || !strcmp(kind, "bf16pos") ? VP_BF16 : VP_F32;
        int64_t hi = 0;
        if (dt == VP_I64) {
            const char *c2 = strchr(colon + 1, ':');
            hi = c2 ? strtoll(c2 + 1, NULL, 10) : 10;
        }
        s = vp_build_input(c->g, name, dt, rank, dims, &c->in_id[k], err);
        if (s) break;
        vp_tensor *t = &c->in[k];
        *t = (vp_tensor){.dtype = dt, .rank = rank};
        memcpy(t->dims, dims, sizeof(int64_t) * (size_t)rank);
        int64_t n = vp_tensor_numel(t);
        t->data = calloc((size_t)(n ? n : 1), vp_dtype_size(dt));
        if (!t->data) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
        for (int64_t i = 0; i < n; i++) {
            double u = vp_rng_uniform(rng);
            if (dt == VP_F32) ((float *)t->data)[i] = !strcmp(kind, "zero") || !strcmp(kind, "step") ? 0.0f
                                                      : !strcmp(kind, "pos")                        ? (float)(0.5 + u)
                                                                                                    : (float)(2 * u - 1);
            else if (dt == VP_F64) ((double *)t->data)[i] = 2 * u - 1;
            else if (dt == VP_F16 || dt == VP_BF16) vp_store(t->data, dt, i, strstr(kind, "pos") ? 0.5 + u : 2 * u - 1);
            else if (dt == VP_I64) ((int64_t *)t->data)[i] = (int64_t)(u * (double)hi);
            else ((uint8_t *)t->data)[i] = u < 0.5;
        }
        if (!strcmp(kind, "step")) ((float *)t->data)[0] = 2.0f; /* the third Adam step */
        if (strstr(kind, "nan") && n > 1) vp_store(t->data, dt, n / 2, NAN);
        if (!strcmp(kind, "finf") && n > 1) ((float *)t->data)[n - 1] = -INFINITY;
    }
    for (int k = 0; k < oc->n_out && !s; k++) {
        char name[16];
        snprintf(name, sizeof name, "out_%d", k);
        c->out_id[k] = vp_graph_add_value(c->g, name);
    }
    c->n_out = oc->n_out;
    if (s) return s;
    int node = vp_graph_add_node(c->g, oc->op, oc->domain, "node", c->n_in, c->in_id, c->n_out, c->out_id);
    if (node < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    c->g->nodes[node].opset = oc->domain[0] ? 1 : oc->opset;
    s = add_attrs(c->g, node, oc->attrs, err);
    if (!s) s = vp_graph_link(c->g, err);
    if (!s) s = vp_infer(c->g, NULL, NULL, err);
    return s;
}

/* ---- running one graph on one backend ---- */

static vp_status run_on(vp_backend *b, graph_case *c, vp_tensor *got, vp_error *err) {
    vp_exec *x = NULL;
    vp_status s = vp_exec_new(c->g, b, &x, err);
    for (int k = 0; k < c->n_in && !s; k++)
        if (c->in[k].data && c->in_id[k] >= 0) s = vp_exec_write_value(x, c->in_id[k], c->in[k].data, err);
    if (!s) s = vp_exec_run(x, err);
    for (int k = 0; k < c->n_out && !s; k++)
        if (c->out_id[k] >= 0) s = vp_exec_get(x, c->out_id[k], &got[k], err);
    vp_exec_free(x);
    return s;
}

static double tol_for(vp_dtype t, double f32_tol) { return t == VP_F64 ? 1e-10 : t == VP_F32 ? f32_tol : 0; }

static int is_lowp(vp_dtype t) { return t == VP_BF16 || t == VP_F16; }

/* Largest |a - b| / max(|b|, 1); -1 on a dtype or shape mismatch. */
static double compare(const vp_tensor *a, const vp_tensor *b, int64_t *where) {
    if (a->dtype != b->dtype || a->rank != b->rank) return -1;
    for (int d = 0; d < a->rank; d++)
        if (a->dims[d] != b->dims[d]) return -1;
    double worst = 0;
    for (int64_t i = 0; i < vp_tensor_numel(b); i++) {
        double x = vp_load(a->data, a->dtype, i), y = vp_load(b->data, b->dtype, i);
        double e = isnan(x) != isnan(y) ? INFINITY : isnan(x) ? 0 : fabs(x - y) / fmax(fabs(y), 1.0);
        if (e > worst) {
            worst = e;
            *where = i;
        }
    }
    return worst;
}

void cuda_ops_report(const char *group, const char *name, int result, const char *detail) {
    const char *word = result > 0 ? "ok  " : result == 0 ? "FAIL" : "skip";
    printf("%s %s/%s: %s\n", word, group, name, detail);
    if (result > 0) passes++;
    else if (result == 0) failures++;
    else skips++;
}

/* Runs c on the CPU and on cuda, compares every output. */
static void check_graph(const char *group, const char *name, graph_case *c, vp_backend *cpu, vp_backend *cuda,
                        double f32_tol) {
    vp_tensor want[MAX_IO], got[MAX_IO];
    memset(want, 0, sizeof want);
    memset(got, 0, sizeof got);
    vp_error err = {{0}};
    char detail[1200];
    vp_status s = run_on(cpu, c, want, &err);
    if (s) {
        snprintf(detail, sizeof detail, "the CPU refuses: %.1000s", err.msg);
        cuda_ops_report(group, name, -1, detail);
        goto done;
    }
    vp_backend_cuda_set_graph(cuda, c->g);
    s = run_on(cuda, c, got, &err);
    if (s) {
        snprintf(detail, sizeof detail, "%s: %.1000s", s == VP_ERR_UNSUPPORTED ? "no CUDA kernel" : "CUDA failed", err.msg);
        cuda_ops_report(group, name, s == VP_ERR_UNSUPPORTED ? -1 : 0, detail);
        goto done;
    }
    double worst = 0, worst_low = 0;
    int ok = 1;
    detail[0] = 0;
    for (int k = 0; k < c->n_out && ok; k++) {
        if (!want[k].data) continue;
        int64_t at = 0;
        /* bfloat16 and float16 in ulps of their dtype (lowp_compare.h): e is a fraction
         * of the bound, and a two-ulp mutation of the output must exceed it */
        int low = is_lowp(want[k].dtype);
        double e = low ? lowp_compare(&got[k], &want[k], 1, LOWP_ACC_F32, &at) : compare(&got[k], &want[k], &at);
        double tol = low ? 1 : tol_for(want[k].dtype, f32_tol);
        if (e < 0 || e > tol) {
            ok = 0;
            if (e < 0) snprintf(detail, sizeof detail, "output %d: dtype or shape differs", k);
            else
                snprintf(detail, sizeof detail, "output %d element %lld: cuda %.9g, cpu %.9g (error %.3g > %.0e%s)", k,
                         (long long)at, vp_load(got[k].data, got[k].dtype, at), vp_load(want[k].data, want[k].dtype, at), e,
                         tol, low ? " of 1 ulp + 2^-16 of the scale" : "");
        } else if (low && lowp_mutation_caught(&got[k], &want[k], 1, LOWP_ACC_F32) == 0) {
            ok = 0;
            snprintf(detail, sizeof detail, "output %d: a two-ulp mutation passes the bound", k);
        }
        if (low) worst_low = fmax(worst_low, e);
        else if (e > worst) worst = e;
    }
    if (ok && worst_low > 0) snprintf(detail, sizeof detail, "largest error %.3g; low precision %.3g of 1 ulp", worst, worst_low);
    else if (ok) snprintf(detail, sizeof detail, "largest error %.3g", worst);
    cuda_ops_report(group, name, ok, detail);
done:
    vp_backend_cuda_set_graph(cuda, NULL);
    for (int k = 0; k < MAX_IO; k++) {
        free(want[k].data);
        free(got[k].data);
    }
}

static void run_op_cases(vp_backend *cpu, vp_backend *cuda, vp_backend *cuda_tf32) {
    for (int i = 0; i < vp_cuda_op_n_cases; i++) {
        const op_case *oc = &vp_cuda_op_cases[i];
        if (!selected(oc->name)) continue;
        graph_case c;
        memset(&c, 0, sizeof c);
        vp_rng rng = {(uint64_t)i * 7919 + 1};
        vp_error err = {{0}};
        vp_status s = build_random(oc, &c, &rng, &err);
        /* "name [Op]": tools/gpu-check.sh tabulates the errors by op */
        char label[160];
        snprintf(label, sizeof label, "%s [%s]", oc->name, oc->op);
        int low = strstr(oc->inputs[0], "16:") != NULL; /* float16 or bfloat16 operands */
        if (s) {
            cuda_ops_report("ops", label, 0, err.msg);
        } else {
            check_graph("ops", label, &c, cpu, cuda, 1e-5);
            if (cuda_tf32 && !low && (!strcmp(oc->op, "MatMul") || !strcmp(oc->op, "Gemm"))) {
                snprintf(label, sizeof label, "%s_tf32 [%s]", oc->name, oc->op);
                check_graph("ops", label, &c, cpu, cuda_tf32, 1e-2);
            }
        }
        graph_case_free(&c);
    }
}

/* ---- tests/data/train_ops ---- */

static vp_status build_train_case(const char *dir, graph_case *c, vp_error *err) {
    char path[1400], line[512], op[128] = "", domain[128] = "";
    int expect = 0;
    c->g = vp_graph_new();
    if (!c->g) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    c->g->path = strdup(dir);
    c->g->opset_onnx = 17;
    c->g->opset_ms = 1;
    vp_tensor want[MAX_IO];
    memset(want, 0, sizeof want);
    vp_status s = VP_OK;
    for (int k = 0; k < MAX_IO && !s; k++) {
        struct stat st;
        snprintf(path, sizeof path, "%s/in_%d.pb", dir, k);
        c->in_id[k] = -1;
        if (stat(path, &st) == 0) {
            s = vp_tensor_read_pb(path, &c->in[k], NULL, err);
            c->n_in = k + 1;
        }
        snprintf(path, sizeof path, "%s/out_%d.pb", dir, k);
        c->out_id[k] = -1;
        if (!s && stat(path, &st) == 0) {
            s = vp_tensor_read_pb(path, &want[k], NULL, err);
            c->n_out = k + 1;
        }
    }
    for (int k = 0; k < c->n_in && !s; k++) {
        if (!c->in[k].data) continue;
        char name[16];
        snprintf(name, sizeof name, "in_%d", k);
        vp_tensor *t = &c->in[k];
        if (vp_dtype_is_float(t->dtype) && t->dtype != VP_F32) {
            /* the CUDA kernels compute float32: both backends get the fixture rounded to it */
            int64_t count = vp_tensor_numel(t);
            float *f = malloc((size_t)(count ? count : 1) * sizeof *f);
            if (!f) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
            for (int64_t i = 0; i < count; i++) f[i] = (float)vp_load(t->data, t->dtype, i);
            free(t->data);
            t->data = f;
            t->dtype = VP_F32;
        }
        s = vp_build_input(c->g, name, t->dtype, t->rank, t->dims, &c->in_id[k], err);
        /* integer inputs are bound (shapes, axes, labels); floats are fed, so nothing folds */
        if (!s && !vp_dtype_is_float(t->dtype)) {
            s = vp_bind_input_data(c->g, name, t, err);
            c->bound[k] = t->data;
            t->data = NULL;
        }
    }
    for (int k = 0; k < c->n_out && !s; k++) {
        char name[16];
        snprintf(name, sizeof name, "out_%d", k);
        if (want[k].data) c->out_id[k] = vp_graph_add_value(c->g, name);
    }
    snprintf(path, sizeof path, "%s/case.txt", dir);
    FILE *f = s ? NULL : fopen(path, "r");
    if (!s && !f) s = vp_fail(err, VP_ERR_IO, "cannot open %s", path);
    if (!s && (!fgets(line, sizeof line, f) || sscanf(line, "op %127s %127s", op, domain) < 1))
        s = vp_fail(err, VP_ERR_PARSE, "%s: no op line", path);
    int node = s ? -1 : vp_graph_add_node(c->g, op, domain, "node", c->n_in, c->in_id, c->n_out, c->out_id);
    if (!s && node < 0) s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
    while (!s && fgets(line, sizeof line, f)) {
        int k;
        if (!strncmp(line, "attr ", 5)) {
            char *name = strtok(line + 5, " \n"), *kind = strtok(NULL, " \n"), *val = strtok(NULL, "\n");
            if (!name || !kind || !val) continue;
            char spec[512];
            snprintf(spec, sizeof spec, "%s=%s:%s", name, !strcmp(kind, "ints") ? "is" : kind, val);
            for (char *p = strchr(spec, ':'); p && *p; p++)
                if (*p == ' ') *p = ',';
            s = add_attrs(c->g, node, spec, err);
        } else if (!strncmp(line, "expect ", 7)) {
            expect = 1;
        } else if (sscanf(line, "declare %d", &k) == 1 && k >= 0 && k < c->n_out && c->out_id[k] >= 0) {
            vp_value *v = &c->g->values[c->out_id[k]];
            v->dtype = vp_dtype_is_float(want[k].dtype) ? VP_F32 : want[k].dtype;
            v->rank = want[k].rank;
            memcpy(v->dims, want[k].dims, sizeof v->dims);
        }
    }
    if (f) fclose(f);
    for (int k = 0; k < MAX_IO; k++) free(want[k].data);
    if (!s && expect) return vp_fail(err, VP_ERR_USAGE, "a refusal case");
    if (!s) s = vp_graph_link(c->g, err);
    if (!s) s = vp_infer(c->g, NULL, NULL, err);
    return s;
}

static void run_train_cases(vp_backend *cpu, vp_backend *cuda) {
    char **names;
    int n = list_train_cases(&names);
    for (int i = 0; i < n; i++) {
        if (selected(names[i])) {
            char dir[1100];
            snprintf(dir, sizeof dir, "%s/%s", TRAIN_DIR, names[i]);
            graph_case c;
            memset(&c, 0, sizeof c);
            vp_error err = {{0}};
            vp_status s = build_train_case(dir, &c, &err);
            if (s == VP_ERR_USAGE) cuda_ops_report("train", names[i], -1, "a refusal case (the CPU test covers it)");
            else if (s) cuda_ops_report("train", names[i], -1, err.msg);
            else check_graph("train", names[i], &c, cpu, cuda, 1e-5);
            graph_case_free(&c);
        }
        free(names[i]);
    }
    free(names);
}

#endif

int main(int argc, char **argv) {
    vp_cpu_host_install();
    filter = argc > 1 ? argv[1] : NULL;
    /* the CUDA kernels follow the CPU reference kernels (their order of sums and
     * roundings), not oneDNN's: every CPU backend here compares against those */
    setenv("VP_CPU_REFERENCE", "1", 1);
    const char *q = getenv("VP_CUDA_QUICK");
    int quick = q && *q && strcmp(q, "0");
    char names[32][64];
    int n_models = test_model_list(names, 32), n_ops = 0;
    static cuda_op_seen ops[512];
    int n_steps = vp_cuda_coverage_collect(ops, 512, &n_ops, stdout);
    char **train_names;
    int n_train = list_train_cases(&train_names);
    for (int i = 0; i < n_train; i++) free(train_names[i]);
    free(train_names);
    int total = vp_cuda_op_n_cases + n_train + 6 * n_models;
#ifdef VP_HAVE_CUDA
    int missing = 0;
    for (int i = 0; i < n_ops; i++) {
        const char *op = ops[i].op, *dot = strrchr(op, '.');
        char domain[64] = "";
        if (dot) snprintf(domain, sizeof domain, "%.*s", (int)(dot - op), op);
        if (!vp_backend_cuda_supports(domain, dot ? dot + 1 : op)) {
            printf("FAIL coverage: %s has no CUDA kernel (first in: %s)\n", op, ops[i].first);
            missing++;
        }
    }
    if (!missing) printf("ok   coverage: all %d ops of %d training steps have CUDA kernels\n", n_ops, n_steps);
    printf("     ops:");
    for (int i = 0; i < n_ops; i++) printf(" %s", ops[i].op);
    printf("\n");
    char why[256];
    if (vp_cuda_device_count(why, sizeof why) == 0) {
        printf("SKIP: no CUDA device (%s)\n", why);
        printf("0 passed, %d failed, %d skipped\n", missing ? 1 : 0, total);
        return missing ? 1 : 0;
    }
    vp_error err = {{0}};
    vp_backend *cpu = vp_backend_cpu_new(), *cuda = vp_backend_cuda_new(0, 0, &err), *tf32 = NULL;
    if (cuda) tf32 = vp_backend_cuda_new(0, 1, &err);
    if (!cpu || !cuda || !tf32) {
        printf("FAIL: cannot create the backends: %s\n", err.msg);
        printf("0 passed, 1 failed, %d skipped\n", total);
        return 1;
    }
    printf("device: %s\n", vp_backend_cuda_device_name(cuda));
    /* the libraries' kernels for this run: the bounds must not depend on them */
    const char *isa = getenv("ONEDNN_MAX_CPU_ISA");
    printf("cpu: OpenBLAS core %s, oneDNN ISA cap %s\n", openblas_get_corename(), isa && *isa ? isa : "none");
    if (missing) failures++;
    run_op_cases(cpu, cuda, tf32);
    run_train_cases(cpu, cuda);
    for (int i = 0; i < n_models; i++) {
        const char *fixtures[2] = {"train_sgd_momentum.json", "train_adamw.json"};
        for (int f = 0; f < 2; f++) {
            char label[160];
            snprintf(label, sizeof label, "%.60s_%.60s", names[i], fixtures[f]);
            if (!selected(label)) continue;
            cuda_ops_check_model_values(names[i], fixtures[f], VP_PRECISION_FP32, cpu, cuda);
            /* mixed precision: the AdamW step of every model in bf16 and fp16 */
            if (f == 1) cuda_ops_check_model_values(names[i], fixtures[f], VP_PRECISION_BF16, cpu, cuda);
            if (f == 1) cuda_ops_check_model_values(names[i], fixtures[f], VP_PRECISION_FP16, cpu, cuda);
            if (!quick || !strcmp(names[i], "mlp")) cuda_ops_check_model_curve(names[i], fixtures[f], cuda);
            else cuda_ops_report("models", label, -1, "loss curve left out (VP_CUDA_QUICK)");
        }
    }
    vp_backend_free(tf32);
    vp_backend_free(cuda);
    vp_backend_free(cpu);
    printf("%d passed, %d failed, %d skipped\n", passes, failures, skips);
    return failures ? 1 : 0;
#else
    (void)ops;
    (void)n_ops;
    (void)n_steps;
    (void)quick;
    printf("SKIP: no CUDA device (built without CUDA)\n");
    printf("0 passed, 0 failed, %d skipped\n", total);
    return 0;
#endif
}
