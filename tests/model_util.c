#include "model_util.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infer.h"
#include "onnx_load.h"
#include "tensor_proto.h"

#define MODELS VP_SOURCE_DIR "/models"

static int cmp_name(const void *a, const void *b) { return strcmp(a, b); }

int test_model_list(char names[][64], int max) {
    DIR *d = opendir(MODELS);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < max) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s/meta.json", MODELS, e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        fclose(f);
        snprintf(names[n++], 64, "%.63s", e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, 64, cmp_name);
    return n;
}

vp_status test_model_load(test_model *m, const char *name, vp_train_spec *spec, vp_error *err) {
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "%s", name);
    snprintf(m->dir, sizeof m->dir, "%s/%s", MODELS, name);
    char path[4200];
    snprintf(path, sizeof path, "%s/meta.json", m->dir);
    m->meta = mj_parse_file(path);
    if (!m->meta) return vp_fail(err, VP_ERR_IO, "%s: cannot read", path);
    snprintf(path, sizeof path, "%s/model.onnx", m->dir);
    vp_status s = vp_onnx_load(path, &m->g, err);
    vp_dim_binding dims[8];
    int nd = 0;
    const mj *md = mj_get(m->meta, "dims");
    for (int i = 0; md && i < md->n && nd < 8; i++) dims[nd++] = (vp_dim_binding){md->items[i].key, (int64_t)md->items[i].num};
    if (!s) s = vp_bind_dims(m->g, dims, nd, err);
    if (!s) s = vp_infer(m->g, NULL, NULL, err);
    if (s || !spec) return s;
    /* torch buffers are not parameters: freeze them by name */
    const mj *bufs = mj_get(m->meta, "buffers");
    size_t used = (size_t)snprintf(m->freeze, sizeof m->freeze, "^(");
    for (int i = 0; bufs && i < bufs->n && used < sizeof m->freeze; i++)
        used += (size_t)snprintf(m->freeze + used, sizeof m->freeze - used, "%s%s", i ? "|" : "", bufs->items[i].str);
    if (used < sizeof m->freeze) snprintf(m->freeze + used, sizeof m->freeze - used, ")$");
    spec->freeze = bufs && bufs->n ? m->freeze : NULL;
    return vp_training_build(m->g, spec, &m->t, err);
}

void test_model_free(test_model *m) {
    vp_training_free(&m->t);
    vp_graph_free(m->g);
    mj_free(m->meta);
    memset(m, 0, sizeof *m);
}

vp_status test_model_fixture(const test_model *m, const char *file, vp_tensor *out, vp_error *err) {
    char path[4200];
    snprintf(path, sizeof path, "%s/fixtures/%s", m->dir, file);
    return vp_tensor_read_pb(path, out, NULL, err);
}
