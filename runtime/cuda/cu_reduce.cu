/* Reductions, Softmax and its gradient, LayerNormalization and BatchNormalization with
 * their gradients, global pooling, SoftmaxCrossEntropyLoss and its gradient.
 *
 * Sums are kept in double, as the CPU reference keeps them, so the two backends agree
 * to float32 rounding.  Rows are handled one warp each (softmax, layer norm, losses)
 * or one block each (reductions over many elements, batch-norm channels); no kernel
 * needs memory beyond its inputs and outputs except the loss's two scalars. */
#include <math.h>
#include <stdint.h>

#include "cu_common.cuh"
#include "cu_lowp.cuh"

/* ---- generic reduction ---- */

__device__ static inline double red_init(int op) {
    switch (op) {
    case CU_RMAX: return -INFINITY;
    case CU_RMIN: return INFINITY;
    case CU_RPROD: return 1;
    default: return 0;
    }
}

__device__ static inline double red_map(int op, double v) {
    switch (op) {
    case CU_RSUMSQ:
    case CU_RL2: return v * v;
    case CU_RL1: return fabs(v);
    default: return v;
    }
}

__device__ static inline double red_join(int op, double a, double b) {
    switch (op) {
    case CU_RMAX: return fmax(a, b);
    case CU_RMIN: return fmin(a, b);
    case CU_RPROD: return a * b;
    default: return a + b;
    }
}

__device__ static inline double red_final(int op, double v, int64_t count) {
    switch (op) {
    case CU_RMEAN: return count ? v / (double)count : NAN;
    case CU_RL2: return sqrt(v);
    case CU_RLOGSUM: return log(v);
    default: return v;
    }
}

__device__ static inline int64_t red_offset(int n, const int64_t *dims, const int64_t *str, int64_t i) {
    int64_t off = 0;
    for (int d = n - 1; d >= 0; d--) {
        off += (i % dims[d]) * str[d];
        i /= dims[d];
    }
    return off;
}

template <typename T> __device__ static inline double red_load(const T *x, int64_t off) { return (double)x[off]; }
__device__ static inline double red_load(const __half *x, int64_t off) { return cu_ld(x, off); }
__device__ static inline double red_load(const cu_bf16 *x, int64_t off) { return cu_ld(x, off); }
/* float16 and bfloat16 through float, as the CPU's vp_store rounds */
template <typename T> __device__ static inline void red_store(T *y, int64_t o, double v) { y[o] = (T)v; }
__device__ static inline void red_store(__half *y, int64_t o, double v) { cu_st(y, o, (float)v); }
__device__ static inline void red_store(cu_bf16 *y, int64_t o, double v) { cu_st(y, o, (float)v); }

/* One block per output element; ReduceLogSumExp runs a max pass first. */
template <typename T> __global__ void k_reduce_block(int op, cu_reduce_geom g, const T *x, T *y) {
    for (int64_t o = blockIdx.x; o < g.n_out; o += gridDim.x) {
        const T *base = x + red_offset(g.nk, g.kdims, g.ks, o);
        double shift = 0;
        if (op == CU_RLOGSUMEXP) {
            double m = -INFINITY;
            for (int64_t r = threadIdx.x; r < g.n_red; r += blockDim.x)
                m = fmax(m, red_load(base, red_offset(g.nr, g.rdims, g.rs, r)));
            __shared__ double wmax[32];
            m = cu_warp_max(m);
            __syncthreads();
            if ((threadIdx.x & 31) == 0) wmax[threadIdx.x >> 5] = m;
            __syncthreads();
            m = -INFINITY;
            for (int w = 0; w < (int)(blockDim.x >> 5); w++) m = fmax(m, wmax[w]);
            shift = isinf(m) ? 0 : m;
        }
        double acc = red_init(op);
        for (int64_t r = threadIdx.x; r < g.n_red; r += blockDim.x) {
            double v = red_load(base, red_offset(g.nr, g.rdims, g.rs, r));
            acc = red_join(op, acc, op == CU_RLOGSUMEXP ? exp(v - shift) : red_map(op, v));
        }
        double total;
        if (op == CU_RMAX || op == CU_RMIN || op == CU_RPROD) {
            __shared__ double part[1024];
            __syncthreads();
            part[threadIdx.x] = acc;
            __syncthreads();
            if (threadIdx.x == 0) {
                double a = red_init(op);
                for (int t = 0; t < (int)blockDim.x; t++) a = red_join(op, a, part[t]);
                part[0] = a;
            }
            __syncthreads();
            total = part[0];
        } else {
            total = cu_block_sum(acc);
        }
        if (threadIdx.x == 0) {
            double r = op == CU_RLOGSUMEXP ? log(total) + shift : red_final(op, total, g.n_red);
            red_store(y, o, r);
        }
    }
}

