/* The loss: appended after the forward graph (phase LOSS).
 *
 * ce:LOGITS    logits [..., C] -> Reshape [N, C]; a new int64 input "labels" of the
 *              leading shape -> Reshape [N]; SoftmaxCrossEntropyLoss(mean): exactly
 *              PyTorch's cross_entropy on logits flattened to [N, C].  Logits split
 *              by vocabulary among tensor-parallel ranks: the cross-entropy across
 *              ranks instead (planner/parallel/tp_vocab.c).
 * mse:OUTPUT   a new input "target" of the output's shape; ReduceMean((y - t)^2).
 * output:NAME  the model's own scalar. */
#include <stdio.h>
#include <string.h>

#include "ir/graph_build.h"
#include "train/training.h"

vp_status vp_loss_parse(const char *arg, vp_loss_spec *out, vp_error *err) {
    memset(out, 0, sizeof *out);
    const char *colon = arg ? strchr(arg, ':') : NULL;
    if (!colon || !colon[1])
        return vp_fail(err, VP_ERR_USAGE, "--loss expects ce:LOGITS, mse:OUTPUT or output:NAME, got '%s'", arg ? arg : "");
    size_t k = (size_t)(colon - arg);
    if (k == 2 && !strncmp(arg, "ce", 2)) out->kind = VP_LOSS_CE;
    else if (k == 3 && !strncmp(arg, "mse", 3)) out->kind = VP_LOSS_MSE;
    else if (k == 6 && !strncmp(arg, "output", 6)) out->kind = VP_LOSS_OUTPUT;
    else return vp_fail(err, VP_ERR_USAGE, "--loss: unknown kind '%.*s' (ce, mse or output)", (int)k, arg);
    if (strlen(colon + 1) >= sizeof out->value) return vp_fail(err, VP_ERR_USAGE, "--loss: name too long");
    snprintf(out->value, sizeof out->value, "%s", colon + 1);
    return VP_OK;
}

static int reshape(vp_graph *g, int x, const int64_t *shape, int rank, const char *name, int opset, vp_error *err,
                   vp_status *s) {
    int64_t dims[1] = {rank};
    int sh = vp_build_const(g, "loss_shape", VP_I64, 1, dims, shape);
    int in[2] = {x, sh};
    int n = sh < 0 ? -1 : vp_build_node(g, "Reshape", "", name, 2, in, 1, VP_PHASE_LOSS, opset);
    int out = -1;
    if (n < 0) *s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
    else *s = vp_build_finish(g, n, &out, err);
    return out;
}

