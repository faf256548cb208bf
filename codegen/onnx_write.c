/* IR -> ModelProto (see onnx_write.h for what goes where).
 *
 * The message is built on the heap and released with protobuf-c's free_unpacked,
 * which frees every pointer field; initializer bytes are borrowed from the graph
 * (no copy of the weights) and detached before that. */
#include "onnx_write_internal.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/atomic_file.h"
#include "onnx/attr_proto.h"

/* Gradients are written as "<param>_grad", ONNX Runtime's naming, where that name is free. */
static void name_gradients(writer *w) {
    const vp_training *t = w->t;
    for (int i = 0; t && t->grads && i < t->n_params; i++) {
        int gv = t->grads[i];
        if (gv < 0 || w->alias[gv]) continue;
        const char *p = w->g->values[t->params[i]].name;
        size_t len = strlen(p) + 6;
        char *name = w_calloc(w, len, 1);
        if (!name) return;
        snprintf(name, len, "%s_grad", p);
        if (vp_graph_find_value(w->g, name) >= 0) free(name);
        else w->alias[gv] = name;
    }
}

/* ---- what each value becomes ---- */

static void mark_outputs(writer *w, int *outs, int *n_outs) {
    const vp_graph *g = w->g;
    const vp_training *t = w->t;
    int n = 0;
#define ADD_OUT(v)                                                  \
    do {                                                            \
        int v_ = (v);                                               \
        if (v_ >= 0 && !w->is_out[v_]) {                            \
            w->is_out[v_] = 1;                                      \
            outs[n++] = v_;                                         \
        }                                                           \
    } while (0)
    for (int i = 0; i < g->n_outputs; i++) ADD_OUT(g->outputs[i]);
    if (t) {
        ADD_OUT(t->loss);
        for (int i = 0; i < t->n_carry; i++) ADD_OUT(t->carry[i].to);
        for (int i = 0; i < t->n_params && t->grads; i++)
            if (t->grads[i] >= 0 && (g->values[t->grads[i]].flags & VP_VAL_OUTPUT)) ADD_OUT(t->grads[i]);
    }
    for (int v = 0; v < g->n_values; v++)
        if (g->values[v].flags & VP_VAL_OUTPUT) ADD_OUT(v);
#undef ADD_OUT
    *n_outs = n;
}

static vp_status classify(writer *w, const int *outs, int n_outs) {
    const vp_graph *g = w->g;
    for (int i = 0; i < g->n_nodes; i++) {
        const vp_node *n = &g->nodes[i];
        if (n->folded) continue;
        for (int k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] >= 0) w->need[n->inputs[k]] = 1;
        for (int k = 0; k < n->n_outputs; k++)
            if (n->outputs[k] >= 0) w->need[n->outputs[k]] = 1;
    }
    for (int i = 0; i < n_outs; i++) w->need[outs[i]] = 1;
    for (int i = 0; i < g->n_inputs; i++) w->need[g->inputs[i]] = 1;
    for (int v = 0; v < g->n_values; v++) {
        if (!w->need[v]) continue;
        const vp_value *val = &g->values[v];
        if (!vp_value_known(val))
            return vp_fail(w->err, VP_ERR_INVALID, "%s: value '%s' has no inferred dtype and shape; infer the graph before writing it",
                           w->path, val->name);
        if (val->producer >= 0 && !g->nodes[val->producer].folded) w->role[v] = ROLE_NODE;
        else if (val->flags & VP_VAL_INPUT) w->role[v] = ROLE_INPUT;
        else if (val->data || vp_value_numel(val) == 0 || (val->flags & VP_VAL_STATE)) {
            /* in a training step, float data that is neither trained nor carried
             * (constants, frozen weights) is a Constant node: as an initializer it would
             * read as a parameter; a graph without a step keeps its initializers */
            unsigned init = w->t ? VP_VAL_PARAM | VP_VAL_STATE : VP_VAL_PARAM | VP_VAL_STATE | VP_VAL_INITIALIZER;
            if (val->flags & init) w->role[v] = ROLE_INIT;
            else w->role[v] = vp_dtype_is_float(val->dtype) ? ROLE_CONST : ROLE_INIT;
        } else
            return vp_fail(w->err, VP_ERR_INVALID, "%s: value '%s' has no producer, no data and is not a graph input",
                           w->path, val->name);
        if ((w->role[v] == ROLE_INIT || w->role[v] == ROLE_CONST) && vp_dtype_size(val->dtype) == 0)
            return vp_fail(w->err, VP_ERR_UNSUPPORTED, "%s: value '%s' is %s, which the writer cannot store", w->path,
                           val->name, vp_dtype_name(val->dtype));
    }
    return VP_OK;
}