/* One thread per output element, for short reductions. */
template <typename T> __global__ void k_reduce_thread(int op, cu_reduce_geom g, const T *x, T *y) {
    CU_FOR(o, g.n_out) {
        const T *base = x + red_offset(g.nk, g.kdims, g.ks, o);
        double shift = 0;
        if (op == CU_RLOGSUMEXP) {
            double m = -INFINITY;
            for (int64_t r = 0; r < g.n_red; r++) m = fmax(m, red_load(base, red_offset(g.nr, g.rdims, g.rs, r)));
            shift = isinf(m) ? 0 : m;
        }
        double acc = red_init(op);
        for (int64_t r = 0; r < g.n_red; r++) {
            double v = red_load(base, red_offset(g.nr, g.rdims, g.rs, r));
            acc = red_join(op, acc, op == CU_RLOGSUMEXP ? exp(v - shift) : red_map(op, v));
        }
        red_store(y, o, op == CU_RLOGSUMEXP ? log(acc) + shift : red_final(op, acc, g.n_red));
    }
}

extern "C" cudaError_t cu_reduce(int dtype, int op, const cu_reduce_geom *g, const void *x, void *y, cudaStream_t st) {
    if (g->n_out == 0) return cudaSuccess;
    int per_block = g->n_red >= 128;
    unsigned blocks = (unsigned)(g->n_out < 65535 * 4 ? g->n_out : 65535 * 4);
    if (dtype == 1) {
        if (per_block) k_reduce_block<float><<<blocks, CU_THREADS, 0, st>>>(op, *g, (const float *)x, (float *)y);
        else k_reduce_thread<float><<<cu_blocks(g->n_out), CU_THREADS, 0, st>>>(op, *g, (const float *)x, (float *)y);
    } else if (dtype == 11) {
        if (per_block) k_reduce_block<double><<<blocks, CU_THREADS, 0, st>>>(op, *g, (const double *)x, (double *)y);
        else k_reduce_thread<double><<<cu_blocks(g->n_out), CU_THREADS, 0, st>>>(op, *g, (const double *)x, (double *)y);
    } else {
        CU_FLOAT_DISPATCH(dtype, if (per_block) k_reduce_block<T><<<blocks, CU_THREADS, 0, st>>>(op, *g, (const T *)x, (T *)y);
                                 else k_reduce_thread<T><<<cu_blocks(g->n_out), CU_THREADS, 0, st>>>(op, *g, (const T *)x,
                                                                                                    (T *)y));
    }
    return cudaGetLastError();
}

/* ---- softmax: one warp per row ---- */

#define ROWS_PER_BLOCK (CU_THREADS / 32)

