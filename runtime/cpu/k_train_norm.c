/* LayerNormalizationGrad, BatchNormInternal (batch normalisation in training mode) and
 * BatchNormalizationGrad.
 *
 * Statistics and parameter gradients are sums over many elements, so they are kept in
 * double whatever the tensor dtype; the per-element passes branch on dtype once per
 * plane, never per element. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_par.h"
#include "cpu_simd.h"
#include "cpu_util.h"
#include "k_linalg.h"
#include "k_train.h"

/* A small float tensor (per-channel or per-row statistics) as doubles; NULL when out of memory. */
static double *load_doubles(const vp_tensor *t) {
    int64_t count = vp_tensor_numel(t);
    double *v = vp_lin_alloc(count, sizeof *v);
    if (v)
        for (int64_t i = 0; i < count; i++) v[i] = vp_train_scalar(t, i);
    return v;
}

static void store_doubles(vp_tensor *t, const double *v) {
    if (!t) return;
    int64_t count = vp_tensor_numel(t);
    for (int64_t i = 0; i < count; i++) vp_store(t->data, t->dtype, i, v[i]);
}

/* ---- LayerNormalizationGrad ----
 *
 * Per row (the leading axes), with xhat = (x - mean) * inv_std and g = dy * scale:
 *   dx = inv_std * (g - mean(g) - xhat * mean(g * xhat))
 *   scale_grad = sum over rows of dy * xhat,  bias_grad = sum over rows of dy. */

typedef struct ln_job {
    int64_t rows, len;
    const double *mean, *inv_std;
    double *dscale, *dbias; /* [len] */
    const void *dy, *x, *scale;
    void *dx;
} ln_job;

