/* Optimizer updates (domain vplan): SGD, Momentum, Adam/AdamW with PyTorch's semantics
 * (documented in planner/ops/update.c).
 *
 * The loops follow torch.optim's single-tensor code operation by operation: scalars
 * such as 1 - beta1 or lr / (1 - beta1^t) are computed in double, as Python does, and
 * rounded to the parameter's dtype where ATen rounds its Scalar arguments, and each
 * tensor op is evaluated as ATen's vectorised CPU kernels evaluate it: add with alpha
 * and addcmul as one fused multiply-add (fma(alpha, b, a), fma(value * b, c, a)),
 * addcdiv as a + (value * b) / c.  The updates then match torch 1.13 bit for bit in
 * float32 and float64 (tests/test_train_ops.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tgmath.h>

#include "cpu_par.h"
#include "cpu_simd.h"
#include "cpu_util.h"
#include "k_adam.h"
#include "k_train.h"

double vp_train_attr_double(const vp_node *n, const char *name, double dflt) {
    const vp_attr *a = vp_node_attr(n, name);
    if (!a) return dflt;
    float f = a->type == VP_ATTR_INT ? (float)a->i : a->f;
    char buf[32];
    for (int digits = 1; digits <= 9; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, (double)f);
        double d = strtod(buf, NULL);
        if ((float)d == f) return d;
    }
    return f;
}

typedef vp_opt_hyper opt_hyper;

vp_opt_hyper vp_train_opt_hyper(const vp_node *n) {
    opt_hyper h = {vp_train_attr_double(n, "lr", 0), vp_train_attr_double(n, "weight_decay", 0),
                   vp_train_attr_double(n, "momentum", 0), vp_train_attr_double(n, "beta1", 0.9),
                   vp_train_attr_double(n, "beta2", 0.999), vp_train_attr_double(n, "eps", 1e-8),
                   vp_attr_int(n, "decoupled", 0) != 0};
    return h;
}

/* ---- SGD and Momentum ---- */

#define DEFINE_SGD(T)                                                                              \
    static void sgd_##T(const opt_hyper *h, int64_t count, const T *w, const T *g, const T *b, T *w_out, \
                        T *b_out) {                                                                \
        T wd = (T)h->weight_decay, neg_lr = (T)-h->lr, mom = (T)h->momentum;                       \
        for (int64_t i = 0; i < count; i++) {                                                      \
            T d = g[i];                                                                            \
            if (h->weight_decay != 0) d = fma(wd, w[i], d);                                           \
            if (b) {                                                                               \
                d = b[i] * mom + d;                                                                \
                if (b_out) b_out[i] = d;                                                           \
            }                                                                                      \
            if (w_out) w_out[i] = fma(neg_lr, d, w[i]);                                               \
        }                                                                                          \
    }
DEFINE_SGD(float)
DEFINE_SGD(double)

/* do_update (input k) false: each output j is its input from[j], unchanged (nothing to
 * do where the plan gave them one storage).  Returns whether the update is skipped. */
static int skipped(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, int k, const int *from) {
    if (n->n_inputs <= k || !in[k] || ((const uint8_t *)in[k]->data)[0]) return 0;
    for (int j = 0; j < n->n_outputs; j++)
        if (out[j] && out[j]->data != in[from[j]]->data) memcpy(out[j]->data, in[from[j]]->data, vp_tensor_nbytes(in[from[j]]));
    return 1;
}

static vp_status run_sgd(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, int momentum) {
    static const int from[] = {0, 2};
    if (skipped(n, in, out, momentum ? 3 : 2, from)) return VP_OK;
    opt_hyper h = vp_train_opt_hyper(n);
    const vp_tensor *b = momentum ? in[2] : NULL;
    vp_tensor *w_out = out[0], *b_out = momentum && n->n_outputs > 1 ? out[1] : NULL;
    int64_t count = vp_tensor_numel(in[0]);
    if (in[0]->dtype == VP_F32)
        sgd_float(&h, count, in[0]->data, in[1]->data, b ? b->data : NULL, w_out ? w_out->data : NULL,
                  b_out ? b_out->data : NULL);
    else
        sgd_double(&h, count, in[0]->data, in[1]->data, b ? b->data : NULL, w_out ? w_out->data : NULL,
                   b_out ? b_out->data : NULL);
    return VP_OK;
}