static unsigned row_blocks(int64_t rows) {
    int64_t b = (rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
    if (b < 1) b = 1;
    return (unsigned)(b > 65535 * 8 ? 65535 * 8 : b);
}

#define CU_FOR_ROW(r, rows)                                                                                  \
    for (int64_t r = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5; r < (rows);                      \
         r += ((int64_t)gridDim.x * blockDim.x) >> 5)

__global__ void k_softmax(int kind, int64_t outer, int64_t len, int64_t inner, const float *x, float *y) {
    int lane = threadIdx.x & 31;
    CU_FOR_ROW(r, outer * inner) {
        int64_t base = (r / inner) * len * inner + r % inner;
        double m = -INFINITY;
        for (int64_t k = lane; k < len; k += 32) m = fmax(m, (double)x[base + k * inner]);
        m = cu_warp_max(m);
        double s = 0;
        for (int64_t k = lane; k < len; k += 32) s += exp((double)x[base + k * inner] - m);
        s = cu_warp_sum(s);
        double ls = log(s);
        for (int64_t k = lane; k < len; k += 32) {
            double v = (double)x[base + k * inner] - m;
            y[base + k * inner] = (float)(kind ? v - ls : exp(v) / s);
        }
    }
}

extern "C" cudaError_t cu_softmax(int kind, int64_t outer, int64_t len, int64_t inner, const float *x, float *y,
                                  cudaStream_t st) {
    if (outer * inner == 0) return cudaSuccess;
    k_softmax<<<row_blocks(outer * inner), CU_THREADS, 0, st>>>(kind, outer, len, inner, x, y);
    return cudaGetLastError();
}

__global__ void k_softmax_grad(int kind, int64_t outer, int64_t len, int64_t inner, const float *dy, const float *y,
                               float *dx) {
    int lane = threadIdx.x & 31;
    CU_FOR_ROW(r, outer * inner) {
        int64_t base = (r / inner) * len * inner + r % inner;
        double acc = 0;
        for (int64_t k = lane; k < len; k += 32) {
            int64_t at = base + k * inner;
            acc += kind ? (double)dy[at] : (double)dy[at] * y[at];
        }
        float sum = (float)cu_warp_sum(acc);
        for (int64_t k = lane; k < len; k += 32) {
            int64_t at = base + k * inner;
            dx[at] = kind ? dy[at] - expf(y[at]) * sum : y[at] * (dy[at] - sum);
        }
    }
}

extern "C" cudaError_t cu_softmax_grad(int kind, int64_t outer, int64_t len, int64_t inner, const float *dy,
                                       const float *y, float *dx, cudaStream_t st) {
    if (outer * inner == 0) return cudaSuccess;
    k_softmax_grad<<<row_blocks(outer * inner), CU_THREADS, 0, st>>>(kind, outer, len, inner, dy, y, dx);
    return cudaGetLastError();
}

/* ---- LayerNormalization ---- */

/* TY: float, or the low dtype a fused Cast stores (rounded from the float the unfused
 * kernel writes, so the bits are the Cast's). */
template <typename TY>
__global__ void k_layernorm(int64_t rows, int64_t len, double eps, int rms, const float *x, const float *scale,
                            const float *bias, TY *y, float *mean, float *inv_std) {
    int lane = threadIdx.x & 31;
    CU_FOR_ROW(r, rows) {
        const float *xr = x + r * len;
        double s = 0;
        for (int64_t k = lane; k < len && !rms; k += 32) s += xr[k];
        double m = len && !rms ? cu_warp_sum(s) / (double)len : 0; /* RMSNorm: no centering */
        double q = 0;
        for (int64_t k = lane; k < len; k += 32) q += (xr[k] - m) * (xr[k] - m);
        double var = len ? cu_warp_sum(q) / (double)len : 0;
        double inv = 1.0 / sqrt(var + eps);
        for (int64_t k = lane; k < len; k += 32)
            cu_st(y, r * len + k, (float)((xr[k] - m) * inv * (double)scale[k] + (bias ? (double)bias[k] : 0.0)));
        if (lane == 0) {
            if (mean) mean[r] = (float)m;
            if (inv_std) inv_std[r] = (float)inv;
        }
    }
}

extern "C" cudaError_t cu_layernorm(int64_t rows, int64_t len, float eps, int rms, const float *x, const float *scale,
                                    const float *bias, int ydtype, void *y, float *mean, float *inv_std, cudaStream_t st) {
    if (rows == 0) return cudaSuccess;
    CU_FLOAT_DISPATCH(ydtype, k_layernorm<T><<<row_blocks(rows), CU_THREADS, 0, st>>>(rows, len, (double)eps, rms, x, scale,
                                                                                      bias, (T *)y, mean, inv_std));
    return cudaGetLastError();
}

__global__ void k_layernorm_dx(int64_t rows, int64_t len, const float *dy, const float *x, const float *scale,
                               const float *mean, const float *inv_std, float *dx) {
    int lane = threadIdx.x & 31;
    CU_FOR_ROW(r, rows) {
        const float *dyr = dy + r * len, *xr = x + r * len;
        double m = mean ? mean[r] : 0, s = inv_std[r], sg = 0, sgx = 0; /* no mean: RMSNorm */
        for (int64_t k = lane; k < len; k += 32) {
            double xh = (xr[k] - m) * s, gk = (double)dyr[k] * scale[k];
            sg += gk;
            sgx += gk * xh;
        }
        sg = mean ? cu_warp_sum(sg) / (double)len : 0;
        sgx = cu_warp_sum(sgx) / (double)len;
        for (int64_t k = lane; k < len; k += 32) {
            double xh = (xr[k] - m) * s;
            dx[r * len + k] = (float)(s * ((double)dyr[k] * scale[k] - sg - xh * sgx));
        }
    }
}

/* Column sums: one thread per column over every row. */
__global__ void k_layernorm_dparams(int64_t rows, int64_t len, const float *dy, const float *x, const float *mean,
                                    const float *inv_std, float *dscale, float *dbias) {
    CU_FOR(k, len) {
        double a = 0, b = 0;
        for (int64_t r = 0; r < rows; r++) {
            double d = dy[r * len + k];
            a += d * ((x[r * len + k] - (mean ? (double)mean[r] : 0.0)) * (double)inv_std[r]);
            b += d;
        }
        if (dscale) dscale[k] = (float)a;
        if (dbias) dbias[k] = (float)b;
    }
}

extern "C" cudaError_t cu_layernorm_grad(int64_t rows, int64_t len, const float *dy, const float *x, const float *scale,
                                         const float *mean, const float *inv_std, float *dx, float *dscale,
                                         float *dbias, cudaStream_t st) {
    if (dx && rows) k_layernorm_dx<<<row_blocks(rows), CU_THREADS, 0, st>>>(rows, len, dy, x, scale, mean, inv_std, dx);
    cudaError_t e = cudaGetLastError();
    if (e || (!dscale && !dbias) || !len) return e;
    k_layernorm_dparams<<<cu_blocks(len), CU_THREADS, 0, st>>>(rows, len, dy, x, mean, inv_std, dscale, dbias);
    return cudaGetLastError();
}

/* ---- BatchNormalization: one block per channel ---- */

#define BN_THREADS 512

__device__ static inline int64_t bn_at(int64_t c, int64_t channels, int64_t plane, int64_t i) {
    return ((i / plane) * channels + c) * plane + i % plane;
}

/* x, y of type S (float32, float16 or bfloat16, read as float); the rest float32. */
template <typename S>
__global__ void k_batchnorm(int64_t n, int64_t channels, int64_t plane, int training, double eps, double momentum,
                            const S *x, const float *scale, const float *bias, const float *rmean,
                            const float *rvar, S *y, float *out_mean, float *out_var, float *saved_mean,
                            float *saved_inv) {
    int64_t c = blockIdx.x, count = n * plane;
    double mean, var;
    if (training) {
        double s = 0;
        for (int64_t i = threadIdx.x; i < count; i += blockDim.x) s += cu_ld(x, bn_at(c, channels, plane, i));
        mean = cu_block_sum(s) / (double)count;
        double q = 0;
        for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
            double v = cu_ld(x, bn_at(c, channels, plane, i)) - mean;
            q += v * v;
        }
        var = cu_block_sum(q) / (double)count;
    } else {
        mean = rmean[c];
        var = rvar[c];
    }
    double inv = 1 / sqrt(var + eps);
    double a = (double)scale[c] * inv;
    float fa = (float)a, fb = (float)((double)bias[c] - mean * a);
    if (y)
        for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
            int64_t at = bn_at(c, channels, plane, i);
            cu_st(y, at, __fadd_rn(__fmul_rn(cu_ld(x, at), fa), fb)); /* unfused, as the CPU computes it */
        }
    if (threadIdx.x == 0) {
        double rm = rmean ? (double)rmean[c] : 0, rv = rvar ? (double)rvar[c] : 0;
        double nm = training ? momentum * rm + (1 - momentum) * mean : rm;
        double nv = training ? momentum * rv + (1 - momentum) * var * (double)count / (double)(count - 1) : rv;
        if (out_mean) out_mean[c] = (float)nm;
        if (out_var) out_var[c] = (float)nv;
        if (saved_mean) saved_mean[c] = (float)mean;
        if (saved_inv) saved_inv[c] = (float)inv;
    }
}

