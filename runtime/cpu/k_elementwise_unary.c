/* Unary elementwise kernels: math functions, activations, predicates, BitwiseNot and
 * Clip.
 *
 * Each op is one scalar expression (see EW_FLOAT_UNARY_FN) turned into a row per float
 * dtype; the few ops ONNX also defines on integers add integer rows.  The input and
 * the output have the same shape, so a whole tensor is one row. */
#include "k_elementwise.h"

#include <float.h>
#include <string.h>

#include "cpu_par.h"
#include "k_elementwise_rows.h"
#include "k_vmath.h"

/* Shared pieces of the expressions below; C is the compute type in scope. */
#define EW_CLAMP01(v) ((v) < 0 ? (C)0 : (v) > 1 ? (C)1 : (v))          /* NaN stays NaN */
#define EW_SOFTPLUS(x) ((x) > 0 ? (x) + log1p(exp(-(x))) : log1p(exp(x))) /* no overflow */
#define EW_GELU_ERF(x) ((C)0.5 * (x) * ((C)1 + erf((x) * (C)0.70710678118654752440)))
/* float32 (and the 16-bit types, computed in float32) through vp_vm_tanhf, double libm's */
#define EW_TANH(u) _Generic((u), float: vp_vm_tanhf, default: tanh)(u)
#define EW_GELU_TANH(x) \
    ((C)0.5 * (x) * ((C)1 + EW_TANH((C)0.79788456080286535588 * ((x) + (C)0.044715 * (x) * (x) * (x)))))

/* A float-only op: scalar functions, four rows, and the table name##_rows. */
#define EW_FLOAT_UNARY_OP(name, expr)                                                       \
    EW_FLOAT_UNARY_FN(name, expr)                                                           \
    EW_FLOAT_ROWS(EW_UNARY_ROW, name)                                                       \
    static const ew_unary_table name##_rows = {{EW_FLOAT_SLOTS(name)}};

/* The same with the float32 row from k_vmath.c (vectorised erf); the 16-bit rows widen
 * to float and call libm. */
