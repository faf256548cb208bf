/* ONNX Runtime's training artifacts (models/mlp/ort_artifacts, made by
 * tools/scripts/make_ort_artifacts.py with onnxruntime-training's generate_artifacts) load and
 * run here, and give our gradients.
 *
 * training_model.onnx has the parameters as graph inputs (fed here from
 * models/mlp/model.onnx's initializers, by name), ONNX Runtime's gradient ops
 * (SoftmaxCrossEntropyLossGrad, ReluGrad) and one com.microsoft.InPlaceAccumulatorV2 per
 * parameter that adds the gradient into its accumulation buffer (reset first when
 * lazy_reset_grad is true).  On fixtures/x.pb and labels.pb:
 *   - the loss and every gradient equal our own autodiff's on models/mlp/model.onnx
 *     within 1e-5 relative, and ONNX Runtime's own (ort_loss.pb, ort_grads/);
 *   - with the accumulators' optional buffer_out made visible, the buffers accumulate:
 *     zero + g, then g + g, then a reset gives g again, exactly;
 *   - eval_model.onnx gives the same loss; optimizer_model.onnx (ONNX Runtime's
 *     AdamWOptimizer over tensor sequences) is refused with a message saying why. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "backend.h"
#include "cpu_host.h"
#include "cpu_util.h"
#include "exec.h"
#include "ir/infer.h"
#include "model_util.h"
#include "onnx/onnx_load.h"
#include "onnx/tensor_proto.h"

#define ART VP_SOURCE_DIR "/models/mlp/ort_artifacts"
#define SUFFIX "_grad.accumulation.buffer"


/* Worst |a-b| / (|b| + max|b|) over the tensor (as test_training.c). */
static double rel_error(const vp_tensor *a, const vp_tensor *b) {
    int64_t n = vp_tensor_numel(b);
    if (vp_tensor_numel(a) != n) return INFINITY;
    double scale = 0, worst = 0;
    for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(vp_load(b->data, b->dtype, i)));
    for (int64_t i = 0; i < n; i++) {
        double d = fabs(vp_load(a->data, a->dtype, i) - vp_load(b->data, b->dtype, i));
        worst = fmax(worst, d / (fabs(vp_load(b->data, b->dtype, i)) + scale + 1e-30));
    }
    return worst;
}

typedef struct ort_run {
    vp_graph *g;      /* training_model.onnx */
    vp_graph *model;  /* models/mlp/model.onnx: the initial weights */
    vp_backend *b;
    vp_exec *x;
    int n_acc;
    int acc[16];      /* InPlaceAccumulatorV2 node ids */
    int acc_out[16];  /* their buffer_out values, when made visible, else -1 */
} ort_run;

static void ort_free(ort_run *r) {
    vp_exec_free(r->x);
    vp_backend_free(r->b);
    vp_graph_free(r->g);
    vp_graph_free(r->model);
    memset(r, 0, sizeof *r);
}

/* Gives accumulator k its optional second output, so the accumulated buffer is a value. */
static vp_status add_buffer_out(ort_run *r, int k, vp_error *err) {
    vp_graph *g = r->g;
    vp_node *n = &g->nodes[r->acc[k]];
    char name[600];
    snprintf(name, sizeof name, "%s.out", g->values[n->inputs[0]].name);
    int v = vp_graph_add_value(g, name);
    int *outs = v < 0 ? NULL : realloc(n->outputs, 2 * sizeof *outs);
    if (!outs) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    outs[1] = v;
    n->outputs = outs;
    n->n_outputs = 2;
    r->acc_out[k] = v;
    return VP_OK;
}

/* Feeds a graph input; the accumulator inputs only where the graph has them (not in
 * eval_model.onnx). */
static vp_status set_input(ort_run *r, const char *name, const vp_tensor *t, vp_error *err) {
    int v = vp_graph_find_value(r->g, name);
    if (v < 0 && (strstr(name, SUFFIX) || !strcmp(name, "lazy_reset_grad"))) return VP_OK;
    return vp_exec_set_input(r->x, name, t, err);
}

