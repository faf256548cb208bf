/* GatherGrad, SoftmaxCrossEntropyLossGrad, InPlaceAccumulatorV2 and ZeroGradient. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_par.h"
#include "cpu_util.h"
#include "k_linalg.h"
#include "k_tensor.h"
#include "k_train.h"
#include "k_vmath.h"

static int64_t load_index(const vp_tensor *t, int64_t i) {
    return t->dtype == VP_I64 ? ((const int64_t *)t->data)[i] : ((const int32_t *)t->data)[i];
}

/* Adds len elements of src into dst (both of dtype t). */
static void add_run(void *dst, const void *src, vp_dtype t, int64_t len) {
    if (t == VP_F32) {
        float *d = dst;
        const float *s = src;
        for (int64_t i = 0; i < len; i++) d[i] += s[i];
    } else {
        double *d = dst;
        const double *s = src;
        for (int64_t i = 0; i < len; i++) d[i] += s[i];
    }
}

/* ---- GatherGrad: dX = zeros(shape); dX[..., indices[j], ...] += dY[..., j, ...] ----
 *
 * Duplicate indices accumulate and negative ones count from the end of the axis, as
 * Gather reads them. */
typedef struct gather_grad_job {
    const int64_t *ix; /* the indices, checked and counted from 0 */
    int64_t dim, count, inner;
    vp_dtype t;
    const char *dy;
    char *dx;
} gather_grad_job;

/* Outer slices [lo, hi): each adds its dY rows in index order, so the sums are the same
 * on any number of threads. */
static void gather_grad_rows(int64_t lo, int64_t hi, void *ctx) {
    const gather_grad_job *g = ctx;
    size_t es = vp_dtype_size(g->t);
    for (int64_t o = lo; o < hi; o++) {
        if (g->t == VP_F32 && g->inner == 1) { /* one element a row: Gather along the last axis */
            float *d = (float *)g->dx + o * g->dim;
            const float *y = (const float *)g->dy + o * g->count;
            for (int64_t j = 0; j < g->count; j++) d[g->ix[j]] += y[j];
            continue;
        }
        for (int64_t j = 0; j < g->count; j++)
            add_run(g->dx + (size_t)((o * g->dim + g->ix[j]) * g->inner) * es,
                    g->dy + (size_t)((o * g->count + j) * g->inner) * es, g->t, g->inner);
    }
}

VP_TRAIN_KERNEL(vp_cpu_gather_grad) {
    if (!out[0]) return VP_OK;
    const vp_tensor *idx = in[1], *dy = in[2];
    vp_tensor *dx = out[0];
    if (vp_lin_is_narrow(dy->dtype)) return vp_lin_run_widened(vp_cpu_gather_grad, n, in, out, err);
    int64_t axis = vp_attr_int(n, "axis", 0);
    if (axis < 0) axis += dx->rank;
    int64_t outer = 1, inner = 1, dim = dx->dims[axis], count = vp_tensor_numel(idx);
    for (int d = 0; d < axis; d++) outer *= dx->dims[d];
    for (int d = (int)axis + 1; d < dx->rank; d++) inner *= dx->dims[d];
    int64_t *ix;
    vp_status s = vp_cpu_axis_indices(n, idx, (int)axis, dim, &ix, err);
    if (s) return s;
    memset(dx->data, 0, vp_tensor_nbytes(dx));
    gather_grad_job g = {ix, dim, count, inner, dx->dtype, dy->data, dx->data};
    vp_par_for(outer, count * inner, gather_grad_rows, &g);
    free(ix);
    return VP_OK;
}

