/* ModelProto -> vp_graph.  Validates what the rest of the pipeline relies on: one
 * definition per value, every input defined, no cycle (nodes are re-ordered
 * topologically when an exporter wrote them out of order). */
#include "onnx/onnx_load.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/attr_schema.h"
#include "ir/op_registry.h"
#include "onnx.pb-c.h"
#include "onnx/attr_proto.h"
#include "onnx/torch_meta.h"
#include "onnx/tensor_proto.h"
#include "onnx/wire_depth.h"

/* protobuf's own bound on one message; ONNX stores larger weights as external data */
#define VP_ONNX_MAX_BYTES ((size_t)INT32_MAX)

static void free_proto(void *p) { onnx__model_proto__free_unpacked(p, NULL); }

/* A length-delimited field's bytes, or 0 past the end (protobuf's wire format). */
static int wire_bytes(const uint8_t *p, size_t len, size_t *pos, uint32_t *field, const uint8_t **data, size_t *n) {
    uint64_t v[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        int shift = 0;
        while (*pos < len && shift < 64) {
            uint8_t b = p[(*pos)++];
            v[k] |= (uint64_t)(b & 0x7f) << shift;
            if (!(b & 0x80)) break;
            shift += 7;
        }
        if ((v[0] & 7) != 2) return 0; /* only length-delimited fields in StringStringEntryProto */
    }
    *field = (uint32_t)(v[0] >> 3);
    if (v[1] > len - *pos) return 0;
    *data = p + *pos;
    *n = (size_t)v[1];
    *pos += (size_t)v[1];
    return 1;
}

/* The metadata_props entry named key among m's unknown fields with tag (a field newer
 * than Debian's onnx.proto, 1.12, which protobuf-c keeps unparsed): a heap copy of its
 * value the caller frees, or NULL. */
static char *unknown_metadata(const ProtobufCMessage *m, unsigned tag, const char *key) {
    size_t klen = strlen(key);
    for (unsigned u = 0; u < m->n_unknown_fields; u++) {
        const ProtobufCMessageUnknownField *f = &m->unknown_fields[u];
        if (f->tag != tag || f->wire_type != PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED) continue;
        const uint8_t *k = NULL, *v = NULL, *d;
        size_t kn = 0, vn = 0, n, pos = 0;
        uint32_t field;
        /* protobuf-c keeps an unknown field's bytes after its tag: the length, then the entry */
        while (pos < f->len && (f->data[pos++] & 0x80)) {}
        while (pos < f->len && wire_bytes(f->data, f->len, &pos, &field, &d, &n)) {
            if (field == 1) k = d, kn = n;
            if (field == 2) v = d, vn = n;
        }
        if (k && kn == klen && !memcmp(k, key, klen)) {
            char *out = malloc(vn + 1);
            if (!out) return NULL;
            if (vn) memcpy(out, v, vn);
            out[vn] = 0;
            return out;
        }
    }
    return NULL;
}

/* NodeProto.metadata_props is field 9 since ONNX 1.16; torch 2.x's exporter writes the
 * module stack a node came from under the first key, as a Python list of strings, and the
 * FX node it came from under the second (onnx/torch_meta.h reads both). */
#define NAME_SCOPES_KEY "pkg.torch.onnx.name_scopes"
#define FX_NODE_KEY "pkg.torch.onnx.fx_node"

static vp_status build_scope(const Onnx__GraphProto *gp, vp_graph *g, vp_graph *root, const char *model,
                             const char *base_dir, vp_error *err);

