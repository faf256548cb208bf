/* test_cuda_ops' models group: the training step of every model in models/ (forward,
 * loss, backward, optimizer) on the CUDA backend against the CPU reference, every value
 * any node computes compared, then the loss curves against the PyTorch fixtures, as
 * test_training does on the CPU.  Results go to cuda_ops_report (test_cuda_ops.c).
 * Tolerance: fp32 steps' values 1e-4 of the value's own scale (long chains; Adam's
 * updates 2 lr); bf16 and fp16 steps node by node, each value within one ulp of its
 * dtype plus float32's reassociation allowance (lowp_compare.h); losses 1e-4 from torch. */
#ifdef VP_HAVE_CUDA
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cpu_util.h"
#include "cuda_backend.h"
#include "cuda_ops_cases.h"
#include "exec.h"
#include "lowp_compare.h"
#include "mini_json.h"
#include "model_util.h"

/* max |a - b| over the reference's largest magnitude. */
static double scaled_error(const vp_tensor *a, const vp_tensor *b) {
    int64_t n = vp_tensor_numel(b);
    double scale = 0, worst = 0;
    for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(vp_load(b->data, b->dtype, i)));
    for (int64_t i = 0; i < n; i++) {
        double x = vp_load(a->data, a->dtype, i), y = vp_load(b->data, b->dtype, i);
        double e = isnan(x) != isnan(y) ? INFINITY : fabs(x - y) / (scale > 1e-6 ? scale : 1e-6);
        if (e > worst) worst = e;
    }
    return worst;
}

static vp_status load_for_curve(const char *name, const char *fixture, vp_precision prec, test_model *m, mj **curve,
                                vp_error *err) {
    char path[4200];
    snprintf(path, sizeof path, "%s/models/%s/fixtures/%s", VP_SOURCE_DIR, name, fixture);
    *curve = mj_parse_file(path);
    if (!*curve) return vp_fail(err, VP_ERR_IO, "cannot read %s", path);
    vp_train_spec spec;
    memset(&spec, 0, sizeof spec);
    spec.precision = prec;
    vp_loss_parse("ce:logits", &spec.loss, err);
    const mj *opt = mj_get(*curve, "optimizer"), *v;
    vp_opt_parse(opt && !strcmp(opt->str, "adamw") ? "adamw" : "momentum", &spec.opt, err);
    if ((v = mj_get(*curve, "lr"))) spec.opt.lr = v->num;
    if ((v = mj_get(*curve, "momentum"))) spec.opt.momentum = v->num;
    if ((v = mj_get(*curve, "weight_decay"))) spec.opt.weight_decay = v->num;
    if ((v = mj_get(*curve, "eps"))) spec.opt.eps = v->num;
    if ((v = mj_get(*curve, "betas")) && v->n == 2) {
        spec.opt.beta1 = v->items[0].num;
        spec.opt.beta2 = v->items[1].num;
    }
    return test_model_load(m, name, &spec, err);
}

/* Compares one value the two backends computed; 1 when within its bound.  A float32
 * value of a whole step carries the chain before it: 1e-4 of its scale (Adam's updates
 * aside, below).  A value one kernel computed from the same inputs is held to
 * lowp_compare's bound in its own dtype, float32 included, and a bfloat16 or float16
 * value's bound is proven tight by a mutation of two ulps, counted in *caught / *mutated. */
