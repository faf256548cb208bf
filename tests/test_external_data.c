/* External data: a model whose weights live in a file beside it, at offsets, the way
 * models over 2 GB are stored.  The loader maps the file instead of reading it, so a
 * 2.2 GB weight (a sparse file here) loads without its bytes entering memory, and
 * the small tensor after it is read correctly. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend.h"
#include "check.h"
#include "cpu_host.h"
#include "exec.h"
#include "ir/infer.h"
#include "onnx.pb-c.h"
#include "onnx/onnx_load.h"

/* "what: detail" through the shared verdicts */
static void verdict(int ok, const char *what, const char *detail) {
    check(ok, "%s%s%s", what, detail && *detail ? ": " : "", detail ? detail : "");
}

static Onnx__StringStringEntryProto *entry(const char *k, const char *v) {
    Onnx__StringStringEntryProto *e = malloc(sizeof *e);
    onnx__string_string_entry_proto__init(e);
    e->key = (char *)k;
    e->value = strdup(v);
    return e;
}

static void external_tensor(Onnx__TensorProto *t, const char *name, int64_t *dims, int rank, int64_t offset,
                            int64_t length, Onnx__StringStringEntryProto **ents) {
    onnx__tensor_proto__init(t);
    t->name = (char *)name;
    t->has_data_type = 1;
    t->data_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    t->n_dims = (size_t)rank;
    t->dims = dims;
    t->has_data_location = 1;
    t->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    char num[32];
    ents[0] = entry("location", "weights.bin");
    snprintf(num, sizeof num, "%lld", (long long)offset);
    ents[1] = entry("offset", num);
    snprintf(num, sizeof num, "%lld", (long long)length);
    ents[2] = entry("length", num);
    t->n_external_data = 3;
    t->external_data = ents;
}

static Onnx__ValueInfoProto *value_info(const char *name, int64_t n) {
    Onnx__ValueInfoProto *vi = calloc(1, sizeof *vi);
    onnx__value_info_proto__init(vi);
    vi->name = (char *)name;
    Onnx__TypeProto *tp = calloc(1, sizeof *tp);
    onnx__type_proto__init(tp);
    Onnx__TypeProto__Tensor *tt = calloc(1, sizeof *tt);
    onnx__type_proto__tensor__init(tt);
    tt->has_elem_type = 1;
    tt->elem_type = 1;
    Onnx__TensorShapeProto *sh = calloc(1, sizeof *sh);
    onnx__tensor_shape_proto__init(sh);
    Onnx__TensorShapeProto__Dimension *d = calloc(1, sizeof *d);
    onnx__tensor_shape_proto__dimension__init(d);
    d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
    d->dim_value = n;
    sh->n_dim = 1;
    sh->dim = malloc(sizeof *sh->dim);
    sh->dim[0] = d;
    tt->shape = sh;
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tp->tensor_type = tt;
    vi->type = tp;
    return vi;
}

static void free_value_info(Onnx__ValueInfoProto *vi) {
    free(vi->type->tensor_type->shape->dim[0]);
    free(vi->type->tensor_type->shape->dim);
    free(vi->type->tensor_type->shape);
    free(vi->type->tensor_type);
    free(vi->type);
    free(vi);
}

static long max_rss_mib(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1024;
}

