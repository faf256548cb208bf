/* Gradients of activations, softmax and dropout: ReluGrad, LeakyReluGrad, GeluGrad,
 * FastGeluGrad, SigmoidGrad, TanhGrad, SoftmaxGrad(_13), LogSoftmaxGrad(_13), DropoutGrad.
 *
 * Each loop is written once as a macro over the element type and instantiated for
 * float and double; <tgmath.h> picks expf/erff/tanhf for float, so the float32 path
 * never widens per element.  GeluGrad's float32 loop is k_vmath.c's (vectorised erf
 * and exp, within 1 ulp as libm's). */
#include <stdint.h>
#include <string.h>
#include <tgmath.h>

#include "cpu_par.h"
#include "k_vmath.h"
#include "cpu_simd.h"
#include "cpu_util.h"
#include "k_linalg.h"
#include "k_train.h"

double vp_train_scalar(const vp_tensor *t, int64_t i) { return vp_load(t->data, t->dtype, i); }

/* ---- pointwise: dx = f(dy, v) where v is the forward input or output ---- */

#define GELU_ALPHA 0.3989422804014327   /* 1 / sqrt(2 pi) */
#define FAST_GELU_K 0.7978845608028654  /* sqrt(2 / pi) */
#define FAST_GELU_A 0.044715

#define RELU_GRAD(T, d, x) ((x) > 0 ? (d) : (T)0)
#define SIGMOID_GRAD(T, d, y) ((d) * (y) * ((T)1 - (y)))
#define TANH_GRAD(T, d, y) ((d) * ((T)1 - (y) * (y)))
#define GELU_GRAD(T, d, x) \
    ((d) * ((T)0.5 * ((T)1 + erf((x) * (T)M_SQRT1_2)) + (x) * exp((T)-0.5 * (x) * (x)) * (T)GELU_ALPHA))

/* d/dx of 0.5 x (1 + tanh(k (x + a x^3))) */
#define FAST_GELU_GRAD(T, d, x) fast_gelu_dx_##T(d, x)
#define DEFINE_FAST_GELU(T)                                                                        \
    static inline T fast_gelu_dx_##T(T d, T x) {                                                  \
        T t = _Generic((T)0, float: vp_vm_tanhf, default: tanh)((T)FAST_GELU_K * (x + (T)FAST_GELU_A * x * x * x)); \
        T dt = (T)FAST_GELU_K * ((T)1 + (T)(3 * FAST_GELU_A) * x * x);                              \
        return d * ((T)0.5 * ((T)1 + t) + (T)0.5 * x * ((T)1 - t * t) * dt);                        \
    }
DEFINE_FAST_GELU(float)
DEFINE_FAST_GELU(double)

/* Pointwise loops in blocks for the threads: elements are independent. */
typedef void (*pw_loop)(const void *dy, const void *v, void *dx, int64_t n);

typedef struct pw_job {
    pw_loop loop;
    const char *dy, *v;
    char *dx;
    int64_t es;
} pw_job;

static void pw_body(int64_t lo, int64_t hi, void *ctx) {
    const pw_job *j = ctx;
    j->loop(j->dy + lo * j->es, j->v + lo * j->es, j->dx + lo * j->es, hi - lo);
}

static void pw_run(pw_loop loop, const vp_tensor *dy, const vp_tensor *v, vp_tensor *dx) {
    pw_job j = {loop, dy->data, v->data, dx->data, (int64_t)vp_dtype_size(dx->dtype)};
    vp_par_for(vp_tensor_numel(dx), 4, pw_body, &j);
}

#define DEFINE_POINTWISE_FLOAT(NAME, EXPR)                                                         \
    VP_SIMD static void NAME##_float(const void *pdy, const void *pv, void *pdx, int64_t n) {              \
        const float *dy = pdy, *v = pv;                                                            \
        float *dx = pdx;                                                                           \
        for (int64_t i = 0; i < n; i++) dx[i] = EXPR(float, dy[i], v[i]);                          \
    }
/* the float loop from k_vmath.c (vectorised erf and exp) */
#define DEFINE_POINTWISE_FLOAT_VM(NAME, VM)                                                        \
    static void NAME##_float(const void *pdy, const void *pv, void *pdx, int64_t n) { VM(pdy, pv, pdx, n); }