extern "C" cudaError_t cu_batchnorm(int dtype, int64_t n, int64_t c, int64_t plane, int training, double eps,
                                    double momentum, const void *x, const float *scale, const float *bias,
                                    const float *rmean, const float *rvar, void *y, float *out_mean, float *out_var,
                                    float *saved_mean, float *saved_inv, cudaStream_t st) {
    if (c == 0) return cudaSuccess;
    CU_FLOAT_DISPATCH(dtype, k_batchnorm<T><<<(unsigned)c, BN_THREADS, 0, st>>>(n, c, plane, training, eps, momentum,
                                                                              (const T *)x, scale, bias, rmean, rvar,
                                                                              (T *)y, out_mean, out_var, saved_mean,
                                                                              saved_inv));
    return cudaGetLastError();
}

/* InstanceNormalization: block b * c normalises its plane by its own mean and (biased)
 * variance, in double, then y = x a + shift rounded once, as the CPU computes it. */
template <typename S>
__global__ void k_instancenorm(int64_t channels, int64_t plane, double eps, const S *x, const float *scale,
                               const float *bias, S *y) {
    int64_t p = blockIdx.x, c = p % channels, base = p * plane;
    double s = 0;
    for (int64_t i = threadIdx.x; i < plane; i += blockDim.x) s += cu_ld(x, base + i);
    double mean = plane ? cu_block_sum(s) / (double)plane : 0, q = 0;
    for (int64_t i = threadIdx.x; i < plane; i += blockDim.x) {
        double v = cu_ld(x, base + i) - mean;
        q += v * v;
    }
    double var = plane ? cu_block_sum(q) / (double)plane : 0;
    double a = (double)scale[c] / sqrt(var + eps), shift = (double)bias[c] - mean * a;
    for (int64_t i = threadIdx.x; i < plane; i += blockDim.x) cu_st(y, base + i, (float)(cu_ld(x, base + i) * a + shift));
}

