/* Reduce*, ArgMax and ArgMin on the CPU, and the line access the family shares.
 *
 * A reduction walks its input once, in memory order, one line at a time.  Axes of
 * size 1 are dropped and neighbouring axes that are both reduced or both kept are
 * merged, so the input becomes a few groups; the last group is the line.  A line of
 * kept axes folds element-wise into a row of accumulators, a line of reduced axes
 * folds into one.  Floats accumulate in double; integers in int64 (wrapping), except
 * where the result is not an integer operation (L2, LogSum), which go through double. */
#include <math.h>
#include <stdlib.h>

#include "cpu_par.h"
#include "cpu_util.h"
#include "k_reduce.h"

enum { LINE_CHUNK = 256 }; /* elements converted per step: a 2 KiB stack buffer */

/* ---- line access ---- */

void vp_red_load_f64(const void *data, vp_dtype t, int64_t off, int64_t stride, int64_t k, double *buf) {
    if (t == VP_F32) {
        const float *p = (const float *)data + off;
        for (int64_t i = 0; i < k; i++) buf[i] = p[i * stride];
    } else if (t == VP_F64) {
        const double *p = (const double *)data + off;
        for (int64_t i = 0; i < k; i++) buf[i] = p[i * stride];
    } else {
        for (int64_t i = 0; i < k; i++) buf[i] = vp_load(data, t, off + i * stride);
    }
}

void vp_red_store_f64(void *data, vp_dtype t, int64_t off, int64_t stride, int64_t k, const double *buf) {
    if (t == VP_F32) {
        float *p = (float *)data + off;
        for (int64_t i = 0; i < k; i++) p[i * stride] = (float)buf[i];
    } else if (t == VP_F64) {
        double *p = (double *)data + off;
        for (int64_t i = 0; i < k; i++) p[i * stride] = buf[i];
    } else {
        for (int64_t i = 0; i < k; i++) vp_store(data, t, off + i * stride, buf[i]);
    }
}

void vp_red_load_i64(const void *data, vp_dtype t, int64_t off, int64_t stride, int64_t k, int64_t *buf) {
    if (t == VP_I64) {
        const int64_t *p = (const int64_t *)data + off;
        for (int64_t i = 0; i < k; i++) buf[i] = p[i * stride];
    } else if (t == VP_I32) {
        const int32_t *p = (const int32_t *)data + off;
        for (int64_t i = 0; i < k; i++) buf[i] = p[i * stride];
    } else { /* 8- and 16-bit types and bool: exact through double */
        for (int64_t i = 0; i < k; i++) buf[i] = (int64_t)vp_load(data, t, off + i * stride);
    }
}

void vp_red_store_i64(void *data, vp_dtype t, int64_t off, int64_t stride, int64_t k, const int64_t *buf) {
    /* narrowing goes through the unsigned type: defined, and the wrap integer arithmetic gives */
#define STORE_AS(T, UT)                                                                 \
    for (int64_t i = 0; i < k; i++) ((T *)data)[off + i * stride] = (T)(UT)(uint64_t)buf[i]; \
    break
    switch (t) {
    case VP_I64: STORE_AS(int64_t, uint64_t);
    case VP_I32: STORE_AS(int32_t, uint32_t);
    case VP_I16: STORE_AS(int16_t, uint16_t);
    case VP_U16: STORE_AS(uint16_t, uint16_t);
    case VP_I8: STORE_AS(int8_t, uint8_t);
    case VP_U8: STORE_AS(uint8_t, uint8_t);
    case VP_BOOL:
        for (int64_t i = 0; i < k; i++) ((uint8_t *)data)[off + i * stride] = buf[i] != 0;
        break;
    default:
        for (int64_t i = 0; i < k; i++) vp_store(data, t, off + i * stride, (double)buf[i]);
        break;
    }
#undef STORE_AS
}

/* ---- which axes ---- */

