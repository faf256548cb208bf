/* CPU kernels of the train family: the gradient ops of ONNX Runtime's training graphs
 * (com.microsoft, same inputs, outputs, attributes and semantics as ONNX Runtime) and
 * our optimizer updates (domain "vplan", PyTorch semantics; see planner/ops/update.c).
 *
 * Every kernel computes float32 and float64 natively and accumulates long sums in
 * double; float16 and bfloat16 tensors are widened to float32 scratch by
 * vp_lin_run_widened() and rounded back.  Files:
 *   k_train_act.c    ReluGrad, LeakyReluGrad, GeluGrad, FastGeluGrad, SigmoidGrad, TanhGrad,
 *                    SoftmaxGrad(_13), LogSoftmaxGrad(_13), DropoutGrad
 *   k_train_norm.c   LayerNormalizationGrad, BatchNormInternal, BatchNormalizationGrad
 *   k_train_conv.c   ConvGrad, MaxPoolGrad, AveragePoolGrad
 *   k_train_index.c  GatherGrad, SoftmaxCrossEntropyLossGrad, InPlaceAccumulatorV2,
 *                    ZeroGradient
 *   k_train_optim.c  SGD, Momentum, Adam (vplan); Adagrad, Momentum, Adam of ONNX's
 *                    ai.onnx.preview.training domain */
#ifndef VP_K_TRAIN_H
#define VP_K_TRAIN_H

#include "ir/op_registry.h"
#include "ops/op_semantics.h"
#include "k_adam.h"

#define VP_TRAIN_KERNEL(name) \
    vp_status name(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err)

VP_TRAIN_KERNEL(vp_cpu_relu_grad);
VP_TRAIN_KERNEL(vp_cpu_leaky_relu_grad);
VP_TRAIN_KERNEL(vp_cpu_gelu_grad);
VP_TRAIN_KERNEL(vp_cpu_fast_gelu_grad);
VP_TRAIN_KERNEL(vp_cpu_sigmoid_grad);
VP_TRAIN_KERNEL(vp_cpu_tanh_grad);
VP_TRAIN_KERNEL(vp_cpu_softmax_grad);     /* SoftmaxGrad and SoftmaxGrad_13 (reads op_type) */
VP_TRAIN_KERNEL(vp_cpu_log_softmax_grad); /* LogSoftmaxGrad and LogSoftmaxGrad_13 */
VP_TRAIN_KERNEL(vp_cpu_dropout_grad);

VP_TRAIN_KERNEL(vp_cpu_layernorm_grad);
VP_TRAIN_KERNEL(vp_cpu_simplified_layernorm_grad); /* (dY, X, scale, inv_std_var) -> dX, dscale */
VP_TRAIN_KERNEL(vp_cpu_batchnorm_internal);
VP_TRAIN_KERNEL(vp_cpu_batchnorm_grad);

VP_TRAIN_KERNEL(vp_cpu_conv_grad);
VP_TRAIN_KERNEL(vp_cpu_maxpool_grad);
/* vplan.MaxPoolInputGrad(dY, X): in k_pool.c, beside the forward's window search */
VP_TRAIN_KERNEL(vp_cpu_maxpool_input_grad);
/* vplan.MaxPoolArgmax(X) and vplan.MaxPoolReluGrad(dY, A, Y): in k_pool.c too */
VP_TRAIN_KERNEL(vp_cpu_maxpool_argmax);
VP_TRAIN_KERNEL(vp_cpu_maxpool_relu_grad);
/* vplan.GeluMatMul(H, W) and vplan.GeluMatMulGrad(dY, H, W): k_act_matmul.c */
VP_TRAIN_KERNEL(vp_cpu_gelu_matmul);
VP_TRAIN_KERNEL(vp_cpu_gelu_matmul_grad);
/* vplan.SwiGluMatMul(G, U, W) and vplan.SwiGluMatMulGrad(dY, G, U, W): k_act_matmul.c */
VP_TRAIN_KERNEL(vp_cpu_swiglu_matmul);
VP_TRAIN_KERNEL(vp_cpu_swiglu_matmul_grad);
VP_TRAIN_KERNEL(vp_cpu_avgpool_grad);

VP_TRAIN_KERNEL(vp_cpu_gather_grad);
VP_TRAIN_KERNEL(vp_cpu_sce_loss_grad);
VP_TRAIN_KERNEL(vp_cpu_inplace_accumulator_v2);
VP_TRAIN_KERNEL(vp_cpu_zero_gradient);
VP_TRAIN_KERNEL(vp_cpu_is_all_finite);

VP_TRAIN_KERNEL(vp_cpu_sgd);
VP_TRAIN_KERNEL(vp_cpu_momentum);
VP_TRAIN_KERNEL(vp_cpu_adam);
/* An optimizer node's attributes as its kernel reads them (codegen writes them into
 * generated steps as constants). */
vp_opt_hyper vp_train_opt_hyper(const vp_node *n);
VP_TRAIN_KERNEL(vp_cpu_onnx_adagrad);  /* ai.onnx.preview.training */
VP_TRAIN_KERNEL(vp_cpu_onnx_momentum);
VP_TRAIN_KERNEL(vp_cpu_onnx_adam);

/* ---- helpers shared by the kernel files ---- */

/* A float32 attribute as the double its writer most likely meant: the shortest
 * decimal that rounds to the same float (0.9f -> 0.9).  PyTorch keeps optimizer
 * hyper-parameters and batch-norm momentum as Python doubles; reading them back this
 * way makes 1 - beta, lr / (1 - beta1^t) and the running statistics agree with torch
 * bit for bit, where the float32 values would round differently. */
double vp_train_attr_double(const vp_node *n, const char *name, double dflt);

/* Element i of a small float tensor (per-channel vectors, scalars) as a double. */
double vp_train_scalar(const vp_tensor *t, int64_t i);

#endif
