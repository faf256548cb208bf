/* The CUDA backend's vtable: device memory, copies, one node at a time through the op
 * tables (cuda_ops_*.c), and the constructor that sets up the stream, the cuBLAS and
 * cuDNN handles and the few scratch scalars of the losses.  Library workspaces are the
 * plan's (vp_backend.workspace, one per step that wants one), not the backend's. */
#include "cuda_backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "cu_kernels.h"
#include "cuda_internal.h"
#include "ir/op_registry.h"

enum { SCRATCH_BYTES = 256 };

/* ---- op lookup ---- */

static const cuda_op *const op_tables[] = {vp_cuda_ops_elementwise, vp_cuda_ops_tensor, vp_cuda_ops_linalg,
                                           vp_cuda_ops_reduce, vp_cuda_ops_attention, vp_cuda_ops_resample,
                                           vp_cuda_ops_pool, vp_cuda_ops_train, vp_cuda_ops_act_matmul,
                                           vp_cuda_ops_quant};

static const cuda_op *find_op(const char *domain, const char *op_type) {
    if (!domain || !strcmp(domain, "ai.onnx")) domain = "";
    for (size_t t = 0; t < sizeof op_tables / sizeof op_tables[0]; t++)
        for (const cuda_op *e = op_tables[t]; e->name; e++)
            if (!strcmp(e->name, op_type) && !strcmp(e->domain, domain)) return e;
    return NULL;
}

int vp_backend_cuda_supports(const char *domain, const char *op_type) { return op_type && find_op(domain, op_type) != NULL; }

/* ---- the vtable ---- */

static cuda_ctx *ctx_of(vp_backend *b) { return b->ctx; }

static vp_status cuda_alloc(vp_backend *b, size_t bytes, void **ptr, vp_error *err) {
    cuda_ctx *c = ctx_of(b);
    *ptr = NULL;
    cudaError_t e = cudaSetDevice(c->device);
    if (!e) e = cudaMalloc(ptr, bytes ? bytes : 256);
    if (e == cudaErrorMemoryAllocation) {
        size_t fr = 0, total = 0;
        cudaGetLastError();
        cudaMemGetInfo(&fr, &total);
        return vp_fail(err, VP_ERR_NOMEM, "cuda backend: cannot allocate %zu bytes (%zu of %zu bytes free on the device)",
                       bytes, fr, total);
    }
    vp_status s = vp_cuda_check(e, NULL, "cudaMalloc", err);
    /* the CPU backend hands out zeroed memory: so does this one */
    if (!s) s = vp_cuda_check(cudaMemsetAsync(*ptr, 0, bytes ? bytes : 256, c->stream), NULL, "cudaMemsetAsync", err);
    if (!s) s = vp_cuda_check(cudaStreamSynchronize(c->stream), NULL, "cudaStreamSynchronize", err);
    return s;
}

static void cuda_free(vp_backend *b, void *ptr) {
    cuda_ctx *c = ctx_of(b);
    if (!ptr) return;
    cudaStreamSynchronize(c->stream);
    if (c->copy_stream) cudaStreamSynchronize(c->copy_stream); /* offload's copies may still read it */
    cudaFree(ptr);
}

static vp_status cuda_to_device(vp_backend *b, void *dst, const void *src, size_t bytes, vp_error *err) {
    cuda_ctx *c = ctx_of(b);
    if (!bytes) return VP_OK;
    /* synchronous: the host buffer may be freed when this returns */
    vp_status s = vp_cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream), NULL, "copy to device", err);
    if (!s) s = vp_cuda_check(cudaStreamSynchronize(c->stream), NULL, "copy to device", err);
    return s;
}

static vp_status cuda_to_host(vp_backend *b, void *dst, const void *src, size_t bytes, vp_error *err) {
    cuda_ctx *c = ctx_of(b);
    if (!bytes) return VP_OK;
    vp_status s = vp_cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream), NULL, "copy to host", err);
    if (!s) s = vp_cuda_check(cudaStreamSynchronize(c->stream), NULL, "copy to host", err);
    return s;
}

const vp_cuda_kernel *vp_backend_cuda_kernel(const char *domain, const char *op_type) {
    return (const vp_cuda_kernel *)find_op(domain, op_type);
}