static int value_within(const vp_node *n, const vp_tensor *a, const vp_tensor *b,
                        int node_local, double *err_out, int *mutated, int *caught, char *why, size_t why_size) {
    int64_t at = 0;
    if (!vp_dtype_is_float(b->dtype)) {
        for (int64_t j = 0; j < vp_tensor_numel(b); j++)
            if (vp_load(a->data, a->dtype, j) != vp_load(b->data, b->dtype, j)) {
                snprintf(why, why_size, "element %lld: %.9g against %.9g", (long long)j, vp_load(a->data, a->dtype, j),
                         vp_load(b->data, b->dtype, j));
                *err_out = INFINITY;
                return 0;
            }
        *err_out = 0;
        return 1;
    }
    if (node_local) {
        double e = lowp_compare(a, b, 1, LOWP_ACC_F32, &at);
        *err_out = e;
        if (e < 0 || e > 1) {
            snprintf(why, why_size, "element %lld: %.9g against %.9g, %.3g of its bound (1 %s ulp + 2^-16 of the scale)",
                     (long long)at, vp_load(a->data, a->dtype, at), vp_load(b->data, b->dtype, at), e,
                     vp_dtype_name(b->dtype));
            return 0;
        }
        /* float32 values' allowance is 256 of their ulps: the mutation proves the bound
         * of the low-precision ones */
        int c = b->dtype == VP_F32 ? -1 : lowp_mutation_caught(a, b, 1, LOWP_ACC_F32);
        if (c >= 0) (*mutated)++;
        if (c > 0) (*caught)++;
        return 1;
    }
    double e = scaled_error(a, b), tol = 1e-4;
    /* Adam divides by sqrt(v): a gradient that is zero up to rounding (an attention key
     * bias) moves its parameter by up to lr either way, so its updates are held to lr,
     * not to the parameter's scale */
    if (!strcmp(n->op_type, "Adam")) {
        double scale = 0;
        for (int64_t j = 0; j < vp_tensor_numel(b); j++) scale = fmax(scale, fabs(vp_load(b->data, b->dtype, j)));
        tol = fmax(tol, 2.0 * vp_attr_float(n, "lr", 0) / (scale > 1e-6 ? scale : 1e-6));
    }
    *err_out = e <= 1e-4 ? e : 0; /* Adam's aside is not the step's largest error */
    if (e > tol) snprintf(why, why_size, "error %.3g of its scale", e);
    return e <= tol;
}

/* One step on both backends; every value a node computed, in node order.
 * fp32: each backend runs the whole step and the values are compared as they come
 * (a chain of a few hundred kernels; 1e-4 of each value's scale).
 * bf16 and fp16: the CPU runs the whole step, and the CUDA backend runs each node alone
 * on the CPU's values of its inputs, so that a rounding one kernel made does not become
 * another's input: each value is then held in ulps of its own dtype (lowp_compare.h),
 * and a two-ulp mutation of each must fail. */
