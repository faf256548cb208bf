#include "cli_data.h"

#include <math.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_util.h"
#include "parallel/parallel.h"
#include "ir/rng.h"
#include "onnx/tensor_proto.h"

/* Exclusive upper bound for an integer input: the size of what it indexes. */
static int64_t index_bound(const vp_graph *g, int id, int64_t label_classes) {
    if (!strcmp(g->values[id].name, "labels") && label_classes > 0) return label_classes;
    int64_t vocab = vp_tp_index_bound(g, id); /* a tensor-parallel rank holds a slice of the table */
    if (vocab > 0) return vocab;
    const vp_value *v = &g->values[id];
    for (int c = 0; c < v->n_consumers; c++) {
        const vp_node *n = &g->nodes[v->consumers[c]];
        if (!strcmp(n->op_type, "Gather") && n->n_inputs > 1 && n->inputs[1] == id) {
            const vp_value *data = &g->values[n->inputs[0]];
            int axis = (int)vp_attr_int(n, "axis", 0);
            if (axis < 0) axis += data->rank;
            if (axis >= 0 && axis < data->rank) return data->dims[axis];
        }
    }
    return 10;
}

/* DIR/<name>.bin: the input's bytes exactly, its shape the graph's. */
static vp_status read_raw(const char *dir, const vp_value *v, vp_tensor *t, vp_error *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.bin", dir, v->name);
    uint8_t *buf;
    size_t len;
    vp_status s = vp_read_file(path, &buf, &len, err);
    if (s) return vp_fail(err, s, "neither %s/%s.pb nor %s can be read", dir, v->name, path);
    *t = vp_value_tensor(v);
    if (len != vp_tensor_nbytes(t)) {
        free(buf);
        char shape[256];
        return vp_fail(err, VP_ERR_INVALID, "%s has %zu bytes; %s %s needs %zu", path, len, vp_dtype_name(v->dtype),
                       vp_shape_str(v->rank, v->dims, shape, sizeof shape), vp_tensor_nbytes(t));
    }
    t->data = buf;
    return VP_OK;
}

vp_status cli_batch_load(const vp_graph *g, const char *source, uint64_t seed, int64_t label_classes,
                         cli_batch *out, vp_error *err) {
    memset(out, 0, sizeof *out);
    out->ids = calloc((size_t)g->n_inputs + 1, sizeof *out->ids);
    out->data = calloc((size_t)g->n_inputs + 1, sizeof *out->data);
    if (!out->ids || !out->data) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    int synthetic = !source || !strcmp(source, "synthetic");
    vp_rng rng = {seed};
    for (int k = 0; k < g->n_inputs; k++) {
        int id = g->inputs[k];
        const vp_value *v = &g->values[id];
        vp_tensor *t = &out->data[out->n];
        if (!synthetic) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s.pb", source, v->name);
            vp_status s = access(path, F_OK) ? read_raw(source, v, t, err) : vp_tensor_read_pb(path, t, NULL, err);
            if (s) {
                vp_error_prefix(err, "--data %s: input '%s': ", source, v->name);
                return s;
            }
            out->ids[out->n++] = id;
            continue;
        }
        *t = vp_value_tensor(v);
        t->data = malloc(vp_tensor_nbytes(t) + 1);
        if (!t->data) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
        out->ids[out->n++] = id;
        int64_t n = vp_tensor_numel(t), bound = index_bound(g, id, label_classes);
        for (int64_t i = 0; i < n; i++) {
            double u = vp_rng_uniform(&rng);
            if (vp_dtype_is_float(t->dtype)) vp_store(t->data, t->dtype, i, 2.0 * u - 1.0);
            else if (t->dtype == VP_BOOL) vp_store(t->data, t->dtype, i, u < 0.5);
            else vp_store(t->data, t->dtype, i, floor(u * (double)bound));
        }
    }
    return VP_OK;
}

vp_status cli_batch_feed(vp_exec *x, const vp_graph *g, const cli_batch *b, vp_error *err) {
    for (int k = 0; k < b->n; k++) {
        vp_status s = vp_exec_set_input(x, g->values[b->ids[k]].name, &b->data[k], err);
        if (s) return s;
    }
    return VP_OK;
}

vp_status cli_batch_feed_plan(vp_plan_exec *x, const vp_graph *g, const cli_batch *b, vp_error *err) {
    for (int k = 0; k < b->n; k++) {
        vp_status s = vp_plan_exec_set_input(x, g->values[b->ids[k]].name, &b->data[k], err);
        if (s) return s;
    }
    return VP_OK;
}

void cli_batch_free(cli_batch *b) {
    for (int k = 0; b->data && k < b->n; k++) free(b->data[k].data);
    free(b->data);
    free(b->ids);
    memset(b, 0, sizeof *b);
}
