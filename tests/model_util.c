#include "model_util.h"

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
#include "onnx/onnx_load.h"
#include "onnx/tensor_proto.h"
#include "pipeline/pipeline.h"
#include "plan_exec.h"
#include "remat/remat.h"
#include "train/training.h"

#define MODELS VP_SOURCE_DIR "/models"

static int cmp_name(const void *a, const void *b) { return strcmp(a, b); }

int test_model_list_in(const char *dir, char names[][64], int max) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < max) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s/meta.json", dir, e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        fclose(f);
        snprintf(names[n++], 64, "%.63s", e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, 64, cmp_name);
    return n;
}

int test_model_list(char names[][64], int max) { return test_model_list_in(MODELS, names, max); }

vp_status test_model_load(test_model *m, const char *name, vp_train_spec *spec, vp_error *err) {
    return test_model_load_in(m, MODELS, name, spec, err);
}

/* What the pipeline needs to build dir/<name> (meta read, dims[8] filled from it; with a
 * spec, its freeze set to the model's buffers); *po then runs until the caller's stage. */
static vp_status model_opts(test_model *m, const char *dir, const char *name, vp_train_spec *spec, vp_dim_binding *dims,
                            char *path, size_t path_len, vp_pipeline_opts *po, vp_error *err) {
    memset(m, 0, sizeof *m);
    memset(po, 0, sizeof *po);
    snprintf(m->name, sizeof m->name, "%.63s", name);
    snprintf(m->dir, sizeof m->dir, "%s/%s", dir, name);
    snprintf(path, path_len, "%s/meta.json", m->dir);
    m->meta = mj_parse_file(path);
    if (!m->meta) return vp_fail(err, VP_ERR_IO, "%s: cannot read", path);
    snprintf(path, path_len, "%s/model.onnx", m->dir);
    po->model = path;
    po->dims = dims;
    const mj *md = mj_get(m->meta, "dims");
    for (int i = 0; md && i < md->n && po->n_dims < 8; i++)
        dims[po->n_dims++] = (vp_dim_binding){md->items[i].key, (int64_t)md->items[i].num};
    po->until = spec ? VP_PIPELINE_TRAIN : VP_PIPELINE_INFER;
    po->spec = spec;
    if (!spec) return VP_OK;
    /* torch buffers are not parameters: freeze them by name */
    const mj *bufs = mj_get(m->meta, "buffers");
    size_t used = (size_t)snprintf(m->freeze, sizeof m->freeze, "^(");
    for (int i = 0; bufs && i < bufs->n && used < sizeof m->freeze; i++)
        used += (size_t)snprintf(m->freeze + used, sizeof m->freeze - used, "%s%s", i ? "|" : "", bufs->items[i].str);
    if (used < sizeof m->freeze) snprintf(m->freeze + used, sizeof m->freeze - used, ")$");
    spec->freeze = bufs && bufs->n ? m->freeze : NULL;
    return VP_OK;
}

/* Runs po, handing the graph and the step to m (and the plan to pl when planning). */
static vp_status model_run(test_model *m, const vp_pipeline_opts *po, test_planned *pl, vp_error *err) {
    vp_pipeline_result r;
    vp_status s = vp_pipeline_run(po, &r, err);
    m->g = r.g;
    m->t = r.t;
    if (pl) {
        pl->g = r.planned;
        pl->p = r.p;
    } else {
        vp_plan_free(&r.p);
    }
    return s;
}

vp_status test_model_load_in(test_model *m, const char *dir, const char *name, vp_train_spec *spec, vp_error *err) {
    vp_dim_binding dims[8];
    char path[4200];
    vp_pipeline_opts po;
    vp_status s = model_opts(m, dir, name, spec, dims, path, sizeof path, &po, err);
    return s ? s : model_run(m, &po, NULL, err);
}

void test_model_free(test_model *m) {
    vp_training_free(&m->t);
    vp_graph_free(m->g);
    mj_free(m->meta);
    memset(m, 0, sizeof *m);
}

vp_status test_model_carry(vp_exec *x, const test_model *m, vp_error *err) {
    vp_status s = VP_OK;
    for (int c = 0; c < m->t.n_carry && !s; c++) s = vp_exec_copy_value(x, m->t.carry[c].from, m->t.carry[c].to, err);
    return s;
}

vp_status test_model_loss(vp_exec *x, const test_model *m, double *loss, vp_error *err) {
    vp_tensor l = {0};
    vp_status s = vp_exec_get(x, m->t.loss, &l, err);
    if (!s) *loss = vp_load(l.data, l.dtype, 0);
    free(l.data);
    return s;
}

