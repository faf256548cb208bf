#include "exec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/dtype_conv.h"

struct vp_exec {
    const vp_graph *g;
    vp_backend *b;
    void **buf;     /* device buffer per value, NULL when the value is omitted/unused */
    char *is_set;   /* per value: holds data (initializer, constant, set input, computed) */
};

vp_status vp_exec_new(const vp_graph *g, vp_backend *b, vp_exec **out, vp_error *err) {
    *out = NULL;
    vp_exec *x = calloc(1, sizeof *x);
    if (!x) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    x->g = g;
    x->b = b;
    x->buf = calloc((size_t)g->n_values + 1, sizeof *x->buf);
    x->is_set = calloc((size_t)g->n_values + 1, 1);
    if (!x->buf || !x->is_set) {
        vp_exec_free(x);
        return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    }
    /* buffers for what a step touches: values of nodes that run, inputs, outputs
     * (an initializer nothing reads, a model's unused 2 GB table, is never copied) */
    char *used = calloc((size_t)g->n_values + 1, 1);
    if (!used) {
        vp_exec_free(x);
        return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < g->n_nodes; i++) {
        const vp_node *n = &g->nodes[i];
        if (n->folded) continue;
        for (int k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] >= 0) used[n->inputs[k]] = 1;
        for (int k = 0; k < n->n_outputs; k++)
            if (n->outputs[k] >= 0) used[n->outputs[k]] = 1;
    }
    for (int v = 0; v < g->n_values; v++)
        if (g->values[v].flags & (VP_VAL_INPUT | VP_VAL_OUTPUT | VP_VAL_PARAM | VP_VAL_STATE)) used[v] = 1;
    for (int v = 0; v < g->n_values; v++) {
        const vp_value *val = &g->values[v];
        if (!vp_value_known(val) || !used[v]) continue;
        size_t bytes = (size_t)vp_value_numel(val) * vp_dtype_size(val->dtype);
        vp_status s = b->iface->alloc(b, bytes, &x->buf[v], err);
        if (!s && val->data && bytes) s = b->iface->copy_to_device(b, x->buf[v], val->data, bytes, err);
        else if (!s && (val->flags & VP_VAL_STATE) && bytes) s = vp_backend_zero(b, x->buf[v], bytes, err);
        if (s) {
            vp_error_prefix(err, "value '%s': ", val->name);
            free(used);
            vp_exec_free(x);
            return s;
        }
        x->is_set[v] = val->data != NULL || bytes == 0 || (val->flags & VP_VAL_STATE);
    }
    free(used);
    *out = x;
    return VP_OK;
}

void vp_exec_free(vp_exec *x) {
    if (!x) return;
    if (x->buf)
        for (int v = 0; v < x->g->n_values; v++)
            if (x->buf[v]) x->b->iface->free(x->b, x->buf[v]);
    free(x->buf);
    free(x->is_set);
    free(x);
}

vp_status vp_exec_set_input(vp_exec *x, const char *name, const vp_tensor *t, vp_error *err) {
    const vp_graph *g = x->g;
    int id = vp_graph_find_value(g, name);
    if (id < 0 || !(g->values[id].flags & VP_VAL_INPUT))
        return vp_fail(err, VP_ERR_USAGE, "%s: the model has no graph input named '%s'", g->path, name);
    const vp_value *v = &g->values[id];
    char s1[256], s2[256];
    int same = v->dtype == t->dtype && v->rank == t->rank;
    for (int d = 0; same && d < t->rank; d++) same = v->dims[d] == t->dims[d];
    if (!same)
        return vp_fail(err, VP_ERR_INVALID, "%s: input '%s' expects %s %s, got %s %s", g->path, name,
                       vp_dtype_name(v->dtype), vp_shape_str(v->rank, v->dims, s1, sizeof s1),
                       vp_dtype_name(t->dtype), vp_shape_str(t->rank, t->dims, s2, sizeof s2));
    vp_status s = x->b->iface->copy_to_device(x->b, x->buf[id], t->data, vp_tensor_nbytes(t), err);
    if (!s) x->is_set[id] = 1;
    return s;
}

/* Runs node i on what its inputs hold now; io is scratch sized for the graph. */
static vp_status exec_node(vp_exec *x, vp_io_args *io, int i, vp_error *err) {
    const vp_graph *g = x->g;
    const vp_node *n = &g->nodes[i];
    for (int k = 0; k < n->n_inputs; k++) {
        int v = n->inputs[k];
        io->pin[k] = NULL;
        if (v < 0) continue;
        if (!x->is_set[v]) /* in vp_exec_run, a broken invariant: the loader orders nodes topologically */
            return vp_node_fail(err, VP_ERR_RUNTIME, n, "input '%s' read before it was written", g->values[v].name);
        io->tin[k] = vp_value_tensor(&g->values[v]);
        io->tin[k].data = x->buf[v];
        io->pin[k] = &io->tin[k];
    }
    for (int k = 0; k < n->n_outputs; k++) {
        int v = n->outputs[k];
        io->pout[k] = NULL;
        if (v < 0) continue;
        io->tout[k] = vp_value_tensor(&g->values[v]);
        io->tout[k].data = x->buf[v];
        io->pout[k] = &io->tout[k];
    }
    vp_status s = x->b->iface->run_node(x->b, n, io->pin, io->pout, err);
    for (int k = 0; k < n->n_outputs && !s; k++)
        if (n->outputs[k] >= 0) x->is_set[n->outputs[k]] = 1;
    return s;
}

