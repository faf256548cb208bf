/* What the pieces of the CUDA backend share, and nothing callers see (they include
 * cuda_backend.h).
 *
 *   cuda_backend.c        the vtable: memory, copies, the constructor, op lookup
 *   cuda_cudnn.c          convolutions through cuDNN (where it is built), the decisions
 *                         in plain C beside it (cudnn_select.c)
 *   cuda_common.c         error checks, host reads of small inputs, device copies
 *   cuda_offload.c        optimizer-state offload: the host block, the copy stream
 *   cuda_ops_<family>.c   one op table each: reads a node's attributes and shapes on
 *                         the host and enqueues kernels (cu_*.cu) or cuBLAS calls
 *                         (elementwise, tensor, linalg, reduce, attention, resample,
 *                         pool, train)
 *   cu_lowp.cuh           float16 and bfloat16 loads and stores for kernels templated
 *                         on their storage type
 *
 * An op's semantics are the CPU reference kernels' (runtime/cpu/k_*.c). */
#ifndef VP_CUDA_INTERNAL_H
#define VP_CUDA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "backend.h"
#include "cudnn_select.h"
#include "ir/ir.h"

typedef struct cuda_ctx {
    int device;
    int allow_tf32;
    cudaStream_t stream;
    cublasHandle_t blas;
    void *dnn;       /* cudnnHandle_t; NULL: convolutions on our kernels (no cuDNN built, VP_CUDA_NO_CUDNN, or off) */
    int cudnn_off;   /* vp_backend_cuda_set_cudnn(b, 0) or VP_CUDA_NO_CUDNN */
    char cudnn_why[256]; /* why c->dnn is NULL when cuDNN is built and on */
    double *scratch; /* the scratch scalars of the losses: the backend's only allocation of its own */
    void *ws;        /* the running step's planned workspace (vp_backend.workspace), NULL none */
    size_t ws_bytes;
    void *blas_ws;   /* what cuBLAS was last given (cublasSetWorkspace) */
    size_t blas_ws_bytes;
    const vp_graph *g;
    char name[256];
    cudaStream_t copy_stream;  /* offload's copies and host updates; NULL until the first */
    struct cuda_offload *off;  /* offload's events and records (cuda_offload.c); NULL until then */
} cuda_ctx;

/* ---- optimizer-state offload (cuda_offload.c) ---- */

vp_status vp_cuda_offload_alloc_host(vp_backend *b, size_t bytes, void **ptr, vp_error *err);
void vp_cuda_offload_free_host(vp_backend *b, void *ptr);
vp_status vp_cuda_offload_step(vp_backend *b, vp_host_step kind, const vp_node *n, const vp_tensor *const *in,
                               vp_tensor *const *out, vp_error *err);
/* Before a kernel of n on the compute stream: waits for each queued copy whose device
 * memory n writes (or, for a copy back, reads). */
vp_status vp_cuda_offload_order(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                vp_error *err);
/* Waits for the copy stream; the first failed host update's error. */
vp_status vp_cuda_offload_sync(cuda_ctx *c, vp_error *err);
void vp_cuda_offload_free(cuda_ctx *c);

typedef vp_status (*cuda_op_fn)(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                vp_error *err);

typedef struct cuda_op {
    const char *name;
    const char *domain; /* "" ai.onnx, "com.microsoft", "vplan" */
    cuda_op_fn fn;
} cuda_op;

/* The op tables, one per family; each ends with an entry whose name is NULL. */
extern const cuda_op vp_cuda_ops_elementwise[];
extern const cuda_op vp_cuda_ops_tensor[];
extern const cuda_op vp_cuda_ops_linalg[];
extern const cuda_op vp_cuda_ops_reduce[];
extern const cuda_op vp_cuda_ops_attention[]; /* cuda_ops_attention.c */
extern const cuda_op vp_cuda_ops_quant[];     /* cuda_ops_quant.c */
extern const cuda_op vp_cuda_ops_resample[];  /* cuda_ops_resample.c */
extern const cuda_op vp_cuda_ops_pool[];      /* cuda_ops_pool.c */
extern const cuda_op vp_cuda_ops_train[];     /* cuda_ops_train.c */
extern const cuda_op vp_cuda_ops_act_matmul[]; /* cuda_ops_act_matmul.c */

/* C[m, n] (row-major) = alpha op(A) op(B), one product, in dt (float32, or float16 and
 * bfloat16 accumulating in float32): cuBLAS sees the transposes (cuda_ops_linalg.c). */
vp_status vp_cuda_gemm_rm(cuda_ctx *c, const vp_node *n, vp_dtype dt, int ta, int tb, int64_t m, int64_t nn, int64_t k,
                          float alpha, const void *a, int64_t lda, const void *b, int64_t ldb, void *y, vp_error *err);

