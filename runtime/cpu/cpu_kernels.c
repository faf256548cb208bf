/* The CPU kernels by op: which function computes each registered op on the CPU.
 *
 * In: an op definition of the registry (planner/ir/op_registry.h), or its (domain, op
 * type).  Out: the op's kernel (runtime/cpu/k_<family>*.c), NULL when the table has no
 * row for it.  Keeps true: one row per registered op, grouped by family in the order
 * of planner/ops/, rows keyed by the registry's own spelling (domain "" for ai.onnx);
 * tests/test_cpu_kernels.c holds the table and the registry to each other.  A lookup by
 * op definition searches the table once per op, then answers from a cache keyed by the
 * definition's address that never forgets (the registry is static), read without a
 * lock, so the backend's dispatch of every node of every step costs one pointer hash. */
#include "cpu_kernels.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "k_attention.h"
#include "k_elementwise.h"
#include "k_fake_quant.h"
#include "k_linalg.h"
#include "k_recurrent.h"
#include "k_reduce.h"
#include "k_resample.h"
#include "k_tensor.h"
#include "k_train.h"

/* The collectives' kernel for one rank alone (ranks 1) is a copy; more need the
 * backend's communicator (runtime/comm.h), which runs VP_OP_COLLECTIVE ops itself. */
static vp_status cpu_one_rank(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    if (vp_attr_int(n, "ranks", 1) != 1)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "a collective of %d ranks needs a communicator (mpirun)",
                            (int)vp_attr_int(n, "ranks", 1));
    return vp_cpu_identity(n, in, out, err);
}

