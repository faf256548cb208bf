/* The CUDA backend: memory, copies, and one node at a time through the op table at the
 * bottom of this file.  Each entry reads the node's attributes and shapes on the host
 * and enqueues kernels (cu_*.cu) or cuBLAS calls on the backend's stream; the
 * semantics are the CPU reference kernels' (runtime/cpu/k_*.c). */
#include "cuda_backend.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "cu_kernels.h"
#include "k_train.h"

enum { CUBLAS_WORKSPACE_BYTES = 32 << 20, SCRATCH_BYTES = 256 };

typedef struct cuda_ctx {
    int device;
    int allow_tf32;
    cudaStream_t stream;
    cublasHandle_t blas;
    void *workspace; /* cuBLAS workspace, then the scratch scalars */
    double *scratch;
    const vp_graph *g;
    char name[256];
} cuda_ctx;

typedef vp_status (*cu_op_fn)(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                              vp_error *err);

/* ---- checking ---- */

static vp_status cuda_check(cudaError_t e, const vp_node *n, const char *what, vp_error *err) {
    if (e == cudaSuccess) return VP_OK;
    if (n) return vp_node_fail(err, VP_ERR_RUNTIME, n, "%s: CUDA error %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
    return vp_fail(err, VP_ERR_RUNTIME, "%s: CUDA error %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

static const char *blas_status_name(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "cuBLAS error";
    }
}

static vp_status blas_check(cublasStatus_t s, const vp_node *n, const char *what, vp_error *err) {
    if (s == CUBLAS_STATUS_SUCCESS) return VP_OK;
    if (n) return vp_node_fail(err, VP_ERR_RUNTIME, n, "%s: %s", what, blas_status_name(s));
    return vp_fail(err, VP_ERR_RUNTIME, "%s: %s", what, blas_status_name(s));
}

#define LAUNCH(call) cuda_check((call), n, #call, err)

static vp_status need_f32(const vp_node *n, const vp_tensor *t, int k, vp_error *err) {
    if (!t) return vp_node_fail(err, VP_ERR_INVALID, n, "input %d is missing", k);
    if (t->dtype != VP_F32)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "the CUDA backend computes this op in float32 only (input %d is %s)",
                            k, vp_dtype_name(t->dtype));
    return VP_OK;
}

static const vp_tensor *opt_in(const vp_node *n, const vp_tensor *const *in, int k) {
    return k < n->n_inputs ? in[k] : NULL;
}

static vp_tensor *opt_out(const vp_node *n, vp_tensor *const *out, int k) {
    return k < n->n_outputs ? out[k] : NULL;
}

static float *fptr(const vp_tensor *t) { return t ? (float *)t->data : NULL; }

static void contiguous_strides(int rank, const int64_t *dims, int64_t *str) {
    int64_t s = 1;
    for (int d = rank - 1; d >= 0; d--) {
        str[d] = s;
        s *= dims[d];
    }
}

/* Element strides of t seen from an output of rank `rank` (numpy broadcasting). */
static void broadcast_strides(const vp_tensor *t, int rank, const int64_t *dims, int64_t *str) {
    int64_t own[VP_MAX_RANK];
    contiguous_strides(t->rank, t->dims, own);
    for (int d = 0; d < rank; d++) {
        int k = d - (rank - t->rank);
        str[d] = k < 0 || (t->dims[k] == 1 && dims[d] != 1) ? 0 : own[k];
    }
}

/* ---- host copies of small integer inputs ---- */

static vp_status read_ints(cuda_ctx *c, const vp_node *n, const vp_tensor *t, int input, int64_t *out, int max,
                           int *count, vp_error *err) {
    int64_t k = vp_tensor_numel(t);
    if (t->dtype != VP_I64 && t->dtype != VP_I32)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "input %d is %s, expected int64 or int32", input, vp_dtype_name(t->dtype));
    if (k > max) return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "input %d has %lld entries, at most %d", input, (long long)k, max);
    *count = (int)k;
    const void *host = NULL;
    if (c->g && n >= c->g->nodes && n < c->g->nodes + c->g->n_nodes && input < n->n_inputs && n->inputs[input] >= 0) {
        const vp_value *v = &c->g->values[n->inputs[input]];
        if (v->data && !(v->flags & (VP_VAL_PARAM | VP_VAL_STATE | VP_VAL_INPUT))) host = v->data;
    }
    int64_t buf[64];
    if (!host) {
        /* computed on the device: wait for it */
        vp_status s = LAUNCH(cudaMemcpyAsync(buf, t->data, (size_t)k * vp_dtype_size(t->dtype), cudaMemcpyDeviceToHost, c->stream));
        if (!s) s = LAUNCH(cudaStreamSynchronize(c->stream));
        if (s) return s;
        host = buf;
    }
    for (int i = 0; i < k; i++) out[i] = t->dtype == VP_I64 ? ((const int64_t *)host)[i] : ((const int32_t *)host)[i];
    return VP_OK;
}

static vp_status read_float_scalar(cuda_ctx *c, const vp_node *n, const vp_tensor *t, int input, double *out,
                                   vp_error *err) {
    const void *host = NULL;
    if (c->g && n >= c->g->nodes && n < c->g->nodes + c->g->n_nodes && n->inputs[input] >= 0) {
        const vp_value *v = &c->g->values[n->inputs[input]];
        if (v->data && !(v->flags & (VP_VAL_PARAM | VP_VAL_STATE | VP_VAL_INPUT))) host = v->data;
    }
    double buf[1];
    if (!host) {
        vp_status s = LAUNCH(cudaMemcpyAsync(buf, t->data, vp_dtype_size(t->dtype), cudaMemcpyDeviceToHost, c->stream));
        if (!s) s = LAUNCH(cudaStreamSynchronize(c->stream));
        if (s) return s;
        host = buf;
    }
    if (t->dtype == VP_F32) *out = *(const float *)host;
    else if (t->dtype == VP_F64) *out = *(const double *)host;
    else return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "input %d is %s, expected float", input, vp_dtype_name(t->dtype));
    return VP_OK;
}

static vp_status copy_d2d(cuda_ctx *c, const vp_node *n, void *dst, const void *src, size_t bytes, vp_error *err) {
    if (dst == src || !bytes) return VP_OK;
    return LAUNCH(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream));
}

/* ---- elementwise ---- */

static int binary_op_of(const char *op) {
    static const struct {
        const char *name;
        int op;
    } t[] = {{"Add", CU_ADD},           {"Sub", CU_SUB},           {"Mul", CU_MUL},
             {"Div", CU_DIV},           {"Pow", CU_POW},           {"Max", CU_MAX},
             {"Min", CU_MIN},           {"Sum", CU_ADD},           {"PRelu", CU_PRELU},
             {"ReluGrad", CU_RELU_GRAD}, {"SigmoidGrad", CU_SIGMOID_GRAD}, {"TanhGrad", CU_TANH_GRAD},
             {"GeluGrad", CU_GELU_GRAD}, {"Equal", CU_EQUAL},       {"Less", CU_LESS},
             {"LessOrEqual", CU_LESS_EQUAL}, {"Greater", CU_GREATER}, {"GreaterOrEqual", CU_GREATER_EQUAL},
             {"And", CU_AND},           {"Or", CU_OR},             {"Xor", CU_XOR},
             {"Mod", CU_MOD}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!strcmp(t[i].name, op)) return t[i].op;
    return -1;
}

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
    int ok = logic ? t == VP_BOOL : (t == VP_F32 || t == VP_F64 || (is_int && (op <= CU_FMOD || op >= CU_EQUAL)));
    if (op >= CU_EQUAL && !logic && t == VP_BOOL) ok = op == CU_EQUAL;
    if (!ok) return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "no CUDA kernel for %s on %s", n->op_type, vp_dtype_name(t));
    for (int k = 1; k < n->n_inputs; k++)
        if (in[k] && in[k]->dtype != t) /* Pow with an integer exponent, say */
            return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "no CUDA kernel for %s on %s and %s", n->op_type,
                                vp_dtype_name(t), vp_dtype_name(in[k]->dtype));
    if (n->n_inputs < 2) return copy_d2d(c, n, out[0]->data, in[0]->data, vp_tensor_nbytes(in[0]), err);
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
                 {"Not", CU_NOT}};

