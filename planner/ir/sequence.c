/* Sequence ops expanded in place (sequence.h says what comes in and goes out).
 *
 * A sequence value never gets a dtype or shape: the table maps it to the tensor values
 * it holds, and the ops that read it become tensor ops on those.  The new nodes are
 * appended, inferred as they come, then moved to where the sequence op stood
 * (vp_build_splice), as control.c does for Loop and If. */
#include "ir/sequence.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/graph_build.h"
#include "ir/infer.h"
#include "ir/op_registry.h"

enum { MAX_ELEMS = 1 << 16 };

static const char *const seq_ops[] = {"SplitToSequence", "SequenceConstruct", "SequenceEmpty",  "SequenceInsert",
                                      "SequenceErase",   "SequenceAt",        "SequenceLength", "ConcatFromSequence"};

int vp_sequence_is(const vp_node *n) {
    if (n->domain[0] && strcmp(n->domain, "ai.onnx")) return 0;
    for (size_t i = 0; i < sizeof seq_ops / sizeof seq_ops[0]; i++)
        if (!strcmp(n->op_type, seq_ops[i])) return 1;
    return 0;
}

int vp_sequence_holds(const vp_seq_table *t, int v) { return v >= 0 && v < t->cap && t->count[v] >= 0; }

void vp_seq_table_free(vp_seq_table *t) {
    for (int v = 0; v < t->cap; v++) free(t->elems[v]);
    free(t->count);
    free(t->elems);
    memset(t, 0, sizeof *t);
}

/* Records that sequence v holds elems[0..count). */
static vp_status table_set(vp_seq_table *t, int v, const int *elems, int count, vp_error *err) {
    if (v >= t->cap) {
        int cap = v + 64;
        int *c = realloc(t->count, (size_t)cap * sizeof *c);
        if (c) t->count = c;
        int **e = realloc(t->elems, (size_t)cap * sizeof *e);
        if (e) t->elems = e;
        if (!c || !e) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
        for (int k = t->cap; k < cap; k++) {
            t->count[k] = -1;
            t->elems[k] = NULL;
        }
        t->cap = cap;
    }
    int *copy = malloc(((size_t)count + 1) * sizeof *copy);
    if (!copy) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    if (count) memcpy(copy, elems, (size_t)count * sizeof *copy);
    free(t->elems[v]);
    t->elems[v] = copy;
    t->count[v] = count;
    return VP_OK;
}

/* Input i as a sequence the table holds. */
static vp_status seq_input(const vp_graph *g, const vp_node *n, const vp_seq_table *t, int i, int *id, vp_error *err) {
    *id = i < n->n_inputs ? n->inputs[i] : -1;
    if (*id < 0) return vp_node_fail(err, VP_ERR_INVALID, n, "has no input %d (a sequence)", i);
    if (!vp_sequence_holds(t, *id))
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n,
                            "reads '%s', a sequence not built inside the graph by SplitToSequence, SequenceConstruct, "
                            "SequenceEmpty, SequenceInsert or SequenceErase: only those are expanded",
                            g->values[*id].name);
    return VP_OK;
}

/* The integers of input i, which must be known ahead of time (a constant or a folded
 * value); absent: *count = -1. */
static vp_status known_ints(const vp_graph *g, const vp_node *n, int i, const char *what, int64_t *out, int max,
                            int *count, vp_error *err) {
    *count = -1;
    if (i >= n->n_inputs || n->inputs[i] < 0) return VP_OK;
    const vp_value *v = &g->values[n->inputs[i]];
    int64_t numel = vp_value_numel(v);
    if (!v->data || (v->dtype != VP_I64 && v->dtype != VP_I32))
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n,
                            "its %s '%s' is not known ahead of time: only sequences of a size and layout fixed "
                            "when the model is planned are expanded", what, v->name);
    if (numel > max) return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "its %s '%s' has %lld entries (at most %d)", what,
                                         v->name, (long long)numel, max);
    for (int64_t k = 0; k < numel; k++)
        out[k] = v->dtype == VP_I64 ? ((const int64_t *)v->data)[k] : ((const int32_t *)v->data)[k];
    *count = (int)numel;
    return VP_OK;
}

