/* Gradient builders (the `grad` column of the op registry), one per differentiable
 * forward op, and the small node-building helpers they share.
 *
 * Every builder has the vp_grad_fn signature (see planner/grad.h): dy[k] is the
 * gradient of output k or -1, and the builder sets dx[k] for each input k where
 * vp_grad_needs() holds, with exactly that input's dtype and shape.  Builders emit
 * standard ONNX ops (opset 13 semantics or newer) where they exist and ONNX Runtime's
 * com.microsoft gradient ops (ReluGrad, SoftmaxGrad_13, ConvGrad, ...) where they do
 * not.  A variant a builder cannot differentiate is refused with VP_ERR_UNSUPPORTED
 * naming the node; it never yields a wrong gradient.
 *
 * Files: grad_elementwise.c, grad_activation.c, grad_tensor.c, grad_linalg.c,
 * grad_norm.c, grad_reduce.c (the rules of each op family), grad_util.c (helpers
 * below).  Tested by tests/test_gradcheck.c (finite differences, every rule). */
#ifndef VP_GRAD_RULES_H
#define VP_GRAD_RULES_H

#include "train/grad.h"

#define VP_GRAD_RULE(name) vp_status name(vp_grad_ctx *c, int node, const int *dy, int *dx, vp_error *err)

/* ---- elementwise (grad_elementwise.c; activations and transcendental functions in
 * grad_activation.c) ---- */
VP_GRAD_RULE(vp_grad_identity);
VP_GRAD_RULE(vp_grad_add);
VP_GRAD_RULE(vp_grad_sub);
VP_GRAD_RULE(vp_grad_mul);
VP_GRAD_RULE(vp_grad_div);
VP_GRAD_RULE(vp_grad_pow);
VP_GRAD_RULE(vp_grad_neg);
VP_GRAD_RULE(vp_grad_abs);
VP_GRAD_RULE(vp_grad_sqrt);
VP_GRAD_RULE(vp_grad_exp);
VP_GRAD_RULE(vp_grad_log);
VP_GRAD_RULE(vp_grad_reciprocal);
VP_GRAD_RULE(vp_grad_erf);
VP_GRAD_RULE(vp_grad_relu);
VP_GRAD_RULE(vp_grad_leaky_relu);
VP_GRAD_RULE(vp_grad_sigmoid);
VP_GRAD_RULE(vp_grad_tanh);
VP_GRAD_RULE(vp_grad_gelu);
VP_GRAD_RULE(vp_grad_softplus);
VP_GRAD_RULE(vp_grad_elu);
VP_GRAD_RULE(vp_grad_clip);
VP_GRAD_RULE(vp_grad_where);
VP_GRAD_RULE(vp_grad_cast);
VP_GRAD_RULE(vp_grad_sum);
VP_GRAD_RULE(vp_grad_max_min); /* Max and Min: to the inputs equal to the result */
VP_GRAD_RULE(vp_grad_dropout);
VP_GRAD_RULE(vp_grad_mean);
VP_GRAD_RULE(vp_grad_prelu);
VP_GRAD_RULE(vp_grad_sin);
VP_GRAD_RULE(vp_grad_cos);
VP_GRAD_RULE(vp_grad_hard_sigmoid);
VP_GRAD_RULE(vp_grad_hard_swish);
VP_GRAD_RULE(vp_grad_softsign);
VP_GRAD_RULE(vp_grad_selu);
VP_GRAD_RULE(vp_grad_fast_gelu); /* com.microsoft.FastGelu(X, [bias]) */
VP_GRAD_RULE(vp_grad_bias_gelu); /* com.microsoft.BiasGelu(A, B) */
VP_GRAD_RULE(vp_grad_tan);
VP_GRAD_RULE(vp_grad_asin);
VP_GRAD_RULE(vp_grad_acos);
VP_GRAD_RULE(vp_grad_atan);
VP_GRAD_RULE(vp_grad_sinh);
VP_GRAD_RULE(vp_grad_cosh);
VP_GRAD_RULE(vp_grad_asinh);
VP_GRAD_RULE(vp_grad_acosh);
VP_GRAD_RULE(vp_grad_atanh);
VP_GRAD_RULE(vp_grad_swish);
VP_GRAD_RULE(vp_grad_celu);
VP_GRAD_RULE(vp_grad_mish);
VP_GRAD_RULE(vp_grad_shrink);
VP_GRAD_RULE(vp_grad_thresholded_relu);
VP_GRAD_RULE(vp_grad_zero); /* Floor, Ceil, Round, Sign, Hardmax: zero almost everywhere, as PyTorch */

