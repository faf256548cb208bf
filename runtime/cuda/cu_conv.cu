/* Convolution, 1-D to 3-D (direct, one thread per output element) and its gradients, in
 * float32, float16 and bfloat16 (every tensor of one type; cu_lowp.cuh): the fallback
 * where cuDNN is not built, switched off, or declines one (cuda_cudnn.c).
 *
 * Direct kernels need no column buffer, so nothing outside the plan's arena is
 * allocated; the weight gradient is one block per weight element summing over the
 * batch and the output plane.  Sums are kept in double, as on the CPU. */
#include <math.h>
#include <stdint.h>

#include "cu_common.cuh"
#include "cu_lowp.cuh"

template <typename T> __global__ void k_conv2d(cu_conv_geom g, const T *x, const T *w, const T *b, T *y) {
    int64_t cg = g.c / g.group, mg = g.m / g.group, total = g.n * g.m * g.od * g.oh * g.ow;
    CU_FOR(i, total) {
        int64_t ox = i % g.ow, oy = (i / g.ow) % g.oh, oz = (i / (g.ow * g.oh)) % g.od;
        int64_t m = (i / (g.ow * g.oh * g.od)) % g.m, n = i / (g.ow * g.oh * g.od * g.m);
        int64_t grp = m / mg;
        double acc = b ? (double)cu_ld(b, m) : 0.0;
        for (int64_t c = 0; c < cg; c++) {
            const T *xp = x + (n * g.c + grp * cg + c) * g.d * g.h * g.w;
            const T *wp = w + (m * cg + c) * g.kd * g.kh * g.kw;
            for (int64_t kz = 0; kz < g.kd; kz++) {
                int64_t iz = oz * g.sd - g.pd + kz * g.dd;
                if (iz < 0 || iz >= g.d) continue;
                for (int64_t ky = 0; ky < g.kh; ky++) {
                    int64_t iy = oy * g.sh - g.ph + ky * g.dh;
                    if (iy < 0 || iy >= g.h) continue;
                    for (int64_t kx = 0; kx < g.kw; kx++) {
                        int64_t ix = ox * g.sw - g.pw + kx * g.dw;
                        if (ix < 0 || ix >= g.w) continue;
                        acc += (double)cu_ld(xp, (iz * g.h + iy) * g.w + ix) * cu_ld(wp, (kz * g.kh + ky) * g.kw + kx);
                    }
                }
            }
        }
        cu_st(y, i, (float)acc);
    }
}

extern "C" cudaError_t cu_conv2d(int dtype, const cu_conv_geom *g, const void *x, const void *w, const void *b, void *y,
                                 cudaStream_t st) {
    int64_t total = g->n * g->m * g->od * g->oh * g->ow;
    if (total == 0) return cudaSuccess;
    CU_FLOAT_DISPATCH(dtype, k_conv2d<T><<<cu_blocks(total), CU_THREADS, 0, st>>>(*g, (const T *)x, (const T *)w,
                                                                                  (const T *)b, (T *)y));
    return cudaGetLastError();
}

template <typename T> __global__ void k_conv_bias(int64_t total, int64_t m, int64_t plane, const T *b, T *y) {
    CU_FOR(i, total) cu_st(y, i, (float)((double)cu_ld(y, i) + (double)cu_ld(b, (i / plane) % m)));
}

extern "C" cudaError_t cu_conv_bias(int dtype, int64_t n, int64_t m, int64_t plane, const void *b, void *y,
                                    cudaStream_t st) {
    int64_t total = n * m * plane;
    if (total == 0) return cudaSuccess;
    CU_FLOAT_DISPATCH(dtype, k_conv_bias<T><<<cu_blocks(total), CU_THREADS, 0, st>>>(total, m, plane, (const T *)b, (T *)y));
    return cudaGetLastError();
}

/* dX: each input element gathers from the outputs whose windows cover it. */
template <typename T> __global__ void k_conv2d_dx(cu_conv_geom g, const T *dy, const T *w, T *dx) {
    int64_t cg = g.c / g.group, mg = g.m / g.group, total = g.n * g.c * g.d * g.h * g.w;
    CU_FOR(i, total) {
        int64_t ix = i % g.w, iy = (i / g.w) % g.h, iz = (i / (g.w * g.h)) % g.d;
        int64_t c = (i / (g.w * g.h * g.d)) % g.c, n = i / (g.w * g.h * g.d * g.c);
        int64_t grp = c / cg, cc = c % cg;
        double acc = 0;
        for (int64_t kz = 0; kz < g.kd; kz++) {
            int64_t tz = iz + g.pd - kz * g.dd;
            if (tz < 0 || tz % g.sd) continue;
            int64_t oz = tz / g.sd;
            if (oz >= g.od) continue;
            for (int64_t ky = 0; ky < g.kh; ky++) {
                int64_t ty = iy + g.ph - ky * g.dh;
                if (ty < 0 || ty % g.sh) continue;
                int64_t oy = ty / g.sh;
                if (oy >= g.oh) continue;
                for (int64_t kx = 0; kx < g.kw; kx++) {
                    int64_t tx = ix + g.pw - kx * g.dw;
                    if (tx < 0 || tx % g.sw) continue;
                    int64_t ox = tx / g.sw;
                    if (ox >= g.ow) continue;
                    for (int64_t mm = 0; mm < mg; mm++) {
                        int64_t m = grp * mg + mm;
                        acc += (double)cu_ld(dy, (((n * g.m + m) * g.od + oz) * g.oh + oy) * g.ow + ox) *
                               cu_ld(w, (((m * cg + cc) * g.kd + kz) * g.kh + ky) * g.kw + kx);
                    }
                }
            }
        }
        cu_st(dx, i, (float)acc);
    }
}

