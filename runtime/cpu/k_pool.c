/* MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool and LRN.
 *
 * Windowed pooling first lists, for every output position and kernel offset, which
 * input element it reads (a "tap"), or that it falls into the explicit padding, or
 * beyond it (ceil_mode windows that run past the padded input).  The per-plane loops
 * then only walk the taps, so one geometry serves every rank and dtype.  The planes
 * (batch x channel) of a block run on the threads (cpu_par.h): a plane reads and writes
 * only its own elements, in the same order whatever the split, so the bits do not
 * depend on the thread count. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_par.h"
#include "cpu_util.h"
#include "k_linalg.h"
#include "k_pool2d.h"
#include "k_train.h"

enum { TAP_PAD = -1, TAP_BEYOND = -2 };

/* Taps are listed for a block of output positions at a time, so their memory stays
 * bounded (about 512 KiB unless one window alone is larger) whatever the volume. */
enum { TAPS_PER_BLOCK = 1 << 16 };

/* taps[o * kvol + k]: input offset read by output position o0 + o at kernel offset k. */
static void pool_taps_fill(const vp_window *w, int64_t o0, int64_t count, int64_t kvol, int64_t *taps) {
    int64_t idx[VP_MAX_SPATIAL], k[VP_MAX_SPATIAL];
    for (int64_t o = 0; o < count; o++) {
        int64_t r = o0 + o;
        for (int d = w->n_sp - 1; d >= 0; d--) {
            idx[d] = r % w->out[d];
            r /= w->out[d];
        }
        for (int64_t kk = 0; kk < kvol; kk++) {
            int64_t rest = kk, off = 0, tap = 0;
            for (int d = w->n_sp - 1; d >= 0; d--) {
                k[d] = rest % w->kernel[d];
                rest /= w->kernel[d];
            }
            for (int d = 0; d < w->n_sp; d++) {
                int64_t p = idx[d] * w->stride[d] - w->pad_begin[d] + k[d] * w->dilation[d];
                if (p < -w->pad_begin[d] || p >= w->in[d] + w->pad_end[d]) tap = TAP_BEYOND;
                else if ((p < 0 || p >= w->in[d]) && tap == 0) tap = TAP_PAD;
                off = off * w->in[d] + (p < 0 ? 0 : p);
            }
            taps[o * kvol + kk] = tap ? tap : off;
        }
    }
}

typedef struct pool_job {
    vp_window w;
    int64_t planes, ivol, ovol, kvol;
    int64_t block; /* output positions whose taps are listed at once */
    int64_t *taps; /* [block][kvol] */
} pool_job;

static vp_status pool_job_init(const vp_node *n, vp_window_kind kind, const vp_tensor *x, pool_job *j, vp_error *err) {
    vp_status s = vp_window_resolve(n, kind, x->rank - 2, x->dims + 2, NULL, &j->w, err);
    if (s) return s;
    j->planes = x->dims[0] * x->dims[1];
    j->ivol = vp_window_in_volume(&j->w);
    j->ovol = vp_window_out_volume(&j->w);
    j->kvol = vp_window_kernel_volume(&j->w);
    j->block = j->kvol < TAPS_PER_BLOCK ? TAPS_PER_BLOCK / j->kvol : 1;
    if (j->block > j->ovol) j->block = j->ovol;
    j->taps = vp_lin_alloc(j->block * j->kvol, sizeof *j->taps);
    if (!j->taps) return vp_node_fail(err, VP_ERR_NOMEM, n, "out of memory for the pooling taps");
    return VP_OK;
}

/* Lists the taps of the block starting at output position o0; returns its size. */
static int64_t pool_job_block(pool_job *j, int64_t o0) {
    int64_t count = j->ovol - o0 < j->block ? j->ovol - o0 : j->block;
    pool_taps_fill(&j->w, o0, count, j->kvol, j->taps);
    return count;
}

/* One kernel's pass: its tensors, and the block of output positions [o0, o0 + count)
 * whose taps are listed; plane computes that block of plane p. */
typedef struct pool_pass {
    pool_job j;
    int64_t o0, count;
    void (*plane)(const struct pool_pass *r, int64_t p);
    const vp_tensor *x, *dy, *y;
    vp_tensor *out, *indices;
    uint8_t *a_out;
    const uint8_t *a_in;
    int col_major, include_pad;
} pool_pass;

