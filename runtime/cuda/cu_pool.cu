/* Pooling over 1-D and 2-D windows: MaxPool (with its Indices), AveragePool and their
 * gradients MaxPoolGrad (from the Indices), vplan.MaxPoolInputGrad (from X) and
 * AveragePoolGrad, in float32, float16 and bfloat16 (cu_lowp.cuh).
 *
 * The windows are runtime/cpu/k_pool.c's: a tap inside the input, in the explicit
 * padding, or beyond it (ceil_mode); the largest element is the first largest in the
 * window's row-major order, a NaN once seen staying.  The gradients gather: each input
 * element visits the windows covering it in ascending output order and sums in float,
 * the order and precision in which the CPU scatters, so no atomics and the same sums. */
#include <math.h>
#include <stdint.h>

#include "cu_common.cuh"
#include "cu_lowp.cuh"

enum { TAP_IN = 0, TAP_PAD = 1, TAP_BEYOND = 2 };

__device__ static inline int pool_tap(const cu_pool_geom &g, int64_t oy, int64_t ox, int64_t ky, int64_t kx,
                                      int64_t *off) {
    int64_t iy = oy * g.sh - g.ph + ky * g.dh, ix = ox * g.sw - g.pw + kx * g.dw;
    if (iy < -g.ph || iy >= g.h + g.peh || ix < -g.pw || ix >= g.w + g.pew) return TAP_BEYOND;
    if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) return TAP_PAD;
    *off = iy * g.w + ix;
    return TAP_IN;
}

/* Offset in the plane of window (oy, ox)'s largest element, -1 when it reads none. */
template <typename T> __device__ static inline int64_t pool_argmax(const cu_pool_geom &g, const T *xp, int64_t oy, int64_t ox) {
    int64_t best = -1;
    float bv = 0;
    for (int64_t ky = 0; ky < g.kh; ky++)
        for (int64_t kx = 0; kx < g.kw; kx++) {
            int64_t off;
            if (pool_tap(g, oy, ox, ky, kx, &off) != TAP_IN) continue;
            float v = cu_ld(xp, off);
            if (best < 0 || v > bv || isnan(bv)) {
                best = off;
                bv = v;
            }
        }
    return best;
}

/* How many elements window (oy, ox) averages over. */
__device__ static inline int64_t pool_count(const cu_pool_geom &g, int64_t oy, int64_t ox) {
    int64_t c = 0, off;
    for (int64_t ky = 0; ky < g.kh; ky++)
        for (int64_t kx = 0; kx < g.kw; kx++) {
            int t = pool_tap(g, oy, ox, ky, kx, &off);
            c += t == TAP_IN || (t == TAP_PAD && g.count_include_pad);
        }
    return c;
}

/* ---- forward ---- */

/* kind 0 max (idx, when not NULL, gets the flat index: row-major, or column-major
 * within the plane with col_major), 1 average. */
template <typename T>
__global__ void k_pool2d(int kind, cu_pool_geom g, const T *x, T *y, int64_t *idx, int col_major) {
    int64_t total = g.planes * g.oh * g.ow, ivol = g.h * g.w;
    CU_FOR(i, total) {
        int64_t ox = i % g.ow, oy = (i / g.ow) % g.oh, p = i / (g.ow * g.oh);
        const T *xp = x + p * ivol;
        if (kind == 0) {
            int64_t best = pool_argmax(g, xp, oy, ox);
            cu_st(y, i, best < 0 ? -INFINITY : cu_ld(xp, best));
            if (idx) {
                int64_t b = best < 0 ? 0 : best;
                idx[i] = p * ivol + (col_major ? (b % g.w) * g.h + b / g.w : b);
            }
            continue;
        }
        double sum = 0;
        int64_t off;
        for (int64_t ky = 0; ky < g.kh; ky++)
            for (int64_t kx = 0; kx < g.kw; kx++)
                if (pool_tap(g, oy, ox, ky, kx, &off) == TAP_IN) sum += cu_ld(xp, off);
        int64_t count = pool_count(g, oy, ox);
        cu_st(y, i, count ? (float)(sum / (double)count) : 0.0f);
    }
}

extern "C" cudaError_t cu_pool2d(int kind, int dtype, const cu_pool_geom *g, const void *x, void *y, int64_t *idx,
                                 int col_major, cudaStream_t st) {
    int64_t total = g->planes * g->oh * g->ow;
    if (total == 0) return cudaSuccess;
    CU_FLOAT_DISPATCH(dtype, k_pool2d<T><<<cu_blocks(total), CU_THREADS, 0, st>>>(kind, *g, (const T *)x, (T *)y, idx, col_major));
    return cudaGetLastError();
}

/* ---- gradients ---- */

/* kind 0: MaxPoolGrad (idx), 1: MaxPoolInputGrad (x), 2: AveragePoolGrad. */
template <typename T>
__global__ void k_pool2d_grad(int kind, cu_pool_geom g, const T *dy, const int64_t *idx, const T *x, T *dx) {
    int64_t total = g.planes * g.h * g.w, ivol = g.h * g.w, ovol = g.oh * g.ow;
    CU_FOR(i, total) {
        int64_t ix = i % g.w, iy = (i / g.w) % g.h, p = i / ivol, here = iy * g.w + ix;
        float acc = 0;
        /* ky, kx downwards: the covering windows in ascending output order */
        for (int64_t ky = g.kh - 1; ky >= 0; ky--) {
            int64_t ty = iy + g.ph - ky * g.dh;
            if (ty < 0 || ty % g.sh) continue;
            int64_t oy = ty / g.sh;
            if (oy >= g.oh) continue;
            for (int64_t kx = g.kw - 1; kx >= 0; kx--) {
                int64_t tx = ix + g.pw - kx * g.dw;
                if (tx < 0 || tx % g.sw) continue;
                int64_t ox = tx / g.sw;
                if (ox >= g.ow) continue;
                int64_t o = p * ovol + oy * g.ow + ox;
                if (kind == 0) {
                    if (idx[o] == p * ivol + here) acc += cu_ld(dy, o);
                } else if (kind == 1) {
                    if (pool_argmax(g, x + p * ivol, oy, ox) == here) acc += cu_ld(dy, o);
                } else {
                    int64_t count = pool_count(g, oy, ox);
                    if (count) acc += cu_ld(dy, o) / (float)count;
                }
            }
        }
        cu_st(dx, i, acc);
    }
}

extern "C" cudaError_t cu_pool2d_grad(int kind, int dtype, const cu_pool_geom *g, const void *dy, const int64_t *idx,
                                      const void *x, void *dx, cudaStream_t st) {
    int64_t total = g->planes * g->h * g->w;
    if (total == 0) return cudaSuccess;
    CU_FLOAT_DISPATCH(dtype, k_pool2d_grad<T><<<cu_blocks(total), CU_THREADS, 0, st>>>(kind, *g, (const T *)dy, idx,
                                                                                       (const T *)x, (T *)dx));
    return cudaGetLastError();
}
