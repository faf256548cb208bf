/* ConvGrad, MaxPoolGrad and AveragePoolGrad.
 *
 * ConvGrad lowers each (image, group) to two gemms around a column matrix, as the
 * forward Conv does: im2col gathers what each output position reads, so
 *   dW[Mg, Cg*K] += dY[Mg, out] x col^T[out, Cg*K]
 * and the adjoint scatters back:
 *   col = W^T[Cg*K, Mg] x dY[Mg, out],   dX += col2im(col).
 * A 1x1 kernel with unit stride and no padding needs no column matrix at all.
 *
 * Both read a tap table: for kernel offset k and output position o, the input offset
 * the window reads, or that it falls into the explicit padding or beyond it. */
#include <stdlib.h>
#include <string.h>

#include "cpu_par.h"
#include "cpu_util.h"
#include "k_linalg.h"
#include "k_train.h"

enum { TAP_PAD = -1, TAP_BEYOND = -2 };

/* taps[k * out_volume + o]; NULL when out of memory. */
static int64_t *window_taps(const vp_window *w) {
    int64_t ovol = vp_window_out_volume(w), kvol = vp_window_kernel_volume(w);
    if (ovol && kvol > INT64_MAX / ovol) return NULL;
    int64_t *taps = vp_lin_alloc(kvol * ovol, sizeof *taps);
    if (!taps) return NULL;
    int64_t k[VP_MAX_SPATIAL], idx[VP_MAX_SPATIAL];
    for (int64_t kk = 0; kk < kvol; kk++) {
        for (int64_t d = w->n_sp - 1, r = kk; d >= 0; d--) {
            k[d] = r % w->kernel[d];
            r /= w->kernel[d];
        }
        for (int64_t o = 0; o < ovol; o++) {
            for (int64_t d = w->n_sp - 1, r = o; d >= 0; d--) {
                idx[d] = r % w->out[d];
                r /= w->out[d];
            }
            int64_t off = 0, tap = 0;
            for (int d = 0; d < w->n_sp; d++) {
                int64_t p = idx[d] * w->stride[d] - w->pad_begin[d] + k[d] * w->dilation[d];
                if (p < -w->pad_begin[d] || p >= w->in[d] + w->pad_end[d]) tap = TAP_BEYOND;
                else if ((p < 0 || p >= w->in[d]) && tap == 0) tap = TAP_PAD;
                off = off * w->in[d] + (p < 0 ? 0 : p);
            }
            taps[kk * ovol + o] = tap ? tap : off;
        }
    }
    return taps;
}

/* ---- ConvGrad ---- */

typedef struct conv_grad_job {
    int64_t batch, groups, cg, mg, kvol, ivol, ovol;
    size_t es;
    const int64_t *taps; /* NULL for a pointwise kernel */
    void *col;           /* [cg * kvol, ovol] */
} conv_grad_job;

static void im2col(const conv_grad_job *j, vp_dtype t, const void *x) {
    int64_t rows = j->cg * j->kvol;
    for (int64_t r = 0; r < rows; r++) {
        int64_t c = r / j->kvol, kk = r % j->kvol;
        const int64_t *tap = j->taps + kk * j->ovol;
        if (t == VP_F32) {
            const float *xc = (const float *)x + c * j->ivol;
            float *row = (float *)j->col + r * j->ovol;
            for (int64_t o = 0; o < j->ovol; o++) row[o] = tap[o] >= 0 ? xc[tap[o]] : 0.0f;
        } else {
            const double *xc = (const double *)x + c * j->ivol;
            double *row = (double *)j->col + r * j->ovol;
            for (int64_t o = 0; o < j->ovol; o++) row[o] = tap[o] >= 0 ? xc[tap[o]] : 0.0;
        }
    }
}

static void col2im_add(const conv_grad_job *j, vp_dtype t, void *dx) {
    int64_t rows = j->cg * j->kvol;
    for (int64_t r = 0; r < rows; r++) {
        int64_t c = r / j->kvol, kk = r % j->kvol;
        const int64_t *tap = j->taps + kk * j->ovol;
        if (t == VP_F32) {
            float *xc = (float *)dx + c * j->ivol;
            const float *row = (const float *)j->col + r * j->ovol;
            for (int64_t o = 0; o < j->ovol; o++)
                if (tap[o] >= 0) xc[tap[o]] += row[o];
        } else {
            double *xc = (double *)dx + c * j->ivol;
            const double *row = (const double *)j->col + r * j->ovol;
            for (int64_t o = 0; o < j->ovol; o++)
                if (tap[o] >= 0) xc[tap[o]] += row[o];
        }
    }
}

