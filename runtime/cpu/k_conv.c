/* Sliding-window geometry, Conv and ConvTranspose.
 *
 * Conv lowers each (image, group) to gemm: im2col gathers, for every input channel and
 * kernel offset, the input values each output position reads into one row of a column
 * matrix, and W[Mg, Cg*K] x col[Cg*K, out] gives the output plane (in slabs of output
 * rows, so the column matrix stays bounded on large images).  A 1x1
 * kernel with unit stride and no padding needs no gather: the input already is the
 * column matrix.  ConvTranspose is the adjoint: W^T x X gives the column matrix and
 * col2im scatters (adds) it into the output. */
#include <stdlib.h>
#include <string.h>

#include "cpu_util.h"
#include "k_linalg.h"

/* ---- geometry ---- */

static int64_t floor_div(int64_t a, int64_t b) { return a / b - (a % b != 0 && (a < 0) != (b < 0)); }
static int64_t ceil_div(int64_t a, int64_t b) { return -floor_div(-a, b); }

static int64_t volume(const int64_t *dims, int n) {
    int64_t v = 1;
    for (int i = 0; i < n; i++) v *= dims[i];
    return v;
}

/* ---- the column matrix ----
 *
 * "Image" is the tensor windows read (Conv's input) or write (ConvTranspose's output);
 * "positions" are the other side.  For one kernel offset, a row of the column matrix
 * splits into runs along the last spatial axis: positions j in [lo, hi) touch image
 * element img + (j - lo) * stride, the others fall into padding. */
typedef struct win_run {
    int64_t img; /* image offset touched by position lo (unused when the run is empty) */
    int64_t lo, hi;
} win_run;

typedef struct win_table {
    int64_t kvol, outer, last; /* kernel offsets; runs per offset; positions per run */
    int64_t img_vol, pos_vol;
    int64_t step;              /* image stride along the last axis */
    win_run *runs;             /* [kvol][outer] */
} win_table;

static void run_of(const vp_window *w, const int64_t *img, const int64_t *pos, const int64_t *k, const int64_t *idx,
                   win_run *r) {
    int last = w->n_sp - 1;
    int64_t off = 0;
    r->lo = r->hi = r->img = 0;
    for (int d = 0; d < last; d++) {
        int64_t p = idx[d] * w->stride[d] - w->pad_begin[d] + k[d] * w->dilation[d];
        if (p < 0 || p >= img[d]) return;
        off = off * img[d] + p;
    }
    int64_t p0 = k[last] * w->dilation[last] - w->pad_begin[last], s = w->stride[last];
    int64_t hi = img[last] > p0 ? ceil_div(img[last] - p0, s) : 0;
    r->hi = hi < pos[last] ? hi : pos[last];
    r->lo = p0 >= 0 ? 0 : ceil_div(-p0, s);
    if (r->lo >= r->hi) {
        r->lo = r->hi;
        return;
    }
    r->img = off * img[last] + p0 + r->lo * s;
}

/* transpose: the image is the window's output (ConvTranspose). */
static vp_status win_table_build(const vp_node *n, const vp_window *w, int transpose, win_table *t, vp_error *err) {
    const int64_t *img = transpose ? w->out : w->in, *pos = transpose ? w->in : w->out;
    int last = w->n_sp - 1;
    t->kvol = vp_window_kernel_volume(w);
    t->last = pos[last];
    t->pos_vol = volume(pos, w->n_sp);
    t->img_vol = volume(img, w->n_sp);
    t->outer = t->pos_vol / t->last;
    t->step = w->stride[last];
    t->runs = t->kvol <= INT64_MAX / t->outer ? vp_lin_alloc(t->kvol * t->outer, sizeof *t->runs) : NULL;
    if (!t->runs) return vp_node_fail(err, VP_ERR_NOMEM, n, "out of memory for the window table");
    int64_t k[VP_MAX_SPATIAL], idx[VP_MAX_SPATIAL];
    for (int64_t kk = 0; kk < t->kvol; kk++) {
        int64_t rest = kk;
        for (int d = w->n_sp - 1; d >= 0; d--) {
            k[d] = rest % w->kernel[d];
            rest /= w->kernel[d];
        }
        for (int64_t o = 0; o < t->outer; o++) {
            int64_t r = o;
            for (int d = last - 1; d >= 0; d--) {
                idx[d] = r % pos[d];
                r /= pos[d];
            }
            run_of(w, img, pos, k, idx, &t->runs[kk * t->outer + o]);
        }
    }
    return VP_OK;
}

