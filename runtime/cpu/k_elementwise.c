/* Binary and variadic elementwise kernels with numpy broadcasting.
 *
 * Operands are walked through an ew_walk: the output shape collapsed to the fewest axes
 * that keep every operand's strides regular, visited one row (the innermost collapsed
 * axis) at a time.  Along a row each input's stride is 1 or 0, so same-shape operands
 * become a single row of numel elements, a scalar operand a row against a constant, and
 * a per-channel bias rows of H*W against a constant: the cases the row loops in
 * k_elementwise_rows.h vectorise.  Rows, cut into segments of at most EW_SEGMENT
 * elements, are the work items the threads share (cpu_par.h). */
#include "k_elementwise.h"

#include <stdlib.h>
#include <string.h>

#include "cpu_par.h"
#include "cpu_simd.h"
#include "k_elementwise_rows.h"

enum { EW_MAX_OPS = 4 }; /* the output and up to three inputs (Where) */

typedef struct ew_walk {
    int n_ops;
    vp_nd_iter outer;   /* over every collapsed axis but the innermost */
    int64_t rows_left;
    int64_t inner;      /* elements per row */
    int64_t inner_stride[EW_MAX_OPS];
    char *base[EW_MAX_OPS];
    size_t esize[EW_MAX_OPS];
} ew_walk;

/* Element strides of each operand over the output's axes, with size-1 axes dropped and
 * neighbours merged wherever every operand is contiguous across them.  Returns the
 * collapsed rank (at least 1), or 0 when the output is empty. */
static int ew_collapse(int n_ops, const vp_tensor *const *t, int64_t *dims,
                       int64_t strides[][VP_MAX_RANK]) {
    const vp_tensor *o = t[0];
    for (int k = 0; k < n_ops; k++) vp_broadcast_strides(t[k], o->rank, strides[k]);
    int r = 0;
    for (int d = 0; d < o->rank; d++) {
        if (o->dims[d] == 0) return 0;
        if (o->dims[d] == 1) continue;
        int merge = r > 0;
        for (int k = 0; merge && k < n_ops; k++) merge = strides[k][r - 1] == strides[k][d] * o->dims[d];
        int at = merge ? r - 1 : r++;
        dims[at] = merge ? dims[at] * o->dims[d] : o->dims[d];
        for (int k = 0; k < n_ops; k++) strides[k][at] = strides[k][d];
    }
    if (r == 0) { /* a single element */
        dims[0] = 1;
        for (int k = 0; k < n_ops; k++) strides[k][0] = 0;
        r = 1;
    }
    return r;
}

/* Prepares a walk over t[0] (the output) with t[1..n_ops-1] broadcast to it.
 * Returns 0 when there is nothing to compute. */
static int ew_walk_init(ew_walk *w, int n_ops, const vp_tensor *const *t) {
    int64_t dims[VP_MAX_RANK], strides[EW_MAX_OPS][VP_MAX_RANK];
    int r = ew_collapse(n_ops, t, dims, strides);
    if (!r) return 0;
    memset(w, 0, sizeof *w);
    w->n_ops = n_ops;
    w->inner = dims[r - 1];
    w->rows_left = 1;
    w->outer.rank = r - 1;
    w->outer.n_ops = n_ops;
    for (int d = 0; d < r - 1; d++) {
        w->outer.dims[d] = dims[d];
        w->rows_left *= dims[d];
    }
    for (int k = 0; k < n_ops; k++) {
        w->inner_stride[k] = strides[k][r - 1];
        for (int d = 0; d < r - 1; d++) w->outer.strides[k][d] = strides[k][d];
        w->base[k] = t[k]->data;
        w->esize[k] = vp_dtype_size(t[k]->dtype);
    }
    return 1;
}

/* ---- the walk in parallel: rows cut into segments, each segment one work item ---- */

#define EW_SEGMENT ((int64_t)1 << 14)

typedef void (*ew_segment_fn)(char *const *p, const int64_t *stride, int64_t n, const void *row);

typedef struct ew_par {
    const ew_walk *w;
    int64_t segs, seg;
    ew_segment_fn fn;
    const void *row;
} ew_par;

