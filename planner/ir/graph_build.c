#include "ir/graph_build.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/infer.h"

int vp_build_node(vp_graph *g, const char *op, const char *domain, const char *name, int n_in, const int *in,
                  int n_out, vp_phase phase, int opset) {
    int *outs = malloc((size_t)(n_out > 0 ? n_out : 1) * sizeof *outs);
    if (!outs) return -1;
    for (int k = 0; k < n_out; k++) {
        char vname[600];
        snprintf(vname, sizeof vname, "%s:%d", name, k);
        outs[k] = vp_graph_add_unique_value(g, vname);
        if (outs[k] < 0) {
            free(outs);
            return -1;
        }
    }
    int id = vp_graph_add_node(g, op, domain, name, n_in, in, n_out, outs);
    free(outs);
    if (id < 0) return -1;
    g->nodes[id].phase = phase;
    if (opset) g->nodes[id].opset = opset;
    return id;
}

vp_status vp_build_finish(vp_graph *g, int node, int *out, vp_error *err) {
    vp_status s = vp_infer_node(g, node, 0, NULL, err);
    if (s) return s;
    if (out)
        for (int k = 0; k < g->nodes[node].n_outputs; k++) out[k] = g->nodes[node].outputs[k];
    return VP_OK;
}

vp_status vp_build_input(vp_graph *g, const char *name, vp_dtype dt, int rank, const int64_t *dims, int *out,
                         vp_error *err) {
    if (vp_graph_find_value(g, name) >= 0)
        return vp_fail(err, VP_ERR_INVALID, "%s: the model already has a value named '%s'; the loss needs that name for its input",
                       g->path, name);
    int id = vp_graph_add_value(g, name);
    int *inputs = realloc(g->inputs, (size_t)(g->n_inputs + 1) * sizeof *inputs);
    if (id < 0 || !inputs) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    g->inputs = inputs;
    g->inputs[g->n_inputs++] = id;
    vp_value *v = &g->values[id];
    v->flags |= VP_VAL_INPUT;
    v->dtype = dt;
    v->rank = rank;
    for (int d = 0; d < rank; d++) v->dims[d] = dims[d];
    *out = id;
    return VP_OK;
}

int vp_build_const(vp_graph *g, const char *stem, vp_dtype dt, int rank, const int64_t *dims, const void *data) {
    int64_t n = 1;
    for (int d = 0; d < rank; d++) n *= dims[d];
    size_t bytes = (size_t)n * vp_dtype_size(dt);
    void *p = malloc(bytes ? bytes : 1);
    if (!p) return -1;
    if (bytes) memcpy(p, data, bytes);
    int id = vp_graph_add_unique_value(g, stem);
    if (id < 0) {
        free(p);
        return -1;
    }
    vp_value *v = &g->values[id];
    v->dtype = dt;
    v->rank = rank;
    for (int d = 0; d < rank; d++) v->dims[d] = dims[d];
    v->flags |= VP_VAL_CONST;
    vp_value_set_data(g, id, p, VP_DATA_HEAP);
    return id;
}

int vp_build_state(vp_graph *g, const char *name, vp_dtype dt, int rank, const int64_t *dims) {
    /* no data: state starts at zero, and executors write the zeros into their own
     * buffers (a 96-layer model's moments are gigabytes nobody should memset twice) */
    int id = vp_graph_add_unique_value(g, name);
    if (id < 0) return -1;
    vp_value *v = &g->values[id];
    v->dtype = dt;
    v->rank = rank;
    for (int d = 0; d < rank; d++) v->dims[d] = dims[d];
    v->flags |= VP_VAL_STATE;
    return id;
}

vp_status vp_build_splice(vp_graph *g, int node, int first_new, vp_error *err) {
    int n_all = g->n_nodes, m = 0, *keep = malloc(((size_t)n_all + 1) * sizeof *keep);
    if (!keep) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    for (int i = 0; i < node; i++) keep[m++] = i;
    for (int i = first_new; i < n_all; i++) keep[m++] = i;
    for (int i = node + 1; i < first_new; i++) keep[m++] = i;
    vp_status s = vp_graph_keep_nodes(g, keep, m, err);
    free(keep);
    return s;
}

void vp_build_unsplice(vp_graph *g, int first_new) {
    int *keep = malloc(((size_t)first_new + 1) * sizeof *keep);
    if (!keep) return; /* the appended nodes stay, unreached: the caller fails anyway */
    for (int i = 0; i < first_new; i++) keep[i] = i;
    vp_error e;
    vp_graph_keep_nodes(g, keep, first_new, &e);
    free(keep);
}

vp_status vp_build_op(vp_graph *g, const char *stem, const char *op, int n_in, const int *in, const char *attr,
                      int64_t value, int *out, vp_error *err) {
    char name[600];
    snprintf(name, sizeof name, "%s/%s", stem, op);
    if (*out < 0 && (*out = vp_graph_add_unique_value(g, name)) < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    int id = vp_graph_add_node(g, op, "", name, n_in, in, 1, out);
    if (id < 0 || (attr && vp_node_add_attr_int(g, id, attr, value))) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    g->nodes[id].opset = g->opset_onnx;
    return vp_infer_node(g, id, 0, NULL, err);
}

vp_status vp_build_transpose(vp_graph *g, const char *stem, int x, const int64_t *perm, int n, int *out, vp_error *err) {
    char name[600];
    snprintf(name, sizeof name, "%s/Transpose", stem);
    if (*out < 0 && (*out = vp_graph_add_unique_value(g, name)) < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    int id = vp_graph_add_node(g, "Transpose", "", name, 1, &x, 1, out);
    if (id < 0 || vp_node_add_attr_ints(g, id, "perm", perm, n)) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    g->nodes[id].opset = g->opset_onnx;
    return vp_infer_node(g, id, 0, NULL, err);
}

vp_status vp_build_replace_node(vp_graph *g, int node, vp_build_expand_fn fn, void *ctx, int *n_new, vp_error *err) {
    *n_new = 0;
    if (g->nodes[node].n_outputs < 1) return vp_node_fail(err, VP_ERR_INVALID, &g->nodes[node], "has no output");
    int first_new = g->n_nodes, out = g->nodes[node].outputs[0];
    g->nodes[node].outputs[0] = -1;
    vp_status s = fn(g, node, out, ctx, err);
    if (s) {
        g->nodes[node].outputs[0] = out;
        vp_build_unsplice(g, first_new);
        return s;
    }
    *n_new = g->n_nodes - first_new;
    return vp_build_splice(g, node, first_new, err);
}