static vp_status conv_grad_group(const conv_grad_job *j, const vp_node *n, vp_dtype t, const char *dyg, const char *xg,
                                 const char *wg, char *dxg, char *dwg, vp_error *err) {
    int64_t rows = j->cg * j->kvol;
    vp_status s = VP_OK;
    if (dwg) {
        const void *src = xg;
        if (j->taps) {
            im2col(j, t, xg);
            src = j->col;
        }
        s = vp_lin_gemm(n, t, 0, 1, j->mg, rows, j->ovol, 1.0, dyg, j->ovol, src, j->ovol, 1.0, dwg, rows, err);
    }
    if (!s && dxg) {
        void *dst = j->taps ? j->col : dxg;
        s = vp_lin_gemm(n, t, 1, 0, rows, j->ovol, j->mg, 1.0, wg, rows, dyg, j->ovol, 0.0, dst, j->ovol, err);
        if (!s && j->taps) col2im_add(j, t, dxg);
    }
    return s;
}

/* Sum of count elements of a float32 or float64 tensor from offset base. */
static double run_sum(const vp_tensor *t, int64_t base, int64_t count) {
    double acc = 0;
    if (t->dtype == VP_F32) {
        const float *p = (const float *)t->data + base;
        for (int64_t i = 0; i < count; i++) acc += p[i];
    } else {
        const double *p = (const double *)t->data + base;
        for (int64_t i = 0; i < count; i++) acc += p[i];
    }
    return acc;
}

/* dB[m] = sum of dY over the batch and the spatial axes. */
static void conv_bias_grad(const vp_tensor *dy, vp_tensor *db) {
    int64_t batch = dy->dims[0], m = dy->dims[1], plane = batch && m ? vp_tensor_numel(dy) / (batch * m) : 0;
    for (int64_t c = 0; c < m; c++) {
        double acc = 0;
        for (int64_t b = 0; b < batch; b++) acc += run_sum(dy, (b * m + c) * plane, plane);
        vp_store(db->data, db->dtype, c, acc);
    }
}

static int is_pointwise(const vp_window *w) {
    for (int d = 0; d < w->n_sp; d++)
        if (w->kernel[d] != 1 || w->stride[d] != 1 || w->pad_begin[d] || w->pad_end[d]) return 0;
    return 1;
}

VP_TRAIN_KERNEL(vp_cpu_conv_grad) {
    const vp_tensor *dy = in[0], *x = in[1], *wt = in[2];
    vp_tensor *dx = out[0], *dw = n->n_outputs > 1 ? out[1] : NULL, *db = n->n_outputs > 2 ? out[2] : NULL;
    if (vp_lin_is_narrow(x->dtype)) return vp_lin_run_widened(vp_cpu_conv_grad, n, in, out, err);
    vp_window w;
    vp_status s = vp_window_resolve(n, VP_WINDOW_CONV, x->rank - 2, x->dims + 2, wt->dims + 2, &w, err);
    if (s) return s;
    conv_grad_job j = {x->dims[0], vp_attr_int(n, "group", 1), 0, 0, vp_window_kernel_volume(&w),
                       vp_window_in_volume(&w), vp_window_out_volume(&w), vp_dtype_size(x->dtype), NULL, NULL};
    j.cg = x->dims[1] / j.groups;
    j.mg = wt->dims[0] / j.groups;
    int64_t *taps = NULL;
    if ((dx || dw) && !is_pointwise(&w)) {
        taps = window_taps(&w);
        j.taps = taps;
        j.col = taps && j.cg * j.kvol <= INT64_MAX / (j.ovol ? j.ovol : 1) ? vp_lin_alloc(j.cg * j.kvol * j.ovol, j.es)
                                                                           : NULL;
        if (!j.col) {
            free(taps);
            return vp_node_fail(err, VP_ERR_NOMEM, n, "out of memory for the column matrix");
        }
    }
    if (dx) memset(dx->data, 0, vp_tensor_nbytes(dx));
    if (dw) memset(dw->data, 0, vp_tensor_nbytes(dw));
    int64_t es = (int64_t)j.es, wsize = j.mg * j.cg * j.kvol;
    for (int64_t b = 0; b < j.batch && !s && (dx || dw); b++)
        for (int64_t g = 0; g < j.groups && !s; g++) {
            int64_t xo = (b * j.groups + g) * j.cg * j.ivol, yo = (b * j.groups + g) * j.mg * j.ovol;
            s = conv_grad_group(&j, n, x->dtype, (const char *)dy->data + yo * es, (const char *)x->data + xo * es,
                                (const char *)wt->data + g * wsize * es, dx ? (char *)dx->data + xo * es : NULL,
                                dw ? (char *)dw->data + g * wsize * es : NULL, err);
        }
    if (!s && db) conv_bias_grad(dy, db);
    free(j.col);
    free(taps);
    return s;
}