static void pool_pass_planes(int64_t lo, int64_t hi, void *ctx) {
    const pool_pass *r = ctx;
    for (int64_t p = lo; p < hi; p++) r->plane(r, p);
}

/* Runs r->plane over every block and plane, then frees the taps. */
static void pool_pass_run(pool_pass *r) {
    for (r->o0 = 0; r->o0 < r->j.ovol; r->o0 += r->j.block) {
        r->count = pool_job_block(&r->j, r->o0);
        vp_par_for(r->j.planes, r->count * r->j.kvol, pool_pass_planes, r);
    }
    free(r->j.taps);
}

/* ---- MaxPool ---- */

/* Indices count within a plane row-major (storage_order 0) or column-major (1). */
static int64_t flat_index(const vp_window *w, int64_t row_major, int col_major) {
    if (!col_major) return row_major;
    int64_t coord[VP_MAX_SPATIAL], idx = 0;
    for (int d = w->n_sp - 1; d >= 0; d--) {
        coord[d] = row_major % w->in[d];
        row_major /= w->in[d];
    }
    for (int d = w->n_sp - 1; d >= 0; d--) idx = idx * w->in[d] + coord[d];
    return idx;
}

enum { ARGMAX_NONE = 255 };

/* Index among the window's taps of its largest element (first on ties), -1 when it
 * reads none: the rule MaxPool's Indices, MaxPoolArgmax and MaxPoolInputGrad share. */
/* The best value rides in a register and each step is a select, not a branch: which
 * tap wins is data, and a mispredicted branch per tap cost more than the comparison.
 * A padding tap reads element 0 and is never taken. */
#define DEFINE_ARGMAX_K(T, NAME)                                                                    \
    static inline int64_t NAME(const T *x, const int64_t *taps, int64_t kvol) {                    \
        int64_t best = -1;                                                                          \
        T bv = 0;                                                                                   \
        for (int64_t k = 0; k < kvol; k++) {                                                        \
            int64_t off = taps[k];                                                                  \
            T v = x[off >= 0 ? off : 0];                                                            \
            int take = (off >= 0) & ((best < 0) | (v > bv) | (bv != bv));                           \
            best = take ? k : best;                                                                 \
            bv = take ? v : bv;                                                                     \
        }                                                                                           \
        return best;                                                                                \
    }
DEFINE_ARGMAX_K(float, argmax_k_f32)
DEFINE_ARGMAX_K(double, argmax_k_f64)

static void maxpool_plane(const pool_pass *r, int64_t p) {
    const pool_job *j = &r->j;
    for (int64_t o = 0; o < r->count; o++) {
        const int64_t *taps = j->taps + o * j->kvol;
        int64_t iy = p * j->ovol + r->o0 + o, k;
        if (r->x->dtype == VP_F32) {
            const float *xp = (const float *)r->x->data + p * j->ivol;
            k = argmax_k_f32(xp, taps, j->kvol);
            ((float *)r->out->data)[iy] = k < 0 ? -INFINITY : xp[taps[k]];
        } else {
            const double *xp = (const double *)r->x->data + p * j->ivol;
            k = argmax_k_f64(xp, taps, j->kvol);
            ((double *)r->out->data)[iy] = k < 0 ? -INFINITY : xp[taps[k]];
        }
        if (r->indices)
            ((int64_t *)r->indices->data)[iy] = p * j->ivol + flat_index(&j->w, k < 0 ? 0 : taps[k], r->col_major);
        if (r->a_out) r->a_out[iy] = k < 0 ? ARGMAX_NONE : (uint8_t)k;
    }
}

/* MaxPool's Y, and where given Indices (int64, flat per plane) or A (uint8: the kernel
 * offset, ARGMAX_NONE for a window that reads nothing). */
