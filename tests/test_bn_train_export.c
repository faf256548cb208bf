/* BatchNormalization exported in training form (torch.onnx with TrainingMode.TRAINING:
 * training_mode=1, outputs Y, running_mean, running_var) trains as PyTorch's module.train()
 * does: the running statistics are state, updated at every step with PyTorch's momentum
 * and unbiased variance, and are not counted as trainable parameters.
 *
 * Data: tests/data/bn_train_export/opset{14,15}, made by
 * tools/scripts/make_bn_train_export.py (models/'s CNN, 3 SGD steps on one batch).
 * Checks per opset: the trainable set is torch's parameters and nothing is reported as
 * not reaching the loss; every step's loss matches torch within 1e-5; after the steps
 * every running statistic matches torch's buffer within 1e-6 + 1e-5 |want|. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "check.h"
#include "cpu_host.h"
#include "cpu_util.h"
#include "exec.h"
#include "ir/infer.h"
#include "mini_json.h"
#include "onnx/onnx_load.h"
#include "onnx/tensor_proto.h"
#include "pipeline/pipeline.h"
#include "train/training.h"

#define DATA VP_SOURCE_DIR "/tests/data/bn_train_export"

static vp_status read_pb(const char *dir, const char *file, vp_tensor *t, vp_error *err) {
    char path[4300];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    return vp_tensor_read_pb(path, t, NULL, err);
}

/* The value id of the running statistic named `name` (a BatchNormalization input). */
static int find_value(const vp_graph *g, const char *name) {
    for (int v = 0; v < g->n_values; v++)
        if (!strcmp(g->values[v].name, name)) return v;
    return -1;
}

static void check_opset(const char *opset) {
    char dir[4200], path[4300];
    snprintf(dir, sizeof dir, "%s/%s", DATA, opset);
    snprintf(path, sizeof path, "%s/meta.json", dir);
    mj *meta = mj_parse_file(path);
    if (!meta) {
        check(0, "%s: cannot read %s", opset, path);
        return;
    }
    vp_error err = {{0}};
    vp_graph *g = NULL;
    vp_training t;
    memset(&t, 0, sizeof t);
    vp_backend *b = vp_backend_cpu_new();
    vp_exec *x = NULL;
    vp_tensor in = {0}, labels = {0}, want_losses = {0};
    vp_train_spec spec;
    memset(&spec, 0, sizeof spec);
    vp_loss_parse("ce:logits", &spec.loss, &err);
    vp_opt_parse("sgd", &spec.opt, &err);
    spec.opt.lr = mj_get(meta, "lr")->num;
    vp_dim_binding batch = {"batch", 4};
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    vp_pipeline_opts po = {.model = path, .dims = &batch, .n_dims = 1, .spec = &spec, .until = VP_PIPELINE_TRAIN};
    vp_pipeline_result r;
    vp_status s = vp_pipeline_run(&po, &r, &err);
    g = r.g;
    t = r.t;
    if (!s) {
        int64_t trainable = 0;
        for (int i = 0; i < t.n_params; i++) trainable += vp_value_numel(&g->values[t.params[i]]);
        check(trainable == (int64_t)mj_get(meta, "params")->num, "%s: %lld trainable elements, torch has %.0f", opset,
              (long long)trainable, mj_get(meta, "params")->num);
        check(!t.warning[0], "%s: no warning about parameters the loss ignores (got '%s')", opset, t.warning);
    }
    if (!s) s = vp_exec_new(g, b, &x, &err);
    if (!s) s = read_pb(dir, "x.pb", &in, &err);
    if (!s) s = read_pb(dir, "labels.pb", &labels, &err);
    if (!s) s = read_pb(dir, "losses.pb", &want_losses, &err);
    if (!s) s = vp_exec_set_input(x, "x", &in, &err);
    if (!s) s = vp_exec_set_input(x, "labels", &labels, &err);
    double worst_loss = 0;
    for (int64_t k = 0; !s && k < vp_tensor_numel(&want_losses); k++) {
        vp_tensor loss = {0};
        s = vp_exec_run(x, &err);
        if (!s) s = vp_exec_get(x, t.loss, &loss, &err);
        if (!s) worst_loss = fmax(worst_loss, fabs(vp_load(loss.data, loss.dtype, 0) - ((float *)want_losses.data)[k]));
        free(loss.data);
        for (int c = 0; c < t.n_carry && !s; c++) s = vp_exec_copy_value(x, t.carry[c].from, t.carry[c].to, &err);
    }
    if (!s) check(worst_loss <= 1e-5, "%s: %lld steps' losses match torch (worst difference %.2g)", opset,
                  (long long)vp_tensor_numel(&want_losses), worst_loss);
    const mj *bufs = mj_get(meta, "buffers");
    for (int i = 0; !s && bufs && i < bufs->n; i++) {
        const char *name = bufs->items[i].str;
        vp_tensor got = {0}, want = {0};
        char file[300];
        snprintf(file, sizeof file, "stats/%s.pb", name);
        int v = find_value(g, name);
        if (v < 0) s = vp_fail(&err, VP_ERR_INVALID, "no value named '%s'", name);
        if (!s) s = vp_exec_get(x, v, &got, &err);
        if (!s) s = read_pb(dir, file, &want, &err);
        double worst = 0;
        for (int64_t e = 0; !s && e < vp_tensor_numel(&want); e++) {
            /* atol for means near zero, whose float32 sums differ in the last bits */
            double w = ((float *)want.data)[e], d = fabs(vp_load(got.data, got.dtype, e) - w);
            worst = fmax(worst, d / (1e-6 + 1e-5 * fabs(w)));
        }
        if (!s) check_quiet(worst <= 1, "%s: %s after the steps matches torch (worst error %.2g of 1e-6 + 1e-5|want|)", opset, name, worst);
        free(got.data);
        free(want.data);
    }
    if (!s && bufs) check(1, "%s: %d running statistics compared with torch's buffers", opset, bufs->n);
    if (s) check(0, "%s: %s", opset, err.msg);
    free(in.data);
    free(labels.data);
    free(want_losses.data);
    vp_exec_free(x);
    vp_backend_free(b);
    vp_training_free(&t);
    vp_graph_free(g);
    mj_free(meta);
}