static vp_status op_unary(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                          vp_error *err) {
    int op = -1;
    for (size_t i = 0; i < sizeof unary_ops / sizeof unary_ops[0]; i++)
        if (!strcmp(unary_ops[i].name, n->op_type)) op = unary_ops[i].op;
    vp_dtype t = in[0]->dtype;
    if (op == CU_NOT ? t != VP_BOOL : (t != VP_F32 && t != VP_F64))
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "no CUDA kernel for %s on %s", n->op_type, vp_dtype_name(t));
    float alpha = 0, beta = 0;
    if (op == CU_LEAKY_RELU) alpha = vp_attr_float(n, "alpha", 0.01f);
    if (op == CU_ELU) alpha = vp_attr_float(n, "alpha", 1.0f);
    if (op == CU_SELU) {
        alpha = vp_attr_float(n, "alpha", 1.67326319217681884765625f);
        beta = vp_attr_float(n, "gamma", 1.05070102214813232421875f);
    }
    if (op == CU_HARD_SIGMOID) {
        alpha = vp_attr_float(n, "alpha", 0.2f);
        beta = vp_attr_float(n, "beta", 0.5f);
    }
    if (op == CU_GELU && strcmp(vp_attr_string(n, "approximate", "none"), "none"))
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "the CUDA backend has exact Gelu only");
    return LAUNCH(cu_unary((int)t, op, vp_tensor_numel(in[0]), in[0]->data, out[0]->data, alpha, beta, c->stream));
}

static vp_status op_clip(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                         vp_error *err) {
    vp_dtype t = in[0]->dtype;
    if (t != VP_F32 && t != VP_F64) return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "Clip on %s", vp_dtype_name(t));
    double lo = -INFINITY, hi = INFINITY;
    vp_status s = VP_OK;
    if (n->opset < 11) {
        lo = vp_attr_float(n, "min", -INFINITY);
        hi = vp_attr_float(n, "max", INFINITY);
    } else {
        if (opt_in(n, in, 1)) s = read_float_scalar(c, n, in[1], 1, &lo, err);
        if (!s && opt_in(n, in, 2)) s = read_float_scalar(c, n, in[2], 2, &hi, err);
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
    static const int ok[] = {1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13};
    int a = 0, b = 0;
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        a |= ok[i] == (int)in[0]->dtype;
        b |= ok[i] == (int)out[0]->dtype;
    }
    if (!a || !b)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "no CUDA cast from %s to %s", vp_dtype_name(in[0]->dtype),
                            vp_dtype_name(out[0]->dtype));
    if (in[0]->dtype == out[0]->dtype) return copy_d2d(c, n, out[0]->data, in[0]->data, vp_tensor_nbytes(in[0]), err);
    return LAUNCH(cu_cast(vp_tensor_numel(in[0]), (int)in[0]->dtype, in[0]->data, (int)out[0]->dtype, out[0]->data, c->stream));
}

/* ---- data movement ---- */

static vp_status op_copy(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                         vp_error *err) {
    if (!out[0]) return VP_OK;
    if (vp_tensor_nbytes(in[0]) != vp_tensor_nbytes(out[0]))
        return vp_node_fail(err, VP_ERR_RUNTIME, n, "output size differs from the input's");
    return copy_d2d(c, n, out[0]->data, in[0]->data, vp_tensor_nbytes(in[0]), err);
}

static vp_status op_dropout(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                            vp_error *err) {
    /* inference (no training_mode input, or is_test): identity with an all-true mask */
    const vp_tensor *mode = opt_in(n, in, 2);
    if (mode) {
        if (mode->dtype != VP_BOOL) return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "training_mode is not bool");
        uint8_t flag = 0;
        vp_status s = LAUNCH(cudaMemcpyAsync(&flag, mode->data, 1, cudaMemcpyDeviceToHost, c->stream));
        if (!s) s = LAUNCH(cudaStreamSynchronize(c->stream));
        if (s) return s;
        if (flag) return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "Dropout in training mode has no CUDA kernel");
    }
    vp_status s = copy_d2d(c, n, out[0]->data, in[0]->data, vp_tensor_nbytes(in[0]), err);
    vp_tensor *mask = opt_out(n, out, 1);
    if (!s && mask) s = LAUNCH(cudaMemsetAsync(mask->data, 1, vp_tensor_nbytes(mask), c->stream));
    return s;
}

static vp_status op_transpose(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                              vp_error *err) {
    const vp_tensor *x = in[0];
    vp_tensor *y = out[0];
    const int64_t *perm = NULL;
    int np = vp_attr_ints(n, "perm", &perm);
    int64_t xs[VP_MAX_RANK], ys[VP_MAX_RANK], src[VP_MAX_RANK];
    contiguous_strides(x->rank, x->dims, xs);
    contiguous_strides(y->rank, y->dims, ys);
    for (int d = 0; d < y->rank; d++) {
        int64_t p = np == x->rank ? perm[d] : x->rank - 1 - d;
        if (p < 0) p += x->rank;
        if (p < 0 || p >= x->rank) return vp_node_fail(err, VP_ERR_INVALID, n, "bad perm");
        src[d] = xs[p];
    }
    return LAUNCH(cu_copy_nd((int)vp_dtype_size(x->dtype), y->rank, y->dims, x->data, src, y->data, ys, c->stream));
}

static vp_status op_expand(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                           vp_error *err) {
    vp_tensor *y = out[0];
    int64_t src[VP_MAX_RANK], ys[VP_MAX_RANK];
    broadcast_strides(in[0], y->rank, y->dims, src);
    contiguous_strides(y->rank, y->dims, ys);
    return LAUNCH(cu_copy_nd((int)vp_dtype_size(y->dtype), y->rank, y->dims, in[0]->data, src, y->data, ys, c->stream));
}

static int norm_axis(int64_t axis, int rank) { return (int)(axis < 0 ? axis + rank : axis); }

static vp_status op_concat(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                           vp_error *err) {
    vp_tensor *y = out[0];
    int axis = norm_axis(vp_attr_int(n, "axis", 0), y->rank);
    if (axis < 0 || axis >= y->rank) return vp_node_fail(err, VP_ERR_INVALID, n, "axis out of range");
    int64_t ys[VP_MAX_RANK], es = (int64_t)vp_dtype_size(y->dtype), at = 0;
    contiguous_strides(y->rank, y->dims, ys);
    vp_status s = VP_OK;
    for (int k = 0; k < n->n_inputs && !s; k++) {
        const vp_tensor *x = in[k];
        if (!x) continue;
        int64_t xs[VP_MAX_RANK];
        contiguous_strides(x->rank, x->dims, xs);
        s = LAUNCH(cu_copy_nd((int)es, x->rank, x->dims, x->data, xs, (char *)y->data + at * ys[axis] * es, ys, c->stream));
        at += x->dims[axis];
    }
    return s;
}

