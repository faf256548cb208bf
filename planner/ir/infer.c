#include "ir/infer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/attention_op.h"
#include "ir/col2im_op.h"
#include "ir/dft_op.h"
#include "ir/einsum_op.h"
#include "ir/group_norm_op.h"
#include "ir/control.h"
#include "ir/host.h"
#include "ir/rms_norm_op.h"
#include "ir/sequence.h"
#include "ir/op_registry.h"

vp_status vp_bind_dims(vp_graph *g, const vp_dim_binding *b, int n, vp_error *err) {
    for (int i = 0; i < n; i++) {
        if (b[i].value < 0)
            return vp_fail(err, VP_ERR_USAGE, "dim '%s' bound to negative value %lld", b[i].name, (long long)b[i].value);
    }
    for (int k = 0; k < g->n_inputs; k++) {
        vp_value *v = &g->values[g->inputs[k]];
        if (v->rank < 0)
            return vp_fail(err, VP_ERR_UNSUPPORTED, "%s: graph input '%s' has no declared shape", g->path, v->name);
        for (int d = 0; d < v->rank; d++) {
            if (!v->dim_param[d]) continue;
            int found = -1;
            for (int i = 0; i < n; i++)
                if (!strcmp(b[i].name, v->dim_param[d])) found = i;
            if (found < 0) {
                if (!strcmp(v->dim_param[d], "?"))
                    return vp_fail(err, VP_ERR_INVALID, "%s: graph input '%s' dim %d has neither a value nor a name",
                                   g->path, v->name, d);
                return vp_fail(err, VP_ERR_USAGE,
                               "%s: graph input '%s' dim %d is the symbolic dim '%s'; bind it with --dim %s=VALUE",
                               g->path, v->name, d, v->dim_param[d], v->dim_param[d]);
            }
            v->dims[d] = b[found].value;
            free(v->dim_param[d]);
            v->dim_param[d] = NULL;
        }
    }
    return VP_OK;
}

vp_status vp_bind_all_dims(vp_graph *g, int64_t value, vp_error *err) {
    vp_dim_binding b[64];
    int nb = 0;
    for (int k = 0; k < g->n_inputs; k++) {
        const vp_value *v = &g->values[g->inputs[k]];
        for (int d = 0; d < v->rank; d++)
            if (v->dim_param[d] && nb < 64) b[nb++] = (vp_dim_binding){v->dim_param[d], value};
    }
    return vp_bind_dims(g, b, nb, err);
}

vp_status vp_bind_input_data(vp_graph *g, const char *name, const vp_tensor *t, vp_error *err) {
    int id = vp_graph_find_value(g, name);
    if (id < 0 || !(g->values[id].flags & VP_VAL_INPUT))
        return vp_fail(err, VP_ERR_USAGE, "%s: the model has no graph input named '%s'", g->path, name);
    vp_value *v = &g->values[id];
    char s1[256], s2[256];
    if (v->dtype != t->dtype)
        return vp_fail(err, VP_ERR_INVALID, "%s: input '%s' is %s, the data given is %s", g->path, name,
                       vp_dtype_name(v->dtype), vp_dtype_name(t->dtype));
    int same = v->rank == t->rank;
    for (int d = 0; same && d < t->rank; d++)
        same = v->dim_param[d] || v->dims[d] == t->dims[d];
    if (!same)
        return vp_fail(err, VP_ERR_INVALID, "%s: input '%s' has shape %s, the data given has shape %s", g->path, name,
                       vp_shape_str(v->rank, v->dims, s1, sizeof s1), vp_shape_str(t->rank, t->dims, s2, sizeof s2));
    for (int d = 0; d < t->rank; d++) {
        v->dims[d] = t->dims[d];
        free(v->dim_param[d]);
        v->dim_param[d] = NULL;
    }
    vp_value_set_data(g, id, t->data, VP_DATA_BORROWED);
    v->flags |= VP_VAL_FED;
    return VP_OK;
}

/* Data known ahead of time that folding may use: constants, folded values, integer
 * initializers, and what `frozen` marks.  Float initializers are parameters until the
 * trainable set is chosen: folding them would hide them from training; after it, the
 * training builder marks those the step never writes (train/fold_frozen.h). */
static int foldable_input(const vp_graph *g, int id, const char *frozen) {
    const vp_value *v = &g->values[id];
    if (!v->data && vp_value_numel(v) != 0) return 0;
    if (v->flags & VP_VAL_CONST) return 1;
    if ((v->flags & VP_VAL_INITIALIZER) && !vp_dtype_is_float(v->dtype)) return 1;
    return frozen && frozen[id] && v->data;
}

