/* CPU kernels of the elementwise family: arithmetic, comparisons and bitwise ops with
 * numpy broadcasting, math functions, activations, Clip, Where, Cast, Identity and
 * Dropout.
 *
 * Every kernel has the registry's vp_cpu_fn signature and trusts what the shape
 * function in planner/ops/elementwise.c checked: dtypes, arity, the broadcast output
 * shape.  An output may share memory with an input of its shape and dtype (in-place
 * execution), except Cast's and CastLike's, and for Sum, Mean, Max and Min only with
 * input 0 or 1.  float32 rows are plain loops the compiler vectorises; other dtypes run
 * the same loops on their own types. */
#ifndef VP_K_ELEMENTWISE_H
#define VP_K_ELEMENTWISE_H

#include "ir/ir.h"
#include "ops/op_semantics.h"

#define VP_EW_KERNEL(name) \
    vp_status name(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err)

/* Binary, numpy broadcasting (k_elementwise.c). */
VP_EW_KERNEL(vp_cpu_add);
VP_EW_KERNEL(vp_cpu_sub);
VP_EW_KERNEL(vp_cpu_mul);
VP_EW_KERNEL(vp_cpu_div);   /* integers truncate toward zero; a zero divisor is a runtime error */
VP_EW_KERNEL(vp_cpu_mod);   /* fmod=1: sign of the dividend (C fmod); fmod=0: of the divisor */
VP_EW_KERNEL(vp_cpu_pow);   /* the exponent may have another dtype than the base */
VP_EW_KERNEL(vp_cpu_prelu);
VP_EW_KERNEL(vp_cpu_equal);
VP_EW_KERNEL(vp_cpu_less);
VP_EW_KERNEL(vp_cpu_greater);
VP_EW_KERNEL(vp_cpu_less_or_equal);
VP_EW_KERNEL(vp_cpu_greater_or_equal);
VP_EW_KERNEL(vp_cpu_and);
VP_EW_KERNEL(vp_cpu_or);
VP_EW_KERNEL(vp_cpu_xor);
VP_EW_KERNEL(vp_cpu_bitwise_and);
VP_EW_KERNEL(vp_cpu_bitwise_or);
VP_EW_KERNEL(vp_cpu_bitwise_xor);
VP_EW_KERNEL(vp_cpu_bit_shift); /* attribute direction = LEFT | RIGHT */
VP_EW_KERNEL(vp_cpu_where);

/* Variadic, numpy broadcasting across all inputs (k_elementwise.c). */
VP_EW_KERNEL(vp_cpu_sum);
VP_EW_KERNEL(vp_cpu_mean);
VP_EW_KERNEL(vp_cpu_max); /* NaN propagates, as in numpy.maximum */
VP_EW_KERNEL(vp_cpu_min);