static vp_status op_split(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                          vp_error *err) {
    const vp_tensor *x = in[0];
    int axis = norm_axis(vp_attr_int(n, "axis", 0), x->rank);
    if (axis < 0 || axis >= x->rank) return vp_node_fail(err, VP_ERR_INVALID, n, "axis out of range");
    int64_t xs[VP_MAX_RANK], es = (int64_t)vp_dtype_size(x->dtype), at = 0;
    contiguous_strides(x->rank, x->dims, xs);
    vp_status s = VP_OK;
    for (int k = 0; k + 1 < n->n_outputs; k++)
        if (!out[k]) return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "an omitted output before the last one");
    /* each output's extent along the axis is its shape's, which the planner decided */
    for (int k = 0; k < n->n_outputs && !s; k++) {
        vp_tensor *y = out[k];
        if (!y) continue;
        int64_t ys[VP_MAX_RANK];
        contiguous_strides(y->rank, y->dims, ys);
        s = LAUNCH(cu_copy_nd((int)es, y->rank, y->dims, (const char *)x->data + at * xs[axis] * es, xs, y->data, ys, c->stream));
        at += y->dims[axis];
    }
    return s;
}

static vp_status op_slice(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                          vp_error *err) {
    const vp_tensor *x = in[0];
    vp_tensor *y = out[0];
    int64_t starts[VP_MAX_RANK], ends[VP_MAX_RANK], axes[VP_MAX_RANK], steps[VP_MAX_RANK];
    int ns = 0, ne = 0, na = -1, nst = -1;
    vp_status s = VP_OK;
    if (n->opset < 10 && n->n_inputs == 1) {
        const int64_t *p;
        ns = vp_attr_ints(n, "starts", &p);
        for (int i = 0; i < ns && i < VP_MAX_RANK; i++) starts[i] = p[i];
        ne = vp_attr_ints(n, "ends", &p);
        for (int i = 0; i < ne && i < VP_MAX_RANK; i++) ends[i] = p[i];
        na = vp_attr_ints(n, "axes", &p);
        for (int i = 0; i < na && i < VP_MAX_RANK; i++) axes[i] = p[i];
        if (ns > VP_MAX_RANK || na > VP_MAX_RANK) return vp_node_fail(err, VP_ERR_INVALID, n, "too many axes");
    } else {
        s = read_ints(c, n, in[1], 1, starts, VP_MAX_RANK, &ns, err);
        if (!s) s = read_ints(c, n, in[2], 2, ends, VP_MAX_RANK, &ne, err);
        if (!s && opt_in(n, in, 3)) s = read_ints(c, n, in[3], 3, axes, VP_MAX_RANK, &na, err);
        if (!s && opt_in(n, in, 4)) s = read_ints(c, n, in[4], 4, steps, VP_MAX_RANK, &nst, err);
        if (s) return s;
    }
    int64_t xs[VP_MAX_RANK], ys[VP_MAX_RANK], src[VP_MAX_RANK], offset = 0;
    contiguous_strides(x->rank, x->dims, xs);
    contiguous_strides(y->rank, y->dims, ys);
    for (int d = 0; d < x->rank; d++) src[d] = xs[d];
    for (int i = 0; i < ns; i++) {
        int a = norm_axis(na < 0 ? i : axes[i], x->rank);
        if (a < 0 || a >= x->rank) return vp_node_fail(err, VP_ERR_INVALID, n, "axis out of range");
        int64_t dim = x->dims[a], st = nst < 0 ? 1 : steps[i], b = starts[i];
        if (st == 0) return vp_node_fail(err, VP_ERR_INVALID, n, "step 0");
        if (b < 0) b += dim;
        if (st > 0) b = b < 0 ? 0 : b > dim ? dim : b;
        else b = b < 0 ? 0 : b > dim - 1 ? dim - 1 : b;
        offset += b * xs[a];
        src[a] = xs[a] * st;
    }
    int64_t es = (int64_t)vp_dtype_size(x->dtype);
    return LAUNCH(cu_copy_nd((int)es, y->rank, y->dims, (const char *)x->data + offset * es, src, y->data, ys, c->stream));
}

static vp_status op_gather(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                           vp_error *err) {
    const vp_tensor *x = in[0], *idx = in[1];
    int axis = norm_axis(vp_attr_int(n, "axis", 0), x->rank);
    if (axis < 0 || axis >= x->rank) return vp_node_fail(err, VP_ERR_INVALID, n, "axis out of range");
    if (idx->dtype != VP_I64 && idx->dtype != VP_I32) return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "indices are not int32/int64");
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; d++) outer *= x->dims[d];
    for (int d = axis + 1; d < x->rank; d++) inner *= x->dims[d];
    return LAUNCH(cu_gather((int)vp_dtype_size(x->dtype), outer, x->dims[axis], vp_tensor_numel(idx), inner, x->data,
                            idx->data, idx->dtype == VP_I64, out[0]->data, c->stream));
}

static vp_status op_gather_grad(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                vp_error *err) {
    const vp_tensor *idx = in[1], *dy = in[2];
    vp_tensor *dx = out[0];
    if (!dx) return VP_OK;
    vp_status s = need_f32(n, dy, 2, err);
    if (s) return s;
    if (idx->dtype != VP_I64 && idx->dtype != VP_I32) return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "indices are not int32/int64");
    int axis = norm_axis(vp_attr_int(n, "axis", 0), dx->rank);
    if (axis < 0 || axis >= dx->rank) return vp_node_fail(err, VP_ERR_INVALID, n, "axis out of range");
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; d++) outer *= dx->dims[d];
    for (int d = axis + 1; d < dx->rank; d++) inner *= dx->dims[d];
    return LAUNCH(cu_gather_grad(outer, dx->dims[axis], vp_tensor_numel(idx), inner, idx->data, idx->dtype == VP_I64,
                                 dy->data, dx->data, c->stream));
}

static vp_status op_shape(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                          vp_error *err) {
    int rank = in[0]->rank;
    int64_t start = vp_attr_int(n, "start", 0), end = vp_attr_int(n, "end", rank), v[VP_MAX_RANK];
    if (start < 0) start += rank;
    if (end < 0) end += rank;
    start = start < 0 ? 0 : start > rank ? rank : start;
    end = end < start ? start : end > rank ? rank : end;
    int k = 0;
    if (!strcmp(n->op_type, "Size")) v[k++] = vp_tensor_numel(in[0]);
    else
        for (int64_t a = start; a < end; a++) v[k++] = in[0]->dims[a];
    if ((size_t)k * sizeof(int64_t) != vp_tensor_nbytes(out[0])) return vp_node_fail(err, VP_ERR_RUNTIME, n, "output size");
    /* pageable host memory: the copy is staged before cudaMemcpyAsync returns */
    return LAUNCH(cudaMemcpyAsync(out[0]->data, v, (size_t)k * sizeof(int64_t), cudaMemcpyHostToDevice, c->stream));
}

/* ---- linear algebra ---- */