/* dx of rows [r0, r1): each row's sums on one thread. */
#define DEFINE_LN_GRAD(T)                                                                          \
    static void ln_dx_##T(int64_t r0, int64_t r1, void *ctx) {                                     \
        const ln_job *j = ctx;                                                                     \
        const T *dy = j->dy, *x = j->x, *scale = j->scale;                                         \
        T *dx = j->dx;                                                                             \
        for (int64_t r = r0; r < r1; r++) {                                                        \
            const T *dyr = dy + r * j->len, *xr = x + r * j->len;                                  \
            double m = j->mean ? j->mean[r] : 0, s = j->inv_std[r], sum_g = 0, sum_gx = 0;         \
            for (int64_t k = 0; k < j->len; k++) {                                                 \
                double xh = (xr[k] - m) * s, gk = (double)dyr[k] * scale[k];                       \
                sum_g += gk;                                                                       \
                sum_gx += gk * xh;                                                                 \
            }                                                                                      \
            sum_g = j->mean ? sum_g / (double)j->len : 0; /* RMSNorm: no centering term */       \
            sum_gx /= (double)j->len;                                                              \
            for (int64_t k = 0; k < j->len; k++) {                                                 \
                double xh = (xr[k] - m) * s;                                                       \
                dx[r * j->len + k] = (T)(s * ((double)dyr[k] * scale[k] - sum_g - xh * sum_gx));   \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    /* scale and bias gradients of columns [k0, k1): each a sum over rows, in row order */       \
    static void ln_dparams_##T(int64_t k0, int64_t k1, void *ctx) {                                \
        const ln_job *j = ctx;                                                                     \
        const T *dy = j->dy, *x = j->x;                                                            \
        for (int64_t k = k0; k < k1; k++) j->dscale[k] = j->dbias[k] = 0;                          \
        for (int64_t r = 0; r < j->rows; r++) {                                                    \
            const T *dyr = dy + r * j->len, *xr = x + r * j->len;                                  \
            double m = j->mean ? j->mean[r] : 0, s = j->inv_std[r];                                \
            for (int64_t k = k0; k < k1; k++) {                                                    \
                double xh = (xr[k] - m) * s;                                                       \
                j->dscale[k] += dyr[k] * xh;                                                       \
                j->dbias[k] += dyr[k];                                                             \
            }                                                                                      \
        }                                                                                          \
    }
DEFINE_LN_GRAD(double)

enum { LN_LANES = 8 };

/* float32: ln_dx_double's arithmetic with the row sums in LN_LANES double partial sums (element k in lane
 * k % LN_LANES, lanes added pairwise in a fixed order), independent chains in vector
 * lanes rather than one running sum waiting an add's latency per element; the order
 * depends only on the row's length, never on the threads. */
static void ln_dx_f32_lanes(int64_t r0, int64_t r1, void *ctx) {
    const ln_job *j = ctx;
    const float *dy = j->dy, *x = j->x, *scale = j->scale;
    float *dx = j->dx;
    int64_t len = j->len;
    for (int64_t r = r0; r < r1; r++) {
        const float *dyr = dy + r * len, *xr = x + r * len;
        float *dxr = dx + r * len;
        double m = j->mean ? j->mean[r] : 0, s = j->inv_std[r], a[LN_LANES] = {0}, b[LN_LANES] = {0};
        int64_t k = 0;
        for (; k + LN_LANES <= len; k += LN_LANES) {
            _Pragma("omp simd")
            for (int l = 0; l < LN_LANES; l++) {
                double xh = (xr[k + l] - m) * s, gk = (double)dyr[k + l] * scale[k + l];
                a[l] += gk;
                b[l] += gk * xh;
            }
        }
        for (int l = 0; k < len; k++, l++) {
            double xh = (xr[k] - m) * s, gk = (double)dyr[k] * scale[k];
            a[l] += gk;
            b[l] += gk * xh;
        }
        double sum_g = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
        double sum_gx = ((b[0] + b[1]) + (b[2] + b[3])) + ((b[4] + b[5]) + (b[6] + b[7]));
        sum_g = j->mean ? sum_g / (double)len : 0; /* RMSNorm: no centering term */
        sum_gx /= (double)len;
        _Pragma("omp simd")
        for (k = 0; k < len; k++) {
            double xh = (xr[k] - m) * s;
            dxr[k] = (float)(s * ((double)dyr[k] * scale[k] - sum_g - xh * sum_gx));
        }
    }
}

/* float32: ln_dparams_double's sums (each column's over rows, in row order), the columns
 * in vector lanes. */
static void ln_dparams_f32_cols(int64_t k0, int64_t k1, void *ctx) {
    const ln_job *j = ctx;
    const float *dy = j->dy, *x = j->x;
    double *ds = j->dscale, *db = j->dbias;
    for (int64_t k = k0; k < k1; k++) ds[k] = db[k] = 0;
    for (int64_t r = 0; r < j->rows; r++) {
        const float *dyr = dy + r * j->len, *xr = x + r * j->len;
        double m = j->mean ? j->mean[r] : 0, s = j->inv_std[r];
        _Pragma("omp simd")
        for (int64_t k = k0; k < k1; k++) {
            double xh = (xr[k] - m) * s;
            ds[k] += dyr[k] * xh;
            db[k] += dyr[k];
        }
    }
}

/* LayerNormalizationGrad, or with rms SimplifiedLayerNormalizationGrad (inputs dY, X,
 * scale, inv_std_var; outputs dX, dscale): the same sums with the mean 0 and no
 * centering term. */
static vp_status layernorm_grad(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, int rms,
                                vp_error *err) {
    const vp_tensor *dy = in[0], *x = in[1], *scale = in[2];
    ln_job j = {1, vp_tensor_numel(scale), NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    j.rows = j.len ? vp_tensor_numel(x) / j.len : 0;
    double *mean = rms ? NULL : load_doubles(in[3]), *inv = load_doubles(in[rms ? 3 : 4]);
    double *acc = vp_lin_alloc(2 * j.len, sizeof *acc);
    vp_status s = VP_OK;
    if ((!mean && !rms) || !inv || !acc) {
        s = vp_node_fail(err, VP_ERR_NOMEM, n, "out of memory");
        goto done;
    }
    j.mean = mean;
    j.inv_std = inv;
    j.dscale = acc;
    j.dbias = acc + j.len;
    j.dy = dy->data;
    j.x = x->data;
    j.scale = scale->data;
    j.dx = out[0] ? out[0]->data : NULL;
    int f32 = x->dtype == VP_F32;
    if (j.dx) vp_par_for(j.rows, 6 * j.len, f32 ? ln_dx_f32_lanes : ln_dx_double, &j);
    if (n->n_outputs > 1) vp_par_for(j.len, 4 * j.rows, f32 ? ln_dparams_f32_cols : ln_dparams_double, &j);
    if (n->n_outputs > 1) store_doubles(out[1], j.dscale);
    if (n->n_outputs > 2) store_doubles(out[2], j.dbias);
done:
    free(mean);
    free(inv);
    free(acc);
    return s;
}

VP_TRAIN_KERNEL(vp_cpu_layernorm_grad) {
    if (vp_lin_is_narrow(in[1]->dtype)) return vp_lin_run_widened(vp_cpu_layernorm_grad, n, in, out, err);
    return layernorm_grad(n, in, out, 0, err);
}

VP_TRAIN_KERNEL(vp_cpu_simplified_layernorm_grad) {
    if (vp_lin_is_narrow(in[1]->dtype)) return vp_lin_run_widened(vp_cpu_simplified_layernorm_grad, n, in, out, err);
    return layernorm_grad(n, in, out, 1, err);
}

/* ---- batch normalisation: planes of X [N, C, spatial...] ---- */

typedef struct bn_geom {
    int64_t batch, channels, plane;
} bn_geom;

static bn_geom geom_of(const vp_tensor *x) {
    bn_geom g = {x->dims[0], x->dims[1], 1};
    for (int d = 2; d < x->rank; d++) g.plane *= x->dims[d];
    return g;
}

/* The plane sums below keep LANES partial sums (element i in lane i % LANES, the tail in
 * lane 0) added in lane order at the end: independent chains the compiler can keep in
 * vector registers, where one running double waits out each add's latency.  The order
 * is fixed, so the bits do not depend on the threads. */
enum { LANES = 8 };

static double lanes_total(const double *l) {
    double t = 0;
    for (int k = 0; k < LANES; k++) t += l[k];
    return t;
}

/* sum(x - shift) and sum((x - shift)^2) over one plane. */
#define DEFINE_PLANE_MOMENTS(T)                                                                    \
    VP_SIMD static void plane_moments_##T(const T *p, int64_t count, double shift, double *s1, double *s2) { \
        double a[LANES] = {0}, b[LANES] = {0};                                                     \
        int64_t i = 0;                                                                             \
        for (; i + LANES <= count; i += LANES)                                                     \
            for (int k = 0; k < LANES; k++) {                                                      \
                double v = p[i + k] - shift;                                                       \
                a[k] += v;                                                                         \
                b[k] += v * v;                                                                     \
            }                                                                                      \
        for (; i < count; i++) {                                                                   \
            double v = p[i] - shift;                                                               \
            a[0] += v;                                                                             \
            b[0] += v * v;                                                                         \
        }                                                                                          \
        *s1 += lanes_total(a);                                                                     \
        *s2 += lanes_total(b);                                                                     \
    }
DEFINE_PLANE_MOMENTS(float)
DEFINE_PLANE_MOMENTS(double)

static void plane_moments(const void *x, vp_dtype t, int64_t count, double shift, double *s1, double *s2) {
    if (t == VP_F32) plane_moments_float(x, count, shift, s1, s2);
    else plane_moments_double(x, count, shift, s1, s2);
}

/* y = x * a + b over one plane. */
VP_SIMD static void plane_affine(const void *x, void *y, vp_dtype t, int64_t count, double a, double b) {
    if (t == VP_F32) {
        const float *p = x;
        float *q = y, fa = (float)a, fb = (float)b;
        for (int64_t i = 0; i < count; i++) q[i] = p[i] * fa + fb;
    } else {
        const double *p = x;
        double *q = y;
        for (int64_t i = 0; i < count; i++) q[i] = p[i] * a + b;
    }
}

static const char *plane_at(const vp_tensor *t, bn_geom g, int64_t b, int64_t c) {
    return (const char *)t->data + ((b * g.channels + c) * g.plane) * (int64_t)vp_dtype_size(t->dtype);
}

typedef struct bn_job {
    const vp_tensor *x, *dy;
    vp_tensor *y;
    bn_geom g;
    int training;
    double eps, momentum;
    const double *scale, *bias, *rmean, *rvar;
    double *mean, *var, *inv, *new_mean, *new_var, *dbias, *dscale;
} bn_job;

/* Biased batch mean and variance of channels [c0, c1) (two passes: the mean, then
 * deviations); each channel's sums stay on one thread, in plane order. */
static void batch_moments(const vp_tensor *x, bn_geom g, double *mean, double *var, int64_t c0, int64_t c1) {
    double count = (double)(g.batch * g.plane);
    for (int64_t c = c0; c < c1; c++) {
        double s1 = 0, s2 = 0;
        for (int64_t b = 0; b < g.batch; b++) plane_moments(plane_at(x, g, b, c), x->dtype, g.plane, 0, &s1, &s2);
        mean[c] = s1 / count;
        s1 = s2 = 0;
        for (int64_t b = 0; b < g.batch; b++) plane_moments(plane_at(x, g, b, c), x->dtype, g.plane, mean[c], &s1, &s2);
        var[c] = s2 / count;
    }
}

static void bn_forward_channels(int64_t c0, int64_t c1, void *ctx) {
    const bn_job *j = ctx;
    bn_geom g = j->g;
    int64_t count = g.batch * g.plane;
    if (j->training) batch_moments(j->x, g, j->mean, j->var, c0, c1);
    for (int64_t c = c0; c < c1; c++) {
        if (!j->training) {
            j->mean[c] = j->rmean[c];
            j->var[c] = j->rvar[c];
        }
        double m = j->momentum;
        j->inv[c] = 1 / sqrt(j->var[c] + j->eps);
        j->new_mean[c] = j->training ? m * j->rmean[c] + (1 - m) * j->mean[c] : j->rmean[c];
        j->new_var[c] = j->training ? m * j->rvar[c] + (1 - m) * j->var[c] * (double)count / (double)(count - 1)
                                    : j->rvar[c];
        double a = j->scale[c] * j->inv[c];
        for (int64_t b = 0; b < g.batch && j->y; b++)
            plane_affine(plane_at(j->x, g, b, c), (void *)plane_at(j->y, g, b, c), j->x->dtype, g.plane, a,
                         j->bias[c] - j->mean[c] * a);
    }
}

/* BatchNormInternal.  Training mode: Y uses the batch statistics (biased variance);
 * running_mean = momentum * input_mean + (1 - momentum) * batch_mean and
 * running_var = momentum * input_var + (1 - momentum) * unbiased_batch_var, as
 * PyTorch updates them (ONNX momentum = 1 - torch momentum); saved_inv_std =
 * 1 / sqrt(biased_var + epsilon).  Inference mode: plain BatchNormalization with the
 * running statistics, passed through unchanged. */
VP_TRAIN_KERNEL(vp_cpu_batchnorm_internal) {
    const vp_tensor *x = in[0];
    if (vp_lin_is_narrow(x->dtype)) return vp_lin_run_widened(vp_cpu_batchnorm_internal, n, in, out, err);
    bn_geom g = geom_of(x);
    double eps = vp_train_attr_double(n, "epsilon", 1e-5), momentum = vp_train_attr_double(n, "momentum", 0.9);
    int training = vp_attr_int(n, "training_mode", 1) != 0;
    int64_t count = g.batch * g.plane;
    if (training && count < 2)
        return vp_node_fail(err, VP_ERR_RUNTIME, n, "training needs more than one value per channel (got %lld)",
                            (long long)count);
    double *buf = vp_lin_alloc(8 * g.channels, sizeof *buf);
    double *scale = load_doubles(in[1]), *bias = load_doubles(in[2]), *rmean = load_doubles(in[3]),
           *rvar = load_doubles(in[4]);
    vp_status s = VP_OK;
    if (!buf || !scale || !bias || !rmean || !rvar) {
        s = vp_node_fail(err, VP_ERR_NOMEM, n, "out of memory");
        goto done;
    }
    double *mean = buf, *inv = buf + 2 * g.channels;
    bn_job j = {x, NULL, out[0], g, training, eps, momentum, scale, bias, rmean, rvar, mean, buf + g.channels, inv,
                buf + 3 * g.channels, buf + 4 * g.channels, NULL, NULL};
    vp_par_for(g.channels, 3 * count, bn_forward_channels, &j);
    if (n->n_outputs > 1) store_doubles(out[1], j.new_mean);
    if (n->n_outputs > 2) store_doubles(out[2], j.new_var);
    if (n->n_outputs > 3) store_doubles(out[3], mean);
    if (n->n_outputs > 4) store_doubles(out[4], inv);
done:
    free(buf);
    free(scale);
    free(bias);
    free(rmean);
    free(rvar);
    return s;
}

/* ---- BatchNormalizationGrad ----
 *
 * With xhat = (x - mean) * inv_std and M values per channel:
 *   dbias = sum dy,  dscale = sum dy * xhat,
 *   dx = scale * inv_std / M * (M * dy - dbias - xhat * dscale). */

/* sum(dy) and sum(dy * (x - mean)) over one plane, in lanes as plane_moments. */
#define DEFINE_PLANE_GRAD_SUMS(T)                                                                  \
    VP_SIMD static void plane_grad_sums_##T(const T *d, const T *p, int64_t count, double mean, double *sdy, \
                                    double *sdyx) {                                                \
        double a[LANES] = {0}, b[LANES] = {0};                                                     \
        int64_t i = 0;                                                                             \
        for (; i + LANES <= count; i += LANES)                                                     \
            for (int k = 0; k < LANES; k++) {                                                      \
                a[k] += d[i + k];                                                                  \
                b[k] += d[i + k] * (p[i + k] - mean);                                              \
            }                                                                                      \
        for (; i < count; i++) {                                                                   \
            a[0] += d[i];                                                                          \
            b[0] += d[i] * (p[i] - mean);                                                          \
        }                                                                                          \
        *sdy += lanes_total(a);                                                                    \
        *sdyx += lanes_total(b);                                                                   \
    }