/* ---- protos ---- */

static Onnx__ValueInfoProto *value_info(writer *w, int id) {
    const vp_value *v = &w->g->values[id];
    Onnx__ValueInfoProto *vi = w_calloc(w, 1, sizeof *vi);
    Onnx__TypeProto *tp = w_calloc(w, 1, sizeof *tp);
    Onnx__TypeProto__Tensor *tt = w_calloc(w, 1, sizeof *tt);
    Onnx__TensorShapeProto *sh = w_calloc(w, 1, sizeof *sh);
    if (!vi || !tp || !tt || !sh) {
        free(vi), free(tp), free(tt), free(sh);
        return NULL;
    }
    onnx__value_info_proto__init(vi);
    onnx__type_proto__init(tp);
    onnx__type_proto__tensor__init(tt);
    onnx__tensor_shape_proto__init(sh);
    vi->type = tp;
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tp->tensor_type = tt;
    tt->has_elem_type = 1;
    tt->elem_type = (int32_t)v->dtype;
    tt->shape = sh;
    vi->name = w_strdup(w, vname(w, id));
    sh->dim = w_calloc(w, (size_t)v->rank, sizeof *sh->dim);
    if (!sh->dim) return vi;
    for (int d = 0; d < v->rank; d++) {
        Onnx__TensorShapeProto__Dimension *dim = w_calloc(w, 1, sizeof *dim);
        if (!dim) break;
        onnx__tensor_shape_proto__dimension__init(dim);
        dim->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
        dim->dim_value = v->dims[d];
        sh->dim[sh->n_dim++] = dim;
    }
    return vi;
}

/* An initializer whose bytes are the graph's (detached before the message is freed). */
static Onnx__TensorProto *initializer(writer *w, int id) {
    const vp_value *v = &w->g->values[id];
    Onnx__TensorProto *tp = w_calloc(w, 1, sizeof *tp);
    if (!tp) return NULL;
    onnx__tensor_proto__init(tp);
    tp->name = w_strdup(w, vname(w, id));
    tp->has_data_type = 1;
    tp->data_type = (int32_t)v->dtype;
    tp->dims = w_calloc(w, (size_t)v->rank, sizeof *tp->dims);
    if (tp->dims) {
        tp->n_dims = (size_t)v->rank;
        for (int d = 0; d < v->rank; d++) tp->dims[d] = v->dims[d];
    }
    vp_tensor t = vp_value_tensor(v);
    tp->has_raw_data = 1;
    tp->raw_data.len = vp_tensor_nbytes(&t);
    tp->raw_data.data = tp->raw_data.len ? (uint8_t *)v->data : NULL;
    if (tp->raw_data.len && !v->data) { /* state that starts at zero */
        void **z = realloc(w->zeros, (size_t)(w->n_zeros + 1) * sizeof *z);
        if (!z) {
            w->oom = 1;
            return tp;
        }
        w->zeros = z;
        tp->raw_data.data = w->zeros[w->n_zeros++] = w_calloc(w, 1, tp->raw_data.len);
    }
    return tp;
}

static char **names_of(writer *w, const int *ids, int n) {
    char **s = w_calloc(w, (size_t)n, sizeof *s);
    if (!s) return NULL;
    for (int k = 0; k < n; k++) s[k] = w_strdup(w, ids[k] >= 0 ? vname(w, ids[k]) : "");
    return s;
}