int main(void) {
    vp_cpu_host_install();
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/tests/external_%d", VP_BINARY_DIR, (int)getpid());
    mkdir(dir, 0777);
    /* 550,000,000 floats (2.2 GB) as a sparse file, then 4 floats we can check */
    const int64_t big_n = 550000000, big_bytes = big_n * 4;
    float small[4] = {1.5f, -2.0f, 0.25f, 8.0f};
    snprintf(path, sizeof path, "%s/weights.bin", dir);
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
    int ok = fd >= 0 && ftruncate(fd, big_bytes) == 0 && pwrite(fd, small, sizeof small, big_bytes) == (ssize_t)sizeof small;
    if (fd >= 0) close(fd);
    verdict(ok, "sparse 2.2 GB weights file written", path);

    int64_t big_dims[1] = {big_n}, small_dims[1] = {4};
    Onnx__StringStringEntryProto *e1[3], *e2[3];
    Onnx__TensorProto big, smallt;
    external_tensor(&big, "big", big_dims, 1, 0, big_bytes, e1);
    external_tensor(&smallt, "small", small_dims, 1, big_bytes, 16, e2);
    Onnx__TensorProto *inits[2] = {&big, &smallt};
    Onnx__NodeProto node = ONNX__NODE_PROTO__INIT;
    char *ins[2] = {"x", "small"}, *outs[1] = {"y"};
    node.name = "add_small";
    node.op_type = "Add";
    node.n_input = 2;
    node.input = ins;
    node.n_output = 1;
    node.output = outs;
    Onnx__NodeProto *nodes[1] = {&node};
    Onnx__ValueInfoProto *vin = value_info("x", 4), *vout = value_info("y", 4);
    Onnx__GraphProto graph = ONNX__GRAPH_PROTO__INIT;
    graph.name = "external";
    graph.n_node = 1;
    graph.node = nodes;
    graph.n_initializer = 2;
    graph.initializer = inits;
    graph.n_input = 1;
    graph.input = &vin;
    graph.n_output = 1;
    graph.output = &vout;
    Onnx__OperatorSetIdProto opset = ONNX__OPERATOR_SET_ID_PROTO__INIT, *opsets[1] = {&opset};
    opset.domain = "";
    opset.has_version = 1;
    opset.version = 17;
    Onnx__ModelProto model = ONNX__MODEL_PROTO__INIT;
    model.has_ir_version = 1;
    model.ir_version = 8;
    model.graph = &graph;
    model.n_opset_import = 1;
    model.opset_import = opsets;
    size_t len = onnx__model_proto__get_packed_size(&model);
    uint8_t *buf = malloc(len);
    onnx__model_proto__pack(&model, buf);
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    FILE *f = fopen(path, "wb");
    ok = f && fwrite(buf, 1, len, f) == len;
    if (f) fclose(f);
    free(buf);
    verdict(ok, "model with external data written", path);

    long rss0 = max_rss_mib();
    vp_error err;
    vp_graph *g = NULL;
    vp_status s = vp_onnx_load(path, &g, &err);
    if (!s) s = vp_infer(g, NULL, NULL, &err);
    long rss1 = max_rss_mib();
    char detail[1400];
    snprintf(detail, sizeof detail, "%s; peak resident %ld MiB before, %ld MiB after", s ? err.msg : "loaded", rss0, rss1);
    verdict(!s && rss1 - rss0 < 64, "2.2 GB initializer loaded by mapping, not reading", detail);
    if (!s) {
        int id = vp_graph_find_value(g, "big");
        snprintf(detail, sizeof detail, "%lld elements", id >= 0 ? (long long)vp_value_numel(&g->values[id]) : -1LL);
        verdict(id >= 0 && vp_value_numel(&g->values[id]) == big_n, "big initializer has its full shape", detail);
        vp_backend *b = vp_backend_cpu_new();
        vp_exec *x = NULL;
        float xin[4] = {1, 2, 3, 4};
        vp_tensor t = {VP_F32, 1, {4}, xin}, y = {0};
        s = vp_exec_new(g, b, &x, &err);
        if (!s) s = vp_exec_set_input(x, "x", &t, &err);
        if (!s) s = vp_exec_run(x, &err);
        if (!s) s = vp_exec_get(x, g->outputs[0], &y, &err);
        int right = !s;
        for (int i = 0; right && i < 4; i++) right = ((float *)y.data)[i] == xin[i] + small[i];
        verdict(right, "tensor after the 2.2 GB one read at its offset (x + small)", s ? err.msg : "");
        free(y.data);
        vp_exec_free(x);
        vp_backend_free(b);
        snprintf(detail, sizeof detail, "peak resident %ld MiB", max_rss_mib());
        verdict(max_rss_mib() - rss0 < 64, "running the model never touches the unused 2.2 GB", detail);
    }
    vp_graph_free(g);
    for (int i = 0; i < 3; i++) {
        free(e1[i]->value);
        free(e1[i]);
        free(e2[i]->value);
        free(e2[i]);
    }
    free_value_info(vin);
    free_value_info(vout);
    snprintf(path, sizeof path, "%s/weights.bin", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    unlink(path);
    rmdir(dir);
    return check_summary();
}