/* The axes as the kernel sees them: the axes input when there is one, else the attribute. */
static vp_status kernel_axes_mask(const vp_node *n, const vp_tensor *const *in, int rank, unsigned *mask,
                                  vp_error *err) {
    int64_t axes[VP_MAX_RANK];
    int n_axes = 0;
    const vp_tensor *t = n->n_inputs > 1 ? in[1] : NULL;
    if (t) {
        int64_t k = vp_tensor_numel(t);
        if (k > VP_MAX_RANK) return vp_node_fail(err, VP_ERR_RUNTIME, n, "axes input has %lld entries", (long long)k);
        vp_red_load_i64(t->data, t->dtype, 0, 1, k, axes);
        n_axes = (int)k;
    } else {
        const int64_t *a;
        int k = vp_attr_ints(n, "axes", &a);
        if (k > VP_MAX_RANK) return vp_node_fail(err, VP_ERR_INVALID, n, "axes attribute has %d entries", k);
        for (int i = 0; i < k; i++) axes[i] = a[i];
        n_axes = k > 0 ? k : 0;
    }
    vp_status s = vp_reduce_axes_mask(n, rank, axes, n_axes, mask, err);
    return s == VP_ERR_INVALID ? VP_ERR_RUNTIME : s;
}

/* ---- the walk ---- */

typedef enum reduce_kind {
    RED_SUM,
    RED_MEAN,
    RED_SUM_SQUARE,
    RED_L1,
    RED_L2,
    RED_LOG_SUM,
    RED_LOG_SUM_EXP, /* folds exp(x - shift); the shift is the max, found by a first walk */
    RED_PROD,
    RED_MAX,
    RED_MIN,
} reduce_kind;

/* The input as groups of axes, walked one line (the last group) at a time. */
typedef struct reduce_walk {
    int n_groups;
    int64_t size[VP_MAX_RANK];
    int64_t out_stride[VP_MAX_RANK]; /* element stride in the output; 0 on reduced groups */
    int line_reduced;                /* the line folds into one accumulator, not a row */
    int64_t line_len;
    int64_t n_lines;
    int64_t n_reduced;               /* input elements folded into each output */
} reduce_walk;

static void reduce_walk_init(const vp_tensor *x, unsigned mask, reduce_walk *w) {
    int reduced[VP_MAX_RANK];
    w->n_groups = 0;
    w->n_reduced = 1;
    for (int d = 0; d < x->rank; d++) {
        int r = (mask >> d) & 1;
        if (r) w->n_reduced *= x->dims[d];
        if (x->dims[d] == 1) continue;
        if (w->n_groups && reduced[w->n_groups - 1] == r) {
            w->size[w->n_groups - 1] *= x->dims[d];
            continue;
        }
        reduced[w->n_groups] = r;
        w->size[w->n_groups++] = x->dims[d];
    }
    int64_t stride = 1;
    for (int gi = w->n_groups - 1; gi >= 0; gi--) {
        w->out_stride[gi] = reduced[gi] ? 0 : stride;
        if (!reduced[gi]) stride *= w->size[gi];
    }
    w->line_reduced = w->n_groups && reduced[w->n_groups - 1];
    w->line_len = w->n_groups ? w->size[w->n_groups - 1] : 1;
    w->n_lines = w->line_len ? vp_tensor_numel(x) / w->line_len : 0;
}

/* An iterator over the groups before the line, tracking the output offset. */
static void reduce_walk_iter(const reduce_walk *w, vp_nd_iter *it) {
    *it = (vp_nd_iter){.rank = w->n_groups > 1 ? w->n_groups - 1 : 0, .n_ops = 1};
    for (int d = 0; d < it->rank; d++) {
        it->dims[d] = w->size[d];
        it->strides[0][d] = w->out_stride[d];
    }
}

static double identity_f64(reduce_kind k) {
    switch (k) {
    case RED_PROD: return 1;
    case RED_MAX: return -INFINITY;
    case RED_MIN: return INFINITY;
    default: return 0;
    }
}

/* max and min that keep a NaN once seen, as numpy does */
static inline double max_nan(double a, double b) { return b > a || b != b ? b : a; }
static inline double min_nan(double a, double b) { return b < a || b != b ? b : a; }

/* Folds x[0..n) element-wise into the row acc[0..n) (a line of kept axes). */
static void fold_row_f64(reduce_kind k, const double *x, int64_t n, double *acc, const double *shift) {
    switch (k) {
    case RED_SUM: case RED_MEAN: case RED_LOG_SUM:
        for (int64_t i = 0; i < n; i++) acc[i] += x[i];
        break;
    case RED_SUM_SQUARE: case RED_L2:
        for (int64_t i = 0; i < n; i++) acc[i] += x[i] * x[i];
        break;
    case RED_L1:
        for (int64_t i = 0; i < n; i++) acc[i] += fabs(x[i]);
        break;
    case RED_LOG_SUM_EXP:
        for (int64_t i = 0; i < n; i++) acc[i] += exp(x[i] - shift[i]);
        break;
    case RED_PROD:
        for (int64_t i = 0; i < n; i++) acc[i] *= x[i];
        break;
    case RED_MAX:
        for (int64_t i = 0; i < n; i++) acc[i] = max_nan(acc[i], x[i]);
        break;
    case RED_MIN:
        for (int64_t i = 0; i < n; i++) acc[i] = min_nan(acc[i], x[i]);
        break;
    }
}