static vp_status maxpool_forward(const vp_node *n, const vp_tensor *x, vp_tensor *y, vp_tensor *indices, uint8_t *a,
                                 vp_error *err) {
    pool_pass r = {.plane = maxpool_plane, .x = x, .out = y, .indices = indices, .a_out = a,
                   .col_major = vp_attr_int(n, "storage_order", 0) != 0};
    if (x->dtype == VP_F32 && !indices) { /* the common case in rows (k_pool2d.c), where it takes it */
        vp_window w;
        vp_status s = vp_window_resolve(n, VP_WINDOW_MAXPOOL, x->rank - 2, x->dims + 2, NULL, &w, err);
        if (s || vp_pool2d_max_f32(&w, x->dims[0] * x->dims[1], x->data, y->data, a)) return s;
    }
    vp_status s = pool_job_init(n, VP_WINDOW_MAXPOOL, x, &r.j, err);
    if (!s) pool_pass_run(&r);
    return s;
}

vp_status vp_cpu_maxpool(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    if (vp_lin_is_narrow(in[0]->dtype)) return vp_lin_run_widened(vp_cpu_maxpool, n, in, out, err);
    return maxpool_forward(n, in[0], out[0], n->n_outputs > 1 ? out[1] : NULL, NULL, err);
}

static void maxpool_scatter_plane(const pool_pass *r, int64_t p) {
    const pool_job *j = &r->j;
    const vp_tensor *x = r->x, *y = r->y;
    int f32 = r->dy->dtype == VP_F32;
    for (int64_t o = 0; o < r->count; o++) {
        const int64_t *taps = j->taps + o * j->kvol;
        int64_t iy = p * j->ovol + r->o0 + o, k;
        if (x) k = f32 ? argmax_k_f32((const float *)x->data + p * j->ivol, taps, j->kvol)
                       : argmax_k_f64((const double *)x->data + p * j->ivol, taps, j->kvol);
        else k = r->a_in[iy] == ARGMAX_NONE ? -1 : r->a_in[iy];
        if (k < 0) continue;
        int64_t off = p * j->ivol + taps[k];
        if (f32) {
            if (!y || ((const float *)y->data)[iy] > 0) ((float *)r->out->data)[off] += ((const float *)r->dy->data)[iy];
        } else {
            if (!y || ((const double *)y->data)[iy] > 0) ((double *)r->out->data)[off] += ((const double *)r->dy->data)[iy];
        }
    }
}

/* dX of MaxPool: each window's dY added at its maximum, windows in one fixed order.  The
 * maximum is found again in x, or read from a (MaxPoolArgmax's record, ARGMAX_NONE for
 * none); with y, only where the window's maximum y is positive (MaxPool of a ReLU). */
static vp_status maxpool_scatter(const vp_node *n, const vp_tensor *dy, vp_tensor *dx, const vp_tensor *x,
                                 const uint8_t *a, const vp_tensor *y, vp_error *err) {
    pool_pass r = {.plane = maxpool_scatter_plane, .x = x, .dy = dy, .y = y, .out = dx, .a_in = a};
    if (a && dy->dtype == VP_F32 && dx->dtype == VP_F32 && (!y || y->dtype == VP_F32)) { /* in rows (k_pool2d.c) */
        vp_window w;
        vp_status s = vp_window_resolve(n, VP_WINDOW_MAXPOOL, dx->rank - 2, dx->dims + 2, NULL, &w, err);
        if (s || vp_pool2d_max_scatter_f32(&w, dx->dims[0] * dx->dims[1], dy->data, a, y ? y->data : NULL, dx->data))
            return s;
    }
    vp_status s = pool_job_init(n, VP_WINDOW_MAXPOOL, dx, &r.j, err);
    if (s) return s;
    memset(dx->data, 0, vp_tensor_nbytes(dx));
    pool_pass_run(&r);
    return VP_OK;
}

/* vplan.MaxPoolInputGrad(dY, X) -> dX: each window's largest element found again in X
 * (first on ties, as the forward's Indices record it) gets that window's dY. */
vp_status vp_cpu_maxpool_input_grad(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    if (!out[0]) return VP_OK;
    if (vp_lin_is_narrow(in[0]->dtype)) return vp_lin_run_widened(vp_cpu_maxpool_input_grad, n, in, out, err);
    return maxpool_scatter(n, in[0], out[0], in[1], NULL, NULL, err);
}

/* vplan.MaxPoolArgmax(X) -> Y, A: MaxPool, and in A (uint8) which of the window's
 * kernel offsets held the maximum.  One byte per pooled element, where Indices costs
 * eight.  float32 and float64 only (the shape function says so): widening would widen
 * A too. */