/* Sequence parallelism's all-gather and reduce-scatter along `axis` (--sp), queued like
 * the all-reduces: one collective per row of the dims before the axis, straight between
 * the arena's buffers (vp_comm_gather_rows), where the CPU backend stages and reorders
 * one whole collective on the host. */
static vp_status axis_collective(vp_comm *c, const vp_node *n, const vp_tensor *x, vp_tensor *y, vp_error *err) {
    int gather = (n->op->flags & VP_OP_COLLECTIVE_GATHER) != 0;
    const vp_tensor *whole = gather ? y : x;
    int axis = (int)vp_attr_int(n, "axis", 0);
    if (axis < 0) axis += whole->rank;
    if (axis < 0 || axis >= whole->rank || whole->dims[axis] % c->size)
        return vp_fail(err, VP_ERR_INVALID, "axis %d of %d ranks does not fit the tensor", axis, c->size);
    int64_t rows = 1;
    for (int d = 0; d < axis; d++) rows *= whole->dims[d];
    int64_t count = rows ? vp_tensor_numel(whole) / c->size / rows : 0; /* one rank's elements of one row */
    if (gather) return vp_comm_gather_rows(c, x->data, y->data, rows, count * (int64_t)vp_dtype_size(x->dtype), err);
    return vp_comm_reduce_scatter_rows(c, x->data, y->data, rows, count, x->dtype, err);
}

static vp_status run_op(vp_backend *b, const cuda_op *e, const vp_node *n, const vp_tensor *const *in,
                        vp_tensor *const *out, vp_error *err) {
    cuda_ctx *c = ctx_of(b);
    if (!e) return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "no CUDA kernel for this op");
    for (int k = 0; k < n->n_outputs; k++)
        if (out[k] && !out[k]->data && vp_tensor_nbytes(out[k]))
            return vp_node_fail(err, VP_ERR_RUNTIME, n, "output %d has no device memory", k);
    if (n->n_inputs > 0 && !in[0] && strcmp(n->op_type, "Concat") && strcmp(n->op_type, "Sum"))
        return vp_node_fail(err, VP_ERR_INVALID, n, "input 0 is missing");
    vp_status so = vp_cuda_offload_order(c, n, in, out, err);
    if (so) return so;
    /* the step's planned workspace, or none: cuBLAS never keeps one of a step before */
    c->ws = b->workspace;
    c->ws_bytes = b->workspace ? b->workspace_bytes : 0;
    if (c->blas_ws != c->ws || c->blas_ws_bytes != c->ws_bytes) {
        vp_status s = vp_cuda_blas_check(cublasSetWorkspace(c->blas, c->ws, c->ws_bytes), n, "cublasSetWorkspace", err);
        if (s) return s;
        c->blas_ws = c->ws;
        c->blas_ws_bytes = c->ws_bytes;
    }
    if (!b->comm || !n->op || !(n->op->flags & VP_OP_COLLECTIVE)) return e->fn(c, n, in, out, err);
    vp_status s;
    if (n->op->flags & (VP_OP_COLLECTIVE_GATHER | VP_OP_COLLECTIVE_SCATTER)) {
        s = axis_collective(b->comm, n, in[0], out[0], err);
        if (s) vp_error_prefix(err, "node '%s': ", n->name);
        return s;
    }
    /* a tensor-parallel all-reduce, queued on this stream by the communicator (NCCL) */
    s = out[0]->data != in[0]->data ? e->fn(c, n, in, out, err) : VP_OK;
    if (!s) s = vp_comm_allreduce(b->comm, out[0]->data, vp_tensor_numel(out[0]), out[0]->dtype,
                                                (n->op->flags & VP_OP_COLLECTIVE_MAX) ? VP_COMM_MAX : VP_COMM_SUM, err);
    if (s) vp_error_prefix(err, "node '%s': ", n->name);
    return s;
}

/* Ops whose kernels store a fused Cast's narrowing themselves (they read the output's
 * dtype; planner/precision/cast_fuse.c fuses narrowing into these only). */
static int narrows_on_store(const vp_node *n) { return !n->domain[0] && !strcmp(n->op_type, "LayerNormalization"); }

/* A node with fused Casts (VP_CAST_ATTR).  Widening: the kernel runs unchanged, writing
 * its low result into the second half of the float32 output's own bytes, which are then
 * widened in place (no memory beyond the planned arena).  Narrowing: the op's kernel
 * rounds on store. */
