/* CPU kernels of the quant family (planner/ops/quant.c says what they compute).
 *
 * float32 follows torch 1.13's CPU kernels operation for operation (the reciprocal of
 * the scale, a float product, nearbyint, the clamp), so fake-quantised values agree bit
 * for bit; float64 (gradient checks) does the same in double.  LSQ's scale gradient is
 * summed in double. */
#ifndef VP_K_FAKE_QUANT_H
#define VP_K_FAKE_QUANT_H

#include "ir/op_registry.h"

vp_status vp_cpu_fake_quant(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
vp_status vp_cpu_fake_quant_grad(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
vp_status vp_cpu_quant_observer(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
vp_status vp_cpu_quant_params(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);

#endif