extern "C" cudaError_t cu_instancenorm(int dtype, int64_t n, int64_t c, int64_t plane, double eps, const void *x,
                                       const float *scale, const float *bias, void *y, cudaStream_t st) {
    if (n * c == 0) return cudaSuccess;
    CU_FLOAT_DISPATCH(dtype, k_instancenorm<T><<<(unsigned)(n * c), BN_THREADS, 0, st>>>(c, plane, eps, (const T *)x,
                                                                                     scale, bias, (T *)y));
    return cudaGetLastError();
}

template <typename S>
__global__ void k_batchnorm_grad(int64_t n, int64_t channels, int64_t plane, const S *dy, const S *x,
                                 const float *scale, const float *mean, const float *inv, S *dx, float *dscale,
                                 float *dbias) {
    int64_t c = blockIdx.x, count = n * plane;
    double mu = mean[c], iv = inv[c], a = 0, b = 0;
    for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
        int64_t at = bn_at(c, channels, plane, i);
        double d = cu_ld(dy, at);
        a += d;
        b += d * ((double)cu_ld(x, at) - mu);
    }
    double sdy = cu_block_sum(a), sdyx = cu_block_sum(b);
    if (threadIdx.x == 0) {
        if (dbias) dbias[c] = (float)sdy;
        if (dscale) dscale[c] = (float)(sdyx * iv);
    }
    if (!dx || count == 0) return;
    double m = (double)count, k = (double)scale[c] * iv, cb = sdy / m, cx = iv * iv * sdyx / m;
    for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
        int64_t at = bn_at(c, channels, plane, i);
        cu_st(dx, at, (float)(k * ((double)cu_ld(dy, at) - cb - ((double)cu_ld(x, at) - mu) * cx)));
    }
}