static vp_status fixture(const char *file, vp_tensor *out, vp_error *err) {
    char path[4200];
    snprintf(path, sizeof path, "%s/models/mlp/fixtures/%s", VP_SOURCE_DIR, file);
    return vp_tensor_read_pb(path, out, NULL, err);
}

/* Loads the artifact (with buffer_out outputs when visible), feeds x, labels and the
 * parameters from model.onnx, zero buffers and lazy_reset_grad = reset. */
static vp_status ort_open(ort_run *r, const char *path, int visible, int reset, vp_error *err) {
    memset(r, 0, sizeof *r);
    vp_status s = vp_onnx_load(path, &r->g, err);
    if (!s) s = vp_onnx_load(VP_SOURCE_DIR "/models/mlp/model.onnx", &r->model, err);
    for (int i = 0; !s && i < r->g->n_nodes; i++) {
        if (strcmp(r->g->nodes[i].op_type, "InPlaceAccumulatorV2")) continue;
        if (r->n_acc == 16) return vp_fail(err, VP_ERR_INVALID, "more accumulators than parameters");
        r->acc_out[r->n_acc] = -1;
        r->acc[r->n_acc++] = i;
        if (visible) s = add_buffer_out(r, r->n_acc - 1, err);
    }
    if (!s) s = vp_graph_link(r->g, err);
    vp_dim_binding batch = {"batch", 4};
    if (!s) s = vp_bind_dims(r->g, &batch, 1, err);
    if (!s) s = vp_infer(r->g, NULL, NULL, err);
    if (!s && !(r->b = vp_backend_cpu_new())) s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
    if (!s) s = vp_exec_new(r->g, r->b, &r->x, err);
    vp_tensor x = {0}, labels = {0};
    if (!s) s = fixture("x.pb", &x, err);
    if (!s) s = fixture("labels.pb", &labels, err);
    if (!s) s = set_input(r, "x", &x, err);
    if (!s) s = set_input(r, "labels", &labels, err);
    free(x.data);
    free(labels.data);
    uint8_t flag = (uint8_t)reset;
    vp_tensor t_flag = {.dtype = VP_BOOL, .rank = 1, .dims = {1}, .data = &flag};
    if (!s) s = set_input(r, "lazy_reset_grad", &t_flag, err);
    for (int v = 0; v < r->model->n_values && !s; v++) {
        const vp_value *p = &r->model->values[v];
        if (!(p->flags & VP_VAL_INITIALIZER)) continue;
        vp_tensor w = vp_value_tensor(p);
        s = set_input(r, p->name, &w, err);
        char name[600];
        snprintf(name, sizeof name, "%s" SUFFIX, p->name);
        w.data = calloc((size_t)vp_tensor_numel(&w), sizeof(float));
        if (!s) s = w.data ? set_input(r, name, &w, err) : vp_fail(err, VP_ERR_NOMEM, "out of memory");
        free(w.data);
    }
    return s;
}

/* The parameter an accumulator is for ("fc1.weight" of "fc1.weight_grad.accumulation.buffer"). */
static void param_of(const ort_run *r, int k, char *out, size_t len) {
    const char *b = r->g->values[r->g->nodes[r->acc[k]].inputs[0]].name;
    size_t n = strlen(b), sl = strlen(SUFFIX);
    snprintf(out, len, "%.*s", (int)(n > sl ? n - sl : n), b);
}