static vp_status build_ce(vp_graph *g, int logits, int opset, vp_training *t, vp_error *err) {
    const vp_value *L = &g->values[logits];
    char sh[128];
    if (L->rank < 2)
        return vp_fail(err, VP_ERR_INVALID, "%s: --loss ce:%s needs logits of rank 2 or more ([..., classes]), got %s",
                       g->path, L->name, vp_shape_str(L->rank, L->dims, sh, sizeof sh));
    if (!vp_dtype_is_float(L->dtype))
        return vp_fail(err, VP_ERR_INVALID, "%s: --loss ce:%s needs float logits, got %s", g->path, L->name,
                       vp_dtype_name(L->dtype));
    int64_t lead[VP_MAX_RANK], classes = L->dims[L->rank - 1];
    int rank = L->rank - 1;
    for (int d = 0; d < rank; d++) lead[d] = L->dims[d];
    int labels;
    vp_status s = vp_build_input(g, "labels", VP_I64, rank, lead, &labels, err);
    if (s) return s;
    t->added_inputs[t->n_added_inputs++] = labels;
    /* logits split by vocabulary (planner/parallel): labels range over the whole of it */
    int vocab = t->tp.n > 1 && t->tp.vocab_logits == logits;
    t->label_classes = vocab ? t->tp.vocab : classes;
    int x = logits, y = labels;
    if (rank > 1) {
        int64_t s2[2] = {-1, classes}, s1[1] = {-1};
        x = reshape(g, logits, s2, 2, "loss/flatten_logits", opset, err, &s);
        if (!s) y = reshape(g, labels, s1, 1, "loss/flatten_labels", opset, err, &s);
        if (s) return s;
    }
    if (vocab) return vp_tp_vocab_ce(g, x, y, &t->tp, &t->loss, err);
    int in[2] = {x, y};
    int n = vp_build_node(g, "SoftmaxCrossEntropyLoss", "", "loss/softmax_cross_entropy", 2, in, 2, VP_PHASE_LOSS, opset);
    if (n < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    s = vp_node_add_attr_string(g, n, "reduction", "mean");
    int out[2];
    if (!s) s = vp_build_finish(g, n, out, err);
    if (!s) t->loss = out[0];
    return s;
}

static vp_status build_mse(vp_graph *g, int y, int opset, vp_training *t, vp_error *err) {
    const vp_value *Y = &g->values[y];
    if (!vp_dtype_is_float(Y->dtype))
        return vp_fail(err, VP_ERR_INVALID, "%s: --loss mse:%s needs a float output, got %s", g->path, Y->name,
                       vp_dtype_name(Y->dtype));
    int target;
    int64_t dims[VP_MAX_RANK];
    memcpy(dims, Y->dims, sizeof dims);
    vp_status s = vp_build_input(g, "target", Y->dtype, Y->rank, dims, &target, err);
    if (s) return s;
    t->added_inputs[t->n_added_inputs++] = target;
    int in[2] = {y, target}, diff, sq;
    int n = vp_build_node(g, "Sub", "", "loss/diff", 2, in, 1, VP_PHASE_LOSS, opset);
    if (n < 0 || (s = vp_build_finish(g, n, &diff, err))) return n < 0 ? vp_fail(err, VP_ERR_NOMEM, "out of memory") : s;
    in[0] = in[1] = diff;
    n = vp_build_node(g, "Mul", "", "loss/square", 2, in, 1, VP_PHASE_LOSS, opset);
    if (n < 0 || (s = vp_build_finish(g, n, &sq, err))) return n < 0 ? vp_fail(err, VP_ERR_NOMEM, "out of memory") : s;
    n = vp_build_node(g, "ReduceMean", "", "loss/mean", 1, &sq, 1, VP_PHASE_LOSS, opset);
    if (n < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    s = vp_node_add_attr_int(g, n, "keepdims", 0);
    if (!s) s = vp_build_finish(g, n, &t->loss, err);
    return s;
}

vp_status vp_loss_build(vp_graph *g, const vp_loss_spec *spec, vp_training *t, vp_error *err) {
    int v = vp_graph_find_value(g, spec->value);
    if (v < 0)
        return vp_fail(err, VP_ERR_USAGE, "%s: --loss names '%s', which the model does not have (its outputs: %s%s)",
                       g->path, spec->value, g->n_outputs ? g->values[g->outputs[0]].name : "none",
                       g->n_outputs > 1 ? ", ..." : "");
    if (!vp_value_known(&g->values[v]))
        return vp_fail(err, VP_ERR_INVALID, "%s: the shape of '%s' is not known", g->path, spec->value);
    /* a mean over no elements is NaN (as in PyTorch), and every update after it too: an
     * empty batch (--dim batch=0) is refused rather than trained on */
    if (spec->kind != VP_LOSS_OUTPUT && vp_value_numel(&g->values[v]) == 0) {
        char sh[128];
        const vp_value *L = &g->values[v];
        return vp_fail(err, VP_ERR_INVALID,
                       "%s: --loss reads '%s' of shape %s, which has no elements: the loss would be a mean over "
                       "nothing (is a dim bound to 0?)",
                       g->path, L->name, vp_shape_str(L->rank, L->dims, sh, sizeof sh));
    }
    t->first_loss_node = g->n_nodes;
    int opset = g->opset_onnx > 13 ? g->opset_onnx : 13;
    switch (spec->kind) {
    case VP_LOSS_CE: return build_ce(g, v, opset, t, err);
    case VP_LOSS_MSE: return build_mse(g, v, opset, t, err);
    case VP_LOSS_OUTPUT: {
        const vp_value *L = &g->values[v];
        if (vp_value_numel(L) != 1 || !vp_dtype_is_float(L->dtype)) {
            char sh[128];
            return vp_fail(err, VP_ERR_INVALID, "%s: --loss output:%s must be a float scalar, got %s %s", g->path,
                           L->name, vp_dtype_name(L->dtype), vp_shape_str(L->rank, L->dims, sh, sizeof sh));
        }
        t->loss = v;
        return VP_OK;
    }
    }
    return vp_fail(err, VP_ERR_USAGE, "no loss given");
}