vp_status test_model_run_steps(vp_exec *x, const test_model *m, int steps, double *losses, vp_error *err) {
    vp_status s = VP_OK;
    for (int k = 0; k < steps && !s; k++) {
        s = vp_exec_run(x, err);
        if (!s) s = test_model_loss(x, m, &losses[k], err);
        if (!s) s = test_model_carry(x, m, err);
    }
    return s;
}

vp_status test_model_fixture(const test_model *m, const char *file, vp_tensor *out, vp_error *err) {
    char path[4200];
    snprintf(path, sizeof path, "%s/fixtures/%s", m->dir, file);
    return vp_tensor_read_pb(path, out, NULL, err);
}

static int same_bits(const vp_tensor *a, const vp_tensor *b) {
    return vp_tensor_nbytes(a) == vp_tensor_nbytes(b) && !memcmp(a->data, b->data, vp_tensor_nbytes(a));
}

int test_compare_planned(test_model *m, const struct vp_plan *p, int steps, const int *ids, int n_ids, char *why,
                         size_t why_len) {
    vp_error err;
    const mj *in = mj_get(m->meta, "input");
    const char *xname = in ? in->str : "x";
    vp_tensor x = {0}, labels = {0};
    vp_backend *b = vp_backend_cpu_new();
    vp_exec *nx = NULL;
    vp_plan_exec *px = NULL;
    int identical = 1;
    why[0] = 0;
    vp_status s = test_model_fixture(m, "x.pb", &x, &err);
    if (!s) s = test_model_fixture(m, "labels.pb", &labels, &err);
    if (!s) s = vp_exec_new(m->g, b, &nx, &err);
    if (!s) s = vp_plan_exec_new(p, b, &px, &err);
    if (!s) s = vp_exec_set_input(nx, xname, &x, &err);
    if (!s) s = vp_exec_set_input(nx, "labels", &labels, &err);
    for (int k = 0; k < steps && !s; k++) {
        s = vp_plan_exec_set_input(px, xname, &x, &err);
        if (!s) s = vp_plan_exec_set_input(px, "labels", &labels, &err);
        if (!s) s = vp_exec_run(nx, &err);
        if (!s) s = vp_plan_exec_run(px, &err);
        vp_tensor l1 = {0}, l2 = {0};
        if (!s) s = vp_exec_get(nx, m->t.loss, &l1, &err);
        if (!s) s = vp_plan_exec_get(px, m->t.loss, &l2, &err);
        if (!s && identical && !same_bits(&l1, &l2)) {
            identical = 0;
            snprintf(why, why_len, "the loss of step %d differs", k + 1);
        }
        free(l1.data);
        free(l2.data);
        for (int c = 0; c < m->t.n_carry && !s; c++) s = vp_exec_copy_value(nx, m->t.carry[c].from, m->t.carry[c].to, &err);
    }
    for (int i = 0; i < n_ids && !s; i++) {
        vp_tensor a = {0}, c = {0};
        s = vp_exec_get(nx, ids[i], &a, &err);
        if (!s) s = vp_plan_exec_get(px, ids[i], &c, &err);
        if (!s && identical && !same_bits(&a, &c)) {
            identical = 0;
            snprintf(why, why_len, "'%s' differs", m->g->values[ids[i]].name);
        }
        free(a.data);
        free(c.data);
    }
    if (s) snprintf(why, why_len, "%s", err.msg);
    vp_exec_free(nx);
    vp_plan_exec_free(px);
    vp_backend_free(b);
    free(x.data);
    free(labels.data);
    return s ? -1 : identical;
}

int test_plan_losses(const test_model *m, const struct vp_plan *p, vp_backend *b, int steps, double *losses, char *why,
                     size_t why_len) {
    vp_error err;
    const mj *in = mj_get(m->meta, "input");
    vp_tensor x = {0}, labels = {0};
    vp_plan_exec *px = NULL;
    vp_status s = p->loss_buffer >= 0 ? VP_OK : vp_fail(&err, VP_ERR_USAGE, "the plan has no loss");
    if (!s) s = test_model_fixture(m, "x.pb", &x, &err);
    if (!s) s = test_model_fixture(m, "labels.pb", &labels, &err);
    if (!s) s = vp_plan_exec_new(p, b, &px, &err);
    for (int k = 0; k < steps && !s; k++) {
        s = vp_plan_exec_set_input(px, in ? in->str : "x", &x, &err);
        if (!s) s = vp_plan_exec_set_input(px, "labels", &labels, &err);
        if (!s) s = vp_plan_exec_run(px, &err);
        vp_tensor l = {0};
        if (!s) s = vp_plan_exec_get(px, p->buffers[p->loss_buffer].value, &l, &err);
        if (!s) losses[k] = l.dtype == VP_F64 ? *(double *)l.data : *(float *)l.data;
        free(l.data);
    }
    if (s) snprintf(why, why_len, "%s", err.msg);
    vp_plan_exec_free(px);
    free(x.data);
    free(labels.data);
    return s ? -1 : 0;
}