/* Our own training step without optimizer, run once: loss and gradients by name. */
static vp_status our_gradients(test_model *m, vp_exec **x, vp_backend **b, vp_error *err) {
    vp_train_spec spec;
    memset(&spec, 0, sizeof spec);
    spec.no_optimizer = 1;
    vp_status s = vp_loss_parse("ce:logits", &spec.loss, err);
    if (!s) s = test_model_load(m, "mlp", &spec, err);
    if (!s && !(*b = vp_backend_cpu_new())) s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
    if (!s) s = vp_exec_new(m->g, *b, x, err);
    vp_tensor xin = {0}, labels = {0};
    if (!s) s = fixture("x.pb", &xin, err);
    if (!s) s = fixture("labels.pb", &labels, err);
    if (!s) s = vp_exec_set_input(*x, "x", &xin, err);
    if (!s) s = vp_exec_set_input(*x, "labels", &labels, err);
    free(xin.data);
    free(labels.data);
    if (!s) s = vp_exec_run(*x, err);
    return s;
}

static void check_gradients(void) {
    ort_run r;
    test_model m;
    memset(&m, 0, sizeof m);
    vp_exec *ours = NULL;
    vp_backend *ob = NULL;
    vp_error err;
    vp_status s = ort_open(&r, ART "/training_model.onnx", 0, 1, &err);
    if (!s) s = vp_exec_run(r.x, &err);
    if (s) check(0, "training_model.onnx runs: %s", err.msg);
    else check(r.n_acc == 6, "training_model.onnx runs: %d nodes, %d InPlaceAccumulatorV2, parameters fed as graph inputs",
               r.g->n_nodes, r.n_acc);
    if (!s) s = our_gradients(&m, &ours, &ob, &err);
    if (s) check(0, "our autodiff on models/mlp: %s", err.msg);

    /* the loss: ONNX Runtime's graph output 0 */
    vp_tensor a = {0}, b = {0}, c = {0};
    if (!s) {
        vp_status s2 = vp_exec_get(r.x, r.g->outputs[0], &a, &err);
        if (!s2) s2 = vp_exec_get(ours, m.t.loss, &b, &err);
        if (!s2) s2 = vp_tensor_read_pb(ART "/ort_loss.pb", &c, NULL, &err);
        if (s2) check(0, "loss: %s", err.msg);
        else
            check(rel_error(&a, &b) <= 1e-5 && rel_error(&a, &c) <= 1e-5,
                  "loss %.7f: ours %.7f (rel %.2g), ONNX Runtime's %.7f (rel %.2g)", vp_load(a.data, a.dtype, 0),
                  vp_load(b.data, b.dtype, 0), rel_error(&a, &b), vp_load(c.data, c.dtype, 0), rel_error(&a, &c));
        free(a.data), free(b.data), free(c.data);
    }
    for (int k = 0; k < r.n_acc && !s; k++) {
        char p[512], path[1200];
        param_of(&r, k, p, sizeof p);
        int our_p = -1;
        for (int i = 0; i < m.t.n_params; i++)
            if (!strcmp(m.g->values[m.t.params[i]].name, p)) our_p = i;
        snprintf(path, sizeof path, ART "/ort_grads/%s.pb", p);
        memset(&a, 0, sizeof a), memset(&b, 0, sizeof b), memset(&c, 0, sizeof c);
        vp_status s2 = our_p < 0 || m.t.grads[our_p] < 0 ? vp_fail(&err, VP_ERR_INVALID, "no gradient of '%s' in our step", p) : VP_OK;
        if (!s2) s2 = vp_exec_get(r.x, r.g->nodes[r.acc[k]].inputs[1], &a, &err);
        if (!s2) s2 = vp_exec_get(ours, m.t.grads[our_p], &b, &err);
        if (!s2) s2 = vp_tensor_read_pb(path, &c, NULL, &err);
        vp_tensor flag = {0};
        if (!s2) s2 = vp_exec_get(r.x, r.g->nodes[r.acc[k]].outputs[0], &flag, &err);
        if (s2) check(0, "gradient of %s: %s", p, err.msg);
        else {
            double e_ours = rel_error(&a, &b), e_ort = rel_error(&a, &c);
            check(e_ours <= 1e-5 && e_ort <= 1e-5 && ((uint8_t *)flag.data)[0] == 1,
                  "gradient of %s (%s, %lld elements): ours rel %.2g, ONNX Runtime's rel %.2g, updated flag %d", p,
                  r.g->values[r.g->nodes[r.acc[k]].inputs[1]].name, (long long)vp_tensor_numel(&a), e_ours, e_ort,
                  ((uint8_t *)flag.data)[0]);
        }
        free(a.data), free(b.data), free(c.data), free(flag.data);
    }
    vp_exec_free(ours);
    vp_backend_free(ob);
    test_model_free(&m);
    ort_free(&r);
}

