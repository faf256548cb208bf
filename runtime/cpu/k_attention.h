/* CPU kernels of the attention family (planner/ops/attention.c says what they compute).
 *
 * Both work one (batch, head) pair and one block of query rows at a time: the scores
 * of the block, [rows, T], are the only scratch, so memory is O(block * T) whatever
 * the batch, heads and sequence.  Products go through BLAS (vp_lin_gemm), the row
 * log-sum-exp and the row sums of dY * Y are taken in double.  float32 and float64
 * natively; float16 and bfloat16 are widened to float32 scratch.  On the fast path
 * (oneDNN's sgemm) the pairs run on all threads; the reference path takes one at a time. */
#ifndef VP_K_ATTENTION_H
#define VP_K_ATTENTION_H

#include "ir/op_registry.h"

vp_status vp_cpu_attention(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
vp_status vp_cpu_attention_grad(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);

#endif
