/* Finite-difference check of every gradient rule.
 *
 * Each case is a tiny graph: float64 initializers (the trainable parameters, random
 * from a seeded generator), one op under test, and the scalar loss
 * L = sum_k ReduceSum(y_k * R_k) over chosen outputs y_k, with R_k random constants.
 * vp_training_build (no optimizer) differentiates it; the naive CPU executor computes
 * the gradients; each is compared, element by element, with the five-point central
 * difference
 *     (-L(x+2h) + 8 L(x+h) - 8 L(x-h) + L(x-2h)) / (12 h),   h = 1e-5,
 * evaluated by rerunning the same graph with the parameter overwritten.  Its truncation
 * error is O(h^4) (~1e-20) and its rounding error about eps |L| / h (~1e-10 for the
 * |L| ~ 10 of these cases), so the error measure
 *     |analytic - numeric| / max(|analytic|, |numeric|, 1e-3)
 * must stay under 1e-6: relative for gradients of normal size, and 1e-9 absolute for
 * gradients near zero, where relative error means nothing.
 *
 * Inputs of ops with kinks (Relu, Abs, Clip, Max, pooling, ReduceMax) are drawn away
 * from the kinks (and distinct from one another), since a finite difference across a
 * kink measures neither side.  At the kinks themselves a few cases compare with the
 * exact gradients PyTorch gives there (Relu and Abs 0 at 0, Clip 1 on its closed
 * range, ties of Max and ReduceMax split evenly, ...), with the loss sum(y).
 * Variants a rule does not handle are checked to be refused, never differentiated.
 *
 * Then every case runs again in float32, float16 and bfloat16 (parameters, constants
 * and the op in that dtype; a half-precision output is cast to float32 for the loss, as
 * mixed precision does), and its gradients are compared with those of a float64 twin
 * of the case built from the same values rounded to that dtype, so that only the
 * dtype's arithmetic differs.  That proves the rules build the right dtypes (scalars,
 * casts) in every float type and that the gradient kernels serve them.  The measure is
 * normwise, |g - g64| / max(max |g64|, floor) over each gradient: low precision loses
 * the small entries of a sum in absolute terms.  The floor is 1e-3 for float32 and 1
 * for the half types, whose incoming gradients (O(1) here) are themselves rounded to
 * the dtype before being summed.  Bounds: 2e-6 for float32 (eps 6e-8; seen 2e-7), 1e-2
 * for float16 (eps 5e-4; seen 1e-3), 5e-2 for bfloat16 (eps 4e-3; seen 1.3e-2).
 *
 * usage: test_gradcheck [SUBSTR]   (only cases whose label contains SUBSTR)
 * Prints one line per case and a final "N passed, N failed". */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cpu_util.h"
#include "exec.h"
#include "graph_build.h"
#include "infer.h"
#include "rng.h"
#include "training.h"

#define FD_STEP 1e-5
#define TOLERANCE 1e-6      /* float64 against finite differences */
#define TOLERANCE_F32 2e-6  /* float32 against float64 */
#define TOLERANCE_F16 1e-2  /* float16 against float64 */
#define TOLERANCE_BF16 5e-2 /* bfloat16 against float64 */
#define FLOOR 1e-3
#define HALF_FLOOR 1.0 /* the normwise scale's floor in half-precision passes */

/* How a parameter's values are drawn. */
typedef enum gen_kind {
    GEN_UNIFORM,  /* uniform in [lo, hi] */
    GEN_AWAY,     /* uniform in [lo, hi], at least 0.01 from 0 and from +-0.5 (kinks) */
    GEN_DISTINCT, /* a shuffled grid over [lo, hi]: all values distinct, no ties */
} gen_kind;

typedef struct gen {
    gen_kind kind;
    double lo, hi;
} gen;

static const gen UNI = {GEN_UNIFORM, -1, 1}, AWAY = {GEN_AWAY, -1, 1}, DISTINCT = {GEN_DISTINCT, -1, 1},
                 POS = {GEN_UNIFORM, 0.5, 2}, ONES = {GEN_UNIFORM, 1, 1}, HARD = {GEN_DISTINCT, -4.5, 4.5},
                 HALF = {GEN_UNIFORM, -0.9, 0.9}, ABOVE1 = {GEN_UNIFORM, 1.2, 3};

typedef struct gc_case {
    vp_graph *g;
    vp_rng rng;
    char label[256];
    int n_loss;
    int loss_from[16]; /* values summed into the loss */
    int n_params;
    int index;               /* the case's number in a pass: its seed and its float64 reference */
    const char *refusal;     /* expected: the build refuses, saying this */
    int raw;                 /* differentiate the graph as it is: no training-mode rewrite */
    const double *expect[4]; /* exact float64 gradients expected (at kinks, where finite
                              * differences cannot judge), with the loss sum(y) */
} gc_case;

/* A case's float64 gradients, the reference of the other dtypes' passes. */
typedef struct reference {
    int n;
    int64_t numel[16];
    double *grad[16];
} reference;

#define MAX_CASES 1024

static const char *g_filter;
static int g_passed, g_failed, g_counter;
static vp_dtype g_pass = VP_F64; /* the float type this pass tests */
static int g_reference;          /* building the float64 twin of a g_pass case: same values, rounded to g_pass */
static reference g_refs[MAX_CASES];

/* ---- building a case ---- */

#define DIMS(...) \
    (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]) { __VA_ARGS__ }

static double draw(vp_rng *r, gen ge) {
    for (;;) {
        double x = ge.lo + (ge.hi - ge.lo) * vp_rng_uniform(r);
        if (ge.kind != GEN_AWAY) return x;
        if (fabs(x) > 0.01 && fabs(fabs(x) - 0.5) > 0.01) return x;
    }
}

static void fill(vp_rng *r, gen ge, double *p, int64_t n) {
    if (ge.kind != GEN_DISTINCT) {
        for (int64_t i = 0; i < n; i++) p[i] = draw(r, ge);
        return;
    }
    /* grid points offset by 0.37 of a step, so none lands on 0 or +-0.5 */
    for (int64_t i = 0; i < n; i++) p[i] = ge.lo + (ge.hi - ge.lo) * ((double)i + 0.37) / (double)n;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(vp_rng_next(r) % (uint64_t)(i + 1));
        double t = p[i];
        p[i] = p[j];
        p[j] = t;
    }
}

static int64_t numel(int rank, const int64_t *dims) {
    int64_t n = 1;
    for (int d = 0; d < rank; d++) n *= dims[d];
    return n;
}

/* Starts a case; returns 0 (and builds nothing) when the filter skips it. */
static int gc_begin(gc_case *k, int opset, const char *fmt, ...) {
    memset(k, 0, sizeof *k);
    k->index = g_counter++;
    int at = g_pass == VP_F64 ? 0 : snprintf(k->label, sizeof k->label, "[%s] ", vp_dtype_name(g_pass));
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(k->label + at, sizeof k->label - (size_t)at, fmt, ap);
    va_end(ap);
    if (g_filter && !strstr(k->label, g_filter)) return 0;
    k->g = vp_graph_new();
    k->g->path = strdup("gradcheck");
    k->g->opset_onnx = opset;
    k->g->opset_ms = 1;
    k->rng.state = 0x5eed0000u + (uint64_t)k->index;
    return 1;
}

/* The dtype values of this pass are stored in: float64 for a reference twin. */
static vp_dtype stored(vp_dtype dt) { return g_reference ? VP_F64 : dt; }

/* The loss's dtype in this pass: float64, or float32 (half outputs are cast to it). */
static vp_dtype loss_dtype(void) { return g_pass == VP_F64 ? VP_F64 : VP_F32; }

/* x rounded to dtype dt and stored as dtype st at element i. */
static void store_rounded(void *p, vp_dtype st, vp_dtype dt, int64_t i, double x) {
    unsigned char tmp[8];
    vp_store(tmp, dt, 0, x);
    vp_store(p, st, i, vp_load(tmp, dt, 0));
}

/* Random values drawn in float64, rounded to dt and stored as stored(dt) (heap). */
static void *random_data(gc_case *k, vp_dtype dt, gen ge, int rank, const int64_t *dims) {
    int64_t n = numel(rank, dims);
    double *p = malloc((size_t)(n ? n : 1) * sizeof *p);
    void *out = malloc((size_t)(n ? n : 1) * vp_dtype_size(stored(dt)));
    fill(&k->rng, ge, p, n);
    for (int64_t i = 0; i < n; i++) store_rounded(out, stored(dt), dt, i, p[i]);
    free(p);
    return out;
}

/* An initializer of the pass's dtype: a trainable parameter. */
static int gc_param(gc_case *k, gen ge, int rank, const int64_t *dims) {
    char name[32];
    snprintf(name, sizeof name, "p%d", k->n_params++);
    int id = vp_graph_add_unique_value(k->g, name);
    vp_value *v = &k->g->values[id];
    v->dtype = stored(g_pass);
    v->rank = rank;
    if (rank) memcpy(v->dims, dims, (size_t)rank * sizeof *dims);
    v->flags |= VP_VAL_INITIALIZER;
    vp_value_set_data(k->g, id, random_data(k, g_pass, ge, rank, dims), VP_DATA_HEAP);
    return id;
}

/* A random constant (not trained) of dtype dt (float64 in a reference twin). */
static int gc_const_of(gc_case *k, vp_dtype dt, gen ge, int rank, const int64_t *dims) {
    void *p = random_data(k, dt, ge, rank, dims);
    int id = vp_build_const(k->g, "c", stored(dt), rank, dims, p);
    free(p);
    return id;
}

static int gc_const(gc_case *k, gen ge, int rank, const int64_t *dims) {
    return gc_const_of(k, g_pass, ge, rank, dims);
}

static int gc_scalar(gc_case *k, double x) {
    unsigned char buf[8];
    store_rounded(buf, stored(g_pass), g_pass, 0, x);
    return vp_build_const(k->g, "s", stored(g_pass), 0, NULL, buf);
}

static int gc_ints(gc_case *k, int n, const int64_t *v) {
    int64_t dims[1] = {n};
    return vp_build_const(k->g, "i", VP_I64, 1, dims, v);
}

static int gc_bools(gc_case *k, int rank, const int64_t *dims, const unsigned char *v) {
    return vp_build_const(k->g, "b", VP_BOOL, rank, dims, v);
}

static int gc_bool(gc_case *k, int v) {
    unsigned char b = (unsigned char)v;
    return vp_build_const(k->g, "b", VP_BOOL, 0, NULL, &b);
}

/* The op under test; out receives its n_out output ids. */
static int gc_node(gc_case *k, const char *op, const char *domain, int n_in, const int *in, int n_out, int *out) {
    int outs[16];
    for (int j = 0; j < n_out; j++) {
        char name[64];
        snprintf(name, sizeof name, "y%d", j);
        outs[j] = vp_graph_add_unique_value(k->g, name);
        if (out) out[j] = outs[j];
    }
    return vp_graph_add_node(k->g, op, domain, "op", n_in, in, n_out, outs);
}

static void gc_loss_on(gc_case *k, int v) { k->loss_from[k->n_loss++] = v; }

/* The op's output 0 goes into the loss: the common one-output case. */
static int gc_op(gc_case *k, const char *op, int n_in, const int *in) {
    int y;
    int node = gc_node(k, op, "", n_in, in, 1, &y);
    gc_loss_on(k, y);
    return node;
}