/* A position input: scalar, in [-count, count + extra). */
static vp_status position(const vp_graph *g, const vp_node *n, int i, int count, int extra, int64_t dflt, int *pos,
                          vp_error *err) {
    int64_t p = dflt;
    int c;
    vp_status s = known_ints(g, n, i, "position", &p, 1, &c, err);
    if (s) return s;
    if (c == 0) return vp_node_fail(err, VP_ERR_INVALID, n, "its position is empty");
    if (p < -count || p >= count + extra)
        return vp_node_fail(err, VP_ERR_INVALID, n, "position %lld is out of range for a sequence of %d tensors",
                            (long long)p, count);
    *pos = (int)(p < 0 ? p + count : p);
    return VP_OK;
}

/* Adds op (inputs in, outputs out) and infers it. */
static vp_status add_op(vp_graph *g, const char *op, const char *name, int n_in, const int *in, int n_out,
                        const int *out, int *id, vp_error *err) {
    *id = vp_graph_add_node(g, op, "", name, n_in, in, n_out, out);
    if (*id < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    g->nodes[*id].opset = g->opset_onnx;
    return VP_OK;
}

/* Squeeze or Unsqueeze of x along axis into out: axes an attribute before opset 13,
 * an input from it. */
static vp_status add_axis_op(vp_graph *g, const char *op, const char *name, int x, int64_t axis, int out, vp_error *err) {
    int in[2] = {x, -1}, id;
    if (g->opset_onnx >= 13 && (in[1] = vp_build_const(g, "axes", VP_I64, 1, (int64_t[]){1}, &axis)) < 0)
        return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    vp_status s = add_op(g, op, name, g->opset_onnx >= 13 ? 2 : 1, in, 1, &out, &id, err);
    if (!s && g->opset_onnx < 13) s = vp_node_add_attr_ints(g, id, "axes", &axis, 1);
    return s ? s : vp_infer_node(g, id, 0, NULL, err);
}

static vp_status new_values(vp_graph *g, const char *stem, int count, int *ids, vp_error *err) {
    char name[600];
    for (int k = 0; k < count; k++) {
        snprintf(name, sizeof name, "%.580s.%d", stem, k); /* a long stem cut: the name is made unique anyway */
        if ((ids[k] = vp_graph_add_unique_value(g, name)) < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    }
    return VP_OK;
}

static vp_status split_to_sequence(vp_graph *g, int node, int seq, vp_seq_table *t, vp_error *err) {
    const vp_node *n = &g->nodes[node];
    const vp_value *x = n->n_inputs > 0 && n->inputs[0] >= 0 ? &g->values[n->inputs[0]] : NULL;
    if (!x) return vp_node_fail(err, VP_ERR_INVALID, n, "has no input");
    int axis;
    vp_status s = vp_shape_axis(n, vp_attr_int(n, "axis", 0), x->rank, &axis, err);
    if (s) return s;
    int64_t dim = x->dims[axis], *sizes = malloc(MAX_ELEMS * sizeof *sizes);
    int count = 0, given;
    if (!sizes) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    s = known_ints(g, n, 1, "split", sizes, MAX_ELEMS, &given, err);
    int keepdims = given >= 0 || vp_attr_int(n, "keepdims", 1);
    if (!s && given < 0) { /* no split: pieces of 1 */
        if (dim > MAX_ELEMS) s = vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "splits into %lld tensors (at most %d)", (long long)dim, MAX_ELEMS);
        for (count = 0; !s && count < dim; count++) sizes[count] = 1;
    } else if (!s && g->values[n->inputs[1]].rank == 0) { /* a scalar: chunks of that size, the last smaller */
        int64_t c = sizes[0];
        if (c <= 0) s = vp_node_fail(err, VP_ERR_INVALID, n, "its split %lld is not positive", (long long)c);
        else if ((dim + c - 1) / c > MAX_ELEMS) s = vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "splits into more than %d tensors", MAX_ELEMS);
        for (int64_t left = dim; !s && left > 0; left -= c) sizes[count++] = left < c ? left : c;
    } else if (!s) {
        int64_t sum = 0;
        for (count = 0; count < given; count++) sum += sizes[count];
        if (sum != dim)
            s = vp_node_fail(err, VP_ERR_INVALID, n, "its split sums to %lld, axis %d of '%s' is %lld", (long long)sum, axis,
                             x->name, (long long)dim);
    }
    int *parts = s ? NULL : malloc(((size_t)count + 1) * sizeof *parts);
    int *elems = s ? NULL : malloc(((size_t)count + 1) * sizeof *elems);
    if (!s && (!parts || !elems)) s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
    char stem[600];
    snprintf(stem, sizeof stem, "%s", g->values[seq].name);
    if (!s) s = new_values(g, stem, count, elems, err);
    if (!s && !keepdims) {
        char piece[620];
        snprintf(piece, sizeof piece, "%s/piece", stem);
        s = new_values(g, piece, count, parts, err);
    } else if (!s) {
        memcpy(parts, elems, (size_t)count * sizeof *parts);
    }
    if (!s && count) {
        int in[2] = {g->nodes[node].inputs[0], -1}, id;
        if (g->opset_onnx >= 13 && (in[1] = vp_build_const(g, "split", VP_I64, 1, (int64_t[]){count}, sizes)) < 0)
            s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
        char name[600];
        snprintf(name, sizeof name, "%s/split", g->nodes[node].name);
        if (!s) s = add_op(g, "Split", name, g->opset_onnx >= 13 ? 2 : 1, in, count, parts, &id, err);
        if (!s) s = vp_node_add_attr_int(g, id, "axis", axis);
        if (!s && g->opset_onnx < 13) s = vp_node_add_attr_ints(g, id, "split", sizes, count);
        if (!s) s = vp_infer_node(g, id, 0, NULL, err);
    }
    for (int k = 0; !s && !keepdims && k < count; k++) {
        char name[620];
        snprintf(name, sizeof name, "%s/squeeze_%d", g->nodes[node].name, k);
        s = add_axis_op(g, "Squeeze", name, parts[k], axis, elems[k], err);
    }
    if (!s) s = table_set(t, seq, elems, count, err);
    free(sizes);
    free(parts);
    free(elems);
    return s;
}

