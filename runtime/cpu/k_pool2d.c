/* 2-D float32 max pooling in output rows (k_pool2d.h).
 *
 * In: planes of x and the window.  Out: y and the argmax record a.  Keeps true: every
 * window's result is k_pool.c's (argmax_k): its kernel offsets visited in row-major
 * order, each read element taken when it exceeds the best so far or the best is NaN,
 * the first read taken always (the best starts as NaN), padding never read.  Here the
 * offsets are the outer loop and a row of outputs the inner one, so each offset is a
 * strided run of loads the compiler vectorises with selects; each output still sees its
 * offsets in the same order, so the bits are the tap walk's.  Planes are independent:
 * the same bits whatever the threads. */
#include "k_pool2d.h"

#include <math.h>
#include <string.h>

#include "cpu_par.h"
#include "cpu_simd.h"

enum { ROW_MAX = 1024, NONE = 255 };

typedef struct pool2d_job {
    const vp_window *w;
    const float *x, *dy, *y_in;
    float *y;
    uint8_t *a;
    const uint8_t *a_in;
} pool2d_job;

/* Outputs [lo, hi) of a row whose kernel offset kx reads x inside [0, width). */
static void ox_range(const vp_window *w, int64_t kx, int64_t *lo, int64_t *hi) {
    int64_t s = w->stride[1], first = w->pad_begin[1] - kx * w->dilation[1]; /* ox * s >= first */
    int64_t l = first <= 0 ? 0 : (first + s - 1) / s;
    int64_t last = w->in[1] - 1 + first;                                    /* ox * s <= last */
    int64_t h = last < 0 ? 0 : last / s + 1;
    *lo = l;
    *hi = h < w->out[1] ? h : w->out[1];
}

/* One kernel offset over count outputs of a row: xr[i * s] against the best.  The
 * offsets ride in int32 lanes beside the floats (uint8 lanes made the vectors four
 * times as wide as a row); strides 1 and 2, the usual, are constants to the compiler,
 * which then loads (and for 2 deinterleaves) whole vectors. */
static inline __attribute__((always_inline)) void row_update_s(const float *xr, int64_t s, int64_t count, int32_t k,
                                                               float *bv, int32_t *bk) {
    for (int64_t i = 0; i < count; i++) {
        float v = xr[i * s], b = bv[i];
        int take = (v > b) | (b != b);
        bv[i] = take ? v : b;
        bk[i] = take ? k : bk[i];
    }
}

VP_SIMD static void row_update(const float *xr, int64_t s, int64_t count, int32_t k, float *bv, int32_t *bk) {
    if (s == 1) row_update_s(xr, 1, count, k, bv, bk);
    else if (s == 2) row_update_s(xr, 2, count, k, bv, bk);
    else row_update_s(xr, s, count, k, bv, bk);
}

static void pool2d_planes(int64_t p0, int64_t p1, void *ctx) {
    const pool2d_job *j = ctx;
    const vp_window *w = j->w;
    int64_t H = w->in[0], W = w->in[1], OH = w->out[0], OW = w->out[1];
    int64_t KH = w->kernel[0], KW = w->kernel[1];
    float bv[ROW_MAX];
    int32_t bk[ROW_MAX];
    for (int64_t p = p0; p < p1; p++) {
        const float *xp = j->x + p * H * W;
        for (int64_t oy = 0; oy < OH; oy++) {
            for (int64_t ox = 0; ox < OW; ox++) {
                bv[ox] = NAN;
                bk[ox] = NONE;
            }
            for (int64_t ky = 0; ky < KH; ky++) {
                int64_t iy = oy * w->stride[0] - w->pad_begin[0] + ky * w->dilation[0];
                if (iy < 0 || iy >= H) continue;
                for (int64_t kx = 0; kx < KW; kx++) {
                    int64_t lo, hi;
                    ox_range(w, kx, &lo, &hi);
                    if (lo >= hi) continue;
                    const float *xr = xp + iy * W + lo * w->stride[1] - w->pad_begin[1] + kx * w->dilation[1];
                    row_update(xr, w->stride[1], hi - lo, (int32_t)(ky * KW + kx), bv + lo, bk + lo);
                }
            }
            float *yr = j->y + (p * OH + oy) * OW;
            for (int64_t ox = 0; ox < OW; ox++) yr[ox] = bk[ox] == NONE ? -INFINITY : bv[ox];
            if (j->a)
                for (int64_t ox = 0; ox < OW; ox++) j->a[(p * OH + oy) * OW + ox] = (uint8_t)bk[ox];
        }
    }
}

int vp_pool2d_max_f32(const vp_window *w, int64_t planes, const float *x, float *y, uint8_t *a) {
    if (w->n_sp != 2 || w->out[1] > ROW_MAX || w->kernel[0] * w->kernel[1] >= NONE) return 0;
    pool2d_job j = {.w = w, .x = x, .y = y, .a = a};
    vp_par_for(planes, w->out[0] * w->out[1] * w->kernel[0] * w->kernel[1], pool2d_planes, &j);
    return 1;
}

/* dX of planes [p0, p1): zeroed, then each window's dY added at the offset A recorded,
 * windows in output order as k_pool.c's scatter adds them. */
static void scatter_planes(int64_t p0, int64_t p1, void *ctx) {
    const pool2d_job *j = ctx;
    const vp_window *w = j->w;
    int64_t H = w->in[0], W = w->in[1], OH = w->out[0], OW = w->out[1], KW = w->kernel[1];
    int64_t step[NONE]; /* kernel offset k's element, from the window's corner */
    for (int64_t k = 0; k < w->kernel[0] * KW; k++) step[k] = k / KW * w->dilation[0] * W + k % KW * w->dilation[1];
    for (int64_t p = p0; p < p1; p++) {
        float *dx = j->y + p * H * W;
        memset(dx, 0, (size_t)(H * W) * sizeof *dx);
        for (int64_t oy = 0; oy < OH; oy++) {
            int64_t at = (p * OH + oy) * OW;
            const uint8_t *ar = j->a_in + at;
            const float *dyr = j->dy + at, *yr = j->y_in ? j->y_in + at : NULL;
            /* x[corner + step[k]] is element k of window (oy, ox): corner may lie in the padding */
            int64_t corner = (oy * w->stride[0] - w->pad_begin[0]) * W - w->pad_begin[1];
            for (int64_t ox = 0; ox < OW; ox++, corner += w->stride[1]) {
                if (ar[ox] == NONE || (yr && !(yr[ox] > 0))) continue;
                dx[corner + step[ar[ox]]] += dyr[ox];
            }
        }
    }
}

int vp_pool2d_max_scatter_f32(const vp_window *w, int64_t planes, const float *dy, const uint8_t *a, const float *y,
                              float *dx) {
    if (w->n_sp != 2 || w->kernel[0] * w->kernel[1] >= NONE) return 0;
    pool2d_job j = {.w = w, .dy = dy, .a_in = a, .y_in = y, .y = dx};
    vp_par_for(planes, w->in[0] * w->in[1] + w->out[0] * w->out[1], scatter_planes, &j);
    return 1;
}