static void attr_i(gc_case *k, int node, const char *name, int64_t v) { vp_node_add_attr_int(k->g, node, name, v); }
static void attr_f(gc_case *k, int node, const char *name, double v) {
    vp_node_add_attr_float(k->g, node, name, (float)v);
}
static void attr_is(gc_case *k, int node, const char *name, int n, const int64_t *v) {
    vp_node_add_attr_ints(k->g, node, name, v, n);
}
static void attr_s(gc_case *k, int node, const char *name, const char *s) {
    vp_node_add_attr_string(k->g, node, name, s);
}

/* ---- running a case ---- */

/* The loss nodes' opset: 13 (ReduceSum with no axes reduces all), whatever the op's. */
#define LOSS_OPSET 13

/* y cast to the loss's dtype: float64 in the float64 pass, float32 otherwise (a half
 * type is summed in float32, as mixed precision does). */
static vp_status widen(gc_case *k, int y, int *out, vp_error *err) {
    vp_dtype want = stored(loss_dtype());
    *out = y;
    if (k->g->values[y].dtype == want) return VP_OK;
    int n = vp_build_node(k->g, "Cast", "", "loss/cast", 1, &y, 1, VP_PHASE_FORWARD, LOSS_OPSET);
    vp_node_add_attr_int(k->g, n, "to", want);
    return vp_build_finish(k->g, n, out, err);
}

/* Appends L = sum_k ReduceSum(y_k * R_k) (phase forward) and makes it the output. */
static vp_status add_loss(gc_case *k, int *loss, vp_error *err) {
    vp_graph *g = k->g;
    int total = -1;
    for (int j = 0; j < k->n_loss; j++) {
        int y;
        vp_status s = widen(k, k->loss_from[j], &y, err);
        if (s) return s;
        int64_t dims[VP_MAX_RANK];
        int rank = g->values[y].rank;
        memcpy(dims, g->values[y].dims, sizeof dims);
        int r = k->expect[0] ? gc_const_of(k, loss_dtype(), ONES, rank, dims)
                             : gc_const_of(k, loss_dtype(), UNI, rank, dims);
        int in[2] = {y, r}, prod, sum;
        int n = vp_build_node(g, "Mul", "", "loss/mul", 2, in, 1, VP_PHASE_FORWARD, LOSS_OPSET);
        if ((s = vp_build_finish(g, n, &prod, err))) return s;
        n = vp_build_node(g, "ReduceSum", "", "loss/sum", 1, &prod, 1, VP_PHASE_FORWARD, LOSS_OPSET);
        vp_node_add_attr_int(g, n, "keepdims", 0);
        if ((s = vp_build_finish(g, n, &sum, err))) return s;
        if (total < 0) {
            total = sum;
            continue;
        }
        in[0] = total;
        in[1] = sum;
        n = vp_build_node(g, "Add", "", "loss/add", 2, in, 1, VP_PHASE_FORWARD, LOSS_OPSET);
        if ((s = vp_build_finish(g, n, &total, err))) return s;
    }
    g->outputs = malloc(sizeof *g->outputs);
    g->outputs[0] = total;
    g->n_outputs = 1;
    g->values[total].flags |= VP_VAL_OUTPUT;
    *loss = total;
    return VP_OK;
}

static vp_status read_scalar(vp_exec *x, int v, double *out, vp_error *err) {
    vp_tensor t;
    vp_status s = vp_exec_get(x, v, &t, err);
    if (s) return s;
    *out = vp_load(t.data, t.dtype, 0);
    free(t.data);
    return VP_OK;
}

static vp_status loss_at(vp_exec *x, int param, const double *data, int loss, double *out, vp_error *err) {
    vp_status s = vp_exec_write_value(x, param, data, err);
    if (!s) s = vp_exec_run(x, err);
    if (!s) s = read_scalar(x, loss, out, err);
    return s;
}

/* |a - b| / max(|a|, |b|, FLOOR): relative, absolute near zero; infinite for a NaN. */
static double error_measure(double a, double b) {
    double e = fabs(a - b) / fmax(fmax(fabs(a), fabs(b)), FLOOR);
    return isnan(e) ? INFINITY : e;
}

/* Compares one parameter's gradient with finite differences; *worst gets the largest
 * error measure seen. */
static vp_status check_param(vp_exec *x, const vp_graph *g, int param, int grad, int loss, double *worst, char *why,
                             size_t why_len, vp_error *err) {
    const vp_value *p = &g->values[param];
    int64_t n = vp_value_numel(p);
    double *base = malloc((size_t)(n ? n : 1) * sizeof *base), *work = malloc((size_t)(n ? n : 1) * sizeof *work);
    memcpy(base, p->data, (size_t)n * sizeof *base);
    memcpy(work, base, (size_t)n * sizeof *base);
    vp_tensor gt = {0};
    vp_status s = VP_OK;
    if (grad >= 0) s = vp_exec_get(x, grad, &gt, err);
    static const double offs[4] = {2, 1, -1, -2}, wts[4] = {-1, 8, -8, 1};
    for (int64_t i = 0; i < n && !s; i++) {
        double fd = 0;
        for (int j = 0; j < 4 && !s; j++) {
            double l = 0;
            work[i] = base[i] + offs[j] * FD_STEP;
            s = loss_at(x, param, work, loss, &l, err);
            fd += wts[j] * l;
        }
        work[i] = base[i];
        fd /= 12 * FD_STEP;
        double an = grad >= 0 ? ((const double *)gt.data)[i] : 0.0;
        double e = error_measure(an, fd);
        if (!(e <= *worst)) {
            *worst = e;
            if (!(e <= TOLERANCE))
                snprintf(why, why_len, "%s[%lld]: analytic %.10g, numeric %.10g", p->name, (long long)i, an, fd);
        }
    }
    if (!s) s = loss_at(x, param, base, loss, &(double){0}, err);
    free(gt.data);
    free(base);
    free(work);
    return s;
}

/* A gradient as doubles (zeros when no gradient reaches the parameter); heap. */
static vp_status gradient_values(vp_exec *x, const vp_graph *g, int param, int grad, double **out, vp_error *err) {
    int64_t n = vp_value_numel(&g->values[param]);
    double *v = calloc((size_t)(n ? n : 1), sizeof *v);
    vp_tensor gt = {0};
    vp_status s = grad >= 0 ? vp_exec_get(x, grad, &gt, err) : VP_OK;
    for (int64_t i = 0; !s && grad >= 0 && i < n; i++) v[i] = vp_load(gt.data, gt.dtype, i);
    free(gt.data);
    *out = v;
    return s;
}

/* Keeps parameter i's float64 gradient as the case's reference. */
static vp_status keep_reference(vp_exec *x, const vp_graph *g, const gc_case *k, int i, int param, int grad,
                                vp_error *err) {
    reference *r = &g_refs[k->index];
    if (k->index >= MAX_CASES || i >= 16) return vp_fail(err, VP_ERR_USAGE, "too many cases or parameters");
    r->n = i + 1;
    r->numel[i] = vp_value_numel(&g->values[param]);
    free(r->grad[i]);
    return gradient_values(x, g, param, grad, &r->grad[i], err);
}

/* Compares parameter i's gradient in this pass's dtype with the float64 reference. */
static vp_status compare_param(vp_exec *x, const vp_graph *g, const gc_case *k, int i, int param, int grad,
                               double *worst, char *why, size_t why_len, vp_error *err) {
    const reference *r = &g_refs[k->index];
    int64_t n = vp_value_numel(&g->values[param]);
    if (k->index >= MAX_CASES || i >= r->n || !r->grad[i] || r->numel[i] != n)
        return vp_fail(err, VP_ERR_RUNTIME, "no float64 reference for parameter %d", i);
    double *v, scale = g_pass == VP_F32 ? FLOOR : HALF_FLOOR;
    vp_status s = gradient_values(x, g, param, grad, &v, err);
    for (int64_t e = 0; e < n; e++) scale = fmax(scale, fabs(r->grad[i][e]));
    for (int64_t e = 0; !s && e < n; e++) {
        double m = fabs(v[e] - r->grad[i][e]) / scale;
        if (isnan(m)) m = INFINITY;
        if (m <= *worst) continue;
        *worst = m;
        snprintf(why, why_len, "%s[%lld]: %s %.8g, float64 %.8g", g->values[param].name, (long long)e,
                 vp_dtype_name(g_pass), v[e], r->grad[i][e]);
    }
    free(v);
    return s;
}

/* vp_training_build without its training-mode pass (which rewrites BatchNormalization),
 * for rules of forms that pass never leaves: every float initializer is trainable. */
static vp_status build_raw(vp_graph *g, int loss, vp_training *t, vp_error *err) {
    t->loss = loss;
    t->params = malloc(((size_t)g->n_values + 1) * sizeof *t->params);
    for (int v = 0; v < g->n_values; v++)
        if ((g->values[v].flags & VP_VAL_INITIALIZER) && vp_dtype_is_float(g->values[v].dtype)) {
            g->values[v].flags |= VP_VAL_PARAM;
            t->params[t->n_params++] = v;
        }
    vp_status s = vp_autodiff(g, t, err);
    for (int i = 0; !s && i < t->n_params; i++) /* the step's results, as vp_training_build marks them */
        if (t->grads[i] >= 0) g->values[t->grads[i]].flags |= VP_VAL_OUTPUT;
    return s ? s : vp_graph_link(g, err);
}

/* Compares a float64 gradient with the exact values expected. */
static vp_status expect_param(vp_exec *x, const vp_graph *g, const double *want, int param, int grad, double *worst,
                              char *why, size_t why_len, vp_error *err) {
    int64_t n = vp_value_numel(&g->values[param]);
    double *v;
    if (!want) return vp_fail(err, VP_ERR_USAGE, "no expected gradient for '%s'", g->values[param].name);
    vp_status s = gradient_values(x, g, param, grad, &v, err);
    for (int64_t e = 0; !s && e < n; e++) {
        double m = error_measure(v[e], want[e]);
        if (m <= *worst) continue;
        *worst = m;
        snprintf(why, why_len, "%s[%lld]: %.10g, expected %.10g", g->values[param].name, (long long)e, v[e], want[e]);
    }
    free(v);
    return s;
}

static vp_status run_case(gc_case *k, double *worst, char *why, size_t why_len, vp_error *err) {
    vp_graph *g = k->g;
    int loss;
    vp_status s = vp_graph_link(g, err);
    if (!s) s = vp_infer(g, NULL, NULL, err);
    if (!s) s = add_loss(k, &loss, err);
    vp_training t;
    memset(&t, 0, sizeof t);
    vp_train_spec spec;
    memset(&spec, 0, sizeof spec);
    spec.loss.kind = VP_LOSS_OUTPUT;
    spec.no_optimizer = 1;
    if (!s) {
        snprintf(spec.loss.value, sizeof spec.loss.value, "%s", g->values[loss].name);
        s = k->raw ? build_raw(g, loss, &t, err) : vp_training_build(g, &spec, &t, err);
    }
    vp_backend *b = NULL;
    vp_exec *x = NULL;
    if (!s && !(b = vp_backend_cpu_new())) s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
    if (!s) s = vp_exec_new(g, b, &x, err);
    if (!s) s = vp_exec_run(x, err);
    for (int i = 0; !s && i < t.n_params; i++) {
        if (g_pass != VP_F64 && !g_reference) {
            s = compare_param(x, g, k, i, t.params[i], t.grads[i], worst, why, why_len, err);
            continue;
        }
        if (!g_reference && k->expect[0])
            s = expect_param(x, g, k->expect[i < 4 ? i : 0], t.params[i], t.grads[i], worst, why, why_len, err);
        else if (!g_reference) s = check_param(x, g, t.params[i], t.grads[i], t.loss, worst, why, why_len, err);
        if (!s) s = keep_reference(x, g, k, i, t.params[i], t.grads[i], err);
    }
    vp_exec_free(x);
    if (b) vp_backend_free(b);
    vp_training_free(&t);
    return s;
}

