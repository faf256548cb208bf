/* The CPU backend: host memory; each node runs on oneDNN where the fast path covers
 * it (float32 convolutions, dn.h), else on its kernel (cpu_kernels.h), the reference.  The
 * reference alone runs when asked (vp_backend_cpu_new_reference, the CLI's
 * --reference, VP_CPU_REFERENCE=1 in the environment) or when oneDNN cannot start. */
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "comm.h"
#include "cpu_kernels.h"
#include "cpu_profile.h"
#include "dn.h"
#include "ir/op_registry.h"
#include "vplanrt.h"

typedef struct cpu_ctx {
    vp_dn *dn; /* NULL: the reference kernels only */
} cpu_ctx;

static vp_status cpu_alloc(vp_backend *b, size_t bytes, void **ptr, vp_error *err) {
    (void)b;
    /* 64-byte alignment suits AVX-512 loads and matches what the planner reserves */
    size_t rounded = (bytes + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, rounded ? rounded : 64);
    if (!p) return vp_fail(err, VP_ERR_NOMEM, "cpu backend: cannot allocate %zu bytes", bytes);
    memset(p, 0, rounded ? rounded : 64);
    *ptr = p;
    return VP_OK;
}

static void cpu_free(vp_backend *b, void *ptr) {
    (void)b;
    free(ptr);
}

static vp_status cpu_copy(vp_backend *b, void *dst, const void *src, size_t bytes, vp_error *err) {
    (void)b;
    (void)err;
    if (bytes) memmove(dst, src, bytes);
    return VP_OK;
}

/* Sequence parallelism's collectives along `axis` of host tensors.  The ranks' chunks
 * of the axis are interleaved with the dims before it ([outer][rank][chunk]), the
 * collectives move rank-major blocks ([rank][outer][chunk]): reordered on the way. */
static vp_status cpu_axis_collective(vp_comm *c, const vp_node *n, const vp_tensor *x, vp_tensor *y, vp_error *err) {
    int gather = (n->op->flags & VP_OP_COLLECTIVE_GATHER) != 0;
    const vp_tensor *whole = gather ? y : x;
    int axis = (int)vp_attr_int(n, "axis", 0);
    if (axis < 0) axis += whole->rank;
    int64_t outer = 1, es = (int64_t)vp_dtype_size(x->dtype);
    for (int d = 0; d < axis; d++) outer *= whole->dims[d];
    int64_t part = vp_tensor_numel(whole) / c->size, chunk = part / outer * es; /* one rank's bytes of one outer row */
    char *tmp = outer > 1 ? malloc((size_t)(part * c->size * es) + 1) : NULL;
    if (outer > 1 && !tmp) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    vp_status s;
    if (gather) {
        s = vp_comm_gather_counted(c, x->data, tmp ? tmp : y->data, part * es, err);
        for (int64_t o = 0; tmp && !s && o < outer; o++)
            for (int r = 0; r < c->size; r++)
                memcpy((char *)y->data + (o * c->size + r) * chunk, tmp + ((int64_t)r * outer + o) * chunk, (size_t)chunk);
    } else {
        for (int64_t o = 0; tmp && o < outer; o++)
            for (int r = 0; r < c->size; r++)
                memcpy(tmp + ((int64_t)r * outer + o) * chunk, (const char *)x->data + (o * c->size + r) * chunk, (size_t)chunk);
        s = vp_comm_reduce_scatter(c, tmp ? tmp : x->data, y->data, part, x->dtype, err);
    }
    free(tmp);
    return s;
}

static vp_status cpu_dispatch(vp_backend *b, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                              vp_error *err) {
    cpu_ctx *c = b->ctx;
    vp_dn_gemm_select(c && c->dn);
    if (c && c->dn) {
        int handled;
        double t0 = vp_prof_on() ? vp_prof_now() : 0;
        vp_status s = vp_dn_run(c->dn, n, in, out, b->workspace, b->workspace_bytes, &handled, err);
        if (handled && vp_prof_on()) vp_prof_add(n->op_type, "onednn", vp_prof_now() - t0);
        if (s || handled) return s;
    }
    vp_cpu_fn kernel = vp_cpu_kernel_of(n->op);
    if (!kernel) return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "no CPU kernel for this op");
    if (!(n->op->flags & VP_OP_COLLECTIVE) || !b->comm) {
        if (!vp_prof_on()) return kernel(n, in, out, err);
        double t0 = vp_prof_now();
        vp_status s = kernel(n, in, out, err);
        vp_prof_add(n->op_type, "kernel", vp_prof_now() - t0);
        return s;
    }
    if (n->op->flags & (VP_OP_COLLECTIVE_GATHER | VP_OP_COLLECTIVE_SCATTER)) {
        vp_status s = cpu_axis_collective(b->comm, n, in[0], out[0], err);
        if (s) vp_error_prefix(err, "node '%s': ", n->name);
        return s;
    }
    if (out[0]->data != in[0]->data) memcpy(out[0]->data, in[0]->data, vp_tensor_nbytes(in[0]));
    vp_status s = vp_comm_allreduce(b->comm, out[0]->data, vp_tensor_numel(out[0]), out[0]->dtype,
                                                (n->op->flags & VP_OP_COLLECTIVE_MAX) ? VP_COMM_MAX : VP_COMM_SUM, err);
    if (s) vp_error_prefix(err, "node '%s': ", n->name);
    return s;
}

