/* Elementwise kernels: broadcasting binary ops, unary ops, Where, n-d copies (Transpose,
 * Expand, Concat, Split, Slice), Gather and its gradient, Cast, optimizer updates.
 * One kernel per element type with the op as a runtime switch, so the file compiles
 * quickly: a handful of instantiations, not one per (op, type). */
#include <math.h>
#include <stdint.h>

#include <cuda_fp16.h>

#include "cu_common.cuh"
#include "cu_lowp.cuh"

/* ---- binary ---- */

template <typename T> __device__ static inline T bin_arith(int op, T a, T b) {
    switch (op) {
    case CU_ADD: return a + b;
    case CU_SUB: return a - b;
    case CU_MUL: return a * b;
    case CU_DIV: return b == (T)0 && !(T)0.5 ? (T)0 : a / b;
    case CU_POW: return (T)pow((double)a, (double)b);
    case CU_MAX: return a > b ? a : b;
    case CU_MIN: return a < b ? a : b;
    case CU_MOD: {
        if (b == (T)0) return (T)0;
        T r = (T)fmod((double)a, (double)b);
        if (r != (T)0 && ((r < (T)0) != (b < (T)0))) r += b;
        return r;
    }
    case CU_FMOD: return b == (T)0 ? (T)0 : (T)fmod((double)a, (double)b);
    case CU_PRELU: return a < (T)0 ? a * b : a;
    case CU_RELU_GRAD: return b > (T)0 ? a : (T)0;
    case CU_SIGMOID_GRAD: return a * b * ((T)1 - b);
    case CU_TANH_GRAD: return a * ((T)1 - b * b);
    case CU_GELU_GRAD: {
        double x = (double)b;
        double cdf = 0.5 * (1.0 + erf(x * 0.70710678118654752440));
        double pdf = exp(-0.5 * x * x) * 0.39894228040143267794;
        return (T)((double)a * (cdf + x * pdf));
    }
    case CU_FAST_GELU_GRAD: { /* d/dx of 0.5 x (1 + tanh(k (x + c x^3))), as the CPU's FastGeluGrad */
        double x = (double)b, t = tanh(0.7978845608028654 * (x + 0.044715 * x * x * x));
        double dt = 0.7978845608028654 * (1.0 + 3 * 0.044715 * x * x);
        return (T)((double)a * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * dt));
    }
    default: return (T)0;
    }
}

template <typename T> __device__ static inline uint8_t bin_compare(int op, T a, T b) {
    switch (op) {
    case CU_EQUAL: return a == b;
    case CU_LESS: return a < b;
    case CU_LESS_EQUAL: return a <= b;
    case CU_GREATER: return a > b;
    case CU_GREATER_EQUAL: return a >= b;
    case CU_AND: return a && b;
    case CU_OR: return a || b;
    case CU_XOR: return (a != (T)0) != (b != (T)0);
    default: return 0;
    }
}

template <typename T> __global__ void k_binary(int op, cu_nd nd, int64_t n, const T *a, const T *b, void *y) {
    CU_FOR(i, n) {
        int64_t oa, ob, oc;
        cu_offsets(nd, i, &oa, &ob, &oc);
        if (op >= CU_EQUAL) ((uint8_t *)y)[i] = bin_compare<T>(op, a[oa], b[ob]);
        else ((T *)y)[i] = bin_arith<T>(op, a[oa], b[ob]);
    }
}

/* float16 and bfloat16: computed in float (the CPU widens them), rounded on store. */
template <typename S> __global__ void k_binary_lowp(int op, cu_nd nd, int64_t n, const S *a, const S *b, void *y) {
    CU_FOR(i, n) {
        int64_t oa, ob, oc;
        cu_offsets(nd, i, &oa, &ob, &oc);
        float va = cu_ld(a, oa), vb = cu_ld(b, ob);
        if (op >= CU_EQUAL) ((uint8_t *)y)[i] = bin_compare<float>(op, va, vb);
        else cu_st((S *)y, i, bin_arith<float>(op, va, vb));
    }
}

/* bool inputs: comparisons and logic only */
__global__ void k_logic(int op, cu_nd nd, int64_t n, const uint8_t *a, const uint8_t *b, uint8_t *y) {
    CU_FOR(i, n) {
        int64_t oa, ob, oc;
        cu_offsets(nd, i, &oa, &ob, &oc);
        y[i] = bin_compare<uint8_t>(op, a[oa] != 0, b[ob] != 0);
    }
}