static vp_status fold_node(vp_graph *g, vp_node *n, const char *frozen, int64_t max_elems, int *folded, vp_error *err) {
    *folded = 0;
    /* a fused cast's node runs through the backends' store wrapper, never folded */
    if (!n->op || (n->op->flags & VP_OP_NO_FOLD) || vp_node_attr(n, VP_CAST_ATTR))
        return VP_OK;
    int shape_only = (n->op->flags & VP_OP_FOLD_SHAPE_ONLY) != 0;
    for (int i = 0; i < n->n_inputs; i++) {
        if (n->inputs[i] < 0) continue;
        if (!shape_only && !foldable_input(g, n->inputs[i], frozen)) return VP_OK;
    }
    for (int i = 0; i < n->n_outputs; i++) {
        if (n->outputs[i] < 0) continue;
        if (vp_value_numel(&g->values[n->outputs[i]]) > max_elems) return VP_OK;
    }
    vp_cpu_fn kernel = vp_host_get(n, "constant folding")->kernel(n->op);
    if (!kernel) return VP_OK;
    int w = n->n_inputs > n->n_outputs ? n->n_inputs : n->n_outputs;
    vp_tensor *tin = malloc(((size_t)w + 1) * sizeof *tin), *tout = malloc(((size_t)w + 1) * sizeof *tout);
    const vp_tensor **pin = malloc(((size_t)w + 1) * sizeof *pin);
    vp_tensor **pout = malloc(((size_t)w + 1) * sizeof *pout);
    vp_status s = VP_OK;
    if (!tin || !tout || !pin || !pout) {
        s = vp_fail(err, VP_ERR_NOMEM, "out of memory folding node '%s'", n->name);
        goto done;
    }
    for (int i = 0; i < n->n_inputs; i++) {
        pin[i] = NULL;
        if (n->inputs[i] < 0) continue;
        tin[i] = vp_value_tensor(&g->values[n->inputs[i]]);
        pin[i] = &tin[i];
    }
    for (int i = 0; i < n->n_outputs; i++) {
        pout[i] = NULL;
        if (n->outputs[i] < 0) continue;
        tout[i] = vp_value_tensor(&g->values[n->outputs[i]]);
        size_t bytes = vp_tensor_nbytes(&tout[i]);
        tout[i].data = calloc(1, bytes ? bytes : 1);
        if (!tout[i].data) s = vp_fail(err, VP_ERR_NOMEM, "out of memory folding node '%s'", n->name);
        pout[i] = &tout[i];
    }
    if (!s) s = kernel(n, pin, pout, err);
    for (int i = 0; i < n->n_outputs; i++) {
        if (!pout[i]) continue;
        if (s) {
            free(tout[i].data);
            continue;
        }
        vp_value_set_data(g, n->outputs[i], tout[i].data, VP_DATA_HEAP);
        g->values[n->outputs[i]].flags |= VP_VAL_CONST;
    }
    if (!s) {
        n->folded = 1;
        *folded = 1;
    }
done:
    free(tin);
    free(tout);
    free(pin);
    free(pout);
    return s;
}

/* Outputs a fused Cast converts on store (VP_CAST_ATTR): the op's shape function gave
 * the dtype it computes, the value holds the dtype stored. */
vp_status vp_infer_store_casts(vp_graph *g, const vp_node *n, vp_error *err) {
    for (int k = 0; n->n_attrs && k < n->n_outputs; k++) {
        vp_dtype from, to;
        if (n->outputs[k] < 0 || !vp_node_cast_output(n, k, &from, &to)) continue;
        vp_value *v = &g->values[n->outputs[k]];
        if (v->dtype != from || !vp_dtype_is_float(from) || !vp_dtype_is_float(to))
            return vp_node_fail(err, VP_ERR_INVALID, n, "output %d is %s, its fused cast converts %s to %s", k,
                                vp_dtype_name(v->dtype), vp_dtype_name(from), vp_dtype_name(to));
        v->dtype = to;
    }
    return VP_OK;
}

/* CastLike(x, like) becomes Cast(x, to = like's dtype) once like is inferred: its output
 * depends on like's dtype alone, so a constant x folds (torch 2.x writes its attention
 * scale as Sqrt(CastLike(c, q))) and no gradient flows from like. */