/* Declared dtype and shape of a graph input. */
static vp_status read_value_info(const Onnx__ValueInfoProto *vi, vp_value *v, const char *model, vp_error *err) {
    const Onnx__TypeProto *tp = vi->type;
    if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type)
        return vp_fail(err, VP_ERR_UNSUPPORTED, "%s: graph input '%s' is not a tensor (sequences, maps and optionals are not supported)",
                       model, v->name);
    const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
    v->dtype = (vp_dtype)tt->elem_type;
    if (!tt->shape) {
        v->rank = -1;
        return VP_OK;
    }
    if (tt->shape->n_dim > VP_MAX_RANK)
        return vp_fail(err, VP_ERR_UNSUPPORTED, "%s: graph input '%s' has rank %zu (at most %d supported)", model,
                       v->name, tt->shape->n_dim, VP_MAX_RANK);
    v->rank = (int)tt->shape->n_dim;
    for (int d = 0; d < v->rank; d++) {
        const Onnx__TensorShapeProto__Dimension *dim = tt->shape->dim[d];
        if (dim->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
            if (dim->dim_value < 0)
                return vp_fail(err, VP_ERR_INVALID, "%s: graph input '%s' has negative dim %lld at axis %d", model,
                               v->name, (long long)dim->dim_value, d);
            v->dims[d] = dim->dim_value;
        } else {
            const char *p = dim->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM && dim->dim_param &&
                                    dim->dim_param[0] ? dim->dim_param : "?";
            v->dim_param[d] = strdup(p);
            if (!v->dim_param[d]) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
            v->dims[d] = -1;
        }
    }
    return VP_OK;
}

/* Edges into node `self` from the producers of what its graph attributes read (a Loop
 * body's values of the enclosing scope): dependencies its inputs do not list.  Names
 * defined inside a body match no producer of the enclosing graph. */
typedef struct sub_edges_ctx {
    vp_graph *names;
    const int *producer;
    int self, pass;
    int *adj_start, *indeg, *adj, *fill;
} sub_edges_ctx;

static void sub_edges(const Onnx__NodeProto *np, sub_edges_ctx *c) {
    for (size_t a = 0; a < np->n_attribute; a++) {
        const Onnx__GraphProto *sg = np->attribute[a]->g;
        for (size_t j = 0; sg && j < sg->n_node; j++) {
            const Onnx__NodeProto *sn = sg->node[j];
            for (size_t k = 0; k < sn->n_input; k++) {
                const char *in = sn->input[k];
                int id = in && *in ? vp_graph_find_value(c->names, in) : -1;
                if (id < 0 || c->producer[id] == c->self) continue;
                int p = c->producer[id];
                if (!c->pass) {
                    c->adj_start[p + 1]++;
                    c->indeg[c->self]++;
                } else {
                    c->adj[c->adj_start[p] + c->fill[p]++] = c->self;
                }
            }
            sub_edges(sn, c);
        }
    }
}

typedef struct name_def {
    const char *name;
    int node; /* defining node, -1 for inputs/initializers */
} name_def;

/* Orders nodes so each comes after the producers of its inputs; keeps the model's
 * order wherever it is already valid. */