static void ew_par_body(int64_t lo, int64_t hi, void *ctx) {
    const ew_par *c = ctx;
    const ew_walk *w = c->w;
    for (int64_t i = lo; i < hi; i++) {
        int64_t row = i / c->segs, start = (i % c->segs) * c->seg, off[EW_MAX_OPS] = {0};
        for (int d = w->outer.rank - 1; d >= 0; d--) {
            int64_t idx = row % w->outer.dims[d];
            row /= w->outer.dims[d];
            for (int k = 0; k < w->n_ops; k++) off[k] += idx * w->outer.strides[k][d];
        }
        char *p[EW_MAX_OPS];
        for (int k = 0; k < w->n_ops; k++)
            p[k] = w->base[k] + (off[k] + start * w->inner_stride[k]) * (int64_t)w->esize[k];
        int64_t len = w->inner - start < c->seg ? w->inner - start : c->seg;
        c->fn(p, w->inner_stride, len, c->row);
    }
}

/* Calls fn on every segment of the walk; segments are disjoint, so the split (and the
 * thread count) never changes a bit of the result. */
static void ew_par_walk(const ew_walk *w, ew_segment_fn fn, const void *row) {
    ew_par c = {w, 1, w->inner, fn, row};
    if (w->inner > 2 * EW_SEGMENT) {
        c.seg = EW_SEGMENT;
        c.segs = (w->inner + EW_SEGMENT - 1) / EW_SEGMENT;
    }
    vp_par_for(w->rows_left * c.segs, c.seg, ew_par_body, &c);
}

static void ew_binary_segment(char *const *p, const int64_t *stride, int64_t n, const void *row) {
    (*(const ew_binary_row *)row)(p[1], stride[1], p[2], stride[2], p[0], n);
}

static void ew_binary_apply(ew_binary_row row, vp_tensor *o, const vp_tensor *a, const vp_tensor *b) {
    const vp_tensor *t[3] = {o, a, b};
    ew_walk w;
    if (!ew_walk_init(&w, 3, t)) return;
    ew_par_walk(&w, ew_binary_segment, &row);
}

static ew_binary_row ew_binary_lookup(const ew_binary_table *tab, vp_dtype t) {
    return (unsigned)t < VP_DTYPE_COUNT_ ? tab->row[t] : NULL;
}

static vp_status ew_no_row(const vp_node *n, vp_dtype t, vp_error *err) {
    return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "the CPU kernel has no %s variant", vp_dtype_name(t));
}

static vp_status ew_binary(const vp_node *n, const ew_binary_table *tab, const vp_tensor *a,
                           const vp_tensor *b, vp_tensor *o, vp_error *err) {
    ew_binary_row row = ew_binary_lookup(tab, a->dtype);
    if (!row) return ew_no_row(n, a->dtype, err);
    ew_binary_apply(row, o, a, b);
    return VP_OK;
}

/* ---- scalar operations ---- */

EW_FLOAT_BINARY_FN(add, x + y)
EW_FLOAT_BINARY_FN(sub, x - y)
EW_FLOAT_BINARY_FN(mul, x * y)
EW_FLOAT_BINARY_FN(div, x / y)
EW_FLOAT_BINARY_FN(pow, y == (C)2 ? x * x : pow(x, y))
EW_FLOAT_BINARY_FN(fmod, fmod(x, y))
EW_FLOAT_BINARY_FN(max, (x > y || x != x) ? x : y) /* NaN wins, as in numpy.maximum */
EW_FLOAT_BINARY_FN(min, (x < y || x != x) ? x : y)
EW_FLOAT_BINARY_FN(prelu, x < 0 ? x * y : x)
EW_FLOAT_BINARY_FN(eq, x == y)
EW_FLOAT_BINARY_FN(lt, x < y)
EW_FLOAT_BINARY_FN(gt, x > y)
EW_FLOAT_BINARY_FN(le, x <= y)
EW_FLOAT_BINARY_FN(ge, x >= y)

/* Signed integers go through int64_t so that INT_MIN / -1 and INT_MIN % -1, undefined
 * in C, give numpy's wrapped results. */