DEFINE_PLANE_GRAD_SUMS(float)
DEFINE_PLANE_GRAD_SUMS(double)

static void plane_grad_sums(const void *dy, const void *x, vp_dtype t, int64_t count, double mean, double *sdy,
                            double *sdyx) {
    if (t == VP_F32) plane_grad_sums_float(dy, x, count, mean, sdy, sdyx);
    else plane_grad_sums_double(dy, x, count, mean, sdy, sdyx);
}

/* dx = k * (dy - cb - (x - mean) * cx) over one plane. */
VP_SIMD static void plane_bn_dx(const void *dy, const void *x, void *dx, vp_dtype t, int64_t count, double k, double cb,
                        double mean, double cx) {
    if (t == VP_F32) {
        const float *d = dy, *p = x;
        float *q = dx;
        for (int64_t i = 0; i < count; i++) q[i] = (float)(k * (d[i] - cb - (p[i] - mean) * cx));
    } else {
        const double *d = dy, *p = x;
        double *q = dx;
        for (int64_t i = 0; i < count; i++) q[i] = k * (d[i] - cb - (p[i] - mean) * cx);
    }
}

static void bn_grad_channels(int64_t c0, int64_t c1, void *ctx) {
    const bn_job *j = ctx;
    bn_geom g = j->g;
    const double *mean = j->mean, *inv = j->inv, *scale = j->scale;
    double m = (double)(g.batch * g.plane);
    for (int64_t c = c0; c < c1; c++) {
        double sdy = 0, sdyx = 0;
        for (int64_t b = 0; b < g.batch; b++)
            plane_grad_sums(plane_at(j->dy, g, b, c), plane_at(j->x, g, b, c), j->x->dtype, g.plane, mean[c], &sdy,
                            &sdyx);
        j->dbias[c] = sdy;
        j->dscale[c] = sdyx * inv[c];
        if (!j->y || m == 0) continue;
        /* dx = scale*inv * (dy - dbias/M - (x - mean) * inv^2 * sum(dy*(x-mean)) / M) */
        double k = scale[c] * inv[c], cb = sdy / m, cx = inv[c] * inv[c] * sdyx / m;
        for (int64_t b = 0; b < g.batch; b++)
            plane_bn_dx(plane_at(j->dy, g, b, c), plane_at(j->x, g, b, c), (void *)plane_at(j->y, g, b, c),
                        j->x->dtype, g.plane, k, cb, mean[c], cx);
    }
}