/* Runs the case built since gc_begin and prints its line. */
static void gc_run(gc_case *k) {
    if (!k->g) return;
    double worst = 0;
    char why[512] = "";
    vp_error err = {{0}};
    vp_status s = run_case(k, &worst, why, sizeof why, &err);
    if (g_reference) { /* silent: the comparison that follows reports */
        vp_graph_free(k->g);
        k->g = NULL;
        return;
    }
    if (k->refusal) {
        int ok = s == VP_ERR_UNSUPPORTED && strstr(err.msg, k->refusal);
        ok ? g_passed++ : g_failed++;
        printf("%s %s: %s\n", ok ? "PASS" : "FAIL", k->label, s ? err.msg : "built, but a refusal was expected");
        fflush(stdout);
        vp_graph_free(k->g);
        k->g = NULL;
        return;
    }
    double tolerance = g_pass == VP_F64   ? TOLERANCE
                       : g_pass == VP_F32 ? TOLERANCE_F32
                       : g_pass == VP_F16 ? TOLERANCE_F16
                                          : TOLERANCE_BF16;
    if (!s && worst <= tolerance) {
        g_passed++;
        printf("PASS %s (max error %.1e)\n", k->label, worst);
    } else {
        g_failed++;
        printf("FAIL %s: %s\n", k->label, s ? err.msg : why);
    }
    fflush(stdout);
    vp_graph_free(k->g);
    k->g = NULL;
}

/* Sets parameter p's values (already drawn) to v, in the pass's storage dtype. */
static void set_values(gc_case *k, int p, int n, const double *v) {
    vp_value *x = &k->g->values[p];
    for (int i = 0; i < n; i++) vp_store(x->data, x->dtype, i, v[i]);
}

/* ---- elementwise ---- */

static void case_unary(const char *op, int opset, gen ge, const char *attr, double v) {
    gc_case k;
    if (!gc_begin(&k, opset, "%s%s%s[2,3,4] opset %d", op, attr ? " " : "", attr ? attr : "", opset)) return;
    int x = gc_param(&k, ge, DIMS(2, 3, 4));
    int node = gc_op(&k, op, 1, &x);
    if (attr) attr_f(&k, node, attr, v);
    gc_run(&k);
}

static void case_binary(const char *op, gen ga, int ra, const int64_t *da, gen gb, int rb, const int64_t *db) {
    gc_case k;
    char sa[64], sb[64];
    if (!gc_begin(&k, 13, "%s%sx%s", op, vp_shape_str(ra, da, sa, sizeof sa), vp_shape_str(rb, db, sb, sizeof sb)))
        return;
    int in[2] = {gc_param(&k, ga, ra, da), gc_param(&k, gb, rb, db)};
    gc_op(&k, op, 2, in);
    gc_run(&k);
}

static void cases_arith(void) {
    static const char *ops[] = {"Add", "Sub", "Mul"};
    for (int i = 0; i < 3; i++) {
        case_binary(ops[i], UNI, DIMS(2, 3, 4), UNI, DIMS(2, 3, 4));
        case_binary(ops[i], UNI, DIMS(2, 3, 4), UNI, DIMS(4));
        case_binary(ops[i], UNI, DIMS(2, 1, 4), UNI, DIMS(3, 1));
        case_binary(ops[i], UNI, 0, NULL, UNI, DIMS(3));
    }
    case_binary("Div", UNI, DIMS(2, 3), POS, DIMS(3));
    case_binary("Div", UNI, DIMS(1, 4), POS, DIMS(3, 1));
    case_binary("Pow", POS, DIMS(2, 3), UNI, DIMS(3));
    case_binary("Pow", POS, DIMS(3, 1), UNI, DIMS(1, 2));
    gc_case k;
    static const char *legacy[4] = {"Add", "Sub", "Mul", "Div"};
    for (int i = 0; i < 4; i++) {
        if (!gc_begin(&k, 6, "%s[2,3,4,5]x[3,4] broadcast=1 axis=1 opset 6 (legacy)", legacy[i])) continue;
        int in[2] = {gc_param(&k, UNI, DIMS(2, 3, 4, 5)), gc_param(&k, i == 3 ? POS : UNI, DIMS(3, 4))};
        int n = gc_op(&k, legacy[i], 2, in);
        attr_i(&k, n, "broadcast", 1);
        attr_i(&k, n, "axis", 1);
        gc_run(&k);
    }
    if (gc_begin(&k, 6, "Mul[2,3,4]x[4] broadcast=1 opset 6 (legacy, trailing)")) {
        int in[2] = {gc_param(&k, UNI, DIMS(2, 3, 4)), gc_param(&k, UNI, DIMS(4))};
        attr_i(&k, gc_op(&k, "Mul", 2, in), "broadcast", 1);
        gc_run(&k);
    }
    if (gc_begin(&k, 9, "PRelu x[2,3,2,2] slope[3,1,1] opset 9")) {
        gc_op(&k, "PRelu", 2, (int[]){gc_param(&k, AWAY, DIMS(2, 3, 2, 2)), gc_param(&k, UNI, DIMS(3, 1, 1))});
        gc_run(&k);
    }
    if (gc_begin(&k, 16, "PRelu x[3,4] slope[] opset 16")) {
        gc_op(&k, "PRelu", 2, (int[]){gc_param(&k, AWAY, DIMS(3, 4)), gc_param(&k, UNI, 0, NULL)});
        gc_run(&k);
    }
    if (gc_begin(&k, 6, "PRelu x[2,3,2] slope[3] opset 6 (channel slope)")) {
        gc_op(&k, "PRelu", 2, (int[]){gc_param(&k, AWAY, DIMS(2, 3, 2)), gc_param(&k, UNI, DIMS(3))});
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "Mean(a[2,3], b[3], c[2,1])")) {
        gc_op(&k, "Mean", 3,
              (int[]){gc_param(&k, UNI, DIMS(2, 3)), gc_param(&k, UNI, DIMS(3)), gc_param(&k, UNI, DIMS(2, 1))});
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "Mul(x, x)[3,2]")) { /* one value feeding both inputs: gradients add */
        int x = gc_param(&k, UNI, DIMS(3, 2));
        gc_op(&k, "Mul", 2, (int[]){x, x});
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "Pow[2,3] ^ constant 3.0")) {
        int x = gc_param(&k, UNI, DIMS(2, 3));
        gc_op(&k, "Pow", 2, (int[]){x, gc_scalar(&k, 3.0)});
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "Pow(a[4] with zeros, b[4] with a zero), as PyTorch at 0")) {
        int a = gc_param(&k, POS, DIMS(4)), b = gc_param(&k, POS, DIMS(4));
        gc_op(&k, "Pow", 2, (int[]){a, b});
        /* a = 0 under the integer b = 2 (a^2 is smooth through 0, and a's finite
         * differences stay real), and b = 0 at a > 0 */
        double *pa = k.g->values[a].data, *pb = k.g->values[b].data;
        if (g_pass == VP_F64 || g_reference) {
            pa[0] = 0.0, pb[0] = 2.0, pb[1] = 0.0;
        } else {
            vp_store(pa, g_pass, 0, 0.0), vp_store(pb, g_pass, 0, 2.0), vp_store(pb, g_pass, 1, 0.0);
        }
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "Pow[2,3] ^ int64 constant 2")) {
        int x = gc_param(&k, UNI, DIMS(2, 3));
        int64_t two = 2;
        int e = vp_build_const(k.g, "e", VP_I64, 0, NULL, &two);
        gc_op(&k, "Pow", 2, (int[]){x, e});
        gc_run(&k);
    }
}

static void cases_unary(void) {
    case_unary("Neg", 13, UNI, NULL, 0);
    case_unary("Abs", 13, AWAY, NULL, 0);
    case_unary("Sqrt", 13, POS, NULL, 0);
    case_unary("Exp", 13, UNI, NULL, 0);
    case_unary("Log", 13, POS, NULL, 0);
    case_unary("Reciprocal", 13, POS, NULL, 0);
    case_unary("Erf", 13, UNI, NULL, 0);
    case_unary("Relu", 13, AWAY, NULL, 0);
    case_unary("Relu", 6, AWAY, NULL, 0);
    case_unary("LeakyRelu", 13, AWAY, NULL, 0);
    case_unary("LeakyRelu", 13, AWAY, "alpha", 0.2);
    case_unary("Sigmoid", 13, UNI, NULL, 0);
    case_unary("Tanh", 13, UNI, NULL, 0);
    case_unary("Softplus", 13, UNI, NULL, 0);
    case_unary("Elu", 13, AWAY, NULL, 0);
    case_unary("Elu", 13, AWAY, "alpha", 0.5);
    case_unary("Identity", 13, UNI, NULL, 0);
    case_unary("Sin", 13, UNI, NULL, 0);
    case_unary("Cos", 13, UNI, NULL, 0);
    case_unary("Softsign", 13, AWAY, NULL, 0);
    case_unary("Selu", 13, AWAY, NULL, 0);
    case_unary("Selu", 13, AWAY, "gamma", 2.0);
    case_unary("HardSigmoid", 13, HARD, NULL, 0);
    case_unary("HardSigmoid", 13, HARD, "alpha", 0.4);
    case_unary("HardSwish", 14, HARD, NULL, 0);
    case_unary("Tan", 13, UNI, NULL, 0);
    case_unary("Asin", 13, HALF, NULL, 0);
    case_unary("Acos", 13, HALF, NULL, 0);
    case_unary("Atan", 13, UNI, NULL, 0);
    case_unary("Sinh", 13, UNI, NULL, 0);
    case_unary("Cosh", 13, UNI, NULL, 0);
    case_unary("Asinh", 13, UNI, NULL, 0);
    case_unary("Acosh", 13, ABOVE1, NULL, 0);
    case_unary("Atanh", 13, HALF, NULL, 0);
    case_unary("Swish", 24, UNI, NULL, 0);
    case_unary("Swish", 24, UNI, "alpha", 1.7);
    case_unary("Celu", 13, AWAY, NULL, 0);
    case_unary("Celu", 13, AWAY, "alpha", 2.0);
    case_unary("Mish", 18, UNI, NULL, 0);
    case_unary("Shrink", 13, AWAY, NULL, 0);
    case_unary("Shrink", 13, AWAY, "lambd", 0.3);
    case_unary("ThresholdedRelu", 13, AWAY, "alpha", 0.3);
    case_unary("Floor", 13, AWAY, NULL, 0);
    case_unary("Round", 13, AWAY, NULL, 0);
    case_unary("Sign", 13, AWAY, NULL, 0);
    case_unary("Hardmax", 13, DISTINCT, NULL, 0);
    case_unary("Gelu", 20, UNI, NULL, 0);
    gc_case k;
    if (gc_begin(&k, 20, "Gelu approximate=tanh [2,3,4] opset 20")) {
        int x = gc_param(&k, UNI, DIMS(2, 3, 4));
        attr_s(&k, gc_op(&k, "Gelu", 1, &x), "approximate", "tanh");
        gc_run(&k);
    }
    static const char *ms_gelu[2] = {"FastGelu", "BiasGelu"};
    for (int i = 0; i < 2; i++) {
        if (gc_begin(&k, 13, "com.microsoft.%s(x[2,3,4], bias[4])", ms_gelu[i])) {
            int in[2] = {gc_param(&k, UNI, DIMS(2, 3, 4)), gc_param(&k, UNI, DIMS(4))}, y;
            gc_node(&k, ms_gelu[i], "com.microsoft", 2, in, 1, &y);
            gc_loss_on(&k, y);
            gc_run(&k);
        }
    }
    if (gc_begin(&k, 13, "com.microsoft.FastGelu(x[3,4])")) {
        int x = gc_param(&k, UNI, DIMS(3, 4)), y;
        gc_node(&k, "FastGelu", "com.microsoft", 1, &x, 1, &y);
        gc_loss_on(&k, y);
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "com.microsoft.Gelu[2,3,4]")) {
        int x = gc_param(&k, UNI, DIMS(2, 3, 4)), y;
        gc_node(&k, "Gelu", "com.microsoft", 1, &x, 1, &y);
        gc_loss_on(&k, y);
        gc_run(&k);
    }
    if (gc_begin(&k, 15, "CastLike(x[2,3], like[])")) {
        gc_op(&k, "CastLike", 2, (int[]){gc_param(&k, UNI, DIMS(2, 3)), gc_scalar(&k, 0)});
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "Cast(to float64)[2,3]")) {
        int x = gc_param(&k, UNI, DIMS(2, 3));
        attr_i(&k, gc_op(&k, "Cast", 1, &x), "to", VP_F64);
        gc_run(&k);
    }
}