static int64_t nd_count(const cu_nd *nd) {
    int64_t n = 1;
    for (int d = 0; d < nd->rank; d++) n *= nd->dims[d];
    return n;
}

extern "C" cudaError_t cu_binary(int dtype, int op, const cu_nd *nd, const void *a, const void *b, void *y,
                                 cudaStream_t st) {
    int64_t n = nd_count(nd);
    if (n == 0) return cudaSuccess;
    unsigned g = cu_blocks(n);
    switch (dtype) {
    case 1: k_binary<float><<<g, CU_THREADS, 0, st>>>(op, *nd, n, (const float *)a, (const float *)b, y); break;
    case 11: k_binary<double><<<g, CU_THREADS, 0, st>>>(op, *nd, n, (const double *)a, (const double *)b, y); break;
    case 6: k_binary<int32_t><<<g, CU_THREADS, 0, st>>>(op, *nd, n, (const int32_t *)a, (const int32_t *)b, y); break;
    case 7: k_binary<int64_t><<<g, CU_THREADS, 0, st>>>(op, *nd, n, (const int64_t *)a, (const int64_t *)b, y); break;
    case 10: k_binary_lowp<__half><<<g, CU_THREADS, 0, st>>>(op, *nd, n, (const __half *)a, (const __half *)b, y); break;
    case 16: k_binary_lowp<cu_bf16><<<g, CU_THREADS, 0, st>>>(op, *nd, n, (const cu_bf16 *)a, (const cu_bf16 *)b, y); break;
    case 9:
        if (op < CU_EQUAL) return cudaErrorInvalidValue;
        k_logic<<<g, CU_THREADS, 0, st>>>(op, *nd, n, (const uint8_t *)a, (const uint8_t *)b, (uint8_t *)y);
        break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

/* ---- unary ---- */

template <typename T> __device__ static inline T un_op(int op, T x, T alpha, T beta) {
    switch (op) {
    case CU_RELU: return x > (T)0 ? x : (T)0;
    case CU_NEG: return -x;
    case CU_SQRT: return sqrt(x);
    case CU_ERF: return erf(x);
    case CU_EXP: return exp(x);
    case CU_LOG: return log(x);
    case CU_ABS: return fabs(x);
    case CU_SIGMOID: return x >= (T)0 ? (T)1 / ((T)1 + exp(-x)) : exp(x) / ((T)1 + exp(x));
    case CU_TANH: return tanh(x);
    case CU_RECIPROCAL: return (T)1 / x;
    case CU_IDENTITY: return x;
    case CU_LEAKY_RELU: return x < (T)0 ? alpha * x : x;
    case CU_ELU: return x < (T)0 ? alpha * (exp(x) - (T)1) : x;
    case CU_FLOOR: return floor(x);
    case CU_CEIL: return ceil(x);
    case CU_SIN: return sin(x);
    case CU_COS: return cos(x);
    case CU_TAN: return tan(x);
    case CU_SOFTPLUS: return x > (T)20 ? x : log1p(exp(x));
    case CU_GELU: return (T)0.5 * x * ((T)1 + erf(x * (T)0.70710678118654752440));
    case CU_FAST_GELU: return (T)0.5 * x * ((T)1 + tanh((T)0.7978845608028654 * (x + (T)0.044715 * x * x * x)));
    case CU_SIGN: return x > (T)0 ? (T)1 : x < (T)0 ? (T)-1 : (T)0;
    case CU_ROUND: return rint(x);
    case CU_SELU: return beta * (x <= (T)0 ? alpha * (exp(x) - (T)1) : x);
    case CU_HARD_SIGMOID: {
        T v = alpha * x + beta;
        return v < (T)0 ? (T)0 : v > (T)1 ? (T)1 : v;
    }
    case CU_SOFTSIGN: return x / ((T)1 + fabs(x));
    case CU_SWISH: {
        T a = alpha * x;
        return x * (a >= (T)0 ? (T)1 / ((T)1 + exp(-a)) : exp(a) / ((T)1 + exp(a)));
    }
    case CU_CLIP: return x < alpha ? alpha : x > beta ? beta : x;
    default: return x;
    }
}

template <typename T> __global__ void k_unary(int op, int64_t n, const T *x, T *y, T alpha, T beta) {
    CU_FOR(i, n) y[i] = un_op<T>(op, x[i], alpha, beta);
}

template <typename S> __global__ void k_unary_lowp(int op, int64_t n, const S *x, S *y, float alpha, float beta) {
    CU_FOR(i, n) cu_st(y, i, un_op<float>(op, cu_ld(x, i), alpha, beta));
}

__global__ void k_not(int64_t n, const uint8_t *x, uint8_t *y) {
    CU_FOR(i, n) y[i] = !x[i];
}

extern "C" cudaError_t cu_unary(int dtype, int op, int64_t n, const void *x, void *y, float alpha, float beta,
                                cudaStream_t st) {
    if (n == 0) return cudaSuccess;
    unsigned g = cu_blocks(n);
    if (op == CU_NOT) k_not<<<g, CU_THREADS, 0, st>>>(n, (const uint8_t *)x, (uint8_t *)y);
    else if (dtype == 1) k_unary<float><<<g, CU_THREADS, 0, st>>>(op, n, (const float *)x, (float *)y, alpha, beta);
    else if (dtype == 11)
        k_unary<double><<<g, CU_THREADS, 0, st>>>(op, n, (const double *)x, (double *)y, alpha, beta);
    else if (dtype == 10) k_unary_lowp<__half><<<g, CU_THREADS, 0, st>>>(op, n, (const __half *)x, (__half *)y, alpha, beta);
    else if (dtype == 16)
        k_unary_lowp<cu_bf16><<<g, CU_THREADS, 0, st>>>(op, n, (const cu_bf16 *)x, (cu_bf16 *)y, alpha, beta);
    else return cudaErrorInvalidValue;
    return cudaGetLastError();
}

/* LeakyReluGrad(dY, Y): dy where y > 0, alpha dy elsewhere. */
template <typename T> __global__ void k_leaky_relu_grad(int64_t n, const T *dy, const T *y, T *dx, T alpha) {
    CU_FOR(i, n) dx[i] = y[i] > (T)0 ? dy[i] : dy[i] * alpha;
}
template <typename S> __global__ void k_leaky_relu_grad_lowp(int64_t n, const S *dy, const S *y, S *dx, float alpha) {
    CU_FOR(i, n) cu_st(dx, i, cu_ld(y, i) > 0.0f ? cu_ld(dy, i) : cu_ld(dy, i) * alpha);
}

extern "C" cudaError_t cu_leaky_relu_grad(int dtype, int64_t n, const void *dy, const void *y, void *dx, double alpha,
                                          cudaStream_t st) {
    if (n == 0) return cudaSuccess;
    unsigned g = cu_blocks(n);
    if (dtype == 1)
        k_leaky_relu_grad<float><<<g, CU_THREADS, 0, st>>>(n, (const float *)dy, (const float *)y, (float *)dx,
                                                            (float)alpha);
    else if (dtype == 11)
        k_leaky_relu_grad<double><<<g, CU_THREADS, 0, st>>>(n, (const double *)dy, (const double *)y, (double *)dx,
                                                             alpha);
    else if (dtype == 10)
        k_leaky_relu_grad_lowp<__half><<<g, CU_THREADS, 0, st>>>(n, (const __half *)dy, (const __half *)y, (__half *)dx,
                                                                  (float)alpha);
    else if (dtype == 16)
        k_leaky_relu_grad_lowp<cu_bf16><<<g, CU_THREADS, 0, st>>>(n, (const cu_bf16 *)dy, (const cu_bf16 *)y,
                                                                   (cu_bf16 *)dx, (float)alpha);
    else return cudaErrorInvalidValue;
    return cudaGetLastError();
}

/* The gated MLP's elementwise passes (vplan.SwiGluMatMul, planner/ops/act_matmul.c):
 * forward, a = act(g) u; backward, from dA in a: du = dA act(g) (when du is given) and
 * dG = dA u act'(g) in a's place; act swish (gate 0), GELU (1) or GELU's tanh form (2).
 * Loads and stores through cu_ld / cu_st, so the 16-bit forms compute in float32 and
 * round on store. */
template <typename T>
__global__ void k_swiglu(int backward, int gate, int64_t n, const T *g, const T *u, T *a, T *du) {
    CU_FOR(i, n) {
        float x = cu_ld(g, i), up = cu_ld(u, i), act, dact;
        if (gate == 0) {
            float sg = 1.0f / (1.0f + expf(-x));
            act = x * sg;
            dact = sg + act * (1.0f - sg);
        } else if (gate == 1) {
            float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752440f));
            act = x * cdf;
            dact = cdf + x * 0.39894228040143267794f * expf(-0.5f * x * x);
        } else {
            float t = tanhf(0.79788456080286535588f * (x + 0.044715f * x * x * x));
            act = 0.5f * x * (1.0f + t);
            dact = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * 0.79788456080286535588f * (1.0f + 3.0f * 0.044715f * x * x);
        }
        if (!backward) {
            cu_st(a, i, act * up);
            continue;
        }
        float da = cu_ld((const T *)a, i);
        if (du) cu_st(du, i, da * act);
        cu_st(a, i, da * up * dact);
    }
}