static vp_status concat_from_sequence(vp_graph *g, int node, int seq, int out, const vp_seq_table *t, vp_error *err) {
    const vp_node *n = &g->nodes[node];
    int count = t->count[seq];
    if (!vp_node_attr(n, "axis")) return vp_node_fail(err, VP_ERR_INVALID, n, "has no axis attribute");
    if (!count) return vp_node_fail(err, VP_ERR_INVALID, n, "concatenates an empty sequence");
    int64_t axis = vp_attr_int(n, "axis", 0);
    int new_axis = (int)vp_attr_int(n, "new_axis", 0);
    int *in = malloc(((size_t)count + 1) * sizeof *in), id;
    if (!in) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    memcpy(in, t->elems[seq], (size_t)count * sizeof *in);
    vp_status s = VP_OK;
    if (new_axis) {
        /* stacked: each element gains the axis (counted in the result's rank) first */
        int rank = g->values[in[0]].rank, a;
        s = vp_shape_axis(n, axis, rank + 1, &a, err);
        char stem[600];
        snprintf(stem, sizeof stem, "%s/stacked", g->values[out].name);
        int *up = s ? NULL : malloc(((size_t)count + 1) * sizeof *up);
        if (!s && !up) s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
        if (!s) s = new_values(g, stem, count, up, err);
        for (int k = 0; !s && k < count; k++) {
            char name[620];
            snprintf(name, sizeof name, "%s/unsqueeze_%d", g->nodes[node].name, k);
            s = add_axis_op(g, "Unsqueeze", name, in[k], a, up[k], err);
            in[k] = up[k];
        }
        free(up);
        axis = a;
    }
    char name[600];
    snprintf(name, sizeof name, "%s/concat", g->nodes[node].name);
    if (!s) s = add_op(g, "Concat", name, count, in, 1, &out, &id, err);
    if (!s) s = vp_node_add_attr_int(g, id, "axis", axis);
    if (!s) s = vp_infer_node(g, id, 0, NULL, err);
    free(in);
    return s;
}