/* Folds x[0..n) into the one accumulator a (a line of reduced axes).  Kept in a local
 * so the loop carries it in a register, not through memory. */
static double fold_run_f64(reduce_kind k, const double *x, int64_t n, double a, double shift) {
    switch (k) {
    case RED_SUM: case RED_MEAN: case RED_LOG_SUM:
        for (int64_t i = 0; i < n; i++) a += x[i];
        break;
    case RED_SUM_SQUARE: case RED_L2:
        for (int64_t i = 0; i < n; i++) a += x[i] * x[i];
        break;
    case RED_L1:
        for (int64_t i = 0; i < n; i++) a += fabs(x[i]);
        break;
    case RED_LOG_SUM_EXP:
        for (int64_t i = 0; i < n; i++) a += exp(x[i] - shift);
        break;
    case RED_PROD:
        for (int64_t i = 0; i < n; i++) a *= x[i];
        break;
    case RED_MAX:
        for (int64_t i = 0; i < n; i++) a = max_nan(a, x[i]);
        break;
    case RED_MIN:
        for (int64_t i = 0; i < n; i++) a = min_nan(a, x[i]);
        break;
    }
    return a;
}

enum { SUM_BLOCK = 64 }; /* a fixed trip count: the compiler vectorises the block at -O2 */

/* acc[c] += row[c] for c in [0, n), float32 widened: the sum of a kept line (a bias
 * gradient) without the staging buffer.  Each element is the same addition in double as
 * fold_row_f64's, so the bits are those of the general walk. */
static void sum_row_f32(const float *row, int64_t n, double *acc) {
    int64_t c = 0;
    for (; c + SUM_BLOCK <= n; c += SUM_BLOCK)
        for (int t = 0; t < SUM_BLOCK; t++) acc[c + t] += (double)row[c + t];
    for (; c < n; c++) acc[c] += (double)row[c];
}

/* Folds columns [c_lo, c_hi) of every line into acc, lines in order. */
static void walk_f64(reduce_kind k, const vp_tensor *x, const reduce_walk *w, double *acc, const double *shift,
                     int64_t c_lo, int64_t c_hi) {
    double buf[LINE_CHUNK];
    vp_nd_iter it;
    reduce_walk_iter(w, &it);
    if (x->dtype == VP_F32 && !w->line_reduced && (k == RED_SUM || k == RED_MEAN || k == RED_LOG_SUM)) {
        for (int64_t l = 0; l < w->n_lines; l++, vp_nd_iter_next(&it))
            sum_row_f32((const float *)x->data + l * w->line_len + c_lo, c_hi - c_lo, acc + it.off[0] + c_lo);
        return;
    }
    for (int64_t l = 0; l < w->n_lines; l++, vp_nd_iter_next(&it)) {
        for (int64_t c = c_lo; c < c_hi; c += LINE_CHUNK) {
            int64_t m = c_hi - c < LINE_CHUNK ? c_hi - c : LINE_CHUNK, o = it.off[0];
            vp_red_load_f64(x->data, x->dtype, l * w->line_len + c, 1, m, buf);
            if (w->line_reduced)
                acc[o] = fold_run_f64(k, buf, m, acc[o], shift ? shift[o] : 0);
            else
                fold_row_f64(k, buf, m, acc + o + c, shift ? shift + o + c : NULL);
        }
    }
}

typedef struct walk_job {
    reduce_kind k;
    const vp_tensor *x;
    const reduce_walk *w;
    double *acc;
    const double *shift;
} walk_job;

static void walk_cols(int64_t lo, int64_t hi, void *ctx) {
    const walk_job *j = ctx;
    walk_f64(j->k, j->x, j->w, j->acc, j->shift, lo, hi);
}

/* The whole walk.  Where the line is kept (a bias gradient: rows summed into one row)
 * its columns are split among the threads: each output still folds its inputs in line
 * order, so the bits do not depend on the threads.  A reduced line folds into one
 * accumulator in order, on one thread. */