/* Gathers one run (zeros in padding); es is 4 or 8: the copy moves bits, any dtype. */
static void gather_run(char *dst, const char *src, const win_run *r, int64_t len, int64_t step, size_t es) {
    memset(dst, 0, (size_t)r->lo * es);
    memset(dst + r->hi * es, 0, (size_t)(len - r->hi) * es);
    if (r->hi <= r->lo) return;
    const char *s0 = src + r->img * (int64_t)es;
    int64_t count = r->hi - r->lo;
    dst += r->lo * (int64_t)es;
    if (step == 1) {
        memcpy(dst, s0, (size_t)count * es);
    } else if (es == 4) {
        uint32_t *d = (uint32_t *)dst;
        const uint32_t *s = (const uint32_t *)s0;
        for (int64_t j = 0; j < count; j++) d[j] = s[j * step];
    } else {
        uint64_t *d = (uint64_t *)dst;
        const uint64_t *s = (const uint64_t *)s0;
        for (int64_t j = 0; j < count; j++) d[j] = s[j * step];
    }
}

/* Gathers the column matrix of runs [o0, o0 + count) of every kernel offset: a
 * [channels * kvol, count * last] block of the full matrix. */
static void im2col(const void *x, size_t es, int64_t channels, const win_table *t, int64_t o0, int64_t count,
                   void *col) {
    int64_t width = count * t->last;
    for (int64_t c = 0; c < channels; c++) {
        const char *xc = (const char *)x + c * t->img_vol * (int64_t)es;
        for (int64_t kk = 0; kk < t->kvol; kk++) {
            char *row = (char *)col + (c * t->kvol + kk) * width * (int64_t)es;
            const win_run *runs = t->runs + kk * t->outer + o0;
            for (int64_t o = 0; o < count; o++)
                gather_run(row + o * t->last * (int64_t)es, xc, &runs[o], t->last, t->step, es);
        }
    }
}

/* Adds each run of the column matrix into the image. */
static void col2im(const void *col, vp_dtype dt, int64_t channels, const win_table *t, void *y) {
    for (int64_t c = 0; c < channels; c++)
        for (int64_t kk = 0; kk < t->kvol; kk++) {
            int64_t row = (c * t->kvol + kk) * t->pos_vol;
            const win_run *runs = t->runs + kk * t->outer;
            for (int64_t o = 0; o < t->outer; o++) {
                const win_run *r = &runs[o];
                int64_t src = row + o * t->last + r->lo, dst = c * t->img_vol + r->img, count = r->hi - r->lo;
                if (dt == VP_F32) {
                    const float *s = (const float *)col + src;
                    float *d = (float *)y + dst;
                    for (int64_t j = 0; j < count; j++) d[j * t->step] += s[j];
                } else {
                    const double *s = (const double *)col + src;
                    double *d = (double *)y + dst;
                    for (int64_t j = 0; j < count; j++) d[j * t->step] += s[j];
                }
            }
        }
}