static vp_status topo_order(const Onnx__GraphProto *gp, vp_graph *g, int *order, const char *model, vp_error *err) {
    int n = (int)gp->n_node;
    /* producer of each name, via a scratch graph of names */
    vp_graph *names = vp_graph_new();
    int *producer = NULL, *indeg = NULL, *heap = NULL, *adj_start = NULL, *adj = NULL;
    vp_status s = VP_OK;
    if (!names) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    size_t total_out = 0;
    for (int i = 0; i < n; i++) total_out += gp->node[i]->n_output;
    producer = malloc((total_out + 1) * sizeof *producer);
    indeg = calloc((size_t)n + 1, sizeof *indeg);
    adj_start = calloc((size_t)n + 2, sizeof *adj_start);
    heap = malloc(((size_t)n + 1) * sizeof *heap);
    if (!producer || !indeg || !adj_start || !heap) {
        s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int i = 0; i < n; i++) {
        const Onnx__NodeProto *np = gp->node[i];
        for (size_t k = 0; k < np->n_output; k++) {
            const char *o = np->output[k];
            if (!o || !*o) continue;
            if (vp_graph_find_value(g, o) >= 0) {
                s = vp_fail(err, VP_ERR_INVALID, "%s: value '%s' is defined twice: as a graph input or initializer and by node '%s' (%s)",
                            model, o, np->name ? np->name : "", np->op_type ? np->op_type : "");
                goto done;
            }
            int id = vp_graph_find_value(names, o);
            if (id >= 0) {
                const Onnx__NodeProto *first = gp->node[producer[id]];
                s = vp_fail(err, VP_ERR_INVALID, "%s: value '%s' is defined twice: by node '%s' (%s) and node '%s' (%s)",
                            model, o, first->name ? first->name : "", first->op_type ? first->op_type : "",
                            np->name ? np->name : "", np->op_type ? np->op_type : "");
                goto done;
            }
            id = vp_graph_add_value(names, o);
            if (id < 0) {
                s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
                goto done;
            }
            producer[id] = i;
        }
    }
    /* edges producer -> consumer, counted then filled (CSR) */
    for (int pass = 0; pass < 2; pass++) {
        int *fill = pass ? calloc((size_t)n + 1, sizeof *fill) : NULL;
        if (pass) adj = malloc(((size_t)adj_start[n] + 1) * sizeof *adj); /* the edges pass 0 counted */
        if (pass && (!fill || !adj)) {
            free(fill);
            s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
            goto done;
        }
        for (int i = 0; i < n; i++) {
            const Onnx__NodeProto *np = gp->node[i];
            for (size_t k = 0; k < np->n_input; k++) {
                const char *in = np->input[k];
                if (!in || !*in) continue;
                int id = vp_graph_find_value(names, in);
                if (id < 0) {
                    if (!pass && vp_graph_find_value(g, in) < 0) {
                        s = vp_fail(err, VP_ERR_INVALID,
                                    "%s: node '%s' (%s): input '%s' is used but never defined (no node, initializer or graph input produces it)",
                                    model, np->name ? np->name : "", np->op_type ? np->op_type : "", in);
                        free(fill);
                        goto done;
                    }
                    continue;
                }
                int p = producer[id];
                if (!pass) {
                    adj_start[p + 1]++;
                    indeg[i]++;
                } else {
                    adj[adj_start[p] + fill[p]++] = i;
                }
            }
            sub_edges_ctx c = {names, producer, i, pass, adj_start, indeg, adj, fill};
            sub_edges(np, &c);
        }
        if (!pass)
            for (int i = 0; i < n; i++) adj_start[i + 1] += adj_start[i];
        free(fill);
    }
    /* Kahn's algorithm with a min-heap on the original index: stable order */
    int hn = 0, done_count = 0;
    for (int i = 0; i < n; i++)
        if (!indeg[i]) heap[hn++] = i; /* ascending, already a heap */
    while (hn) {
        int top = heap[0];
        heap[0] = heap[--hn];
        for (int i = 0;;) { /* sift down */
            int l = 2 * i + 1, r = l + 1, m = i;
            if (l < hn && heap[l] < heap[m]) m = l;
            if (r < hn && heap[r] < heap[m]) m = r;
            if (m == i) break;
            int t = heap[i]; heap[i] = heap[m]; heap[m] = t;
            i = m;
        }
        order[done_count++] = top;
        for (int e = adj_start[top]; e < adj_start[top + 1]; e++) {
            int c = adj[e];
            if (--indeg[c] == 0) {
                int i = hn++;
                heap[i] = c;
                while (i && heap[(i - 1) / 2] > heap[i]) { /* sift up */
                    int pi = (i - 1) / 2, t = heap[i];
                    heap[i] = heap[pi]; heap[pi] = t;
                    i = pi;
                }
            }
        }
    }
    if (done_count < n) {
        int stuck = 0;
        for (int i = 0; i < n; i++)
            if (indeg[i]) { stuck = i; break; }
        s = vp_fail(err, VP_ERR_INVALID, "%s: the graph has a cycle through node '%s' (%s)", model,
                    gp->node[stuck]->name ? gp->node[stuck]->name : "", gp->node[stuck]->op_type ? gp->node[stuck]->op_type : "");
    }
done:
    free(producer);
    free(indeg);
    free(adj_start);
    free(adj);
    free(heap);
    vp_graph_free(names);
    return s;
}