static void cases_clip(void) {
    gc_case k;
    if (gc_begin(&k, 6, "Clip[3,4] min=-0.5 max=0.5 opset 6")) {
        int x = gc_param(&k, AWAY, DIMS(3, 4));
        int n = gc_op(&k, "Clip", 1, &x);
        attr_f(&k, n, "min", -0.5);
        attr_f(&k, n, "max", 0.5);
        gc_run(&k);
    }
    if (gc_begin(&k, 6, "Clip[3,4] max=0.5 opset 6")) {
        int x = gc_param(&k, AWAY, DIMS(3, 4));
        attr_f(&k, gc_op(&k, "Clip", 1, &x), "max", 0.5);
        gc_run(&k);
    }
    if (gc_begin(&k, 11, "Clip[3,4] constant min, max opset 11")) {
        int x = gc_param(&k, AWAY, DIMS(3, 4));
        gc_op(&k, "Clip", 3, (int[]){x, gc_scalar(&k, -0.5), gc_scalar(&k, 0.5)});
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "Clip[3,4] constant min only opset 13")) {
        int x = gc_param(&k, AWAY, DIMS(3, 4));
        gc_op(&k, "Clip", 2, (int[]){x, gc_scalar(&k, -0.5)});
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "Clip[3,4] trainable min, max opset 13")) {
        int x = gc_param(&k, DISTINCT, DIMS(3, 4));
        gen lo = {GEN_UNIFORM, -0.45, -0.3}, hi = {GEN_UNIFORM, 0.3, 0.45};
        gc_op(&k, "Clip", 3, (int[]){x, gc_param(&k, lo, 0, NULL), gc_param(&k, hi, 0, NULL)});
        gc_run(&k);
    }
}

static void cases_select(void) {
    gc_case k;
    if (gc_begin(&k, 13, "Where(cond[2,3], a[2,3], b[3])")) {
        unsigned char cond[6] = {1, 0, 0, 1, 1, 0};
        int c = gc_bools(&k, DIMS(2, 3), cond);
        gc_op(&k, "Where", 3, (int[]){c, gc_param(&k, UNI, DIMS(2, 3)), gc_param(&k, UNI, DIMS(3))});
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "Where(cond[3,1], a[], b[1,4])")) {
        unsigned char cond[3] = {1, 0, 1};
        int c = gc_bools(&k, DIMS(3, 1), cond);
        gc_op(&k, "Where", 3, (int[]){c, gc_param(&k, UNI, 0, NULL), gc_param(&k, UNI, DIMS(1, 4))});
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "Sum(a[2,3], b[3], c[2,1])")) {
        gc_op(&k, "Sum", 3,
              (int[]){gc_param(&k, UNI, DIMS(2, 3)), gc_param(&k, UNI, DIMS(3)), gc_param(&k, UNI, DIMS(2, 1))});
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "Sum(a[2,3])")) {
        gc_op(&k, "Sum", 1, (int[]){gc_param(&k, UNI, DIMS(2, 3))});
        gc_run(&k);
    }
    static const char *mm[2] = {"Max", "Min"};
    for (int i = 0; i < 2; i++) {
        if (gc_begin(&k, 13, "%s(a[2,3], b[3])", mm[i])) {
            gc_op(&k, mm[i], 2, (int[]){gc_param(&k, UNI, DIMS(2, 3)), gc_param(&k, UNI, DIMS(3))});
            gc_run(&k);
        }
        if (gc_begin(&k, 13, "%s(a[2,3], b[2,3], c[1])", mm[i])) {
            gc_op(&k, mm[i], 3,
                  (int[]){gc_param(&k, UNI, DIMS(2, 3)), gc_param(&k, UNI, DIMS(2, 3)), gc_param(&k, UNI, DIMS(1))});
            gc_run(&k);
        }
    }
}

static void cases_dropout(void) {
    gc_case k;
    if (gc_begin(&k, 11, "Dropout[3,4] opset 11 (inference)")) {
        int x = gc_param(&k, UNI, DIMS(3, 4));
        attr_f(&k, gc_op(&k, "Dropout", 1, &x), "ratio", 0.3);
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "Dropout[3,4] opset 13 training_mode=false")) {
        int x = gc_param(&k, UNI, DIMS(3, 4));
        gc_op(&k, "Dropout", 3, (int[]){x, gc_scalar(&k, 0.3), gc_bool(&k, 0)});
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "Dropout[3,4] opset 13 training_mode=true seed=7")) {
        int x = gc_param(&k, UNI, DIMS(3, 4));
        attr_i(&k, gc_op(&k, "Dropout", 3, (int[]){x, gc_scalar(&k, 0.3), gc_bool(&k, 1)}), "seed", 7);
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "Dropout[3,4] opset 13 training, ratio omitted (0.5)")) {
        int x = gc_param(&k, UNI, DIMS(3, 4));
        attr_i(&k, gc_op(&k, "Dropout", 3, (int[]){x, -1, gc_bool(&k, 1)}), "seed", 11);
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "Dropout[3,4] opset 13 training, mask output declared")) {
        int x = gc_param(&k, UNI, DIMS(3, 4)), y[2];
        int n = gc_node(&k, "Dropout", "", 3, (int[]){x, gc_scalar(&k, 0.5), gc_bool(&k, 1)}, 2, y);
        attr_i(&k, n, "seed", 3);
        gc_loss_on(&k, y[0]);
        gc_run(&k);
    }
}

/* ---- tensor ---- */

static void case_shape_op(const char *label, const char *op, int opset, int n_ints, const int64_t *ints,
                          const char *attr, int n_attr, const int64_t *attr_v) {
    gc_case k;
    if (!gc_begin(&k, opset, "%s opset %d", label, opset)) return;
    int in[2] = {gc_param(&k, UNI, DIMS(2, 3, 4)), -1};
    if (n_ints) in[1] = gc_ints(&k, n_ints, ints);
    int n = gc_op(&k, op, n_ints ? 2 : 1, in);
    if (attr && n_attr >= 0) attr_is(&k, n, attr, n_attr, attr_v);
    else if (attr) attr_i(&k, n, attr, attr_v[0]);
    gc_run(&k);
}

static void cases_reshape(void) {
    case_shape_op("Reshape[2,3,4]->[6,4]", "Reshape", 13, 2, (int64_t[]){6, -1}, NULL, 0, NULL);
    case_shape_op("Flatten[2,3,4] axis=2", "Flatten", 13, 0, NULL, "axis", -1, (int64_t[]){2});
    case_shape_op("Flatten[2,3,4] axis=0", "Flatten", 13, 0, NULL, "axis", -1, (int64_t[]){0});
    case_shape_op("Unsqueeze[2,3,4] axes=[0,4]", "Unsqueeze", 11, 0, NULL, "axes", 2, (int64_t[]){0, 4});
    case_shape_op("Unsqueeze[2,3,4] axes=[-1]", "Unsqueeze", 13, 1, (int64_t[]){-1}, NULL, 0, NULL);
    case_shape_op("Transpose[2,3,4] default perm", "Transpose", 13, 0, NULL, NULL, 0, NULL);
    case_shape_op("Transpose[2,3,4] perm=[1,2,0]", "Transpose", 13, 0, NULL, "perm", 3, (int64_t[]){1, 2, 0});
    case_shape_op("Expand[2,3,4]->[2,2,3,4]", "Expand", 13, 4, (int64_t[]){2, 2, 3, 4}, NULL, 0, NULL);
    case_shape_op("Tile[2,3,4] x [2,1,3]", "Tile", 13, 3, (int64_t[]){2, 1, 3}, NULL, 0, NULL);
    case_shape_op("Trilu[2,3,4] upper", "Trilu", 14, 0, NULL, NULL, 0, NULL);
    case_shape_op("Trilu[2,3,4] lower", "Trilu", 14, 0, NULL, "upper", -1, (int64_t[]){0});
    case_shape_op("Trilu[2,3,4] k=-1", "Trilu", 14, 1, (int64_t[]){-1}, NULL, 0, NULL);
    case_shape_op("Tile[2,3,4] x [1,1,1]", "Tile", 13, 3, (int64_t[]){1, 1, 1}, NULL, 0, NULL);
    gc_case k;
    if (gc_begin(&k, 13, "Squeeze[2,1,3,1] axes=[1,3] opset 13")) {
        int x = gc_param(&k, UNI, DIMS(2, 1, 3, 1));
        gc_op(&k, "Squeeze", 2, (int[]){x, gc_ints(&k, 2, (int64_t[]){1, 3})});
        gc_run(&k);
    }
    if (gc_begin(&k, 11, "Squeeze[2,1,3,1] all opset 11")) {
        int x = gc_param(&k, UNI, DIMS(2, 1, 3, 1));
        gc_op(&k, "Squeeze", 1, &x);
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "Expand[3,1]->[2,3,4]")) {
        int x = gc_param(&k, UNI, DIMS(3, 1));
        gc_op(&k, "Expand", 2, (int[]){x, gc_ints(&k, 3, (int64_t[]){2, 3, 4})});
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "Tile[3] x [4]")) {
        int x = gc_param(&k, UNI, DIMS(3));
        gc_op(&k, "Tile", 2, (int[]){x, gc_ints(&k, 1, (int64_t[]){4})});
        gc_run(&k);
    }
}