/* Adds bias[m] to every element of output channel m. */
static void add_channel_bias(vp_tensor *y, const vp_tensor *bias) {
    int64_t batch = y->dims[0], m = y->dims[1], plane = batch && m ? vp_tensor_numel(y) / (batch * m) : 0;
    for (int64_t b = 0; b < batch; b++)
        for (int64_t c = 0; c < m; c++) {
            int64_t base = (b * m + c) * plane;
            if (y->dtype == VP_F32) {
                float *p = (float *)y->data + base, v = ((const float *)bias->data)[c];
                for (int64_t i = 0; i < plane; i++) p[i] += v;
            } else {
                double *p = (double *)y->data + base, v = ((const double *)bias->data)[c];
                for (int64_t i = 0; i < plane; i++) p[i] += v;
            }
        }
}

static int is_pointwise(const vp_window *w) {
    for (int d = 0; d < w->n_sp; d++)
        if (w->kernel[d] != 1 || w->stride[d] != 1 || w->pad_begin[d] || w->pad_end[d]) return 0;
    return 1;
}

/* ---- Conv ---- */

/* The column matrix is built a slab of output rows at a time, so a large image needs
 * at most this much scratch (more only when one row alone is larger). */
#define CONV_COL_BYTES ((int64_t)64 << 20)

typedef struct conv_plan {
    int64_t batch, groups, cg, mg; /* images; groups; channels in and out per group */
    int64_t kvol, ivol, ovol;
    size_t es;
    int64_t slab;                  /* runs (rows of the last axis) gathered per gemm */
} conv_plan;

/* Y[:, slab] = W x col for the runs [o0, o0 + count) of one image and group. */
static vp_status conv_slab(const conv_plan *p, const vp_node *n, vp_dtype dt, const char *xg, const char *wg, char *yg,
                           const win_table *t, int64_t o0, int64_t count, void *col, vp_error *err) {
    int64_t rows = p->cg * p->kvol, width = count * t->last;
    im2col(xg, p->es, p->cg, t, o0, count, col);
    return vp_lin_gemm(n, dt, 0, 0, p->mg, width, rows, 1.0, wg, rows, col, width, 0.0,
                       yg + o0 * t->last * (int64_t)p->es, p->ovol, err);
}

static vp_status conv_groups(const conv_plan *p, const vp_node *n, const vp_tensor *x, const vp_tensor *wt,
                             vp_tensor *y, const win_table *t, void *col, vp_error *err) {
    int64_t rows = p->cg * p->kvol;
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t g = 0; g < p->groups; g++) {
            const char *xg = (const char *)x->data + (b * p->groups + g) * p->cg * p->ivol * (int64_t)p->es;
            const char *wg = (const char *)wt->data + g * p->mg * rows * (int64_t)p->es;
            char *yg = (char *)y->data + (b * p->groups + g) * p->mg * p->ovol * (int64_t)p->es;
            vp_status s = VP_OK;
            if (!col) /* pointwise: the input already is the column matrix */
                s = vp_lin_gemm(n, x->dtype, 0, 0, p->mg, p->ovol, rows, 1.0, wg, rows, xg, p->ovol, 0.0, yg, p->ovol,
                                err);
            for (int64_t o0 = 0; col && !s && o0 < t->outer; o0 += p->slab) {
                int64_t count = t->outer - o0 < p->slab ? t->outer - o0 : p->slab;
                s = conv_slab(p, n, x->dtype, xg, wg, yg, t, o0, count, col, err);
            }
            if (s) return s;
        }
    return VP_OK;
}