extern "C" cudaError_t cu_swiglu(int dtype, int backward, int gate, int64_t n, const void *g, const void *u, void *a,
                                 void *du, cudaStream_t st) {
    if (n == 0) return cudaSuccess;
    unsigned b = cu_blocks(n);
    if (dtype == 1)
        k_swiglu<float><<<b, CU_THREADS, 0, st>>>(backward, gate, n, (const float *)g, (const float *)u, (float *)a,
                                                  (float *)du);
    else if (dtype == 10)
        k_swiglu<__half><<<b, CU_THREADS, 0, st>>>(backward, gate, n, (const __half *)g, (const __half *)u, (__half *)a,
                                                   (__half *)du);
    else if (dtype == 16)
        k_swiglu<cu_bf16><<<b, CU_THREADS, 0, st>>>(backward, gate, n, (const cu_bf16 *)g, (const cu_bf16 *)u, (cu_bf16 *)a,
                                                    (cu_bf16 *)du);
    else return cudaErrorInvalidValue;
    return cudaGetLastError();
}

/* ---- Where, n-d copies, Gather ---- */

template <typename T>
__global__ void k_where(cu_nd nd, int64_t n, const uint8_t *cond, const T *a, const T *b, T *y) {
    CU_FOR(i, n) {
        int64_t oc, oa, ob;
        cu_offsets(nd, i, &oc, &oa, &ob);
        y[i] = cond[oc] ? a[oa] : b[ob];
    }
}