/* ---- cuDNN (cuda_cudnn.c; without VP_HAVE_CUDNN each says it did not run) ---- */

/* Creates c->dnn on c->stream unless cuDNN is off; a handle cuDNN cannot make leaves it
 * NULL (our kernels run) and says why in why. */
void vp_cuda_cudnn_init(cuda_ctx *c, char *why, size_t why_len);
void vp_cuda_cudnn_destroy(cuda_ctx *c);
/* cuDNN's version ("9.19.0"), or NULL when the backend was built without it. */
const char *vp_cuda_cudnn_version(void);
/* y = conv(x, w) + b through cuDNN with the fastest algorithm whose workspace fits the
 * step's planned one; *ran 0 (and VP_OK) when cuDNN is off or does not take it. */
vp_status vp_cuda_cudnn_conv(cuda_ctx *c, const vp_node *n, const vp_conv_shape *sh, const vp_tensor *x,
                             const vp_tensor *w, const vp_tensor *b, vp_tensor *y, int *ran, vp_error *err);
/* dX, dW (deterministic algorithms) and dB of a convolution; any output may be NULL. */
vp_status vp_cuda_cudnn_conv_grad(cuda_ctx *c, const vp_node *n, const vp_conv_shape *sh, const vp_tensor *dy,
                                  const vp_tensor *x, const vp_tensor *w, vp_tensor *dx, vp_tensor *dw, vp_tensor *db,
                                  int *ran, vp_error *err);

/* ---- checking ---- */

/* VP_ERR_RUNTIME naming the node (when n is not NULL), what failed and the CUDA error. */
vp_status vp_cuda_check(cudaError_t e, const vp_node *n, const char *what, vp_error *err);
vp_status vp_cuda_blas_check(cublasStatus_t s, const vp_node *n, const char *what, vp_error *err);
#ifndef VP_CUDA_EMU
/* why libcublas could not be opened (lazy/cublas_lazy.c), NULL when it was */
const char *vp_cublas_lazy_error(void);
#endif

/* Checks a launch or CUDA call inside an op, where n and err are in scope. */
#define LAUNCH(call) vp_cuda_check((call), n, #call, err)

/* VP_ERR_UNSUPPORTED unless input k is present and float32. */
vp_status vp_cuda_need_f32(const vp_node *n, const vp_tensor *t, int k, vp_error *err);
/* The same for float32, float16 or bfloat16 (the kernels templated on cu_lowp.cuh). */
vp_status vp_cuda_need_float(const vp_node *n, const vp_tensor *t, int k, vp_error *err);

/* ---- host copies of small inputs ---- */

/* Reads up to max int32/int64 entries of input `input`: from the graph's host copy when
 * it is a constant, otherwise from the device (which waits for the stream). */
vp_status vp_cuda_read_ints(cuda_ctx *c, const vp_node *n, const vp_tensor *t, int input, int64_t *out, int max,
                            int *count, vp_error *err);
/* The same for one float32, float64, float16, bfloat16 or bool (as 0 or 1) scalar. */
vp_status vp_cuda_read_float_scalar(cuda_ctx *c, const vp_node *n, const vp_tensor *t, int input, double *out,
                                    vp_error *err);

/* Enqueues a device-to-device copy; nothing when dst is src or bytes is 0. */
vp_status vp_cuda_copy_d2d(cuda_ctx *c, const vp_node *n, void *dst, const void *src, size_t bytes, vp_error *err);

/* ---- small helpers ---- */

static inline const vp_tensor *opt_in(const vp_node *n, const vp_tensor *const *in, int k) {
    return k < n->n_inputs ? in[k] : NULL;
}

static inline vp_tensor *opt_out(const vp_node *n, vp_tensor *const *out, int k) {
    return k < n->n_outputs ? out[k] : NULL;
}

static inline float *fptr(const vp_tensor *t) { return t ? (float *)t->data : NULL; }

static inline int norm_axis(int64_t axis, int rank) { return (int)(axis < 0 ? axis + rank : axis); }

static inline void contiguous_strides(int rank, const int64_t *dims, int64_t *str) {
    int64_t s = 1;
    for (int d = rank - 1; d >= 0; d--) {
        str[d] = s;
        s *= dims[d];
    }
}

/* Element strides of t seen from an output of rank `rank` (numpy broadcasting). */
static inline void broadcast_strides(const vp_tensor *t, int rank, const int64_t *dims, int64_t *str) {
    int64_t own[VP_MAX_RANK];
    contiguous_strides(t->rank, t->dims, own);
    for (int d = 0; d < rank; d++) {
        int k = d - (rank - t->rank);
        str[d] = k < 0 || (t->dims[k] == 1 && dims[d] != 1) ? 0 : own[k];
    }
}

#endif