static vp_status run_store_cast(vp_backend *b, const cuda_op *e, const vp_node *n, const vp_tensor *const *in,
                                vp_tensor *const *out, vp_error *err) {
    enum { MAX_OUT = 16 };
    if (n->n_outputs > MAX_OUT) return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "a fused cast on over %d outputs", MAX_OUT);
    vp_tensor half[MAX_OUT];
    vp_tensor *pout[MAX_OUT];
    for (int k = 0; k < n->n_outputs; k++) {
        vp_dtype from, to;
        pout[k] = out[k];
        if (!out[k] || !vp_node_cast_output(n, k, &from, &to)) continue;
        int widen = to == VP_F32 && (from == VP_F16 || from == VP_BF16), narrow = from == VP_F32 && (to == VP_F16 || to == VP_BF16);
        if (out[k]->dtype != to || (!widen && !narrow) || (narrow && !narrows_on_store(n)))
            return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "no CUDA kernel stores output %d as %s from %s", k,
                                vp_dtype_name(to), vp_dtype_name(from));
        if (narrow) continue;
        half[k] = *out[k];
        half[k].dtype = from;
        half[k].data = (char *)out[k]->data + vp_tensor_nbytes(&half[k]);
        pout[k] = &half[k];
    }
    cuda_ctx *c = ctx_of(b);
    vp_status s = run_op(b, e, n, in, pout, err);
    for (int k = 0; k < n->n_outputs && !s; k++)
        if (pout[k] != out[k])
            s = vp_cuda_check(cu_widen_in_place((int)half[k].dtype, vp_tensor_numel(out[k]), out[k]->data, c->stream), n,
                              "cu_widen_in_place", err);
    return s;
}

static vp_status run_any(vp_backend *b, const cuda_op *e, const vp_node *n, const vp_tensor *const *in,
                         vp_tensor *const *out, vp_error *err) {
    if (e && n->n_attrs && vp_node_attr(n, VP_CAST_ATTR)) return run_store_cast(b, e, n, in, out, err);
    return run_op(b, e, n, in, out, err);
}

vp_status vp_backend_cuda_run(vp_backend *b, const vp_cuda_kernel *k, const vp_node *n, const vp_tensor *const *in,
                              vp_tensor *const *out, vp_error *err) {
    return run_any(b, (const cuda_op *)k, n, in, out, err);
}

static vp_status cuda_run_node(vp_backend *b, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                               vp_error *err) {
    return run_any(b, find_op(n->domain, n->op_type), n, in, out, err);
}

static vp_status cuda_sync(vp_backend *b, vp_error *err) {
    cuda_ctx *c = ctx_of(b);
    vp_status s = vp_cuda_check(cudaStreamSynchronize(c->stream), NULL, "cudaStreamSynchronize", err);
    vp_status so = vp_cuda_offload_sync(c, err);
    return s ? s : so;
}

static void cuda_destroy(vp_backend *b) {
    cuda_ctx *c = ctx_of(b);
    if (c) {
        if (c->stream) cudaStreamSynchronize(c->stream);
        vp_cuda_offload_free(c);
        if (c->blas) cublasDestroy(c->blas);
        vp_cuda_cudnn_destroy(c);
        if (c->scratch) cudaFree(c->scratch);
        if (c->stream) cudaStreamDestroy(c->stream);
        free(c);
    }
    free(b);
}

static const vp_backend_iface cuda_iface = {
    .name = "cuda",
    .alignment = 256,
    .host_memory = 0,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .copy_to_device = cuda_to_device,
    .copy_to_host = cuda_to_host,
    .run_node = cuda_run_node,
    .synchronize = cuda_sync,
    .destroy = cuda_destroy,
    .alloc_host = vp_cuda_offload_alloc_host,
    .free_host = vp_cuda_offload_free_host,
    .run_host_step = vp_cuda_offload_step,
};

int vp_cuda_device_count(char *why, size_t why_len) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        if (why) snprintf(why, why_len, "cudaGetDeviceCount: %s", cudaGetErrorString(e));
        cudaGetLastError();
        return 0;
    }
    if (count == 0 && why) snprintf(why, why_len, "cudaGetDeviceCount found 0 devices");
    return count;
}

