/* Whole-model check on ONNX's "light" models (AlexNet, ResNet-50, Inception, ...: real
 * graphs whose float initializers were replaced by ConstantOfShape nodes).  Each is
 * loaded, inferred and run by the naive CPU executor, and output 0 is compared with
 * light_<name>_output_0.pb.
 *
 * The input follows ONNX's backend runner (Runner.generate_dummy_data, random=False):
 * every float input of shape S (symbolic dims taken as 1) holds arange(n) / n with
 * n = prod(S), computed in double and rounded to float32.
 *
 * Tolerance: |got - want| <= 1e-7 + 1e-3 * |want|, the rtol/atol ONNX's own model tests
 * use for these networks.  The expected outputs come from a float32 reference that sums
 * in a different order than BLAS does; over ~50 convolution layers with reductions of up
 * to a few thousand terms, float32 rounding differences grow to ~1e-4 relative, so a
 * tighter bound would test summation order rather than correctness.
 *
 * An output made by Softmax is also accepted when it matches on the logit scale, where
 * that tolerance means something: softmax turns a relative error e on logits of size |z|
 * into a factor exp(e|z|) on the probabilities, so with logits of 5e9 (SqueezeNet's
 * constant weights) one float32 ulp, 512, decides whether a probability is 0.001 or 0.
 * There log(want_i / want_r) must equal z_i - z_r within ATOL + RTOL * max|z|, r being
 * the most probable class.
 *
 * usage: test_light_models [SUBSTR]   (only models whose name contains SUBSTR)
 * Prints one line per model with its run time and a final "N passed, N failed". */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "cpu_host.h"
#include "exec.h"
#include "ir/infer.h"
#include "onnx/onnx_load.h"
#include "onnx/tensor_proto.h"

#define RTOL 1e-3
#define ATOL 1e-7

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }


/* arange(n) / n in float32, shaped like graph input k. */
static vp_status make_input(const vp_graph *g, int k, vp_tensor *t, vp_error *err) {
    const vp_value *v = &g->values[g->inputs[k]];
    if (v->dtype != VP_F32)
        return vp_fail(err, VP_ERR_UNSUPPORTED, "input '%s' is %s; only float32 inputs are generated", v->name,
                       vp_dtype_name(v->dtype));
    *t = vp_value_tensor(v);
    int64_t n = vp_tensor_numel(t);
    float *data = malloc((size_t)(n ? n : 1) * sizeof *data);
    if (!data) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; i < n; i++) data[i] = (float)((double)i / (double)n);
    t->data = data;
    return VP_OK;
}

/* Compares like numpy.testing.assert_allclose(got, want, rtol, atol). */
static int close_enough(const vp_tensor *got, const vp_tensor *want, char *why, size_t len) {
    if (got->dtype != VP_F32 || want->dtype != VP_F32 || vp_tensor_numel(got) != vp_tensor_numel(want)) {
        snprintf(why, len, "got %s with %lld elements, expected %s with %lld", vp_dtype_name(got->dtype),
                 (long long)vp_tensor_numel(got), vp_dtype_name(want->dtype), (long long)vp_tensor_numel(want));
        return 0;
    }
    const float *g = got->data, *w = want->data;
    double worst = 0;
    int64_t at = -1;
    for (int64_t i = 0; i < vp_tensor_numel(want); i++) {
        double excess = fabs((double)g[i] - w[i]) - (ATOL + RTOL * fabs((double)w[i]));
        if (isnan(g[i]) != isnan(w[i]) || excess > worst) {
            worst = isnan(g[i]) != isnan(w[i]) ? INFINITY : excess;
            at = i;
        }
    }
    if (at < 0) return 1;
    snprintf(why, len, "element %lld: got %.9g, expected %.9g", (long long)at, g[at], w[at]);
    return 0;
}