static void cases_concat_split(void) {
    gc_case k;
    if (gc_begin(&k, 13, "Concat axis=1 [2,1,3],[2,4,3],[2,2,3]")) {
        int in[3] = {gc_param(&k, UNI, DIMS(2, 1, 3)), gc_param(&k, UNI, DIMS(2, 4, 3)),
                     gc_param(&k, UNI, DIMS(2, 2, 3))};
        attr_i(&k, gc_op(&k, "Concat", 3, in), "axis", 1);
        gc_run(&k);
    }
    if (gc_begin(&k, 11, "Concat axis=-1 [3,2],[3,5] opset 11")) {
        int in[2] = {gc_param(&k, UNI, DIMS(3, 2)), gc_param(&k, UNI, DIMS(3, 5))};
        attr_i(&k, gc_op(&k, "Concat", 2, in), "axis", -1);
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "Concat(x, x) axis=0 [2,3]")) {
        int x = gc_param(&k, UNI, DIMS(2, 3));
        attr_i(&k, gc_op(&k, "Concat", 2, (int[]){x, x}), "axis", 0);
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "Split[2,6] axis=1 split=[1,3,2], all outputs in the loss")) {
        int x = gc_param(&k, UNI, DIMS(2, 6)), y[3];
        int n = gc_node(&k, "Split", "", 2, (int[]){x, gc_ints(&k, 3, (int64_t[]){1, 3, 2})}, 3, y);
        attr_i(&k, n, "axis", 1);
        for (int j = 0; j < 3; j++) gc_loss_on(&k, y[j]);
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "Split[6,2] equal, output 1 only in the loss")) {
        int x = gc_param(&k, UNI, DIMS(6, 2)), y[3];
        gc_node(&k, "Split", "", 1, &x, 3, y);
        gc_loss_on(&k, y[1]);
        gc_run(&k);
    }
    if (gc_begin(&k, 18, "Split[7,2] num_outputs=3 opset 18, outputs 0 and 2")) {
        int x = gc_param(&k, UNI, DIMS(7, 2)), y[3];
        attr_i(&k, gc_node(&k, "Split", "", 1, &x, 3, y), "num_outputs", 3);
        gc_loss_on(&k, y[0]);
        gc_loss_on(&k, y[2]);
        gc_run(&k);
    }
    if (gc_begin(&k, 11, "Split[4,5] axis=-1 split=[2,3] attr opset 11, output 0 only")) {
        int x = gc_param(&k, UNI, DIMS(4, 5)), y[2];
        int n = gc_node(&k, "Split", "", 1, &x, 2, y);
        attr_i(&k, n, "axis", -1);
        attr_is(&k, n, "split", 2, (int64_t[]){2, 3});
        gc_loss_on(&k, y[0]);
        gc_run(&k);
    }
}

/* Slice of a [5,6,4] parameter with constant starts/ends/axes/steps (opset 13). */
static void case_slice(int n, const int64_t *starts, const int64_t *ends, const int64_t *axes, const int64_t *steps,
                       const char *what) {
    gc_case k;
    if (!gc_begin(&k, 13, "Slice[5,6,4] %s", what)) return;
    int in[5] = {gc_param(&k, UNI, DIMS(5, 6, 4)), gc_ints(&k, n, starts), gc_ints(&k, n, ends), -1, -1};
    int n_in = 3;
    if (axes) in[n_in++] = gc_ints(&k, n, axes);
    if (steps) {
        if (!axes) in[n_in++] = -1;
        in[n_in++] = gc_ints(&k, n, steps);
    }
    gc_op(&k, "Slice", n_in, in);
    gc_run(&k);
}

static void cases_slice(void) {
    case_slice(1, (int64_t[]){1}, (int64_t[]){4}, NULL, NULL, "starts=[1] ends=[4]");
    case_slice(2, (int64_t[]){-4, 1}, (int64_t[]){100, -1}, (int64_t[]){1, 2}, NULL, "negative starts, ends past");
    case_slice(1, (int64_t[]){0}, (int64_t[]){6}, (int64_t[]){1}, (int64_t[]){2}, "axis 1 step 2");
    case_slice(1, (int64_t[]){1}, (int64_t[]){5}, (int64_t[]){0}, (int64_t[]){3}, "axis 0 start 1 step 3");
    case_slice(1, (int64_t[]){-1}, (int64_t[]){INT64_MIN}, (int64_t[]){1}, (int64_t[]){-1}, "reverse axis 1");
    case_slice(1, (int64_t[]){4}, (int64_t[]){0}, (int64_t[]){1}, (int64_t[]){-2}, "axis 1 step -2");
    case_slice(3, (int64_t[]){0, 5, 3}, (int64_t[]){5, 0, 0}, (int64_t[]){0, 1, 2}, (int64_t[]){2, -3, -1},
               "three axes, steps 2,-3,-1");
    case_slice(1, (int64_t[]){2}, (int64_t[]){3}, (int64_t[]){-1}, (int64_t[]){5}, "one element, big step");
    gc_case k;
    if (gc_begin(&k, 10, "Slice[5,6,4] inputs without steps opset 10")) {
        int x = gc_param(&k, UNI, DIMS(5, 6, 4));
        gc_op(&k, "Slice", 4,
              (int[]){x, gc_ints(&k, 1, (int64_t[]){2}), gc_ints(&k, 1, (int64_t[]){-1}),
                      gc_ints(&k, 1, (int64_t[]){1})});
        gc_run(&k);
    }
    if (gc_begin(&k, 9, "Slice[5,6,4] attributes opset 9")) {
        int x = gc_param(&k, UNI, DIMS(5, 6, 4));
        int n = gc_op(&k, "Slice", 1, &x);
        attr_is(&k, n, "starts", 2, (int64_t[]){1, -3});
        attr_is(&k, n, "ends", 2, (int64_t[]){3, 1000});
        attr_is(&k, n, "axes", 2, (int64_t[]){0, 2});
        gc_run(&k);
    }
}

static void cases_gather(void) {
    gc_case k;
    if (gc_begin(&k, 13, "Gather[5,3] axis 0 indices[2,4] (repeats, negative)")) {
        int64_t idx[8] = {0, 4, 2, 4, -1, 1, 0, 0};
        int x = gc_param(&k, UNI, DIMS(5, 3));
        int i = vp_build_const(k.g, "idx", VP_I64, 2, (int64_t[]){2, 4}, idx);
        gc_op(&k, "Gather", 2, (int[]){x, i});
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "Gather[6,2] axis 0 indices[2,2,2]")) {
        int64_t idx[8] = {5, 0, 5, 5, 2, 3, 0, 1};
        int x = gc_param(&k, UNI, DIMS(6, 2));
        int i = vp_build_const(k.g, "idx", VP_I64, 3, (int64_t[]){2, 2, 2}, idx);
        gc_op(&k, "Gather", 2, (int[]){x, i});
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "Gather[2,5,3] axis 1 indices[3] int32")) {
        int32_t idx[3] = {3, 3, 1};
        int x = gc_param(&k, UNI, DIMS(2, 5, 3));
        int i = vp_build_const(k.g, "idx", VP_I32, 1, (int64_t[]){3}, idx);
        attr_i(&k, gc_op(&k, "Gather", 2, (int[]){x, i}), "axis", 1);
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "Gather[4,3] axis -1 scalar index")) {
        int64_t idx = 2;
        int x = gc_param(&k, UNI, DIMS(4, 3));
        int i = vp_build_const(k.g, "idx", VP_I64, 0, NULL, &idx);
        attr_i(&k, gc_op(&k, "Gather", 2, (int[]){x, i}), "axis", -1);
        gc_run(&k);
    }
}

static void cases_scatter(void) {
    gc_case k;
    if (gc_begin(&k, 13, "GatherElements[3,4] axis 0 indices[2,4] (repeats, negative)")) {
        int64_t idx[8] = {0, 2, -1, 1, 2, 2, 0, -3};
        int x = gc_param(&k, UNI, DIMS(3, 4));
        gc_op(&k, "GatherElements", 2, (int[]){x, vp_build_const(k.g, "idx", VP_I64, 2, (int64_t[]){2, 4}, idx)});
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "GatherElements[2,5,3] axis 1 indices[2,3,2] int32 (smaller off the axis)")) {
        int32_t idx[12] = {4, 0, 1, 1, 3, 4, 0, 0, 2, 3, 4, 2};
        int x = gc_param(&k, UNI, DIMS(2, 5, 3));
        int i = vp_build_const(k.g, "idx", VP_I32, 3, (int64_t[]){2, 3, 2}, idx);
        attr_i(&k, gc_op(&k, "GatherElements", 2, (int[]){x, i}), "axis", 1);
        gc_run(&k);
    }
    for (int largest = 0; largest < 2; largest++) {
        if (!gc_begin(&k, 11, "TopK[3,5] k=2 axis -1 largest=%d", largest)) continue;
        int x = gc_param(&k, DISTINCT, DIMS(3, 5)), y[2];
        int n = gc_node(&k, "TopK", "", 2, (int[]){x, gc_ints(&k, 1, (int64_t[]){2})}, 2, y);
        attr_i(&k, n, "largest", largest);
        gc_loss_on(&k, y[0]);
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "TopK[4,3,2] k=3 axis 0")) {
        int x = gc_param(&k, DISTINCT, DIMS(4, 3, 2)), y[2];
        attr_i(&k, gc_node(&k, "TopK", "", 2, (int[]){x, gc_ints(&k, 1, (int64_t[]){3})}, 2, y), "axis", 0);
        gc_loss_on(&k, y[0]);
        gc_run(&k);
    }
    static const int64_t flags[4][2] = {{0, 0}, {1, 0}, {0, 1}, {1, 1}};
    for (int i = 0; i < 4; i++) {
        if (!gc_begin(&k, 14, "CumSum[3,4] axis 1 exclusive=%d reverse=%d", (int)flags[i][0], (int)flags[i][1]))
            continue;
        int64_t axis = 1;
        int x = gc_param(&k, UNI, DIMS(3, 4));
        int n = gc_op(&k, "CumSum", 2, (int[]){x, vp_build_const(k.g, "axis", VP_I64, 0, NULL, &axis)});
        attr_i(&k, n, "exclusive", flags[i][0]);
        attr_i(&k, n, "reverse", flags[i][1]);
        gc_run(&k);
    }
}

static void cases_pad(void) {
    gc_case k;
    if (gc_begin(&k, 13, "Pad[3,4] pads=[1,0,2,3] constant")) {
        int x = gc_param(&k, UNI, DIMS(3, 4));
        gc_op(&k, "Pad", 2, (int[]){x, gc_ints(&k, 4, (int64_t[]){1, 0, 2, 3})});
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "Pad[3,4] pads=[-1,2,1,-2] (crops)")) {
        int x = gc_param(&k, UNI, DIMS(3, 4));
        gc_op(&k, "Pad", 2, (int[]){x, gc_ints(&k, 4, (int64_t[]){-1, 2, 1, -2})});
        gc_run(&k);
    }
    if (gc_begin(&k, 11, "Pad[3,4] trainable constant value opset 11")) {
        int x = gc_param(&k, UNI, DIMS(3, 4));
        gc_op(&k, "Pad", 3, (int[]){x, gc_ints(&k, 4, (int64_t[]){0, 1, 1, 1}), gc_param(&k, UNI, 0, NULL)});
        gc_run(&k);
    }
    if (gc_begin(&k, 2, "Pad[2,3,2] pads attribute opset 2")) {
        int x = gc_param(&k, UNI, DIMS(2, 3, 2));
        attr_is(&k, gc_op(&k, "Pad", 1, &x), "pads", 6, (int64_t[]){0, 1, 0, 1, 2, 1});
        gc_run(&k);
    }
    if (gc_begin(&k, 18, "Pad[2,3,2] axes=[2] opset 18")) {
        int x = gc_param(&k, UNI, DIMS(2, 3, 2));
        gc_op(&k, "Pad", 4, (int[]){x, gc_ints(&k, 2, (int64_t[]){1, 2}), -1, gc_ints(&k, 1, (int64_t[]){2})});
        gc_run(&k);
    }
}

