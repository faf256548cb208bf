/* LoRA adapters (planner/train/lora.h) on the bundled mlp (Gemm, transB=1), GPT
 * (FusedMatMul of a transposed weight) and CNN (its Convs: A a convolution like the
 * weight's to r channels, B a 1x1 one back; and its Gemm): the trainable set is the adapters alone, r(in +
 * out) parameters each; the gradients through them agree with central differences of
 * the loss; adapters written with vp_onnx_save_tensors load back to the same step; and
 * the base model with each weight replaced by W + scale B A (computed here, apart from
 * vp_lora_merge) gives the adapted model's logits. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "check.h"
#include "cpu_host.h"
#include "cpu_util.h"
#include "exec.h"
#include "model_util.h"
#include "onnx_save.h"

static vp_train_spec lora_spec(const char *opt, int r, double alpha, const char *load) {
    vp_train_spec spec;
    memset(&spec, 0, sizeof spec);
    vp_error err;
    if (vp_loss_parse("ce:logits", &spec.loss, &err) || vp_opt_parse(opt, &spec.opt, &err)) abort();
    spec.lora = (vp_lora_opts){r, alpha, NULL, load};
    return spec;
}

/* Runs steps steps of m's step, carrying state; *loss gets the last loss, logits (may be
 * NULL) the last logits. */
static vp_status run_steps(test_model *m, vp_exec *x, int steps, double *loss, vp_tensor *logits, vp_error *err) {
    vp_status s = test_model_feed(x, m, err);
    for (int k = 0; k < steps && !s; k++) {
        s = vp_exec_run(x, err);
        vp_tensor l = {0};
        if (!s) s = vp_exec_get(x, m->t.loss, &l, err);
        if (!s) *loss = vp_load(l.data, l.dtype, 0);
        free(l.data);
        if (!s && logits && k == steps - 1) s = vp_exec_get(x, test_value_named(m->g, "logits"), logits, err);
        for (int c = 0; c < m->t.n_carry && !s && k < steps - 1; c++)
            s = vp_exec_copy_value(x, m->t.carry[c].from, m->t.carry[c].to, err);
    }
    return s;
}

static void check_counts(const char *name) {
    test_model m;
    vp_error err;
    vp_train_spec spec = lora_spec("adam", 4, 8, NULL);
    if (test_model_load(&m, name, &spec, &err)) {
        check(0, "%s: build with --lora: %s", name, err.msg);
        test_model_free(&m);
        return;
    }
    const vp_lora_result *r = &m.t.lora;
    int64_t want = 0, got = 0;
    int ok = m.t.n_params == 2 * r->n && r->n > 0;
    for (int i = 0; i < r->n; i++) {
        const vp_lora_adapter *ad = &r->adapters[i];
        want += 4 * (ad->in + ad->out);
        got += vp_value_numel(&m.g->values[ad->a]) + vp_value_numel(&m.g->values[ad->b]);
        ok &= !(m.g->values[ad->weight].flags & VP_VAL_PARAM);
    }
    /* Adam: each adapter carries itself and three state values; nothing else is carried
     * but BatchNorm's running statistics (the CNN's), which train in any case */
    int running = 0;
    for (int c = 0; c < m.t.n_carry; c++) running += strstr(m.g->values[m.t.carry[c].from].name, ".running_") != NULL;
    int state_ok = m.t.n_carry == 4 * m.t.n_params + running;
    check(ok && got == want && want == r->params && state_ok,
          "%s: %d adapted weights, %lld adapter parameters = sum r(in+out) = %lld; base weights frozen; %d carried values",
          name, r->n, (long long)got, (long long)want, m.t.n_carry);
    /* a Conv's adapters: A [r, C, k...] with the weight's kernel, B [O, r, 1...] */
    int convs = 0, conv_ok = 1;
    for (int i = 0; i < r->n; i++) {
        const vp_value *w = &m.g->values[r->adapters[i].weight], *a = &m.g->values[r->adapters[i].a],
                       *b = &m.g->values[r->adapters[i].b];
        if (w->rank < 3) continue;
        convs++;
        conv_ok &= a->rank == w->rank && b->rank == w->rank && a->dims[0] == 4 && b->dims[0] == w->dims[0] && b->dims[1] == 4;
        for (int d = 1; d < w->rank; d++) conv_ok &= a->dims[d] == w->dims[d] && (d < 2 || b->dims[d] == 1);
    }
    if (!strcmp(name, "cnn"))
        check(convs > 0 && conv_ok, "%s: %d Conv weights adapted, A [4, C, kh, kw] and B [O, 4, 1, 1]", name, convs);
    test_model_free(&m);
}

