/* What an op's attributes and input shapes mean, read once for the shape function, the
 * gradient rule and the kernel alike.
 *
 * These resolvers read a node's attributes and its inputs' dims (Resize's scales and
 * sizes too, the data shape functions see as constants) and say what the op computes:
 * a window's pads and output extents, the axes a reduction or softmax runs along, a
 * Slice's or Pad's per-axis plan, a Resize's sample rule, which legacy form a node
 * takes.  They are the planner's (ops/), the runtime's kernels include them from here,
 * and so the shape function, the gradient rule and the kernel can never disagree on
 * what a node means.  Definitions in ops/op_semantics.c, which libvplanrt carries for
 * the kernels. */
#ifndef VP_OP_SEMANTICS_H
#define VP_OP_SEMANTICS_H

#include <stddef.h>
#include <stdint.h>

#include "ir/op_registry.h"

/* ---- elementwise: legacy broadcasting (before opset 7) ---- */

/* Whether n is an ai.onnx node older than opset 7, whose binary ops broadcast the
 * legacy way below rather than numpy's. */
int vp_ew_is_legacy(const vp_node *n);

/* Legacy broadcasting moves only B onto A, so the output has A's shape.  With attribute
 * broadcast=1, B's dims match A's (or are 1) from attribute axis on, by default aligned
 * to A's last axes; without it the shapes are equal.  A channel_slope operand (PRelu-6's
 * slope) is a single element, A's shape, or [C] along A's axis 1.  Fills b_as_a with B's
 * dims at A's rank (the same data viewed so numpy broadcasting does the rest); returns 0
 * when B does not fit. */
int vp_ew_legacy_shape(const vp_node *n, int channel_slope, int rank_a, const int64_t *dims_a, int rank_b,
                       const int64_t *dims_b, int64_t *b_as_a);

/* ---- linalg: sliding windows (Conv, ConvTranspose, pooling) and BatchNormalization ---- */

#define VP_MAX_SPATIAL (VP_MAX_RANK - 2)

/* Which op a window belongs to: the attributes and output-size rules differ. */
typedef enum vp_window_kind {
    VP_WINDOW_CONV,
    VP_WINDOW_CONV_TRANSPOSE,
    VP_WINDOW_MAXPOOL,
    VP_WINDOW_AVGPOOL,
} vp_window_kind;

/* A window sliding over the spatial axes of an N x C x D1 x ... tensor.  For Conv and
 * pooling, output position o on axis d reads input coordinate
 *     o * stride[d] - pad_begin[d] + k * dilation[d]        (k < kernel[d]);
 * for ConvTranspose the roles swap: input position i writes output coordinate
 *     i * stride[d] - pad_begin[d] + k * dilation[d]. */
typedef struct vp_window {
    int n_sp;                          /* number of spatial axes */
    int64_t in[VP_MAX_SPATIAL];        /* input extent per spatial axis */
    int64_t out[VP_MAX_SPATIAL];       /* output extent per spatial axis */
    int64_t kernel[VP_MAX_SPATIAL];
    int64_t stride[VP_MAX_SPATIAL];
    int64_t dilation[VP_MAX_SPATIAL];
    int64_t pad_begin[VP_MAX_SPATIAL];
    int64_t pad_end[VP_MAX_SPATIAL];   /* explicit or derived from auto_pad */
} vp_window;

/* Reads kernel_shape, strides, dilations, pads, auto_pad (and ceil_mode, output_padding,
 * output_shape where the op has them) and derives pads and the output extent.
 * x_dims: the input's spatial extents (n_sp of them); kernel: the kernel extents taken
 * from the weight (NULL for pooling, which reads kernel_shape).  Fails naming the node
 * on bad attributes (INVALID) or a variant not implemented (UNSUPPORTED). */
vp_status vp_window_resolve(const vp_node *n, vp_window_kind kind, int n_sp, const int64_t *x_dims,
                            const int64_t *kernel, vp_window *w, vp_error *err);

int64_t vp_window_in_volume(const vp_window *w);
int64_t vp_window_out_volume(const vp_window *w);
int64_t vp_window_kernel_volume(const vp_window *w);

/* True when a BatchNormalization node computes batch statistics (training_mode=1 from
 * opset 14, or the extra statistics outputs of older opsets). */
