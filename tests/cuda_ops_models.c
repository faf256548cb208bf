/* test_cuda_ops' models group: the training step of every model in models/ (forward,
 * loss, backward, optimizer) on the CUDA backend against the CPU reference, every value
 * any node computes compared, then the loss curves against the PyTorch fixtures, as
 * test_training does on the CPU.  Results go to cuda_ops_report (test_cuda_ops.c).
 * Tolerance: model values 1e-4 of the value's own scale in fp32 (long chains),
 * LOWP_TOL in bf16/fp16; Adam's updates 2 lr; losses 1e-4 from torch. */
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
#include "mini_json.h"
#include "model_util.h"

/* bf16 and fp16 model values: one bfloat16 unit in the last place of the value's scale
 * (2^-8), where a product summed in another order rounds to the neighbour */
#define LOWP_TOL 4e-3

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

/* One step on both backends; every value a node computed, in node order.  Under bf16 or
 * fp16 the CPU runs the same low-precision graph: its values are held to LOWP_TOL of
 * their scale (see the cases' table in main). */
void cuda_ops_check_model_values(const char *name, const char *fixture, vp_precision prec, vp_backend *cpu,
                               vp_backend *cuda) {
    char label[160];
    snprintf(label, sizeof label, "%.50s_%.50s_%s_values", name, fixture, vp_precision_name(prec));
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
    if (!s) {
        vp_backend_cuda_set_graph(cuda, m.g);
        s = vp_exec_run(xg, &err);
        vp_backend_cuda_set_graph(cuda, NULL);
    }
    char detail[1400] = "";
    int ok = !s, values = 0;
    double worst = 0;
    char worst_at[160] = "-";
    if (s) snprintf(detail, sizeof detail, "%.1300s", err.msg);
    for (int i = 0; ok && i < m.g->n_nodes; i++) {
        const vp_node *n = &m.g->nodes[i];
        if (n->folded) continue;
        for (int k = 0; k < n->n_outputs && ok; k++) {
            int v = n->outputs[k];
            if (v < 0) continue;
            vp_tensor a = {0}, b = {0};
            s = vp_exec_get(xg, v, &a, &err);
            if (!s) s = vp_exec_get(xc, v, &b, &err);
            if (s) {
                ok = 0;
                snprintf(detail, sizeof detail, "%.1300s", err.msg);
            } else {
                int is_float = vp_dtype_is_float(b.dtype);
                double e = is_float ? scaled_error(&a, &b) : 0;
                if (!is_float)
                    for (int64_t j = 0; j < vp_tensor_numel(&b); j++)
                        if (vp_load(a.data, a.dtype, j) != vp_load(b.data, b.dtype, j)) e = INFINITY;
                values++;
                /* Adam divides by sqrt(v): a gradient that is zero up to rounding (an
                 * attention key bias) moves its parameter by up to lr either way, so
                 * its updates are held to lr, not to the parameter's scale (and so are
                 * fp16's skips of them, a Where over an Adam output) */
                double tol = prec == VP_PRECISION_FP32 ? 1e-4 : LOWP_TOL;
                const vp_node *adam = n;
                if (!strcmp(n->op_type, "Where") && n->n_inputs == 3 && n->inputs[1] >= 0 &&
                    m.g->values[n->inputs[1]].producer >= 0)
                    adam = &m.g->nodes[m.g->values[n->inputs[1]].producer];
                if (!strcmp(adam->op_type, "Adam") && is_float) {
                    double scale = 0;
                    for (int64_t j = 0; j < vp_tensor_numel(&b); j++) scale = fmax(scale, fabs(vp_load(b.data, b.dtype, j)));
                    tol = fmax(tol, 2.0 * vp_attr_float(adam, "lr", 0) / (scale > 1e-6 ? scale : 1e-6));
                }
                if (e > worst && e <= (prec == VP_PRECISION_FP32 ? 1e-4 : LOWP_TOL)) { /* Adam's aside */
                    worst = e;
                    snprintf(worst_at, sizeof worst_at, "%.100s (%s)", m.g->values[v].name, n->op_type);
                }
                if (e > tol) {
                    ok = 0;
                    snprintf(detail, sizeof detail, "node %d '%s' (%s) output %d '%s': error %.3g of its scale", i, n->name,
                             n->op_type, k, m.g->values[v].name, e);
                }
            }
            free(a.data);
            free(b.data);
        }
    }
    if (ok) snprintf(detail, sizeof detail, "%d values, largest error %.3g of their scale (%s)", values, worst, worst_at);
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