/* ---- linalg ---- */

static void case_matmul(int ra, const int64_t *da, int rb, const int64_t *db) {
    case_binary("MatMul", UNI, ra, da, UNI, rb, db);
}

static void cases_matmul(void) {
    case_matmul(DIMS(3, 4), DIMS(4, 5));
    case_matmul(DIMS(2, 3, 4), DIMS(4, 5));
    case_matmul(DIMS(4, 5), DIMS(2, 5, 3));
    case_matmul(DIMS(2, 3, 4), DIMS(2, 4, 5));
    case_matmul(DIMS(2, 1, 3, 4), DIMS(3, 4, 2));
    case_matmul(DIMS(2, 2, 3, 4), DIMS(4, 2));
    case_matmul(DIMS(4), DIMS(4, 5));
    case_matmul(DIMS(3, 4), DIMS(4));
    case_matmul(DIMS(4), DIMS(4));
    case_matmul(DIMS(4), DIMS(2, 4, 3));
    case_matmul(DIMS(2, 3, 4), DIMS(4));
}

static void cases_gemm(void) {
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int cv = 0; cv < 4; cv++) {
                static const char *cname[4] = {"none", "[5]", "[3,5]", "[3,1]"};
                gc_case k;
                if (!gc_begin(&k, 13, "Gemm transA=%d transB=%d C=%s alpha=0.7 beta=1.3", ta, tb, cname[cv])) continue;
                int a = ta ? gc_param(&k, UNI, DIMS(4, 3)) : gc_param(&k, UNI, DIMS(3, 4));
                int b = tb ? gc_param(&k, UNI, DIMS(5, 4)) : gc_param(&k, UNI, DIMS(4, 5));
                int in[3] = {a, b, -1};
                if (cv == 1) in[2] = gc_param(&k, UNI, DIMS(5));
                if (cv == 2) in[2] = gc_param(&k, UNI, DIMS(3, 5));
                if (cv == 3) in[2] = gc_param(&k, UNI, DIMS(3, 1));
                int n = gc_op(&k, "Gemm", cv ? 3 : 2, in);
                attr_i(&k, n, "transA", ta);
                attr_i(&k, n, "transB", tb);
                attr_f(&k, n, "alpha", 0.7);
                attr_f(&k, n, "beta", 1.3);
                gc_run(&k);
            }
    gc_case k;
    if (gc_begin(&k, 13, "Gemm defaults C scalar")) {
        gc_op(&k, "Gemm", 3,
              (int[]){gc_param(&k, UNI, DIMS(2, 3)), gc_param(&k, UNI, DIMS(3, 4)), gc_param(&k, UNI, 0, NULL)});
        gc_run(&k);
    }
}

typedef struct conv_spec {
    const char *what;
    int rank; /* spatial rank */
    int64_t x[5], w[5];
    int bias;
    int64_t strides[3], pads[6], dilations[3], group;
    const char *auto_pad;
} conv_spec;

static void case_conv(const conv_spec *cs) {
    gc_case k;
    if (!gc_begin(&k, 13, "Conv %s", cs->what)) return;
    int r = cs->rank + 2;
    int in[3] = {gc_param(&k, UNI, r, cs->x), gc_param(&k, UNI, r, cs->w), -1};
    if (cs->bias) in[2] = gc_param(&k, UNI, 1, (int64_t[]){cs->w[0]});
    int n = gc_op(&k, "Conv", cs->bias ? 3 : 2, in);
    if (cs->strides[0]) attr_is(&k, n, "strides", cs->rank, cs->strides);
    if (cs->dilations[0]) attr_is(&k, n, "dilations", cs->rank, cs->dilations);
    if (cs->auto_pad) attr_s(&k, n, "auto_pad", cs->auto_pad);
    else attr_is(&k, n, "pads", 2 * cs->rank, cs->pads);
    if (cs->group) attr_i(&k, n, "group", cs->group);
    gc_run(&k);
}

static void cases_conv(void) {
    static const conv_spec specs[] = {
        {"2-D [1,2,5,5]*[3,2,3,3] bias", 2, {1, 2, 5, 5}, {3, 2, 3, 3}, 1, {0}, {0}, {0}, 0, NULL},
        {"2-D no bias", 2, {2, 2, 4, 4}, {2, 2, 2, 2}, 0, {0}, {0}, {0}, 0, NULL},
        {"2-D stride 2 pads 1", 2, {1, 2, 6, 5}, {3, 2, 3, 3}, 1, {2, 2}, {1, 1, 1, 1}, {0}, 0, NULL},
        {"2-D asymmetric pads, stride [1,2]", 2, {1, 1, 5, 6}, {2, 1, 2, 3}, 1, {1, 2}, {0, 1, 2, 0}, {0}, 0, NULL},
        {"2-D dilation 2", 2, {1, 2, 7, 7}, {2, 2, 3, 3}, 1, {0}, {1, 1, 1, 1}, {2, 2}, 0, NULL},
        {"2-D groups 2", 2, {1, 4, 5, 5}, {4, 2, 3, 3}, 1, {0}, {1, 1, 1, 1}, {0}, 2, NULL},
        {"2-D depthwise", 2, {1, 3, 4, 4}, {3, 1, 3, 3}, 0, {0}, {1, 1, 1, 1}, {0}, 3, NULL},
        {"2-D auto_pad SAME_UPPER stride 2", 2, {1, 2, 5, 5}, {2, 2, 3, 3}, 1, {2, 2}, {0}, {0}, 0, "SAME_UPPER"},
        {"2-D auto_pad SAME_LOWER stride 2", 2, {1, 2, 6, 5}, {2, 2, 2, 3}, 1, {2, 2}, {0}, {0}, 0, "SAME_LOWER"},
        {"2-D auto_pad VALID stride 2", 2, {1, 2, 6, 5}, {2, 2, 3, 2}, 0, {2, 2}, {0}, {0}, 0, "VALID"},
        {"1-D stride 2 pad 1", 1, {2, 2, 7}, {3, 2, 3}, 1, {2}, {1, 1}, {0}, 0, NULL},
        {"3-D", 3, {1, 2, 3, 4, 3}, {2, 2, 2, 2, 2}, 1, {0}, {0, 1, 0, 0, 0, 1}, {0}, 0, NULL},
    };
    for (size_t i = 0; i < sizeof specs / sizeof *specs; i++) case_conv(&specs[i]);
}

typedef struct conv_t_spec {
    const char *what;
    int rank; /* spatial rank */
    int64_t x[5], w[5];
    int bias;
    int64_t strides[3], pads[6], dilations[3], output_padding[3], output_shape[3], group;
    const char *auto_pad;
} conv_t_spec;

static void case_conv_transpose(const conv_t_spec *cs) {
    gc_case k;
    if (!gc_begin(&k, 13, "ConvTranspose %s", cs->what)) return;
    int r = cs->rank + 2;
    int in[3] = {gc_param(&k, UNI, r, cs->x), gc_param(&k, UNI, r, cs->w), -1};
    int64_t group = cs->group ? cs->group : 1;
    if (cs->bias) in[2] = gc_param(&k, UNI, 1, (int64_t[]){cs->w[1] * group});
    int n = gc_op(&k, "ConvTranspose", cs->bias ? 3 : 2, in);
    if (cs->strides[0]) attr_is(&k, n, "strides", cs->rank, cs->strides);
    if (cs->dilations[0]) attr_is(&k, n, "dilations", cs->rank, cs->dilations);
    if (cs->output_padding[0]) attr_is(&k, n, "output_padding", cs->rank, cs->output_padding);
    if (cs->output_shape[0]) attr_is(&k, n, "output_shape", cs->rank, cs->output_shape);
    if (cs->auto_pad) attr_s(&k, n, "auto_pad", cs->auto_pad);
    else if (!cs->output_shape[0]) attr_is(&k, n, "pads", 2 * cs->rank, cs->pads);
    if (cs->group) attr_i(&k, n, "group", cs->group);
    gc_run(&k);
}

static void cases_conv_transpose(void) {
    static const conv_t_spec specs[] = {
        {"2-D [1,2,3,3]*[2,3,3,3] bias", 2, {1, 2, 3, 3}, {2, 3, 3, 3}, 1, {0}, {0}, {0}, {0}, {0}, 0, NULL},
        {"2-D stride 2 pads 1 output_padding 1",
         2,
         {2, 2, 3, 4},
         {2, 2, 3, 3},
         1,
         {2, 2},
         {1, 1, 1, 1},
         {0},
         {1, 1},
         {0},
         0,
         NULL},
        {"2-D stride [2,3] asymmetric pads, no bias",
         2,
         {1, 1, 3, 2},
         {1, 2, 2, 3},
         0,
         {2, 3},
         {0, 1, 1, 0},
         {0},
         {0},
         {0},
         0,
         NULL},
        {"2-D dilation 2", 2, {1, 2, 3, 3}, {2, 1, 2, 2}, 1, {0}, {0}, {2, 2}, {0}, {0}, 0, NULL},
        {"2-D groups 2", 2, {1, 4, 3, 3}, {4, 1, 3, 3}, 1, {2, 2}, {1, 1, 1, 1}, {0}, {0}, {0}, 2, NULL},
        {"2-D auto_pad SAME_UPPER stride 2",
         2,
         {1, 2, 3, 3},
         {2, 2, 3, 3},
         1,
         {2, 2},
         {0},
         {0},
         {0},
         {0},
         0,
         "SAME_UPPER"},
        {"2-D output_shape [6,7] stride 2", 2, {1, 2, 3, 3}, {2, 1, 3, 3}, 0, {2, 2}, {0}, {0}, {0}, {6, 7}, 0, NULL},
        {"1-D stride 3", 1, {2, 2, 4}, {2, 3, 3}, 1, {3}, {0, 0}, {0}, {0}, {0}, 0, NULL},
    };
    for (size_t i = 0; i < sizeof specs / sizeof *specs; i++) case_conv_transpose(&specs[i]);
}

static void case_pool(const char *op, const char *what, int rank, const int64_t *x, int n_k, const int64_t *kernel,
                      const int64_t *strides, const int64_t *pads, int extra_attr, int indices_output) {
    gc_case k;
    if (!gc_begin(&k, 13, "%s %s", op, what)) return;
    int in = gc_param(&k, strcmp(op, "MaxPool") ? UNI : DISTINCT, rank, x), y[2];
    int node = gc_node(&k, op, "", 1, &in, indices_output ? 2 : 1, y);
    gc_loss_on(&k, y[0]);
    attr_is(&k, node, "kernel_shape", n_k, kernel);
    if (strides) attr_is(&k, node, "strides", n_k, strides);
    if (pads) attr_is(&k, node, "pads", 2 * n_k, pads);
    if (extra_attr && !strcmp(op, "AveragePool")) attr_i(&k, node, "count_include_pad", 1);
    if (extra_attr && !strcmp(op, "MaxPool")) attr_is(&k, node, "dilations", n_k, (int64_t[]){2, 2});
    gc_run(&k);
}