extern "C" cudaError_t cu_where(int esize, const cu_nd *nd, const uint8_t *cond, const void *a, const void *b, void *y,
                                cudaStream_t st) {
    int64_t n = nd_count(nd);
    if (n == 0) return cudaSuccess;
    unsigned g = cu_blocks(n);
    CU_SIZE_DISPATCH(esize, k_where<T><<<g, CU_THREADS, 0, st>>>(*nd, n, cond, (const T *)a, (const T *)b, (T *)y));
    return cudaGetLastError();
}

/* s0: source strides, s1: destination strides. */
template <typename T> __global__ void k_copy_nd(cu_nd nd, int64_t n, const T *src, T *dst) {
    CU_FOR(i, n) {
        int64_t os, od, unused;
        cu_offsets(nd, i, &os, &od, &unused);
        dst[od] = src[os];
    }
}

extern "C" cudaError_t cu_copy_nd(int esize, int rank, const int64_t *dims, const void *src, const int64_t *src_str,
                                  void *dst, const int64_t *dst_str, cudaStream_t st) {
    cu_nd nd;
    nd.rank = rank;
    for (int d = 0; d < rank; d++) {
        nd.dims[d] = dims[d];
        nd.s0[d] = src_str[d];
        nd.s1[d] = dst_str[d];
        nd.s2[d] = 0;
    }
    int64_t n = nd_count(&nd);
    if (n == 0) return cudaSuccess;
    unsigned g = cu_blocks(n);
    CU_SIZE_DISPATCH(esize, k_copy_nd<T><<<g, CU_THREADS, 0, st>>>(nd, n, (const T *)src, (T *)dst));
    return cudaGetLastError();
}

__device__ static inline int64_t load_idx(const void *idx, int idx64, int64_t j) {
    return idx64 ? ((const int64_t *)idx)[j] : (int64_t)((const int32_t *)idx)[j];
}

