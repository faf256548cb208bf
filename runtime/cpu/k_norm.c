/* BatchNormalization (inference and training), LayerNormalization and
 * InstanceNormalization.  Statistics are accumulated in double with two passes (mean,
 * then squared deviations), so float32 results do not drift on long rows. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_par.h"
#include "cpu_util.h"
#include "k_linalg.h"

/* Sum of x[0..n), and sum of its squared deviations from mean, in double. */
static double sum_of(const void *x, vp_dtype t, int64_t n) {
    double s = 0;
    if (t == VP_F32)
        for (int64_t i = 0; i < n; i++) s += ((const float *)x)[i];
    else
        for (int64_t i = 0; i < n; i++) s += ((const double *)x)[i];
    return s;
}

static double squared_deviation_of(const void *x, vp_dtype t, int64_t n, double mean) {
    double s = 0;
    if (t == VP_F32)
        for (int64_t i = 0; i < n; i++) {
            double d = ((const float *)x)[i] - mean;
            s += d * d;
        }
    else
        for (int64_t i = 0; i < n; i++) {
            double d = ((const double *)x)[i] - mean;
            s += d * d;
        }
    return s;
}

/* y = x * a + b over n elements. */
static void affine(const void *x, void *y, vp_dtype t, int64_t n, double a, double b) {
    if (t == VP_F32) {
        const float *xs = x;
        float *ys = y;
        for (int64_t i = 0; i < n; i++) ys[i] = (float)(xs[i] * a + b);
    } else {
        const double *xs = x;
        double *ys = y;
        for (int64_t i = 0; i < n; i++) ys[i] = xs[i] * a + b;
    }
}

/* Address of element i. */
static const void *at(const vp_tensor *t, int64_t i) {
    return (const char *)t->data + i * (int64_t)vp_dtype_size(t->dtype);
}
static void *at_mut(vp_tensor *t, int64_t i) { return (char *)t->data + i * (int64_t)vp_dtype_size(t->dtype); }

/* ---- BatchNormalization ---- */

/* Mean and population variance of channel c (of ch, each a plane of elements per
 * image) over the batch. */
static void channel_stats(const vp_tensor *x, int64_t batch, int64_t ch, int64_t plane, int64_t c, double *mean,
                          double *var) {
    int64_t count = batch * plane;
    double s = 0, q = 0;
    for (int64_t b = 0; b < batch; b++) s += sum_of(at(x, (b * ch + c) * plane), x->dtype, plane);
    *mean = count ? s / (double)count : 0;
    for (int64_t b = 0; b < batch; b++) q += squared_deviation_of(at(x, (b * ch + c) * plane), x->dtype, plane, *mean);
    *var = count ? q / (double)count : 0;
}

static void store_stat(vp_tensor *t, int64_t c, double v) {
    if (t) vp_store(t->data, t->dtype, c, v);
}

vp_status vp_cpu_batchnorm(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    const vp_tensor *x = in[0], *scale = in[1], *bias = in[2], *mean = in[3], *var = in[4];
    vp_tensor *y = out[0];
    if (vp_lin_is_narrow(x->dtype) || vp_lin_is_narrow(scale->dtype) || vp_lin_is_narrow(mean->dtype))
        return vp_lin_run_widened(vp_cpu_batchnorm, n, in, out, err);
    double eps = vp_attr_float(n, "epsilon", 1e-5f), momentum = vp_attr_float(n, "momentum", 0.9f);
    int training = vp_batchnorm_is_training(n);
    /* opset 14 on: Y, running_mean, running_var; before: Y, mean, var, saved_mean, saved_var */
    vp_tensor *run_mean = n->n_outputs > 1 ? out[1] : NULL, *run_var = n->n_outputs > 2 ? out[2] : NULL;
    vp_tensor *saved_mean = n->n_outputs > 3 ? out[3] : NULL, *saved_var = n->n_outputs > 4 ? out[4] : NULL;
    /* spatial=0 gives every (channel, position) its own statistics: channels of one element */
    int64_t batch = x->dims[0], ch = vp_batchnorm_is_per_activation(n) ? vp_tensor_numel(scale) : x->dims[1];
    int64_t plane = batch && ch ? vp_tensor_numel(x) / (batch * ch) : 0;
    for (int64_t c = 0; c < ch; c++) {
        double m = vp_load(mean->data, mean->dtype, c), v = vp_load(var->data, var->dtype, c);
        if (training) {
            double bm, bv;
            channel_stats(x, batch, ch, plane, c, &bm, &bv);
            store_stat(run_mean, c, m * momentum + bm * (1 - momentum));
            store_stat(run_var, c, v * momentum + bv * (1 - momentum));
            store_stat(saved_mean, c, bm);
            store_stat(saved_var, c, bv);
            m = bm;
            v = bv;
        }
        double a = vp_load(scale->data, scale->dtype, c) / sqrt(v + eps);
        double b = vp_load(bias->data, bias->dtype, c) - m * a;
        for (int64_t i = 0; i < batch; i++)
            affine(at(x, (i * ch + c) * plane), at_mut(y, (i * ch + c) * plane), x->dtype, plane, a, b);
    }
    return VP_OK;
}

