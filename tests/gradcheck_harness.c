/* The gradient check's harness (gradcheck_harness.h): each case is a tiny graph of
 * initializers (the trainable parameters, random from a seeded generator), one op under
 * test, and the scalar loss L = sum_k ReduceSum(y_k * R_k) over chosen outputs y_k,
 * with R_k random constants.
 *
 * In the float64 pass, vp_training_build (no optimizer) differentiates it; the naive
 * CPU executor computes the gradients; each is compared, element by element, with the
 * five-point central difference
 *     (-L(x+2h) + 8 L(x+h) - 8 L(x-h) + L(x-2h)) / (12 h),   h = 1e-5,
 * evaluated by rerunning the same graph with the parameter overwritten.  Its truncation
 * error is O(h^4) (~1e-20) and its rounding error about eps |L| / h (~1e-10 for the
 * |L| ~ 10 of these cases), so the error measure
 *     |analytic - numeric| / max(|analytic|, |numeric|, 1e-3)
 * must stay under 1e-6: relative for gradients of normal size, and 1e-9 absolute for
 * gradients near zero, where relative error means nothing.  Cases at kinks compare
 * with exact gradients instead (gc_case.expect), with the loss sum(y).
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
 * for float16 (eps 5e-4; seen 1e-3), 5e-2 for bfloat16 (eps 4e-3; seen 1.3e-2). */
#include "gradcheck_harness.h"

#include <assert.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cpu_util.h"
#include "exec.h"
#include "ir/graph_build.h"
#include "ir/infer.h"
#include "train/training.h"

#define FD_STEP 1e-5
#define TOLERANCE 1e-6      /* float64 against finite differences */
#define TOLERANCE_F32 2e-6  /* float32 against float64 */
#define TOLERANCE_F16 1e-2  /* float16 against float64 */
#define TOLERANCE_BF16 5e-2 /* bfloat16 against float64 */
#define FLOOR 1e-3
#define HALF_FLOOR 1.0 /* the normwise scale's floor in half-precision passes */

const gen UNI = {GEN_UNIFORM, -1, 1}, AWAY = {GEN_AWAY, -1, 1}, DISTINCT = {GEN_DISTINCT, -1, 1},
          POS = {GEN_UNIFORM, 0.5, 2}, ONES = {GEN_UNIFORM, 1, 1}, HARD = {GEN_DISTINCT, -4.5, 4.5},
          HALF = {GEN_UNIFORM, -0.9, 0.9}, ABOVE1 = {GEN_UNIFORM, 1.2, 3};

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

vp_dtype gc_dtype(void) { return g_pass; }
int gc_is_reference(void) { return g_reference; }

/* ---- building a case ---- */

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

int64_t gc_numel(int rank, const int64_t *dims) {
    int64_t n = 1;
    for (int d = 0; d < rank; d++) n *= dims[d];
    return n;
}

/* Starts a case; returns 0 (and builds nothing) when the filter skips it. */
int gc_begin(gc_case *k, int opset, const char *fmt, ...) {
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
    unsigned char tmp[8] = {0}; /* a dtype vp_store does not write reads as zero */
    vp_store(tmp, dt, 0, x);
    vp_store(p, st, i, vp_load(tmp, dt, 0));
}

/* Random values drawn in float64, rounded to dt and stored as stored(dt) (heap). */
static void *random_data(gc_case *k, vp_dtype dt, gen ge, int rank, const int64_t *dims) {
    int64_t n = gc_numel(rank, dims);
    double *p = malloc((size_t)(n ? n : 1) * sizeof *p);
    void *out = malloc((size_t)(n ? n : 1) * vp_dtype_size(stored(dt)));
    fill(&k->rng, ge, p, n);
    for (int64_t i = 0; i < n; i++) store_rounded(out, stored(dt), dt, i, p[i]);
    free(p);
    return out;
}