/* C[m, n] (row-major) = alpha op(A) op(B) + beta C: cuBLAS sees the transposes. */
static vp_status gemm_rm(cuda_ctx *c, const vp_node *n, int ta, int tb, int64_t m, int64_t nn, int64_t k, float alpha,
                         const float *a, int64_t lda, int64_t sa, const float *b, int64_t ldb, int64_t sb, float beta,
                         float *y, int64_t sy, int64_t batch, vp_error *err) {
    if (m > 2147483647 || nn > 2147483647 || k > 2147483647 || lda > 2147483647 || ldb > 2147483647)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "a matrix dimension over 2^31");
    cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (m == 0 || nn == 0 || batch == 0) return VP_OK;
    cublasStatus_t st;
    if (batch == 1)
        st = cublasSgemm(c->blas, opb, opa, (int)nn, (int)m, (int)k, &alpha, b, (int)ldb, a, (int)lda, &beta, y, (int)nn);
    else
        st = cublasSgemmStridedBatched(c->blas, opb, opa, (int)nn, (int)m, (int)k, &alpha, b, (int)ldb, sb, a, (int)lda,
                                       sa, &beta, y, (int)nn, sy, (int)batch);
    return blas_check(st, n, "cublasSgemm", err);
}

static vp_status op_gemm(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                         vp_error *err) {
    const vp_tensor *a = in[0], *b = in[1], *cc = opt_in(n, in, 2);
    vp_tensor *y = out[0];
    vp_status s = need_f32(n, a, 0, err);
    if (!s) s = need_f32(n, b, 1, err);
    if (!s && cc) s = need_f32(n, cc, 2, err);
    if (s) return s;
    int ta = vp_attr_int(n, "transA", 0) != 0, tb = vp_attr_int(n, "transB", 0) != 0;
    float alpha = vp_attr_float(n, "alpha", 1.0f), beta = vp_attr_float(n, "beta", 1.0f);
    int64_t m = y->dims[0], nn = y->dims[1], k = ta ? a->dims[0] : a->dims[1];
    if (cc && beta != 0) {
        int64_t src[VP_MAX_RANK], ys[VP_MAX_RANK];
        broadcast_strides(cc, 2, y->dims, src);
        contiguous_strides(2, y->dims, ys);
        s = LAUNCH(cu_copy_nd(4, 2, y->dims, cc->data, src, y->data, ys, c->stream));
        if (s) return s;
    } else {
        beta = 0;
    }
    return gemm_rm(c, n, ta, tb, m, nn, k, alpha, a->data, ta ? m : k, 0, b->data, tb ? k : nn, 0, beta, y->data, 0, 1, err);
}

/* Offset, in matrices, of batch index i of an operand with batch dims bd (rank br)
 * broadcast to the output batch dims od (rank r). */
static int64_t batch_offset(int r, const int64_t *od, int br, const int64_t *bd, int64_t i) {
    int64_t off = 0, stride = 1;
    for (int d = r - 1; d >= 0; d--) {
        int64_t k = i % od[d];
        i /= od[d];
        int j = d - (r - br);
        if (j >= 0) {
            if (bd[j] != 1) off += k * stride;
            stride *= bd[j];
        }
    }
    return off;
}

static vp_status op_matmul(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                           vp_error *err) {
    const vp_tensor *a = in[0], *b = in[1];
    vp_tensor *y = out[0];
    vp_status s = need_f32(n, a, 0, err);
    if (!s) s = need_f32(n, b, 1, err);
    if (s) return s;
    int64_t m = a->rank == 1 ? 1 : a->dims[a->rank - 2], k = a->dims[a->rank - 1];
    int64_t nn = b->rank == 1 ? 1 : b->dims[b->rank - 1];
    int abr = a->rank > 2 ? a->rank - 2 : 0, bbr = b->rank > 2 ? b->rank - 2 : 0;
    int r = abr > bbr ? abr : bbr;
    int64_t od[VP_MAX_RANK], batch = 1;
    for (int d = 0; d < r; d++) {
        int ja = d - (r - abr), jb = d - (r - bbr);
        int64_t da = ja >= 0 ? a->dims[ja] : 1, db = jb >= 0 ? b->dims[jb] : 1;
        od[d] = da == 1 ? db : da;
        batch *= od[d];
    }
    int64_t na = 1, nb = 1;
    for (int d = 0; d < abr; d++) na *= a->dims[d];
    for (int d = 0; d < bbr; d++) nb *= b->dims[d];
    /* uniform strides: an operand is either fully batched like the output or shared */
    int ua = na == 1 || na == batch, ub = nb == 1 || nb == batch;
    int same_a = 1, same_b = 1;
    for (int d = 0; d < abr && na == batch; d++) same_a &= a->dims[d] == od[d + (r - abr)];
    for (int d = 0; d < bbr && nb == batch; d++) same_b &= b->dims[d] == od[d + (r - bbr)];
    const float *pa = a->data, *pb = b->data;
    float *py = y->data;
    if (ua && ub && same_a && same_b) {
        /* a shared A with one row per batch folds into one tall product */
        if (na == 1 && nb == 1)
            return gemm_rm(c, n, 0, 0, m, nn, k, 1.0f, pa, k, 0, pb, nn, 0, 0.0f, py, 0, 1, err);
        if (nb == 1 && na == batch)
            return gemm_rm(c, n, 0, 0, m * batch, nn, k, 1.0f, pa, k, 0, pb, nn, 0, 0.0f, py, 0, 1, err);
        return gemm_rm(c, n, 0, 0, m, nn, k, 1.0f, pa, k, na == 1 ? 0 : m * k, pb, nn, nb == 1 ? 0 : k * nn, 0.0f, py,
                       m * nn, batch, err);
    }
    for (int64_t i = 0; i < batch && !s; i++) {
        int64_t oa = batch_offset(r, od, abr, a->dims, i), ob = batch_offset(r, od, bbr, b->dims, i);
        s = gemm_rm(c, n, 0, 0, m, nn, k, 1.0f, pa + oa * m * k, k, 0, pb + ob * k * nn, nn, 0, 0.0f, py + i * m * nn, 0,
                    1, err);
    }
    return s;
}

/* Convolution geometry from the attributes and the shapes (1-D or 2-D). */
static vp_status conv_geom(const vp_node *n, const vp_tensor *x, const vp_tensor *w, const vp_tensor *y,
                           cu_conv_geom *g, vp_error *err) {
    int sp = x->rank - 2;
    if (sp < 1 || sp > 2) return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "the CUDA backend has 1-D and 2-D convolutions only");
    const int64_t *strides = NULL, *pads = NULL, *dil = NULL;
    int ns = vp_attr_ints(n, "strides", &strides), np = vp_attr_ints(n, "pads", &pads), nd = vp_attr_ints(n, "dilations", &dil);
    int64_t st[2] = {1, 1}, pb[2] = {0, 0}, di[2] = {1, 1}, in_sz[2] = {1, 1}, out_sz[2] = {1, 1}, ks[2] = {1, 1};
    for (int d = 0; d < sp; d++) {
        int e = d + 2 - sp; /* 1-D: the width */
        st[e] = ns == sp ? strides[d] : 1;
        di[e] = nd == sp ? dil[d] : 1;
        pb[e] = np == 2 * sp ? pads[d] : 0;
        in_sz[e] = x->dims[2 + d];
        out_sz[e] = y->dims[2 + d];
        ks[e] = w->dims[2 + d];
    }
    const char *ap = vp_attr_string(n, "auto_pad", "NOTSET");
    if (!strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER"))
        for (int e = 0; e < 2; e++) {
            int64_t total = (out_sz[e] - 1) * st[e] + (ks[e] - 1) * di[e] + 1 - in_sz[e];
            if (total < 0) total = 0;
            pb[e] = !strcmp(ap, "SAME_UPPER") ? total / 2 : (total + 1) / 2;
        }
    else if (!strcmp(ap, "VALID"))
        pb[0] = pb[1] = 0;
    *g = (cu_conv_geom){.n = x->dims[0], .c = x->dims[1], .h = in_sz[0], .w = in_sz[1], .m = w->dims[0],
                        .oh = out_sz[0], .ow = out_sz[1], .kh = ks[0], .kw = ks[1], .sh = st[0], .sw = st[1],
                        .ph = pb[0], .pw = pb[1], .dh = di[0], .dw = di[1], .group = vp_attr_int(n, "group", 1)};
    if (g->group < 1 || g->c % g->group || g->m % g->group)
        return vp_node_fail(err, VP_ERR_INVALID, n, "group %lld does not divide the channels", (long long)g->group);
    return VP_OK;
}