/* buffer_out after three runs: zero + g (no reset), then g + g, then reset to g. */
static void check_accumulation(void) {
    ort_run r;
    vp_error err;
    vp_status s = ort_open(&r, ART "/training_model.onnx", 1, 0, &err);
    int bad = 0, checked = 0;
    for (int round = 0; round < 3 && !s; round++) {
        if (round == 2) {
            uint8_t flag = 1;
            vp_tensor t_flag = {.dtype = VP_BOOL, .rank = 1, .dims = {1}, .data = &flag};
            s = set_input(&r, "lazy_reset_grad", &t_flag, &err);
        }
        if (!s) s = vp_exec_run(r.x, &err);
        for (int k = 0; k < r.n_acc && !s; k++) {
            vp_tensor grad = {0}, out = {0};
            s = vp_exec_get(r.x, r.g->nodes[r.acc[k]].inputs[1], &grad, &err);
            if (!s) s = vp_exec_get(r.x, r.acc_out[k], &out, &err);
            const float *gv = grad.data, *ov = out.data;
            for (int64_t i = 0; !s && i < vp_tensor_numel(&out); i++) {
                float want = round == 1 ? gv[i] + gv[i] : gv[i];
                bad += ov[i] != want; /* == : 0 + -0 is +0 */
                checked++;
            }
            /* the next run reads the accumulated buffer, as ONNX Runtime updates it in place */
            if (!s) s = vp_exec_copy_value(r.x, r.g->nodes[r.acc[k]].inputs[0], r.acc_out[k], &err);
            free(grad.data);
            free(out.data);
        }
    }
    if (s) check(0, "InPlaceAccumulatorV2 accumulation: %s", err.msg);
    else
        check(!bad && checked, "InPlaceAccumulatorV2 accumulation: 0 + g, g + g, reset -> g over %d elements, %d differ",
              checked, bad);
    ort_free(&r);
}

/* eval_model.onnx (forward and loss, parameters as inputs) gives the training model's
 * loss; optimizer_model.onnx takes tensor sequences, which the loader refuses saying so. */
static void check_other_models(void) {
    ort_run r;
    vp_error err;
    vp_status s = ort_open(&r, ART "/eval_model.onnx", 0, 1, &err);
    if (!s) s = vp_exec_run(r.x, &err);
    vp_tensor a = {0}, b = {0};
    if (!s) s = vp_exec_get(r.x, r.g->outputs[0], &a, &err);
    if (!s) s = vp_tensor_read_pb(ART "/ort_loss.pb", &b, NULL, &err);
    if (s) check(0, "eval_model.onnx: %s", err.msg);
    else
        check(rel_error(&a, &b) <= 1e-5, "eval_model.onnx runs: loss %.7f, ONNX Runtime's %.7f", vp_load(a.data, a.dtype, 0),
              vp_load(b.data, b.dtype, 0));
    free(a.data);
    free(b.data);
    ort_free(&r);
    vp_graph *g = NULL;
    s = vp_onnx_load(ART "/optimizer_model.onnx", &g, &err);
    /* (should sequence inputs ever load, that is a pass too) */
    check(!s || (s == VP_ERR_UNSUPPORTED && strstr(err.msg, "optimizer_model.onnx") && strstr(err.msg, "'params'")),
          "optimizer_model.onnx (AdamWOptimizer over tensor sequences): %s", s ? err.msg : "loads");
    vp_graph_free(g);
}

int main(void) {
    vp_cpu_host_install();
    check_gradients();
    check_accumulation();
    check_other_models();
    return check_summary();
}