static vp_status cast_like_to_cast(vp_graph *g, vp_node *n, vp_error *err) {
    if (strcmp(n->op_type, "CastLike") || (n->domain[0] && strcmp(n->domain, "ai.onnx")) || n->n_inputs != 2 ||
        n->inputs[1] < 0 || !vp_value_known(&g->values[n->inputs[1]]))
        return VP_OK;
    char *cast = strdup("Cast");
    if (!cast) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    free(n->op_type);
    n->op_type = cast;
    int like = n->inputs[1], id = (int)(n - g->nodes);
    n->n_inputs = 1;
    vp_value *lv = &g->values[like]; /* like is no longer read here */
    for (int c = 0; c < lv->n_consumers; c++)
        if (lv->consumers[c] == id) {
            lv->consumers[c] = lv->consumers[--lv->n_consumers];
            break;
        }
    return vp_node_add_attr_int(g, id, "to", lv->dtype);
}

static vp_status infer_one(vp_graph *g, int id, int64_t max_elems, int *folded, vp_error *err) {
    vp_node *n = &g->nodes[id];
    *folded = 0;
    vp_status cs = cast_like_to_cast(g, n, err);
    if (cs) return cs;
    n = &g->nodes[id];
    n->op = vp_op_find(n->domain, n->op_type);
    if (!n->op)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "op %s%s%s is not supported", n->domain,
                            n->domain[0] ? "." : "", n->op_type);
    if (n->opset < n->op->min_opset)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "opset %d of this op is older than the oldest supported (%d)",
                            n->opset, n->op->min_opset);
    vp_status s = n->op->shape(g, n, err);
    if (!s) s = vp_infer_store_casts(g, n, err);
    if (!s) s = fold_node(g, n, NULL, max_elems, folded, err);
    return s;
}

vp_status vp_fold_node(vp_graph *g, int node, const char *frozen, int64_t max_elems, int *folded, vp_error *err) {
    int dummy;
    if (!folded) folded = &dummy;
    *folded = 0;
    if (g->nodes[node].folded) return VP_OK;
    vp_status s = fold_node(g, &g->nodes[node], frozen, max_elems, folded, err);
    if (s) vp_error_prefix(err, "%s: ", g->path ? g->path : "graph");
    return s;
}

vp_status vp_infer_node(vp_graph *g, int node, int64_t fold_max_elems, int *folded, vp_error *err) {
    int dummy;
    vp_status s = infer_one(g, node, fold_max_elems > 0 ? fold_max_elems : VP_FOLD_MAX_ELEMS, folded ? folded : &dummy, err);
    if (s) vp_error_prefix(err, "%s: ", g->path ? g->path : "graph");
    return s;
}

static vp_status infer_all(vp_graph *g, const vp_infer_opts *opts, vp_infer_result *res, vp_seq_table *seqs,
                           vp_error *err);

vp_status vp_infer(vp_graph *g, const vp_infer_opts *opts, vp_infer_result *res, vp_error *err) {
    vp_seq_table seqs = {0};
    vp_status s = infer_all(g, opts, res, &seqs, err);
    vp_seq_table_free(&seqs);
    return s;
}