VP_TRAIN_KERNEL(vp_cpu_sgd) {
    (void)err;
    return run_sgd(n, in, out, 0);
}

VP_TRAIN_KERNEL(vp_cpu_momentum) {
    (void)err;
    return run_sgd(n, in, out, 1);
}

/* ---- Adam, AdamW ---- */

vp_adam_scalars vp_adam_scalars_at(const vp_opt_hyper *h, float t) {
    vp_adam_scalars s = {1 - h->lr * h->weight_decay, h->lr / (1 - pow(h->beta1, (double)t)),
                         sqrt(1 - pow(h->beta2, (double)t))};
    return s;
}

/* Adam in blocks for the threads: each element's update is independent (the update
 * itself is k_adam.h's, which generated steps compile too). */
typedef struct adam_job {
    const opt_hyper *h;
    const vp_adam_scalars *st;
    const vp_adam_io *io;
    int f32;
} adam_job;

/* The update inlined into each SIMD version (cpu_simd.h), and in float32 with the flags
 * of the usual nodes (every output written) as constants: loops without branches,
 * which the compiler vectorises. */
VP_SIMD static void adam_body(int64_t lo, int64_t hi, void *ctx) {
    const adam_job *j = ctx;
    const vp_opt_hyper *h = j->h;
    const vp_adam_io *io = j->io;
    if (!j->f32) vp_adam_range_double(h, j->st, lo, hi, io);
    else if (!io->w_out || !io->m_out || !io->v_out) vp_adam_range_float(h, j->st, lo, hi, io);
    else if (h->decoupled) vp_adam_core_float(h, j->st, lo, hi, io, 1, 0, 1, 1, 1);
    else if (h->weight_decay != 0) vp_adam_core_float(h, j->st, lo, hi, io, 0, 1, 1, 1, 1);
    else vp_adam_core_float(h, j->st, lo, hi, io, 0, 0, 1, 1, 1);
}

VP_TRAIN_KERNEL(vp_cpu_adam) {
    (void)err;
    static const int from[] = {0, 2, 3, 4};
    if (skipped(n, in, out, 5, from)) return VP_OK;
    opt_hyper h = vp_train_opt_hyper(n);
    /* the step count is a float32 tensor, incremented first, then read as a double */
    float t = ((const float *)in[4]->data)[0] + 1.0f;
    vp_adam_scalars st = vp_adam_scalars_at(&h, t);
    vp_adam_io io = {in[0]->data, in[1]->data, in[2]->data, in[3]->data, out[0] ? out[0]->data : NULL,
                     n->n_outputs > 1 && out[1] ? out[1]->data : NULL, n->n_outputs > 2 && out[2] ? out[2]->data : NULL};
    int64_t count = vp_tensor_numel(in[0]);
    adam_job j = {&h, &st, &io, in[0]->dtype == VP_F32};
    vp_par_for(count, 8, adam_body, &j);
    if (n->n_outputs > 3 && out[3]) ((float *)out[3]->data)[0] = t;
    return VP_OK;
}

/* ---- ONNX's optimizers (ai.onnx.preview.training) ----
 *
 * Inputs R (learning rate), T (step count), then k tensors per list: X, G and the
 * state lists; outputs the new X and the new state.  Computed in double per element,
 * following the specification's formulas:
 *   Adagrad:  g = norm_coefficient * X + G;  H' = H + g^2;
 *             X' = X - R / (1 + T * decay_factor) * g / (sqrt(H') + epsilon)
 *   Momentum: g = norm_coefficient * X + G;  V' = alpha * V + (T > 0 ? beta : 1) * g;
 *             X' = X - R * V' (standard) or X - R * (g + alpha * V') (nesterov)
 *   Adam:     g = norm_coefficient * X + G;  V' = alpha * V + (1 - alpha) * g;
 *             H' = beta * H + (1 - beta) * g^2;
 *             r = T > 0 ? R * sqrt(1 - beta^T) / (1 - alpha^T) : R;
 *             X' = (1 - norm_coefficient_post) * (X - r * V' / (sqrt(H') + epsilon)) */

