/* runtime/cpu/k_pool2d.c, the row-wise 2-D float32 max pooling and its gradient, against
 * the definition every MaxPool path shares (k_pool.c's tap walk): each window's kernel
 * offsets in row-major order, an element read where its coordinate lies inside the
 * input, taken when it is the window's first read, exceeds the best so far, or the best
 * is NaN; Y the best (-inf when the window reads nothing), A the offset taken (255 for
 * none); dX zeroed, then each window's dY added at A's offset in output order (where
 * Y > 0, for MaxPoolReluGrad).
 *
 * Windows drawn at random (kernel 1-4, stride 1-3, dilation 1-2, padding up to the
 * kernel's extent, one output more than fits, so some windows read nothing), over data
 * full of ties, NaNs and infinities; run on 1 thread and on 2 with the work split as
 * finely as it goes: Y's and dX's bits and A must match the definition's exactly. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cpu_host.h"
#include "cpu_par.h"
#include "k_pool2d.h"
#include "ir/rng.h"

enum { CASES = 400 };

static void reference(const vp_window *w, int64_t planes, const float *x, float *y, uint8_t *a) {
    for (int64_t p = 0; p < planes; p++)
        for (int64_t oy = 0; oy < w->out[0]; oy++)
            for (int64_t ox = 0; ox < w->out[1]; ox++) {
                int best = -1;
                float bv = 0;
                for (int64_t ky = 0; ky < w->kernel[0]; ky++)
                    for (int64_t kx = 0; kx < w->kernel[1]; kx++) {
                        int64_t iy = oy * w->stride[0] - w->pad_begin[0] + ky * w->dilation[0];
                        int64_t ix = ox * w->stride[1] - w->pad_begin[1] + kx * w->dilation[1];
                        if (iy < 0 || iy >= w->in[0] || ix < 0 || ix >= w->in[1]) continue;
                        float v = x[(p * w->in[0] + iy) * w->in[1] + ix];
                        if (best < 0 || v > bv || isnan(bv)) {
                            best = (int)(ky * w->kernel[1] + kx);
                            bv = v;
                        }
                    }
                int64_t at = (p * w->out[0] + oy) * w->out[1] + ox;
                y[at] = best < 0 ? -INFINITY : bv;
                a[at] = best < 0 ? 255 : (uint8_t)best;
            }
}

/* k_pool.c's scatter from A: dX zeroed, each window's dY added at its offset, windows
 * in output order, only where y (when given) is positive. */
static void reference_scatter(const vp_window *w, int64_t planes, const float *dy, const uint8_t *a, const float *y,
                              float *dx) {
    memset(dx, 0, (size_t)(planes * w->in[0] * w->in[1]) * sizeof *dx);
    for (int64_t p = 0; p < planes; p++)
        for (int64_t o = 0; o < w->out[0] * w->out[1]; o++) {
            int64_t at = p * w->out[0] * w->out[1] + o, oy = o / w->out[1], ox = o % w->out[1];
            if (a[at] == 255 || (y && !(y[at] > 0))) continue;
            int64_t iy = oy * w->stride[0] - w->pad_begin[0] + a[at] / w->kernel[1] * w->dilation[0];
            int64_t ix = ox * w->stride[1] - w->pad_begin[1] + a[at] % w->kernel[1] * w->dilation[1];
            dx[(p * w->in[0] + iy) * w->in[1] + ix] += dy[at];
        }
}

static int64_t draw(vp_rng *r, int64_t lo, int64_t hi) { return lo + (int64_t)(vp_rng_next(r) % (uint64_t)(hi - lo + 1)); }