#define EW_VM_UNARY_OP(name, expr, vm_row)                                                  \
    EW_FLOAT_UNARY_FN(name, expr)                                                           \
    static void name##_f32(const void *x, void *y, int64_t n, const ew_params *p) {         \
        (void)p;                                                                            \
        vm_row(x, y, n);                                                                    \
    }                                                                                       \
    EW_UNARY_ROW(name##_f64, double, double, double, EW_SAME, EW_SAME, name##_d)            \
    EW_UNARY_ROW(name##_f16, uint16_t, uint16_t, float, vp_f16_to_f32, vp_f32_to_f16, name##_f) \
    EW_UNARY_ROW(name##_bf16, uint16_t, uint16_t, float, vp_bf16_to_f32, vp_f32_to_bf16, name##_f) \
    static const ew_unary_table name##_rows = {{EW_FLOAT_SLOTS(name)}};

EW_FLOAT_UNARY_OP(sqrt, sqrt(x))
EW_FLOAT_UNARY_OP(exp, exp(x))
EW_FLOAT_UNARY_OP(log, log(x))
EW_VM_UNARY_OP(erf, erf(x), vp_vm_erf_f32)
EW_FLOAT_UNARY_OP(reciprocal, (C)1 / x)
EW_FLOAT_UNARY_OP(sin, sin(x))
EW_FLOAT_UNARY_OP(cos, cos(x))
EW_FLOAT_UNARY_OP(tan, tan(x))
EW_FLOAT_UNARY_OP(asin, asin(x))
EW_FLOAT_UNARY_OP(acos, acos(x))
EW_FLOAT_UNARY_OP(atan, atan(x))
EW_FLOAT_UNARY_OP(sinh, sinh(x))
EW_FLOAT_UNARY_OP(cosh, cosh(x))
EW_FLOAT_UNARY_OP(asinh, asinh(x))
EW_FLOAT_UNARY_OP(acosh, acosh(x))
EW_FLOAT_UNARY_OP(atanh, atanh(x))
EW_FLOAT_UNARY_OP(floor, floor(x))
EW_FLOAT_UNARY_OP(ceil, ceil(x))
EW_FLOAT_UNARY_OP(round, rint(x)) /* the default rounding mode is to nearest, ties to even */
EW_FLOAT_UNARY_OP(sigmoid, (C)1 / ((C)1 + exp(-x)))
EW_FLOAT_UNARY_OP(tanh, tanh(x))
EW_FLOAT_UNARY_OP(softplus, EW_SOFTPLUS(x))
EW_FLOAT_UNARY_OP(softsign, x / ((C)1 + fabs(x)))
EW_FLOAT_UNARY_OP(mish, x * tanh(EW_SOFTPLUS(x)))
EW_FLOAT_UNARY_OP(hard_swish, x * EW_CLAMP01(x / (C)6 + (C)0.5))
EW_VM_UNARY_OP(gelu_erf, EW_GELU_ERF(x), vp_vm_gelu_f32)
EW_FLOAT_UNARY_OP(gelu_tanh, EW_GELU_TANH(x))
/* ops with attributes, read into ew_params by the kernels below (Shrink: alpha is lambd,
 * beta is bias) */
EW_FLOAT_UNARY_OP(leaky_relu, x < 0 ? (C)p->alpha * x : x)
EW_FLOAT_UNARY_OP(swish, x / ((C)1 + exp(-(C)p->alpha * x)))
EW_FLOAT_UNARY_OP(hard_sigmoid, EW_CLAMP01((C)p->alpha * x + (C)p->beta))
EW_FLOAT_UNARY_OP(elu, x < 0 ? (C)p->alpha * expm1(x) : x)
EW_FLOAT_UNARY_OP(selu, (C)p->gamma * (x <= 0 ? (C)p->alpha * expm1(x) : x))
EW_FLOAT_UNARY_OP(celu, x > 0 ? x : (C)p->alpha * expm1(x / (C)p->alpha))
EW_FLOAT_UNARY_OP(shrink, x < -(C)p->alpha ? x + (C)p->beta : x > (C)p->alpha ? x - (C)p->beta : (C)0)
EW_FLOAT_UNARY_OP(thresholded_relu, x > (C)p->alpha ? x : (C)0)

/* Ops ONNX also defines on integers. */
EW_FLOAT_UNARY_FN(neg, -x)
EW_FLOAT_UNARY_FN(abs, fabs(x))
EW_FLOAT_UNARY_FN(sign, x > 0 ? (C)1 : x < 0 ? (C)-1 : x) /* keeps NaN */
EW_FLOAT_UNARY_FN(relu, x < 0 ? (C)0 : x)                 /* keeps NaN, as numpy.maximum */

#define EW_INEG(x, p) (0 - EW_WRAP(x))
#define EW_SABS(x, p) ((x) < 0 ? 0 - EW_WRAP(x) : EW_WRAP(x))
#define EW_UABS(x, p) (x)
#define EW_SSIGN(x, p) (((x) > 0) - ((x) < 0))
#define EW_USIGN(x, p) ((x) > 0)
#define EW_SRELU(x, p) ((x) < 0 ? 0 : (x))

EW_FLOAT_ROWS(EW_UNARY_ROW, neg)
EW_SINT_ROWS(EW_UNARY_ROW, neg, EW_INEG)
static const ew_unary_table neg_rows = {{EW_FLOAT_SLOTS(neg), EW_SINT_SLOTS(neg)}};

EW_FLOAT_ROWS(EW_UNARY_ROW, abs)
EW_SINT_ROWS(EW_UNARY_ROW, abs, EW_SABS)
EW_UINT_ROWS(EW_UNARY_ROW, abs, EW_UABS)
static const ew_unary_table abs_rows = {{EW_FLOAT_SLOTS(abs), EW_SINT_SLOTS(abs), EW_UINT_SLOTS(abs)}};

EW_FLOAT_ROWS(EW_UNARY_ROW, sign)
EW_SINT_ROWS(EW_UNARY_ROW, sign, EW_SSIGN)
EW_UINT_ROWS(EW_UNARY_ROW, sign, EW_USIGN)
static const ew_unary_table sign_rows = {{EW_FLOAT_SLOTS(sign), EW_SINT_SLOTS(sign), EW_UINT_SLOTS(sign)}};

EW_FLOAT_ROWS(EW_UNARY_ROW, relu)
EW_SINT_ROWS(EW_UNARY_ROW, relu, EW_SRELU)
static const ew_unary_table relu_rows = {{EW_FLOAT_SLOTS(relu), EW_SINT_SLOTS(relu)}};

/* Predicates: float in, bool out.  IsInf's flags: 1 detects +inf, 2 detects -inf. */
EW_FLOAT_UNARY_FN(is_nan, x != x)
EW_FLOAT_UNARY_FN(is_inf, isinf(x) && (x > 0 ? (p->flags & 1) : (p->flags & 2)))
EW_FLOAT_BOOL_ROWS(EW_UNARY_ROW, is_nan)
EW_FLOAT_BOOL_ROWS(EW_UNARY_ROW, is_inf)
static const ew_unary_table is_nan_rows = {{EW_FLOAT_SLOTS(is_nan)}};
static const ew_unary_table is_inf_rows = {{EW_FLOAT_SLOTS(is_inf)}};

#define EW_NOT(x, p) (!(x))
EW_UNARY_ROW(not_b8, uint8_t, uint8_t, uint8_t, EW_SAME, EW_SAME, EW_NOT)
static const ew_unary_table not_rows = {{[VP_BOOL] = not_b8}};

#define EW_BITWISE_NOT(x, p) (~EW_WRAP(x))
EW_SINT_ROWS(EW_UNARY_ROW, bitwise_not, EW_BITWISE_NOT)
EW_UINT_ROWS(EW_UNARY_ROW, bitwise_not, EW_BITWISE_NOT)
static const ew_unary_table bitwise_not_rows = {{EW_SINT_SLOTS(bitwise_not), EW_UINT_SLOTS(bitwise_not)}};

/* ---- kernels ---- */

typedef void (*ew_clip_row)(const void *x, void *y, int64_t n, const void *lo, const void *hi);

/* A row over a contiguous range, split into blocks for the threads: elements are
 * independent, so the split never changes a bit. */
typedef struct ew_unary_job {
    ew_unary_row row;
    ew_clip_row clip;
    const char *x;
    char *y;
    int64_t xs, ys;
    const ew_params *p;
    const void *lo, *hi;
} ew_unary_job;

static void ew_unary_body(int64_t lo, int64_t hi, void *ctx) {
    const ew_unary_job *j = ctx;
    if (j->row) j->row(j->x + lo * j->xs, j->y + lo * j->ys, hi - lo, j->p);
    else j->clip(j->x + lo * j->xs, j->y + lo * j->ys, hi - lo, j->lo, j->hi);
}

static void ew_unary_run(ew_unary_job *j, const vp_tensor *x, vp_tensor *y) {
    j->x = x->data;
    j->y = y->data;
    j->xs = (int64_t)vp_dtype_size(x->dtype);
    j->ys = (int64_t)vp_dtype_size(y->dtype);
    vp_par_for(vp_tensor_numel(x), 2, ew_unary_body, j);
}

static vp_status ew_unary(const vp_node *n, const ew_unary_table *tab, const vp_tensor *x, vp_tensor *y,
                          const ew_params *p, vp_error *err) {
    ew_unary_row row = (unsigned)x->dtype < VP_DTYPE_COUNT_ ? tab->row[x->dtype] : NULL;
    if (!row)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "the CPU kernel has no %s variant", vp_dtype_name(x->dtype));
    ew_unary_job j = {.row = row, .p = p};
    ew_unary_run(&j, x, y);
    return VP_OK;
}

#define EW_UNARY_KERNEL(fname, table)                                                       \
    VP_EW_KERNEL(fname) {                                                                   \
        const ew_params none = {0};                                                         \
        return ew_unary(n, &table, in[0], out[0], &none, err);                              \
    }

EW_UNARY_KERNEL(vp_cpu_sqrt, sqrt_rows)
EW_UNARY_KERNEL(vp_cpu_exp, exp_rows)
EW_UNARY_KERNEL(vp_cpu_log, log_rows)
EW_UNARY_KERNEL(vp_cpu_erf, erf_rows)
EW_UNARY_KERNEL(vp_cpu_reciprocal, reciprocal_rows)
EW_UNARY_KERNEL(vp_cpu_sin, sin_rows)
EW_UNARY_KERNEL(vp_cpu_cos, cos_rows)
EW_UNARY_KERNEL(vp_cpu_tan, tan_rows)
EW_UNARY_KERNEL(vp_cpu_asin, asin_rows)
EW_UNARY_KERNEL(vp_cpu_acos, acos_rows)
EW_UNARY_KERNEL(vp_cpu_atan, atan_rows)
EW_UNARY_KERNEL(vp_cpu_sinh, sinh_rows)
EW_UNARY_KERNEL(vp_cpu_cosh, cosh_rows)
EW_UNARY_KERNEL(vp_cpu_asinh, asinh_rows)
EW_UNARY_KERNEL(vp_cpu_acosh, acosh_rows)
EW_UNARY_KERNEL(vp_cpu_atanh, atanh_rows)
EW_UNARY_KERNEL(vp_cpu_bitwise_not, bitwise_not_rows)
EW_UNARY_KERNEL(vp_cpu_floor, floor_rows)
EW_UNARY_KERNEL(vp_cpu_ceil, ceil_rows)
EW_UNARY_KERNEL(vp_cpu_round, round_rows)
EW_UNARY_KERNEL(vp_cpu_neg, neg_rows)
EW_UNARY_KERNEL(vp_cpu_abs, abs_rows)
EW_UNARY_KERNEL(vp_cpu_sign, sign_rows)
EW_UNARY_KERNEL(vp_cpu_relu, relu_rows)
EW_UNARY_KERNEL(vp_cpu_sigmoid, sigmoid_rows)
EW_UNARY_KERNEL(vp_cpu_tanh, tanh_rows)
EW_UNARY_KERNEL(vp_cpu_softplus, softplus_rows)
EW_UNARY_KERNEL(vp_cpu_softsign, softsign_rows)
EW_UNARY_KERNEL(vp_cpu_mish, mish_rows)
EW_UNARY_KERNEL(vp_cpu_hard_swish, hard_swish_rows)
EW_UNARY_KERNEL(vp_cpu_ms_gelu, gelu_erf_rows)
EW_UNARY_KERNEL(vp_cpu_is_nan, is_nan_rows)
EW_UNARY_KERNEL(vp_cpu_not, not_rows)

/* A kernel whose ew_params come from attributes (name, default) of the node. */
#define EW_UNARY_KERNEL_WITH(fname, table, ...)                                             \
    VP_EW_KERNEL(fname) {                                                                   \
        const ew_params p = {__VA_ARGS__};                                                  \
        return ew_unary(n, &table, in[0], out[0], &p, err);                                 \
    }

EW_UNARY_KERNEL_WITH(vp_cpu_leaky_relu, leaky_relu_rows, .alpha = vp_attr_float(n, "alpha", 0.01f))
EW_UNARY_KERNEL_WITH(vp_cpu_swish, swish_rows, .alpha = vp_attr_float(n, "alpha", 1.0f))
EW_UNARY_KERNEL_WITH(vp_cpu_hard_sigmoid, hard_sigmoid_rows, .alpha = vp_attr_float(n, "alpha", 0.2f),
                     .beta = vp_attr_float(n, "beta", 0.5f))
EW_UNARY_KERNEL_WITH(vp_cpu_elu, elu_rows, .alpha = vp_attr_float(n, "alpha", 1.0f))
EW_UNARY_KERNEL_WITH(vp_cpu_selu, selu_rows, .alpha = vp_attr_float(n, "alpha", 1.67326319217681884765625f),
                     .gamma = vp_attr_float(n, "gamma", 1.05070102214813232421875f))
EW_UNARY_KERNEL_WITH(vp_cpu_celu, celu_rows, .alpha = vp_attr_float(n, "alpha", 1.0f))
EW_UNARY_KERNEL_WITH(vp_cpu_shrink, shrink_rows, .alpha = vp_attr_float(n, "lambd", 0.5f),
                     .beta = vp_attr_float(n, "bias", 0.0f))
EW_UNARY_KERNEL_WITH(vp_cpu_thresholded_relu, thresholded_relu_rows, .alpha = vp_attr_float(n, "alpha", 1.0f))
EW_UNARY_KERNEL_WITH(vp_cpu_is_inf, is_inf_rows,
                     .flags = (vp_attr_int(n, "detect_positive", 1) ? 1 : 0) |
                              (vp_attr_int(n, "detect_negative", 1) ? 2 : 0))

VP_EW_KERNEL(vp_cpu_gelu) {
    const ew_params none = {0};
    int tanh_form = !strcmp(vp_attr_string(n, "approximate", "none"), "tanh");
    return ew_unary(n, tanh_form ? &gelu_tanh_rows : &gelu_erf_rows, in[0], out[0], &none, err);
}

/* com.microsoft's fused forms: gelu(X + bias), the bias added by the broadcasting Add
 * kernel, then the activation applied in place. */
static vp_status ew_gelu_of_sum(const vp_node *n, const ew_unary_table *tab, const vp_tensor *const *in,
                                vp_tensor *const *out, vp_error *err) {
    const ew_params none = {0};
    const vp_tensor *x = in[0];
    if (n->n_inputs > 1 && in[1]) {
        vp_status s = vp_cpu_add(n, in, out, err);
        if (s) return s;
        x = out[0];
    }
    return ew_unary(n, tab, x, out[0], &none, err);
}

VP_EW_KERNEL(vp_cpu_fast_gelu) { return ew_gelu_of_sum(n, &gelu_tanh_rows, in, out, err); }
VP_EW_KERNEL(vp_cpu_bias_gelu) { return ew_gelu_of_sum(n, &gelu_erf_rows, in, out, err); }

/* ---- Clip ---- */

/* y = min(max(x, lo), hi), so lo > hi gives hi everywhere, as ONNX says; a missing
 * bound (NULL) does not clip. */

#define EW_CLIP_ROW(fname, T, C, LOAD, STORE, LOWEST, HIGHEST)                              \
    static void fname(const void *px, void *py, int64_t n, const void *plo, const void *phi) { \
        const T *x = px;                                                                    \
        T *y = py;                                                                          \
        const C lo = plo ? (C)LOAD(*(const T *)plo) : (LOWEST);                             \
        const C hi = phi ? (C)LOAD(*(const T *)phi) : (HIGHEST);                            \
        for (int64_t i = 0; i < n; i++) {                                                   \
            C v = (C)LOAD(x[i]);                                                            \
            v = v < lo ? lo : v;                                                            \
            y[i] = STORE(v > hi ? hi : v);                                                  \
        }                                                                                   \
    }

EW_CLIP_ROW(clip_f32, float, float, EW_SAME, EW_SAME, -INFINITY, INFINITY)
EW_CLIP_ROW(clip_f64, double, double, EW_SAME, EW_SAME, -INFINITY, INFINITY)
EW_CLIP_ROW(clip_f16, uint16_t, float, vp_f16_to_f32, vp_f32_to_f16, -INFINITY, INFINITY)
EW_CLIP_ROW(clip_bf16, uint16_t, float, vp_bf16_to_f32, vp_f32_to_bf16, -INFINITY, INFINITY)
EW_CLIP_ROW(clip_i8, int8_t, int8_t, EW_SAME, EW_SAME, INT8_MIN, INT8_MAX)
EW_CLIP_ROW(clip_i16, int16_t, int16_t, EW_SAME, EW_SAME, INT16_MIN, INT16_MAX)
EW_CLIP_ROW(clip_i32, int32_t, int32_t, EW_SAME, EW_SAME, INT32_MIN, INT32_MAX)
EW_CLIP_ROW(clip_i64, int64_t, int64_t, EW_SAME, EW_SAME, INT64_MIN, INT64_MAX)
EW_CLIP_ROW(clip_u8, uint8_t, uint8_t, EW_SAME, EW_SAME, 0, UINT8_MAX)
EW_CLIP_ROW(clip_u16, uint16_t, uint16_t, EW_SAME, EW_SAME, 0, UINT16_MAX)
EW_CLIP_ROW(clip_u32, uint32_t, uint32_t, EW_SAME, EW_SAME, 0, UINT32_MAX)
EW_CLIP_ROW(clip_u64, uint64_t, uint64_t, EW_SAME, EW_SAME, 0, UINT64_MAX)

static const ew_clip_row clip_rows[VP_DTYPE_COUNT_] = {EW_FLOAT_SLOTS(clip), EW_SINT_SLOTS(clip),
                                                       EW_UINT_SLOTS(clip)};

/* One bound as a value of the input's dtype: a float attribute (default: the float
 * range) before opset 11, an optional scalar input since.  NULL when there is none. */
static const void *ew_clip_bound(const vp_node *n, const vp_tensor *const *in, int input, const char *attr,
                                 float dflt, vp_dtype dtype, void *storage) {
    if (n->opset < 11) {
        vp_store(storage, dtype, 0, vp_attr_float(n, attr, dflt));
        return storage;
    }
    return input < n->n_inputs && in[input] ? in[input]->data : NULL;
}

VP_EW_KERNEL(vp_cpu_clip) {
    vp_dtype t = in[0]->dtype;
    ew_clip_row row = (unsigned)t < VP_DTYPE_COUNT_ ? clip_rows[t] : NULL;
    if (!row) return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "the CPU kernel has no %s variant", vp_dtype_name(t));
    ew_scalar lo_storage, hi_storage;
    const void *lo = ew_clip_bound(n, in, 1, "min", -FLT_MAX, t, &lo_storage);
    const void *hi = ew_clip_bound(n, in, 2, "max", FLT_MAX, t, &hi_storage);
    ew_unary_job j = {.clip = row, .lo = lo, .hi = hi};
    ew_unary_run(&j, in[0], out[0]);
    return VP_OK;
}