/* `train --save` wrote saved after the fixture's steps: every running statistic in it
 * is torch's buffer after those steps (tests/CMakeLists.txt: bn_train_save). */
static void check_saved(const char *saved, const char *opset) {
    char dir[4096], path[4300];
    snprintf(dir, sizeof dir, "%s/%s", DATA, opset);
    snprintf(path, sizeof path, "%s/meta.json", dir);
    mj *meta = mj_parse_file(path);
    vp_error err = {{0}};
    vp_graph *g = NULL;
    vp_status s = meta ? vp_onnx_load(saved, &g, &err) : vp_fail(&err, VP_ERR_INVALID, "cannot read %s", path);
    const mj *bufs = meta ? mj_get(meta, "buffers") : NULL;
    double worst = 0;
    for (int i = 0; !s && bufs && i < bufs->n; i++) {
        char file[128];
        snprintf(file, sizeof file, "stats/%s.pb", bufs->items[i].str);
        vp_tensor want = {0};
        int v = find_value(g, bufs->items[i].str);
        if (v < 0 || !g->values[v].data) s = vp_fail(&err, VP_ERR_INVALID, "%s holds no '%s'", saved, bufs->items[i].str);
        if (!s) s = read_pb(dir, file, &want, &err);
        for (int64_t e = 0; !s && e < vp_tensor_numel(&want); e++) {
            double w = ((float *)want.data)[e], d = fabs(vp_load(g->values[v].data, g->values[v].dtype, e) - w);
            worst = fmax(worst, d / (1e-6 + 1e-5 * fabs(w)));
        }
        free(want.data);
    }
    if (s) check(0, "%s: %s", saved, err.msg);
    else check(worst <= 1, "%s: the %d running statistics train --save wrote are torch's (worst error %.2g of 1e-6 + 1e-5|want|)",
               opset, bufs ? bufs->n : 0, worst);
    vp_graph_free(g);
    mj_free(meta);
}

int main(int argc, char **argv) {
    vp_cpu_host_install();
    if (argc == 4 && !strcmp(argv[1], "--saved")) {
        check_saved(argv[2], argv[3]);
        return check_summary();
    }
    check_opset("opset14");
    check_opset("opset15");
    return check_summary();
}
