/* CUDA ops of the elementwise family: broadcasting binary ops (and the activation
 * gradients, which are binary ops of dY and X or Y), unary ops, Clip, Where, Cast, and
 * the optimizer updates, which are elementwise over a parameter (cu_elementwise.cu). */
#include <math.h>
#include <string.h>

#include "cu_kernels.h"
#include "cuda_internal.h"
#include "k_train.h"

/* ---- elementwise ---- */

static int binary_op_of(const char *op) {
    static const struct {
        const char *name;
        int op;
    } t[] = {{"Add", CU_ADD},           {"Sub", CU_SUB},           {"Mul", CU_MUL},
             {"Div", CU_DIV},           {"Pow", CU_POW},           {"Max", CU_MAX},
             {"Min", CU_MIN},           {"Sum", CU_ADD},           {"PRelu", CU_PRELU},
             {"ReluGrad", CU_RELU_GRAD}, {"SigmoidGrad", CU_SIGMOID_GRAD}, {"TanhGrad", CU_TANH_GRAD},
             {"GeluGrad", CU_GELU_GRAD}, {"FastGeluGrad", CU_FAST_GELU_GRAD}, {"Equal", CU_EQUAL},       {"Less", CU_LESS},
             {"LessOrEqual", CU_LESS_EQUAL}, {"Greater", CU_GREATER}, {"GreaterOrEqual", CU_GREATER_EQUAL},
             {"And", CU_AND},           {"Or", CU_OR},             {"Xor", CU_XOR},
             {"Mod", CU_MOD}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!strcmp(t[i].name, op)) return t[i].op;
    return -1;
}

/* The float types the kernels take: float32 and float64, and float16 and bfloat16
 * computed in float and rounded on store (cu_lowp.cuh). */
static int is_float(vp_dtype t) { return t == VP_F32 || t == VP_F64 || t == VP_F16 || t == VP_BF16; }

static vp_status run_binary_pair(cuda_ctx *c, const vp_node *n, int op, const vp_tensor *a, const vp_tensor *b,
                                 vp_tensor *y, vp_error *err) {
    cu_nd nd;
    memset(&nd, 0, sizeof nd);
    nd.rank = y->rank;
    memcpy(nd.dims, y->dims, sizeof nd.dims);
    broadcast_strides(a, y->rank, y->dims, nd.s0);
    broadcast_strides(b, y->rank, y->dims, nd.s1);
    return LAUNCH(cu_binary((int)a->dtype, op, &nd, a->data, b->data, y->data, c->stream));
}

static vp_status op_binary(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                           vp_error *err) {
    int op = binary_op_of(n->op_type);
    if (op == CU_MOD && vp_attr_int(n, "fmod", 0)) op = CU_FMOD;
    vp_dtype t = in[0]->dtype;
    int logic = op == CU_AND || op == CU_OR || op == CU_XOR;
    int is_int = t == VP_I32 || t == VP_I64;
    int ok = logic ? t == VP_BOOL : (is_float(t) || (is_int && (op <= CU_FMOD || op >= CU_EQUAL)));
    if (op >= CU_EQUAL && !logic && t == VP_BOOL) ok = op == CU_EQUAL;
    if (!ok) return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "no CUDA kernel for %s on %s", n->op_type, vp_dtype_name(t));
    for (int k = 1; k < n->n_inputs; k++)
        if (in[k] && in[k]->dtype != t) /* Pow with an integer exponent, say */
            return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "no CUDA kernel for %s on %s and %s", n->op_type,
                                vp_dtype_name(t), vp_dtype_name(in[k]->dtype));
    if (n->n_inputs < 2) return vp_cuda_copy_d2d(c, n, out[0]->data, in[0]->data, vp_tensor_nbytes(in[0]), err);
    if (n->n_inputs > 2 && op >= CU_EQUAL) return vp_node_fail(err, VP_ERR_INVALID, n, "more than two inputs");
    vp_status s = run_binary_pair(c, n, op, in[0], in[1], out[0], err);
    /* variadic Sum, Max, Min: fold the rest into the output */
    for (int k = 2; k < n->n_inputs && !s; k++) s = run_binary_pair(c, n, op, out[0], in[k], out[0], err);
    return s;
}

static const struct {
    const char *name;
    int op;
} unary_ops[] = {{"Relu", CU_RELU},       {"Neg", CU_NEG},          {"Sqrt", CU_SQRT},
                 {"Erf", CU_ERF},         {"Exp", CU_EXP},          {"Log", CU_LOG},
                 {"Abs", CU_ABS},         {"Sigmoid", CU_SIGMOID},  {"Tanh", CU_TANH},
                 {"Reciprocal", CU_RECIPROCAL}, {"LeakyRelu", CU_LEAKY_RELU}, {"Elu", CU_ELU},
                 {"Floor", CU_FLOOR},     {"Ceil", CU_CEIL},        {"Sin", CU_SIN},
                 {"Cos", CU_COS},         {"Tan", CU_TAN},          {"Softplus", CU_SOFTPLUS},
                 {"Gelu", CU_GELU},       {"Sign", CU_SIGN},        {"Round", CU_ROUND},
                 {"Selu", CU_SELU},       {"HardSigmoid", CU_HARD_SIGMOID}, {"Softsign", CU_SOFTSIGN},
                 {"Not", CU_NOT},         {"FastGelu", CU_FAST_GELU}, {"Swish", CU_SWISH}};