/* d loss / d adapter against central differences of the float32 loss, B away from zero. */
static void check_gradients(const char *name) {
    test_model m;
    vp_error err;
    vp_train_spec spec = lora_spec("sgd", 3, 6, NULL);
    spec.no_optimizer = 1;
    vp_status s = test_model_load(&m, name, &spec, &err);
    vp_backend *b = vp_backend_cpu_new_with(1);
    vp_exec *x = NULL;
    uint64_t seed = 7;
    for (int i = 0; !s && i < m.t.lora.n; i++) { /* B = 0 would make every d/dA zero */
        vp_value *bv = &m.g->values[m.t.lora.adapters[i].b];
        float *d = bv->data;
        for (int64_t k = 0; k < vp_value_numel(bv); k++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            d[k] = (float)((double)(seed >> 40) / (double)(1ull << 24) - 0.5) * 0.5f;
        }
    }
    if (!s) s = vp_exec_new(m.g, b, &x, &err);
    double loss0 = 0, worst = 0;
    int checked = 0;
    if (!s) s = run_steps(&m, x, 1, &loss0, NULL, &err);
    for (int p = 0; p < m.t.n_params && !s; p++) {
        vp_tensor gr = {0};
        s = vp_exec_get(x, m.t.grads[p], &gr, &err);
        int v = m.t.params[p];
        float *w = m.g->values[v].data;
        int64_t n = vp_value_numel(&m.g->values[v]);
        double gmax = 1e-6;
        for (int64_t k = 0; k < n; k++) gmax = fmax(gmax, fabs(((float *)gr.data)[k]));
        for (int64_t k = 0; k < n && !s; k += n / 5 + 1) {
            /* two step sizes: a ReLU kink within one of them spoils that difference only */
            const float hs[2] = {2e-3f, 5e-4f}, w0 = w[k];
            double an = ((float *)gr.data)[k], best = INFINITY;
            for (int j = 0; j < 2 && !s; j++) {
                double lp = 0, lm = 0;
                w[k] = w0 + hs[j];
                s = vp_exec_write_value(x, v, w, &err);
                if (!s) s = run_steps(&m, x, 1, &lp, NULL, &err);
                w[k] = w0 - hs[j];
                if (!s) s = vp_exec_write_value(x, v, w, &err);
                if (!s) s = run_steps(&m, x, 1, &lm, NULL, &err);
                w[k] = w0;
                if (!s) s = vp_exec_write_value(x, v, w, &err);
                best = fmin(best, fabs((lp - lm) / (2.0 * hs[j]) - an) / gmax);
            }
            worst = fmax(worst, best);
            checked++;
        }
        free(gr.data);
    }
    check(!s && checked > 0 && worst < 2e-2, "%s: %d adapter gradients against central differences: worst error %.2g of the largest",
          name, checked, worst);
    if (s) printf("  %s\n", err.msg);
    vp_exec_free(x);
    vp_backend_free(b);
    test_model_free(&m);
}

