/* CPU kernels of the reduce family: reductions, arg-reductions, scans, softmax and
 * the losses built on it, and linear quantisation.
 *
 * Floating-point work is done in double whatever the storage type (float32 sums over
 * long axes would otherwise drift); integer reductions and scans run in int64 with
 * wrap-around, as ONNX Runtime's do.  Kernels read tensors a line at a time through
 * the vp_red_load / vp_red_store helpers below, so float16, bfloat16 and the integer
 * types need no code of their own, and the float32 path has no per-element dtype
 * switch.  Files:
 *   k_reduce.c   line access, Reduce*, ArgMax, ArgMin
 *   k_scan.c     CumSum, TopK
 *   k_softmax.c  Softmax, LogSoftmax, Hardmax, SoftmaxCrossEntropyLoss,
 *                NegativeLogLikelihoodLoss
 *   k_quant.c    QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear */
#ifndef VP_K_REDUCE_H
#define VP_K_REDUCE_H

#include <stdint.h>

#include "ir/op_registry.h"
#include "ops/op_semantics.h"

/* ---- line access shared by the family's kernels ---- */

/* Elements off, off + stride, ... (k of them) of a tensor's data, as doubles. */
void vp_red_load_f64(const void *data, vp_dtype t, int64_t off, int64_t stride, int64_t k, double *buf);
/* Writes k doubles back, rounding to t (saturating for integer types). */
void vp_red_store_f64(void *data, vp_dtype t, int64_t off, int64_t stride, int64_t k, const double *buf);
/* The same for integer (and bool) tensors, exact for int64. */
void vp_red_load_i64(const void *data, vp_dtype t, int64_t off, int64_t stride, int64_t k, int64_t *buf);
/* Integer results wrap to the width of t, as integer arithmetic does. */
void vp_red_store_i64(void *data, vp_dtype t, int64_t off, int64_t stride, int64_t k, const int64_t *buf);

/* ---- kernels ---- */

vp_status vp_cpu_reduce_sum(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
vp_status vp_cpu_reduce_mean(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
vp_status vp_cpu_reduce_max(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
vp_status vp_cpu_reduce_min(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
vp_status vp_cpu_reduce_prod(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
vp_status vp_cpu_reduce_l1(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
vp_status vp_cpu_reduce_l2(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
vp_status vp_cpu_reduce_sum_square(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                   vp_error *err);
vp_status vp_cpu_reduce_log_sum(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                vp_error *err);
vp_status vp_cpu_reduce_log_sum_exp(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                    vp_error *err);
vp_status vp_cpu_argmax(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
vp_status vp_cpu_argmin(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);

vp_status vp_cpu_cumsum(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
vp_status vp_cpu_topk(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);

vp_status vp_cpu_softmax(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
vp_status vp_cpu_log_softmax(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
vp_status vp_cpu_hardmax(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
vp_status vp_cpu_softmax_cross_entropy_loss(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                            vp_error *err);
vp_status vp_cpu_nll_loss(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);

vp_status vp_cpu_quantize_linear(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                 vp_error *err);
vp_status vp_cpu_dequantize_linear(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                   vp_error *err);
vp_status vp_cpu_dynamic_quantize_linear(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                         vp_error *err);

#endif