/* The logit-scale check for a Softmax output (see the top): z is Softmax's input. */
static int close_on_logits(const vp_tensor *z, const vp_tensor *want, char *why, size_t len) {
    if (z->dtype != VP_F32 || vp_tensor_numel(z) != vp_tensor_numel(want) || !vp_tensor_numel(want)) return 0;
    const float *zf = z->data, *w = want->data;
    int64_t n = vp_tensor_numel(want), r = 0;
    double zmax = 0;
    for (int64_t i = 0; i < n; i++) {
        if (w[i] > w[r]) r = i;
        if (fabs(zf[i]) > zmax) zmax = fabs(zf[i]);
    }
    double tol = ATOL + RTOL * zmax;
    for (int64_t i = 0; i < n; i++) {
        /* a probability that underflowed to 0 says only that its logit is far below */
        double want_gap = w[i] > 0 ? log((double)w[i] / w[r]) : -INFINITY, got_gap = (double)zf[i] - zf[r];
        if (w[i] > 0 ? fabs(got_gap - want_gap) > tol : got_gap > -80.0) {
            size_t used = strlen(why);
            snprintf(why + used, len - used, "; on the logit scale, element %lld: gap %.9g, expected %.9g within %.3g",
                     (long long)i, got_gap, want_gap, tol);
            return 0;
        }
    }
    return 1;
}

static vp_status run_model(const char *model_path, const char *want_path, char *why, size_t why_len, vp_error *err) {
    vp_graph *g = NULL;
    vp_backend *b = NULL;
    vp_exec *x = NULL;
    vp_tensor inputs[16] = {0}, got = {0}, want = {0};
    int n_in = 0;
    vp_status s = vp_onnx_load(model_path, &g, err);
    if (!s) s = vp_bind_all_dims(g, 1, err);
    if (!s) s = vp_infer(g, NULL, NULL, err);
    if (!s && !(b = vp_backend_cpu_new())) s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
    if (!s) s = vp_exec_new(g, b, &x, err);
    for (; !s && n_in < g->n_inputs && n_in < 16; n_in++) {
        s = make_input(g, n_in, &inputs[n_in], err);
        if (!s) s = vp_exec_set_input(x, g->values[g->inputs[n_in]].name, &inputs[n_in], err);
    }
    if (!s) s = vp_exec_run(x, err);
    if (!s) s = vp_exec_get(x, g->outputs[0], &got, err);
    if (!s) s = vp_tensor_read_pb(want_path, &want, NULL, err);
    vp_tensor logits = {0};
    if (!s && !close_enough(&got, &want, why, why_len)) {
        int producer = g->values[g->outputs[0]].producer;
        int softmax = producer >= 0 && !strcmp(g->nodes[producer].op_type, "Softmax");
        if (!softmax || vp_exec_get(x, g->nodes[producer].inputs[0], &logits, err) ||
            !close_on_logits(&logits, &want, why, why_len))
            s = vp_fail(err, VP_ERR_RUNTIME, "output 0: %s", why);
    }
    free(logits.data);
    free(got.data);
    free(want.data);
    for (int i = 0; i < n_in; i++) free(inputs[i].data);
    vp_exec_free(x);
    vp_backend_free(b);
    vp_graph_free(g);
    return s;
}

int main(int argc, char **argv) {
    vp_cpu_host_install();
    const char *filter = argc > 1 ? argv[1] : NULL;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/light", VP_ONNX_TESTS);
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "cannot open %s\n", dir);
        return 1;
    }
    char *names[256];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 256) {
        size_t len = strlen(e->d_name);
        if (!strncmp(e->d_name, "light_", 6) && len > 5 && !strcmp(e->d_name + len - 5, ".onnx") &&
            (!filter || strstr(e->d_name, filter)))
            names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    int passed = 0, failed = 0;
    for (int i = 0; i < n; i++) {
        char model[8192], want[8192], why[512] = "";
        snprintf(model, sizeof model, "%s/%s", dir, names[i]);
        snprintf(want, sizeof want, "%s/%.*s_output_0.pb", dir, (int)(strlen(names[i]) - 5), names[i]);
        vp_error err = {{0}};
        double t0 = now_s();
        vp_status s = run_model(model, want, why, sizeof why, &err);
        double dt = now_s() - t0;
        if (s) {
            failed++;
            printf("FAIL %-28s %7.3f s  %s\n", names[i], dt, err.msg);
        } else {
            passed++;
            printf("PASS %-28s %7.3f s\n", names[i], dt);
        }
        free(names[i]);
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