vp_status test_model_load_step(test_model *m, const char *name, const char *opt, vp_error *err) {
    vp_train_spec spec;
    memset(&spec, 0, sizeof spec);
    vp_status s = vp_loss_parse("ce:logits", &spec.loss, err);
    if (!s) s = vp_opt_parse(opt, &spec.opt, err);
    if (s) {
        memset(m, 0, sizeof *m);
        return s;
    }
    return test_model_load(m, name, &spec, err);
}

vp_status test_model_feed(vp_exec *x, const test_model *m, vp_error *err) {
    const mj *in = mj_get(m->meta, "input");
    vp_tensor xin = {0}, labels = {0};
    vp_status s = test_model_fixture(m, "x.pb", &xin, err);
    if (!s) s = test_model_fixture(m, "labels.pb", &labels, err);
    if (!s) s = vp_exec_set_input(x, in ? in->str : "x", &xin, err);
    if (!s) s = vp_exec_set_input(x, "labels", &labels, err);
    free(xin.data);
    free(labels.data);
    return s;
}

/* ---- torch.onnx exports with fixtures beside them (tests/data/<set>/<name>) ---- */

/* max |got - want| / max |want|: relative to the tensor's scale, so gradients near zero
 * (whose float32 sums differ in the last bits) do not count as large errors. */
double test_rel_error(const vp_tensor *got, const vp_tensor *want) {
    if (vp_tensor_numel(got) != vp_tensor_numel(want)) return INFINITY;
    double worst = 0, scale = 0;
    for (int64_t e = 0; e < vp_tensor_numel(want); e++) {
        double w = vp_load(want->data, want->dtype, e);
        scale = fmax(scale, fabs(w));
        worst = fmax(worst, fabs(vp_load(got->data, got->dtype, e) - w));
    }
    return scale > 0 ? worst / scale : worst;
}

int test_value_named(const vp_graph *g, const char *name) {
    for (int v = 0; v < g->n_values; v++)
        if (!strcmp(g->values[v].name, name)) return v;
    return -1;
}

vp_status test_model_load_fixture_dir(test_model *m, const char *data_dir, const char *name, vp_error *err) {
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "%.63s", name);
    snprintf(m->dir, sizeof m->dir, "%s/%s", data_dir, name);
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
    vp_pipeline_opts po = {.model = path, .dims = &batch, .n_dims = 1, .until = VP_PIPELINE_TRAIN, .spec = &spec};
    return model_run(m, &po, NULL, err);
}

static vp_status compare_fixture(test_model *m, vp_exec *x, int v, const char *file, double *worst, vp_error *err) {
    vp_tensor got = {0}, want = {0};
    vp_status s = vp_exec_get(x, v, &got, err);
    if (!s) s = test_model_fixture(m, file, &want, err);
    if (!s) *worst = fmax(*worst, test_rel_error(&got, &want));
    free(got.data);
    free(want.data);
    return s;
}

void test_model_check_torch(test_model *m, double grad_tol) {
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
            s = compare_fixture(m, x, test_value_named(m->g, "logits"), "logits.pb", &out_err, &err);
            for (int p = 0; !s && p < m->t.n_params; p++) {
                char file[300];
                snprintf(file, sizeof file, "grads/%.200s.pb", m->g->values[m->t.params[p]].name);
                s = compare_fixture(m, x, m->t.grads[p], file, &grad_err, &err);
            }
        }
        if (!s) s = test_model_carry(x, m, &err);
    }
    if (s) check(0, "%s: %s", m->name, err.msg);
    else check(out_err <= 1e-5 && grad_err <= grad_tol && loss_err <= 1e-5,
               "%s: logits (%.1e), %d gradients (worst %.1e) and %lld steps' losses (%.1e) match torch", m->name, out_err,
               m->t.n_params, grad_err, (long long)vp_tensor_numel(&losses), loss_err);
    free(losses.data);
    vp_exec_free(x);
    vp_backend_free(b);
}

void test_model_check_planned(test_model *m, int steps) {
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
    int r = test_compare_planned(m, &p, steps, m->t.params, m->t.n_params, why, sizeof why);
    check(r == 1, "%s: the plan verifies and runs %d steps bit-identically to naive execution%s%s", m->name, steps,
          r == 1 ? "" : ": ", r == 1 ? "" : why);
    vp_plan_free(&p);
}

