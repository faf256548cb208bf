/* Planned workspaces (workspace.h says the rule): a buffer per step whose kernel calls
 * cuBLAS or cuDNN on a GPU, or oneDNN on the CPU, live during that step only, so the
 * arena holds every byte a step uses and the runtime allocates none of its own. */
#include "memory/workspace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/host.h"

static const struct {
    const char *domain, *op;
    vp_workspace_kind kind;
} wanting[] = {
    {"", "MatMul", VP_WORKSPACE_BLAS},          {"", "Gemm", VP_WORKSPACE_BLAS},
    {"com.microsoft", "FusedMatMul", VP_WORKSPACE_BLAS}, {"vplan", "GeluMatMul", VP_WORKSPACE_BLAS},
    {"vplan", "GeluMatMulGrad", VP_WORKSPACE_BLAS},      {"vplan", "SwiGluMatMul", VP_WORKSPACE_BLAS},
    {"vplan", "SwiGluMatMulGrad", VP_WORKSPACE_BLAS},      {"", "Conv", VP_WORKSPACE_CONV},
    {"com.microsoft", "ConvGrad", VP_WORKSPACE_CONV},  {"", "ConvTranspose", VP_WORKSPACE_CONV},
};

vp_workspace_kind vp_workspace_kind_of(const vp_node *n) {
    const char *dom = !strcmp(n->domain, "ai.onnx") ? "" : n->domain;
    for (size_t i = 0; i < sizeof wanting / sizeof wanting[0]; i++)
        if (!strcmp(wanting[i].op, n->op_type) && !strcmp(wanting[i].domain, dom)) return wanting[i].kind;
    return VP_WORKSPACE_NONE;
}

static const vp_value *io_value(const vp_graph *g, const int *ids, int count, int k) {
    if (k >= count || ids[k] < 0) return NULL;
    const vp_value *v = &g->values[ids[k]];
    return v->rank >= 0 && v->dtype != VP_UNDEFINED ? v : NULL;
}

/* N * prod(output spatial) * C * prod(kernel) elements of x's dtype. */
static int64_t im2col_bytes(const vp_value *x, const vp_value *w, const vp_value *y) {
    if (!x || !w || !y || x->rank < 3 || w->rank != x->rank || y->rank != x->rank) return 0;
    int64_t cols = x->dims[0], rows = x->dims[1];
    for (int d = 2; d < x->rank; d++) {
        cols *= y->dims[d];
        rows *= w->dims[d];
    }
    return cols * rows * (int64_t)vp_dtype_size(x->dtype);
}

int64_t vp_workspace_bytes(const vp_graph *g, const vp_node *n, const vp_device_profile *dev) {
    int64_t want = 0, cap = 0;
    switch (vp_workspace_kind_of(n)) {
    case VP_WORKSPACE_BLAS:
        cap = dev->blas_workspace;
        for (int k = 0; k < n->n_outputs; k++) {
            const vp_value *y = io_value(g, n->outputs, n->n_outputs, k);
            int64_t b = y ? vp_value_numel(y) * 4 * 4 : 0;
            if (b > want) want = b;
        }
        break;
    case VP_WORKSPACE_CONV: {
        cap = dev->conv_workspace;
        int grad = !strcmp(n->op_type, "ConvGrad"); /* dY, X, W -> dX, dW, dB */
        const vp_value *x = io_value(g, n->inputs, n->n_inputs, grad ? 1 : 0);
        const vp_value *w = io_value(g, n->inputs, n->n_inputs, grad ? 2 : 1);
        const vp_value *y = grad ? io_value(g, n->inputs, n->n_inputs, 0) : io_value(g, n->outputs, n->n_outputs, 0);
        /* ConvTranspose runs as the backward data of the Conv from its output's shape to
         * its input's (runtime/cuda/cuda_ops_linalg.c): that Conv's im2col */
        want = strcmp(n->op_type, "ConvTranspose") ? im2col_bytes(x, w, y) : im2col_bytes(y, w, x);
        break;
    }
    case VP_WORKSPACE_NONE:
        break;
    }
    return want < cap ? want : cap;
}

/* The value that stands for step st's workspace: the one an earlier plan of this graph
 * made for the node, or a new one.  Not one this plan already gave a buffer (buffer_of,
 * its first `known` entries): two recomputed copies of a node share its name, and each
 * step's workspace must be a buffer of its own. */
