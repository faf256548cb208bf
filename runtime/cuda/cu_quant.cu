/* vplan.FakeQuant, FakeQuantGrad, QuantObserver and QuantParams on the GPU, float32
 * (planner/ops/quant.c says what they compute; runtime/cpu/k_fake_quant.c is the
 * reference).  Elementwise work is a grid-stride loop doing the CPU's operations in the
 * CPU's order, with no contraction (__fmul_rn), so values and masks agree bit for bit;
 * LSQ's scale gradient and the observer's range are one block per channel, the sums in
 * double in a fixed order (no atomics), so a run repeats itself. */
#include <float.h>
#include <math.h>

#include "cu_common.cuh"
#include "cu_quant.h"
#include "quant/qparams.h"

__device__ static inline float level(float x, float inv, float z) { return rintf(__fmul_rn(x, inv)) + z; }

__global__ static void k_fake_quant(cu_quant_shape g, const float *x, const float *s, const float *z, float *y,
                                    uint8_t *mask) {
    int64_t n = g.outer * g.channels * g.inner;
    CU_FOR(i, n) {
        int64_t c = (i / g.inner) % g.channels;
        float q = level(x[i], 1.0f / s[c], z[c]);
        if (mask) mask[i] = q >= g.lo && q <= g.hi;
        float qc = q < g.lo ? g.lo : q > g.hi ? g.hi : q;
        y[i] = __fmul_rn(qc - z[c], s[c]);
    }
}

__global__ static void k_fake_quant_dx(cu_quant_shape g, const float *dy, const float *x, const uint8_t *mask,
                                       const float *s, const float *z, float *dx) {
    int64_t n = g.outer * g.channels * g.inner;
    CU_FOR(i, n) {
        int in_range;
        if (mask) in_range = mask[i];
        else {
            int64_t c = (i / g.inner) % g.channels;
            float q = level(x[i], 1.0f / s[c], z[c]);
            in_range = q >= g.lo && q <= g.hi;
        }
        dx[i] = in_range ? dy[i] : 0.0f;
    }
}

/* One block per channel: LSQ's d(fake-quant)/ds summed over the channel's elements. */
__global__ static void k_fake_quant_dscale(cu_quant_shape g, const float *dy, const float *x, const float *s,
                                           const float *z, float *ds) {
    int64_t c = blockIdx.x, per = g.outer * g.inner;
    float inv = 1.0f / s[c];
    double sum = 0;
    for (int64_t k = threadIdx.x; k < per; k += blockDim.x) {
        int64_t i = ((k / g.inner) * g.channels + c) * g.inner + k % g.inner;
        float q = level(x[i], inv, z[c]);
        double t;
        if (q < g.lo) t = g.lo - z[c];
        else if (q > g.hi) t = g.hi - z[c];
        else t = (double)__fmul_rn(__fmul_rn(q - z[c], s[c]) - x[i], inv);
        sum += t * dy[i];
    }
    sum = cu_block_sum(sum);
    if (threadIdx.x == 0) ds[c] = (float)(sum * g.grad_factor);
}

__device__ static inline float block_max_f(float v) {
    __shared__ float part[32];
    __shared__ float total;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();
    if (lane == 0) part[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float m = lane < warps ? part[lane] : -INFINITY;
        for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        if (lane == 0) total = m;
    }
    __syncthreads();
    return total;
}

/* One block per channel: the channel's range, then the moving average; reads the step
 * count, which the next kernel advances (count' may be count's storage). */
__global__ static void k_observer(cu_quant_shape g, const float *x, const float *lo, const float *hi, const float *count,
                                  float *lo2, float *hi2, float averaging, int64_t freeze_after) {
    int64_t c = blockIdx.x, per = g.outer * g.inner;
    float n_seen = *count, l = lo[c], h = hi[c];
    int frozen = (freeze_after > 0 && n_seen >= (float)freeze_after) || per == 0;
    if (!frozen) {
        float bmax = -INFINITY, bneg = -INFINITY; /* max(x) and max(-x) */
        for (int64_t k = threadIdx.x; k < per; k += blockDim.x) {
            float v = x[((k / g.inner) * g.channels + c) * g.inner + k % g.inner];
            bmax = fmaxf(bmax, v);
            bneg = fmaxf(bneg, -v);
        }
        bmax = block_max_f(bmax);
        float bmin = -block_max_f(bneg);
        if (n_seen == 0 || averaging == 1.0f) l = bmin, h = bmax;
        else l = l + __fmul_rn(averaging, bmin - l), h = h + __fmul_rn(averaging, bmax - h);
    }
    __syncthreads(); /* every thread has read lo[c] and hi[c] before they are written */
    if (threadIdx.x == 0) lo2[c] = l, hi2[c] = h;
}

__global__ static void k_count(const float *count, float *count2) { *count2 = *count + 1.0f; }

__global__ static void k_qparams(int64_t n, const float *lo, const float *hi, int qmin, int qmax, int symmetric, float *s,
                                 float *z) {
    CU_FOR(i, n) vp_quant_params(lo[i], hi[i], qmin, qmax, symmetric, &s[i], &z[i]);
}

extern "C" cudaError_t cu_fake_quant(const cu_quant_shape *s, const float *x, const float *scale, const float *zp,
                                     float *y, uint8_t *mask, cudaStream_t st) {
    int64_t n = s->outer * s->channels * s->inner;
    if (n) k_fake_quant<<<cu_blocks(n), CU_THREADS, 0, st>>>(*s, x, scale, zp, y, mask);
    return cudaGetLastError();
}

extern "C" cudaError_t cu_fake_quant_grad(const cu_quant_shape *s, const float *dy, const float *x, const uint8_t *mask,
                                          const float *scale, const float *zp, float *dx, float *dscale, cudaStream_t st) {
    int64_t n = s->outer * s->channels * s->inner;
    if (n && dx) k_fake_quant_dx<<<cu_blocks(n), CU_THREADS, 0, st>>>(*s, dy, x, mask, scale, zp, dx);
    if (dscale) k_fake_quant_dscale<<<(unsigned)s->channels, CU_THREADS, 0, st>>>(*s, dy, x, scale, zp, dscale);
    return cudaGetLastError();
}

extern "C" cudaError_t cu_quant_observer(const cu_quant_shape *s, const float *x, const float *lo, const float *hi,
                                         const float *count, float *lo2, float *hi2, float *count2, float averaging,
                                         int64_t freeze_after, cudaStream_t st) {
    k_observer<<<(unsigned)s->channels, CU_THREADS, 0, st>>>(*s, x, lo, hi, count, lo2, hi2, averaging, freeze_after);
    k_count<<<1, 1, 0, st>>>(count, count2);
    return cudaGetLastError();
}

extern "C" cudaError_t cu_quant_params(int64_t n, const float *lo, const float *hi, int qmin, int qmax, int symmetric,
                                       float *scale, float *zp, cudaStream_t st) {
    if (n) k_qparams<<<cu_blocks(n), CU_THREADS, 0, st>>>(n, lo, hi, qmin, qmax, symmetric, scale, zp);
    return cudaGetLastError();
}