template <typename T>
__global__ void k_gather(int64_t total, int64_t dim, int64_t count, int64_t inner, const T *data, const void *idx,
                         int idx64, T *out) {
    CU_FOR(i, total) {
        int64_t in = i % inner, j = (i / inner) % count, o = i / (inner * count);
        int64_t k = load_idx(idx, idx64, j);
        if (k < 0) k += dim;
        out[i] = k >= 0 && k < dim ? data[(o * dim + k) * inner + in] : (T)0;
    }
}

extern "C" cudaError_t cu_gather(int esize, int64_t outer, int64_t dim, int64_t count, int64_t inner, const void *data,
                                 const void *idx, int idx64, void *out, cudaStream_t st) {
    int64_t total = outer * count * inner;
    if (total == 0) return cudaSuccess;
    unsigned g = cu_blocks(total);
    CU_SIZE_DISPATCH(esize, k_gather<T><<<g, CU_THREADS, 0, st>>>(total, dim, count, inner, (const T *)data, idx, idx64, (T *)out));
    return cudaGetLastError();
}

__global__ void k_gather_grad(int64_t total, int64_t dim, int64_t count, int64_t inner, const void *idx, int idx64,
                              const float *dy, float *dx) {
    CU_FOR(i, total) {
        int64_t in = i % inner, j = (i / inner) % count, o = i / (inner * count);
        int64_t k = load_idx(idx, idx64, j);
        if (k < 0) k += dim;
        if (k >= 0 && k < dim) atomicAdd(&dx[(o * dim + k) * inner + in], dy[i]);
    }
}

extern "C" cudaError_t cu_gather_grad(int64_t outer, int64_t dim, int64_t count, int64_t inner, const void *idx,
                                      int idx64, const float *dy, float *dx, cudaStream_t st) {
    cudaError_t e = cudaMemsetAsync(dx, 0, (size_t)(outer * dim * inner) * sizeof(float), st);
    if (e) return e;
    int64_t total = outer * count * inner;
    if (total == 0) return cudaSuccess;
    k_gather_grad<<<cu_blocks(total), CU_THREADS, 0, st>>>(total, dim, count, inner, idx, idx64, dy, dx);
    return cudaGetLastError();
}

/* GatherGrad of 16-bit dY and dX, as the CPU computes it: float32 sums in index order,
 * rounded once.  A block per (o, i) keeps its dX row in shared memory; one thread adds
 * the indices in order, so the sums do not depend on the schedule. */
template <typename S>
__global__ void k_gather_grad_lowp(int64_t dim, int64_t count, int64_t inner, const void *idx, int idx64, const S *dy,
                                   S *dx) {
    extern __shared__ float acc[];
    int64_t o = blockIdx.x / inner, in = blockIdx.x % inner;
    for (int64_t k = threadIdx.x; k < dim; k += blockDim.x) acc[k] = 0;
    __syncthreads();
    if (threadIdx.x == 0)
        for (int64_t j = 0; j < count; j++) {
            int64_t k = load_idx(idx, idx64, j);
            if (k < 0) k += dim;
            if (k >= 0 && k < dim) acc[k] += cu_ld(dy, (o * count + j) * inner + in);
        }
    __syncthreads();
    for (int64_t k = threadIdx.x; k < dim; k += blockDim.x) cu_st(dx, (o * dim + k) * inner + in, acc[k]);
}

