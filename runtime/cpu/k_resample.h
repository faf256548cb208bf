/* CPU kernels of the resample family: Resize (and the deprecated Upsample it subsumes),
 * its adjoint ResizeGrad, and the N-dimensional index ops ScatterND, GatherND and
 * GatherND's adjoint GatherNDGrad.
 *
 * vp_resize_resolve (planner/ops/op_semantics.h) turns a Resize-like node and its
 * inputs into a plan: output dims and, per axis, the scale and the coordinate rule.  It
 * is the one place that reads the attributes, so the shape function
 * (planner/ops/resample.c), the forward kernel and the gradient kernel can never
 * disagree on an output size or a sample position. */
#ifndef VP_K_RESAMPLE_H
#define VP_K_RESAMPLE_H
#include "ir/op_registry.h"
#include "ops/op_semantics.h"

vp_status vp_cpu_resize(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
/* ResizeGrad(dY, X, [roi], [scales]) -> dX: the adjoint of Resize, dY's elements added
 * to the inputs each output sampled, with the weights it sampled them with. */
vp_status vp_cpu_resize_grad(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);

/* k_scatter.c */
vp_status vp_cpu_scatter_nd(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
vp_status vp_cpu_gather_nd(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
/* GatherNDGrad(shape, indices, dY) -> dX: zeros of shape with dY's slices added where
 * GatherND read them (duplicates accumulate). */
vp_status vp_cpu_gather_nd_grad(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
/* ScatterElements(data, indices, updates) -> a copy of data with updates written (or
 * combined by the reduction) at the elements indices name along axis. */
vp_status vp_cpu_scatter_elements(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
/* GatherElementsGrad(dY, shape, indices) -> dX: zeros of shape with dY's elements added
 * where GatherElements read them (duplicates accumulate, in index order). */
vp_status vp_cpu_gather_elements_grad(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                      vp_error *err);

#endif