static vp_status op_conv(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                         vp_error *err) {
    const vp_tensor *x = in[0], *w = in[1], *b = opt_in(n, in, 2);
    vp_status s = need_f32(n, x, 0, err);
    if (!s) s = need_f32(n, w, 1, err);
    cu_conv_geom g;
    if (!s) s = conv_geom(n, x, w, out[0], &g, err);
    if (s) return s;
    return LAUNCH(cu_conv2d(&g, x->data, w->data, fptr(b), out[0]->data, c->stream));
}

static vp_status op_conv_grad(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                              vp_error *err) {
    const vp_tensor *dy = in[0], *x = in[1], *w = in[2];
    vp_status s = need_f32(n, dy, 0, err);
    if (!s) s = need_f32(n, x, 1, err);
    if (!s) s = need_f32(n, w, 2, err);
    cu_conv_geom g;
    if (!s) s = conv_geom(n, x, w, dy, &g, err);
    if (s) return s;
    return LAUNCH(cu_conv2d_grad(&g, dy->data, x->data, w->data, fptr(opt_out(n, out, 0)), fptr(opt_out(n, out, 1)),
                                 fptr(opt_out(n, out, 2)), c->stream));
}

static vp_status op_pool(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                         vp_error *err) {
    const vp_tensor *x = in[0];
    vp_tensor *y = out[0];
    vp_status s = need_f32(n, x, 0, err);
    if (s) return s;
    if (opt_out(n, out, 1)) return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "MaxPool Indices have no CUDA kernel");
    int sp = x->rank - 2;
    if (sp < 1 || sp > 2) return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "1-D and 2-D pooling only");
    const int64_t *ks = NULL, *strides = NULL, *pads = NULL, *dil = NULL;
    int nk = vp_attr_ints(n, "kernel_shape", &ks), ns = vp_attr_ints(n, "strides", &strides);
    int np = vp_attr_ints(n, "pads", &pads), nd = vp_attr_ints(n, "dilations", &dil);
    if (nk != sp) return vp_node_fail(err, VP_ERR_INVALID, n, "kernel_shape");
    int64_t k2[2] = {1, 1}, s2[2] = {1, 1}, p2[2] = {0, 0}, d2[2] = {1, 1}, i2[2] = {1, 1}, o2[2] = {1, 1};
    for (int d = 0; d < sp; d++) {
        int e = d + 2 - sp;
        k2[e] = ks[d];
        s2[e] = ns == sp ? strides[d] : 1;
        p2[e] = np == 2 * sp ? pads[d] : 0;
        d2[e] = nd == sp ? dil[d] : 1;
        i2[e] = x->dims[2 + d];
        o2[e] = y->dims[2 + d];
    }
    const char *ap = vp_attr_string(n, "auto_pad", "NOTSET");
    if (!strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER"))
        for (int e = 0; e < 2; e++) {
            int64_t total = (o2[e] - 1) * s2[e] + (k2[e] - 1) * d2[e] + 1 - i2[e];
            if (total < 0) total = 0;
            p2[e] = !strcmp(ap, "SAME_UPPER") ? total / 2 : (total + 1) / 2;
        }
    else if (!strcmp(ap, "VALID"))
        p2[0] = p2[1] = 0;
    cu_pool_geom g = {x->dims[0] * x->dims[1], i2[0], i2[1], o2[0], o2[1], k2[0], k2[1], s2[0], s2[1], p2[0], p2[1],
                      d2[0], d2[1], (int)vp_attr_int(n, "count_include_pad", 0)};
    return LAUNCH(cu_pool2d(!strcmp(n->op_type, "AveragePool"), &g, x->data, y->data, c->stream));
}

static vp_status op_global_pool(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                vp_error *err) {
    const vp_tensor *x = in[0];
    vp_status s = need_f32(n, x, 0, err);
    if (s) return s;
    int64_t planes = x->rank >= 2 ? x->dims[0] * x->dims[1] : 1, len = planes ? vp_tensor_numel(x) / planes : 0;
    return LAUNCH(cu_global_pool(!strcmp(n->op_type, "GlobalAveragePool"), planes, len, x->data, out[0]->data, c->stream));
}

/* ---- normalisation ---- */

static vp_status op_layernorm(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                              vp_error *err) {
    const vp_tensor *x = in[0], *scale = in[1], *bias = opt_in(n, in, 2);
    vp_status s = need_f32(n, x, 0, err);
    if (!s) s = need_f32(n, scale, 1, err);
    if (!s && bias) s = need_f32(n, bias, 2, err);
    if (s) return s;
    int axis = norm_axis(vp_attr_int(n, "axis", -1), x->rank);
    int64_t len = 1;
    for (int d = axis; d < x->rank; d++) len *= x->dims[d];
    if (vp_tensor_numel(scale) != len || (bias && vp_tensor_numel(bias) != len))
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "scale and bias must cover the normalised shape");
    int64_t rows = len ? vp_tensor_numel(x) / len : 0;
    return LAUNCH(cu_layernorm(rows, len, vp_attr_float(n, "epsilon", 1e-5f), x->data, scale->data, fptr(bias),
                               fptr(out[0]), fptr(opt_out(n, out, 1)), fptr(opt_out(n, out, 2)), c->stream));
}

static vp_status op_layernorm_grad(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                   vp_error *err) {
    const vp_tensor *dy = in[0], *x = in[1], *scale = in[2], *mean = in[3], *inv = in[4];
    vp_status s = need_f32(n, dy, 0, err);
    for (int k = 1; k < 5 && !s; k++) s = need_f32(n, in[k], k, err);
    if (s) return s;
    int64_t len = vp_tensor_numel(scale), rows = len ? vp_tensor_numel(x) / len : 0;
    return LAUNCH(cu_layernorm_grad(rows, len, dy->data, x->data, scale->data, mean->data, inv->data,
                                    fptr(opt_out(n, out, 0)), fptr(opt_out(n, out, 1)), fptr(opt_out(n, out, 2)), c->stream));
}