#define DEFINE_POINTWISE_REST(NAME, EXPR)                                                          \
    static void NAME##_double(const void *pdy, const void *pv, void *pdx, int64_t n) {             \
        const double *dy = pdy, *v = pv;                                                           \
        double *dx = pdx;                                                                          \
        for (int64_t i = 0; i < n; i++) dx[i] = EXPR(double, dy[i], v[i]);                         \
    }                                                                                              \
    VP_TRAIN_KERNEL(vp_cpu_##NAME) {                                                               \
        if (vp_lin_is_narrow(in[0]->dtype)) return vp_lin_run_widened(vp_cpu_##NAME, n, in, out, err); \
        (void)err;                                                                                 \
        if (!out[0]) return VP_OK; /* dX omitted: nothing to compute */                            \
        pw_run(in[0]->dtype == VP_F32 ? NAME##_float : NAME##_double, in[0], in[1], out[0]);       \
        return VP_OK;                                                                              \
    }
#define DEFINE_POINTWISE(NAME, EXPR) DEFINE_POINTWISE_FLOAT(NAME, EXPR) DEFINE_POINTWISE_REST(NAME, EXPR)

DEFINE_POINTWISE(relu_grad, RELU_GRAD)
DEFINE_POINTWISE_FLOAT_VM(gelu_grad, vp_vm_gelu_grad_f32)
DEFINE_POINTWISE_REST(gelu_grad, GELU_GRAD)
DEFINE_POINTWISE(fast_gelu_grad, FAST_GELU_GRAD)
DEFINE_POINTWISE(sigmoid_grad, SIGMOID_GRAD)
DEFINE_POINTWISE(tanh_grad, TANH_GRAD)

/* LeakyReluGrad(dY, Y), attribute alpha: dx = dy where y > 0, alpha dy elsewhere (y is
 * the forward output; with alpha >= 0 it has the input's sign). */
#define DEFINE_LEAKY_RELU_GRAD(T)                                                                  \
    static void leaky_relu_grad_##T(const T *dy, const T *y, T *dx, int64_t n, T alpha) {          \
        for (int64_t i = 0; i < n; i++) dx[i] = y[i] > 0 ? dy[i] : dy[i] * alpha;                  \
    }
DEFINE_LEAKY_RELU_GRAD(float)
DEFINE_LEAKY_RELU_GRAD(double)

VP_TRAIN_KERNEL(vp_cpu_leaky_relu_grad) {
    if (vp_lin_is_narrow(in[0]->dtype)) return vp_lin_run_widened(vp_cpu_leaky_relu_grad, n, in, out, err);
    if (!out[0]) return VP_OK;
    double alpha = vp_train_attr_double(n, "alpha", 0.01); /* 0.1, not 0.1f, in float64 */
    int64_t count = vp_tensor_numel(out[0]);
    if (in[0]->dtype == VP_F32) leaky_relu_grad_float(in[0]->data, in[1]->data, out[0]->data, count, (float)alpha);
    else leaky_relu_grad_double(in[0]->data, in[1]->data, out[0]->data, count, alpha);
    return VP_OK;
}

/* ---- softmax ----
 *
 * Rows of `len` elements, `inner` apart: the opset-13 forms reduce over one axis, the
 * older forms over the 2-D coercion's columns (inner = 1).  Sums are kept in double.
 *   Softmax:    dx = y * (dy - sum(dy * y))
 *   LogSoftmax: dx = dy - exp(y) * sum(dy)        (y is the log-softmax output) */

typedef struct softmax_rows {
    int64_t outer, len, inner;
} softmax_rows;

static softmax_rows rows_of(const vp_node *n, const vp_tensor *y) {
    int rank = y->rank;
    int64_t axis = vp_attr_int(n, "axis", vp_train_softmax_is_13(n) ? -1 : 1);
    if (axis < 0) axis += rank;
    softmax_rows r = {1, 1, 1};
    for (int d = 0; d < rank; d++) {
        if (d < axis) r.outer *= y->dims[d];
        else if (d == axis || !vp_train_softmax_is_13(n)) r.len *= y->dims[d];
        else r.inner *= y->dims[d];
    }
    return r;
}

typedef struct sm_job {
    const void *dy, *y;
    void *dx;
    softmax_rows r;
} sm_job;

#define DEFINE_SOFTMAX_GRAD(T, NAME, LOG)                                                          \
    static void NAME(int64_t o0, int64_t o1, void *ctx) {                                          \
        const sm_job *j = ctx;                                                                     \
        const T *dy = j->dy, *y = j->y;                                                            \
        T *dx = j->dx;                                                                             \
        softmax_rows r = j->r;                                                                     \
        for (int64_t o = o0; o < o1; o++)                                                          \
            for (int64_t i = 0; i < r.inner; i++) {                                                \
                int64_t base = o * r.len * r.inner + i;                                            \
                double acc = 0;                                                                    \
                for (int64_t k = 0; k < r.len; k++) {                                              \
                    int64_t at = base + k * r.inner;                                               \
                    acc += LOG ? (double)dy[at] : (double)dy[at] * y[at];                          \
                }                                                                                  \
                T sum = (T)acc;                                                                    \
                for (int64_t k = 0; k < r.len; k++) {                                              \
                    int64_t at = base + k * r.inner;                                               \
                    dx[at] = LOG ? dy[at] - exp(y[at]) * sum : y[at] * (dy[at] - sum);             \
                }                                                                                  \
            }                                                                                      \
    }
DEFINE_SOFTMAX_GRAD(float, softmax_grad_f32, 0)
DEFINE_SOFTMAX_GRAD(double, softmax_grad_f64, 0)
DEFINE_SOFTMAX_GRAD(float, log_softmax_grad_f32, 1)
DEFINE_SOFTMAX_GRAD(double, log_softmax_grad_f64, 1)

VP_TRAIN_KERNEL(vp_cpu_softmax_grad) {
    if (!out[0]) return VP_OK;
    if (vp_lin_is_narrow(in[0]->dtype)) return vp_lin_run_widened(vp_cpu_softmax_grad, n, in, out, err);
    sm_job j = {in[0]->data, in[1]->data, out[0]->data, rows_of(n, in[1])};
    vp_par_for(j.r.outer, 3 * j.r.len * j.r.inner, in[0]->dtype == VP_F32 ? softmax_grad_f32 : softmax_grad_f64, &j);
    return VP_OK;
}

VP_TRAIN_KERNEL(vp_cpu_log_softmax_grad) {
    if (!out[0]) return VP_OK;
    if (vp_lin_is_narrow(in[0]->dtype)) return vp_lin_run_widened(vp_cpu_log_softmax_grad, n, in, out, err);
    sm_job j = {in[0]->data, in[1]->data, out[0]->data, rows_of(n, in[1])};
    vp_par_for(j.r.outer, 3 * j.r.len * j.r.inner, in[0]->dtype == VP_F32 ? log_softmax_grad_f32 : log_softmax_grad_f64, &j);
    return VP_OK;
}

/* ---- dropout ----
 *
 * In training mode (training_mode absent or true) the kept elements were scaled by
 * 1 / (1 - ratio) going forward, so dx = mask ? dy / (1 - ratio) : 0, ratio 0.5 when
 * absent, as ONNX Runtime computes it.  With training_mode false the forward pass was
 * the identity and its mask all true: dx = mask ? dy : 0, without the scale. */

#define DEFINE_DROPOUT_GRAD(T)                                                                     \
    static void dropout_grad_##T(const T *dy, const uint8_t *mask, T *dx, int64_t n, T keep) {     \
        for (int64_t i = 0; i < n; i++) dx[i] = mask[i] ? dy[i] / keep : (T)0;                      \
    }
DEFINE_DROPOUT_GRAD(float)
DEFINE_DROPOUT_GRAD(double)

VP_TRAIN_KERNEL(vp_cpu_dropout_grad) {
    if (!out[0]) return VP_OK;
    if (vp_lin_is_narrow(in[0]->dtype)) return vp_lin_run_widened(vp_cpu_dropout_grad, n, in, out, err);
    const vp_tensor *ratio = n->n_inputs > 2 ? in[2] : NULL, *mode = n->n_inputs > 3 ? in[3] : NULL;
    double r = ratio ? vp_train_scalar(ratio, 0) : 0.5;
    if (!(r >= 0 && r < 1)) return vp_node_fail(err, VP_ERR_RUNTIME, n, "ratio %g is outside [0, 1)", r);
    int training = mode ? ((const uint8_t *)mode->data)[0] != 0 : 1;
    double keep = training ? 1 - r : 1;
    int64_t count = vp_tensor_numel(out[0]);
    if (in[0]->dtype == VP_F32) dropout_grad_float(in[0]->data, in[1]->data, out[0]->data, count, (float)keep);
    else dropout_grad_double(in[0]->data, in[1]->data, out[0]->data, count, keep);
    return VP_OK;
}