int vp_batchnorm_is_training(const vp_node *n);
/* True when a BatchNormalization node before opset 9 has spatial=0: statistics per
 * channel and spatial position, parameters shaped [C, D1, ...]. */
int vp_batchnorm_is_per_activation(const vp_node *n);

/* ---- reduce: axes, softmax's view ---- */

/* Views dims as [outer, dims[axis], inner]. */
void vp_red_split(int rank, const int64_t *dims, int axis, int64_t *outer, int64_t *len, int64_t *inner);

/* The axes a node takes as its attribute "axes" (older opsets) or as its input 1 (a
 * constant int64 vector: Unsqueeze, Squeeze from 13, Reduce* from 18): their count, and
 * *axes pointing at them; -1 when input 1 is given but not a known constant. */
int vp_node_axes(const vp_graph *g, const vp_node *n, const int64_t **axes);

/* Which axes a Reduce* node reduces: bit d of *mask is set when axis d is.  axes are
 * the node's axes (from the attribute or the axes input), n_axes 0 when none were
 * given, which means every axis, or none under noop_with_empty_axes.  Fails naming the
 * node on an out-of-range or repeated axis. */
vp_status vp_reduce_axes_mask(const vp_node *n, int rank, const int64_t *axes, int n_axes, unsigned *mask,
                              vp_error *err);

/* How Softmax, LogSoftmax and Hardmax see their input: [outer, len, inner], normalised
 * over len.  Before opset 13 the input is coerced to 2-D at `axis` (default 1) and len
 * is the whole trailing block; from 13 it is the one axis (default -1). */
vp_status vp_softmax_split(const vp_node *n, int rank, const int64_t *dims, int64_t *outer, int64_t *len,
                           int64_t *inner, vp_error *err);

/* ---- resample: Resize, Upsample, ResizeGrad ---- */

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

/* ---- tensor and source: Shape's bounds, Constant's value, Slice ---- */

/* Shape's start and end attributes (opset 15) resolved and clamped against rank. */
void vp_shape_op_bounds(const vp_node *n, int rank, int *start, int *end);

/* The attribute holding a Constant's value, NULL when there is none. */
const vp_attr *vp_constant_value_attr(const vp_node *n);

/* ---- Slice ---- */

typedef struct vp_slice_plan {
    int64_t start[VP_MAX_RANK]; /* first input index taken along each axis */
    int64_t step[VP_MAX_RANK];  /* input index step, never 0; +-1 where at most one element is taken */
    int64_t count[VP_MAX_RANK]; /* elements taken: the output dim */
} vp_slice_plan;

/* Resolves Slice's starts/ends/axes/steps (axes and steps may be NULL for the defaults)
 * against an input shape, clamping as ONNX specifies.  On failure returns
 * VP_ERR_INVALID and writes the reason to why. */
vp_status vp_slice_resolve(int rank, const int64_t *dims, int n, const int64_t *starts, const int64_t *ends,
                           const int64_t *axes, const int64_t *steps, vp_slice_plan *plan, char *why, size_t why_len);

/* ---- tensor: Pad ---- */

typedef enum vp_pad_mode { VP_PAD_CONSTANT, VP_PAD_REFLECT, VP_PAD_EDGE, VP_PAD_WRAP } vp_pad_mode;

/* Parses Pad's mode attribute; -1 when unknown. */
int vp_pad_mode_parse(const char *s);

/* The elements of an axis of size dim a Pad keeps: negative pads crop first, as ONNX's
 * reference does, and the positive ones then pad what is kept. */
int64_t vp_pad_kept(int64_t dim, int64_t begin, int64_t end);

/* Expands pads given for n axes (axes NULL: every axis, in order; pads holds the n
 * begins then the n ends) to begin[rank] and end[rank], checking what mode needs of
 * the input.  On failure returns VP_ERR_INVALID (or VP_ERR_UNSUPPORTED for reflect
 * and wrap wider than the axis) with the reason in why. */
vp_status vp_pad_resolve(int rank, const int64_t *dims, vp_pad_mode mode, int n, const int64_t *pads,
                         const int64_t *axes, int64_t *begin, int64_t *end, char *why, size_t why_len);

/* ---- train: the gradient ops' forms ---- */

/* True when the softmax-grad op is the opset-13 form (per-axis, default axis -1)
 * rather than the 2-D coercing form (default axis 1). */
int vp_train_softmax_is_13(const vp_node *n);

#endif