/* ---- MaxPoolGrad: dX[indices[i]] += dY[i], indices flat over the whole input ---- */

VP_TRAIN_KERNEL(vp_cpu_maxpool_grad) {
    if (!out[0]) return VP_OK;
    const vp_tensor *dy = in[0], *idx = in[1];
    vp_tensor *dx = out[0];
    if (vp_lin_is_narrow(dy->dtype)) return vp_lin_run_widened(vp_cpu_maxpool_grad, n, in, out, err);
    int64_t count = vp_tensor_numel(dy), limit = vp_tensor_numel(dx);
    const int64_t *ix = idx->data;
    memset(dx->data, 0, vp_tensor_nbytes(dx));
    for (int64_t i = 0; i < count; i++) {
        if (ix[i] < 0 || ix[i] >= limit)
            return vp_node_fail(err, VP_ERR_RUNTIME, n, "Indices[%lld] = %lld is outside dX (%lld elements)",
                                (long long)i, (long long)ix[i], (long long)limit);
        if (dy->dtype == VP_F32) ((float *)dx->data)[ix[i]] += ((const float *)dy->data)[i];
        else ((double *)dx->data)[ix[i]] += ((const double *)dy->data)[i];
    }
    return VP_OK;
}

/* ---- AveragePoolGrad ----
 *
 * Each output position spreads dY / count over the input elements its window read;
 * count is the number of those elements, plus the padding it covered when
 * count_include_pad is set (never the part of a ceil_mode window beyond the padding),
 * as the forward AveragePool divides. */

static void avgpool_plane(const int64_t *taps, int64_t kvol, int64_t ovol, int include_pad, vp_dtype t, const void *dy,
                          void *dx) {
    for (int64_t o = 0; o < ovol; o++) {
        int64_t count = 0;
        for (int64_t k = 0; k < kvol; k++) {
            int64_t tap = taps[k * ovol + o];
            count += tap >= 0 || (include_pad && tap == TAP_PAD);
        }
        if (!count) continue;
        if (t == VP_F32) {
            float share = ((const float *)dy)[o] / (float)count;
            for (int64_t k = 0; k < kvol; k++)
                if (taps[k * ovol + o] >= 0) ((float *)dx)[taps[k * ovol + o]] += share;
        } else {
            double share = ((const double *)dy)[o] / (double)count;
            for (int64_t k = 0; k < kvol; k++)
                if (taps[k * ovol + o] >= 0) ((double *)dx)[taps[k * ovol + o]] += share;
        }
    }
}

typedef struct avgpool_grad_job {
    const int64_t *taps;
    int64_t kvol, ovol, ivol, es;
    int include_pad;
    const vp_tensor *dy;
    vp_tensor *dx;
} avgpool_grad_job;

static void avgpool_grad_planes(int64_t lo, int64_t hi, void *ctx) {
    const avgpool_grad_job *j = ctx;
    for (int64_t p = lo; p < hi; p++)
        avgpool_plane(j->taps, j->kvol, j->ovol, j->include_pad, j->dx->dtype, (const char *)j->dy->data + p * j->ovol * j->es,
                      (char *)j->dx->data + p * j->ivol * j->es);
}

VP_TRAIN_KERNEL(vp_cpu_avgpool_grad) {
    if (!out[0]) return VP_OK;
    const vp_tensor *dy = in[0];
    vp_tensor *dx = out[0];
    if (vp_lin_is_narrow(dy->dtype)) return vp_lin_run_widened(vp_cpu_avgpool_grad, n, in, out, err);
    vp_window w;
    vp_status s = vp_window_resolve(n, VP_WINDOW_AVGPOOL, dx->rank - 2, dx->dims + 2, NULL, &w, err);
    if (s) return s;
    int64_t *taps = window_taps(&w);
    if (!taps) return vp_node_fail(err, VP_ERR_NOMEM, n, "out of memory for the pooling taps");
    int64_t planes = dx->dims[0] * dx->dims[1], ivol = vp_window_in_volume(&w), ovol = vp_window_out_volume(&w);
    int64_t kvol = vp_window_kernel_volume(&w), es = (int64_t)vp_dtype_size(dx->dtype);
    int include_pad = vp_attr_int(n, "count_include_pad", 0) != 0;
    memset(dx->data, 0, vp_tensor_nbytes(dx));
    avgpool_grad_job j = {taps, kvol, ovol, ivol, es, include_pad, dy, dx};
    vp_par_for(planes, ovol * kvol, avgpool_grad_planes, &j); /* a plane writes only its own dX */
    free(taps);
    return VP_OK;
}