/* A node storing a fused cast (VP_CAST_ATTR) dispatches as without it, on scratch. */
static vp_status cpu_run_node(vp_backend *b, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                              vp_error *err) {
    if (!n->n_attrs || !vp_node_attr(n, VP_CAST_ATTR)) return cpu_dispatch(b, n, in, out, err);
    vp_tensor scratch[VP_STORE_CAST_MAX_OUT], *pout[VP_STORE_CAST_MAX_OUT];
    vp_status s = vp_cpu_store_cast_begin(n, out, scratch, pout, err);
    if (s) return s;
    s = cpu_dispatch(b, n, in, pout, err);
    vp_cpu_store_cast_end(n, !s, out, scratch, pout);
    return s;
}

static vp_status cpu_sync(vp_backend *b, vp_error *err) {
    (void)b;
    (void)err;
    return VP_OK;
}

static void cpu_destroy(vp_backend *b) {
    cpu_ctx *c = b->ctx;
    if (vp_prof_on()) vp_prof_report();
    if (c) vp_dn_free(c->dn);
    free(c);
    free(b);
}

static const vp_backend_iface cpu_iface = {
    .name = "cpu",
    .alignment = 64,
    .host_memory = 1,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy_to_device = cpu_copy,
    .copy_to_host = cpu_copy,
    .run_node = cpu_run_node,
    .synchronize = cpu_sync,
    .destroy = cpu_destroy,
};

vp_backend *vp_backend_cpu_new_with(int reference) {
    vp_backend *b = calloc(1, sizeof *b);
    cpu_ctx *c = calloc(1, sizeof *c);
    if (!b || !c) {
        free(b);
        free(c);
        return NULL;
    }
    b->iface = &cpu_iface;
    b->ctx = c;
    if (!reference) c->dn = vp_dn_new();
    return b;
}

int vp_backend_cpu_reference_env(void) {
    const char *e = getenv("VP_CPU_REFERENCE");
    return e && e[0] && strcmp(e, "0");
}

vp_backend *vp_backend_cpu_new(void) { return vp_backend_cpu_new_with(vp_backend_cpu_reference_env()); }

size_t vp_backend_cpu_own_scratch(const vp_backend *b) {
    const cpu_ctx *c = b->ctx;
    return c && c->dn ? vp_dn_scratch_bytes(c->dn) : 0;
}

void vp_backend_free(vp_backend *b) {
    if (b) b->iface->destroy(b);
}

vp_status vp_backend_zero(vp_backend *b, void *ptr, size_t bytes, vp_error *err) {
    if (b->iface->host_memory) {
        memset(ptr, 0, bytes);
        return VP_OK;
    }
    enum { CHUNK = 1 << 20 };
    void *zeros = calloc(1, CHUNK);
    if (!zeros) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    vp_status s = VP_OK;
    for (size_t at = 0; at < bytes && !s; at += CHUNK)
        s = b->iface->copy_to_device(b, (char *)ptr + at, zeros, bytes - at < CHUNK ? bytes - at : CHUNK, err);
    free(zeros);
    return s;
}

vp_status vp_io_args_init(vp_io_args *a, const vp_graph *g, vp_error *err) {
    int w = 1;
    for (int i = 0; i < g->n_nodes; i++) {
        if (g->nodes[i].n_inputs > w) w = g->nodes[i].n_inputs;
        if (g->nodes[i].n_outputs > w) w = g->nodes[i].n_outputs;
    }
    a->tin = malloc((size_t)w * sizeof *a->tin);
    a->tout = malloc((size_t)w * sizeof *a->tout);
    a->pin = malloc((size_t)w * sizeof *a->pin);
    a->pout = malloc((size_t)w * sizeof *a->pout);
    if (a->tin && a->tout && a->pin && a->pout) return VP_OK;
    vp_io_args_free(a);
    return vp_fail(err, VP_ERR_NOMEM, "out of memory");
}

void vp_io_args_describe(vp_io_args *a, const vp_graph *g, const vp_node *n) {
    for (int k = 0; k < n->n_inputs; k++) {
        a->pin[k] = NULL;
        if (n->inputs[k] < 0) continue;
        a->tin[k] = vp_value_tensor(&g->values[n->inputs[k]]);
        a->pin[k] = &a->tin[k];
    }
    for (int k = 0; k < n->n_outputs; k++) {
        a->pout[k] = NULL;
        if (n->outputs[k] < 0) continue;
        a->tout[k] = vp_value_tensor(&g->values[n->outputs[k]]);
        a->pout[k] = &a->tout[k];
    }
}

void vp_io_args_free(vp_io_args *a) {
    free(a->tin);
    free(a->tout);
    free(a->pin);
    free(a->pout);
    memset(a, 0, sizeof *a);
}