static void walk_all(reduce_kind k, const vp_tensor *x, const reduce_walk *w, double *acc, const double *shift) {
    walk_job j = {k, x, w, acc, shift};
    if (w->line_reduced) walk_f64(k, x, w, acc, shift, 0, w->line_len);
    else vp_par_for(w->line_len, w->n_lines, walk_cols, &j);
}

static double finish_f64(reduce_kind k, double acc, int64_t count, double shift) {
    switch (k) {
    case RED_MEAN: return acc / (double)count;
    case RED_L2: return sqrt(acc);
    case RED_LOG_SUM: return log(acc);
    case RED_LOG_SUM_EXP: return log(acc) + shift;
    default: return acc;
    }
}

static vp_status reduce_floats(const vp_node *n, const vp_tensor *x, vp_tensor *y, const reduce_walk *w,
                               reduce_kind k, vp_error *err) {
    int64_t n_out = vp_tensor_numel(y);
    double *acc = malloc((size_t)n_out * sizeof *acc), *shift = NULL;
    if (k == RED_LOG_SUM_EXP) shift = malloc((size_t)n_out * sizeof *shift);
    if (!acc || (k == RED_LOG_SUM_EXP && !shift)) {
        free(acc);
        free(shift);
        return vp_node_fail(err, VP_ERR_NOMEM, n, "out of memory");
    }
    if (shift) {
        /* subtracting the max keeps exp from overflowing; an infinite max is no use as a shift */
        for (int64_t i = 0; i < n_out; i++) shift[i] = -INFINITY;
        walk_all(RED_MAX, x, w, shift, NULL);
        for (int64_t i = 0; i < n_out; i++)
            if (!isfinite(shift[i])) shift[i] = 0;
    }
    for (int64_t i = 0; i < n_out; i++) acc[i] = identity_f64(k);
    walk_all(k, x, w, acc, shift);
    for (int64_t i = 0; i < n_out; i++) acc[i] = finish_f64(k, acc[i], w->n_reduced, shift ? shift[i] : 0);
    vp_red_store_f64(y->data, y->dtype, 0, 1, n_out, acc);
    free(acc);
    free(shift);
    return VP_OK;
}

/* Integer folds wrap (unsigned arithmetic) rather than overflow. */
static void fold_i64(reduce_kind k, const int64_t *x, int64_t n, int64_t *acc, int64_t step) {
    for (int64_t i = 0; i < n; i++) {
        uint64_t a = (uint64_t)acc[i * step], v = (uint64_t)x[i];
        switch (k) {
        case RED_SUM_SQUARE: a += v * v; break;
        case RED_L1: a += x[i] < 0 ? 0 - v : v; break;
        case RED_PROD: a *= v; break;
        case RED_MAX: a = x[i] > acc[i * step] ? v : a; break;
        case RED_MIN: a = x[i] < acc[i * step] ? v : a; break;
        default: a += v; break;
        }
        acc[i * step] = (int64_t)a;
    }
}

static void walk_i64(reduce_kind k, const vp_tensor *x, const reduce_walk *w, int64_t *acc) {
    int64_t buf[LINE_CHUNK];
    vp_nd_iter it;
    reduce_walk_iter(w, &it);
    int64_t step = w->line_reduced ? 0 : 1;
    for (int64_t l = 0; l < w->n_lines; l++, vp_nd_iter_next(&it)) {
        for (int64_t c = 0; c < w->line_len; c += LINE_CHUNK) {
            int64_t m = w->line_len - c < LINE_CHUNK ? w->line_len - c : LINE_CHUNK;
            vp_red_load_i64(x->data, x->dtype, l * w->line_len + c, 1, m, buf);
            fold_i64(k, buf, m, acc + it.off[0] + c * step, step);
        }
    }
}

static vp_status reduce_ints(const vp_node *n, const vp_tensor *x, vp_tensor *y, const reduce_walk *w,
                             reduce_kind k, vp_error *err) {
    int64_t n_out = vp_tensor_numel(y);
    int64_t *acc = malloc((size_t)n_out * sizeof *acc);
    if (!acc) return vp_node_fail(err, VP_ERR_NOMEM, n, "out of memory");
    int64_t first = k == RED_PROD ? 1 : k == RED_MAX ? INT64_MIN : k == RED_MIN ? INT64_MAX : 0;
    for (int64_t i = 0; i < n_out; i++) acc[i] = first;
    walk_i64(k, x, w, acc);
    if (k == RED_MEAN) /* integer mean truncates, as ONNX Runtime's does */
        for (int64_t i = 0; i < n_out; i++) acc[i] = w->n_reduced ? acc[i] / w->n_reduced : 0;
    vp_red_store_i64(y->data, y->dtype, 0, 1, n_out, acc);
    free(acc);
    return VP_OK;
}