/* A 2-D pooling of [1,2,5,6] by 2x3 windows, stride 2, with ceil_mode or auto_pad. */
static void case_pool_window(const char *op, int ceil_mode, const char *auto_pad) {
    gc_case k;
    if (!gc_begin(&k, 13, "%s [1,2,5,6] 2x3 stride 2%s%s%s", op, ceil_mode ? " ceil_mode" : "",
                  auto_pad ? " auto_pad=" : "", auto_pad ? auto_pad : ""))
        return;
    int x = gc_param(&k, strcmp(op, "MaxPool") ? UNI : DISTINCT, DIMS(1, 2, 5, 6));
    int n = gc_op(&k, op, 1, &x);
    attr_is(&k, n, "kernel_shape", 2, (int64_t[]){2, 3});
    attr_is(&k, n, "strides", 2, (int64_t[]){2, 2});
    if (ceil_mode) attr_i(&k, n, "ceil_mode", 1);
    if (auto_pad) attr_s(&k, n, "auto_pad", auto_pad);
    gc_run(&k);
}

static void cases_pool(void) {
    static const char *pads[3] = {"SAME_UPPER", "SAME_LOWER", "VALID"};
    for (int i = 0; i < 2; i++) {
        const char *op = i ? "AveragePool" : "MaxPool";
        case_pool_window(op, 1, NULL);
        for (int j = 0; j < 3; j++) case_pool_window(op, 0, pads[j]);
    }
    static const char *ops[2] = {"MaxPool", "AveragePool"};
    for (int i = 0; i < 2; i++) {
        case_pool(ops[i], "[2,2,4,4] 2x2 stride 2", DIMS(2, 2, 4, 4), 2, (int64_t[]){2, 2}, (int64_t[]){2, 2}, NULL, 0,
                  0);
        case_pool(ops[i], "[1,2,5,5] 3x3 stride 1 pads 1", DIMS(1, 2, 5, 5), 2, (int64_t[]){3, 3}, NULL,
                  (int64_t[]){1, 1, 1, 1}, 0, 0);
        case_pool(ops[i], "[1,1,5,6] 3x2 stride 2 pads [1,0,1,1]", DIMS(1, 1, 5, 6), 2, (int64_t[]){3, 2},
                  (int64_t[]){2, 2}, (int64_t[]){1, 0, 1, 1}, 0, 0);
        case_pool(ops[i], "1-D [2,3,7] k3 s2", DIMS(2, 3, 7), 1, (int64_t[]){3}, (int64_t[]){2}, NULL, 0, 0);
    }
    case_pool("AveragePool", "[1,2,5,5] 3x3 pads 1 count_include_pad", DIMS(1, 2, 5, 5), 2, (int64_t[]){3, 3}, NULL,
              (int64_t[]){1, 1, 1, 1}, 1, 0);
    case_pool("MaxPool", "[1,2,6,6] 2x2 dilation 2", DIMS(1, 2, 6, 6), 2, (int64_t[]){2, 2}, NULL, NULL, 1, 0);
    case_pool("MaxPool", "[1,2,4,4] 2x2 Indices output declared", DIMS(1, 2, 4, 4), 2, (int64_t[]){2, 2},
              (int64_t[]){2, 2}, NULL, 0, 1);
    gc_case k;
    if (gc_begin(&k, 13, "GlobalMaxPool[2,3,3,4]")) {
        int x = gc_param(&k, DISTINCT, DIMS(2, 3, 3, 4));
        gc_op(&k, "GlobalMaxPool", 1, &x);
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "GlobalAveragePool[2,3,4,5]")) {
        int x = gc_param(&k, UNI, DIMS(2, 3, 4, 5));
        gc_op(&k, "GlobalAveragePool", 1, &x);
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "GlobalAveragePool[2,3,4] 1-D")) {
        int x = gc_param(&k, UNI, DIMS(2, 3, 4));
        gc_op(&k, "GlobalAveragePool", 1, &x);
        gc_run(&k);
    }
}

static void case_batchnorm(int opset, int rank, const int64_t *x) {
    gc_case k;
    char sx[64];
    if (!gc_begin(&k, opset, "BatchNormalization%s training (BatchNormInternal) opset %d",
                  vp_shape_str(rank, x, sx, sizeof sx), opset))
        return;
    int64_t ch[1] = {x[1]};
    gen var = {GEN_UNIFORM, 0.5, 1.5};
    int in[5] = {gc_param(&k, UNI, rank, x), gc_param(&k, POS, 1, ch), gc_param(&k, UNI, 1, ch),
                 gc_param(&k, UNI, 1, ch), gc_param(&k, var, 1, ch)};
    attr_f(&k, gc_op(&k, "BatchNormalization", 5, in), "epsilon", 1e-3);
    gc_run(&k);
}

/* BatchNormalization left as the model has it: training_mode=1 (opset 15, with its
 * running-statistics outputs), or inference (differentiated without the training-mode
 * pass); the running statistics are constants. */
static void case_batchnorm_as_is(int training, int per_activation, int rank, const int64_t *x) {
    gc_case k;
    char sx[64];
    int opset = per_activation ? 7 : 15;
    if (!gc_begin(&k, opset, "BatchNormalization%s %s%s as is, opset %d", vp_shape_str(rank, x, sx, sizeof sx),
                  training ? "training_mode=1" : "inference", per_activation ? " spatial=0" : "", opset))
        return;
    int pr = per_activation ? rank - 1 : 1;
    const int64_t *pd = x + 1;
    gen var = {GEN_UNIFORM, 0.5, 1.5};
    int in[5] = {gc_param(&k, UNI, rank, x), gc_param(&k, POS, pr, pd), gc_param(&k, UNI, pr, pd),
                 gc_const(&k, UNI, pr, pd), gc_const(&k, var, pr, pd)};
    int y[3];
    int node = gc_node(&k, "BatchNormalization", "", 5, in, training ? 3 : 1, y);
    gc_loss_on(&k, y[0]);
    attr_f(&k, node, "epsilon", 1e-3);
    if (training) attr_i(&k, node, "training_mode", 1);
    if (per_activation) attr_i(&k, node, "spatial", 0);
    k.raw = !training;
    gc_run(&k);
}

static void case_layernorm(int axis, int bias, int n_out, int rank, const int64_t *x) {
    gc_case k;
    char sx[64];
    if (!gc_begin(&k, 17, "LayerNormalization%s axis=%d%s, %d outputs", vp_shape_str(rank, x, sx, sizeof sx), axis,
                  bias ? "" : " no bias", n_out))
        return;
    int a = axis < 0 ? axis + rank : axis, nr = rank - a;
    int in[3] = {gc_param(&k, UNI, rank, x), gc_param(&k, POS, nr, x + a), bias ? gc_param(&k, UNI, nr, x + a) : -1};
    int y[3];
    int node = gc_node(&k, "LayerNormalization", "", bias ? 3 : 2, in, n_out, y);
    gc_loss_on(&k, y[0]);
    attr_i(&k, node, "axis", axis);
    attr_f(&k, node, "epsilon", 1e-3);
    /* float64 statistics in the float64 pass (float32 ones would defeat the finite
     * differences); float32 ones in the others, as mixed precision has them */
    attr_i(&k, node, "stash_type", g_pass == VP_F64 ? VP_F64 : VP_F32);
    gc_run(&k);
}

static void case_lrn(int size, double alpha, double beta, double bias, int rank, const int64_t *x) {
    gc_case k;
    char sx[64];
    if (!gc_begin(&k, 13, "LRN%s size=%d alpha=%g beta=%g bias=%g", vp_shape_str(rank, x, sx, sizeof sx), size, alpha,
                  beta, bias))
        return;
    int p = gc_param(&k, UNI, rank, x);
    int n = gc_op(&k, "LRN", 1, &p);
    attr_i(&k, n, "size", size);
    attr_f(&k, n, "alpha", alpha);
    attr_f(&k, n, "beta", beta);
    attr_f(&k, n, "bias", bias);
    gc_run(&k);
}

static void cases_norm(void) {
    case_lrn(3, 0.5, 0.75, 1.0, DIMS(2, 5, 3, 2));
    case_lrn(4, 0.3, 0.5, 2.0, DIMS(1, 6, 4));
    case_lrn(5, 1e-4, 0.75, 1.0, DIMS(1, 3, 2, 2));
    case_lrn(1, 0.8, 1.5, 1.5, DIMS(2, 4, 3));
    case_batchnorm(13, DIMS(2, 3, 4, 4));
    case_batchnorm(9, DIMS(5, 3));
    case_batchnorm(15, DIMS(3, 2, 5));
    case_batchnorm_as_is(1, 0, DIMS(2, 3, 4, 4));
    case_batchnorm_as_is(1, 0, DIMS(5, 3));
    case_batchnorm_as_is(0, 0, DIMS(2, 3, 4, 4));
    case_batchnorm_as_is(0, 1, DIMS(4, 3, 2));
    case_layernorm(-1, 1, 1, DIMS(2, 3, 4));
    case_layernorm(1, 1, 1, DIMS(2, 3, 4));
    case_layernorm(0, 1, 1, DIMS(2, 3, 4));
    case_layernorm(-1, 0, 1, DIMS(3, 5));
    case_layernorm(2, 1, 3, DIMS(2, 3, 4, 2));
    gc_case k;
    if (gc_begin(&k, 13, "InstanceNormalization[2,3,4,5]")) {
        int in[3] = {gc_param(&k, UNI, DIMS(2, 3, 4, 5)), gc_param(&k, POS, DIMS(3)), gc_param(&k, UNI, DIMS(3))};
        attr_f(&k, gc_op(&k, "InstanceNormalization", 3, in), "epsilon", 1e-3);
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "InstanceNormalization[3,2,6] 1-D")) {
        int in[3] = {gc_param(&k, UNI, DIMS(3, 2, 6)), gc_param(&k, POS, DIMS(2)), gc_param(&k, UNI, DIMS(2))};
        gc_op(&k, "InstanceNormalization", 3, in);
        gc_run(&k);
    }
}

/* ---- reduce ---- */

static void case_reduce(const char *op, int opset, gen ge, int n_axes, const int64_t *axes, int keepdims, int noop) {
    gc_case k;
    char sa[64];
    if (!gc_begin(&k, opset, "%s[2,3,4] axes=%s keepdims=%d%s opset %d", op,
                  n_axes ? vp_shape_str(n_axes, axes, sa, sizeof sa) : "none", keepdims,
                  noop ? " noop_with_empty_axes" : "", opset))
        return;
    int axes_input = opset >= (strcmp(op, "ReduceSum") ? 18 : 13);
    int in[2] = {gc_param(&k, ge, DIMS(2, 3, 4)), -1};
    if (axes_input && n_axes) in[1] = gc_ints(&k, n_axes, axes);
    int n = gc_op(&k, op, in[1] >= 0 ? 2 : 1, in);
    if (!axes_input && n_axes) attr_is(&k, n, "axes", n_axes, axes);
    attr_i(&k, n, "keepdims", keepdims);
    if (noop) attr_i(&k, n, "noop_with_empty_axes", 1);
    gc_run(&k);
}

