/* CPU kernels of the resample family: Resize (and the deprecated Upsample it subsumes),
 * its adjoint ResizeGrad, and the N-dimensional index ops ScatterND, GatherND and
 * GatherND's adjoint GatherNDGrad.
 *
 * vp_resize_resolve turns a Resize-like node and its inputs into a plan: output dims
 * and, per axis, the scale and the coordinate rule.  It is the one place that reads
 * the attributes, so the shape function (planner/ops/resample.c), the forward kernel
 * and the gradient kernel can never disagree on an output size or a sample position. */
#ifndef VP_K_RESAMPLE_H
#define VP_K_RESAMPLE_H
#include "ir/op_registry.h"

typedef enum vp_resize_mode { VP_RESIZE_NEAREST, VP_RESIZE_LINEAR } vp_resize_mode;

typedef enum vp_resize_coord {
    VP_COORD_HALF_PIXEL,
    VP_COORD_HALF_PIXEL_SYMMETRIC,
    VP_COORD_PYTORCH_HALF_PIXEL,
    VP_COORD_ALIGN_CORNERS,
    VP_COORD_ASYMMETRIC,
    VP_COORD_TF_HALF_PIXEL_FOR_NEAREST,
    VP_COORD_TF_CROP_AND_RESIZE,
} vp_resize_coord;

typedef enum vp_resize_round { VP_ROUND_PREFER_FLOOR, VP_ROUND_PREFER_CEIL, VP_ROUND_FLOOR, VP_ROUND_CEIL } vp_resize_round;

typedef struct vp_resize_plan {
    vp_resize_mode mode;
    vp_resize_coord coord;
    vp_resize_round round;
    int rank;
    int64_t in[VP_MAX_RANK];  /* X's dims */
    int64_t out[VP_MAX_RANK]; /* Y's dims */
    double scale[VP_MAX_RANK]; /* output/input scale per axis (1 where not resized) */
    double length[VP_MAX_RANK]; /* the output length the coordinate rules use: in * scale
                                   before flooring when scales are given, else out */
    double roi_start[VP_MAX_RANK], roi_end[VP_MAX_RANK]; /* tf_crop_and_resize's box, normalised */
    double extrapolation;      /* tf_crop_and_resize's value outside the input */
} vp_resize_plan;

/* The plan of a Resize (opset 10 on), Upsample (opsets 7 and 9) or com.microsoft
 * ResizeGrad node.  in[] are the node's inputs as tensors (NULL when omitted; the data
 * of roi, scales and sizes must be present).  Refuses, naming the node, every variant
 * the kernels do not compute (cubic, antialias, exclude_outside). */
vp_status vp_resize_resolve(const vp_node *n, const vp_tensor *const *in, int n_in, vp_resize_plan *p, vp_error *err);

vp_status vp_cpu_resize(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
/* ResizeGrad(dY, X, [roi], [scales]) -> dX: the adjoint of Resize, dY's elements added
 * to the inputs each output sampled, with the weights it sampled them with. */
vp_status vp_cpu_resize_grad(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);

/* k_scatter_nd.c */
vp_status vp_cpu_scatter_nd(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
vp_status vp_cpu_gather_nd(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
/* GatherNDGrad(shape, indices, dY) -> dX: zeros of shape with dY's slices added where
 * GatherND read them (duplicates accumulate). */
vp_status vp_cpu_gather_nd_grad(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);

#endif
