/* The training step against PyTorch (models/<name>/fixtures, made by models/make_models.py):
 * the loss and the gradient of every parameter on one batch (float32, within 1e-4
 * relative), and 5-step loss curves of SGD with momentum and of AdamW (within 1e-4). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "backend.h"
#include "cpu_host.h"
#include "cpu_util.h"
#include "exec.h"
#include "model_util.h"


/* Worst |a-b| / (|b| + scale) over the tensor, scale = the largest |b|: a relative error
 * that does not blow up on near-zero entries of a gradient. */
static double rel_error(const vp_tensor *a, const vp_tensor *b) {
    int64_t n = vp_tensor_numel(b);
    double scale = 0, worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = fabs(vp_load(b->data, b->dtype, i));
        if (x > scale) scale = x;
    }
    for (int64_t i = 0; i < n; i++) {
        double d = fabs(vp_load(a->data, a->dtype, i) - vp_load(b->data, b->dtype, i));
        double r = d / (fabs(vp_load(b->data, b->dtype, i)) + scale + 1e-30);
        if (r > worst) worst = r;
    }
    return worst;
}


static void check_gradients(const char *name) {
    test_model m;
    vp_error err;
    vp_train_spec spec;
    memset(&spec, 0, sizeof spec);
    vp_loss_parse("ce:logits", &spec.loss, &err);
    spec.no_optimizer = 1;
    vp_backend *b = vp_backend_cpu_new();
    vp_exec *x = NULL;
    vp_status s = test_model_load(&m, name, &spec, &err);
    if (!s) s = vp_exec_new(m.g, b, &x, &err);
    if (!s) s = test_model_feed(x, &m, &err);
    if (!s) s = vp_exec_run(x, &err);
    if (s) {
        check(0, "%s gradients: %s", name, err.msg);
        goto done;
    }
    vp_tensor loss = {0}, want = {0};
    s = vp_exec_get(x, m.t.loss, &loss, &err);
    if (!s) s = test_model_fixture(&m, "loss.pb", &want, &err);
    if (s) check(0, "%s loss: %s", name, err.msg);
    else {
        double l = vp_load(loss.data, loss.dtype, 0), w = vp_load(want.data, want.dtype, 0);
        check(fabs(l - w) <= 1e-4 * fabs(w), "%s loss %.7f, torch %.7f", name, l, w);
    }
    free(loss.data);
    free(want.data);
    double worst = 0;
    const char *worst_name = "";
    int bad = 0;
    for (int i = 0; i < m.t.n_params; i++) {
        const char *pname = m.g->values[m.t.params[i]].name;
        char file[600];
        snprintf(file, sizeof file, "grads/%s.pb", pname);
        vp_tensor got = {0}, ref = {0};
        if (m.t.grads[i] < 0) {
            check(0, "%s: parameter '%s' got no gradient", name, pname);
            continue;
        }
        s = vp_exec_get(x, m.t.grads[i], &got, &err);
        if (!s) s = test_model_fixture(&m, file, &ref, &err);
        if (s) {
            check(0, "%s gradient of '%s': %s", name, pname, err.msg);
            bad++;
        } else {
            double r = rel_error(&got, &ref);
            if (r > worst) {
                worst = r;
                worst_name = pname;
            }
            if (!(r <= 1e-4)) {
                check(0, "%s gradient of '%s': relative error %.3g", name, pname, r);
                bad++;
            }
        }
        free(got.data);
        free(ref.data);
    }
    if (!bad) check(1, "%s: gradients of all %d parameters match torch (worst %.2g, '%s')", name, m.t.n_params, worst, worst_name);
done:
    vp_exec_free(x);
    vp_backend_free(b);
    test_model_free(&m);
}

static void check_curve(const char *name, const char *fixture) {
    char path[4200];
    snprintf(path, sizeof path, "%s/models/%s/fixtures/%s", VP_SOURCE_DIR, name, fixture);
    mj *curve = mj_parse_file(path);
    if (!curve) {
        check(0, "%s: cannot read %s", name, path);
        return;
    }
    vp_error err;
    vp_train_spec spec;
    memset(&spec, 0, sizeof spec);
    vp_loss_parse("ce:logits", &spec.loss, &err);
    const mj *opt = mj_get(curve, "optimizer"), *losses = mj_get(curve, "losses");
    vp_opt_parse(opt && !strcmp(opt->str, "adamw") ? "adamw" : "momentum", &spec.opt, &err);
    const mj *v;
    if ((v = mj_get(curve, "lr"))) spec.opt.lr = v->num;
    if ((v = mj_get(curve, "momentum"))) spec.opt.momentum = v->num;
    if ((v = mj_get(curve, "weight_decay"))) spec.opt.weight_decay = v->num;
    if ((v = mj_get(curve, "eps"))) spec.opt.eps = v->num;
    if ((v = mj_get(curve, "betas")) && v->n == 2) {
        spec.opt.beta1 = v->items[0].num;
        spec.opt.beta2 = v->items[1].num;
    }
    test_model m;
    vp_backend *b = vp_backend_cpu_new();
    vp_exec *x = NULL;
    vp_status s = test_model_load(&m, name, &spec, &err);
    if (!s) s = vp_exec_new(m.g, b, &x, &err);
    if (!s) s = test_model_feed(x, &m, &err);
    double worst = 0, got[16] = {0};
    int steps = losses ? (losses->n < 16 ? losses->n : 16) : 0;
    if (!s) s = test_model_run_steps(x, &m, steps, got, &err);
    for (int k = 0; k < steps && !s; k++) worst = fmax(worst, fabs(got[k] - losses->items[k].num));
    if (s) check(0, "%s %s: %s", name, fixture, err.msg);
    else
        check(worst <= 1e-4, "%s %s: %d steps, losses %.6f .. %.6f, worst difference from torch %.2g", name, fixture, steps,
              got[0], got[steps - 1], worst);
    vp_exec_free(x);
    vp_backend_free(b);
    test_model_free(&m);
    mj_free(curve);
}

int main(void) {
    vp_cpu_host_install();
    char names[32][64];
    int n = test_model_list(names, 32);
    for (int i = 0; i < n; i++) {
        check_gradients(names[i]);
        check_curve(names[i], "train_sgd_momentum.json");
        check_curve(names[i], "train_adamw.json");
    }
    return check_summary();
}