/* ---- InstanceNormalization ---- */

vp_status vp_cpu_instancenorm(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                              vp_error *err) {
    const vp_tensor *x = in[0], *scale = in[1], *bias = in[2];
    vp_tensor *y = out[0];
    if (vp_lin_is_narrow(x->dtype)) return vp_lin_run_widened(vp_cpu_instancenorm, n, in, out, err);
    double eps = vp_attr_float(n, "epsilon", 1e-5f);
    int64_t batch = x->dims[0], ch = x->dims[1], plane = batch && ch ? vp_tensor_numel(x) / (batch * ch) : 0;
    for (int64_t b = 0; b < batch; b++)
        for (int64_t c = 0; c < ch; c++) {
            const void *xp = at(x, (b * ch + c) * plane);
            double m = plane ? sum_of(xp, x->dtype, plane) / (double)plane : 0;
            double v = plane ? squared_deviation_of(xp, x->dtype, plane, m) / (double)plane : 0;
            double a = vp_load(scale->data, scale->dtype, c) / sqrt(v + eps);
            double shift = vp_load(bias->data, bias->dtype, c) - m * a;
            affine(xp, at_mut(y, (b * ch + c) * plane), x->dtype, plane, a, shift);
        }
    return VP_OK;
}

/* ---- LayerNormalization ---- */

/* Values of a scale or bias broadcast (numpy, unidirectionally) to the normalised
 * shape dims[axis:], as doubles; a missing bias gives zeros. */
static double *broadcast_param(const vp_tensor *p, const vp_tensor *x, int axis, int64_t cols) {
    double *v = vp_lin_alloc(cols, sizeof *v);
    if (!v) return NULL;
    if (!p) {
        memset(v, 0, (size_t)cols * sizeof *v);
        return v;
    }
    vp_tensor shape = {.dtype = x->dtype, .rank = x->rank - axis};
    memcpy(shape.dims, x->dims + axis, (size_t)shape.rank * sizeof *shape.dims);
    int64_t strides[VP_MAX_RANK];
    vp_broadcast_strides(p, shape.rank, strides);
    for (int64_t i = 0; i < cols; i++) {
        int64_t r = i, off = 0;
        for (int d = shape.rank - 1; d >= 0; d--) {
            off += (r % shape.dims[d]) * strides[d];
            r /= shape.dims[d];
        }
        v[i] = vp_load(p->data, p->dtype, off);
    }
    return v;
}

static void normalize_row(const void *x, void *y, vp_dtype t, int64_t cols, double mean, double inv,
                          const double *gamma, const double *beta) {
    if (t == VP_F32) {
        const float *xs = x;
        float *ys = y;
        for (int64_t i = 0; i < cols; i++) ys[i] = (float)((xs[i] - mean) * inv * gamma[i] + beta[i]);
    } else {
        const double *xs = x;
        double *ys = y;
        for (int64_t i = 0; i < cols; i++) ys[i] = (xs[i] - mean) * inv * gamma[i] + beta[i];
    }
}

typedef struct ln_job {
    const vp_tensor *x;
    vp_tensor *y, *mean_out, *inv_out;
    int64_t cols;
    double eps;
    const double *gamma, *beta;
    int rms; /* SimplifiedLayerNormalization: the mean taken as 0 (RMSNorm) */
} ln_job;

enum { LN_LANES = 8, LN_BLOCK = 64 };

/* A float32 row's sum, or its sum of squared deviations from m, in LN_LANES double
 * partial sums (element i in lane i % LN_LANES, lanes added pairwise in a fixed
 * order): independent chains the compiler puts in vector lanes, where one running sum
 * waits an add's latency per element.  The order depends only on the row's length. */