vp_status vp_cpu_conv(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    const vp_tensor *x = in[0], *wt = in[1], *bias = n->n_inputs > 2 ? in[2] : NULL;
    vp_tensor *y = out[0];
    if (vp_lin_is_narrow(x->dtype)) return vp_lin_run_widened(vp_cpu_conv, n, in, out, err);
    vp_window w;
    vp_status s = vp_window_resolve(n, VP_WINDOW_CONV, x->rank - 2, x->dims + 2, wt->dims + 2, &w, err);
    if (s) return s;
    conv_plan p = {x->dims[0], vp_attr_int(n, "group", 1), 0, 0, vp_window_kernel_volume(&w),
                   vp_window_in_volume(&w), vp_window_out_volume(&w), vp_dtype_size(x->dtype), 0};
    p.cg = x->dims[1] / p.groups;
    p.mg = y->dims[1] / p.groups;
    win_table t = {0};
    void *col = NULL;
    if (!is_pointwise(&w)) {
        if ((s = win_table_build(n, &w, 0, &t, err))) return s;
        int64_t row_bytes = p.cg * p.kvol * t.last * (int64_t)p.es; /* one run of every column-matrix row */
        p.slab = row_bytes && row_bytes < CONV_COL_BYTES ? CONV_COL_BYTES / row_bytes : 1;
        if (p.slab > t.outer) p.slab = t.outer;
        int64_t width = p.slab * t.last;
        if (p.cg * p.kvol > INT64_MAX / width || !(col = vp_lin_alloc(p.cg * p.kvol * width, p.es))) {
            free(t.runs);
            return vp_node_fail(err, VP_ERR_NOMEM, n, "out of memory for the column matrix");
        }
    }
    s = conv_groups(&p, n, x, wt, y, &t, col, err);
    if (!s && bias) add_channel_bias(y, bias);
    free(col);
    free(t.runs);
    return s;
}

/* ---- ConvTranspose ---- */

static vp_status conv_transpose_groups(const conv_plan *p, const vp_node *n, const vp_tensor *x, const vp_tensor *wt,
                                       vp_tensor *y, const win_table *t, void *col, vp_error *err) {
    int64_t rows = p->mg * p->kvol;
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t g = 0; g < p->groups; g++) {
            const char *xg = (const char *)x->data + (b * p->groups + g) * p->cg * p->ivol * (int64_t)p->es;
            const char *wg = (const char *)wt->data + g * p->cg * rows * (int64_t)p->es;
            char *yg = (char *)y->data + (b * p->groups + g) * p->mg * p->ovol * (int64_t)p->es;
            vp_status s = vp_lin_gemm(n, x->dtype, 1, 0, rows, p->ivol, p->cg, 1.0, wg, rows, xg, p->ivol, 0.0, col,
                                      p->ivol, err);
            if (s) return s;
            memset(yg, 0, (size_t)(p->mg * p->ovol) * p->es);
            col2im(col, x->dtype, p->mg, t, yg);
        }
    return VP_OK;
}

vp_status vp_cpu_conv_transpose(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                vp_error *err) {
    const vp_tensor *x = in[0], *wt = in[1], *bias = n->n_inputs > 2 ? in[2] : NULL;
    vp_tensor *y = out[0];
    if (vp_lin_is_narrow(x->dtype)) return vp_lin_run_widened(vp_cpu_conv_transpose, n, in, out, err);
    vp_window w;
    vp_status s = vp_window_resolve(n, VP_WINDOW_CONV_TRANSPOSE, x->rank - 2, x->dims + 2, wt->dims + 2, &w, err);
    if (s) return s;
    conv_plan p = {x->dims[0], vp_attr_int(n, "group", 1), 0, wt->dims[1], vp_window_kernel_volume(&w),
                   vp_window_in_volume(&w), vp_window_out_volume(&w), vp_dtype_size(x->dtype), 0};
    p.cg = x->dims[1] / p.groups;
    win_table t = {0};
    if ((s = win_table_build(n, &w, 1, &t, err))) return s;
    void *col = p.mg * p.kvol <= INT64_MAX / p.ivol ? vp_lin_alloc(p.mg * p.kvol * p.ivol, p.es) : NULL;
    if (!col) s = vp_node_fail(err, VP_ERR_NOMEM, n, "out of memory for the column matrix");
    if (!s) s = conv_transpose_groups(&p, n, x, wt, y, &t, col, err);
    if (!s && bias) add_channel_bias(y, bias);
    free(col);
    free(t.runs);
    return s;
}
