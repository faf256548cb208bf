/* onnx-vplan train: build the training step and run it on the CPU backend (oneDNN, or --reference). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "cli.h"
#include "cli_data.h"
#include "cli_train.h"
#include "cpu_util.h"
#include "exec.h"
#include "json_writer.h"
#include "onnx_save.h"

static double seconds_since(const struct timespec *t0) {
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0->tv_nsec);
}

static vp_status write_json(const char *path, const vp_graph *g, const vp_training *t, const cli_train_opts *o,
                            const double *losses, const double *times, int steps, vp_error *err) {
    FILE *f = fopen(path, "w");
    if (!f) return vp_fail(err, VP_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    vp_json j;
    vp_json_init(&j, f, 1);
    vp_json_begin_object(&j);
    vp_json_key(&j, "model");
    vp_json_string(&j, g->path);
    vp_json_key(&j, "optimizer");
    vp_json_string(&j, vp_opt_name(o->spec.opt.kind));
    vp_json_key(&j, "lr");
    vp_json_double(&j, o->spec.opt.lr);
    vp_json_key(&j, "params");
    vp_json_int(&j, t->n_params);
    vp_json_key(&j, "losses");
    vp_json_begin_array(&j);
    for (int i = 0; i < steps; i++) vp_json_double(&j, losses[i]);
    vp_json_end_array(&j);
    vp_json_key(&j, "step_seconds");
    vp_json_begin_array(&j);
    for (int i = 0; i < steps; i++) vp_json_double(&j, times[i]);
    vp_json_end_array(&j);
    vp_json_end_object(&j);
    vp_json_finish(&j);
    if (fclose(f)) return vp_fail(err, VP_ERR_IO, "%s: write failed", path);
    return VP_OK;
}

/* Trained parameters and carried state whose names are initializers of the model. */
static vp_status save_model(const char *src, const char *dst, vp_exec *x, const vp_graph *g, const vp_training *t,
                            vp_error *err) {
    const char **names = calloc((size_t)t->n_carry + 1, sizeof *names);
    vp_tensor *vals = calloc((size_t)t->n_carry + 1, sizeof *vals);
    int n = 0;
    vp_status s = names && vals ? VP_OK : vp_fail(err, VP_ERR_NOMEM, "out of memory");
    for (int i = 0; i < t->n_carry && !s; i++) {
        const vp_value *v = &g->values[t->carry[i].from];
        if (!(v->flags & VP_VAL_INITIALIZER)) continue; /* optimizer state is not part of the model */
        s = vp_exec_get(x, t->carry[i].from, &vals[n], err);
        names[n++] = v->name;
    }
    if (!s) s = vp_onnx_save_initializers(src, dst, n, names, vals, err);
    for (int i = 0; i < n; i++) free(vals[i].data);
    free(vals);
    free(names);
    return s;
}