/* ---- tensor (grad_tensor.c) ---- */
VP_GRAD_RULE(vp_grad_reshape); /* Reshape, Flatten, Squeeze, Unsqueeze */
VP_GRAD_RULE(vp_grad_transpose);
VP_GRAD_RULE(vp_grad_expand);
VP_GRAD_RULE(vp_grad_concat);
VP_GRAD_RULE(vp_grad_split);
VP_GRAD_RULE(vp_grad_slice);
VP_GRAD_RULE(vp_grad_gather);
VP_GRAD_RULE(vp_grad_tile);
VP_GRAD_RULE(vp_grad_pad);
VP_GRAD_RULE(vp_grad_trilu);
VP_GRAD_RULE(vp_grad_gather_elements);

/* ---- linalg (grad_linalg.c; normalisations in grad_norm.c) ---- */
VP_GRAD_RULE(vp_grad_matmul);
VP_GRAD_RULE(vp_grad_gemm);
VP_GRAD_RULE(vp_grad_fused_matmul);
VP_GRAD_RULE(vp_grad_conv);
VP_GRAD_RULE(vp_grad_conv_transpose);
VP_GRAD_RULE(vp_grad_max_pool);
VP_GRAD_RULE(vp_grad_average_pool);
VP_GRAD_RULE(vp_grad_global_average_pool);
VP_GRAD_RULE(vp_grad_global_max_pool);
VP_GRAD_RULE(vp_grad_batch_norm_internal); /* com.microsoft.BatchNormInternal */
VP_GRAD_RULE(vp_grad_layer_norm);
VP_GRAD_RULE(vp_grad_simplified_layer_norm);
VP_GRAD_RULE(vp_grad_instance_norm);
VP_GRAD_RULE(vp_grad_lrn);
VP_GRAD_RULE(vp_grad_batch_norm); /* BatchNormalization as exported (training_mode=1, or inference) */

/* ---- reduce (grad_reduce.c) ---- */
VP_GRAD_RULE(vp_grad_reduce_sum);
VP_GRAD_RULE(vp_grad_reduce_mean);
VP_GRAD_RULE(vp_grad_reduce_max_min); /* ReduceMax and ReduceMin: split evenly among ties */
VP_GRAD_RULE(vp_grad_reduce_sum_square);
VP_GRAD_RULE(vp_grad_reduce_l1);
VP_GRAD_RULE(vp_grad_reduce_l2);
VP_GRAD_RULE(vp_grad_reduce_log_sum);
VP_GRAD_RULE(vp_grad_reduce_prod);
VP_GRAD_RULE(vp_grad_reduce_log_sum_exp);
VP_GRAD_RULE(vp_grad_softmax);
VP_GRAD_RULE(vp_grad_log_softmax);
VP_GRAD_RULE(vp_grad_softmax_cross_entropy_loss);
VP_GRAD_RULE(vp_grad_nll_loss); /* NegativeLogLikelihoodLoss */
VP_GRAD_RULE(vp_grad_cumsum);
VP_GRAD_RULE(vp_grad_topk);

/* ---- resample (grad_resample.c) ---- */
VP_GRAD_RULE(vp_grad_resize); /* Resize and Upsample: com.microsoft ResizeGrad */
VP_GRAD_RULE(vp_grad_scatter_nd);
VP_GRAD_RULE(vp_grad_scatter_elements);
VP_GRAD_RULE(vp_grad_gather_nd);

/* ---- helpers (grad_util.c) ----
 * Each returns a status and writes the new value id to *out.  Node pointers go stale
 * across these calls (they grow the graph): hold ids, copy shapes to locals. */

int vp_gr_in(vp_grad_ctx *c, int node, int k);  /* input k's value id, -1 when omitted */
int vp_gr_out(vp_grad_ctx *c, int node, int k); /* output k's value id, -1 when omitted */
const vp_value *vp_gr_val(vp_grad_ctx *c, int v);
/* A copy of a value's shape and dtype, which survives the graph growing. */
typedef struct vp_gr_shape {
    int rank;
    int64_t dims[VP_MAX_RANK];
    vp_dtype dtype;
} vp_gr_shape;
vp_gr_shape vp_gr_shape_of(vp_grad_ctx *c, int v);
const vp_node *vp_gr_node(vp_grad_ctx *c, int node);
vp_status vp_gr_nomem(vp_error *err);