/* ---- SoftmaxCrossEntropyLossGrad ----
 *
 * log_prob [N, C, D...], label [N, D...]; for each position (n, d) with label c not
 * ignored and weight w = weight[c] (1 without weights):
 *   d_logit[n, :, d] = s * (exp(log_prob[n, :, d]) - onehot(c)),
 *   s = dY[n, d] * w             (reduction none)
 *   s = dY * w                   (sum)
 *   s = dY * w / total           (mean; total = the sum of w over non-ignored positions,
 *                                 their count without weights, as ONNX's loss divides)
 * Ignored positions (label == ignore_index, or -1 without the attribute, as ONNX
 * Runtime's kernel defaults it) get zeros; the optional bias is added to the result. */

typedef struct sce_job {
    int64_t batch, classes, inner;
    int64_t ignore; /* the label to skip: ignore_index, -1 when absent as in ONNX Runtime */
} sce_job;

static vp_status sce_total(const vp_node *n, const sce_job *j, const vp_tensor *label, const vp_tensor *weight,
                           double *total, vp_error *err) {
    *total = 0;
    int64_t count = j->batch * j->inner;
    for (int64_t i = 0; i < count; i++) {
        int64_t c = load_index(label, i);
        if (c == j->ignore) continue;
        if (c < 0 || c >= j->classes)
            return vp_node_fail(err, VP_ERR_RUNTIME, n, "label[%lld] = %lld is outside [0, %lld)", (long long)i,
                                (long long)c, (long long)j->classes);
        *total += weight ? vp_train_scalar(weight, c) : 1.0;
    }
    return VP_OK;
}

/* Positions [lo, hi) (each b * inner + i) of the gradient: every position writes only
 * its own classes, so the threads split positions and the bits stay the same. */
typedef struct sce_grad_job {
    const sce_job *j;
    const vp_tensor *dy, *lp, *label, *weight, *bias;
    vp_tensor *dl;
    int none, mean;
    double total;
} sce_grad_job;

/* float32 log-probabilities and gradient with the classes contiguous (inner 1, no bias):
 * exp(log_prob) through k_vmath's float32 exp (within an ulp; the double exp was most of
 * the kernel), written into the row first and scaled there in double as below. */
static void sce_grad_rows_f32(const sce_grad_job *g, int64_t lo, int64_t hi) {
    const sce_job *j = g->j;
    for (int64_t pos = lo; pos < hi; pos++) {
        int64_t c = load_index(g->label, pos), base = pos * j->classes;
        float *row = (float *)g->dl->data + base;
        if (c == j->ignore) {
            memset(row, 0, (size_t)j->classes * sizeof *row);
            continue;
        }
        double scale = vp_train_scalar(g->dy, g->none ? pos : 0) * (g->weight ? vp_train_scalar(g->weight, c) : 1);
        if (g->mean) scale /= g->total;
        vp_vm_exp_shift_f32((const float *)g->lp->data + base, 0.0f, row, j->classes);
        for (int64_t k = 0; k < j->classes; k++) row[k] = (float)(scale * ((double)row[k] - (k == c)));
    }
}

static void sce_grad_rows(int64_t lo, int64_t hi, void *ctx) {
    const sce_grad_job *g = ctx;
    const sce_job *j = g->j;
    if (g->lp->dtype == VP_F32 && g->dl->dtype == VP_F32 && j->inner == 1 && !g->bias) {
        sce_grad_rows_f32(g, lo, hi);
        return;
    }
    for (int64_t pos = lo; pos < hi; pos++) {
        int64_t b = pos / j->inner, i = pos % j->inner;
        int64_t c = load_index(g->label, pos), base = b * j->classes * j->inner + i;
        int ignored = c == j->ignore;
        double scale = ignored ? 0 : vp_train_scalar(g->dy, g->none ? pos : 0) * (g->weight ? vp_train_scalar(g->weight, c) : 1);
        if (g->mean && !ignored) scale /= g->total;
        for (int64_t k = 0; k < j->classes; k++) {
            int64_t at = base + k * j->inner;
            double v = ignored ? 0 : scale * (exp(vp_train_scalar(g->lp, at)) - (k == c));
            if (g->bias) v += vp_train_scalar(g->bias, at);
            vp_store(g->dl->data, g->dl->dtype, at, v);
        }
    }
}

