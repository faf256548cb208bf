/* CPU kernels of the tensor family: shape and data-movement ops.
 *
 * None of these ops does arithmetic on the elements it moves (Range and Pad's scalar
 * attribute aside), so every kernel works on bytes and an element size and serves every
 * dtype we store.  Most are one call to vp_copy_strided with the right strides.
 *
 * The resolvers below are pure functions on plain arrays, shared by the shape functions
 * (planner/ops/tensor.c) and the kernels, so the two can never disagree on what a
 * Slice or a Pad means. */
#ifndef VP_K_TENSOR_H
#define VP_K_TENSOR_H

#include "ir/op_registry.h"

/* Copies a box of dims[0..rank) elements of esize bytes between two strided layouts
 * (strides in bytes, any sign, 0 to repeat).  rank may reach 2 * VP_MAX_RANK. */
void vp_copy_strided(void *dst, const int64_t *dst_strides, const void *src, const int64_t *src_strides, int rank,
                     const int64_t *dims, size_t esize);

/* Row-major strides of t in bytes. */
void vp_tensor_strides(const vp_tensor *t, int64_t *strides);

/* Element i of an int32 or int64 tensor (shape and index inputs). */
int64_t vp_tensor_int_at(const vp_tensor *t, int64_t i);

/* Reads up to max entries of a 1-D int32/int64 tensor into v; returns how many (0 for
 * a NULL tensor, an omitted optional input). */
int vp_tensor_read_ints(const vp_tensor *t, int64_t *v, int max);

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

/* ---- Pad ---- */

typedef enum vp_pad_mode { VP_PAD_CONSTANT, VP_PAD_REFLECT, VP_PAD_EDGE, VP_PAD_WRAP } vp_pad_mode;

/* Parses Pad's mode attribute; -1 when unknown. */
int vp_pad_mode_parse(const char *s);

/* Expands pads given for n axes (axes NULL: every axis, in order; pads holds the n
 * begins then the n ends) to begin[rank] and end[rank], checking what mode needs of
 * the input.  On failure returns VP_ERR_INVALID (or VP_ERR_UNSUPPORTED for reflect
 * and wrap wider than the axis) with the reason in why. */
vp_status vp_pad_resolve(int rank, const int64_t *dims, vp_pad_mode mode, int n, const int64_t *pads,
                         const int64_t *axes, int64_t *begin, int64_t *end, char *why, size_t why_len);

/* ---- kernels ---- */

vp_status vp_cpu_reshape(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
vp_status vp_cpu_transpose(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
vp_status vp_cpu_concat(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
vp_status vp_cpu_split(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
vp_status vp_cpu_slice(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
vp_status vp_cpu_expand(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
vp_status vp_cpu_tile(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
vp_status vp_cpu_shape(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
vp_status vp_cpu_size(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
vp_status vp_cpu_constant(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
vp_status vp_cpu_constant_of_shape(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
vp_status vp_cpu_range(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);

/* k_tensor_index.c: ops that pick elements by index or position */
vp_status vp_cpu_gather(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
vp_status vp_cpu_gather_elements(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
vp_status vp_cpu_trilu(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
vp_status vp_cpu_pad(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);

#endif