vp_backend *vp_backend_cuda_new(int device, int allow_tf32, vp_error *err) {
    char why[256];
    int count = vp_cuda_device_count(why, sizeof why);
    if (count == 0) {
        vp_fail(err, VP_ERR_RUNTIME, "no CUDA device (%s)", why);
        return NULL;
    }
    if (device < 0 || device >= count) {
        vp_fail(err, VP_ERR_USAGE, "CUDA device %d does not exist (%d present)", device, count);
        return NULL;
    }
    vp_backend *b = calloc(1, sizeof *b);
    cuda_ctx *c = calloc(1, sizeof *c);
    if (!b || !c) {
        free(b);
        free(c);
        vp_fail(err, VP_ERR_NOMEM, "out of memory");
        return NULL;
    }
    b->iface = &cuda_iface;
    b->ctx = c;
    c->device = device;
    c->allow_tf32 = allow_tf32;
    struct cudaDeviceProp prop;
    vp_status s = vp_cuda_check(cudaSetDevice(device), NULL, "cudaSetDevice", err);
    if (!s) s = vp_cuda_check(cudaGetDeviceProperties(&prop, device), NULL, "cudaGetDeviceProperties", err);
    if (!s) snprintf(c->name, sizeof c->name, "%.200s (sm_%d%d)", prop.name, prop.major, prop.minor);
    if (!s) s = vp_cuda_check(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), NULL, "cudaStreamCreate", err);
    if (!s) s = vp_cuda_check(cudaMalloc((void **)&c->scratch, SCRATCH_BYTES), NULL, "cudaMalloc (scratch)", err);
    if (!s) s = vp_cuda_blas_check(cublasCreate(&c->blas), NULL, "cublasCreate", err);
    if (!s) s = vp_cuda_blas_check(cublasSetStream(c->blas, c->stream), NULL, "cublasSetStream", err);
    /* no workspace until a step brings its planned one: cuBLAS allocates none of its own */
    if (!s) s = vp_cuda_blas_check(cublasSetWorkspace(c->blas, NULL, 0), NULL, "cublasSetWorkspace", err);
    if (!s)
        s = vp_cuda_blas_check(cublasSetMathMode(c->blas, allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH),
                               NULL, "cublasSetMathMode", err);
    if (s) {
        cuda_destroy(b);
        return NULL;
    }
    c->cudnn_off = vp_cudnn_env_off();
    if (!c->cudnn_off) vp_cuda_cudnn_init(c, c->cudnn_why, sizeof c->cudnn_why);
    return b;
}

void vp_backend_cuda_set_cudnn(vp_backend *b, int on) {
    cuda_ctx *c = ctx_of(b);
    c->cudnn_off = !on;
    if (on && !c->dnn) vp_cuda_cudnn_init(c, c->cudnn_why, sizeof c->cudnn_why);
}

const char *vp_backend_cuda_conv_path(const vp_backend *b) {
    const cuda_ctx *c = b->ctx;
    static char line[320];
    const char *v = vp_cuda_cudnn_version();
    if (c->dnn && !c->cudnn_off) snprintf(line, sizeof line, "cuDNN %s (our kernels where it declines)", v);
    else if (!v) snprintf(line, sizeof line, "our kernels (built without cuDNN)");
    else if (c->cudnn_off) snprintf(line, sizeof line, "our kernels (cuDNN %s switched off%s)", v,
                                    vp_cudnn_env_off() ? " by VP_CUDA_NO_CUDNN" : "");
    else snprintf(line, sizeof line, "our kernels (cuDNN %s unavailable: %s)", v, c->cudnn_why);
    return line;
}

void vp_backend_cuda_set_graph(vp_backend *b, const vp_graph *g) {
    if (b && b->iface == &cuda_iface) ctx_of(b)->g = g;
}

vp_status vp_backend_cuda_mem_info(vp_backend *b, size_t *free_bytes, size_t *total_bytes, vp_error *err) {
    cuda_ctx *c = ctx_of(b);
    vp_status s = vp_cuda_check(cudaSetDevice(c->device), NULL, "cudaSetDevice", err);
    if (!s) s = vp_cuda_check(cudaMemGetInfo(free_bytes, total_bytes), NULL, "cudaMemGetInfo", err);
    return s;
}

void *vp_backend_cuda_stream(vp_backend *b) { return ctx_of(b)->stream; }

size_t vp_backend_cuda_workspace_bytes(const vp_backend *b) {
    (void)b;
    return SCRATCH_BYTES;
}

const char *vp_backend_cuda_device_name(const vp_backend *b) { return ((const cuda_ctx *)b->ctx)->name; }
