/* The CUDA backend: the same vtable as the CPU backend (backend.h), device memory,
 * one stream, cuBLAS for MatMul and Gemm, cuDNN for convolutions and their gradients
 * (where the build found it; our kernels when it declines one, or with
 * VP_CUDA_NO_CUDNN=1), our kernels for the rest.
 *
 *   vp_error err;
 *   vp_backend *b = vp_backend_cuda_new(0, 0, &err);   // device 0, no TF32
 *   if (!b) { fprintf(stderr, "%s\n", err.msg); ... }  // "no CUDA device (...)"
 *   vp_backend_cuda_set_graph(b, plan.g);             // constant int inputs read on the host
 *   ... vp_plan_exec_new(&plan, b, &x, &err); vp_plan_exec_run(x, &err); ...
 *   vp_backend_free(b);
 *
 * Every CUDA and cuBLAS call and every launch is checked; a failure returns
 * VP_ERR_RUNTIME naming the node and the CUDA error.  An op without a CUDA kernel
 * returns VP_ERR_UNSUPPORTED naming the node; vp_backend_cuda_supports() answers
 * ahead of time so a runner can refuse a plan before it starts.
 *
 * Memory: the caller's allocations (one arena for a plan) plus 256 bytes of scalars
 * for the losses the backend allocates at creation (vp_backend_cuda_workspace_bytes()),
 * and what the CUDA, cuBLAS and cuDNN contexts hold.  cuBLAS and cuDNN get scratch
 * memory only from the running step's planned workspace (vp_backend.workspace, set by
 * the planned executor; none under the naive one): cuBLAS is handed it
 * (cublasSetWorkspace, size 0 without one) and cuDNN runs the fastest algorithm its
 * heuristics rank whose workspace fits it (deterministic ones for the gradients).
 * Nothing is allocated while a step runs.
 *
 * Numerics: float32 for the compute ops (float64 for the elementwise ones); sums
 * kept in double as the CPU reference keeps them.  With allow_tf32, cuBLAS may use
 * TF32 tensor cores for float32 MatMul and Gemm (about 1e-3 relative). */
#ifndef VP_CUDA_BACKEND_H
#define VP_CUDA_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "ir/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Fails with "no CUDA device (...)" when cudaGetDeviceCount reports none or an error. */
vp_backend *vp_backend_cuda_new(int device, int allow_tf32, vp_error *err);

/* Number of CUDA devices; 0 with the reason in why (may be NULL) when there are none. */
int vp_cuda_device_count(char *why, size_t why_len);

/* 1 when the backend has a kernel for this op (domain "" or "ai.onnx" for ONNX's). */
int vp_backend_cuda_supports(const char *domain, const char *op_type);

/* Lets the backend read constant integer inputs (axes, starts, split sizes) from the
 * graph's host copy instead of the device; g must be the graph the nodes belong to. */
void vp_backend_cuda_set_graph(vp_backend *b, const vp_graph *g);

/* An op's CUDA entry, resolved once instead of at every node (code from `onnx-vplan
 * codegen --target cuda` resolves its ops at start); NULL when there is no kernel. */
typedef struct vp_cuda_kernel vp_cuda_kernel;
const vp_cuda_kernel *vp_backend_cuda_kernel(const char *domain, const char *op_type);
/* Runs node n through k, as the vtable's run_node does after its lookup. */
vp_status vp_backend_cuda_run(vp_backend *b, const vp_cuda_kernel *k, const vp_node *n, const vp_tensor *const *in,
                              vp_tensor *const *out, vp_error *err);

/* cudaMemGetInfo on the backend's device. */
vp_status vp_backend_cuda_mem_info(vp_backend *b, size_t *free_bytes, size_t *total_bytes, vp_error *err);

/* Bytes the backend allocated for itself (the loss scalars). */
size_t vp_backend_cuda_workspace_bytes(const vp_backend *b);
/* The backend's stream (a cudaStream_t), for a communicator to queue collectives on. */
void *vp_backend_cuda_stream(vp_backend *b);

/* on 0: convolutions on our kernels even where cuDNN is built (VP_CUDA_NO_CUDNN=1 in
 * the environment does the same for every backend made); 1: cuDNN again. */
void vp_backend_cuda_set_cudnn(vp_backend *b, int on);
/* What runs convolutions, in words ("cuDNN 9.19.0 (...)", "our kernels (...)"). */
const char *vp_backend_cuda_conv_path(const vp_backend *b);

/* The device's name ("NVIDIA H200"). */
const char *vp_backend_cuda_device_name(const vp_backend *b);

#ifdef __cplusplus
}
#endif

#endif