vp_status vp_cpu_maxpool_argmax(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    return maxpool_forward(n, in[0], out[0], NULL, out[1]->data, err);
}

/* vplan.MaxPoolReluGrad(dY, A, Y) -> dX, for MaxPool(Relu(X)): the window's dY goes to
 * the offset A recorded where the maximum Y is positive, the only places where both
 * MaxPool's and Relu's gradients pass it (the maximum is the Relu output there).  The
 * sums run in MaxPoolInputGrad's order, so dX equals ReluGrad(MaxPoolInputGrad(dY, R),
 * R) bit for bit without R. */
vp_status vp_cpu_maxpool_relu_grad(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    if (!out[0]) return VP_OK;
    return maxpool_scatter(n, in[0], out[0], NULL, in[1]->data, in[2], err);
}

/* ---- AveragePool ---- */

/* Sum of what a window reads; *count gets how many elements it averages over. */
#define DEFINE_WINDOW_SUM(T, NAME)                                                              \
    static double NAME(const T *x, const int64_t *taps, int64_t kvol, int include_pad,          \
                       int64_t *count) {                                                        \
        double sum = 0;                                                                         \
        int64_t c = 0;                                                                          \
        for (int64_t k = 0; k < kvol; k++) {                                                    \
            if (taps[k] >= 0) {                                                                 \
                sum += x[taps[k]];                                                              \
                c++;                                                                            \
            } else if (taps[k] == TAP_PAD && include_pad) {                                     \
                c++;                                                                            \
            }                                                                                   \
        }                                                                                       \
        *count = c;                                                                             \
        return sum;                                                                             \
    }
DEFINE_WINDOW_SUM(float, window_sum_f32)
DEFINE_WINDOW_SUM(double, window_sum_f64)

static void avgpool_plane(const pool_pass *r, int64_t p) {
    const pool_job *j = &r->j;
    for (int64_t o = 0; o < r->count; o++) {
        const int64_t *taps = j->taps + o * j->kvol;
        int64_t count, iy = p * j->ovol + r->o0 + o;
        double sum;
        if (r->x->dtype == VP_F32) {
            sum = window_sum_f32((const float *)r->x->data + p * j->ivol, taps, j->kvol, r->include_pad, &count);
            ((float *)r->out->data)[iy] = count ? (float)(sum / (double)count) : 0.0f;
        } else {
            sum = window_sum_f64((const double *)r->x->data + p * j->ivol, taps, j->kvol, r->include_pad, &count);
            ((double *)r->out->data)[iy] = count ? sum / (double)count : 0.0;
        }
    }
}

vp_status vp_cpu_avgpool(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    if (vp_lin_is_narrow(in[0]->dtype)) return vp_lin_run_widened(vp_cpu_avgpool, n, in, out, err);
    pool_pass r = {.plane = avgpool_plane, .x = in[0], .out = out[0],
                   .include_pad = vp_attr_int(n, "count_include_pad", 0) != 0};
    vp_status s = pool_job_init(n, VP_WINDOW_AVGPOOL, in[0], &r.j, err);
    if (!s) pool_pass_run(&r);
    return s;
}

/* ---- global pooling ---- */

/* Largest element of x[0..n) (NaN wins, as in numpy), -inf when empty. */
static double plane_max(const void *x, vp_dtype t, int64_t n) {
    double m = -INFINITY;
    if (t == VP_F32) {
        const float *xs = x;
        for (int64_t i = 0; i < n && !isnan(m); i++)
            if (xs[i] > m || isnan(xs[i])) m = xs[i];
    } else {
        const double *xs = x;
        for (int64_t i = 0; i < n && !isnan(m); i++)
            if (xs[i] > m || isnan(xs[i])) m = xs[i];
    }
    return m;
}

static double plane_sum(const void *x, vp_dtype t, int64_t n) {
    double s = 0;
    if (t == VP_F32)
        for (int64_t i = 0; i < n; i++) s += ((const float *)x)[i];
    else
        for (int64_t i = 0; i < n; i++) s += ((const double *)x)[i];
    return s;
}

typedef struct global_job {
    const vp_tensor *x;
    vp_tensor *y;
    int64_t size;
    int take_max;
} global_job;