/* Trains adapters, saves them, reloads them, and compares with the merged base model. */
static void check_save_merge(const char *name) {
    char path[256];
    snprintf(path, sizeof path, "%s/test_lora_%s.onnx", VP_BINARY_DIR, name);
    test_model a, re, base;
    memset(&re, 0, sizeof re);
    memset(&base, 0, sizeof base);
    vp_error err;
    vp_train_spec spec = lora_spec("adam", 4, 8, NULL);
    spec.opt.lr = 0.05;
    vp_status s = test_model_load(&a, name, &spec, &err);
    vp_backend *b = vp_backend_cpu_new_with(1);
    vp_exec *x = NULL, *xr = NULL, *xb = NULL;
    double l_a = 0, l_re = 0, l_base = 0, merge_err = 0;
    vp_tensor lg_a = {0}, lg_re = {0}, lg_base = {0};
    if (!s) s = vp_exec_new(a.g, b, &x, &err);
    /* four steps: the fourth loss is that of the weights after three updates */
    if (!s) s = run_steps(&a, x, 4, &l_a, &lg_a, &err);
    int n = a.t.lora.n;
    const char **names = calloc((size_t)(2 * n + 1), sizeof *names);
    vp_tensor *vals = calloc((size_t)(2 * n + 1), sizeof *vals);
    /* the adapters as they were read by the fourth step (before its update) are the
     * carried values' sources: the step's own inputs */
    for (int i = 0; i < 2 * n && !s; i++) {
        int v = i % 2 ? a.t.lora.adapters[i / 2].b : a.t.lora.adapters[i / 2].a;
        names[i] = a.g->values[v].name;
        s = vp_exec_get(x, v, &vals[i], &err);
    }
    if (!s) s = vp_onnx_save_tensors(path, 2 * n, names, vals, 0, NULL, NULL, &err);
    vp_train_spec rspec = lora_spec("adam", 4, 8, path);
    if (!s) s = test_model_load(&re, name, &rspec, &err);
    if (!s) s = vp_exec_new(re.g, b, &xr, &err);
    if (!s) s = run_steps(&re, xr, 1, &l_re, &lg_re, &err);
    /* the base model with each adapted weight merged by hand */
    if (!s) s = test_model_load(&base, name, NULL, &err);
    double scale = 8.0 / 4.0;
    for (int i = 0; i < n && !s; i++) {
        const vp_lora_adapter *ad = &a.t.lora.adapters[i];
        int w = test_value_named(base.g, a.g->values[ad->weight].name);
        const float *W = a.g->values[ad->weight].data, *A = vals[2 * i].data, *B = vals[2 * i + 1].data;
        float *mw = malloc((size_t)(ad->out * ad->in) * sizeof *mw), *via = malloc((size_t)(ad->out * ad->in) * sizeof *via);
        if (!ad->transposed || w < 0 || !mw || !via) s = vp_fail(&err, VP_ERR_INVALID, "unexpected adapter layout");
        for (int64_t o = 0; !s && o < ad->out; o++) /* W [out, in] + scale B [out, r] A [r, in] */
            for (int64_t k = 0; k < ad->in; k++) {
                double acc = 0;
                for (int j = 0; j < 4; j++) acc += (double)B[o * 4 + j] * A[j * ad->in + k];
                mw[o * ad->in + k] = (float)(W[o * ad->in + k] + scale * acc);
            }
        if (!s) vp_lora_merge(ad, 4, scale, W, A, B, via);
        for (int64_t k = 0; !s && k < ad->out * ad->in; k++) merge_err = fmax(merge_err, fabs(mw[k] - via[k]));
        free(via);
        if (!s) vp_value_set_data(base.g, w, mw, VP_DATA_HEAP);
        else free(mw);
    }
    vp_train_spec bspec = lora_spec("adam", 0, 0, NULL);
    if (!s) s = vp_training_build(base.g, &bspec, &base.t, &err);
    if (!s) s = vp_exec_new(base.g, b, &xb, &err);
    if (!s) s = run_steps(&base, xb, 1, &l_base, &lg_base, &err);
    if (s) {
        check(0, "%s: save, reload and merge: %s", name, err.msg);
    } else {
        check(merge_err < 1e-6, "%s: vp_lora_merge equals W + scale B A (max difference %.2g)", name, merge_err);
        check(l_re == l_a && test_rel_error(&lg_re, &lg_a) == 0,
              "%s: reloaded adapters give the trained step's loss %.6f bit for bit", name, l_re);
        double e = test_rel_error(&lg_base, &lg_a);
        check(e < 1e-5 && fabs(l_base - l_a) < 1e-5 * fabs(l_a),
              "%s: merged model's loss %.6f against the adapted %.6f, logits within %.2g", name, l_base, l_a, e);
    }
    for (int i = 0; i < 2 * n && vals; i++) free(vals[i].data);
    free(vals);
    free(names);
    free(lg_a.data);
    free(lg_re.data);
    free(lg_base.data);
    vp_exec_free(x);
    vp_exec_free(xr);
    vp_exec_free(xb);
    vp_backend_free(b);
    test_model_free(&a);
    test_model_free(&re);
    test_model_free(&base);
    remove(path);
}

int main(void) {
    vp_cpu_host_install();
    const char *models[] = {"mlp", "gpt", "cnn"};
    for (int i = 0; i < 3; i++) {
        check_counts(models[i]);
        check_gradients(models[i]);
        check_save_merge(models[i]);
    }
    return check_summary();
}