static vp_status node_proto(writer *w, const vp_node *n, Onnx__NodeProto **out) {
    Onnx__NodeProto *np = w_calloc(w, 1, sizeof *np);
    *out = np;
    if (!np) return VP_OK;
    onnx__node_proto__init(np);
    np->name = w_strdup(w, n->name);
    np->op_type = w_strdup(w, n->op_type);
    np->domain = w_strdup(w, n->domain);
    /* trailing omitted inputs and outputs are dropped, inner ones stay as "" */
    int n_in = n->n_inputs, n_out = n->n_outputs;
    while (n_in > 0 && n->inputs[n_in - 1] < 0) n_in--;
    while (n_out > 0 && n->outputs[n_out - 1] < 0) n_out--;
    np->input = names_of(w, n->inputs, n_in);
    if (np->input) np->n_input = (size_t)n_in;
    np->output = names_of(w, n->outputs, n_out);
    if (np->output) np->n_output = (size_t)n_out;
    /* a fused Cast (VP_CAST_ATTR) is written apart again, as standard ONNX: the node
     * writes "<output>/before_cast" and a Cast node after it (fused_casts) the output */
    for (int k = 0; k < n_out && np->output; k++)
        if (np->output[k] && vp_node_cast_output(n, k, NULL, NULL)) {
            char name[1100];
            snprintf(name, sizeof name, "%s/before_cast", np->output[k]);
            free(np->output[k]); /* the tree owns its strings */
            np->output[k] = w_strdup(w, name);
        }
    np->attribute = w_calloc(w, (size_t)n->n_attrs, sizeof *np->attribute);
    if (!np->attribute) return VP_OK;
    for (int a = 0; a < n->n_attrs; a++) {
        if (!strcmp(n->attrs[a].name, VP_CAST_ATTR)) continue;
        Onnx__AttributeProto *ap = w_calloc(w, 1, sizeof *ap);
        if (!ap) return VP_OK;
        np->attribute[np->n_attribute++] = ap;
        vp_status s = vp_attr_to_proto(&n->attrs[a], ap, w->err);
        if (s == VP_ERR_NOMEM) w->oom = 1;
        else if (s) {
            vp_error_prefix(w->err, "%s: node '%s' (%s): ", w->path, n->name, n->op_type);
            return s;
        }
    }
    return VP_OK;
}

/* The Casts a node with fused Casts stands for, appended to gp's nodes. */
static vp_status fused_casts(writer *w, const vp_node *n, Onnx__GraphProto *gp) {
    for (int k = 0; k < n->n_outputs; k++) {
        vp_dtype from, to;
        if (n->outputs[k] < 0 || !vp_node_cast_output(n, k, &from, &to)) continue;
        char name[1100], src[1100];
        snprintf(name, sizeof name, "%s/cast_%d", n->name, k);
        snprintf(src, sizeof src, "%s/before_cast", vname(w, n->outputs[k]));
        vp_attr a = {.name = "to", .type = VP_ATTR_INT, .i = to};
        vp_node c = {.name = name, .op_type = "Cast", .domain = "", .n_inputs = 1, .inputs = &n->outputs[k],
                     .n_outputs = 1, .outputs = &n->outputs[k], .n_attrs = 1, .attrs = &a};
        Onnx__NodeProto *np = NULL;
        vp_status s = node_proto(w, &c, &np);
        if (s || !np) return s;
        if (np->input) {
            free(np->input[0]);
            np->input[0] = w_strdup(w, src);
        }
        gp->node[gp->n_node++] = np;
    }
    return VP_OK;
}

static int n_fused_casts(const vp_node *n) {
    int c = 0;
    for (int k = 0; k < n->n_outputs; k++) c += n->outputs[k] >= 0 && vp_node_cast_output(n, k, NULL, NULL);
    return c;
}