static int workspace_value(vp_graph *g, int node, int64_t bytes, const int *buffer_of, int known) {
    char name[512];
    snprintf(name, sizeof name, "%s.workspace", g->nodes[node].name[0] ? g->nodes[node].name : g->nodes[node].op_type);
    int v = vp_graph_find_value(g, name);
    if (v < 0 || !(g->values[v].flags & VP_VAL_WORKSPACE) || g->values[v].producer >= 0 || g->values[v].n_consumers ||
        (v < known && buffer_of[v] >= 0))
        v = vp_graph_add_unique_value(g, name);
    if (v < 0) return -1;
    vp_value *val = &g->values[v];
    val->dtype = VP_U8;
    val->rank = 1;
    val->dims[0] = bytes;
    val->flags = VP_VAL_WORKSPACE;
    return v;
}

static int64_t align_up(int64_t x, int64_t a) { return a > 1 ? (x + a - 1) / a * a : x; }

/* The bytes oneDNN's primitives for node n use beside its tensors on this machine (at
 * OpenMP's threads), 0 when oneDNN does not take n: from the values' shapes, no data read.
 * The runtime answers (ir/host.h): it remembers each answer for the process, so that the
 * many plans checkpointing and the search make of the same convolutions ask oneDNN once
 * each. */
static vp_status host_dnn_bytes(const vp_host *h, void *session, const vp_graph *g, const vp_node *n, int64_t *bytes,
                                vp_error *err) {
    *bytes = 0;
    if (vp_workspace_kind_of(n) != VP_WORKSPACE_CONV) return VP_OK;
    return h->workspace_bytes(session, g, n, bytes, err);
}

vp_status vp_plan_workspaces(vp_plan *p, vp_error *err) {
    if (p->device.blas_workspace <= 0 && p->device.conv_workspace <= 0 && !p->device.host_dnn) return VP_OK;
    vp_graph *g = p->g;
    int64_t *want = calloc((size_t)p->n_steps + 1, sizeof *want);
    if (!want) return vp_fail(err, VP_ERR_NOMEM, "out of memory planning workspaces");
    /* the host's session: a oneDNN context of its own, made on the first size its memo
     * lacks (its primitives built for sizing only, then freed), and the tensors oneDNN is
     * asked about, sized for the graph's widest node */
    const vp_host *host = p->device.host_dnn ? vp_host_get(NULL, "sizing oneDNN's workspaces (host_dnn)") : NULL;
    void *session = NULL;
    int count = 0;
    vp_status s = host ? host->workspace_open(g, &session, err) : VP_OK;
    if (s) {
        free(want);
        return s;
    }
    for (int st = 0; st < p->n_steps && !s; st++) {
        const vp_node *n = &g->nodes[p->steps[st]];
        if (host) s = host_dnn_bytes(host, session, g, n, &want[st], err);
        else want[st] = vp_workspace_bytes(g, n, &p->device);
        count += want[st] > 0;
    }
    if (host) host->workspace_close(session);
    if (s || !count) {
        free(want);
        return s;
    }
    int known = g->n_values; /* buffer_of's entries, as liveness sized it */
    p->workspace = malloc((size_t)p->n_steps * sizeof *p->workspace);
    vp_buffer *bufs = realloc(p->buffers, ((size_t)p->n_buffers + (size_t)count + 1) * sizeof *bufs);
    if (bufs) p->buffers = bufs;
    if (!p->workspace || !bufs) s = vp_fail(err, VP_ERR_NOMEM, "out of memory planning workspaces");
    for (int st = 0; st < p->n_steps && !s; st++) {
        p->workspace[st] = -1;
        if (!want[st]) continue;
        int v = workspace_value(g, p->steps[st], want[st], p->buffer_of, known);
        int *bo = v >= 0 ? realloc(p->buffer_of, ((size_t)g->n_values + 1) * sizeof *bo) : NULL;
        if (!bo) {
            s = vp_fail(err, VP_ERR_NOMEM, "out of memory planning workspaces");
            break;
        }
        p->buffer_of = bo;
        for (; known < g->n_values; known++) bo[known] = -1;
        vp_buffer *b = &p->buffers[p->n_buffers];
        *b = (vp_buffer){.value = v, .cat = VP_CAT_WORKSPACE, .bytes = want[st],
                         .size = align_up(want[st], p->device.alignment), .first = st, .last = st, .alias_of = -1};
        bo[v] = p->n_buffers;
        p->workspace[st] = p->n_buffers++;
    }
    free(want);
    return s;
}

vp_workspace_summary vp_plan_workspace_summary(const vp_plan *p) {
    vp_workspace_summary w = {0, 0, 0, 0, 0};
    for (int st = 0; p->workspace && st < p->n_steps; st++) {
        int b = p->workspace[st];
        if (b < 0) continue;
        int64_t size = p->buffers[b].size;
        w.steps++;
        if (vp_workspace_kind_of(&p->g->nodes[p->steps[st]]) == VP_WORKSPACE_CONV) w.conv_steps++;
        else w.blas_steps++;
        if (size > w.largest) w.largest = size;
        w.total += size;
    }
    return w;
}
