/* onnx-vplan train: build the training step and run it on the CPU backend (oneDNN, or --reference). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "cli.h"
#include "cli_data.h"
#include "cli_train.h"
#include "cli_tp.h"
#include "comm.h"
#include "cpu_util.h"
#include "exec.h"
#include "ir/atomic_file.h"
#include "json_writer.h"
#include "cli_qdq.h"
#include "onnx_save.h"

/* After a step: the loss, every updated parameter and every carried state finite, else
 * the first value of the step (in node order) that is not, and the node that made it.
 * Under fp16 loss scaling a gradient that overflows is the skip rule at work (the update
 * is skipped, the parameters stay): only a non-finite loss or carried value stops. */
static vp_status check_finite(vp_exec *x, const vp_graph *g, const vp_training *t, int64_t step, double loss,
                              vp_error *err) {
    int bad = isfinite(loss) ? -1 : t->loss, ok = 1;
    vp_status s = VP_OK;
    for (int c = 0; c < t->n_carry && bad < 0 && !s; c++) {
        s = vp_exec_value_finite(x, t->carry[c].to, &ok, err);
        if (!s && !ok) bad = t->carry[c].to;
    }
    if (s || bad < 0) return s;
    int first = -1, node = -1;
    for (int i = 0; i < g->n_nodes && first < 0 && !s; i++) {
        const vp_node *n = &g->nodes[i];
        if (n->folded) continue;
        for (int k = 0; k < n->n_outputs && first < 0 && !s; k++) {
            if (n->outputs[k] < 0) continue;
            s = vp_exec_value_finite(x, n->outputs[k], &ok, err);
            if (!s && !ok) first = n->outputs[k], node = i;
        }
    }
    if (s) return s;
    const vp_node *n = node >= 0 ? &g->nodes[node] : NULL;
    return vp_fail(err, VP_ERR_RUNTIME,
                   "step %lld: %s '%s' is not finite; the first non-finite value of the step is '%s', made by node "
                   "'%s' (%s%s%s); stopped (--allow-nonfinite goes on)",
                   (long long)step, bad == t->loss ? "the loss" : "the updated value", g->values[bad].name, first >= 0 ? g->values[first].name : "?", n ? n->name : "?",
                   n && n->domain[0] ? n->domain : "", n && n->domain[0] ? "." : "", n ? n->op_type : "?");
}

static double seconds_since(const struct timespec *t0) {
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0->tv_nsec);
}

static vp_status write_json(const char *path, const vp_graph *g, const vp_training *t, const cli_train_opts *o,
                            const double *losses, const double *times, const double *scales, int steps, const vp_tensor *ref,
                            vp_error *err) {
    vp_atomic_file af;
    vp_status s = vp_atomic_file_open(&af, path, err);
    if (s) return s;
    vp_json j;
    vp_json_init(&j, af.f, 1);
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
    if (t->loss_scaled) { /* fp16: the scale each step ran at, and the steps an overflow skipped (1-based) */
        vp_json_key(&j, "loss_scales");
        vp_json_begin_array(&j);
        for (int i = 0; i < steps; i++) vp_json_double(&j, scales[2 * i]);
        vp_json_end_array(&j);
        vp_json_key(&j, "skipped_steps");
        vp_json_begin_array(&j);
        for (int i = 0; i < steps; i++)
            if (scales[2 * i + 1] == 0) vp_json_int(&j, i + 1);
        vp_json_end_array(&j);
    }
    if (ref && ref->data) { /* --qdq: the fake-quantised forward's output the QDQ model should give */
        vp_json_key(&j, "qdq_reference");
        vp_json_begin_object(&j);
        vp_json_key(&j, "output");
        vp_json_string(&j, o->spec.loss.value);
        vp_json_key(&j, "shape");
        vp_json_begin_array(&j);
        for (int d = 0; d < ref->rank; d++) vp_json_int(&j, ref->dims[d]);
        vp_json_end_array(&j);
        vp_json_key(&j, "values");
        vp_json_begin_array(&j);
        for (int64_t i = 0; i < vp_tensor_numel(ref); i++) vp_json_double(&j, vp_load(ref->data, ref->dtype, i));
        vp_json_end_array(&j);
        vp_json_end_object(&j);
    }
    vp_json_end_object(&j);
    vp_json_finish(&j);
    return vp_atomic_file_commit(&af, err);
}