static vp_status build_graph(Onnx__ModelProto *mp, vp_graph *g, const char *model, const char *base_dir, vp_error *err) {
    const Onnx__GraphProto *gp = mp->graph;
    g->ir_version = mp->has_ir_version ? mp->ir_version : 0;
    for (size_t i = 0; i < mp->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *op = mp->opset_import[i];
        const char *d = op->domain ? op->domain : "";
        int v = op->has_version ? (int)op->version : 0;
        if (!d[0] || !strcmp(d, "ai.onnx")) g->opset_onnx = v;
        else if (!strcmp(d, "com.microsoft")) g->opset_ms = v;
    }
    if (!g->opset_onnx && gp->n_node) {
        if (mp->n_opset_import)
            g->opset_onnx = 1; /* only other domains imported; ai.onnx nodes get the oldest semantics */
        else
            return vp_fail(err, VP_ERR_INVALID, "%s: the model imports no opset", model);
    }
    if (g->opset_ms == 0) g->opset_ms = 1;
    g->graph_name = strdup(gp->name ? gp->name : "");
    if (mp->producer_name) {
        char buf[256];
        snprintf(buf, sizeof buf, "%s%s%s", mp->producer_name, mp->producer_version ? " " : "",
                 mp->producer_version ? mp->producer_version : "");
        g->producer = strdup(buf);
    }
    return build_scope(gp, g, g, model, base_dir, err);
}

/* A graph attribute (a Loop body, an If branch) as a graph of its own: its formal
 * inputs are its inputs, and every name its nodes read that nothing in it defines is a
 * value of the enclosing scope (VP_VAL_OUTER), resolved by name when it is expanded. */
static vp_status load_subgraph(const Onnx__GraphProto *gp, vp_graph *outer, vp_graph *root, vp_graph **out,
                               const char *desc, const char *base_dir, vp_error *err) {
    vp_graph *sub = vp_graph_new();
    if (!sub) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    sub->path = strdup(outer->path ? outer->path : "");
    sub->graph_name = strdup(gp->name ? gp->name : "");
    sub->ir_version = outer->ir_version;
    sub->opset_onnx = outer->opset_onnx;
    sub->opset_ms = outer->opset_ms;
    vp_status s = !sub->path || !sub->graph_name ? vp_fail(err, VP_ERR_NOMEM, "out of memory") : VP_OK;
    /* names defined inside: node outputs, inputs, initializers */
    vp_graph *defined = s ? NULL : vp_graph_new();
    if (!s && !defined) s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
    for (size_t i = 0; !s && i < gp->n_node; i++)
        for (size_t k = 0; k < gp->node[i]->n_output; k++)
            if (gp->node[i]->output[k] && gp->node[i]->output[k][0] && vp_graph_find_value(defined, gp->node[i]->output[k]) < 0 &&
                vp_graph_add_value(defined, gp->node[i]->output[k]) < 0)
                s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
    for (size_t i = 0; !s && i < gp->n_input; i++)
        if (gp->input[i]->name && vp_graph_find_value(defined, gp->input[i]->name) < 0 &&
            vp_graph_add_value(defined, gp->input[i]->name) < 0)
            s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
    for (size_t i = 0; !s && i < gp->n_initializer; i++)
        if (gp->initializer[i]->name && vp_graph_find_value(defined, gp->initializer[i]->name) < 0 &&
            vp_graph_add_value(defined, gp->initializer[i]->name) < 0)
            s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
    for (size_t i = 0; !s && i <= gp->n_node; i++) {
        size_t n_in = i < gp->n_node ? gp->node[i]->n_input : gp->n_output;
        for (size_t k = 0; !s && k < n_in; k++) {
            const char *name = i < gp->n_node ? gp->node[i]->input[k] : gp->output[k]->name;
            if (!name || !name[0] || vp_graph_find_value(defined, name) >= 0 || vp_graph_find_value(sub, name) >= 0) continue;
            int id = vp_graph_add_value(sub, name);
            if (id < 0) s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
            else sub->values[id].flags |= VP_VAL_OUTER;
        }
    }
    vp_graph_free(defined);
    if (!s) s = build_scope(gp, sub, root, sub->path, base_dir, err);
    if (s) {
        vp_error_prefix(err, "%s, its graph '%s': ", desc, gp->name ? gp->name : "");
        vp_graph_free(sub);
        return s;
    }
    *out = sub;
    return VP_OK;
}