/* A float constant as a Constant node, named after the folded node that made it. */
static vp_status constant_node(writer *w, int v, Onnx__NodeProto **out) {
    const vp_graph *g = w->g;
    const vp_value *val = &g->values[v];
    char name[1100];
    if (val->producer >= 0 && !strcmp(g->nodes[val->producer].op_type, "Constant") && g->nodes[val->producer].n_outputs == 1)
        snprintf(name, sizeof name, "%s", g->nodes[val->producer].name);
    else
        snprintf(name, sizeof name, "%s/Constant", val->name);
    vp_tensor t = vp_value_tensor(val);
    vp_attr a = {.name = "value", .type = VP_ATTR_TENSOR, .t = &t};
    vp_node n = {.name = name, .op_type = "Constant", .domain = "", .n_outputs = 1, .outputs = &v,
                 .n_attrs = 1, .attrs = &a};
    return node_proto(w, &n, out);
}

/* ---- the model ---- */

static vp_status build(writer *w, const vp_onnx_write_opts *o) {
    const vp_graph *g = w->g;
    int *outs = malloc(((size_t)g->n_values + 1) * sizeof *outs);
    if (!outs) return vp_fail(w->err, VP_ERR_NOMEM, "out of memory");
    int n_outs = 0;
    mark_outputs(w, outs, &n_outs);
    name_gradients(w);
    vp_status s = classify(w, outs, n_outs);
    if (s) {
        free(outs);
        return s;
    }
    Onnx__ModelProto *mp = w->mp;
    Onnx__GraphProto *gp = w->gp;
    mp->producer_name = w_strdup(w, "onnx-vplan");
    mp->producer_version = w_strdup(w, "0.1.0");
    if (o && o->doc_string) mp->doc_string = w_strdup(w, o->doc_string);
    gp->name = w_strdup(w, g->graph_name && g->graph_name[0] ? g->graph_name : "training_step");

    int n_const = 0, n_init = 0, n_nodes = 0;
    for (int v = 0; v < g->n_values; v++) {
        n_const += w->role[v] == ROLE_CONST;
        n_init += w->role[v] == ROLE_INIT;
    }
    for (int i = 0; i < g->n_nodes; i++) n_nodes += !g->nodes[i].folded ? 1 + n_fused_casts(&g->nodes[i]) : 0;

    /* nodes: constants first, then the graph's nodes in order */
    gp->node = w_calloc(w, (size_t)(n_const + n_nodes), sizeof *gp->node);
    for (int v = 0; v < g->n_values && gp->node && !s && !w->oom; v++)
        if (w->role[v] == ROLE_CONST) {
            s = constant_node(w, v, &gp->node[gp->n_node]);
            if (gp->node[gp->n_node]) gp->n_node++;
        }
    for (int i = 0; i < g->n_nodes && gp->node && !s && !w->oom; i++)
        if (!g->nodes[i].folded) {
            s = node_proto(w, &g->nodes[i], &gp->node[gp->n_node]);
            if (gp->node[gp->n_node]) gp->n_node++;
            if (!s && !w->oom) s = fused_casts(w, &g->nodes[i], gp);
        }

    gp->initializer = w_calloc(w, (size_t)n_init, sizeof *gp->initializer);
    for (int v = 0; v < g->n_values && gp->initializer && !w->oom; v++)
        if (w->role[v] == ROLE_INIT) {
            gp->initializer[gp->n_initializer] = initializer(w, v);
            if (gp->initializer[gp->n_initializer]) gp->n_initializer++;
        }

    /* inputs: the graph's order, then any other value marked as an input */
    gp->input = w_calloc(w, (size_t)g->n_values, sizeof *gp->input);
    unsigned char *listed = w_calloc(w, (size_t)g->n_values, 1);
    for (int i = 0; i < g->n_inputs && gp->input && listed && !w->oom; i++) {
        int v = g->inputs[i];
        if (w->role[v] != ROLE_INPUT || listed[v]) continue;
        listed[v] = 1;
        if ((gp->input[gp->n_input] = value_info(w, v))) gp->n_input++;
    }
    for (int v = 0; v < g->n_values && gp->input && listed && !w->oom; v++)
        if (w->role[v] == ROLE_INPUT && !listed[v])
            if ((gp->input[gp->n_input] = value_info(w, v))) gp->n_input++;
    free(listed);

    gp->output = w_calloc(w, (size_t)n_outs, sizeof *gp->output);
    for (int i = 0; i < n_outs && gp->output && !w->oom; i++)
        if ((gp->output[gp->n_output] = value_info(w, outs[i]))) gp->n_output++;

    /* value_info: every value a node (or a Constant) defines that is not an output */
    gp->value_info = w_calloc(w, (size_t)g->n_values, sizeof *gp->value_info);
    for (int v = 0; v < g->n_values && gp->value_info && !w->oom; v++)
        if ((w->role[v] == ROLE_NODE || w->role[v] == ROLE_CONST) && !w->is_out[v])
            if ((gp->value_info[gp->n_value_info] = value_info(w, v))) gp->n_value_info++;
    free(outs);

    if (!s) s = vp_onnx_write_opsets(w, n_const > 0);
    if (!s) vp_onnx_write_metadata(w);
    if (!s && w->oom) s = vp_fail(w->err, VP_ERR_NOMEM, "%s: out of memory building the ONNX model", w->path);
    return s;
}

