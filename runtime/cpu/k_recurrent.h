/* CPU kernels of the recurrent family (planner/ops/recurrent.c says what they compute).
 *
 * One time step of all the batch rows at a time: the rows' inputs are gathered into
 * [N, I] scratch (each row at its own time when sequence lengths differ and the
 * direction is reverse), the gate products go through BLAS (vp_lin_gemm), the gate
 * arithmetic runs in double.  float32 and float64 natively; float16 and bfloat16 are
 * widened to float32 scratch.  The forward kernels serve the plain op and its training
 * form (which also writes C and Gates). */
#ifndef VP_K_RECURRENT_H
#define VP_K_RECURRENT_H

#include "ir/op_registry.h"

vp_status vp_cpu_lstm(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
vp_status vp_cpu_gru(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
vp_status vp_cpu_lstm_grad(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
vp_status vp_cpu_gru_grad(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);

#endif