vp_status vp_exec_run(vp_exec *x, vp_error *err) {
    const vp_graph *g = x->g;
    for (int k = 0; k < g->n_inputs; k++)
        if (!x->is_set[g->inputs[k]])
            return vp_fail(err, VP_ERR_USAGE, "%s: graph input '%s' was not given", g->path,
                           g->values[g->inputs[k]].name);
    vp_io_args io;
    vp_status s = vp_io_args_init(&io, g, err);
    for (int i = 0; i < g->n_nodes && !s; i++)
        if (!g->nodes[i].folded) s = exec_node(x, &io, i, err);
    vp_io_args_free(&io);
    return s ? s : x->b->iface->synchronize(x->b, err);
}

vp_status vp_exec_run_node(vp_exec *x, int node, vp_error *err) {
    if (node < 0 || node >= x->g->n_nodes || x->g->nodes[node].folded)
        return vp_fail(err, VP_ERR_USAGE, "%s: node %d is not a node the executor runs", x->g->path, node);
    vp_io_args io;
    vp_status s = vp_io_args_init(&io, x->g, err);
    if (!s) s = exec_node(x, &io, node, err);
    vp_io_args_free(&io);
    return s ? s : x->b->iface->synchronize(x->b, err);
}

vp_status vp_exec_get(vp_exec *x, int value_id, vp_tensor *out, vp_error *err) {
    const vp_value *v = &x->g->values[value_id];
    if (!x->is_set[value_id])
        return vp_fail(err, VP_ERR_USAGE, "value '%s' has not been computed", v->name);
    *out = vp_value_tensor(v);
    size_t bytes = vp_tensor_nbytes(out);
    out->data = malloc(bytes ? bytes : 1);
    if (!out->data) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    vp_status s = x->b->iface->copy_to_host(x->b, out->data, x->buf[value_id], bytes, err);
    if (s) {
        free(out->data);
        out->data = NULL;
    }
    return s;
}

vp_status vp_exec_value_finite(vp_exec *x, int v, int *finite, vp_error *err) {
    const vp_value *val = &x->g->values[v];
    *finite = 1;
    if (!vp_dtype_is_float(val->dtype)) return VP_OK;
    vp_tensor t = {0};
    const void *data = x->buf[v];
    if (!x->is_set[v]) return vp_fail(err, VP_ERR_USAGE, "value '%s' has not been computed", val->name);
    if (!x->b->iface->host_memory) {
        vp_status s = vp_exec_get(x, v, &t, err);
        if (s) return s;
        data = t.data;
    }
    int64_t n = vp_value_numel(val);
    for (int64_t i = 0; i < n && *finite; i++) *finite = isfinite(vp_load(data, val->dtype, i));
    free(t.data);
    return VP_OK;
}

vp_status vp_exec_copy_value(vp_exec *x, int dst, int src, vp_error *err) {
    const vp_value *d = &x->g->values[dst], *s = &x->g->values[src];
    size_t bytes = (size_t)vp_value_numel(s) * vp_dtype_size(s->dtype);
    if (d->dtype != s->dtype || vp_value_numel(d) != vp_value_numel(s))
        return vp_fail(err, VP_ERR_RUNTIME, "cannot carry '%s' into '%s': different dtype or size", s->name, d->name);
    if (!x->is_set[src]) return vp_fail(err, VP_ERR_RUNTIME, "value '%s' has not been computed", s->name);
    if (x->b->iface->host_memory) {
        memmove(x->buf[dst], x->buf[src], bytes);
        x->is_set[dst] = 1;
        return VP_OK;
    }
    void *tmp = malloc(bytes ? bytes : 1);
    if (!tmp) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    /* through the host: the interface has no device-to-device copy yet */
    vp_status st = x->b->iface->copy_to_host(x->b, tmp, x->buf[src], bytes, err);
    if (!st) st = x->b->iface->copy_to_device(x->b, x->buf[dst], tmp, bytes, err);
    free(tmp);
    if (!st) x->is_set[dst] = 1;
    return st;
}

vp_status vp_exec_write_value(vp_exec *x, int id, const void *host, vp_error *err) {
    const vp_value *v = &x->g->values[id];
    size_t bytes = (size_t)vp_value_numel(v) * vp_dtype_size(v->dtype);
    vp_status s = x->b->iface->copy_to_device(x->b, x->buf[id], host, bytes, err);
    if (!s) x->is_set[id] = 1;
    return s;
}