static inline uint64_t ew_sdiv(int64_t x, int64_t y) { return y == -1 ? 0 - EW_WRAP(x) : EW_WRAP(x / y); }
static inline int64_t ew_srem(int64_t x, int64_t y) { return y == -1 ? 0 : x % y; }

/* Python's modulo: the result takes the divisor's sign. */
static inline int64_t ew_smod(int64_t x, int64_t y) {
    int64_t r = ew_srem(x, y);
    return r != 0 && (r < 0) != (y < 0) ? r + y : r;
}

/* x ** y by squaring, wrapping on overflow; a negative y leaves 1 / x**|y| truncated. */
static inline uint64_t ew_ipow(int64_t x, int64_t y) {
    if (y < 0) return x == 1 ? 1 : x == -1 ? ((y & 1) ? UINT64_MAX : 1) : 0;
    uint64_t r = 1, b = EW_WRAP(x);
    for (; y; y >>= 1, b *= b)
        if (y & 1) r *= b;
    return r;
}

#define EW_IADD(x, y) (EW_WRAP(x) + EW_WRAP(y))
#define EW_ISUB(x, y) (EW_WRAP(x) - EW_WRAP(y))
#define EW_IMUL(x, y) (EW_WRAP(x) * EW_WRAP(y))
#define EW_SDIV(x, y) ew_sdiv((int64_t)(x), (int64_t)(y))
#define EW_UDIV(x, y) ((x) / (y))
#define EW_SREM(x, y) ew_srem((int64_t)(x), (int64_t)(y))
#define EW_SMOD(x, y) ew_smod((int64_t)(x), (int64_t)(y))
#define EW_UREM(x, y) ((x) % (y))
#define EW_IPOW(x, y) ew_ipow((int64_t)(x), (int64_t)(y))
#define EW_IMAX(x, y) ((x) > (y) ? (x) : (y))
#define EW_IMIN(x, y) ((x) < (y) ? (x) : (y))
#define EW_SPRELU(x, y) ((x) < 0 ? EW_IMUL(x, y) : EW_WRAP(x))
#define EW_UPRELU(x, y) ((void)(y), (x)) /* nothing is negative */
#define EW_EQ(x, y) ((x) == (y))
#define EW_LT(x, y) ((x) < (y))
#define EW_GT(x, y) ((x) > (y))
#define EW_LE(x, y) ((x) <= (y))
#define EW_GE(x, y) ((x) >= (y))
#define EW_AND(x, y) ((x) && (y))
#define EW_OR(x, y) ((x) || (y))
#define EW_XOR(x, y) ((x) != (y))

/* ---- row tables ---- */

/* An op over every numeric dtype: float rows from name_f/name_d, integer rows from SF
 * (signed) and UF (unsigned). */
#define EW_NUMERIC_OP(name, SF, UF)                                                         \
    EW_FLOAT_ROWS(EW_BINARY_ROW, name)                                                      \
    EW_SINT_ROWS(EW_BINARY_ROW, name, SF)                                                   \
    EW_UINT_ROWS(EW_BINARY_ROW, name, UF)                                                   \
    static const ew_binary_table name##_rows = {                                            \
        {EW_FLOAT_SLOTS(name), EW_SINT_SLOTS(name), EW_UINT_SLOTS(name)}};

EW_NUMERIC_OP(add, EW_IADD, EW_IADD)
EW_NUMERIC_OP(sub, EW_ISUB, EW_ISUB)
EW_NUMERIC_OP(mul, EW_IMUL, EW_IMUL)
EW_NUMERIC_OP(div, EW_SDIV, EW_UDIV)
EW_NUMERIC_OP(pow, EW_IPOW, EW_IPOW)
EW_NUMERIC_OP(max, EW_IMAX, EW_IMAX)
EW_NUMERIC_OP(min, EW_IMIN, EW_IMIN)
EW_NUMERIC_OP(prelu, EW_SPRELU, EW_UPRELU)
EW_NUMERIC_OP(fmod, EW_SREM, EW_UREM) /* Mod with fmod=1 */