extern "C" cudaError_t cu_batchnorm_grad(int dtype, int64_t n, int64_t c, int64_t plane, const void *dy, const void *x,
                                         const float *scale, const float *mean, const float *inv, void *dx,
                                         float *dscale, float *dbias, cudaStream_t st) {
    if (c == 0) return cudaSuccess;
    CU_FLOAT_DISPATCH(dtype, k_batchnorm_grad<T><<<(unsigned)c, BN_THREADS, 0, st>>>(n, c, plane, (const T *)dy,
                                                                                   (const T *)x, scale, mean, inv,
                                                                                   (T *)dx, dscale, dbias));
    return cudaGetLastError();
}

/* ---- global pooling: one warp per plane ---- */

__global__ void k_global_pool(int kind, int64_t planes, int64_t len, const float *x, float *y) {
    int lane = threadIdx.x & 31;
    CU_FOR_ROW(r, planes) {
        const float *p = x + r * len;
        double acc = kind ? 0.0 : -INFINITY;
        for (int64_t k = lane; k < len; k += 32) acc = kind ? acc + p[k] : fmax(acc, (double)p[k]);
        acc = kind ? cu_warp_sum(acc) / (double)len : cu_warp_max(acc);
        if (lane == 0) y[r] = (float)acc;
    }
}

extern "C" cudaError_t cu_global_pool(int kind, int64_t planes, int64_t len, const float *x, float *y, cudaStream_t st) {
    if (planes == 0) return cudaSuccess;
    k_global_pool<<<row_blocks(planes), CU_THREADS, 0, st>>>(kind, planes, len, x, y);
    return cudaGetLastError();
}

/* ---- SoftmaxCrossEntropyLoss ---- */

__device__ static inline int64_t label_at(const void *labels, int idx64, int64_t i) {
    return idx64 ? ((const int64_t *)labels)[i] : (int64_t)((const int32_t *)labels)[i];
}

/* One warp per position: log-softmax of its class fiber, the position's loss and weight
 * (into loss_w[2 * pos] when the reduction needs a second pass, else into y). */
__global__ void k_sce_positions(int64_t batch, int64_t classes, int64_t spatial, const float *x, const void *labels,
                                int idx64, const float *weights, int has_ignore, int64_t ignore, int reduction,
                                float *y, float *log_prob, double *sums) {
    int lane = threadIdx.x & 31;
    CU_FOR_ROW(pos, batch * spatial) {
        int64_t b = pos / spatial, d = pos % spatial, base = b * classes * spatial + d;
        double m = -INFINITY;
        for (int64_t k = lane; k < classes; k += 32) m = fmax(m, (double)x[base + k * spatial]);
        m = cu_warp_max(m);
        double s = 0;
        for (int64_t k = lane; k < classes; k += 32) s += exp((double)x[base + k * spatial] - m);
        double ls = log(cu_warp_sum(s));
        if (log_prob)
            for (int64_t k = lane; k < classes; k += 32)
                log_prob[base + k * spatial] = (float)(((double)x[base + k * spatial] - m) - ls);
        if (lane == 0) {
            int64_t t = label_at(labels, idx64, pos);
            double loss = 0, w = 0;
            if (!(has_ignore && t == ignore) && t >= 0 && t < classes) {
                w = weights ? (double)weights[t] : 1.0;
                loss = -(((double)x[base + t * spatial] - m) - ls) * w;
            }
            if (reduction == 0) {
                if (y) y[pos] = (float)loss;
            } else {
                atomicAdd(&sums[0], loss);
                atomicAdd(&sums[1], w);
            }
        }
    }
}