static vp_status infer_all(vp_graph *g, const vp_infer_opts *opts, vp_infer_result *res, vp_seq_table *seqs,
                           vp_error *err) {
    vp_infer_opts dflt = {0, 0};
    if (!opts) opts = &dflt;
    int64_t max_elems = opts->fold_max_elems > 0 ? opts->fold_max_elems : VP_FOLD_MAX_ELEMS;
    vp_infer_result local;
    if (!res) res = &local;
    memset(res, 0, sizeof *res);
    vp_status first = VP_OK;

    for (int k = 0; k < g->n_inputs; k++) {
        const vp_value *v = &g->values[g->inputs[k]];
        if (v->rank < 0)
            return vp_fail(err, VP_ERR_UNSUPPORTED, "%s: graph input '%s' has no declared shape", g->path, v->name);
        for (int d = 0; d < v->rank; d++)
            if (v->dim_param[d])
                return vp_fail(err, VP_ERR_USAGE, "%s: graph input '%s' dim %d is the symbolic dim '%s'; bind it with --dim %s=VALUE",
                               g->path, v->name, d, v->dim_param[d], v->dim_param[d]);
        if (!vp_dtype_size(v->dtype) || v->dtype == VP_STRING)
            return vp_fail(err, VP_ERR_UNSUPPORTED, "%s: graph input '%s' has unsupported dtype %s", g->path, v->name,
                           vp_dtype_name(v->dtype));
        int64_t bytes = (int64_t)vp_dtype_size(v->dtype);
        for (int d = 0; d < v->rank; d++) {
            if (v->dims[d] && bytes > INT64_MAX / v->dims[d]) {
                char buf[256];
                return vp_fail(err, VP_ERR_INVALID, "%s: graph input '%s' of shape %s is too large (its size overflows)",
                               g->path, v->name, vp_shape_str(v->rank, v->dims, buf, sizeof buf));
            }
            bytes *= v->dims[d];
        }
    }

    for (int i = 0; i < g->n_nodes; i++) {
        vp_node *n = &g->nodes[i];
        int inputs_known = 1, sequence = vp_sequence_is(n), seq_read = -1;
        for (int k = 0; k < n->n_inputs; k++) {
            int v = n->inputs[k];
            if (v < 0 || vp_value_known(&g->values[v])) continue;
            if (vp_sequence_holds(seqs, v)) {
                if (!sequence) seq_read = v;
                continue;
            }
            inputs_known = 0;
        }
        vp_status s;
        vp_error e;
        int control = vp_control_is(n), attention = vp_attention_op_is(n), rms = vp_rms_norm_op_is(n);
        int einsum = vp_einsum_op_is(n), group_norm = vp_group_norm_op_is(n), col2im = vp_col2im_op_is(n);
        int dft = vp_dft_op_is(n), expanded = attention || rms || einsum || group_norm || col2im || dft;
        int known_op = control || sequence || expanded || vp_op_find(n->domain, n->op_type);
        if (!inputs_known && opts->keep_going && known_op)
            continue; /* downstream of something unsupported: already reported */
        if (seq_read >= 0) {
            s = vp_node_fail(&e, VP_ERR_UNSUPPORTED, n,
                             "reads '%s', a sequence: only SequenceAt, SequenceLength, ConcatFromSequence, "
                             "SequenceInsert and SequenceErase may read one (sequences are expanded ahead of time)",
                             g->values[seq_read].name);
        } else if (!inputs_known && known_op) {
            s = vp_node_fail(&e, VP_ERR_INVALID, n, "an input has no known shape");
        } else if (sequence || expanded) {
            int added = 0;
            s = sequence     ? vp_sequence_expand(g, i, seqs, &added, &e)
                : attention  ? vp_attention_op_expand(g, i, &added, &e)
                : einsum     ? vp_einsum_op_expand(g, i, &added, &e)
                : group_norm ? vp_group_norm_op_expand(g, i, &added, &e)
                : col2im     ? vp_col2im_op_expand(g, i, &added, &e)
                : dft        ? vp_dft_op_expand(g, i, &added, &e)
                             : vp_rms_norm_op_expand(g, i, &added, &e);
            if (!s) i += added - 1; /* the expansion's nodes are inferred already */
            if (!s) continue;
            n = &g->nodes[i];
        } else if (control) {
            int added = 0;
            s = vp_control_expand(g, i, &added, &e);
            if (!s) i += added - 1; /* the expansion's nodes are inferred already */
            if (!s) continue;
            n = &g->nodes[i];
        } else {
            int folded = 0;
            s = infer_one(g, i, max_elems, &folded, &e);
            res->n_folded += folded;
        }
        if (!s) continue;
        if (!opts->keep_going || s != VP_ERR_UNSUPPORTED) {
            free(res->unsupported);
            res->unsupported = NULL;
            if (err) {
                *err = e;
                vp_error_prefix(err, "%s: ", g->path);
            }
            return s;
        }
        int *u = realloc(res->unsupported, (size_t)(res->n_unsupported + 1) * sizeof *u);
        if (!u) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
        res->unsupported = u;
        res->unsupported[res->n_unsupported++] = i;
        if (!first) {
            first = s;
            if (err) {
                *err = e;
                vp_error_prefix(err, "%s: ", g->path);
            }
        }
        n->op = NULL;
    }
    if (res == &local) free(local.unsupported);
    for (int k = 0; !first && k < g->n_outputs; k++)
        if (vp_sequence_holds(seqs, g->outputs[k]))
            return vp_fail(err, VP_ERR_UNSUPPORTED,
                           "%s: graph output '%s' is a sequence: only tensors leave a graph here (sequences are "
                           "expanded into their tensors ahead of time)", g->path, g->values[g->outputs[k]].name);
    return first;
}