/* Mod with fmod=0 is defined for integers only. */
EW_SINT_ROWS(EW_BINARY_ROW, mod, EW_SMOD)
EW_UINT_ROWS(EW_BINARY_ROW, mod, EW_UREM)
static const ew_binary_table mod_rows = {{EW_SINT_SLOTS(mod), EW_UINT_SLOTS(mod)}};

/* Comparisons: every numeric dtype, and bool where the op allows it. */
#define EW_COMPARE_OP(name, F)                                                              \
    EW_FLOAT_BOOL_ROWS(EW_BINARY_ROW, name)                                                 \
    EW_SINT_BOOL_ROWS(EW_BINARY_ROW, name, F)                                               \
    EW_UINT_BOOL_ROWS(EW_BINARY_ROW, name, F)                                               \
    EW_BINARY_ROW(name##_b8, uint8_t, uint8_t, uint8_t, EW_BOOL, EW_BOOL, F)                \
    static const ew_binary_table name##_rows = {                                            \
        {EW_FLOAT_SLOTS(name), EW_SINT_SLOTS(name), EW_UINT_SLOTS(name), [VP_BOOL] = name##_b8}};

EW_COMPARE_OP(eq, EW_EQ)
EW_COMPARE_OP(lt, EW_LT)
EW_COMPARE_OP(gt, EW_GT)
EW_COMPARE_OP(le, EW_LE)
EW_COMPARE_OP(ge, EW_GE)

/* Bitwise ops on every integer dtype.  A shift by the width or more leaves 0. */
#define EW_BIT_AND(x, y) (EW_WRAP(x) & EW_WRAP(y))
#define EW_BIT_OR(x, y) (EW_WRAP(x) | EW_WRAP(y))
#define EW_BIT_XOR(x, y) (EW_WRAP(x) ^ EW_WRAP(y))
#define EW_SHL(x, y) ((y) < 8 * sizeof(x) ? EW_WRAP(x) << (y) : 0)
#define EW_SHR(x, y) ((y) < 8 * sizeof(x) ? EW_WRAP(x) >> (y) : 0)

#define EW_BITWISE_OP(name, F)                                                              \
    EW_SINT_ROWS(EW_BINARY_ROW, name, F)                                                    \
    EW_UINT_ROWS(EW_BINARY_ROW, name, F)                                                    \
    static const ew_binary_table name##_rows = {{EW_SINT_SLOTS(name), EW_UINT_SLOTS(name)}};

EW_BITWISE_OP(bit_and, EW_BIT_AND)
EW_BITWISE_OP(bit_or, EW_BIT_OR)
EW_BITWISE_OP(bit_xor, EW_BIT_XOR)

/* BitShift is defined on unsigned integers only. */
EW_UINT_ROWS(EW_BINARY_ROW, shl, EW_SHL)
EW_UINT_ROWS(EW_BINARY_ROW, shr, EW_SHR)
static const ew_binary_table shl_rows = {{EW_UINT_SLOTS(shl)}};
static const ew_binary_table shr_rows = {{EW_UINT_SLOTS(shr)}};

#define EW_LOGIC_OP(name, F)                                                                \
    EW_BINARY_ROW(name##_b8, uint8_t, uint8_t, uint8_t, EW_BOOL, EW_BOOL, F)                \
    static const ew_binary_table name##_rows = {{[VP_BOOL] = name##_b8}};

EW_LOGIC_OP(and, EW_AND)
EW_LOGIC_OP(or, EW_OR)
EW_LOGIC_OP(xor, EW_XOR)

/* ---- opset < 7: legacy broadcasting ---- */

/* The second operand as n broadcasts it: b itself, or, before opset 7, b viewed at a's
 * rank.  NULL when it does not fit (the shape function refuses such a node). */
static const vp_tensor *ew_second(const vp_node *n, int channel_slope, const vp_tensor *a, const vp_tensor *b,
                                  vp_tensor *view) {
    if (!vp_ew_is_legacy(n)) return b;
    *view = *b;
    view->rank = a->rank;
    return vp_ew_legacy_shape(n, channel_slope, a->rank, a->dims, b->rank, b->dims, view->dims) ? view : NULL;
}

static vp_status ew_binary_node(const vp_node *n, const ew_binary_table *tab, int channel_slope,
                                const vp_tensor *const *in, vp_tensor *o, vp_error *err) {
    vp_tensor view;
    const vp_tensor *b = ew_second(n, channel_slope, in[0], in[1], &view);
    if (!b) return vp_node_fail(err, VP_ERR_INVALID, n, "input 1 does not broadcast onto input 0");
    return ew_binary(n, tab, in[0], b, o, err);
}

/* ---- binary kernels ---- */

#define EW_BINARY_KERNEL(fname, table)                                                      \
    VP_EW_KERNEL(fname) { return ew_binary_node(n, &table, 0, in, out[0], err); }

EW_BINARY_KERNEL(vp_cpu_add, add_rows)
EW_BINARY_KERNEL(vp_cpu_sub, sub_rows)
EW_BINARY_KERNEL(vp_cpu_mul, mul_rows)
EW_BINARY_KERNEL(vp_cpu_equal, eq_rows)
EW_BINARY_KERNEL(vp_cpu_less, lt_rows)
EW_BINARY_KERNEL(vp_cpu_greater, gt_rows)
EW_BINARY_KERNEL(vp_cpu_less_or_equal, le_rows)
EW_BINARY_KERNEL(vp_cpu_greater_or_equal, ge_rows)
EW_BINARY_KERNEL(vp_cpu_and, and_rows)
EW_BINARY_KERNEL(vp_cpu_or, or_rows)
EW_BINARY_KERNEL(vp_cpu_xor, xor_rows)
EW_BINARY_KERNEL(vp_cpu_bitwise_and, bit_and_rows)
EW_BINARY_KERNEL(vp_cpu_bitwise_or, bit_or_rows)
EW_BINARY_KERNEL(vp_cpu_bitwise_xor, bit_xor_rows)

VP_EW_KERNEL(vp_cpu_bit_shift) {
    int left = !strcmp(vp_attr_string(n, "direction", ""), "LEFT");
    return ew_binary_node(n, left ? &shl_rows : &shr_rows, 0, in, out[0], err);
}

/* Integer division by zero has no value to give; it is the data's fault, so it fails. */
static vp_status ew_check_divisor(const vp_node *n, const vp_tensor *b, vp_error *err) {
    if (!vp_dtype_is_int(b->dtype)) return VP_OK;
    size_t es = vp_dtype_size(b->dtype);
    static const char zero[8];
    const char *p = b->data;
    for (int64_t i = 0, count = vp_tensor_numel(b); i < count; i++)
        if (!memcmp(p + i * (int64_t)es, zero, es))
            return vp_node_fail(err, VP_ERR_RUNTIME, n, "integer division by zero (element %lld of input 1)",
                                (long long)i);
    return VP_OK;
}

VP_EW_KERNEL(vp_cpu_prelu) { return ew_binary_node(n, &prelu_rows, 1, in, out[0], err); }

VP_EW_KERNEL(vp_cpu_div) {
    vp_status s = ew_check_divisor(n, in[1], err);
    return s ? s : ew_binary_node(n, &div_rows, 0, in, out[0], err);
}

VP_EW_KERNEL(vp_cpu_mod) {
    vp_status s = ew_check_divisor(n, in[1], err);
    int c_style = vp_attr_int(n, "fmod", 0) != 0;
    return s ? s : ew_binary_node(n, c_style ? &fmod_rows : &mod_rows, 0, in, out[0], err);
}

/* ---- Pow with an exponent of another dtype ---- */

/* An integer base raised to a float64 exponent: exact by squaring when the exponent is
 * a whole number, otherwise numpy's float64 power truncated back to an integer. */
static inline uint64_t ew_ipow_f64(int64_t x, double y) {
    if (y == trunc(y) && fabs(y) < 0x1p62) return ew_ipow(x, (int64_t)y);
    double r = pow((double)x, y);
    if (r != r) return 0;
    if (r <= -0x1p63) return EW_WRAP(INT64_MIN);
    if (r >= 0x1p63) return EW_WRAP(INT64_MAX);
    return EW_WRAP((int64_t)r);
}

#define EW_FPOW_F64(x, y) pow((double)(x), (y))
#define EW_IPOW_F64(x, y) ew_ipow_f64((int64_t)(x), (y))

/* o[i] = base[i * sa] ** exponent[i * sb], the exponent held as float64. */
#define EW_POW_F64_ROW(fname, T, LOAD, STORE, F)                                            \
    static void fname(const void *pa, int64_t sa, const void *pb, int64_t sb, void *po,     \
                      int64_t n) {                                                          \
        const T *a = pa;                                                                    \
        const double *b = pb;                                                               \
        T *o = po;                                                                          \
        for (int64_t i = 0; i < n; i++) o[i] = STORE(F(LOAD(a[i * sa]), b[i * sb]));        \
    }

static inline float ew_narrow_f32(double v) { return (float)v; }
static inline uint16_t ew_narrow_f16(double v) { return vp_f32_to_f16((float)v); }
static inline uint16_t ew_narrow_bf16(double v) { return vp_f32_to_bf16((float)v); }

EW_POW_F64_ROW(pow_by_f64_f32, float, EW_SAME, ew_narrow_f32, EW_FPOW_F64)
EW_POW_F64_ROW(pow_by_f64_f64, double, EW_SAME, EW_SAME, EW_FPOW_F64)
EW_POW_F64_ROW(pow_by_f64_f16, uint16_t, vp_f16_to_f32, ew_narrow_f16, EW_FPOW_F64)
EW_POW_F64_ROW(pow_by_f64_bf16, uint16_t, vp_bf16_to_f32, ew_narrow_bf16, EW_FPOW_F64)
EW_POW_F64_ROW(pow_by_f64_i32, int32_t, EW_SAME, EW_SAME, EW_IPOW_F64)
EW_POW_F64_ROW(pow_by_f64_i64, int64_t, EW_SAME, EW_SAME, EW_IPOW_F64)

static const ew_binary_table pow_by_f64_rows = {
    {EW_FLOAT_SLOTS(pow_by_f64), [VP_I32] = pow_by_f64_i32, [VP_I64] = pow_by_f64_i64}};

VP_EW_KERNEL(vp_cpu_pow) {
    vp_tensor view;
    const vp_tensor *base = in[0], *expo = ew_second(n, 0, in[0], in[1], &view);
    if (!expo) return vp_node_fail(err, VP_ERR_INVALID, n, "input 1 does not broadcast onto input 0");
    if (base->dtype == expo->dtype) return ew_binary(n, &pow_rows, base, expo, out[0], err);
    ew_binary_row row = ew_binary_lookup(&pow_by_f64_rows, base->dtype);
    if (!row) return ew_no_row(n, base->dtype, err);
    int64_t count = vp_tensor_numel(expo);
    vp_tensor e64 = *expo;
    e64.dtype = VP_F64;
    e64.data = malloc((size_t)(count ? count : 1) * sizeof(double));
    if (!e64.data) return vp_node_fail(err, VP_ERR_NOMEM, n, "out of memory converting the exponent");
    for (int64_t i = 0; i < count; i++) ((double *)e64.data)[i] = vp_load(expo->data, expo->dtype, i);
    ew_binary_apply(row, out[0], base, &e64);
    free(e64.data);
    return VP_OK;
}

/* ---- Where ---- */

typedef void (*ew_where_row)(const uint8_t *c, int64_t sc, const void *x, int64_t sx, const void *y,
                             int64_t sy, void *o, int64_t n);

/* Where only moves elements, so one row per element size serves every dtype.  Along a
 * row each operand's stride is 0 or 1: each of the eight combinations is its own loop
 * with constant strides, both values loaded and one selected, which the compiler
 * vectorises (a Clip's gradient is two Wheres over every activation). */
#define EW_WHERE_AT(T, SC, SX, SY) \
    for (int64_t i = 0; i < n; i++) { \
        T a = x[i * (SX)], b = y[i * (SY)]; \
        o[i] = c[i * (SC)] ? a : b; \
    }
#define EW_WHERE_ROW(fname, T)                                                              \
    VP_SIMD static void fname(const uint8_t *c, int64_t sc, const void *px, int64_t sx,     \
                              const void *py, int64_t sy, void *po, int64_t n) {            \
        const T *x = px, *y = py;                                                           \
        T *o = po;                                                                          \
        switch ((sc != 0) * 4 + (sx != 0) * 2 + (sy != 0)) {                                \
        case 7: EW_WHERE_AT(T, 1, 1, 1) break;                                              \
        case 6: EW_WHERE_AT(T, 1, 1, 0) break;                                              \
        case 5: EW_WHERE_AT(T, 1, 0, 1) break;                                              \
        case 4: EW_WHERE_AT(T, 1, 0, 0) break;                                              \
        case 3: EW_WHERE_AT(T, 0, 1, 1) break;                                              \
        case 2: EW_WHERE_AT(T, 0, 1, 0) break;                                              \
        case 1: EW_WHERE_AT(T, 0, 0, 1) break;                                              \
        default: EW_WHERE_AT(T, 0, 0, 0) break;                                             \
        }                                                                                   \
    }

EW_WHERE_ROW(where_1, uint8_t)
EW_WHERE_ROW(where_2, uint16_t)
EW_WHERE_ROW(where_4, uint32_t)
EW_WHERE_ROW(where_8, uint64_t)

static void ew_where_segment(char *const *p, const int64_t *stride, int64_t n, const void *row) {
    (*(const ew_where_row *)row)((const uint8_t *)p[1], stride[1], p[2], stride[2], p[3], stride[3], p[0], n);
}

VP_EW_KERNEL(vp_cpu_where) {
    ew_where_row row;
    switch (vp_dtype_size(out[0]->dtype)) {
    case 1: row = where_1; break;
    case 2: row = where_2; break;
    case 4: row = where_4; break;
    case 8: row = where_8; break;
    default: return ew_no_row(n, out[0]->dtype, err);
    }
    const vp_tensor *t[4] = {out[0], in[0], in[1], in[2]};
    ew_walk w;
    if (!ew_walk_init(&w, 4, t)) return VP_OK;
    ew_par_walk(&w, ew_where_segment, &row);
    return VP_OK;
}

/* ---- variadic: Sum, Mean, Max, Min ---- */

/* Folds the inputs left to right into the output: out = in0 op in1, then out op in2, ...
 * Every input is broadcast straight to the final shape, so the fold needs no temporaries.
 * In place, the output may share memory with input 0 or 1 only. */
static vp_status ew_variadic(const vp_node *n, const ew_binary_table *tab, const vp_tensor *const *in,
                             vp_tensor *o, vp_error *err) {
    if (n->n_inputs == 1) { /* the output has the input's shape */
        ew_copy(o->data, in[0]->data, vp_tensor_nbytes(o));
        return VP_OK;
    }
    ew_binary_row row = ew_binary_lookup(tab, in[0]->dtype);
    if (!row) return ew_no_row(n, in[0]->dtype, err);
    ew_binary_apply(row, o, in[0], in[1]);
    for (int k = 2; k < n->n_inputs; k++) ew_binary_apply(row, o, o, in[k]);
    return VP_OK;
}

VP_EW_KERNEL(vp_cpu_sum) { return ew_variadic(n, &add_rows, in, out[0], err); }
VP_EW_KERNEL(vp_cpu_max) { return ew_variadic(n, &max_rows, in, out[0], err); }
VP_EW_KERNEL(vp_cpu_min) { return ew_variadic(n, &min_rows, in, out[0], err); }

VP_EW_KERNEL(vp_cpu_mean) {
    vp_status s = ew_variadic(n, &add_rows, in, out[0], err);
    if (s) return s;
    /* divide (not multiply by the reciprocal) to round as numpy's mean does */
    ew_scalar value;
    vp_store(&value, out[0]->dtype, 0, n->n_inputs);
    vp_tensor count = {.dtype = out[0]->dtype, .rank = 0, .data = &value};
    return ew_binary(n, &div_rows, out[0], &count, out[0], err);
}