/* A scalar of a float dtype (half types: a float32 constant and a Cast). */
vp_status vp_gr_scalar(vp_grad_ctx *c, int node, vp_dtype dt, double v, int *out, vp_error *err);
vp_status vp_gr_ints(vp_grad_ctx *c, const int64_t *v, int n, int *out, vp_error *err);
/* op(a, v) with v a scalar of a's dtype. */
vp_status vp_gr_op_scalar(vp_grad_ctx *c, int node, const char *op, int a, double v, int *out, vp_error *err);
vp_status vp_gr_where(vp_grad_ctx *c, int node, int cond, int a, int b, int *out, vp_error *err);
/* dx[0] = dy[0] * f when input 0 needs a gradient: the tail of most unary rules. */
vp_status vp_gr_times_dy(vp_grad_ctx *c, int node, const int *dy, int f, int *dx, vp_error *err);
/* A com.microsoft op of two inputs and one output (ReluGrad(dY, X), ...). */
vp_status vp_gr_ms2(vp_grad_ctx *c, int node, const char *op, int a, int b, int *out, vp_error *err);
vp_status vp_gr_cast(vp_grad_ctx *c, int node, int x, vp_dtype to, int *out, vp_error *err);
/* x * v, with v a scalar of x's dtype. */
vp_status vp_gr_scale(vp_grad_ctx *c, int node, int x, double v, int *out, vp_error *err);
vp_status vp_gr_reshape(vp_grad_ctx *c, int node, int x, int rank, const int64_t *dims, int *out, vp_error *err);
vp_status vp_gr_expand(vp_grad_ctx *c, int node, int x, int rank, const int64_t *dims, int *out, vp_error *err);
vp_status vp_gr_transpose(vp_grad_ctx *c, int node, int x, int rank, const int64_t *perm, int *out, vp_error *err);
vp_status vp_gr_reduce_sum(vp_grad_ctx *c, int node, int x, int n_axes, const int64_t *axes, int keepdims, int *out,
                           vp_error *err);
/* Zeros of a float dtype and shape. */
vp_status vp_gr_zeros(vp_grad_ctx *c, int node, vp_dtype dt, int rank, const int64_t *dims, int *out, vp_error *err);
/* Sums a broadcast gradient g down to dims (aligned from the right, numpy style). */
vp_status vp_gr_sum_to_dims(vp_grad_ctx *c, int node, int g, int rank, const int64_t *dims, int *out, vp_error *err);
/* dx[k] = g summed down to input k's shape, when input k needs a gradient (input 1 of
 * a binary op before opset 7 broadcasts the legacy way: handled). */
vp_status vp_gr_to_input(vp_grad_ctx *c, int node, int g, int k, int *dx, vp_error *err);
/* Input k of a binary op as numpy broadcasting sees it: input 1 of a legacy-broadcast
 * op (before opset 7) reshaped to input 0's rank. */
vp_status vp_gr_operand(vp_grad_ctx *c, int node, int k, int *out, vp_error *err);
/* Copies every int, float, ints and string attribute of node `from` onto node `to`. */
vp_status vp_gr_copy_attrs(vp_grad_ctx *c, int from, int to, vp_error *err);
vp_status vp_gr_attr_int(vp_grad_ctx *c, int bnode, const char *name, int64_t v, vp_error *err);
vp_status vp_gr_attr_float(vp_grad_ctx *c, int bnode, const char *name, float v, vp_error *err);
vp_status vp_gr_attr_ints(vp_grad_ctx *c, int bnode, const char *name, const int64_t *v, int n, vp_error *err);
/* Makes output k of the forward node exist (an optional output the backward pass
 * needs: MaxPool's Indices, LayerNormalization's Mean), re-inferring the node. */
vp_status vp_gr_forward_output(vp_grad_ctx *c, int node, int k, const char *suffix, int *out, vp_error *err);
/* dX of shape (rank, xdims) with g's elements added at the positions idx names along
 * axis (GatherElements' and TopK's gradient; idx and g share a shape, no larger than
 * xdims off the axis): ONNX Runtime's com.microsoft GatherElementsGrad, which takes
 * memory of dX's size only. */
vp_status vp_gr_scatter_add(vp_grad_ctx *c, int node, int g, int idx, int axis, int rank, const int64_t *xdims,
                            int *out, vp_error *err);
/* The axes a Reduce* node reduces (attribute, or input from opset 18; from 13 for
 * ReduceSum) as a mask over the input's axes.  *noop is set when the node reduces
 * nothing (empty axes with noop_with_empty_axes). */
vp_status vp_gr_reduce_axes(vp_grad_ctx *c, int node, int *reduced, int *noop, vp_error *err);

#endif