static vp_status op_unary(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                          vp_error *err) {
    int op = -1;
    for (size_t i = 0; i < sizeof unary_ops / sizeof unary_ops[0]; i++)
        if (!strcmp(unary_ops[i].name, n->op_type)) op = unary_ops[i].op;
    vp_dtype t = in[0]->dtype;
    if (op == CU_NOT ? t != VP_BOOL : !is_float(t))
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "no CUDA kernel for %s on %s", n->op_type, vp_dtype_name(t));
    float alpha = 0, beta = 0;
    if (op == CU_LEAKY_RELU) alpha = vp_attr_float(n, "alpha", 0.01f);
    if (op == CU_ELU) alpha = vp_attr_float(n, "alpha", 1.0f);
    if (op == CU_SELU) {
        alpha = vp_attr_float(n, "alpha", 1.67326319217681884765625f);
        beta = vp_attr_float(n, "gamma", 1.05070102214813232421875f);
    }
    if (op == CU_SWISH) alpha = vp_attr_float(n, "alpha", 1.0f);
    if (op == CU_HARD_SIGMOID) {
        alpha = vp_attr_float(n, "alpha", 0.2f);
        beta = vp_attr_float(n, "beta", 0.5f);
    }
    if (op == CU_GELU && strcmp(vp_attr_string(n, "approximate", "none"), "none"))
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "the CUDA backend has exact Gelu only");
    if (op == CU_FAST_GELU && opt_in(n, in, 1))
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "the CUDA backend has FastGelu without bias only");
    return LAUNCH(cu_unary((int)t, op, vp_tensor_numel(in[0]), in[0]->data, out[0]->data, alpha, beta, c->stream));
}

static vp_status op_leaky_relu_grad(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                   vp_error *err) {
    vp_dtype t = in[0]->dtype;
    if (!is_float(t))
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "no CUDA kernel for %s on %s", n->op_type, vp_dtype_name(t));
    if (!out[0]) return VP_OK;
    return LAUNCH(cu_leaky_relu_grad((int)t, vp_tensor_numel(out[0]), in[0]->data, in[1]->data, out[0]->data,
                                     vp_train_attr_double(n, "alpha", 0.01), c->stream));
}

static vp_status op_clip(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                         vp_error *err) {
    vp_dtype t = in[0]->dtype;
    if (!is_float(t)) return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "Clip on %s", vp_dtype_name(t));
    double lo = -INFINITY, hi = INFINITY;
    vp_status s = VP_OK;
    if (n->opset < 11) {
        lo = vp_attr_float(n, "min", -INFINITY);
        hi = vp_attr_float(n, "max", INFINITY);
    } else {
        if (opt_in(n, in, 1)) s = vp_cuda_read_float_scalar(c, n, in[1], 1, &lo, err);
        if (!s && opt_in(n, in, 2)) s = vp_cuda_read_float_scalar(c, n, in[2], 2, &hi, err);
    }
    if (s) return s;
    return LAUNCH(cu_unary((int)t, CU_CLIP, vp_tensor_numel(in[0]), in[0]->data, out[0]->data, (float)lo, (float)hi, c->stream));
}

static vp_status op_where(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                          vp_error *err) {
    vp_tensor *y = out[0];
    cu_nd nd;
    memset(&nd, 0, sizeof nd);
    nd.rank = y->rank;
    memcpy(nd.dims, y->dims, sizeof nd.dims);
    broadcast_strides(in[0], y->rank, y->dims, nd.s0);
    broadcast_strides(in[1], y->rank, y->dims, nd.s1);
    broadcast_strides(in[2], y->rank, y->dims, nd.s2);
    return LAUNCH(cu_where((int)vp_dtype_size(y->dtype), &nd, in[0]->data, in[1]->data, in[2]->data, y->data, c->stream));
}

static vp_status op_cast(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                         vp_error *err) {
    static const int ok[] = {1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 16};
    int a = 0, b = 0;
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        a |= ok[i] == (int)in[0]->dtype;
        b |= ok[i] == (int)out[0]->dtype;
    }
    if (!a || !b)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "no CUDA cast from %s to %s", vp_dtype_name(in[0]->dtype),
                            vp_dtype_name(out[0]->dtype));
    if (in[0]->dtype == out[0]->dtype) return vp_cuda_copy_d2d(c, n, out[0]->data, in[0]->data, vp_tensor_nbytes(in[0]), err);
    return LAUNCH(cu_cast(vp_tensor_numel(in[0]), (int)in[0]->dtype, in[0]->data, (int)out[0]->dtype, out[0]->data, c->stream));
}