VP_TRAIN_KERNEL(vp_cpu_batchnorm_grad) {
    const vp_tensor *dy = in[0], *x = in[1];
    if (vp_lin_is_narrow(x->dtype)) return vp_lin_run_widened(vp_cpu_batchnorm_grad, n, in, out, err);
    bn_geom g = geom_of(x);
    double m = (double)(g.batch * g.plane);
    double *buf = vp_lin_alloc(2 * g.channels, sizeof *buf);
    double *scale = load_doubles(in[2]), *mean = load_doubles(in[3]), *inv = load_doubles(in[4]);
    vp_status s = VP_OK;
    if (!buf || !scale || !mean || !inv) {
        s = vp_node_fail(err, VP_ERR_NOMEM, n, "out of memory");
        goto done;
    }
    bn_job j = {x, dy, out[0], g, 1, 0, 0, scale, NULL, NULL, NULL, mean, NULL, inv, NULL, NULL, buf, buf + g.channels};
    vp_par_for(g.channels, 3 * (int64_t)m, bn_grad_channels, &j);
    if (n->n_outputs > 1) store_doubles(out[1], j.dscale);
    if (n->n_outputs > 2) store_doubles(out[2], j.dbias);
done:
    free(buf);
    free(scale);
    free(mean);
    free(inv);
    return s;
}