static vp_status op_batchnorm(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                              vp_error *err) {
    const vp_tensor *x = in[0];
    vp_status s = VP_OK;
    for (int k = 0; k < 5 && !s; k++) s = need_f32(n, in[k], k, err);
    if (s) return s;
    int internal = !strcmp(n->op_type, "BatchNormInternal");
    int training = internal ? vp_attr_int(n, "training_mode", 1) != 0 : vp_attr_int(n, "training_mode", 0) != 0;
    if (!internal && (training || n->n_outputs > 1))
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "BatchNormalization in training mode: use BatchNormInternal");
    if (vp_attr_int(n, "spatial", 1) == 0) return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "spatial=0");
    int64_t plane = 1;
    for (int d = 2; d < x->rank; d++) plane *= x->dims[d];
    if (training && x->dims[0] * plane < 2)
        return vp_node_fail(err, VP_ERR_RUNTIME, n, "training needs more than one value per channel");
    double eps = vp_train_attr_double(n, "epsilon", 1e-5), momentum = vp_train_attr_double(n, "momentum", 0.9);
    return LAUNCH(cu_batchnorm(x->dims[0], x->rank > 1 ? x->dims[1] : 1, plane, training, eps, momentum, x->data,
                               fptr(in[1]), fptr(in[2]), fptr(in[3]), fptr(in[4]), fptr(out[0]),
                               fptr(opt_out(n, out, 1)), fptr(opt_out(n, out, 2)), fptr(opt_out(n, out, 3)),
                               fptr(opt_out(n, out, 4)), c->stream));
}

static vp_status op_batchnorm_grad(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                   vp_error *err) {
    const vp_tensor *x = in[1];
    vp_status s = VP_OK;
    for (int k = 0; k < 5 && !s; k++) s = need_f32(n, in[k], k, err);
    if (s) return s;
    int64_t plane = 1;
    for (int d = 2; d < x->rank; d++) plane *= x->dims[d];
    return LAUNCH(cu_batchnorm_grad(x->dims[0], x->rank > 1 ? x->dims[1] : 1, plane, fptr(in[0]), fptr(x), fptr(in[2]),
                                    fptr(in[3]), fptr(in[4]), fptr(opt_out(n, out, 0)), fptr(opt_out(n, out, 1)),
                                    fptr(opt_out(n, out, 2)), c->stream));
}

/* ---- reductions, softmax, losses ---- */

static int reduce_op_of(const char *op) {
    static const struct {
        const char *name;
        int op;
    } t[] = {{"ReduceSum", CU_RSUM},       {"ReduceMean", CU_RMEAN},     {"ReduceMax", CU_RMAX},
             {"ReduceMin", CU_RMIN},       {"ReduceProd", CU_RPROD},     {"ReduceSumSquare", CU_RSUMSQ},
             {"ReduceL1", CU_RL1},         {"ReduceL2", CU_RL2},         {"ReduceLogSumExp", CU_RLOGSUMEXP},
             {"ReduceLogSum", CU_RLOGSUM}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!strcmp(t[i].name, op)) return t[i].op;
    return -1;
}

static vp_status op_reduce(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                           vp_error *err) {
    const vp_tensor *x = in[0];
    if (x->dtype != VP_F32 && x->dtype != VP_F64)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "no CUDA kernel for %s on %s", n->op_type, vp_dtype_name(x->dtype));
    int64_t axes[VP_MAX_RANK];
    int na = 0;
    vp_status s = VP_OK;
    if (opt_in(n, in, 1)) {
        s = read_ints(c, n, in[1], 1, axes, VP_MAX_RANK, &na, err);
    } else {
        const int64_t *p;
        int k = vp_attr_ints(n, "axes", &p);
        if (k > VP_MAX_RANK) return vp_node_fail(err, VP_ERR_INVALID, n, "too many axes");
        for (int i = 0; i < k; i++) axes[i] = p[i];
        na = k < 0 ? 0 : k;
    }
    if (s) return s;
    unsigned mask = 0;
    if (!na) {
        if (vp_attr_int(n, "noop_with_empty_axes", 0)) return copy_d2d(c, n, out[0]->data, x->data, vp_tensor_nbytes(x), err);
        mask = (1u << x->rank) - 1;
    }
    for (int i = 0; i < na; i++) {
        int a = norm_axis(axes[i], x->rank);
        if (a < 0 || a >= x->rank) return vp_node_fail(err, VP_ERR_INVALID, n, "axis %lld out of range", (long long)axes[i]);
        mask |= 1u << a;
    }
    cu_reduce_geom g;
    memset(&g, 0, sizeof g);
    int64_t xs[VP_MAX_RANK];
    contiguous_strides(x->rank, x->dims, xs);
    g.n_out = g.n_red = 1;
    for (int d = 0; d < x->rank; d++) {
        if (mask >> d & 1) {
            g.rdims[g.nr] = x->dims[d];
            g.rs[g.nr++] = xs[d];
            g.n_red *= x->dims[d];
        } else {
            g.kdims[g.nk] = x->dims[d];
            g.ks[g.nk++] = xs[d];
            g.n_out *= x->dims[d];
        }
    }
    return LAUNCH(cu_reduce((int)x->dtype, reduce_op_of(n->op_type), &g, x->data, out[0]->data, c->stream));
}

/* Rows of a softmax: opset 13 forms over one axis, older over the flattened tail. */
static vp_status softmax_rows(const vp_node *n, const vp_tensor *t, int legacy, int64_t *outer, int64_t *len,
                              int64_t *inner, vp_error *err) {
    int64_t axis = vp_attr_int(n, "axis", legacy ? 1 : -1);
    if (axis < -t->rank || axis >= t->rank) return vp_node_fail(err, VP_ERR_INVALID, n, "axis out of range");
    int a = norm_axis(axis, t->rank);
    *outer = *len = *inner = 1;
    for (int d = 0; d < t->rank; d++) {
        if (d < a) *outer *= t->dims[d];
        else if (d == a || legacy) *len *= t->dims[d];
        else *inner *= t->dims[d];
    }
    return VP_OK;
}

static vp_status op_softmax(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                            vp_error *err) {
    int64_t outer = 0, len = 0, inner = 0;
    vp_status s = need_f32(n, in[0], 0, err);
    if (!s) s = softmax_rows(n, in[0], n->opset < 13, &outer, &len, &inner, err);
    if (s) return s;
    return LAUNCH(cu_softmax(!strcmp(n->op_type, "LogSoftmax"), outer, len, inner, in[0]->data, out[0]->data, c->stream));
}

static vp_status op_softmax_grad(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                 vp_error *err) {
    if (!out[0]) return VP_OK;
    size_t len_name = strlen(n->op_type);
    int is13 = len_name > 3 && !strcmp(n->op_type + len_name - 3, "_13");
    int64_t outer = 0, len = 0, inner = 0;
    vp_status s = need_f32(n, in[0], 0, err);
    if (!s) s = need_f32(n, in[1], 1, err);
    if (!s) s = softmax_rows(n, in[1], !is13, &outer, &len, &inner, err);
    if (s) return s;
    int log_kind = !strncmp(n->op_type, "LogSoftmax", 10);
    return LAUNCH(cu_softmax_grad(log_kind, outer, len, inner, in[0]->data, in[1]->data, out[0]->data, c->stream));
}

static int reduction_of(const vp_node *n) {
    const char *r = vp_attr_string(n, "reduction", "mean");
    return !strcmp(r, "none") ? 0 : !strcmp(r, "sum") ? 1 : 2;
}

static vp_status op_sce_loss(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                             vp_error *err) {
    const vp_tensor *x = in[0], *labels = in[1], *w = opt_in(n, in, 2);
    vp_status s = need_f32(n, x, 0, err);
    if (!s && w) s = need_f32(n, w, 2, err);
    if (s) return s;
    if (labels->dtype != VP_I64 && labels->dtype != VP_I32) return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "labels are not int32/int64");
    int64_t spatial = 1;
    for (int d = 2; d < x->rank; d++) spatial *= x->dims[d];
    return LAUNCH(cu_sce_loss(x->dims[0], x->dims[1], spatial, x->data, labels->data, labels->dtype == VP_I64, fptr(w),
                              vp_node_attr(n, "ignore_index") != NULL, vp_attr_int(n, "ignore_index", 0), reduction_of(n),
                              fptr(out[0]), fptr(opt_out(n, out, 1)), c->scratch, c->stream));
}