typedef enum { ONNX_ADAGRAD, ONNX_MOMENTUM, ONNX_ADAM } onnx_optimizer;

static void onnx_update(const vp_node *n, onnx_optimizer kind, double r, int64_t t, const vp_tensor *const *in,
                        vp_tensor *const *out, int k, int i) {
    double norm = vp_attr_float(n, "norm_coefficient", 0), eps = vp_attr_float(n, "epsilon", 1e-6f);
    double alpha = vp_attr_float(n, "alpha", 0.9f), beta = vp_attr_float(n, "beta", 0.999f);
    double decay = vp_attr_float(n, "decay_factor", 0), post = vp_attr_float(n, "norm_coefficient_post", 0);
    int nesterov = !strcmp(vp_attr_string(n, "mode", "standard"), "nesterov");
    const vp_tensor *x = in[2 + i], *g = in[2 + k + i], *s1 = in[2 + 2 * k + i];
    const vp_tensor *s2 = kind == ONNX_ADAM ? in[2 + 3 * k + i] : NULL;
    vp_tensor *x_out = out[i], *s1_out = out[k + i], *s2_out = kind == ONNX_ADAM ? out[2 * k + i] : NULL;
    double r_adj = r;
    if (kind == ONNX_ADAGRAD) r_adj = r / (1 + (double)t * decay);
    if (kind == ONNX_ADAM && t > 0) r_adj = r * sqrt(1 - pow(beta, (double)t)) / (1 - pow(alpha, (double)t));
    int64_t count = vp_tensor_numel(x);
    for (int64_t e = 0; e < count; e++) {
        double xv = vp_load(x->data, x->dtype, e), gv = norm * xv + vp_load(g->data, g->dtype, e);
        double a = vp_load(s1->data, s1->dtype, e), b = 0, xn;
        if (kind == ONNX_ADAGRAD) {
            a = a + gv * gv;
            xn = xv - r_adj * gv / (sqrt(a) + eps);
        } else if (kind == ONNX_MOMENTUM) {
            a = alpha * a + (t > 0 ? beta : 1) * gv;
            xn = nesterov ? xv - r * (gv + alpha * a) : xv - r * a;
        } else {
            a = alpha * a + (1 - alpha) * gv;
            b = beta * vp_load(s2->data, s2->dtype, e) + (1 - beta) * gv * gv;
            xn = (1 - post) * (xv - r_adj * a / (sqrt(b) + eps));
        }
        if (x_out) vp_store(x_out->data, x_out->dtype, e, xn);
        if (s1_out) vp_store(s1_out->data, s1_out->dtype, e, a);
        if (s2_out) vp_store(s2_out->data, s2_out->dtype, e, b);
    }
}

static vp_status run_onnx_optimizer(const vp_node *n, onnx_optimizer kind, const vp_tensor *const *in,
                                    vp_tensor *const *out) {
    int groups = kind == ONNX_ADAM ? 4 : 3, k = (n->n_inputs - 2) / groups;
    double r = vp_load(in[0]->data, in[0]->dtype, 0);
    int64_t t = ((const int64_t *)in[1]->data)[0];
    for (int i = 0; i < k; i++) onnx_update(n, kind, r, t, in, out, k, i);
    return VP_OK;
}

VP_TRAIN_KERNEL(vp_cpu_onnx_adagrad) {
    (void)err;
    return run_onnx_optimizer(n, ONNX_ADAGRAD, in, out);
}

VP_TRAIN_KERNEL(vp_cpu_onnx_momentum) {
    (void)err;
    return run_onnx_optimizer(n, ONNX_MOMENTUM, in, out);
}

VP_TRAIN_KERNEL(vp_cpu_onnx_adam) {
    (void)err;
    return run_onnx_optimizer(n, ONNX_ADAM, in, out);
}