/* The initializers, inputs, nodes and outputs of one graph (the model's or a
 * subgraph's) into g; external data and mappings belong to root. */
static vp_status build_scope(const Onnx__GraphProto *gp, vp_graph *g, vp_graph *root, const char *model,
                             const char *base_dir, vp_error *err) {
    vp_status s;
    if (gp->n_sparse_initializer)
        return vp_fail(err, VP_ERR_UNSUPPORTED, "%s: sparse initializers are not supported", model);

    vp_extdata_ctx ext = {base_dir, root};
    for (size_t i = 0; i < gp->n_initializer; i++) {
        const Onnx__TensorProto *tp = gp->initializer[i];
        const char *name = tp->name ? tp->name : "";
        if (!name[0]) return vp_fail(err, VP_ERR_INVALID, "%s: initializer %zu has no name", model, i);
        if (vp_graph_find_value(g, name) >= 0)
            return vp_fail(err, VP_ERR_INVALID, "%s: initializer '%s' is defined twice", model, name);
        int id = vp_graph_add_value(g, name);
        if (id < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
        char what[600];
        snprintf(what, sizeof what, "%s: initializer '%s'", model, name);
        vp_tensor t;
        vp_data_owner owner;
        s = vp_tensor_from_proto(tp, &ext, what, &t, &owner, err);
        if (s) return s;
        vp_value *v = &g->values[id];
        v->dtype = t.dtype;
        v->rank = t.rank;
        memcpy(v->dims, t.dims, sizeof v->dims);
        v->flags |= VP_VAL_INITIALIZER;
        vp_value_set_data(g, id, t.data, owner);
    }

    g->inputs = malloc((gp->n_input + 1) * sizeof(int));
    g->outputs = malloc((gp->n_output + 1) * sizeof(int));
    if (!g->inputs || !g->outputs) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < gp->n_input; i++) {
        const char *name = gp->input[i]->name ? gp->input[i]->name : "";
        if (!name[0]) return vp_fail(err, VP_ERR_INVALID, "%s: graph input %zu has no name", model, i);
        int id = vp_graph_find_value(g, name);
        if (id >= 0) {
            if (g->values[id].flags & VP_VAL_INITIALIZER) continue; /* IR < 4 lists initializers as inputs */
            return vp_fail(err, VP_ERR_INVALID, "%s: graph input '%s' is listed twice", model, name);
        }
        id = vp_graph_add_value(g, name);
        if (id < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
        g->values[id].flags |= VP_VAL_INPUT;
        if (g != root && !gp->input[i]->type) { /* a body's input without a type: its expansion gives one */
            g->values[id].rank = -1;
            g->inputs[g->n_inputs++] = id;
            continue;
        }
        s = read_value_info(gp->input[i], &g->values[id], model, err);
        if (s) return s;
        g->inputs[g->n_inputs++] = id;
    }

    int n = (int)gp->n_node;
    int *order = malloc(((size_t)n + 1) * sizeof *order);
    if (!order) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    s = topo_order(gp, g, order, model, err);
    int max_io = 0;
    for (int i = 0; i < n; i++) {
        int k = (int)(gp->node[i]->n_input > gp->node[i]->n_output ? gp->node[i]->n_input : gp->node[i]->n_output);
        if (k > max_io) max_io = k;
    }
    int *ins = malloc(((size_t)max_io + 1) * sizeof *ins), *outs = malloc(((size_t)max_io + 1) * sizeof *outs);
    if (!s && (!ins || !outs)) s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
    for (int oi = 0; oi < n && !s; oi++) {
        const Onnx__NodeProto *np = gp->node[order[oi]];
        const char *op_type = np->op_type ? np->op_type : "";
        char auto_name[64];
        const char *name = np->name && np->name[0] ? np->name : NULL;
        if (!name) {
            snprintf(auto_name, sizeof auto_name, "%s_%d", op_type[0] ? op_type : "node", order[oi]);
            name = auto_name;
        }
        if (!op_type[0]) {
            s = vp_fail(err, VP_ERR_INVALID, "%s: node '%s' has no op_type", model, name);
            break;
        }
        /* a node with no named output computes nothing anyone can read (ONNX ops have no
         * side effects): it is left out, so no pass or kernel meets a node with nowhere to
         * write (the fuzzer's Constant whose output name was cut; a Relu writing to "") */
        int named = 0;
        for (size_t k = 0; k < np->n_output; k++) named |= np->output[k] && np->output[k][0];
        if (!named) continue;
        /* ONNX's output 0 is a required ("single") output of every ai.onnx op but LSTM's and
         * GRU's, and the kernels write it: refused as ONNX's checker and ONNX Runtime refuse
         * it (a BatchNormalization writing only its running mean crashed eval) */
        const char *domain = np->domain ? np->domain : "";
        const vp_op_def *op = vp_op_find(domain, op_type);
        if ((!domain[0] || !strcmp(domain, "ai.onnx")) && op && !(op->flags & VP_OP_OUTPUT0_OPTIONAL) &&
            !(np->output[0] && np->output[0][0])) {
            s = vp_fail(err, VP_ERR_INVALID,
                        "%s: node '%s' (%s): output 0 has no name, but ONNX requires it (only LSTM's and GRU's "
                        "may be left out)",
                        model, name, op_type);
            break;
        }
        for (size_t k = 0; k < np->n_input; k++)
            ins[k] = np->input[k] && np->input[k][0] ? vp_graph_find_value(g, np->input[k]) : -1;
        for (size_t k = 0; k < np->n_output; k++) {
            outs[k] = -1;
            if (np->output[k] && np->output[k][0]) {
                outs[k] = vp_graph_add_value(g, np->output[k]);
                if (outs[k] < 0) s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
            }
        }
        if (s) break;
        int id = vp_graph_add_node(g, op_type, np->domain ? np->domain : "", name, (int)np->n_input, ins,
                                   (int)np->n_output, outs);
        if (id < 0) {
            s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
            break;
        }
        vp_node *node = &g->nodes[id];
        char *scopes = unknown_metadata(&np->base, 9, NAME_SCOPES_KEY);
        node->module = vp_torch_module_path(scopes); /* NULL on no memory too: only a hint */
        free(scopes);
        if (!strcmp(op_type, "Gather") && !(np->domain && np->domain[0])) {
            char *fx = unknown_metadata(&np->base, 9, FX_NODE_KEY);
            vp_torch_embedding_of(fx, &node->embedding);
            free(fx);
        }
        if (np->n_attribute) {
            node->attrs = calloc(np->n_attribute, sizeof(vp_attr));
            if (!node->attrs) {
                s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
                break;
            }
            char desc[600];
            snprintf(desc, sizeof desc, "%s: node '%s' (%s)", model, name, op_type);
            for (size_t a = 0; a < np->n_attribute && !s; a++) {
                node->n_attrs++;
                s = vp_attr_from_proto(np->attribute[a], &node->attrs[a], desc, err);
                if (!s && node->attrs[a].type == VP_ATTR_GRAPH && np->attribute[a]->g) {
                    vp_graph *sub = NULL;
                    s = load_subgraph(np->attribute[a]->g, g, root, &sub, desc, base_dir, err);
                    node->attrs[a].graph = sub;
                }
            }
        }
    }
    free(ins);
    free(outs);
    free(order);
    if (s) return s;

    for (size_t i = 0; i < gp->n_output; i++) {
        const char *name = gp->output[i]->name ? gp->output[i]->name : "";
        int id = vp_graph_find_value(g, name);
        if (id < 0)
            return vp_fail(err, VP_ERR_INVALID, "%s: graph output '%s' is never defined", model, name);
        g->values[id].flags |= VP_VAL_OUTPUT;
        g->outputs[g->n_outputs++] = id;
    }
    return vp_graph_link(g, err);
}

static vp_status load_bytes(const uint8_t *buf, size_t len, const char *name, const char *base_dir,
                            const vp_onnx_load_opts *o, vp_graph **out, vp_error *err) {
    *out = NULL;
    if (len == 0) return vp_fail(err, VP_ERR_PARSE, "%s: empty file, not an ONNX model", name);
    if (len > VP_ONNX_MAX_BYTES)
        return vp_fail(err, VP_ERR_UNSUPPORTED,
                       "%s: %zu bytes, over protobuf's limit of 2 GiB for one message (weights that large belong "
                       "in external data)",
                       name, len);
    /* protobuf-c unpacks nested messages by recursion: bound the depth first */
    vp_status ds = vp_onnx_check_depth(buf, len, name, err);
    if (ds) return ds;
    Onnx__ModelProto *mp = onnx__model_proto__unpack(NULL, len, buf);
    if (!mp) return vp_fail(err, VP_ERR_PARSE, "%s: not an ONNX model (the protobuf is truncated or corrupt)", name);
    if (!mp->graph || !mp->has_ir_version) {
        const char *missing = !mp->graph ? "graph" : "ir_version";
        vp_fail(err, VP_ERR_PARSE, "%s: not an ONNX model (it has no %s)", name, missing);
        onnx__model_proto__free_unpacked(mp, NULL);
        return VP_ERR_PARSE;
    }
    vp_graph *g = vp_graph_new();
    if (!g) {
        onnx__model_proto__free_unpacked(mp, NULL);
        return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    }
    g->proto = mp;
    g->proto_free = free_proto;
    g->path = strdup(name);
    vp_status s = build_graph(mp, g, name, base_dir, err);
    if (!s) s = vp_attr_schema_check(g, name, o && o->lenient, err);
    if (s) {
        vp_graph_free(g);
        return s;
    }
    *out = g;
    return VP_OK;
}

vp_status vp_onnx_load_bytes(const uint8_t *buf, size_t len, const char *name, const char *base_dir,
                             vp_graph **out, vp_error *err) {
    return load_bytes(buf, len, name, base_dir, NULL, out, err);
}

const char *vp_onnx_metadata(const vp_graph *g, const char *key) {
    if (!g->proto || g->proto_free != free_proto) return NULL;
    const Onnx__ModelProto *mp = g->proto;
    for (size_t i = 0; i < mp->n_metadata_props; i++)
        if (mp->metadata_props[i]->key && !strcmp(mp->metadata_props[i]->key, key)) return mp->metadata_props[i]->value;
    return NULL;
}

/* GraphProto.metadata_props is field 16 since ONNX 1.16. */
char *vp_onnx_graph_metadata(const vp_graph *g, const char *key) {
    if (!g->proto || g->proto_free != free_proto) return NULL;
    const Onnx__ModelProto *mp = g->proto;
    return mp->graph ? unknown_metadata(&mp->graph->base, 16, key) : NULL;
}

vp_status vp_onnx_load(const char *path, vp_graph **out, vp_error *err) {
    return vp_onnx_load_with(path, NULL, out, err);
}

vp_status vp_onnx_load_with(const char *path, const vp_onnx_load_opts *o, vp_graph **out, vp_error *err) {
    uint8_t *buf;
    size_t len;
    *out = NULL;
    vp_status s = vp_read_file(path, &buf, &len, err);
    if (s) return s;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    else snprintf(dir, sizeof dir, ".");
    s = load_bytes(buf, len, path, dir, o, out, err);
    free(buf);
    return s;
}
