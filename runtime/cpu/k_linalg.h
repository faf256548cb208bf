/* CPU kernels of the linalg family: MatMul, Gemm, Conv, ConvTranspose, pooling,
 * normalisation and LRN.  The sliding-window geometry the shape functions and the
 * kernels share, so both derive output sizes and pads the same way, is the planner's
 * (planner/ops/op_semantics.h).
 *
 * Kernels compute float32 and float64 natively (MatMul, Gemm and Conv through
 * OpenBLAS); float16, bfloat16 and 8-bit integer tensors are widened to float32
 * scratch by vp_lin_run_widened() and rounded back.  Files:
 *   k_linalg.c  MatMul, Gemm, widening, scratch helpers
 *   k_conv.c    Conv, ConvTranspose (im2col / col2im + gemm)
 *   k_pool.c    MaxPool, AveragePool, global pooling, LRN
 *   k_norm.c    BatchNormalization, LayerNormalization, InstanceNormalization */
#ifndef VP_K_LINALG_H
#define VP_K_LINALG_H

#include <stddef.h>
#include <stdint.h>

#include "ir/op_registry.h"
#include "ops/op_semantics.h"

/* ---- scratch and dtype helpers shared by the kernel files ---- */

/* malloc of count elements of esize bytes; NULL when the size overflows or memory is out. */
void *vp_lin_alloc(int64_t count, size_t esize);

/* float16, bfloat16, int8 and uint8 tensors are computed in float32 scratch. */
int vp_lin_is_narrow(vp_dtype t);

/* Runs kernel with every narrow tensor of the node widened to float32 and every narrow
 * output rounded back after; other tensors (int64 indices, float32) pass through. */
vp_status vp_lin_run_widened(vp_cpu_fn kernel, const vp_node *n, const vp_tensor *const *in,
                             vp_tensor *const *out, vp_error *err);

/* C = alpha * op(A) op(B) + beta * C in float32 (sgemm) or float64 (dgemm), row-major.
 * Fails when a dimension exceeds what the BLAS integer holds. */
vp_status vp_lin_gemm(const vp_node *n, vp_dtype t, int trans_a, int trans_b, int64_t m, int64_t nn,
                      int64_t k, double alpha, const void *a, int64_t lda, const void *b, int64_t ldb,
                      double beta, void *c, int64_t ldc, vp_error *err);

/* ---- kernels ---- */

vp_status vp_cpu_matmul(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
vp_status vp_cpu_fused_matmul(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                              vp_error *err);
vp_status vp_cpu_gemm(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
vp_status vp_cpu_conv(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
vp_status vp_cpu_conv_transpose(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                vp_error *err);
vp_status vp_cpu_maxpool(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
vp_status vp_cpu_avgpool(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
vp_status vp_cpu_global_avgpool(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                vp_error *err);
vp_status vp_cpu_global_maxpool(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                vp_error *err);
vp_status vp_cpu_lrn(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
vp_status vp_cpu_batchnorm(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
vp_status vp_cpu_layernorm(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
/* com.microsoft.SimplifiedLayerNormalization (RMSNorm): LayerNormalization with the mean 0, no bias */
vp_status vp_cpu_simplified_layernorm(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                      vp_error *err);
vp_status vp_cpu_instancenorm(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                              vp_error *err);


#endif