/* An initializer of the pass's dtype: a trainable parameter. */
int gc_param(gc_case *k, gen ge, int rank, const int64_t *dims) {
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

int gc_const(gc_case *k, gen ge, int rank, const int64_t *dims) {
    return gc_const_of(k, g_pass, ge, rank, dims);
}

int gc_scalar(gc_case *k, double x) {
    unsigned char buf[8];
    store_rounded(buf, stored(g_pass), g_pass, 0, x);
    return vp_build_const(k->g, "s", stored(g_pass), 0, NULL, buf);
}

int gc_ints(gc_case *k, int n, const int64_t *v) {
    int64_t dims[1] = {n};
    return vp_build_const(k->g, "i", VP_I64, 1, dims, v);
}

int gc_bools(gc_case *k, int rank, const int64_t *dims, const unsigned char *v) {
    return vp_build_const(k->g, "b", VP_BOOL, rank, dims, v);
}

int gc_bool(gc_case *k, int v) {
    unsigned char b = (unsigned char)v;
    return vp_build_const(k->g, "b", VP_BOOL, 0, NULL, &b);
}

/* The op under test; out receives its n_out output ids. */
int gc_node(gc_case *k, const char *op, const char *domain, int n_in, const int *in, int n_out, int *out) {
    enum { MAX_OUTS = 64 };
    int outs[MAX_OUTS];
    if (n_out > MAX_OUTS) return -1;
    for (int j = 0; j < n_out; j++) {
        char name[64];
        snprintf(name, sizeof name, "y%d", j);
        outs[j] = vp_graph_add_unique_value(k->g, name);
        if (out) out[j] = outs[j];
    }
    return vp_graph_add_node(k->g, op, domain, "op", n_in, in, n_out, outs);
}

void gc_loss_on(gc_case *k, int v) {
    assert(k->n_loss < (int)(sizeof k->loss_from / sizeof k->loss_from[0]) && "a case sums at most 16 values into its loss");
    k->loss_from[k->n_loss++] = v;
}

/* The op's output 0 goes into the loss: the common one-output case. */
int gc_op(gc_case *k, const char *op, int n_in, const int *in) {
    int y;
    int node = gc_node(k, op, "", n_in, in, 1, &y);
    gc_loss_on(k, y);
    return node;
}

void attr_i(gc_case *k, int node, const char *name, int64_t v) { vp_node_add_attr_int(k->g, node, name, v); }
void attr_f(gc_case *k, int node, const char *name, double v) {
    vp_node_add_attr_float(k->g, node, name, (float)v);
}
void attr_is(gc_case *k, int node, const char *name, int n, const int64_t *v) {
    vp_node_add_attr_ints(k->g, node, name, v, n);
}
void attr_s(gc_case *k, int node, const char *name, const char *s) {
    vp_node_add_attr_string(k->g, node, name, s);
}

/* Sets parameter p's values (already drawn) to v, in the pass's storage dtype. */
void gc_set_values(gc_case *k, int p, int n, const double *v) {
    vp_value *x = &k->g->values[p];
    for (int i = 0; i < n; i++) vp_store(x->data, x->dtype, i, v[i]);
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
void gc_run(gc_case *k) {
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

int gc_check_all(const char *filter, void (*cases)(void)) {
    g_filter = filter;
    static const vp_dtype passes[] = {VP_F64, VP_F32, VP_F16, VP_BF16};
    for (size_t p = 0; p < sizeof passes / sizeof *passes; p++) {
        g_pass = passes[p];
        for (g_reference = g_pass != VP_F64; g_reference >= 0; g_reference--) {
            g_counter = 0;
            cases();
        }
    }
    for (int i = 0; i < MAX_CASES; i++)
        for (int j = 0; j < g_refs[i].n; j++) free(g_refs[i].grad[j]);
    printf("%d passed, %d failed\n", g_passed, g_failed);
    fflush(stdout);
    return g_failed ? 1 : 0;
}