/* A split weight made whole: every rank's slice gathered (cli_tp.h); others as they are. */
static vp_status gather_full(vp_comm *comm, const vp_training *t, int value, vp_tensor *v, vp_error *err) {
    for (int i = 0; comm && i < t->tp.n_sliced; i++)
        if (t->tp.sliced[i].value == value) return cli_tp_gather(comm, t->tp.sliced[i].axis, t->tp.sliced[i].blocks, v, err);
    return VP_OK;
}

/* A scalar value of the step as a double (*s set on failure; left alone once set). */
static double get_scalar(vp_exec *x, int id, vp_status *s, vp_error *err) {
    vp_tensor t = {0};
    if (!*s) *s = vp_exec_get(x, id, &t, err);
    double v = *s ? 0 : vp_load(t.data, t.dtype, 0);
    free(t.data);
    return v;
}

/* Trained parameters and carried state whose names are initializers of the model; with
 * --tp every rank gathers the split ones and rank 0 writes. */
static vp_status save_model(const char *src, const char *dst, vp_exec *x, const vp_graph *g, const vp_training *t,
                            vp_comm *comm, vp_error *err) {
    const char **names = calloc((size_t)t->n_carry + 1, sizeof *names);
    vp_tensor *vals = calloc((size_t)t->n_carry + 1, sizeof *vals);
    int n = 0;
    vp_status s = names && vals ? VP_OK : vp_fail(err, VP_ERR_NOMEM, "out of memory");
    for (int i = 0; i < t->n_carry && !s; i++) {
        const vp_value *v = &g->values[t->carry[i].from];
        if (!(v->flags & VP_VAL_INITIALIZER)) continue; /* optimizer state is not part of the model */
        if (vp_qat_is_learned_scale(g, t->carry[i].from)) continue; /* nor are LSQ's scales (--qdq writes them) */
        s = vp_exec_get(x, t->carry[i].from, &vals[n], err);
        if (!s) s = gather_full(comm, t, t->carry[i].from, &vals[n], err);
        names[n++] = v->name;
    }
    /* fp16: the loss scale and its clean-step count where this run left them, so that
     * training the saved model resumes with them (the pipeline, planner/pipeline, reads them back);
     * the Dropouts' step count likewise */
    char scale[32] = "", count[32] = "", steps[32] = "";
    const char *keys[3], *meta[3];
    int n_meta = 0;
    if (!s && t->loss_scaled) {
        vp_status s2 = VP_OK;
        double sv = get_scalar(x, t->scaling.scale, &s2, err), cv = get_scalar(x, t->scaling.count, &s2, err);
        s = s2;
        vp_loss_scale_format(sv, (int64_t)cv, scale, count);
        keys[n_meta] = VP_LOSS_SCALE_KEY, meta[n_meta++] = scale;
        keys[n_meta] = VP_LOSS_SCALE_COUNT_KEY, meta[n_meta++] = count;
    }
    /* the Dropouts' step count, so that training the saved model draws new masks, not
     * this run's again (train/train_mode.c reads it back) */
    if (!s && t->dropout_step >= 0) {
        snprintf(steps, sizeof steps, "%lld", (long long)get_scalar(x, t->dropout_step, &s, err));
        keys[n_meta] = VP_DROPOUT_STEP_KEY, meta[n_meta++] = steps;
    }
    if (!s && (!comm || comm->rank == 0)) s = vp_onnx_save_model(src, dst, n, names, vals, n_meta, keys, meta, err);
    for (int i = 0; i < n; i++) free(vals[i].data);
    free(vals);
    free(names);
    return s;
}

/* --lora --save: the adapters alone, apart from the base model, with their rank and scale
 * (with --tp, each pair gathered from the ranks' slices and written by rank 0). */