static vp_status op_sce_loss_grad(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                  vp_error *err) {
    if (!out[0]) return VP_OK;
    const vp_tensor *dy = in[0], *lp = in[1], *labels = in[2], *w = opt_in(n, in, 3), *bias = opt_in(n, in, 4);
    vp_status s = need_f32(n, dy, 0, err);
    if (!s) s = need_f32(n, lp, 1, err);
    if (!s && w) s = need_f32(n, w, 3, err);
    if (!s && bias) s = need_f32(n, bias, 4, err);
    if (s) return s;
    if (labels->dtype != VP_I64 && labels->dtype != VP_I32) return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "labels are not int32/int64");
    int64_t spatial = 1;
    for (int d = 2; d < lp->rank; d++) spatial *= lp->dims[d];
    return LAUNCH(cu_sce_loss_grad(lp->dims[0], lp->dims[1], spatial, dy->data, lp->data, labels->data,
                                   labels->dtype == VP_I64, fptr(w), vp_attr_int(n, "ignore_index", -1), reduction_of(n),
                                   fptr(bias), out[0]->data, c->scratch, c->stream));
}

/* ---- optimizer updates ---- */

static cu_opt hyper_of(const vp_node *n) {
    cu_opt h = {vp_train_attr_double(n, "lr", 0), vp_train_attr_double(n, "weight_decay", 0),
                vp_train_attr_double(n, "momentum", 0), vp_train_attr_double(n, "beta1", 0.9),
                vp_train_attr_double(n, "beta2", 0.999), vp_train_attr_double(n, "eps", 1e-8),
                vp_attr_int(n, "decoupled", 0) != 0};
    return h;
}

static vp_status op_sgd(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                        vp_error *err) {
    int momentum = !strcmp(n->op_type, "Momentum");
    vp_status s = need_f32(n, in[0], 0, err);
    if (!s) s = need_f32(n, in[1], 1, err);
    if (!s && momentum) s = need_f32(n, in[2], 2, err);
    if (s) return s;
    cu_opt h = hyper_of(n);
    return LAUNCH(cu_sgd(vp_tensor_numel(in[0]), &h, in[0]->data, in[1]->data, momentum ? fptr(in[2]) : NULL,
                         fptr(out[0]), momentum ? fptr(opt_out(n, out, 1)) : NULL, c->stream));
}

static vp_status op_adam(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                         vp_error *err) {
    vp_status s = VP_OK;
    for (int k = 0; k < 5 && !s; k++) s = need_f32(n, in[k], k, err);
    if (s) return s;
    cu_opt h = hyper_of(n);
    return LAUNCH(cu_adam(vp_tensor_numel(in[0]), &h, in[0]->data, in[1]->data, in[2]->data, in[3]->data, in[4]->data,
                          fptr(out[0]), fptr(opt_out(n, out, 1)), fptr(opt_out(n, out, 2)), fptr(opt_out(n, out, 3)),
                          c->stream));
}

/* ---- the table ---- */

typedef struct cu_op_entry {
    const char *name;
    const char *domain; /* "" ai.onnx, "com.microsoft", "vplan" */
    cu_op_fn fn;
} cu_op_entry;

static const cu_op_entry cu_ops[] = {
    /* elementwise */
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
    {"Not", "", op_unary}, {"Clip", "", op_clip}, {"Where", "", op_where}, {"Cast", "", op_cast},
    {"Identity", "", op_copy}, {"Dropout", "", op_dropout},
    /* tensor movement */
    {"Reshape", "", op_copy}, {"Flatten", "", op_copy}, {"Squeeze", "", op_copy}, {"Unsqueeze", "", op_copy},
    {"Transpose", "", op_transpose}, {"Expand", "", op_expand}, {"Concat", "", op_concat}, {"Split", "", op_split},
    {"Slice", "", op_slice}, {"Gather", "", op_gather}, {"Shape", "", op_shape}, {"Size", "", op_shape},
    /* linalg */
    {"MatMul", "", op_matmul}, {"Gemm", "", op_gemm}, {"Conv", "", op_conv}, {"MaxPool", "", op_pool},
    {"AveragePool", "", op_pool}, {"GlobalAveragePool", "", op_global_pool}, {"GlobalMaxPool", "", op_global_pool},
    {"BatchNormalization", "", op_batchnorm}, {"LayerNormalization", "", op_layernorm},
    /* reduce, softmax, losses */
    {"ReduceSum", "", op_reduce}, {"ReduceMean", "", op_reduce}, {"ReduceMax", "", op_reduce},
    {"ReduceMin", "", op_reduce}, {"ReduceProd", "", op_reduce}, {"ReduceSumSquare", "", op_reduce},
    {"ReduceL1", "", op_reduce}, {"ReduceL2", "", op_reduce}, {"ReduceLogSumExp", "", op_reduce},
    {"ReduceLogSum", "", op_reduce}, {"Softmax", "", op_softmax}, {"LogSoftmax", "", op_softmax},
    {"SoftmaxCrossEntropyLoss", "", op_sce_loss},
    /* train: gradient ops (com.microsoft) and optimizer updates (vplan) */
    {"ReluGrad", "com.microsoft", op_binary}, {"SigmoidGrad", "com.microsoft", op_binary},
    {"TanhGrad", "com.microsoft", op_binary}, {"GeluGrad", "com.microsoft", op_binary},
    {"SoftmaxGrad", "com.microsoft", op_softmax_grad}, {"SoftmaxGrad_13", "com.microsoft", op_softmax_grad},
    {"LogSoftmaxGrad", "com.microsoft", op_softmax_grad}, {"LogSoftmaxGrad_13", "com.microsoft", op_softmax_grad},
    {"LayerNormalizationGrad", "com.microsoft", op_layernorm_grad},
    {"BatchNormInternal", "com.microsoft", op_batchnorm},
    {"BatchNormalizationGrad", "com.microsoft", op_batchnorm_grad},
    {"ConvGrad", "com.microsoft", op_conv_grad}, {"GatherGrad", "com.microsoft", op_gather_grad},
    {"SoftmaxCrossEntropyLossGrad", "com.microsoft", op_sce_loss_grad},
    {"SGD", "vplan", op_sgd}, {"Momentum", "vplan", op_sgd}, {"Adam", "vplan", op_adam},
};

static const cu_op_entry *find_op(const char *domain, const char *op_type) {
    if (!domain || !strcmp(domain, "ai.onnx")) domain = "";
    for (size_t i = 0; i < sizeof cu_ops / sizeof cu_ops[0]; i++)
        if (!strcmp(cu_ops[i].name, op_type) && !strcmp(cu_ops[i].domain, domain)) return &cu_ops[i];
    return NULL;
}

int vp_backend_cuda_supports(const char *domain, const char *op_type) { return op_type && find_op(domain, op_type) != NULL; }

/* ---- the vtable ---- */

static cuda_ctx *ctx_of(vp_backend *b) { return b->ctx; }