static int run_train(int argc, char **argv) {
    const char *model = NULL, *data = "synthetic", *json = NULL, *save = NULL;
    int64_t steps = 1, seed = 0;
    int reference = 0;
    cli_pairs dims = {0};
    cli_train_opts o;
    cli_train_init(&o);
    const cli_opt table[] = {
        {"MODEL", CLI_POS, &model, NULL, NULL},
        {"", CLI_TABLE, o.table, NULL, NULL},
        {"--steps", CLI_INT, &steps, "N", "training steps (default 1)"},
        {"--data", CLI_STR, &data, "synthetic|DIR",
         "one TensorProto per graph input, named after it (DIR/x.pb,\n"
         "DIR/labels.pb), fed every step; synthetic: seeded random\n"
         "inputs and in-range labels and token ids (default)"},
        {"--dim", CLI_DIM, &dims, "NAME=VALUE", "bind a symbolic dim (repeatable)"},
        {"--seed", CLI_INT, &seed, "N", "seed for synthetic data (default 0)"},
        {"--json", CLI_STR, &json, "FILE", "write {\"losses\": [...], ...}"},
        {"--save", CLI_STR, &save, "OUT.onnx",
         "write the model with the trained weights (and BatchNorm\n"
         "running statistics)"},
        {"--reference", CLI_SET, &reference, NULL,
         "run every step on the reference CPU kernels, not oneDNN\n"
         "(as VP_CPU_REFERENCE=1 does)"},
        {0}};
    int rc = cli_parse(&cli_cmd_train, table, argc, argv);
    if (rc != CLI_CONTINUE) return rc;
    vp_error err;
    vp_status s = cli_train_finish(&o, &err);
    if (!s && (steps < 1 || steps > 10000000)) s = vp_fail(&err, VP_ERR_USAGE, "--steps must be between 1 and 10000000");
    if (s) return cli_report(s, &err);

    vp_graph *g = NULL;
    vp_training t;
    memset(&t, 0, sizeof t);
    vp_backend *b = NULL;
    vp_exec *x = NULL;
    cli_batch batch = {0};
    double *losses = calloc((size_t)steps, sizeof *losses), *times = calloc((size_t)steps, sizeof *times);
    if (!losses || !times) s = vp_fail(&err, VP_ERR_NOMEM, "out of memory");
    int n_fwd = 0;
    if (!s) s = cli_build_step(model, &dims, &o.spec, &g, &t, &n_fwd, &err);
    if (!s) {
        int64_t elems = 0;
        for (int i = 0; i < t.n_params; i++) elems += vp_value_numel(&g->values[t.params[i]]);
        printf("training step: %d parameters (%lld elements), %d frozen; %d forward, %d loss, %d backward, %d optimizer nodes\n",
               t.n_params, (long long)elems, t.n_frozen, n_fwd, t.first_backward_node - t.first_loss_node,
               t.first_optimizer_node - t.first_backward_node, g->n_nodes - t.first_optimizer_node);
        char fusion[160];
        cli_fusion_summary(&t, fusion, sizeof fusion);
        if (fusion[0]) printf("%s\n", fusion);
        char prec[256];
        cli_precision_summary(&o.spec, &t, prec, sizeof prec);
        if (prec[0]) printf("%s\n", prec);
        if (t.n_unused) fprintf(stderr, "onnx-vplan: warning: the loss does not depend on %d trainable parameters\n", t.n_unused);
        b = vp_backend_cpu_new_with(reference || vp_backend_cpu_reference_env());
        s = b ? vp_exec_new(g, b, &x, &err) : vp_fail(&err, VP_ERR_NOMEM, "out of memory");
    }
    if (!s) s = cli_batch_load(g, data, (uint64_t)seed, t.label_classes, &batch, &err);
    if (!s) s = cli_batch_feed(x, g, &batch, &err);
    for (int64_t step = 0; step < steps && !s; step++) {
        struct timespec t0;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        s = vp_exec_run(x, &err);
        vp_tensor loss = {0};
        if (!s) s = vp_exec_get(x, t.loss, &loss, &err);
        if (!s) losses[step] = vp_load(loss.data, loss.dtype, 0);
        free(loss.data);
        for (int c = 0; c < t.n_carry && !s; c++) s = vp_exec_copy_value(x, t.carry[c].from, t.carry[c].to, &err);
        times[step] = seconds_since(&t0);
        if (!s) printf("step %lld  loss %.6f  (%.3f s)\n", (long long)step + 1, losses[step], times[step]);
        fflush(stdout);
    }
    if (!s && json) s = write_json(json, g, &t, &o, losses, times, (int)steps, &err);
    if (!s && save) {
        s = save_model(model, save, x, g, &t, &err);
        if (!s) printf("saved trained weights to %s\n", save);
    }
    cli_batch_free(&batch);
    vp_exec_free(x);
    vp_backend_free(b);
    vp_training_free(&t);
    vp_graph_free(g);
    free(losses);
    free(times);
    return cli_report(s, &err);
}

const cli_cmd cli_cmd_train = {
    "train", run_train, "MODEL --loss SPEC [--optimizer NAME] [options]",
    "build the training step (loss, backward, optimizer) and run it on the CPU",
    "Builds the model's training step (forward, loss, backward, optimizer update) and\n"
    "runs it on the CPU backend (--reference: the reference kernels only),\nprinting the loss at every step.\n",
    "example:\n"
    "  onnx-vplan train models/mlp/model.onnx --dim batch=4 --loss ce:logits \\\n"
    "      --optimizer momentum --lr 0.1 --steps 5 --data models/mlp/fixtures\n"};