static void cases_reduce(void) {
    static const char *ops[] = {"ReduceSum", "ReduceMean", "ReduceMax",    "ReduceMin",      "ReduceSumSquare",
                                "ReduceL2",  "ReduceL1",   "ReduceLogSum", "ReduceLogSumExp"};
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) {
        gen ge = i == 2 || i == 3                  ? DISTINCT
                 : !strcmp(ops[i], "ReduceL1")     ? AWAY
                 : !strcmp(ops[i], "ReduceLogSum") ? POS
                                                   : UNI;
        case_reduce(ops[i], 13, ge, 1, (int64_t[]){1}, 1, 0);
        case_reduce(ops[i], 11, ge, 2, (int64_t[]){0, -1}, 0, 0);
        case_reduce(ops[i], 18, ge, 1, (int64_t[]){-1}, 0, 0);
        case_reduce(ops[i], 13, ge, 0, NULL, 0, 0);
    }
    case_reduce("ReduceProd", 13, UNI, 1, (int64_t[]){1}, 1, 0);
    case_reduce("ReduceProd", 18, UNI, 2, (int64_t[]){0, 2}, 0, 0);
    gc_case k;
    if (gc_begin(&k, 18, "ReduceProd with zeros, as PyTorch")) {
        int p = gc_param(&k, UNI, 2, (int64_t[]){3, 3});
        /* rows: no zero, one zero, two zeros */
        set_values(&k, p, 9, (double[]){2, 3, 0.5, 2, 0, 3, 0, 4, 0});
        gc_op(&k, "ReduceProd", 2, (int[]){p, gc_ints(&k, 1, (int64_t[]){1})});
        k.expect[0] = (double[]){1.5, 1, 6, 0, 6, 0, 0, 0, 0};
        gc_run(&k);
    }
    case_reduce("ReduceSum", 13, UNI, 0, NULL, 1, 1);
    case_reduce("ReduceMean", 18, UNI, 0, NULL, 0, 1);
}

static void case_softmax(const char *op, int opset, int axis) {
    gc_case k;
    if (!gc_begin(&k, opset, "%s[2,3,4] axis=%d opset %d", op, axis, opset)) return;
    int x = gc_param(&k, UNI, DIMS(2, 3, 4));
    attr_i(&k, gc_op(&k, op, 1, &x), "axis", axis);
    gc_run(&k);
}

static void cases_softmax(void) {
    static const char *ops[2] = {"Softmax", "LogSoftmax"};
    for (int i = 0; i < 2; i++) {
        gc_case k;
        if (gc_begin(&k, 7, "%s[2,3,4] default axis opset 7", ops[i])) {
            int x = gc_param(&k, UNI, DIMS(2, 3, 4));
            gc_op(&k, ops[i], 1, &x);
            gc_run(&k);
        }
        case_softmax(ops[i], 13, -1);
        case_softmax(ops[i], 13, 1);
        case_softmax(ops[i], 13, 0);
        case_softmax(ops[i], 11, 1);
        case_softmax(ops[i], 11, 2);
        case_softmax(ops[i], 11, 0);
    }
}

static void case_loss(const char *op, const char *reduction, int rank, const int64_t *dims, int weights, int ignore,
                      int log_prob) {
    gc_case k;
    char sd[64];
    if (!gc_begin(&k, 13, "%s%s reduction=%s%s%s%s", op, vp_shape_str(rank, dims, sd, sizeof sd), reduction,
                  weights ? " weights" : "", ignore ? " ignore_index=1" : "", log_prob ? " log_prob in the loss" : ""))
        return;
    int64_t ldims[VP_MAX_RANK], labels[64];
    int lrank = 0;
    for (int d = 0; d < rank; d++)
        if (d != 1) ldims[lrank++] = dims[d];
    int64_t n = numel(lrank, ldims);
    for (int64_t i = 0; i < n; i++) labels[i] = (int64_t)(vp_rng_next(&k.rng) % (uint64_t)dims[1]);
    labels[0] = 1;         /* one ignored entry at least when ignore_index is set */
    if (ignore && n > 2) { /* two ignored, one counted at least: a mean over none is NaN */
        labels[n - 1] = 1;
        labels[1] = 0;
    }
    int in[3] = {gc_param(&k, UNI, rank, dims), vp_build_const(k.g, "labels", VP_I64, lrank, ldims, labels), -1};
    if (weights) in[2] = gc_const(&k, POS, 1, dims + 1);
    int y[2];
    int node = gc_node(&k, op, "", weights ? 3 : 2, in, log_prob ? 2 : 1, y);
    attr_s(&k, node, "reduction", reduction);
    if (ignore) attr_i(&k, node, "ignore_index", 1);
    gc_loss_on(&k, y[0]);
    if (log_prob) gc_loss_on(&k, y[1]);
    gc_run(&k);
}

static void cases_loss(void) {
    static const char *ops[2] = {"SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"};
    for (int i = 0; i < 2; i++) {
        case_loss(ops[i], "mean", DIMS(4, 3), 0, 0, 0);
        case_loss(ops[i], "sum", DIMS(4, 3), 0, 0, 0);
        case_loss(ops[i], "none", DIMS(4, 3), 0, 0, 0);
        case_loss(ops[i], "mean", DIMS(4, 5), 1, 0, 0);
        case_loss(ops[i], "mean", DIMS(4, 5), 1, 1, 0);
        case_loss(ops[i], "mean", DIMS(4, 5), 0, 1, 0);
        case_loss(ops[i], "sum", DIMS(2, 3, 4), 0, 1, 0);
        case_loss(ops[i], "none", DIMS(2, 3, 2, 2), 1, 0, 0);
        case_loss(ops[i], "none", DIMS(2, 3, 2, 2), 1, 1, 0);
    }
    case_loss(ops[0], "mean", DIMS(4, 3), 0, 0, 1);
}

/* A unary op at its kinks, with PyTorch's gradient there (the loss is sum(y)). */
static void case_kink(const char *op, const char *attr, double attr_v, int n, const double *x, const double *want) {
    gc_case k;
    if (!gc_begin(&k, 14, "%s at its kinks, as PyTorch", op)) return;
    int p = gc_param(&k, UNI, 1, (int64_t[]){n});
    set_values(&k, p, n, x);
    int node = gc_op(&k, op, 1, &p);
    if (attr) attr_f(&k, node, attr, attr_v);
    k.expect[0] = want;
    gc_run(&k);
}

static void cases_kinks(void) {
    case_kink("Relu", NULL, 0, 3, (double[]){0, -1, 2}, (double[]){0, 0, 1});
    case_kink("Abs", NULL, 0, 3, (double[]){0, -2, 3}, (double[]){0, -1, 1});
    case_kink("LeakyRelu", "alpha", 0.25, 3, (double[]){0, -1, 1}, (double[]){0.25, 0.25, 1});
    case_kink("HardSwish", NULL, 0, 4, (double[]){-3, 3, -4, 4}, (double[]){-0.5, 1.5, 0, 1});
    case_kink("Shrink", "lambd", 0.5, 3, (double[]){-0.5, 0.5, 1}, (double[]){0, 0, 1});
    gc_case k;
    if (gc_begin(&k, 13, "Clip at its bounds, as PyTorch (1 on [min, max])")) {
        int p = gc_param(&k, UNI, 1, (int64_t[]){4});
        set_values(&k, p, 4, (double[]){-0.5, 0.5, -1, 1});
        gc_op(&k, "Clip", 3, (int[]){p, gc_scalar(&k, -0.5), gc_scalar(&k, 0.5)});
        k.expect[0] = (double[]){1, 1, 0, 0};
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "Max ties split evenly, as torch.maximum")) {
        int a = gc_param(&k, UNI, 1, (int64_t[]){2}), b = gc_param(&k, UNI, 1, (int64_t[]){2});
        set_values(&k, a, 2, (double[]){1, 2});
        set_values(&k, b, 2, (double[]){1, 3});
        gc_op(&k, "Max", 2, (int[]){a, b});
        k.expect[0] = (double[]){0.5, 0};
        k.expect[1] = (double[]){0.5, 1};
        gc_run(&k);
    }
    if (gc_begin(&k, 18, "ReduceMax ties split evenly, as torch.amax")) {
        int p = gc_param(&k, UNI, 1, (int64_t[]){4});
        set_values(&k, p, 4, (double[]){1, 3, 3, 2});
        attr_i(&k, gc_op(&k, "ReduceMax", 1, &p), "keepdims", 0);
        k.expect[0] = (double[]){0, 0.5, 0.5, 0};
        gc_run(&k);
    }
}

/* Variants the rules refuse (with VP_ERR_UNSUPPORTED), never differentiate wrongly. */
static void cases_refused(void) {
    gc_case k;
    if (gc_begin(&k, 13, "refused: Pad mode=reflect")) {
        int x = gc_param(&k, UNI, DIMS(3, 4));
        attr_s(&k, gc_op(&k, "Pad", 2, (int[]){x, gc_ints(&k, 4, (int64_t[]){1, 1, 1, 1})}), "mode", "reflect");
        k.refusal = "mode 'reflect' has no gradient rule";
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "refused: trainable SoftmaxCrossEntropyLoss weights")) {
        int64_t labels[4] = {0, 2, 1, 2};
        int in[3] = {gc_param(&k, UNI, DIMS(4, 3)), vp_build_const(k.g, "l", VP_I64, 1, (int64_t[]){4}, labels),
                     gc_param(&k, POS, DIMS(3))};
        gc_op(&k, "SoftmaxCrossEntropyLoss", 3, in);
        k.refusal = "class weights";
        gc_run(&k);
    }
    if (gc_begin(&k, 17, "refused: LayerNormalization Mean output in the loss")) {
        int in[2] = {gc_param(&k, UNI, DIMS(2, 3)), gc_param(&k, POS, DIMS(3))}, y[3];
        gc_node(&k, "LayerNormalization", "", 2, in, 3, y);
        gc_loss_on(&k, y[0]);
        gc_loss_on(&k, y[1]);
        k.refusal = "only Y has a gradient rule";
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "refused: MaxPool storage_order=1")) {
        int x = gc_param(&k, DISTINCT, DIMS(1, 1, 4, 4));
        int n = gc_op(&k, "MaxPool", 1, &x);
        attr_is(&k, n, "kernel_shape", 2, (int64_t[]){2, 2});
        attr_i(&k, n, "storage_order", 1);
        k.refusal = "storage_order";
        gc_run(&k);
    }
}

static void run_all(void) {
    cases_arith();
    cases_unary();
    cases_clip();
    cases_select();
    cases_dropout();
    cases_reshape();
    cases_concat_split();
    cases_slice();
    cases_gather();
    cases_scatter();
    cases_pad();
    cases_matmul();
    cases_gemm();
    cases_conv();
    cases_conv_transpose();
    cases_pool();
    cases_norm();
    cases_reduce();
    cases_softmax();
    cases_loss();
    cases_kinks();
    cases_refused();
}

int main(int argc, char **argv) {
    g_filter = argc > 1 ? argv[1] : NULL;
    static const vp_dtype passes[] = {VP_F64, VP_F32, VP_F16, VP_BF16};
    for (size_t p = 0; p < sizeof passes / sizeof *passes; p++) {
        g_pass = passes[p];
        for (g_reference = g_pass != VP_F64; g_reference >= 0; g_reference--) {
            g_counter = 0;
            run_all();
        }
    }
    for (int i = 0; i < MAX_CASES; i++)
        for (int j = 0; j < g_refs[i].n; j++) free(g_refs[i].grad[j]);
    printf("%d passed, %d failed\n", g_passed, g_failed);
    fflush(stdout);
    return g_failed ? 1 : 0;
}