static vp_status write_file(writer *w) {
    size_t size = onnx__model_proto__get_packed_size(w->mp);
    if (size > (size_t)INT32_MAX)
        return vp_fail(w->err, VP_ERR_UNSUPPORTED,
                       "%s: the training graph is %zu bytes, over protobuf's 2 GB limit (external data is not written yet)",
                       w->path, size);
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) return vp_fail(w->err, VP_ERR_NOMEM, "%s: out of memory packing %zu bytes", w->path, size);
    onnx__model_proto__pack(w->mp, buf);
    vp_status s = VP_OK;
    vp_atomic_file af;
    s = vp_atomic_file_open(&af, w->path, w->err);
    if (!s) {
        fwrite(buf, 1, size, af.f);
        s = vp_atomic_file_commit(&af, w->err);
    }
    free(buf);
    return s;
}

vp_status vp_onnx_write_graph(const vp_graph *g, const char *path, const vp_onnx_write_opts *o, vp_error *err) {
    writer w = {.g = g, .t = o ? o->training : NULL, .path = path, .err = err};
    w.need = calloc((size_t)g->n_values + 1, 1);
    w.role = calloc((size_t)g->n_values + 1, 1);
    w.is_out = calloc((size_t)g->n_values + 1, 1);
    w.alias = calloc((size_t)g->n_values + 1, sizeof *w.alias);
    w.mp = calloc(1, sizeof *w.mp);
    w.gp = calloc(1, sizeof *w.gp);
    vp_status s = VP_OK;
    if (!w.need || !w.role || !w.is_out || !w.alias || !w.mp || !w.gp) {
        s = vp_fail(err, VP_ERR_NOMEM, "%s: out of memory", path);
        free(w.mp);
        free(w.gp);
        w.mp = NULL;
    } else {
        onnx__model_proto__init(w.mp);
        onnx__graph_proto__init(w.gp);
        w.mp->graph = w.gp;
        s = build(&w, o);
        if (!s) s = write_file(&w);
        /* the initializers' bytes are the graph's: detach them before freeing */
        for (size_t i = 0; i < w.gp->n_initializer; i++) {
            w.gp->initializer[i]->raw_data.data = NULL;
            w.gp->initializer[i]->raw_data.len = 0;
        }
        onnx__model_proto__free_unpacked(w.mp, NULL);
    }
    for (int i = 0; i < w.n_zeros; i++) free(w.zeros[i]);
    free(w.zeros);
    free(w.need);
    free(w.role);
    free(w.is_out);
    for (int v = 0; w.alias && v < g->n_values; v++) free(w.alias[v]);
    free(w.alias);
    return s;
}