/* dW: one block per weight element. */
template <typename T> __global__ void k_conv2d_dw(cu_conv_geom g, const T *dy, const T *x, T *dw) {
    int64_t cg = g.c / g.group, mg = g.m / g.group, count = g.n * g.od * g.oh * g.ow;
    int64_t nw = g.m * cg * g.kd * g.kh * g.kw;
    for (int64_t e = blockIdx.x; e < nw; e += gridDim.x) {
        int64_t kx = e % g.kw, ky = (e / g.kw) % g.kh, kz = (e / (g.kw * g.kh)) % g.kd;
        int64_t cc = (e / (g.kw * g.kh * g.kd)) % cg, m = e / (g.kw * g.kh * g.kd * cg);
        int64_t c = (m / mg) * cg + cc;
        double acc = 0;
        for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
            int64_t ox = j % g.ow, oy = (j / g.ow) % g.oh, oz = (j / (g.ow * g.oh)) % g.od, n = j / (g.ow * g.oh * g.od);
            int64_t iz = oz * g.sd - g.pd + kz * g.dd, iy = oy * g.sh - g.ph + ky * g.dh, ix = ox * g.sw - g.pw + kx * g.dw;
            if (iz < 0 || iz >= g.d || iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
            acc += (double)cu_ld(dy, (((n * g.m + m) * g.od + oz) * g.oh + oy) * g.ow + ox) *
                   cu_ld(x, (((n * g.c + c) * g.d + iz) * g.h + iy) * g.w + ix);
        }
        acc = cu_block_sum(acc);
        if (threadIdx.x == 0) cu_st(dw, e, (float)acc);
    }
}

/* dB: one block per output channel. */
template <typename T> __global__ void k_conv2d_db(cu_conv_geom g, const T *dy, T *db) {
    int64_t plane = g.od * g.oh * g.ow, count = g.n * plane;
    for (int64_t m = blockIdx.x; m < g.m; m += gridDim.x) {
        double acc = 0;
        for (int64_t j = threadIdx.x; j < count; j += blockDim.x)
            acc += cu_ld(dy, ((j / plane) * g.m + m) * plane + j % plane);
        acc = cu_block_sum(acc);
        if (threadIdx.x == 0) cu_st(db, m, (float)acc);
    }
}

static unsigned capped(int64_t n) { return (unsigned)(n < 1 ? 1 : n > 65535 * 16 ? 65535 * 16 : n); }

template <typename T>
static cudaError_t conv2d_grad(const cu_conv_geom *g, const T *dy, const T *x, const T *w, T *dx, T *dw, T *db,
                               cudaStream_t st) {
    int64_t nx = g->n * g->c * g->d * g->h * g->w, nw = g->m * (g->c / g->group) * g->kd * g->kh * g->kw;
    if (dx && nx) k_conv2d_dx<T><<<cu_blocks(nx), CU_THREADS, 0, st>>>(*g, dy, w, dx);
    cudaError_t e = cudaGetLastError();
    if (e) return e;
    if (dw && nw) k_conv2d_dw<T><<<capped(nw), CU_THREADS, 0, st>>>(*g, dy, x, dw);
    e = cudaGetLastError();
    if (e) return e;
    if (db && g->m) k_conv2d_db<T><<<capped(g->m), CU_THREADS, 0, st>>>(*g, dy, db);
    return cudaGetLastError();
}

extern "C" cudaError_t cu_conv2d_grad(int dtype, const cu_conv_geom *g, const void *dy, const void *x, const void *w,
                                      void *dx, void *dw, void *db, cudaStream_t st) {
    CU_FLOAT_DISPATCH(dtype, return conv2d_grad<T>(g, (const T *)dy, (const T *)x, (const T *)w, (T *)dx, (T *)dw,
                                                   (T *)db, st));
    return cudaErrorInvalidValue;
}