void cuda_ops_check_model_values(const char *name, const char *fixture, vp_precision prec, vp_backend *cpu,
                                 vp_backend *cuda) {
    char label[160];
    snprintf(label, sizeof label, "%.50s_%.50s_%s_values", name, fixture, vp_precision_name(prec));
    int node_local = prec != VP_PRECISION_FP32;
    test_model m;
    mj *curve = NULL;
    vp_error err = {{0}};
    vp_exec *xc = NULL, *xg = NULL;
    vp_status s = load_for_curve(name, fixture, prec, &m, &curve, &err);
    int loaded = !s;
    if (!s) s = vp_exec_new(m.g, cpu, &xc, &err);
    if (!s) s = vp_exec_new(m.g, cuda, &xg, &err);
    if (!s) s = test_model_feed(xc, &m, &err);
    if (!s) s = test_model_feed(xg, &m, &err);
    if (!s) s = vp_exec_run(xc, &err);
    if (!s) vp_backend_cuda_set_graph(cuda, m.g);
    if (!s && !node_local) s = vp_exec_run(xg, &err);
    char detail[1400] = "";
    int ok = !s, values = 0, mutated = 0, caught = 0;
    double worst = 0;
    char worst_at[160] = "-";
    if (s) snprintf(detail, sizeof detail, "%.1300s", err.msg);
    for (int i = 0; ok && i < m.g->n_nodes; i++) {
        const vp_node *n = &m.g->nodes[i];
        if (n->folded) continue;
        for (int k = 0; node_local && k < n->n_inputs && !s; k++) {
            vp_tensor in = {0};
            if (n->inputs[k] < 0) continue;
            s = vp_exec_get(xc, n->inputs[k], &in, &err);
            if (!s) s = vp_exec_write_value(xg, n->inputs[k], in.data, &err);
            free(in.data);
        }
        if (node_local && !s) s = vp_exec_run_node(xg, i, &err);
        if (s) {
            ok = 0;
            snprintf(detail, sizeof detail, "node %d '%s' (%s): %.1200s", i, n->name, n->op_type, err.msg);
        }
        for (int k = 0; k < n->n_outputs && ok; k++) {
            int v = n->outputs[k];
            if (v < 0) continue;
            vp_tensor a = {0}, b = {0};
            s = vp_exec_get(xg, v, &a, &err);
            if (!s) s = vp_exec_get(xc, v, &b, &err);
            char why[400] = "";
            double e = 0;
            if (s) {
                ok = 0;
                snprintf(detail, sizeof detail, "%.1300s", err.msg);
            } else if (!value_within(n, &a, &b, node_local, &e, &mutated, &caught, why, sizeof why)) {
                ok = 0;
                snprintf(detail, sizeof detail, "node %d '%s' (%s) output %d '%s': %s", i, n->name, n->op_type, k,
                         m.g->values[v].name, why);
            } else {
                values++;
                if (e > worst) {
                    worst = e;
                    snprintf(worst_at, sizeof worst_at, "%.100s (%s)", m.g->values[v].name, n->op_type);
                }
            }
            free(a.data);
            free(b.data);
        }
    }
    vp_backend_cuda_set_graph(cuda, NULL);
    if (ok && node_local && caught < mutated) {
        ok = 0;
        snprintf(detail, sizeof detail, "a two-ulp mutation passed the bound on %d of %d values", mutated - caught, mutated);
    } else if (ok && node_local)
        snprintf(detail, sizeof detail,
                 "%d values node by node, largest %.3g of its bound (%s); two-ulp mutations caught on %d of %d", values,
                 worst, worst_at, caught, mutated);
    else if (ok)
        snprintf(detail, sizeof detail, "%d values, largest error %.3g of their scale (%s)", values, worst, worst_at);
    cuda_ops_report("models", label, ok, detail);
    vp_exec_free(xc);
    vp_exec_free(xg);
    if (loaded) test_model_free(&m);
    mj_free(curve);
}

void cuda_ops_check_model_curve(const char *name, const char *fixture, vp_backend *cuda) {
    char label[160];
    snprintf(label, sizeof label, "%.60s_%.60s_curve", name, fixture);
    test_model m;
    mj *curve = NULL;
    vp_error err = {{0}};
    vp_exec *x = NULL;
    vp_status s = load_for_curve(name, fixture, VP_PRECISION_FP32, &m, &curve, &err);
    int loaded = !s;
    if (!s) s = vp_exec_new(m.g, cuda, &x, &err);
    if (!s) s = test_model_feed(x, &m, &err);
    const mj *losses = curve ? mj_get(curve, "losses") : NULL;
    int steps = losses ? (losses->n < 16 ? losses->n : 16) : 0;
    double worst = 0, got[16] = {0};
    if (!s) vp_backend_cuda_set_graph(cuda, m.g);
    if (!s) s = test_model_run_steps(x, &m, steps, got, &err);
    for (int k = 0; k < steps && !s; k++) worst = fmax(worst, fabs(got[k] - losses->items[k].num));
    vp_backend_cuda_set_graph(cuda, NULL);
    char detail[1200];
    if (s) snprintf(detail, sizeof detail, "%.1100s", err.msg);
    else
        snprintf(detail, sizeof detail, "%d steps, losses %.6f .. %.6f, worst difference from torch %.2g", steps, got[0],
                 got[steps ? steps - 1 : 0], worst);
    cuda_ops_report("models", label, !s && steps > 0 && worst <= 1e-4, detail);
    vp_exec_free(x);
    if (loaded) test_model_free(&m);
    mj_free(curve);
}
#endif