__global__ void k_sce_finish(int reduction, const double *sums, float *y) {
    y[0] = (float)(reduction == 1 ? sums[0] : sums[0] / sums[1]);
}

extern "C" cudaError_t cu_sce_loss(int64_t batch, int64_t classes, int64_t spatial, const float *x, const void *labels,
                                   int idx64, const float *weights, int has_ignore, int64_t ignore, int reduction,
                                   float *y, float *log_prob, double *scratch, cudaStream_t st) {
    cudaError_t e = reduction ? cudaMemsetAsync(scratch, 0, 2 * sizeof(double), st) : cudaSuccess;
    if (e) return e;
    int64_t rows = batch * spatial;
    if (rows)
        k_sce_positions<<<row_blocks(rows), CU_THREADS, 0, st>>>(batch, classes, spatial, x, labels, idx64, weights,
                                                                 has_ignore, ignore, reduction, y, log_prob, scratch);
    e = cudaGetLastError();
    if (e || !reduction || !y) return e;
    k_sce_finish<<<1, 1, 0, st>>>(reduction, scratch, y);
    return cudaGetLastError();
}

__global__ void k_sce_total(int64_t count, int64_t classes, const void *labels, int idx64, const float *weights,
                            int64_t ignore, double *total) {
    double acc = 0;
    for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
        int64_t c = label_at(labels, idx64, i);
        if (c == ignore || c < 0 || c >= classes) continue;
        acc += weights ? (double)weights[c] : 1.0;
    }
    acc = cu_block_sum(acc);
    if (threadIdx.x == 0) total[0] = acc;
}

__global__ void k_sce_grad(int64_t batch, int64_t classes, int64_t spatial, const float *dy, const float *lp,
                           const void *labels, int idx64, const float *weights, int64_t ignore, int reduction,
                           const float *bias, float *dx, const double *total) {
    CU_FOR(at, batch * classes * spatial) {
        int64_t d = at % spatial, k = (at / spatial) % classes, b = at / (spatial * classes);
        int64_t pos = b * spatial + d, c = label_at(labels, idx64, pos);
        double g = 0;
        if (c != ignore && c >= 0 && c < classes) {
            double s = (double)dy[reduction == 0 ? pos : 0] * (weights ? (double)weights[c] : 1.0);
            if (reduction == 2) s /= total[0];
            g = s * (exp((double)lp[at]) - (k == c ? 1.0 : 0.0));
        }
        if (bias) g += bias[at];
        dx[at] = (float)g;
    }
}

extern "C" cudaError_t cu_sce_loss_grad(int64_t batch, int64_t classes, int64_t spatial, const float *dy,
                                        const float *log_prob, const void *labels, int idx64, const float *weights,
                                        int64_t ignore, int reduction, const float *bias, float *dx, double *scratch,
                                        cudaStream_t st) {
    if (reduction == 2) k_sce_total<<<1, 1024, 0, st>>>(batch * spatial, classes, labels, idx64, weights, ignore, scratch);
    cudaError_t e = cudaGetLastError();
    int64_t total = batch * classes * spatial;
    if (e || total == 0) return e;
    k_sce_grad<<<cu_blocks(total), CU_THREADS, 0, st>>>(batch, classes, spatial, dy, log_prob, labels, idx64, weights,
                                                         ignore, reduction, bias, dx, scratch);
    return cudaGetLastError();
}
