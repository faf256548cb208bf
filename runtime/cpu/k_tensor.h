/* CPU kernels of the tensor family: shape and data-movement ops.
 *
 * None of these ops does arithmetic on the elements it moves (Range and Pad's scalar
 * attribute aside), so every kernel works on bytes and an element size and serves every
 * dtype we store.  Most are one call to vp_copy_strided with the right strides.
 *
 * Slice's and Pad's resolvers are pure functions on plain arrays in
 * planner/ops/op_semantics.h, shared by the shape functions (planner/ops/tensor.c) and
 * the kernels, so the two can never disagree on what a Slice or a Pad means. */
#ifndef VP_K_TENSOR_H
#define VP_K_TENSOR_H

#include "cpu_util.h"
#include "ir/op_registry.h"
#include "ops/op_semantics.h"

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

/* The index ops' indices: every one checked against an axis of dim elements (a bad one
 * fails naming the node, the index and its place) and counted from 0, into *ix, which
 * the caller frees.  Gather, GatherElements, ScatterElements and the adjoints read them
 * so: checked before anything is written, read once. */
vp_status vp_cpu_axis_indices(const vp_node *n, const vp_tensor *idx, int axis, int64_t dim, int64_t **ix,
                              vp_error *err);

/* GatherElements' geometry, which ScatterElements and GatherElementsGrad share: a walk
 * over the indices' shape (idx_dims, of the data's rank) whose off[0] is an element's
 * data offset with its axis coordinate left out; *axis_stride is that axis's. */
vp_nd_iter vp_cpu_elements_walk(int rank, const int64_t *data_dims, const int64_t *idx_dims, int axis,
                                int64_t *axis_stride);

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