/* The op's work, with its output `out` given up by the node (the new nodes make it). */
static vp_status expand(vp_graph *g, int node, int out, vp_seq_table *t, vp_error *err) {
    const vp_node *n = &g->nodes[node];
    const char *op = n->op_type;
    int seq = -1, pos, id;
    char name[600];
    snprintf(name, sizeof name, "%s/item", n->name);
    if (out < 0) return VP_OK; /* nothing reads what it makes */
    if (!strcmp(op, "SplitToSequence")) return split_to_sequence(g, node, out, t, err);
    if (!strcmp(op, "SequenceEmpty")) return table_set(t, out, NULL, 0, err);
    if (!strcmp(op, "SequenceConstruct")) {
        for (int k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] < 0 || !vp_value_known(&g->values[n->inputs[k]]))
                return vp_node_fail(err, VP_ERR_INVALID, n, "input %d has no known shape", k);
        return table_set(t, out, n->inputs, n->n_inputs, err);
    }
    vp_status s = seq_input(g, n, t, 0, &seq, err);
    if (s) return s;
    int count = t->count[seq];
    if (!strcmp(op, "SequenceAt")) {
        if (n->n_inputs < 2 || n->inputs[1] < 0) return vp_node_fail(err, VP_ERR_INVALID, n, "has no position");
        if ((s = position(g, n, 1, count, 0, 0, &pos, err))) return s;
        if ((s = add_op(g, "Identity", name, 1, &t->elems[seq][pos], 1, &out, &id, err))) return s;
        return vp_infer_node(g, id, 0, NULL, err);
    }
    if (!strcmp(op, "SequenceLength")) {
        int64_t len = count;
        int c = vp_build_const(g, "sequence_length", VP_I64, 0, NULL, &len);
        if (c < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
        if ((s = add_op(g, "Identity", name, 1, &c, 1, &out, &id, err))) return s;
        return vp_infer_node(g, id, 0, NULL, err);
    }
    if (!strcmp(op, "ConcatFromSequence")) return concat_from_sequence(g, node, seq, out, t, err);
    int *elems = malloc(((size_t)count + 2) * sizeof *elems);
    if (!elems) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    memcpy(elems, t->elems[seq], (size_t)count * sizeof *elems);
    if (!strcmp(op, "SequenceInsert")) {
        int x = n->n_inputs > 1 ? n->inputs[1] : -1;
        if (x < 0 || !vp_value_known(&g->values[x])) s = vp_node_fail(err, VP_ERR_INVALID, n, "has no known tensor to insert");
        if (!s) s = position(g, n, 2, count, 1, count, &pos, err);
        if (!s) {
            memmove(elems + pos + 1, elems + pos, (size_t)(count - pos) * sizeof *elems);
            elems[pos] = x;
            s = table_set(t, out, elems, count + 1, err);
        }
    } else { /* SequenceErase */
        if (!count) s = vp_node_fail(err, VP_ERR_INVALID, n, "erases from an empty sequence");
        if (!s) s = position(g, n, 1, count, 0, -1, &pos, err);
        if (!s) {
            memmove(elems + pos, elems + pos + 1, (size_t)(count - pos - 1) * sizeof *elems);
            s = table_set(t, out, elems, count - 1, err);
        }
    }
    free(elems);
    return s;
}

static vp_status expand_fn(vp_graph *g, int node, int out, void *t, vp_error *err) {
    if (g->nodes[node].n_outputs != 1)
        return vp_node_fail(err, VP_ERR_INVALID, &g->nodes[node], "has %d outputs, not 1", g->nodes[node].n_outputs);
    return expand(g, node, out, t, err);
}

vp_status vp_sequence_expand(vp_graph *g, int node, vp_seq_table *t, int *n_new, vp_error *err) {
    return vp_build_replace_node(g, node, expand_fn, t, n_new, err);
}
