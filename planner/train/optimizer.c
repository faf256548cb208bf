/* The optimizer: one update node per trainable parameter (phase OPTIMIZER), with its
 * state (momentum buffer, Adam's moments and step) as ordinary zero-initialised values
 * carried across steps, so the planner sees optimizer memory like any other.
 *
 * Ops (domain "vplan", PyTorch semantics, documented in planner/ops/update.c):
 *   SGD(W, G) -> W'                    attrs lr, weight_decay
 *   Momentum(W, G, B) -> W', B'        attrs lr, momentum, weight_decay
 *   Adam(W, G, M, V, T) -> W', M', V', T'   attrs lr, beta1, beta2, eps, weight_decay,
 *                                           decoupled (1: AdamW) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/graph_build.h"
#include "train/training.h"

const char *vp_opt_name(vp_opt_kind k) {
    switch (k) {
    case VP_OPT_SGD: return "sgd";
    case VP_OPT_MOMENTUM: return "momentum";
    case VP_OPT_ADAM: return "adam";
    case VP_OPT_ADAMW: return "adamw";
    }
    return "?";
}

vp_status vp_opt_parse(const char *arg, vp_opt_spec *out, vp_error *err) {
    memset(out, 0, sizeof *out);
    /* torch.optim defaults; SGD has no default lr in torch, 0.01 is the common choice */
    out->beta1 = 0.9;
    out->beta2 = 0.999;
    out->eps = 1e-8;
    if (!arg) arg = "";
    if (!strcmp(arg, "sgd")) {
        out->kind = VP_OPT_SGD;
        out->lr = 0.01;
    } else if (!strcmp(arg, "momentum")) {
        out->kind = VP_OPT_MOMENTUM;
        out->lr = 0.01;
        out->momentum = 0.9;
    } else if (!strcmp(arg, "adam")) {
        out->kind = VP_OPT_ADAM;
        out->lr = 1e-3;
    } else if (!strcmp(arg, "adamw")) {
        out->kind = VP_OPT_ADAMW;
        out->lr = 1e-3;
        out->weight_decay = 0.01;
    } else {
        return vp_fail(err, VP_ERR_USAGE, "--optimizer expects sgd, momentum, adam or adamw, got '%s'", arg);
    }
    return VP_OK;
}

static vp_status update_one(vp_graph *g, const vp_opt_spec *o, vp_training *t, int p, int gr, vp_error *err) {
    const char *pname = g->values[p].name;
    vp_dtype dt = g->values[p].dtype;
    int rank = g->values[p].rank;
    int64_t dims[VP_MAX_RANK];
    memcpy(dims, g->values[p].dims, sizeof dims);
    char name[600];
    int in[6] = {p, gr, -1, -1, -1, -1}, n_in = 2, n_out = 1;
    const char *op = "SGD";
    if (o->kind == VP_OPT_MOMENTUM) {
        op = "Momentum";
        snprintf(name, sizeof name, "%s.momentum_buffer", pname);
        in[n_in++] = vp_build_state(g, name, dt, rank, dims);
        n_out = 2;
    } else if (o->kind == VP_OPT_ADAM || o->kind == VP_OPT_ADAMW) {
        op = "Adam";
        snprintf(name, sizeof name, "%s.exp_avg", pname);
        in[n_in++] = vp_build_state(g, name, dt, rank, dims);
        snprintf(name, sizeof name, "%s.exp_avg_sq", pname);
        in[n_in++] = vp_build_state(g, name, dt, rank, dims);
        snprintf(name, sizeof name, "%s.step", g->values[p].name);
        in[n_in++] = vp_build_state(g, name, VP_F32, 0, dims);
        n_out = 4;
    }
    /* fp16 loss scaling: the update skips itself where a gradient overflowed, in place */
    if (t->loss_scaled) in[n_in++] = t->scaling.finite;
    for (int k = 0; k < n_in; k++)
        if (in[k] < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    snprintf(name, sizeof name, "%s_update/%s", g->values[p].name, op);
    int n = vp_build_node(g, op, "vplan", name, n_in, in, n_out, VP_PHASE_OPTIMIZER, 0);
    if (n < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    vp_status s = vp_node_add_attr_float(g, n, "lr", (float)o->lr);
    if (!s) s = vp_node_add_attr_float(g, n, "weight_decay", (float)o->weight_decay);
    if (!s && o->kind == VP_OPT_MOMENTUM) s = vp_node_add_attr_float(g, n, "momentum", (float)o->momentum);
    if (!s && n_out == 4) {
        s = vp_node_add_attr_float(g, n, "beta1", (float)o->beta1);
        if (!s) s = vp_node_add_attr_float(g, n, "beta2", (float)o->beta2);
        if (!s) s = vp_node_add_attr_float(g, n, "eps", (float)o->eps);
        if (!s) s = vp_node_add_attr_int(g, n, "decoupled", o->kind == VP_OPT_ADAMW);
    }
    int out[4];
    if (!s) s = vp_build_finish(g, n, out, err);
    if (s) return s;
    s = vp_training_add_carry(t, p, out[0], err);
    for (int k = 1; k < n_out && !s; k++) s = vp_training_add_carry(t, in[k + 1], out[k], err);
    return s;
}

vp_status vp_optimizer_build(vp_graph *g, const vp_opt_spec *o, vp_training *t, vp_error *err) {
    if (!(o->lr > 0)) return vp_fail(err, VP_ERR_USAGE, "--lr must be positive");
    t->first_optimizer_node = g->n_nodes;
    for (int i = 0; i < t->n_params; i++) {
        if (t->grads[i] < 0) continue; /* the loss does not depend on it */
        vp_status s = update_one(g, o, t, t->params[i], t->grads[i], err);
        if (s) return s;
    }
    return VP_OK;
}
