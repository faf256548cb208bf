/* Training mode for forward ops whose behaviour differs when training, as PyTorch's
 * module.train() does.
 *
 * BatchNormalization (inference form, or the training form of opset 14 on) becomes
 * com.microsoft.BatchNormInternal with training_mode=1, as ONNX Runtime's training
 * graphs have it: it normalises with the
 * batch statistics, updates the running statistics (carried to the next step), and
 * saves the batch mean and inverse standard deviation for the backward pass.
 *
 * Dropout with a non-zero ratio gets training_mode = true (the opset-13 form), so it
 * draws its mask; the gradient rule keeps the mask.  The kernel draws from the node's
 * seed and, once an optimizer carries the step to the next (vp_train_mode_step_dropouts),
 * from the step's number too: a new mask every step, as PyTorch draws, while a recomputed
 * Dropout repeats the first pass's mask (as torch.utils.checkpoint restores the RNG
 * state).  A Dropout without a seed of its own (what exporters write) gets one from its
 * name, so that two Dropouts of one shape (every layer's) draw different masks. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/dtype_conv.h"
#include "ir/graph_build.h"
#include "onnx/onnx_load.h"
#include "train/training.h"

/* Rewrites node i in place: same inputs, Y and running statistics (the model's, when
 * it exported the training form: training_mode=1 as torch.onnx writes with
 * TrainingMode.TRAINING, or the optional outputs of opsets 9 to 13), saved statistics
 * added.  ONNX Runtime's BatchNormReplacement does the same, so that the backward is one
 * BatchNormalizationGrad reading the saved statistics rather than a chain of small ops
 * recomputing them.  The running statistics become carried state (the exporter leaves
 * them unread: without the carry training would never update them), and the running
 * variance follows PyTorch (unbiased batch variance), as a module in train() updates it. */