static const struct {
    const char *domain, *op_type;
    vp_cpu_fn kernel;
} kernels[] = {
    /* elementwise (planner/ops/elementwise.c) */
    {"", "Add", vp_cpu_add},
    {"", "Sub", vp_cpu_sub},
    {"", "Mul", vp_cpu_mul},
    {"", "Div", vp_cpu_div},
    {"", "Pow", vp_cpu_pow},
    {"", "Mod", vp_cpu_mod},
    {"", "PRelu", vp_cpu_prelu},
    {"", "Equal", vp_cpu_equal},
    {"", "Less", vp_cpu_less},
    {"", "Greater", vp_cpu_greater},
    {"", "LessOrEqual", vp_cpu_less_or_equal},
    {"", "GreaterOrEqual", vp_cpu_greater_or_equal},
    {"", "And", vp_cpu_and},
    {"", "Or", vp_cpu_or},
    {"", "Xor", vp_cpu_xor},
    {"", "Not", vp_cpu_not},
    {"", "BitwiseAnd", vp_cpu_bitwise_and},
    {"", "BitwiseOr", vp_cpu_bitwise_or},
    {"", "BitwiseXor", vp_cpu_bitwise_xor},
    {"", "BitwiseNot", vp_cpu_bitwise_not},
    {"", "BitShift", vp_cpu_bit_shift},
    {"", "Where", vp_cpu_where},
    {"", "Sum", vp_cpu_sum},
    {"", "Mean", vp_cpu_mean},
    {"", "Max", vp_cpu_max},
    {"", "Min", vp_cpu_min},
    {"", "Sqrt", vp_cpu_sqrt},
    {"", "Exp", vp_cpu_exp},
    {"", "Log", vp_cpu_log},
    {"", "Erf", vp_cpu_erf},
    {"", "Reciprocal", vp_cpu_reciprocal},
    {"", "Sin", vp_cpu_sin},
    {"", "Cos", vp_cpu_cos},
    {"", "Tan", vp_cpu_tan},
    {"", "Asin", vp_cpu_asin},
    {"", "Acos", vp_cpu_acos},
    {"", "Atan", vp_cpu_atan},
    {"", "Sinh", vp_cpu_sinh},
    {"", "Cosh", vp_cpu_cosh},
    {"", "Asinh", vp_cpu_asinh},
    {"", "Acosh", vp_cpu_acosh},
    {"", "Atanh", vp_cpu_atanh},
    {"", "Floor", vp_cpu_floor},
    {"", "Ceil", vp_cpu_ceil},
    {"", "Round", vp_cpu_round},
    {"", "Neg", vp_cpu_neg},
    {"", "Abs", vp_cpu_abs},
    {"", "Sign", vp_cpu_sign},
    {"", "Relu", vp_cpu_relu},
    {"", "LeakyRelu", vp_cpu_leaky_relu},
    {"", "Swish", vp_cpu_swish},
    {"", "Sigmoid", vp_cpu_sigmoid},
    {"", "HardSigmoid", vp_cpu_hard_sigmoid},
    {"", "HardSwish", vp_cpu_hard_swish},
    {"", "Tanh", vp_cpu_tanh},
    {"", "Softplus", vp_cpu_softplus},
    {"", "Softsign", vp_cpu_softsign},
    {"", "Elu", vp_cpu_elu},
    {"", "Selu", vp_cpu_selu},
    {"", "Celu", vp_cpu_celu},
    {"", "Mish", vp_cpu_mish},
    {"", "Shrink", vp_cpu_shrink},
    {"", "ThresholdedRelu", vp_cpu_thresholded_relu},
    {"", "Gelu", vp_cpu_gelu},
    {"com.microsoft", "Gelu", vp_cpu_ms_gelu},
    {"com.microsoft", "FastGelu", vp_cpu_fast_gelu},
    {"com.microsoft", "BiasGelu", vp_cpu_bias_gelu},
    {"", "IsNaN", vp_cpu_is_nan},
    {"", "IsInf", vp_cpu_is_inf},
    {"", "Clip", vp_cpu_clip},
    {"", "Cast", vp_cpu_cast},
    {"", "CastLike", vp_cpu_cast},
    {"", "Identity", vp_cpu_identity},
    {"", "Dropout", vp_cpu_dropout},

    /* tensor (planner/ops/tensor.c) */
    {"", "Reshape", vp_cpu_reshape},
    {"", "Flatten", vp_cpu_reshape},
    {"", "Squeeze", vp_cpu_reshape},
    {"", "Unsqueeze", vp_cpu_reshape},
    {"", "Transpose", vp_cpu_transpose},
    {"", "Concat", vp_cpu_concat},
    {"", "Split", vp_cpu_split},
    {"", "Slice", vp_cpu_slice},
    {"", "Expand", vp_cpu_expand},
    {"", "Tile", vp_cpu_tile},
    {"", "Gather", vp_cpu_gather},
    {"", "GatherElements", vp_cpu_gather_elements},
    {"", "Trilu", vp_cpu_trilu},
    {"", "Pad", vp_cpu_pad},

    /* source (planner/ops/source.c) */
    {"", "Shape", vp_cpu_shape},
    {"", "Size", vp_cpu_size},
    {"", "Constant", vp_cpu_constant},
    {"", "ConstantOfShape", vp_cpu_constant_of_shape},
    {"", "Range", vp_cpu_range},

    /* linalg (planner/ops/linalg.c) */
    {"", "MatMul", vp_cpu_matmul},
    {"", "Gemm", vp_cpu_gemm},
    {"com.microsoft", "FusedMatMul", vp_cpu_fused_matmul},
    {"", "Conv", vp_cpu_conv},
    {"", "ConvTranspose", vp_cpu_conv_transpose},
    {"", "MaxPool", vp_cpu_maxpool},
    {"", "AveragePool", vp_cpu_avgpool},
    {"", "GlobalAveragePool", vp_cpu_global_avgpool},
    {"", "GlobalMaxPool", vp_cpu_global_maxpool},
    {"", "LRN", vp_cpu_lrn},
    {"", "BatchNormalization", vp_cpu_batchnorm},
    {"", "InstanceNormalization", vp_cpu_instancenorm},
    {"", "LayerNormalization", vp_cpu_layernorm},
    {"com.microsoft", "SimplifiedLayerNormalization", vp_cpu_simplified_layernorm},

    /* reduce (planner/ops/reduce.c) */
    {"", "ReduceSum", vp_cpu_reduce_sum},
    {"", "ReduceMean", vp_cpu_reduce_mean},
    {"", "ReduceMax", vp_cpu_reduce_max},
    {"", "ReduceMin", vp_cpu_reduce_min},
    {"", "ReduceProd", vp_cpu_reduce_prod},
    {"", "ReduceL1", vp_cpu_reduce_l1},
    {"", "ReduceL2", vp_cpu_reduce_l2},
    {"", "ReduceSumSquare", vp_cpu_reduce_sum_square},
    {"", "ReduceLogSum", vp_cpu_reduce_log_sum},
    {"", "ReduceLogSumExp", vp_cpu_reduce_log_sum_exp},
    {"", "ArgMax", vp_cpu_argmax},
    {"", "ArgMin", vp_cpu_argmin},
    {"", "Softmax", vp_cpu_softmax},
    {"", "LogSoftmax", vp_cpu_log_softmax},
    {"", "Hardmax", vp_cpu_hardmax},
    {"", "SoftmaxCrossEntropyLoss", vp_cpu_softmax_cross_entropy_loss},
    {"", "NegativeLogLikelihoodLoss", vp_cpu_nll_loss},
    {"", "QuantizeLinear", vp_cpu_quantize_linear},
    {"", "DequantizeLinear", vp_cpu_dequantize_linear},
    {"", "DynamicQuantizeLinear", vp_cpu_dynamic_quantize_linear},
    {"", "CumSum", vp_cpu_cumsum},
    {"", "TopK", vp_cpu_topk},

    /* resample (planner/ops/resample.c) */
    {"", "Resize", vp_cpu_resize},
    {"", "Upsample", vp_cpu_resize},
    {"", "ScatterND", vp_cpu_scatter_nd},
    {"", "GatherND", vp_cpu_gather_nd},
    {"com.microsoft", "ResizeGrad", vp_cpu_resize_grad},
    {"com.microsoft", "GatherNDGrad", vp_cpu_gather_nd_grad},
    {"", "ScatterElements", vp_cpu_scatter_elements},
    {"com.microsoft", "GatherElementsGrad", vp_cpu_gather_elements_grad},

    /* train (planner/ops/train.c) */
    {"com.microsoft", "ReluGrad", vp_cpu_relu_grad},
    {"com.microsoft", "LeakyReluGrad", vp_cpu_leaky_relu_grad},
    {"com.microsoft", "GeluGrad", vp_cpu_gelu_grad},
    {"com.microsoft", "FastGeluGrad", vp_cpu_fast_gelu_grad},
    {"com.microsoft", "SigmoidGrad", vp_cpu_sigmoid_grad},
    {"com.microsoft", "TanhGrad", vp_cpu_tanh_grad},
    {"com.microsoft", "SoftmaxGrad", vp_cpu_softmax_grad},
    {"com.microsoft", "SoftmaxGrad_13", vp_cpu_softmax_grad},
    {"com.microsoft", "LogSoftmaxGrad", vp_cpu_log_softmax_grad},
    {"com.microsoft", "LogSoftmaxGrad_13", vp_cpu_log_softmax_grad},
    {"com.microsoft", "DropoutGrad", vp_cpu_dropout_grad},
    {"com.microsoft", "LayerNormalizationGrad", vp_cpu_layernorm_grad},
    {"com.microsoft", "SimplifiedLayerNormalizationGrad", vp_cpu_simplified_layernorm_grad},
    {"com.microsoft", "BatchNormInternal", vp_cpu_batchnorm_internal},
    {"com.microsoft", "BatchNormalizationGrad", vp_cpu_batchnorm_grad},
    {"com.microsoft", "ConvGrad", vp_cpu_conv_grad},
    {"com.microsoft", "MaxPoolGrad", vp_cpu_maxpool_grad},
    {"com.microsoft", "AveragePoolGrad", vp_cpu_avgpool_grad},
    {"", "MaxPoolGrad", vp_cpu_maxpool_grad},
    {"", "AveragePoolGrad", vp_cpu_avgpool_grad},
    {"com.microsoft", "GatherGrad", vp_cpu_gather_grad},
    {"com.microsoft", "SoftmaxCrossEntropyLossGrad", vp_cpu_sce_loss_grad},
    {"vplan", "MaxPoolInputGrad", vp_cpu_maxpool_input_grad},
    {"vplan", "MaxPoolArgmax", vp_cpu_maxpool_argmax},
    {"vplan", "MaxPoolReluGrad", vp_cpu_maxpool_relu_grad},

    /* update (planner/ops/update.c) */
    {"com.microsoft", "InPlaceAccumulatorV2", vp_cpu_inplace_accumulator_v2},
    {"com.microsoft", "ZeroGradient", vp_cpu_zero_gradient},
    {"com.microsoft", "IsAllFinite", vp_cpu_is_all_finite},
    {"vplan", "SGD", vp_cpu_sgd},
    {"vplan", "Momentum", vp_cpu_momentum},
    {"vplan", "Adam", vp_cpu_adam},
    {"ai.onnx.preview.training", "Adagrad", vp_cpu_onnx_adagrad},
    {"ai.onnx.preview.training", "Momentum", vp_cpu_onnx_momentum},
    {"ai.onnx.preview.training", "Adam", vp_cpu_onnx_adam},

    /* attention (planner/ops/attention.c) */
    {"vplan", "Attention", vp_cpu_attention},
    {"vplan", "AttentionGrad", vp_cpu_attention_grad},

    /* recurrent (planner/ops/recurrent.c) */
    {"", "LSTM", vp_cpu_lstm},
    {"", "GRU", vp_cpu_gru},
    {"vplan", "LSTMTraining", vp_cpu_lstm},
    {"vplan", "GRUTraining", vp_cpu_gru},
    {"vplan", "LSTMGrad", vp_cpu_lstm_grad},
    {"vplan", "GRUGrad", vp_cpu_gru_grad},

    /* activations into their product (planner/ops/act_matmul.c) */
    {"vplan", "GeluMatMul", vp_cpu_gelu_matmul},
    {"vplan", "GeluMatMulGrad", vp_cpu_gelu_matmul_grad},
    {"vplan", "SwiGluMatMul", vp_cpu_swiglu_matmul},
    {"vplan", "SwiGluMatMulGrad", vp_cpu_swiglu_matmul_grad},

    /* collective (planner/ops/collective.c) */
    {"vplan", "TPCopy", vp_cpu_identity},
    {"vplan", "TPAllReduce", vp_cpu_identity},
    {"vplan", "TPAllGather", cpu_one_rank},
    {"vplan", "TPReduceScatter", cpu_one_rank},
    {"vplan", "TPAllReduceMax", vp_cpu_identity},

    /* quant (planner/ops/quant.c) */
    {"vplan", "FakeQuant", vp_cpu_fake_quant},
    {"vplan", "FakeQuantGrad", vp_cpu_fake_quant_grad},
    {"vplan", "QuantObserver", vp_cpu_quant_observer},
    {"vplan", "QuantParams", vp_cpu_quant_params},
};