VP_TRAIN_KERNEL(vp_cpu_sce_loss_grad) {
    if (!out[0]) return VP_OK;
    const vp_tensor *dy = in[0], *lp = in[1], *label = in[2];
    const vp_tensor *weight = n->n_inputs > 3 ? in[3] : NULL, *bias = n->n_inputs > 4 ? in[4] : NULL;
    vp_tensor *dl = out[0];
    if (vp_lin_is_narrow(lp->dtype)) return vp_lin_run_widened(vp_cpu_sce_loss_grad, n, in, out, err);
    sce_job j = {lp->dims[0], lp->dims[1], 1, vp_attr_int(n, "ignore_index", -1)};
    for (int d = 2; d < lp->rank; d++) j.inner *= lp->dims[d];
    const char *red = vp_attr_string(n, "reduction", "mean");
    int none = !strcmp(red, "none"), mean = !strcmp(red, "mean");
    double total;
    vp_status s = sce_total(n, &j, label, weight, &total, err);
    if (s) return s;
    sce_grad_job g = {&j, dy, lp, label, weight, bias, dl, none, mean, total};
    vp_par_for(j.batch * j.inner, j.classes * 8, sce_grad_rows, &g);
    return VP_OK;
}

/* ---- gradient accumulation ---- */

/* InPlaceAccumulatorV2: buffer_out = overwrite ? value : buffer + value; the flag says
 * the update happened (always, here).  Without buffer_out ONNX Runtime updates the
 * buffer in place; our tensors are values, so only the flag is written. */
VP_TRAIN_KERNEL(vp_cpu_inplace_accumulator_v2) {
    (void)err;
    const vp_tensor *buf = in[0], *val = in[1], *flag = n->n_inputs > 2 ? in[2] : NULL;
    vp_tensor *done = out[0], *res = n->n_outputs > 1 ? out[1] : NULL;
    if (done) ((uint8_t *)done->data)[0] = 1;
    if (!res) return VP_OK;
    int overwrite = flag && ((const uint8_t *)flag->data)[0];
    int64_t count = vp_tensor_numel(res);
    if (buf->dtype == val->dtype && (buf->dtype == VP_F32 || buf->dtype == VP_F64)) {
        memcpy(res->data, overwrite ? val->data : buf->data, vp_tensor_nbytes(res));
        if (!overwrite) add_run(res->data, val->data, res->dtype, count);
        return VP_OK;
    }
    for (int64_t i = 0; i < count; i++) {
        double v = vp_train_scalar(val, i);
        vp_store(res->data, res->dtype, i, overwrite ? v : vp_train_scalar(buf, i) + v);
    }
    return VP_OK;
}

VP_TRAIN_KERNEL(vp_cpu_zero_gradient) {
    (void)n;
    (void)in;
    (void)err;
    if (out[0]) memset(out[0]->data, 0, vp_tensor_nbytes(out[0]));
    return VP_OK;
}

/* Stops at the first offending element: a step that overflowed is skipped anyway. */
VP_TRAIN_KERNEL(vp_cpu_is_all_finite) {
    (void)err;
    int inf_only = vp_attr_int(n, "isinf_only", 0) != 0, nan_only = vp_attr_int(n, "isnan_only", 0) != 0;
    int ok = 1;
    for (int k = 0; k < n->n_inputs && ok; k++) {
        const vp_tensor *x = in[k];
        if (!x) continue;
        int64_t count = vp_tensor_numel(x);
        for (int64_t i = 0; i < count && ok; i++) {
            double v = vp_load(x->data, x->dtype, i);
            int is_nan = v != v, is_inf = !is_nan && (v - v) != 0;
            ok = !(inf_only ? is_inf : nan_only ? is_nan : is_nan || is_inf);
        }
    }
    *(uint8_t *)out[0]->data = (uint8_t)ok;
    return VP_OK;
}