/* ---- optimizer updates ---- */

static cu_opt hyper_of(const vp_node *n) {
    cu_opt h = {vp_train_attr_double(n, "lr", 0), vp_train_attr_double(n, "weight_decay", 0),
                vp_train_attr_double(n, "momentum", 0), vp_train_attr_double(n, "beta1", 0.9),
                vp_train_attr_double(n, "beta2", 0.999), vp_train_attr_double(n, "eps", 1e-8),
                vp_attr_int(n, "decoupled", 0) != 0};
    return h;
}

/* The optional do_update input k (a device bool), or NULL. */
static const uint8_t *do_update(const vp_node *n, const vp_tensor *const *in, int k) {
    return n->n_inputs > k && in[k] ? (const uint8_t *)in[k]->data : NULL;
}

static vp_status op_sgd(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                        vp_error *err) {
    int momentum = !strcmp(n->op_type, "Momentum");
    vp_status s = vp_cuda_need_f32(n, in[0], 0, err);
    if (!s) s = vp_cuda_need_f32(n, in[1], 1, err);
    if (!s && momentum) s = vp_cuda_need_f32(n, in[2], 2, err);
    if (s) return s;
    cu_opt h = hyper_of(n);
    return LAUNCH(cu_sgd(vp_tensor_numel(in[0]), &h, in[0]->data, in[1]->data, momentum ? fptr(in[2]) : NULL,
                         fptr(out[0]), momentum ? fptr(opt_out(n, out, 1)) : NULL, do_update(n, in, momentum ? 3 : 2),
                         c->stream));
}

static vp_status op_adam(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                         vp_error *err) {
    vp_status s = VP_OK;
    for (int k = 0; k < 5 && !s; k++) s = vp_cuda_need_f32(n, in[k], k, err);
    if (s) return s;
    cu_opt h = hyper_of(n);
    return LAUNCH(cu_adam(vp_tensor_numel(in[0]), &h, in[0]->data, in[1]->data, in[2]->data, in[3]->data, in[4]->data,
                          fptr(out[0]), fptr(opt_out(n, out, 1)), fptr(opt_out(n, out, 2)), fptr(opt_out(n, out, 3)),
                          do_update(n, in, 5), c->stream));
}

const cuda_op vp_cuda_ops_elementwise[] = {
    {"Add", "", op_binary}, {"Sub", "", op_binary}, {"Mul", "", op_binary}, {"Div", "", op_binary},
    {"Pow", "", op_binary}, {"Max", "", op_binary}, {"Min", "", op_binary}, {"Sum", "", op_binary},
    {"Mod", "", op_binary}, {"PRelu", "", op_binary}, {"Equal", "", op_binary}, {"Less", "", op_binary},
    {"LessOrEqual", "", op_binary}, {"Greater", "", op_binary}, {"GreaterOrEqual", "", op_binary},
    {"And", "", op_binary}, {"Or", "", op_binary}, {"Xor", "", op_binary},
    {"Relu", "", op_unary}, {"Neg", "", op_unary}, {"Sqrt", "", op_unary}, {"Erf", "", op_unary},
    {"Exp", "", op_unary}, {"Log", "", op_unary}, {"Abs", "", op_unary}, {"Sigmoid", "", op_unary},
    {"Tanh", "", op_unary}, {"Reciprocal", "", op_unary}, {"LeakyRelu", "", op_unary}, {"Elu", "", op_unary},
    {"Floor", "", op_unary}, {"Ceil", "", op_unary}, {"Sin", "", op_unary}, {"Cos", "", op_unary},
    {"Tan", "", op_unary}, {"Softplus", "", op_unary}, {"Gelu", "", op_unary}, {"Sign", "", op_unary},
    {"Round", "", op_unary}, {"Selu", "", op_unary}, {"HardSigmoid", "", op_unary}, {"Softsign", "", op_unary},
    {"Not", "", op_unary}, {"Swish", "", op_unary}, {"Clip", "", op_clip}, {"Where", "", op_where}, {"Cast", "", op_cast},
    /* activation gradients (com.microsoft) */
    {"ReluGrad", "com.microsoft", op_binary}, {"SigmoidGrad", "com.microsoft", op_binary},
    {"TanhGrad", "com.microsoft", op_binary}, {"GeluGrad", "com.microsoft", op_binary},
    {"FastGeluGrad", "com.microsoft", op_binary},
    /* the activations fusion makes (planner/train/fuse.c) */
    {"Gelu", "com.microsoft", op_unary}, {"FastGelu", "com.microsoft", op_unary},
    {"LeakyReluGrad", "com.microsoft", op_leaky_relu_grad},
    /* optimizer updates (vplan) */
    {"SGD", "vplan", op_sgd}, {"Momentum", "vplan", op_sgd}, {"Adam", "vplan", op_adam},
    {NULL, NULL, NULL},
};