static void global_planes(int64_t lo, int64_t hi, void *ctx) {
    const global_job *g = ctx;
    size_t es = vp_dtype_size(g->x->dtype);
    for (int64_t p = lo; p < hi; p++) {
        const void *xp = (const char *)g->x->data + p * g->size * (int64_t)es;
        double v = g->take_max ? plane_max(xp, g->x->dtype, g->size)
                   : g->size   ? plane_sum(xp, g->x->dtype, g->size) / (double)g->size
                               : 0;
        if (g->y->dtype == VP_F32) ((float *)g->y->data)[p] = (float)v;
        else ((double *)g->y->data)[p] = v;
    }
}

static void global_pool(const vp_tensor *x, vp_tensor *y, int take_max) {
    int64_t planes = x->dims[0] * x->dims[1];
    global_job g = {.x = x, .y = y, .size = planes ? vp_tensor_numel(x) / planes : 0, .take_max = take_max};
    vp_par_for(planes, g.size, global_planes, &g);
}

vp_status vp_cpu_global_avgpool(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                vp_error *err) {
    if (vp_lin_is_narrow(in[0]->dtype)) return vp_lin_run_widened(vp_cpu_global_avgpool, n, in, out, err);
    global_pool(in[0], out[0], 0);
    return VP_OK;
}

vp_status vp_cpu_global_maxpool(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                vp_error *err) {
    if (vp_lin_is_narrow(in[0]->dtype)) return vp_lin_run_widened(vp_cpu_global_maxpool, n, in, out, err);
    global_pool(in[0], out[0], 1);
    return VP_OK;
}

/* ---- LRN ---- */

/* acc[i] += x[i]^2 */
static void add_squares(const void *x, vp_dtype t, int64_t n, double *acc) {
    if (t == VP_F32)
        for (int64_t i = 0; i < n; i++) acc[i] += (double)((const float *)x)[i] * ((const float *)x)[i];
    else
        for (int64_t i = 0; i < n; i++) acc[i] += ((const double *)x)[i] * ((const double *)x)[i];
}

/* y[i] = x[i] / (bias + coef * sq[i])^beta */
static void lrn_scale(const void *x, void *y, vp_dtype t, int64_t n, const double *sq, double bias, double coef,
                      double beta) {
    if (t == VP_F32)
        for (int64_t i = 0; i < n; i++)
            ((float *)y)[i] = (float)(((const float *)x)[i] / pow(bias + coef * sq[i], beta));
    else
        for (int64_t i = 0; i < n; i++) ((double *)y)[i] = ((const double *)x)[i] / pow(bias + coef * sq[i], beta);
}

/* y = x / (bias + alpha / size * sum of x^2 over the channels [c - (size-1)/2, c + size/2])^beta */
vp_status vp_cpu_lrn(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    const vp_tensor *x = in[0];
    vp_tensor *y = out[0];
    if (vp_lin_is_narrow(x->dtype)) return vp_lin_run_widened(vp_cpu_lrn, n, in, out, err);
    double alpha = vp_attr_float(n, "alpha", 1e-4f), beta = vp_attr_float(n, "beta", 0.75f);
    double bias = vp_attr_float(n, "bias", 1.0f);
    int64_t size = vp_attr_int(n, "size", 1), batch = x->dims[0], ch = x->dims[1];
    int64_t plane = batch && ch ? vp_tensor_numel(x) / (batch * ch) : 0;
    size_t es = vp_dtype_size(x->dtype);
    double *sq = vp_lin_alloc(plane, sizeof *sq);
    if (!sq) return vp_node_fail(err, VP_ERR_NOMEM, n, "out of memory");
    for (int64_t b = 0; b < batch; b++)
        for (int64_t c = 0; c < ch; c++) {
            int64_t lo = c - (size - 1) / 2, hi = c + size / 2;
            memset(sq, 0, (size_t)plane * sizeof *sq);
            for (int64_t j = lo < 0 ? 0 : lo; j <= hi && j < ch; j++)
                add_squares((const char *)x->data + (b * ch + j) * plane * (int64_t)es, x->dtype, plane, sq);
            int64_t at = (b * ch + c) * plane * (int64_t)es;
            lrn_scale((const char *)x->data + at, (char *)y->data + at, x->dtype, plane, sq, bias,
                      alpha / (double)size, beta);
        }
    free(sq);
    return VP_OK;
}