vp_cpu_fn vp_cpu_kernel_find(const char *domain, const char *op_type) {
    /* the registry's rule: no domain and "ai.onnx" are the default domain's spellings */
    if (!domain || !strcmp(domain, "ai.onnx")) domain = "";
    for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; i++)
        if (!strcmp(kernels[i].op_type, op_type) && !strcmp(kernels[i].domain, domain)) return kernels[i].kernel;
    return NULL;
}

void vp_cpu_kernels_foreach(void (*fn)(const char *domain, const char *op_type, vp_cpu_fn kernel, void *ctx),
                            void *ctx) {
    for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; i++)
        fn(kernels[i].domain, kernels[i].op_type, kernels[i].kernel, ctx);
}

/* Open addressing, a power of two over twice the registry's ops, so probes stay short.
 * A slot is written once, under the lock: its kernel first, then (release) its op, so a
 * reader that sees the op (acquire) sees its kernel. */
enum { CACHE_SLOTS = 1024 };
static struct {
    _Atomic(const vp_op_def *) op;
    vp_cpu_fn kernel;
} cache[CACHE_SLOTS];
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t slot_of(const vp_op_def *op) {
    uint64_t h = (uint64_t)(uintptr_t)op * 0x9e3779b97f4a7c15u; /* Fibonacci hashing */
    return (size_t)(h >> 54) & (CACHE_SLOTS - 1);
}

static vp_cpu_fn remember(const vp_op_def *op, size_t first) {
    vp_cpu_fn k = vp_cpu_kernel_find(op->domain, op->name);
    pthread_mutex_lock(&cache_lock);
    for (size_t i = 0; i < CACHE_SLOTS; i++) {
        size_t s = (first + i) & (CACHE_SLOTS - 1);
        const vp_op_def *o = atomic_load_explicit(&cache[s].op, memory_order_relaxed);
        if (o == op) break; /* another thread got here first */
        if (!o) {
            cache[s].kernel = k;
            atomic_store_explicit(&cache[s].op, op, memory_order_release);
            break;
        }
    }
    pthread_mutex_unlock(&cache_lock);
    return k; /* a full cache (definitions outside the registry) only costs the search */
}

vp_cpu_fn vp_cpu_kernel_of(const vp_op_def *op) {
    if (!op) return NULL;
    size_t first = slot_of(op);
    for (size_t i = 0; i < CACHE_SLOTS; i++) {
        size_t s = (first + i) & (CACHE_SLOTS - 1);
        const vp_op_def *o = atomic_load_explicit(&cache[s].op, memory_order_acquire);
        if (o == op) return cache[s].kernel;
        if (!o) break;
    }
    return remember(op, first);
}