int test_model_each_fixture(const char *data_dir, int at_least, void (*each)(test_model *m)) {
    char names[32][64];
    int n = test_model_list_in(data_dir, names, 32);
    check(n >= at_least, "%d exported models found in %s", n, data_dir);
    for (int i = 0; i < n; i++) {
        test_model m;
        vp_error err = {{0}};
        vp_status s = test_model_load_fixture_dir(&m, data_dir, names[i], &err);
        if (s) check(0, "%s: %s", names[i], err.msg);
        else each(&m);
        test_model_free(&m);
    }
    return check_summary();
}

void test_model_check_params(test_model *m) {
    const mj *params = mj_get(m->meta, "params");
    int named = 0;
    for (int i = 0; i < params->n; i++)
        for (int p = 0; p < m->t.n_params; p++) named += !strcmp(m->g->values[m->t.params[p]].name, params->items[i].str);
    check(named == params->n && m->t.n_params == params->n && !m->t.warning[0],
          "%s: trains torch's %d parameters (%d found, %d trainable) without warnings%s%s", m->name, params->n, named,
          m->t.n_params, m->t.warning[0] ? ": " : "", m->t.warning);
}

vp_status test_model_plan(test_planned *pl, const char *name, const char *opt, int offload, const char *device,
                          vp_error *err) {
    memset(pl, 0, sizeof *pl);
    vp_train_spec spec;
    memset(&spec, 0, sizeof spec);
    vp_status s = vp_loss_parse("ce:logits", &spec.loss, err);
    if (!s) s = vp_opt_parse(opt, &spec.opt, err);
    spec.offload = offload;
    return s ? s : test_model_plan_in(pl, MODELS, name, &spec, vp_device_find(device), 1, 0, VP_REMAT_NONE, err);
}

vp_status test_model_plan_in(test_planned *pl, const char *dir, const char *name, vp_train_spec *spec,
                             const vp_device_profile *dev, int fused, int64_t budget, vp_remat_kind remat, vp_error *err) {
    memset(pl, 0, sizeof *pl);
    vp_dim_binding dims[8];
    char path[4200];
    vp_pipeline_opts po;
    vp_status s = model_opts(&pl->m, dir, name, spec, dims, path, sizeof path, &po, err);
    po.until = VP_PIPELINE_PLAN;
    po.device = dev;
    po.fused_update = fused;
    po.budget = budget;
    po.remat = remat;
    return s ? s : model_run(&pl->m, &po, pl, err);
}

void test_planned_free(test_planned *pl) {
    vp_plan_free(&pl->p);
    if (pl->g && pl->g != pl->m.g) vp_graph_free(pl->g);
    test_model_free(&pl->m);
}

int test_f32_initializer(vp_graph *g, int id, int rank, const int64_t *dims, float **data) {
    vp_value *v = &g->values[id];
    v->dtype = VP_F32;
    v->rank = rank;
    memcpy(v->dims, dims, (size_t)rank * sizeof *dims);
    v->flags |= VP_VAL_INITIALIZER;
    int64_t n = vp_value_numel(v);
    *data = malloc((size_t)(n ? n : 1) * sizeof **data);
    vp_value_set_data(g, id, *data, VP_DATA_HEAP);
    return id;
}

vp_status test_plan_step_remat(vp_graph *g, const vp_training *t, const vp_device_profile *dev, int fused,
                               int64_t budget, vp_remat_kind kind, const vp_remat_opts *opts, vp_graph **planned,
                               vp_plan *p, vp_remat_result *rr, vp_error *err) {
    vp_pipeline_result r; /* borrows g and t: only the plan stage's products are moved out */
    memset(&r, 0, sizeof r);
    r.g = g;
    r.t = *t;
    vp_pipeline_opts o = {.device = dev, .fused_update = fused, .budget = budget, .remat = kind, .remat_opts = opts,
                          .until = VP_PIPELINE_PLAN};
    vp_status s = vp_pipeline_plan(&o, &r, err);
    *p = r.p;
    *planned = r.planned ? r.planned : g;
    if (rr) *rr = r.remat;
    return s;
}

vp_status test_plan_step(vp_graph *g, const vp_training *t, const vp_device_profile *dev, int fused, vp_plan *p,
                         vp_error *err) {
    vp_graph *planned = NULL;
    vp_status s = test_plan_step_remat(g, t, dev, fused, 0, VP_REMAT_NONE, NULL, &planned, p, NULL, err);
    if (planned && planned != g) vp_graph_free(planned); /* none without checkpointing; for safety */
    return s;
}