static vp_status reduce_run(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, reduce_kind k,
                            vp_error *err) {
    const vp_tensor *x = in[0];
    unsigned mask;
    vp_status s = kernel_axes_mask(n, in, x->rank, &mask, err);
    if (s || !out[0] || !vp_tensor_numel(out[0])) return s; /* an omitted output needs no work */
    reduce_walk w;
    reduce_walk_init(x, mask, &w);
    int exact_in_ints = k != RED_L2 && k != RED_LOG_SUM && k != RED_LOG_SUM_EXP;
    if (!vp_dtype_is_float(x->dtype) && exact_in_ints) return reduce_ints(n, x, out[0], &w, k, err);
    return reduce_floats(n, x, out[0], &w, k, err);
}

#define REDUCE_KERNEL(fn, kind)                                                                           \
    vp_status fn(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {  \
        return reduce_run(n, in, out, kind, err);                                                       \
    }
REDUCE_KERNEL(vp_cpu_reduce_sum, RED_SUM)
REDUCE_KERNEL(vp_cpu_reduce_mean, RED_MEAN)
REDUCE_KERNEL(vp_cpu_reduce_max, RED_MAX)
REDUCE_KERNEL(vp_cpu_reduce_min, RED_MIN)
REDUCE_KERNEL(vp_cpu_reduce_prod, RED_PROD)
REDUCE_KERNEL(vp_cpu_reduce_l1, RED_L1)
REDUCE_KERNEL(vp_cpu_reduce_l2, RED_L2)
REDUCE_KERNEL(vp_cpu_reduce_sum_square, RED_SUM_SQUARE)
REDUCE_KERNEL(vp_cpu_reduce_log_sum, RED_LOG_SUM)
REDUCE_KERNEL(vp_cpu_reduce_log_sum_exp, RED_LOG_SUM_EXP)
#undef REDUCE_KERNEL

/* ---- ArgMax, ArgMin ---- */

/* Index of the best of v[0..n): the first (or last) maximum or minimum; a NaN beats
 * everything, and the first NaN wins, as in numpy. */
static int64_t best_f64(const double *v, int64_t n, int want_max, int last) {
    int64_t b = 0;
    for (int64_t i = 1; i < n && v[b] == v[b]; i++) {
        int better = want_max ? v[i] > v[b] : v[i] < v[b];
        if (v[i] != v[i] || better || (last && v[i] == v[b])) b = i;
    }
    return b;
}

static int64_t best_i64(const int64_t *v, int64_t n, int want_max, int last) {
    int64_t b = 0;
    for (int64_t i = 1; i < n; i++) {
        int better = want_max ? v[i] > v[b] : v[i] < v[b];
        if (better || (last && v[i] == v[b])) b = i;
    }
    return b;
}

static vp_status arg_run(const vp_node *n, const vp_tensor *x, vp_tensor *y, int want_max, vp_error *err) {
    int axis = (int)vp_attr_int(n, "axis", 0);
    if (axis < 0) axis += x->rank;
    int last = vp_attr_int(n, "select_last_index", 0) != 0;
    int64_t outer, len, inner;
    vp_red_split(x->rank, x->dims, axis, &outer, &len, &inner);
    if (!y || !outer || !inner) return VP_OK;
    int is_float = vp_dtype_is_float(x->dtype);
    void *buf = malloc((size_t)(len ? len : 1) * 8);
    if (!buf) return vp_node_fail(err, VP_ERR_NOMEM, n, "out of memory");
    int64_t *idx = y->data;
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t i = 0; i < inner; i++) {
            int64_t off = o * len * inner + i;
            if (is_float) {
                vp_red_load_f64(x->data, x->dtype, off, inner, len, buf);
                idx[o * inner + i] = best_f64(buf, len, want_max, last);
            } else {
                vp_red_load_i64(x->data, x->dtype, off, inner, len, buf);
                idx[o * inner + i] = best_i64(buf, len, want_max, last);
            }
        }
    }
    free(buf);
    return VP_OK;
}

vp_status vp_cpu_argmax(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    return arg_run(n, in[0], out[0], 1, err);
}

vp_status vp_cpu_argmin(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    return arg_run(n, in[0], out[0], 0, err);
}