static vp_status cuda_alloc(vp_backend *b, size_t bytes, void **ptr, vp_error *err) {
    cuda_ctx *c = ctx_of(b);
    *ptr = NULL;
    cudaError_t e = cudaSetDevice(c->device);
    if (!e) e = cudaMalloc(ptr, bytes ? bytes : 256);
    if (e == cudaErrorMemoryAllocation) {
        size_t fr = 0, total = 0;
        cudaGetLastError();
        cudaMemGetInfo(&fr, &total);
        return vp_fail(err, VP_ERR_NOMEM, "cuda backend: cannot allocate %zu bytes (%zu of %zu bytes free on the device)",
                       bytes, fr, total);
    }
    vp_status s = cuda_check(e, NULL, "cudaMalloc", err);
    /* the CPU backend hands out zeroed memory: so does this one */
    if (!s) s = cuda_check(cudaMemsetAsync(*ptr, 0, bytes ? bytes : 256, c->stream), NULL, "cudaMemsetAsync", err);
    if (!s) s = cuda_check(cudaStreamSynchronize(c->stream), NULL, "cudaStreamSynchronize", err);
    return s;
}

static void cuda_free(vp_backend *b, void *ptr) {
    cuda_ctx *c = ctx_of(b);
    if (!ptr) return;
    cudaStreamSynchronize(c->stream);
    cudaFree(ptr);
}

static vp_status cuda_to_device(vp_backend *b, void *dst, const void *src, size_t bytes, vp_error *err) {
    cuda_ctx *c = ctx_of(b);
    if (!bytes) return VP_OK;
    /* synchronous: the host buffer may be freed when this returns */
    vp_status s = cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream), NULL, "copy to device", err);
    if (!s) s = cuda_check(cudaStreamSynchronize(c->stream), NULL, "copy to device", err);
    return s;
}

static vp_status cuda_to_host(vp_backend *b, void *dst, const void *src, size_t bytes, vp_error *err) {
    cuda_ctx *c = ctx_of(b);
    if (!bytes) return VP_OK;
    vp_status s = cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream), NULL, "copy to host", err);
    if (!s) s = cuda_check(cudaStreamSynchronize(c->stream), NULL, "copy to host", err);
    return s;
}

static vp_status cuda_run_node(vp_backend *b, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                               vp_error *err) {
    cuda_ctx *c = ctx_of(b);
    const cu_op_entry *e = find_op(n->domain, n->op_type);
    if (!e) return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "no CUDA kernel for this op");
    for (int k = 0; k < n->n_outputs; k++)
        if (out[k] && !out[k]->data && vp_tensor_nbytes(out[k]))
            return vp_node_fail(err, VP_ERR_RUNTIME, n, "output %d has no device memory", k);
    if (n->n_inputs > 0 && !in[0] && strcmp(n->op_type, "Concat") && strcmp(n->op_type, "Sum"))
        return vp_node_fail(err, VP_ERR_INVALID, n, "input 0 is missing");
    return e->fn(c, n, in, out, err);
}

static vp_status cuda_sync(vp_backend *b, vp_error *err) {
    cuda_ctx *c = ctx_of(b);
    return cuda_check(cudaStreamSynchronize(c->stream), NULL, "cudaStreamSynchronize", err);
}

static void cuda_destroy(vp_backend *b) {
    cuda_ctx *c = ctx_of(b);
    if (c) {
        if (c->stream) cudaStreamSynchronize(c->stream);
        if (c->blas) cublasDestroy(c->blas);
        if (c->workspace) cudaFree(c->workspace);
        if (c->stream) cudaStreamDestroy(c->stream);
        free(c);
    }
    free(b);
}

static const vp_backend_iface cuda_iface = {
    .name = "cuda",
    .alignment = 256,
    .host_memory = 0,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .copy_to_device = cuda_to_device,
    .copy_to_host = cuda_to_host,
    .run_node = cuda_run_node,
    .synchronize = cuda_sync,
    .destroy = cuda_destroy,
};

int vp_cuda_device_count(char *why, size_t why_len) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        if (why) snprintf(why, why_len, "cudaGetDeviceCount: %s", cudaGetErrorString(e));
        cudaGetLastError();
        return 0;
    }
    if (count == 0 && why) snprintf(why, why_len, "cudaGetDeviceCount found 0 devices");
    return count;
}

vp_backend *vp_backend_cuda_new(int device, int allow_tf32, vp_error *err) {
    char why[256];
    int count = vp_cuda_device_count(why, sizeof why);
    if (count == 0) {
        vp_fail(err, VP_ERR_RUNTIME, "no CUDA device (%s)", why);
        return NULL;
    }
    if (device < 0 || device >= count) {
        vp_fail(err, VP_ERR_USAGE, "CUDA device %d does not exist (%d present)", device, count);
        return NULL;
    }
    vp_backend *b = calloc(1, sizeof *b);
    cuda_ctx *c = calloc(1, sizeof *c);
    if (!b || !c) {
        free(b);
        free(c);
        vp_fail(err, VP_ERR_NOMEM, "out of memory");
        return NULL;
    }
    b->iface = &cuda_iface;
    b->ctx = c;
    c->device = device;
    c->allow_tf32 = allow_tf32;
    struct cudaDeviceProp prop;
    vp_status s = cuda_check(cudaSetDevice(device), NULL, "cudaSetDevice", err);
    if (!s) s = cuda_check(cudaGetDeviceProperties(&prop, device), NULL, "cudaGetDeviceProperties", err);
    if (!s) snprintf(c->name, sizeof c->name, "%.200s (sm_%d%d)", prop.name, prop.major, prop.minor);
    if (!s) s = cuda_check(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), NULL, "cudaStreamCreate", err);
    if (!s) s = cuda_check(cudaMalloc(&c->workspace, CUBLAS_WORKSPACE_BYTES + SCRATCH_BYTES), NULL, "cudaMalloc (workspace)", err);
    if (!s) c->scratch = (double *)((char *)c->workspace + CUBLAS_WORKSPACE_BYTES);
    if (!s) s = blas_check(cublasCreate(&c->blas), NULL, "cublasCreate", err);
    if (!s) s = blas_check(cublasSetStream(c->blas, c->stream), NULL, "cublasSetStream", err);
    if (!s) s = blas_check(cublasSetWorkspace(c->blas, c->workspace, CUBLAS_WORKSPACE_BYTES), NULL, "cublasSetWorkspace", err);
    if (!s)
        s = blas_check(cublasSetMathMode(c->blas, allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH), NULL,
                       "cublasSetMathMode", err);
    if (s) {
        cuda_destroy(b);
        return NULL;
    }
    return b;
}

void vp_backend_cuda_set_graph(vp_backend *b, const vp_graph *g) {
    if (b && b->iface == &cuda_iface) ctx_of(b)->g = g;
}

vp_status vp_backend_cuda_mem_info(vp_backend *b, size_t *free_bytes, size_t *total_bytes, vp_error *err) {
    cuda_ctx *c = ctx_of(b);
    vp_status s = cuda_check(cudaSetDevice(c->device), NULL, "cudaSetDevice", err);
    if (!s) s = cuda_check(cudaMemGetInfo(free_bytes, total_bytes), NULL, "cudaMemGetInfo", err);
    return s;
}

size_t vp_backend_cuda_workspace_bytes(const vp_backend *b) {
    (void)b;
    return CUBLAS_WORKSPACE_BYTES + SCRATCH_BYTES;
}

const char *vp_backend_cuda_device_name(const vp_backend *b) { return ((const cuda_ctx *)b->ctx)->name; }