extern "C" cudaError_t cu_gather_grad_lowp(int dtype, int64_t outer, int64_t dim, int64_t count, int64_t inner,
                                           const void *idx, int idx64, const void *dy, void *dx, cudaStream_t st) {
    if (outer * inner == 0 || dim == 0) return cudaSuccess;
    size_t shared = (size_t)dim * sizeof(float);
    if (shared > 48 * 1024) return cudaErrorInvalidValue; /* a dX row must fit a block's shared memory */
    unsigned blocks = (unsigned)(outer * inner);
    switch (dtype) {
    case 10: k_gather_grad_lowp<__half><<<blocks, CU_THREADS, shared, st>>>(dim, count, inner, idx, idx64, (const __half *)dy, (__half *)dx); break;
    case 16: k_gather_grad_lowp<cu_bf16><<<blocks, CU_THREADS, shared, st>>>(dim, count, inner, idx, idx64, (const cu_bf16 *)dy, (cu_bf16 *)dx); break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

/* ---- Cast ---- */

__device__ static inline double cast_load(int t, const void *p, int64_t i) {
    switch (t) {
    case 1: return ((const float *)p)[i];
    case 2: return ((const uint8_t *)p)[i];
    case 3: return ((const int8_t *)p)[i];
    case 4: return ((const uint16_t *)p)[i];
    case 5: return ((const int16_t *)p)[i];
    case 6: return ((const int32_t *)p)[i];
    case 7: return (double)((const int64_t *)p)[i];
    case 9: return ((const uint8_t *)p)[i] != 0;
    case 10: return __half2float(((const __half *)p)[i]);
    case 11: return ((const double *)p)[i];
    case 12: return ((const uint32_t *)p)[i];
    case 13: return (double)((const uint64_t *)p)[i];
    case 16: return cu_ld((const cu_bf16 *)p, i);
    default: return 0;
    }
}

__device__ static inline void cast_store(int t, void *p, int64_t i, double v, int64_t iv, int from_int) {
    switch (t) {
    case 1: ((float *)p)[i] = (float)v; break;
    case 2: ((uint8_t *)p)[i] = (uint8_t)(from_int ? iv : (int64_t)v); break;
    case 3: ((int8_t *)p)[i] = (int8_t)(from_int ? iv : (int64_t)v); break;
    case 4: ((uint16_t *)p)[i] = (uint16_t)(from_int ? iv : (int64_t)v); break;
    case 5: ((int16_t *)p)[i] = (int16_t)(from_int ? iv : (int64_t)v); break;
    case 6: ((int32_t *)p)[i] = (int32_t)(from_int ? iv : (int64_t)v); break;
    case 7: ((int64_t *)p)[i] = from_int ? iv : (int64_t)v; break;
    case 9: ((uint8_t *)p)[i] = v != 0; break;
    case 10: ((__half *)p)[i] = __float2half_rn((float)v); break;
    case 11: ((double *)p)[i] = v; break;
    case 12: ((uint32_t *)p)[i] = (uint32_t)(from_int ? iv : (int64_t)v); break;
    case 13: ((uint64_t *)p)[i] = (uint64_t)(from_int ? iv : (int64_t)v); break;
    case 16: cu_st((cu_bf16 *)p, i, (float)v); break;
    default: break;
    }
}

__global__ void k_cast(int64_t n, int from, const void *x, int to, void *y) {
    /* int64 to int64-ish keeps every bit; everything else passes through double */
    int from_int = from == 7 || from == 13 || from == 6 || from == 12 || from == 2 || from == 3 || from == 4 || from == 5;
    CU_FOR(i, n) {
        int64_t iv = 0;
        if (from == 7) iv = ((const int64_t *)x)[i];
        else if (from == 13) iv = (int64_t)((const uint64_t *)x)[i];
        double v = cast_load(from, x, i);
        if (from_int && from != 7 && from != 13) iv = (int64_t)v;
        cast_store(to, y, i, v, iv, from_int);
    }
}

extern "C" cudaError_t cu_cast(int64_t n, int from, const void *x, int to, void *y, cudaStream_t st) {
    if (n == 0) return cudaSuccess;
    k_cast<<<cu_blocks(n), CU_THREADS, 0, st>>>(n, from, x, to, y);
    return cudaGetLastError();
}

/* Slot i (bytes [4i, 4i + 4)) reads low value i at bytes 2n + 2i.  A pass over [lo, hi)
 * with hi - lo at most (n - lo) / 2 writes below every value it or a later pass reads
 * (4 hi <= 2n + 2 lo), except a last one-element pass that reads its value first. */
template <typename T>
__global__ void k_widen(int64_t lo, int64_t hi, const T *src, float *dst) {
    CU_FOR(j, hi - lo) {
        float v = cu_ld(src, lo + j);
        dst[lo + j] = v;
    }
}

extern "C" cudaError_t cu_widen_in_place(int from, int64_t n, void *buf, cudaStream_t st) {
    if (from != 10 && from != 16) return cudaErrorInvalidValue;
    for (int64_t lo = 0; lo < n;) {
        int64_t hi = lo + ((n - lo) / 2 > 0 ? (n - lo) / 2 : 1);
        /* 2-byte T: element n of T is byte 2n */
        CU_FLOAT_DISPATCH(from, k_widen<T><<<cu_blocks(hi - lo), CU_THREADS, 0, st>>>(lo, hi, (const T *)buf + n, (float *)buf));
        cudaError_t e = cudaGetLastError();
        if (e) return e;
        lo = hi;
    }
    return cudaSuccess;
}

/* ---- optimizer updates (float32; torch.optim's order, fma where ATen fuses) ---- */

__global__ void k_sgd(int64_t n, float wd, int has_wd, float neg_lr, float mom, const float *w, const float *g,
                      const float *b, float *w_out, float *b_out, const uint8_t *do_update) {
    int skip = do_update && !do_update[0]; /* every output its input, unchanged */
    CU_FOR(i, n) {
        if (skip) {
            if (w_out) w_out[i] = w[i];
            if (b && b_out) b_out[i] = b[i];
            continue;
        }
        float d = g[i];
        if (has_wd) d = fmaf(wd, w[i], d);
        if (b) {
            d = __fadd_rn(__fmul_rn(b[i], mom), d); /* unfused, as the CPU computes it */
            if (b_out) b_out[i] = d;
        }
        if (w_out) w_out[i] = fmaf(neg_lr, d, w[i]);
    }
}

extern "C" cudaError_t cu_sgd(int64_t n, const cu_opt *h, const float *w, const float *g, const float *b, float *w_out,
                              float *b_out, const uint8_t *do_update, cudaStream_t st) {
    if (n == 0) return cudaSuccess;
    k_sgd<<<cu_blocks(n), CU_THREADS, 0, st>>>(n, (float)h->weight_decay, h->weight_decay != 0, (float)-h->lr,
                                               (float)h->momentum, w, g, b, w_out, b_out, do_update);
    return cudaGetLastError();
}

__global__ void k_adam(int64_t n, cu_opt h, const float *w, const float *g, const float *m, const float *v,
                       const float *tp, float *w_out, float *m_out, float *v_out, const uint8_t *do_update) {
    if (do_update && !do_update[0]) { /* skipped: every output its input, unchanged */
        CU_FOR(i, n) {
            if (m_out) m_out[i] = m[i];
            if (v_out) v_out[i] = v[i];
            if (w_out) w_out[i] = w[i];
        }
        return;
    }
    /* scalars as the CPU kernel computes them: in double, from t = T + 1 */
    __shared__ float s_decay, s_bias2_sqrt, s_neg_step;
    if (threadIdx.x == 0) {
        float t = tp[0] + 1.0f;
        s_decay = (float)(1 - h.lr * h.weight_decay);
        s_neg_step = (float)-(h.lr / (1 - pow(h.beta1, (double)t)));
        s_bias2_sqrt = (float)sqrt(1 - pow(h.beta2, (double)t));
    }
    __syncthreads();
    float wd = (float)h.weight_decay, b1 = (float)h.beta1, one_b1 = (float)(1 - h.beta1);
    float b2 = (float)h.beta2, one_b2 = (float)(1 - h.beta2), eps = (float)h.eps;
    CU_FOR(i, n) {
        float p = w[i], d = g[i];
        if (h.decoupled) p = p * s_decay;
        else if (h.weight_decay != 0) d = fmaf(wd, p, d);
        float mm = fmaf(one_b1, d, m[i] * b1);
        float vv = fmaf(one_b2 * d, d, v[i] * b2);
        float denom = sqrtf(vv) / s_bias2_sqrt + eps;
        if (m_out) m_out[i] = mm;
        if (v_out) v_out[i] = vv;
        if (w_out) w_out[i] = p + __fdiv_rn(s_neg_step * mm, denom);
    }
}

__global__ void k_adam_step(const float *t, float *t_out, const uint8_t *do_update) {
    t_out[0] = do_update && !do_update[0] ? t[0] : t[0] + 1.0f;
}

extern "C" cudaError_t cu_adam(int64_t n, const cu_opt *h, const float *w, const float *g, const float *m,
                               const float *v, const float *t, float *w_out, float *m_out, float *v_out, float *t_out,
                               const uint8_t *do_update, cudaStream_t st) {
    if (n > 0) k_adam<<<cu_blocks(n), CU_THREADS, 0, st>>>(n, *h, w, g, m, v, t, w_out, m_out, v_out, do_update);
    cudaError_t e = cudaGetLastError();
    if (e) return e;
    /* after the update, which reads T in every block: T' may share T's storage */
    if (t_out) k_adam_step<<<1, 1, 0, st>>>(t, t_out, do_update);
    return cudaGetLastError();
}
