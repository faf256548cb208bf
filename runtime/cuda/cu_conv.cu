/* Convolution (direct, one thread per output element), its gradients and 2-D pooling.
 *
 * Direct kernels need no column buffer, so nothing outside the plan's arena is
 * allocated; the weight gradient is one block per weight element summing over the
 * batch and the output plane.  Sums are kept in double, as on the CPU. */
#include <math.h>
#include <stdint.h>

#include "cu_common.cuh"

__global__ void k_conv2d(cu_conv_geom g, const float *x, const float *w, const float *b, float *y) {
    int64_t cg = g.c / g.group, mg = g.m / g.group, total = g.n * g.m * g.oh * g.ow;
    CU_FOR(i, total) {
        int64_t ox = i % g.ow, oy = (i / g.ow) % g.oh, m = (i / (g.ow * g.oh)) % g.m, n = i / (g.ow * g.oh * g.m);
        int64_t grp = m / mg;
        double acc = b ? (double)b[m] : 0.0;
        for (int64_t c = 0; c < cg; c++) {
            const float *xp = x + (n * g.c + grp * cg + c) * g.h * g.w;
            const float *wp = w + (m * cg + c) * g.kh * g.kw;
            for (int64_t ky = 0; ky < g.kh; ky++) {
                int64_t iy = oy * g.sh - g.ph + ky * g.dh;
                if (iy < 0 || iy >= g.h) continue;
                for (int64_t kx = 0; kx < g.kw; kx++) {
                    int64_t ix = ox * g.sw - g.pw + kx * g.dw;
                    if (ix < 0 || ix >= g.w) continue;
                    acc += (double)xp[iy * g.w + ix] * wp[ky * g.kw + kx];
                }
            }
        }
        y[i] = (float)acc;
    }
}

extern "C" cudaError_t cu_conv2d(const cu_conv_geom *g, const float *x, const float *w, const float *b, float *y,
                                 cudaStream_t st) {
    int64_t total = g->n * g->m * g->oh * g->ow;
    if (total == 0) return cudaSuccess;
    k_conv2d<<<cu_blocks(total), CU_THREADS, 0, st>>>(*g, x, w, b, y);
    return cudaGetLastError();
}

/* dX: each input element gathers from the outputs whose windows cover it. */
__global__ void k_conv2d_dx(cu_conv_geom g, const float *dy, const float *w, float *dx) {
    int64_t cg = g.c / g.group, mg = g.m / g.group, total = g.n * g.c * g.h * g.w;
    CU_FOR(i, total) {
        int64_t ix = i % g.w, iy = (i / g.w) % g.h, c = (i / (g.w * g.h)) % g.c, n = i / (g.w * g.h * g.c);
        int64_t grp = c / cg, cc = c % cg;
        double acc = 0;
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
                    acc += (double)dy[((n * g.m + m) * g.oh + oy) * g.ow + ox] * w[((m * cg + cc) * g.kh + ky) * g.kw + kx];
                }
            }
        }
        dx[i] = (float)acc;
    }
}

/* dW: one block per weight element. */
__global__ void k_conv2d_dw(cu_conv_geom g, const float *dy, const float *x, float *dw) {
    int64_t cg = g.c / g.group, mg = g.m / g.group, count = g.n * g.oh * g.ow;
    int64_t nw = g.m * cg * g.kh * g.kw;
    for (int64_t e = blockIdx.x; e < nw; e += gridDim.x) {
        int64_t kx = e % g.kw, ky = (e / g.kw) % g.kh, cc = (e / (g.kw * g.kh)) % cg, m = e / (g.kw * g.kh * cg);
        int64_t c = (m / mg) * cg + cc;
        double acc = 0;
        for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
            int64_t ox = j % g.ow, oy = (j / g.ow) % g.oh, n = j / (g.ow * g.oh);
            int64_t iy = oy * g.sh - g.ph + ky * g.dh, ix = ox * g.sw - g.pw + kx * g.dw;
            if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
            acc += (double)dy[((n * g.m + m) * g.oh + oy) * g.ow + ox] * x[((n * g.c + c) * g.h + iy) * g.w + ix];
        }
        acc = cu_block_sum(acc);
        if (threadIdx.x == 0) dw[e] = (float)acc;
    }
}

/* dB: one block per output channel. */
__global__ void k_conv2d_db(cu_conv_geom g, const float *dy, float *db) {
    int64_t plane = g.oh * g.ow, count = g.n * plane;
    for (int64_t m = blockIdx.x; m < g.m; m += gridDim.x) {
        double acc = 0;
        for (int64_t j = threadIdx.x; j < count; j += blockDim.x)
            acc += dy[((j / plane) * g.m + m) * plane + j % plane];
        acc = cu_block_sum(acc);
        if (threadIdx.x == 0) db[m] = (float)acc;
    }
}

static unsigned capped(int64_t n) { return (unsigned)(n < 1 ? 1 : n > 65535 * 16 ? 65535 * 16 : n); }

extern "C" cudaError_t cu_conv2d_grad(const cu_conv_geom *g, const float *dy, const float *x, const float *w, float *dx,
                                      float *dw, float *db, cudaStream_t st) {
    int64_t nx = g->n * g->c * g->h * g->w, nw = g->m * (g->c / g->group) * g->kh * g->kw;
    if (dx && nx) k_conv2d_dx<<<cu_blocks(nx), CU_THREADS, 0, st>>>(*g, dy, w, dx);
    cudaError_t e = cudaGetLastError();
    if (e) return e;
    if (dw && nw) k_conv2d_dw<<<capped(nw), CU_THREADS, 0, st>>>(*g, dy, x, dw);
    e = cudaGetLastError();
    if (e) return e;
    if (db && g->m) k_conv2d_db<<<capped(g->m), CU_THREADS, 0, st>>>(*g, dy, db);
    return cudaGetLastError();
}

/* ---- pooling ---- */

__global__ void k_pool2d(int kind, cu_pool_geom g, const float *x, float *y) {
    int64_t total = g.planes * g.oh * g.ow;
    CU_FOR(i, total) {
        int64_t ox = i % g.ow, oy = (i / g.ow) % g.oh, p = i / (g.ow * g.oh);
        const float *xp = x + p * g.h * g.w;
        double acc = kind ? 0.0 : -INFINITY;
        int64_t taps = 0;
        for (int64_t ky = 0; ky < g.kh; ky++) {
            int64_t iy = oy * g.sh - g.ph + ky * g.dh;
            for (int64_t kx = 0; kx < g.kw; kx++) {
                int64_t ix = ox * g.sw - g.pw + kx * g.dw;
                int inside = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w;
                if (kind && g.count_include_pad) {
                    /* padding counts, the part past the padded extent does not */
                    if (iy < g.h + g.ph && ix < g.w + g.pw) taps++;
                } else if (inside) taps++;
                if (!inside) continue;
                double v = xp[iy * g.w + ix];
                acc = kind ? acc + v : fmax(acc, v);
            }
        }
        y[i] = (float)(kind ? (taps ? acc / (double)taps : 0.0) : acc);
    }
}

extern "C" cudaError_t cu_pool2d(int kind, const cu_pool_geom *g, const float *x, float *y, cudaStream_t st) {
    int64_t total = g->planes * g->oh * g->ow;
    if (total == 0) return cudaSuccess;
    k_pool2d<<<cu_blocks(total), CU_THREADS, 0, st>>>(kind, *g, x, y);
    return cudaGetLastError();
}