static vp_status save_adapters(const char *dst, vp_exec *x, const vp_graph *g, const vp_training *t, const vp_train_spec *spec,
                               vp_comm *comm, vp_error *err) {
    int n = 2 * t->lora.n;
    const char **names = calloc((size_t)n + 1, sizeof *names);
    vp_tensor *vals = calloc((size_t)n + 1, sizeof *vals);
    vp_status s = names && vals ? VP_OK : vp_fail(err, VP_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n && !s; i++) {
        int v = i % 2 ? t->lora.adapters[i / 2].b : t->lora.adapters[i / 2].a;
        names[i] = g->values[v].name;
        s = vp_exec_get(x, v, &vals[i], err);
        if (!s) s = gather_full(comm, t, v, &vals[i], err);
    }
    char r[32], alpha[32];
    snprintf(r, sizeof r, "%d", spec->lora.rank);
    snprintf(alpha, sizeof alpha, "%g", t->lora.scale * spec->lora.rank);
    const char *keys[] = {"vplan.lora.r", "vplan.lora.alpha", "vplan.lora.base"}, *values[] = {r, alpha, g->path};
    if (!s && (!comm || comm->rank == 0)) s = vp_onnx_save_tensors(dst, n, names, vals, 3, keys, values, err);
    for (int i = 0; i < n && vals; i++) free(vals[i].data);
    free(vals);
    free(names);
    return s;
}

/* --merge: the base model with each adapted weight replaced by W + scale * B A. */
static vp_status save_merged(const char *src, const char *dst, vp_exec *x, const vp_graph *g, const vp_training *t,
                             const vp_train_spec *spec, vp_comm *comm, vp_error *err) {
    int n = t->lora.n;
    const char **names = calloc((size_t)n + 1, sizeof *names);
    vp_tensor *vals = calloc((size_t)n + 1, sizeof *vals);
    vp_status s = names && vals ? VP_OK : vp_fail(err, VP_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n && !s; i++) {
        const vp_lora_adapter *ad = &t->lora.adapters[i];
        vp_tensor a = {0}, b = {0};
        s = vp_exec_get(x, ad->weight, &vals[i], err);
        if (!s) s = vp_exec_get(x, ad->a, &a, err);
        if (!s) s = vp_exec_get(x, ad->b, &b, err);
        if (!s) s = gather_full(comm, t, ad->a, &a, err); /* --tp: the pair split along its rank */
        if (!s) s = gather_full(comm, t, ad->b, &b, err);
        if (!s) vp_lora_merge(ad, spec->lora.rank, t->lora.scale, vals[i].data, a.data, b.data, vals[i].data);
        free(a.data);
        free(b.data);
        names[i] = g->values[ad->weight].name;
    }
    char steps[32] = ""; /* the Dropouts' step count, as save_model records it */
    const char *key = VP_DROPOUT_STEP_KEY, *val = steps;
    int n_meta = 0;
    if (!s && t->dropout_step >= 0) {
        snprintf(steps, sizeof steps, "%lld", (long long)get_scalar(x, t->dropout_step, &s, err));
        n_meta = 1;
    }
    if (!s && (!comm || comm->rank == 0)) s = vp_onnx_save_model(src, dst, n, names, vals, n_meta, &key, &val, err);
    for (int i = 0; i < n && vals; i++) free(vals[i].data);
    free(vals);
    free(names);
    return s;
}

/* Ranks other than 0 compute what rank 0 prints: their stdout goes nowhere. */
static void quiet_stdout(void) {
    if (!freopen("/dev/null", "w", stdout)) fprintf(stderr, "onnx-vplan: warning: cannot silence this rank's output\n");
}

