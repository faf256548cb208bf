/* torch.onnx exports of recurrent classifiers train as PyTorch does.
 *
 * Data: tests/data/rnn/<model>, made by tools/scripts/make_rnn_models.py: a 2-layer
 * bidirectional batch-first LSTM and a 2-layer GRU from a trained initial state, each
 * last hidden state -> Linear -> logits, at opsets 13 and 17.  Checks per model:
 * - the training step builds, trains exactly torch's parameters, warns of nothing, and
 *   both recurrent nodes run in their training form (vplan.LSTMTraining/GRUTraining),
 *   which the cost model charges for its gate products;
 * - the output and the loss at the initial parameters match torch within 1e-5 relative,
 *   every parameter gradient within 1e-4 of the tensor's largest magnitude, and the
 *   losses of all three SGD steps within 1e-5;
 * - the plan verifies and runs three steps bit-identically to naive execution, and so
 *   does a sqrtn-checkpointed plan that recomputes the recurrent nodes. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "check.h"
#include "cpu_util.h"
#include "exec.h"
#include "ir/infer.h"
#include "memory/plan.h"
#include "memory/verify.h"
#include "model_util.h"
#include "onnx/onnx_load.h"
#include "onnx/tensor_proto.h"
#include "remat/cost.h"
#include "remat/remat.h"
#include "train/training.h"

#define DATA VP_SOURCE_DIR "/tests/data/rnn"

/* max |got - want| / max |want|: relative to the tensor's scale, so gradients near zero
 * (whose float32 sums differ in the last bits) do not count as large errors. */
static double rel_error(const vp_tensor *got, const vp_tensor *want) {
    if (vp_tensor_numel(got) != vp_tensor_numel(want)) return INFINITY;
    double worst = 0, scale = 0;
    for (int64_t e = 0; e < vp_tensor_numel(want); e++) {
        double w = vp_load(want->data, want->dtype, e);
        scale = fmax(scale, fabs(w));
        worst = fmax(worst, fabs(vp_load(got->data, got->dtype, e) - w));
    }
    return scale > 0 ? worst / scale : worst;
}

static int value_named(const vp_graph *g, const char *name) {
    for (int v = 0; v < g->n_values; v++)
        if (!strcmp(g->values[v].name, name)) return v;
    return -1;
}

static vp_status load(test_model *m, const char *name, vp_error *err) {
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "%.63s", name);
    snprintf(m->dir, sizeof m->dir, "%s/%s", DATA, name);
    char path[4200];
    snprintf(path, sizeof path, "%s/meta.json", m->dir);
    m->meta = mj_parse_file(path);
    if (!m->meta) return vp_fail(err, VP_ERR_IO, "%s: cannot read", path);
    vp_train_spec spec;
    memset(&spec, 0, sizeof spec);
    vp_loss_parse("ce:logits", &spec.loss, err);
    vp_opt_parse("sgd", &spec.opt, err);
    spec.opt.lr = mj_get(m->meta, "lr")->num;
    vp_dim_binding batch = {"batch", (int64_t)mj_get(mj_get(m->meta, "dims"), "batch")->num};
    snprintf(path, sizeof path, "%s/model.onnx", m->dir);
    vp_status s = vp_onnx_load(path, &m->g, err);
    if (!s) s = vp_bind_dims(m->g, &batch, 1, err);
    if (!s) s = vp_infer(m->g, NULL, NULL, err);
    return s ? s : vp_training_build(m->g, &spec, &m->t, err);
}

static void check_structure(test_model *m) {
    const mj *params = mj_get(m->meta, "params");
    int named = 0;
    for (int i = 0; i < params->n; i++)
        for (int p = 0; p < m->t.n_params; p++) named += !strcmp(m->g->values[m->t.params[p]].name, params->items[i].str);
    check(named == params->n && m->t.n_params == params->n && !m->t.warning[0],
          "%s: trains torch's %d parameters (%d found, %d trainable) without warnings%s%s", m->name, params->n, named,
          m->t.n_params, m->t.warning[0] ? ": " : "", m->t.warning);
    const char *op = mj_get(m->meta, "op")->str;
    char training[32];
    snprintf(training, sizeof training, "%sTraining", op);
    int plain = 0, trained = 0, costed = 0;
    for (int i = 0; i < m->g->n_nodes; i++) {
        const vp_node *n = &m->g->nodes[i];
        plain += !strcmp(n->op_type, op);
        if (strcmp(n->op_type, training) || strcmp(n->domain, "vplan")) continue;
        trained++;
        /* the cost model charges the gate products: 2 * steps * batch * D * G*H * (I + H) */
        const vp_value *x = &m->g->values[n->inputs[0]], *r = &m->g->values[n->inputs[2]];
        double products = 2.0 * (double)(x->dims[0] * x->dims[1]) * (double)(r->dims[0] * r->dims[1]) *
                          (double)(x->dims[2] + r->dims[2]);
        costed += vp_cost_node(m->g, n).flops >= products;
    }
    check(costed == trained, "%s: the cost model charges %d of %d %s nodes their gate products", m->name, costed, trained,
          training);
    check(trained == 2 && plain == 0, "%s: %d %s nodes trained as vplan.%s (%d left plain)", m->name, trained, op, training,
          plain);
}

static vp_status compare_fixture(test_model *m, vp_exec *x, int v, const char *file, double *worst, vp_error *err) {
    vp_tensor got = {0}, want = {0};
    vp_status s = vp_exec_get(x, v, &got, err);
    if (!s) s = test_model_fixture(m, file, &want, err);
    if (!s) *worst = fmax(*worst, rel_error(&got, &want));
    free(got.data);
    free(want.data);
    return s;
}