/* Unary (k_elementwise_unary.c). */
VP_EW_KERNEL(vp_cpu_sqrt);
VP_EW_KERNEL(vp_cpu_exp);
VP_EW_KERNEL(vp_cpu_log);
VP_EW_KERNEL(vp_cpu_erf);
VP_EW_KERNEL(vp_cpu_reciprocal);
VP_EW_KERNEL(vp_cpu_sin);
VP_EW_KERNEL(vp_cpu_cos);
VP_EW_KERNEL(vp_cpu_tan);
VP_EW_KERNEL(vp_cpu_asin);
VP_EW_KERNEL(vp_cpu_acos);
VP_EW_KERNEL(vp_cpu_atan);
VP_EW_KERNEL(vp_cpu_sinh);
VP_EW_KERNEL(vp_cpu_cosh);
VP_EW_KERNEL(vp_cpu_asinh);
VP_EW_KERNEL(vp_cpu_acosh);
VP_EW_KERNEL(vp_cpu_atanh);
VP_EW_KERNEL(vp_cpu_floor);
VP_EW_KERNEL(vp_cpu_ceil);
VP_EW_KERNEL(vp_cpu_round); /* half to even */
VP_EW_KERNEL(vp_cpu_neg);
VP_EW_KERNEL(vp_cpu_abs);
VP_EW_KERNEL(vp_cpu_sign);
VP_EW_KERNEL(vp_cpu_relu);
VP_EW_KERNEL(vp_cpu_leaky_relu);
VP_EW_KERNEL(vp_cpu_swish); /* x * sigmoid(alpha * x) */
VP_EW_KERNEL(vp_cpu_sigmoid);
VP_EW_KERNEL(vp_cpu_hard_sigmoid);
VP_EW_KERNEL(vp_cpu_hard_swish);
VP_EW_KERNEL(vp_cpu_tanh);
VP_EW_KERNEL(vp_cpu_softplus);
VP_EW_KERNEL(vp_cpu_softsign);
VP_EW_KERNEL(vp_cpu_elu);
VP_EW_KERNEL(vp_cpu_selu);
VP_EW_KERNEL(vp_cpu_celu);
VP_EW_KERNEL(vp_cpu_mish);
VP_EW_KERNEL(vp_cpu_shrink);
VP_EW_KERNEL(vp_cpu_thresholded_relu);
VP_EW_KERNEL(vp_cpu_gelu);      /* ai.onnx Gelu: attribute approximate = none | tanh */
VP_EW_KERNEL(vp_cpu_ms_gelu);   /* com.microsoft Gelu: erf form */
VP_EW_KERNEL(vp_cpu_fast_gelu); /* com.microsoft FastGelu: tanh form of X (+ bias) */
VP_EW_KERNEL(vp_cpu_bias_gelu); /* com.microsoft BiasGelu: erf form of X + bias */
VP_EW_KERNEL(vp_cpu_is_nan);
VP_EW_KERNEL(vp_cpu_is_inf);
VP_EW_KERNEL(vp_cpu_not);
VP_EW_KERNEL(vp_cpu_bitwise_not);
VP_EW_KERNEL(vp_cpu_clip);

/* Copies and conversions (k_elementwise_cast.c). */
VP_EW_KERNEL(vp_cpu_cast);     /* to the dtype of the output; integers wrap, floats to integers saturate */
VP_EW_KERNEL(vp_cpu_identity);
VP_EW_KERNEL(vp_cpu_dropout);  /* training: runtime/dropout_rng.h's masks under vplan_step, else numpy's MT19937 */

/* Which of count elements a training-mode Dropout with this seed and ratio keeps (1) or
 * drops (0): the draws vp_cpu_dropout makes, for the CUDA backend, which draws its masks
 * on the host so that both backends drop the same elements. */
void vp_dropout_keep_mask(uint32_t seed, double ratio, int64_t count, uint8_t *keep);
/* The same draws for a tensor of outer rows of `ranks` chunks each, keeping the rank-th
 * chunk of every row: a slice of the one-rank mask, the draws of the whole made. */
void vp_dropout_keep_mask_part(uint32_t seed, double ratio, int64_t outer, int64_t chunk, int ranks, int rank,
                               uint8_t *keep);
/* The key of the counter-based masks of Dropout node n (attribute vplan_step) or a
 * fused Attention with dropout at a step: runtime/dropout_rng.h's vp_dropout_key of its
 * seed attribute and the step. */
uint64_t vp_dropout_node_key(const vp_node *n, int64_t step);
/* The step count a draw reads at input k (an int64: a Dropout's fourth, a fused
 * Attention's after its mask); 0 without one. */
int64_t vp_dropout_step(const vp_node *n, const vp_tensor *const *in, int k);
/* How Dropout node n's tensor x is split among ranks (vplan_axis, vplan_ranks,
 * vplan_rank): each rank holds `chunk` elements of every outer row; 1 rank and all of x
 * without a split.  -1 when the attributes do not fit x. */
int vp_dropout_node_split(const vp_node *n, const vp_tensor *x, int64_t *outer, int64_t *chunk, int *ranks, int *rank);
/* Dropout node n's mask of x at a step: vp_dropout_keep_mask, or with vplan_ranks > 1
 * (sequence parallelism) the one-rank mask at this rank's positions (vplan_rank-th of
 * vplan_ranks chunks along vplan_axis); -1 when those attributes do not fit x. */
int vp_dropout_node_mask(const vp_node *n, const vp_tensor *x, double ratio, int64_t step, uint8_t *keep);

#endif