static void one_case(vp_rng *r, int c) {
    vp_window w = {.n_sp = 2};
    for (int d = 0; d < 2; d++) {
        w.in[d] = draw(r, 1, 13);
        w.kernel[d] = draw(r, 1, 4);
        w.stride[d] = draw(r, 1, 3);
        w.dilation[d] = draw(r, 1, 2);
        int64_t extent = (w.kernel[d] - 1) * w.dilation[d] + 1;
        w.pad_begin[d] = draw(r, 0, extent - 1);
        w.pad_end[d] = draw(r, 0, extent - 1);
        int64_t span = w.in[d] + w.pad_begin[d] + w.pad_end[d] - extent;
        w.out[d] = (span < 0 ? 0 : span / w.stride[d] + 1) + draw(r, 0, 1);
        if (w.out[d] < 1) w.out[d] = 1;
    }
    int64_t planes = draw(r, 1, 5), nx = planes * w.in[0] * w.in[1], ny = planes * w.out[0] * w.out[1];
    float *x = malloc((size_t)nx * sizeof *x), *y_ref = malloc((size_t)ny * sizeof *y_ref);
    float *y = malloc((size_t)ny * sizeof *y);
    uint8_t *a_ref = malloc((size_t)ny), *a = malloc((size_t)ny);
    static const float pool[] = {-2, -1, 0, 1, 2, NAN, -INFINITY, INFINITY, -0.0f};
    for (int64_t i = 0; i < nx; i++) {
        uint64_t u = vp_rng_next(r) % 16;
        x[i] = u < 9 ? pool[u] : (float)(vp_rng_uniform(r) * 4 - 2);
    }
    reference(&w, planes, x, y_ref, a_ref);
    float *dy = malloc((size_t)ny * sizeof *dy), *dx_ref = malloc((size_t)nx * sizeof *dx_ref);
    float *dx = malloc((size_t)nx * sizeof *dx);
    for (int64_t i = 0; i < ny; i++) dy[i] = (float)(vp_rng_uniform(r) * 2 - 1);
    int relu = (int)(vp_rng_next(r) % 2); /* MaxPoolReluGrad reads Y; MaxPoolInputGrad from A would not */
    reference_scatter(&w, planes, dy, a_ref, relu ? y_ref : NULL, dx_ref);
    for (int threads = 1; threads <= 2; threads++) {
        vp_par_set_threads(threads);
        memset(y, 0x5a, (size_t)ny * sizeof *y);
        memset(a, 0x5a, (size_t)ny);
        int took = vp_pool2d_max_f32(&w, planes, x, y, a);
        int same = took && !memcmp(y, y_ref, (size_t)ny * sizeof *y) && !memcmp(a, a_ref, (size_t)ny);
        check_quiet(same, "case %d (%d threads): in %lldx%lld kernel %lldx%lld stride %lldx%lld dilation %lldx%lld "
                    "pads %lld,%lld,%lld,%lld out %lldx%lld: %s", c, threads, (long long)w.in[0], (long long)w.in[1],
                    (long long)w.kernel[0], (long long)w.kernel[1], (long long)w.stride[0], (long long)w.stride[1],
                    (long long)w.dilation[0], (long long)w.dilation[1], (long long)w.pad_begin[0],
                    (long long)w.pad_begin[1], (long long)w.pad_end[0], (long long)w.pad_end[1],
                    (long long)w.out[0], (long long)w.out[1], took ? "differs from the definition" : "not taken");
        memset(dx, 0x5a, (size_t)nx * sizeof *dx);
        took = vp_pool2d_max_scatter_f32(&w, planes, dy, a_ref, relu ? y_ref : NULL, dx);
        check_quiet(took && !memcmp(dx, dx_ref, (size_t)nx * sizeof *dx), "case %d (%d threads): dX %s", c, threads,
                    took ? "differs from the definition's sums" : "not taken");
    }
    free(dy);
    free(dx_ref);
    free(dx);
    free(x);
    free(y_ref);
    free(y);
    free(a_ref);
    free(a);
}

int main(void) {
    vp_cpu_host_install();
    vp_par_set_min_work(1);
    vp_rng r = {2024};
    for (int c = 0; c < CASES; c++) one_case(&r, c);
    check(1, "%d random windows on 1 and 2 threads", CASES);
    vp_window wide = {.n_sp = 2, .in = {1, 5000}, .out = {1, 5000}, .kernel = {1, 1}, .stride = {1, 1},
                      .dilation = {1, 1}};
    check(!vp_pool2d_max_f32(&wide, 1, NULL, NULL, NULL), "rows longer than it holds are left to the tap walk");
    return check_summary();
}