static void check_against_torch(test_model *m) {
    vp_error err = {{0}};
    vp_backend *b = vp_backend_cpu_new();
    vp_exec *x = NULL;
    vp_tensor losses = {0};
    double out_err = 0, grad_err = 0, loss_err = 0;
    vp_status s = vp_exec_new(m->g, b, &x, &err);
    if (!s) s = test_model_feed(x, m, &err);
    if (!s) s = test_model_fixture(m, "losses.pb", &losses, &err);
    for (int64_t step = 0; !s && step < vp_tensor_numel(&losses); step++) {
        vp_tensor loss = {0};
        s = vp_exec_run(x, &err);
        if (!s) s = vp_exec_get(x, m->t.loss, &loss, &err);
        if (!s) loss_err = fmax(loss_err, fabs(vp_load(loss.data, loss.dtype, 0) - ((float *)losses.data)[step]) /
                                              fabs(((float *)losses.data)[step]));
        free(loss.data);
        if (!s && step == 0) {
            s = compare_fixture(m, x, value_named(m->g, "logits"), "logits.pb", &out_err, &err);
            for (int p = 0; !s && p < m->t.n_params; p++) {
                char file[300];
                snprintf(file, sizeof file, "grads/%.200s.pb", m->g->values[m->t.params[p]].name);
                s = compare_fixture(m, x, m->t.grads[p], file, &grad_err, &err);
            }
        }
        for (int c = 0; c < m->t.n_carry && !s; c++) s = vp_exec_copy_value(x, m->t.carry[c].from, m->t.carry[c].to, &err);
    }
    if (s) check(0, "%s: %s", m->name, err.msg);
    else check(out_err <= 1e-5 && grad_err <= 1e-4 && loss_err <= 1e-5,
               "%s: logits (%.1e), %d gradients (worst %.1e) and %lld steps' losses (%.1e) match torch", m->name, out_err,
               m->t.n_params, grad_err, (long long)vp_tensor_numel(&losses), loss_err);
    free(losses.data);
    vp_exec_free(x);
    vp_backend_free(b);
}

static void check_planned(test_model *m) {
    vp_plan p;
    vp_error err = {{0}};
    vp_verify_report rep;
    char why[1024];
    vp_status s = vp_plan_build(&p, m->g, &m->t, vp_device_find("cpu"), 1, &err);
    if (!s) s = vp_plan_verify(&p, &rep, &err);
    if (s) {
        check(0, "%s plan: %s", m->name, err.msg);
        return;
    }
    int r = test_compare_planned(m, &p, 3, m->t.params, m->t.n_params, why, sizeof why);
    check(r == 1, "%s: the plan verifies and runs 3 steps bit-identically to naive execution%s%s", m->name,
          r == 1 ? "" : ": ", r == 1 ? "" : why);
    vp_plan_free(&p);
}

/* sqrtn checkpointing recomputes the recurrent nodes' training forms in the backward:
 * the plan must stay sound and bit-identical to the naive step. */
static void check_remat(test_model *m) {
    vp_error err = {{0}};
    vp_plan p;
    memset(&p, 0, sizeof p);
    vp_graph *planned = NULL;
    vp_remat_result r;
    vp_status s = vp_plan_with_remat(m->g, &m->t, vp_device_find("cpu"), 1, 1, VP_REMAT_SQRTN, &planned, &p, &r, &err);
    if (s) {
        check(0, "%s sqrtn: %s", m->name, err.msg);
        return;
    }
    char training[32], why[1024];
    snprintf(training, sizeof training, "%sTraining", mj_get(m->meta, "op")->str);
    int recomputed = 0;
    for (int i = 0; i < planned->n_nodes; i++)
        recomputed += planned->nodes[i].phase == VP_PHASE_RECOMPUTE && !strcmp(planned->nodes[i].op_type, training);
    vp_verify_report rep;
    vp_status vs = vp_plan_verify(&p, &rep, &err);
    int same = vs ? 0 : test_compare_planned(m, &p, 2, m->t.params, m->t.n_params, why, sizeof why);
    check(!vs && same == 1 && recomputed > 0, "%s sqrtn: %d recompute nodes (%d of them %s), %s, %s", m->name, r.n_recompute,
          recomputed, training, vs ? err.msg : "sound", same == 1 ? "bit-identical to naive" : why);
    vp_plan_free(&p);
    if (planned != m->g) vp_graph_free(planned);
}

static int by_name(const void *a, const void *b) { return strcmp(a, b); }

int main(void) {
    char names[32][64];
    int n = 0;
    DIR *d = opendir(DATA);
    struct dirent *e;
    while (d && (e = readdir(d)) && n < 32)
        if (e->d_name[0] != '.') snprintf(names[n++], 64, "%.63s", e->d_name);
    if (d) closedir(d);
    qsort(names, (size_t)n, sizeof names[0], by_name);
    check(n >= 4, "%d exported models found in %s", n, DATA);
    for (int i = 0; i < n; i++) {
        test_model m;
        vp_error err = {{0}};
        vp_status s = load(&m, names[i], &err);
        if (s) check(0, "%s: %s", names[i], err.msg);
        else {
            check_structure(&m);
            check_against_torch(&m);
            check_planned(&m);
            check_remat(&m);
        }
        test_model_free(&m);
    }
    return check_summary();
}
