/* The torch-exported models in models/: inspect-level facts (exact parameter counts)
 * and the CPU reference forward pass against PyTorch's own output (fixtures/output.pb,
 * written by models/make_models.py). */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cpu_host.h"
#include "cpu_util.h"
#include "exec.h"
#include "ir/infer.h"
#include "mini_json.h"
#include "onnx/onnx_load.h"
#include "onnx/tensor_proto.h"

#define MODELS VP_SOURCE_DIR "/models"

static int is_buffer(const mj *buffers, const char *name) {
    for (int i = 0; buffers && i < buffers->n; i++)
        if (buffers->items[i].str && !strcmp(buffers->items[i].str, name)) return 1;
    return 0;
}

static int check_model(const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%.200s/meta.json", MODELS, name);
    mj *meta = mj_parse_file(path);
    if (!meta) {
        printf("FAIL %s: cannot read %s\n", name, path);
        return 0;
    }
    int ok = 1;
    vp_error err;
    vp_graph *g = NULL;
    vp_backend *b = NULL;
    vp_exec *x = NULL;
    vp_tensor in = {0}, want = {0}, got = {0};
    snprintf(path, sizeof path, "%s/%.200s/model.onnx", MODELS, name);
    vp_status s = vp_onnx_load(path, &g, &err);
    vp_dim_binding dims[8];
    int nd = 0;
    const mj *md = mj_get(meta, "dims");
    for (int i = 0; md && i < md->n && nd < 8; i++) dims[nd++] = (vp_dim_binding){md->items[i].key, (int64_t)md->items[i].num};
    if (!s) s = vp_bind_dims(g, dims, nd, &err);
    if (!s) s = vp_infer(g, NULL, NULL, &err);
    if (s) {
        printf("FAIL %s: %s\n", name, err.msg);
        ok = 0;
        goto done;
    }
    /* parameter count: float initializers that are not buffers (BatchNorm statistics, masks) */
    const mj *buffers = mj_get(meta, "buffers");
    int64_t params = 0;
    int tensors = 0;
    for (int v = 0; v < g->n_values; v++) {
        const vp_value *val = &g->values[v];
        if (!(val->flags & VP_VAL_INITIALIZER) || !vp_dtype_is_float(val->dtype) || is_buffer(buffers, val->name)) continue;
        params += vp_value_numel(val);
        tensors++;
    }
    const mj *mp = mj_get(meta, "params"), *mt = mj_get(meta, "param_tensors");
    if (!mp || !mt || params != (int64_t)mp->num || tensors != (int)mt->num) {
        printf("FAIL %s: %lld params in %d tensors, torch says %.0f in %.0f\n", name, (long long)params, tensors,
               mp ? mp->num : -1, mt ? mt->num : -1);
        ok = 0;
    }

    const mj *input = mj_get(meta, "input");
    snprintf(path, sizeof path, "%s/%.200s/fixtures/x.pb", MODELS, name);
    s = vp_tensor_read_pb(path, &in, NULL, &err);
    snprintf(path, sizeof path, "%s/%.200s/fixtures/output.pb", MODELS, name);
    if (!s) s = vp_tensor_read_pb(path, &want, NULL, &err);
    b = vp_backend_cpu_new();
    if (!s) s = vp_exec_new(g, b, &x, &err);
    if (!s) s = vp_exec_set_input(x, input ? input->str : "x", &in, &err);
    if (!s) s = vp_exec_run(x, &err);
    if (!s) s = vp_exec_get(x, g->outputs[0], &got, &err);
    if (s) {
        printf("FAIL %s: %s\n", name, err.msg);
        ok = 0;
        goto done;
    }
    /* float32 against torch's float32: different summation orders, so 1e-4 scaled */
    double worst = 0;
    int64_t n = vp_tensor_numel(&want), bad = -1;
    if (vp_tensor_numel(&got) != n) bad = 0;
    for (int64_t i = 0; i < n && bad < 0; i++) {
        double gv = vp_load(got.data, got.dtype, i), wv = vp_load(want.data, want.dtype, i);
        double d = fabs(gv - wv) / (1.0 + fabs(wv));
        if (d > worst) worst = d;
        if (!(d <= 1e-4)) bad = i;
    }
    if (bad >= 0) {
        printf("FAIL %s: output element %lld differs from torch (worst scaled error %.3g)\n", name, (long long)bad, worst);
        ok = 0;
    } else {
        printf("PASS %s: %lld params, forward matches torch (worst scaled error %.2g)\n", name, (long long)params, worst);
    }
done:
    free(in.data);
    free(want.data);
    free(got.data);
    vp_exec_free(x);
    vp_backend_free(b);
    vp_graph_free(g);
    mj_free(meta);
    return ok;
}

int main(void) {
    vp_cpu_host_install();
    DIR *d = opendir(MODELS);
    if (!d) {
        printf("cannot open %s\n", MODELS);
        return 1;
    }
    int pass = 0, fail = 0;
    struct dirent *e;
    char names[64][256];
    int n = 0;
    while ((e = readdir(d)) && n < 64) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s/meta.json", MODELS, e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        fclose(f);
        snprintf(names[n++], sizeof names[0], "%s", e->d_name);
    }
    closedir(d);
    for (int i = 0; i < n; i++) check_model(names[i]) ? pass++ : fail++;
    printf("%d passed, %d failed\n", pass, fail);
    return fail || !n ? 1 : 0;
}