static vp_status batchnorm_to_training(vp_graph *g, int i, vp_training *t, vp_error *err) {
    vp_node *n = &g->nodes[i];
    if (n->n_inputs != 5) return vp_node_fail(err, VP_ERR_INVALID, n, "BatchNormalization needs 5 inputs");
    for (int k = 3; k < n->n_outputs; k++)
        if (n->outputs[k] >= 0 && g->values[n->outputs[k]].n_consumers)
            return vp_node_fail(err, VP_ERR_UNSUPPORTED, n,
                                "reads BatchNormalization's saved statistics (opset < 14 form); re-export at opset 14 or later");
    int outs[5] = {n->outputs[0], -1, -1, -1, -1};
    for (int k = 1; k < n->n_outputs && k < 3; k++) outs[k] = n->outputs[k];
    static const char *suffix[5] = {"", "running_mean", "running_var", "saved_mean", "saved_inv_std"};
    for (int k = 1; k < 5; k++) {
        if (outs[k] >= 0) continue;
        char name[600];
        snprintf(name, sizeof name, "%s/%s", n->name, suffix[k]);
        outs[k] = vp_graph_add_unique_value(g, name);
        if (outs[k] < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
        n = &g->nodes[i];
    }
    int *o = realloc(n->outputs, 5 * sizeof *o);
    if (!o) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    memcpy(o, outs, sizeof outs);
    n->outputs = o;
    n->n_outputs = 5;
    free(n->op_type);
    free(n->domain);
    n->op_type = strdup("BatchNormInternal");
    n->domain = strdup("com.microsoft");
    n->opset = g->opset_ms;
    if (!n->op_type || !n->domain) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    const vp_attr *tm = vp_node_attr(n, "training_mode");
    if (tm) ((vp_attr *)tm)->i = 1;
    else if (vp_node_add_attr_int(g, i, "training_mode", 1)) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    vp_status s = vp_build_finish(g, i, NULL, err);
    if (s) return s;
    n = &g->nodes[i];
    for (int k = 3; k <= 4; k++) g->values[n->inputs[k]].flags |= VP_VAL_STATE;
    s = vp_training_add_carry(t, n->inputs[3], n->outputs[1], err);
    if (!s) s = vp_training_add_carry(t, n->inputs[4], n->outputs[2], err);
    return s;
}

/* FNV-1a of the node's name (its index where it has none), the seed of a Dropout that
 * names none: stable across runs and builds, distinct per node. */
static vp_status dropout_seed(vp_graph *g, int i, vp_error *err) {
    const vp_node *n = &g->nodes[i];
    if (vp_node_attr(n, "seed")) return VP_OK;
    uint32_t h = 2166136261u;
    char idx[32];
    snprintf(idx, sizeof idx, "#%d", i);
    for (const char *p = n->name[0] ? n->name : idx; *p; p++) h = (h ^ (unsigned char)*p) * 16777619u;
    return vp_node_add_attr_int(g, i, "seed", (int64_t)(h & 0x7fffffff)) ? vp_fail(err, VP_ERR_NOMEM, "out of memory")
                                                                         : VP_OK;
}

/* The ratio of a Dropout node: its attribute before opset 12, its input after. */
static float dropout_ratio(const vp_graph *g, const vp_node *n) {
    if (n->opset < 12) return vp_attr_float(n, "ratio", 0.5f);
    if (n->n_inputs < 2 || n->inputs[1] < 0) return 0.5f;
    const vp_value *r = &g->values[n->inputs[1]];
    if (!r->data || !vp_dtype_is_float(r->dtype) || vp_value_numel(r) != 1) return -1.0f; /* decided at run time */
    return (float)vp_load(r->data, r->dtype, 0); /* a float16 model's too */
}

static vp_status dropout_to_training(vp_graph *g, int i, vp_training *t, vp_error *err) {
    vp_node *n = &g->nodes[i];
    float ratio = dropout_ratio(g, n);
    if (!(ratio > 0)) return VP_OK;
    /* the counter-based masks (runtime/dropout_rng.h), which the step count varies and the
     * fused attention draws alike */
    if (vp_node_set_attr_int(g, i, "vplan_step", 1)) /* a model's own (--lenient) replaced */
        return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    n = &g->nodes[i];
    if (n->n_inputs >= 3 && n->inputs[2] >= 0) { /* the model decides its mode itself */
        const vp_value *m = &g->values[n->inputs[2]];
        t->n_dropout_train += m->data && m->dtype == VP_BOOL && ((const unsigned char *)m->data)[0];
        return VP_OK;
    }
    t->n_dropout_train++;
    int64_t none[1] = {0};
    uint8_t yes = 1;
    int r = vp_build_const(g, "dropout_ratio", g->values[n->inputs[0]].dtype == VP_F64 ? VP_F64 : VP_F32, 0, none,
                           g->values[n->inputs[0]].dtype == VP_F64 ? (const void *)&(double){ratio} : (const void *)&ratio);
    int tm = vp_build_const(g, "dropout_training_mode", VP_BOOL, 0, none, &yes);
    if (r < 0 || tm < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    n = &g->nodes[i];
    int *in = realloc(n->inputs, 3 * sizeof *in);
    if (!in) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    in[1] = r;
    in[2] = tm;
    n->inputs = in;
    n->n_inputs = 3;
    if (n->opset < 13) n->opset = 13;
    return vp_build_finish(g, i, NULL, err);
}

vp_status vp_train_mode_apply(vp_graph *g, vp_training *t, vp_error *err) {
    int n_nodes = g->n_nodes;
    for (int i = 0; i < n_nodes; i++) {
        vp_node *n = &g->nodes[i];
        vp_status s = VP_OK;
        if (n->domain[0] || n->folded) continue;
        if (!strcmp(n->op_type, "BatchNormalization")) s = batchnorm_to_training(g, i, t, err);
        else if (!strcmp(n->op_type, "Dropout") && !(s = dropout_seed(g, i, err))) s = dropout_to_training(g, i, t, err);
        if (s) return s;
    }
    return vp_graph_link(g, err);
}

/* Where node n reads the step count: a Dropout of ours (vplan_step) after its three
 * inputs, a fused Attention with dropout after its mask, its gradient after its mask;
 * -1 for any other node. */
static int step_slot(const vp_node *n) {
    if (n->folded || n->n_inputs < 1) return -1;
    if (!n->domain[0] && !strcmp(n->op_type, "Dropout"))
        return n->opset >= 12 && n->n_inputs == 3 && vp_attr_int(n, "vplan_step", 0) == 1 ? 3 : -1;
    if (strcmp(n->domain, "vplan") || !(vp_attr_float(n, "dropout", 0.0f) > 0)) return -1;
    return !strcmp(n->op_type, "Attention") ? 4 : !strcmp(n->op_type, "AttentionGrad") ? 7 : -1;
}

/* The step count a saved model's metadata records (VP_DROPOUT_STEP_KEY), as the carried
 * count's first value; 0 where there is none. */
static vp_status resumed_step(vp_graph *g, int step, vp_error *err) {
    const char *m = vp_onnx_metadata(g, VP_DROPOUT_STEP_KEY);
    if (!m) return VP_OK;
    char *end;
    errno = 0;
    long long v = strtoll(m, &end, 10);
    if (end == m || *end || errno || v < 0 || v >= (1ll << 32)) /* vp_dropout_key's keys are distinct below 2^32 */
        return vp_fail(err, VP_ERR_INVALID, "%s: metadata %s is '%s', not a step count", g->path ? g->path : "model",
                       VP_DROPOUT_STEP_KEY, m);
    int64_t *d = malloc(sizeof *d);
    if (!d) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    *d = v;
    vp_value_set_data(g, step, d, VP_DATA_HEAP);
    return VP_OK;
}

vp_status vp_train_mode_step_dropouts(vp_graph *g, vp_training *t, vp_error *err) {
    int n_nodes = g->n_nodes, step = -1;
    t->dropout_step = -1;
    for (int i = 0; i < n_nodes; i++) {
        int slot = step_slot(&g->nodes[i]);
        if (slot < 0 || g->nodes[i].n_inputs > slot) continue;
        if (step < 0) {
            int64_t none[1] = {0};
            step = vp_build_state(g, VP_DROPOUT_STEP_KEY, VP_I64, 0, none);
            if (step < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
            vp_status s = resumed_step(g, step, err);
            if (s) return s;
        }
        vp_node *n = &g->nodes[i];
        int *in = realloc(n->inputs, ((size_t)slot + 1) * sizeof *in);
        if (!in) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
        for (int k = n->n_inputs; k < slot; k++) in[k] = -1; /* an Attention without a mask */
        in[slot] = step;
        n->inputs = in;
        n->n_inputs = slot + 1;
        vp_status s = vp_build_finish(g, i, NULL, err);
        if (s) return s;
    }
    if (step < 0) return VP_OK;
    /* the count moves on after its last reader, a recomputed Dropout's included
     * (memory/schedule.c places an update that overwrites carried storage so) */
    int64_t none[1] = {0}, one = 1;
    int c1 = vp_build_const(g, "vplan.dropout_step_one", VP_I64, 0, none, &one);
    if (c1 < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    int id = vp_build_node(g, "Add", "", "vplan.dropout_step/next", 2, (int[]){step, c1}, 1, VP_PHASE_OPTIMIZER, 0);
    if (id < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    int next;
    vp_status s = vp_build_finish(g, id, &next, err);
    if (!s) s = vp_training_add_carry(t, step, next, err);
    if (!s) t->dropout_step = step;
    if (!s) s = vp_graph_link(g, err);
    return s;
}