static int run_train(int argc, char **argv) {
    const char *model = NULL, *data = "synthetic", *json = NULL, *save = NULL, *merge = NULL;
    int qdq = 0;
    int64_t steps = 1, seed = 0;
    int reference = 0, allow_nonfinite = 0;
    cli_pairs dims = {0};
    cli_train_opts o;
    cli_train_init(&o);
    const cli_opt table[] = {
        {"MODEL", CLI_POS, &model, NULL, NULL},
        {"", CLI_TABLE, o.table, NULL, NULL},
        {"", CLI_TABLE, cli_load_table, NULL, NULL},
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
         "running statistics; fp16's loss scale and the Dropouts' step\n"
         "count as metadata, which training it again counts on from);\n"
         "with --lora, the adapters alone (an ONNX file of initializers\n"
         "that --lora-load reads back)"},
        {"--merge", CLI_STR, &merge, "OUT.onnx", "with --lora: write the model with each adapted weight merged, W + scale B A"},
        {"--qdq", CLI_SET, &qdq, NULL,
         "with --qat and --save: write a QDQ model (QuantizeLinear and\n"
         "DequantizeLinear pairs, int8 weights, int32 biases) that ONNX\n"
         "Runtime runs; --json then holds the fake-quantised forward's output"},
        {"--allow-nonfinite", CLI_SET, &allow_nonfinite, NULL,
         "go on when the loss, a parameter or carried state stops being\n"
         "finite (default: stop with exit 1, naming the first non-finite value)"},
        {"--reference", CLI_SET, &reference, NULL,
         "run every step on the reference CPU kernels, not oneDNN\n"
         "(as VP_CPU_REFERENCE=1 does)"},
        {0}};
    int rc = cli_parse(&cli_cmd_train, table, argc, argv);
    if (rc != CLI_CONTINUE) return rc;
    vp_error err;
    vp_status s = cli_train_finish(&o, &err);
    if (!s && (steps < 1 || steps > 10000000)) s = vp_fail(&err, VP_ERR_USAGE, "--steps must be between 1 and 10000000");
    if (!s && qdq && (!save || !o.spec.qat.enabled)) s = vp_fail(&err, VP_ERR_USAGE, "--qdq needs --save and --qat");
    if (!s && merge && !o.lora) s = vp_fail(&err, VP_ERR_USAGE, "--merge needs --lora");
    if (!s && qdq && o.lora) s = vp_fail(&err, VP_ERR_USAGE, "--qdq writes a whole model: with --lora, merge first");
    if (!s && qdq && o.spec.tp.n > 1) s = vp_fail(&err, VP_ERR_USAGE, "--qdq writes one whole model: it does not take --tp");
    /* --tp N: one process per rank under mpirun -np N; rank 0 reports */
    vp_comm *comm = NULL;
    if (!s && o.spec.tp.n > 1) {
        if (!vp_comm_launched())
            s = vp_fail(&err, VP_ERR_USAGE, "--tp %d trains one process per rank: run it as mpirun -np %d onnx-vplan train ...",
                        o.spec.tp.n, o.spec.tp.n);
        else if (!(s = vp_comm_mpi_new(&comm, &err)) && comm->size != o.spec.tp.n)
            s = vp_fail(&err, VP_ERR_USAGE, "--tp %d but mpirun started %d processes", o.spec.tp.n, comm->size);
        if (!s) o.spec.tp.rank = comm->rank;
        if (!s && comm->rank != 0) json = NULL, quiet_stdout();
    }
    if (s) {
        vp_comm_free(comm);
        return cli_report(s, &err);
    }

    vp_graph *g = NULL;
    vp_training t;
    memset(&t, 0, sizeof t);
    vp_backend *b = NULL;
    vp_exec *x = NULL;
    cli_batch batch = {0};
    double *losses = calloc((size_t)steps, sizeof *losses), *times = calloc((size_t)steps, sizeof *times);
    double *scales = calloc(2 * (size_t)steps, sizeof *scales); /* fp16: each step's scale, and whether it was clean */
    if (!losses || !times || !scales) s = vp_fail(&err, VP_ERR_NOMEM, "out of memory");
    int n_fwd = 0;
    if (!s) s = cli_build_step(model, &dims, &o, &g, &t, &n_fwd, &err);
    if (!s) {
        int64_t elems = 0;
        for (int i = 0; i < t.n_params; i++) elems += vp_value_numel(&g->values[t.params[i]]);
        printf("training step: %d parameters (%lld elements), %d frozen; %d forward, %d loss, %d backward, %d optimizer nodes\n",
               t.n_params, (long long)elems, t.n_frozen, n_fwd, t.first_backward_node - t.first_loss_node,
               t.first_optimizer_node - t.first_backward_node, g->n_nodes - t.first_optimizer_node);
        char why[512];
        cli_trainable_summary(&o.spec, &t, why, sizeof why);
        printf("%s\n", why);
        char fusion[400];
        cli_fusion_summary(&t, t.n_renorm, fusion, sizeof fusion);
        if (fusion[0]) printf("%s\n", fusion);
        char prec[256];
        cli_precision_summary(&o.spec, &t, prec, sizeof prec);
        if (prec[0]) printf("%s\n", prec);
        char qat[320];
        cli_qat_summary(&o.spec, &t, qat, sizeof qat);
        if (qat[0]) printf("%s\n", qat);
        cli_lora_summary(&o.spec, &t, g, qat, sizeof qat);
        if (qat[0]) printf("%s\n", qat);
        cli_offload_summary(&t, qat, sizeof qat);
        if (qat[0]) printf("%s\n", qat);
        if (t.n_unused) fprintf(stderr, "onnx-vplan: warning: the loss does not depend on %d trainable parameters\n", t.n_unused);
        b = vp_backend_cpu_new_with(reference || vp_backend_cpu_reference_env());
        if (b) b->comm = comm;
        s = b ? vp_exec_new(g, b, &x, &err) : vp_fail(&err, VP_ERR_NOMEM, "out of memory");
    }
    if (!s) s = cli_batch_load(g, data, (uint64_t)seed, t.label_classes, &batch, &err);
    if (!s) s = cli_batch_feed(x, g, &batch, &err);
    for (int64_t step = 0; step < steps && !s; step++) {
        struct timespec t0;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        s = vp_exec_run(x, &err);
        losses[step] = get_scalar(x, t.loss, &s, &err);
        double *sc = &scales[2 * step], next = 0;
        if (t.loss_scaled) {
            sc[0] = get_scalar(x, t.scaling.scale, &s, &err);
            sc[1] = get_scalar(x, t.scaling.finite, &s, &err);
            next = get_scalar(x, t.scaling.new_scale, &s, &err);
        }
        if (!s && !allow_nonfinite) s = check_finite(x, g, &t, step + 1, losses[step], &err);
        for (int c = 0; c < t.n_carry && !s; c++) s = vp_exec_copy_value(x, t.carry[c].from, t.carry[c].to, &err);
        times[step] = seconds_since(&t0);
        if (!s) printf("step %lld  loss %.6f  (%.3f s)", (long long)step + 1, losses[step], times[step]);
        if (!s && t.loss_scaled && !sc[1]) printf("  overflow: step skipped, loss scale %.17g -> %.17g", sc[0], next);
        else if (!s && t.loss_scaled && next != sc[0]) printf("  loss scale %.17g -> %.17g", sc[0], next);
        if (!s) printf("\n");
        fflush(stdout);
    }
    if (!s && comm)
        printf("tensor parallel over %d ranks: rank 0 sent %lld bytes a step in %lld collectives\n", comm->size,
               (long long)(comm->bytes_sent / steps), (long long)(comm->calls / steps));
    vp_tensor ref = {0};
    if (!s && merge) {
        s = save_merged(model, merge, x, g, &t, &o.spec, comm, &err);
        if (!s) printf("saved the merged model to %s\n", merge);
    }
    if (!s && save && t.lora.n) {
        s = save_adapters(save, x, g, &t, &o.spec, comm, &err);
        if (!s) printf("saved %d adapter pairs to %s\n", t.lora.n, save);
    } else if (!s && save) {
        s = save_model(model, save, x, g, &t, comm, &err);
        if (!s && qdq) {
            int out = -1;
            for (int v = 0; v < g->n_values && out < 0; v++)
                if (!strcmp(g->values[v].name, o.spec.loss.value)) out = v;
            s = cli_qdq_save(save, x, g, out, out >= 0 ? &ref : NULL, &err);
        }
        if (!s && (!comm || comm->rank == 0)) printf("saved trained %s to %s\n", qdq ? "QDQ model" : "weights", save);
    }
    if (!s && json) s = write_json(json, g, &t, &o, losses, times, scales, (int)steps, &ref, &err);
    free(ref.data);
    cli_batch_free(&batch);
    vp_exec_free(x);
    vp_backend_free(b);
    vp_training_free(&t);
    vp_graph_free(g);
    vp_comm_free(comm);
    free(losses);
    free(times);
    free(scales);
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