static double ln_sum_f32(const float *x, int64_t n, int squares, double m) {
    double a[LN_LANES] = {0};
    int64_t i = 0;
    if (squares)
        for (; i + LN_LANES <= n; i += LN_LANES) {
            _Pragma("omp simd")
            for (int l = 0; l < LN_LANES; l++) a[l] += ((double)x[i + l] - m) * ((double)x[i + l] - m);
        }
    else
        for (; i + LN_LANES <= n; i += LN_LANES) {
            _Pragma("omp simd")
            for (int l = 0; l < LN_LANES; l++) a[l] += (double)x[i + l];
        }
    for (int l = 0; i < n; i++, l++) a[l] += squares ? ((double)x[i] - m) * ((double)x[i] - m) : (double)x[i];
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

/* normalize_row's float32 arithmetic, a block of fixed length at a time (vectorised) */
static void ln_normalize_f32(const float *x, float *y, int64_t n, double m, double inv, const double *gamma,
                             const double *beta) {
    int64_t i = 0;
    for (; i + LN_BLOCK <= n; i += LN_BLOCK) {
        _Pragma("omp simd")
        for (int k = 0; k < LN_BLOCK; k++) y[i + k] = (float)((x[i + k] - m) * inv * gamma[i + k] + beta[i + k]);
    }
    for (; i < n; i++) y[i] = (float)((x[i] - m) * inv * gamma[i] + beta[i]);
}

/* Rows [r0, r1), for the threads: each row's statistics on one thread. */
static void ln_rows(int64_t r0, int64_t r1, void *ctx) {
    const ln_job *j = ctx;
    int64_t cols = j->cols;
    if (j->x->dtype == VP_F32 && cols) {
        for (int64_t r = r0; r < r1; r++) {
            const float *xr = (const float *)j->x->data + r * cols;
            double m = j->rms ? 0.0 : ln_sum_f32(xr, cols, 0, 0.0) / (double)cols;
            double v = ln_sum_f32(xr, cols, 1, m) / (double)cols;
            double inv = 1.0 / sqrt(v + j->eps);
            ln_normalize_f32(xr, (float *)j->y->data + r * cols, cols, m, inv, j->gamma, j->beta);
            store_stat(j->mean_out, r, m);
            store_stat(j->inv_out, r, inv);
        }
        return;
    }
    for (int64_t r = r0; r < r1; r++) {
        const void *xr = at(j->x, r * cols);
        double m = cols && !j->rms ? sum_of(xr, j->x->dtype, cols) / (double)cols : 0;
        double v = cols ? squared_deviation_of(xr, j->x->dtype, cols, m) / (double)cols : 0;
        double inv = 1.0 / sqrt(v + j->eps);
        normalize_row(xr, at_mut(j->y, r * cols), j->x->dtype, cols, m, inv, j->gamma, j->beta);
        store_stat(j->mean_out, r, m);
        store_stat(j->inv_out, r, inv);
    }
}

/* LayerNormalization, or with rms SimplifiedLayerNormalization (no bias, the statistic
 * inv_std_var its output 1). */
static vp_status layernorm(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, int rms, vp_error *err) {
    const vp_tensor *x = in[0], *scale = in[1], *bias = !rms && n->n_inputs > 2 ? in[2] : NULL;
    vp_tensor *y = out[0], *mean_out = !rms && n->n_outputs > 1 ? out[1] : NULL;
    vp_tensor *inv_out = n->n_outputs > 2 - rms ? out[2 - rms] : NULL;
    int64_t a = vp_attr_int(n, "axis", -1);
    int axis = (int)(a < 0 ? a + x->rank : a);
    double eps = vp_attr_float(n, "epsilon", 1e-5f);
    int64_t cols = 1, total = vp_tensor_numel(x);
    for (int d = axis; d < x->rank; d++) cols *= x->dims[d];
    int64_t rows = cols ? total / cols : 0;
    double *gamma = broadcast_param(scale, x, axis, cols), *beta = broadcast_param(bias, x, axis, cols);
    vp_status s = VP_OK;
    if (!gamma || !beta) s = vp_node_fail(err, VP_ERR_NOMEM, n, "out of memory");
    ln_job j = {x, y, mean_out, inv_out, cols, eps, gamma, beta, rms};
    if (!s) vp_par_for(rows, 4 * cols, ln_rows, &j);
    free(gamma);
    free(beta);
    return s;
}

vp_status vp_cpu_layernorm(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    if (vp_lin_is_narrow(in[0]->dtype) || vp_lin_is_narrow(in[1]->dtype))
        return vp_lin_run_widened(vp_cpu_layernorm, n, in, out, err);
    return layernorm(n, in, out, 0, err);
}

vp_status vp_cpu_simplified_layernorm(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                      vp_error *err) {
    if (vp_lin_is_narrow(in[0]->dtype) || vp_lin_is_narrow(in[1]->dtype))
        return vp_lin_run_widened(vp_cpu_simplified_layernorm, n, in, out, err);
    return layernorm(n, in, out, 1, err);
}
