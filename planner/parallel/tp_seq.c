/* Sequence parallelism (--sp, Korthikanti et al. 2022): the activations between
 * tensor-parallel regions (embedding sum, residual stream, LayerNorms, the row
 * products' bias Adds) split along the sequence, each rank holding s/n of it.
 *
 * In: rank r's forward graph as tp_split.c left it, inferred: a TPCopy in front of each
 * column-parallel region, a TPAllReduce after each row product and each vocabulary-
 * parallel embedding.  Out: the same graph with every such TPAllReduce a TPReduceScatter
 * and every TPCopy an all-gather (TPAllGather) along the sequence axis (1 of [batch,
 * seq, hidden], as exporters write it) — the same bytes on the wire, an all-reduce being
 * a reduce-scatter and an all-gather — and the ops between them run on [b, s/n, h]:
 *   - a parameter they read whole (LayerNorm's scale and bias, a bias Add) gets a TPCopy,
 *     so its gradient, each rank's part from its tokens, is all-reduced;
 *   - a parameter as long as the sequence added to it (a position table added whole) is
 *     sliced by rows, this rank's s/n: each position lives on one rank;
 *   - another value whole on every rank beside a split one (an embedding left
 *     replicated, tied to the LM head; a token-type table's rows) is cut to this rank's
 *     positions by a Slice, behind a TPCopy where a gradient reaches it (each rank's part
 *     of the gradient, from its positions, summed: Megatron-LM's scatter to the
 *     sequence-parallel region, its backward an all-gather, here an all-reduce);
 *   - an op that mixes tokens (BERT's pooler reading the first token, an LM head left
 *     replicated) reads the sequence all-gathered whole, a TPAllGather whose gradient
 *     is this rank's chunk of the one every rank computes alike (vplan_rank set,
 *     planner/ops/collective.c; Megatron-LM's gather from the sequence-parallel region).
 * Between the regions only ops that treat tokens apart run split (elementwise ops,
 * LayerNormalization over the hidden axis, Dropout: it keeps, of the mask the one-rank
 * step draws, this rank's positions, its attributes vplan_axis, vplan_ranks and
 * vplan_rank saying which, so the gathered masks are that step's mask and the ranks'
 * losses equal its loss).  A graph output that would be split, a collective reading a
 * split value, or a sequence n does not divide refuses, VP_ERR_USAGE naming the node.
 * Products over flattened tokens ([batch * seq, hidden]) first have their collectives
 * moved to the [batch, seq, hidden] side (tp_seq_flat.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/graph_build.h"
#include "ir/infer.h"
#include "ir/op_registry.h"
#include "ops/op_semantics.h"
#include "parallel/tp_internal.h"

enum { SEQ_AXIS = 1 };

static int is_op(const vp_node *n, const char *domain, const char *op) {
    return !strcmp(n->domain, domain) && !strcmp(n->op_type, op);
}

/* A reduction over axes after the sequence only (RMSNorm's mean of squares over the
 * hidden size, as torch 2.x writes it), with its axes known. */
static int reduces_within_tokens(const vp_graph *g, const vp_node *n) {
    if (strcmp(n->op_type, "ReduceMean") && strcmp(n->op_type, "ReduceSum")) return 0;
    const int64_t *axes;
    int count = vp_node_axes(g, n, &axes);
    if (!axes || count <= 0) return 0;
    int rank = g->values[n->inputs[0]].rank;
    for (int k = 0; k < count; k++)
        if ((axes[k] < 0 ? axes[k] + rank : axes[k]) <= SEQ_AXIS) return 0;
    return 1;
}

static int token_wise(const vp_graph *g, const vp_node *n) {
    static const char *const ops[] = {"Add", "Sub", "Mul", "Div", "Pow", "Reciprocal", "Gelu", "FastGelu", "Relu",
                                      "Sigmoid", "Swish", "Tanh", "Erf", "Neg", "Identity", "Cast", "Sqrt", "Exp", "Softplus",
                                      "LeakyRelu", "Elu", "LayerNormalization", "Dropout", NULL};
    if (is_op(n, "com.microsoft", "SimplifiedLayerNormalization")) return 2; /* RMSNorm, fused: as LayerNormalization */
    if (n->domain[0]) return 0;
    for (int k = 0; ops[k]; k++)
        if (!strcmp(n->op_type, ops[k])) return !strcmp(n->op_type, "LayerNormalization") ? 2 : 1;
    return reduces_within_tokens(g, n);
}

static vp_status set_op(vp_graph *g, int id, const char *op, vp_error *err) {
    vp_node *n = &g->nodes[id];
    char *t = malloc(strlen(op) + 1);
    if (!t) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    strcpy(t, op);
    free(n->op_type);
    n->op_type = t;
    return vp_node_add_attr_int(g, id, "axis", SEQ_AXIS);
}

/* What a node needs done to one of its inputs, applied once every node is seen. */
enum { WRAP, SHARE, GATHER };

typedef struct edit {
    int node, input;
    int kind;  /* WRAP: read through a TPCopy; SHARE: this rank's positions (a Slice, after
                  a TPCopy where a gradient reaches the value); GATHER: all-gathered, its
                  gradient this rank's chunk */
    int axis;  /* SHARE: the value's axis under the sequence */
} edit;

typedef struct seq {
    vp_graph *g;
    int n, rank;
    char *split;   /* per value: split along the sequence */
    char *grad;    /* per value: a gradient reaches it */
    edit *edits;
    int n_edits, cap_edits;
    vp_tp_result *r;
} seq;

static vp_status refuse(const vp_node *n, const char *why, vp_error *err) {
    return vp_node_fail(err, VP_ERR_USAGE, n, "--sp: %s", why);
}

static vp_status add_edit(seq *q, int node, int input, int kind, int axis, vp_error *err) {
    if (q->n_edits == q->cap_edits) {
        int cap = q->cap_edits ? 2 * q->cap_edits : 64;
        edit *p = realloc(q->edits, (size_t)cap * sizeof *p);
        if (!p) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
        q->edits = p;
        q->cap_edits = cap;
    }
    q->edits[q->n_edits++] = (edit){node, input, kind, axis};
    return VP_OK;
}

/* A parameter as long as the sequence, added whole (a position table): this rank's rows. */
static vp_status slice_rows(seq *q, const vp_node *n, int v, int a, vp_error *err) {
    vp_graph *g = q->g;
    const vp_value *x = &g->values[v];
    if (x->n_consumers != 1 || x->producer >= 0) return refuse(n, "a parameter along the sequence read elsewhere too", err);
    vp_tensor full = vp_value_tensor(x), part;
    if (x->dims[a] % q->n) return refuse(n, "--tp does not divide the sequence", err);
    if (x->data) {
        vp_status s = vp_tp_slice_tensor(&full, a, 1, q->n, q->rank, &part, err);
        if (s) return s;
        g->values[v].dims[a] = part.dims[a];
        vp_value_set_data(g, v, part.data, VP_DATA_HEAP);
    } else {
        g->values[v].dims[a] /= q->n;
    }
    vp_tp_sliced *grown = realloc(q->r->sliced, (size_t)(q->r->n_sliced + 1) * sizeof *grown);
    if (!grown) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    q->r->sliced = grown;
    q->r->sliced[q->r->n_sliced++] = (vp_tp_sliced){v, a, 1};
    q->r->sliced_elems_full += vp_tensor_numel(&full);
    return VP_OK;
}

/* A token-wise node with a split input: the others broadcast along the sequence, are
 * split too, are parameters sliced or wrapped, or are values whole on every rank (an
 * embedding left replicated, a constant): this rank's positions of them, their
 * gradient, each rank's part, summed. */
static vp_status token_node(seq *q, int id, vp_error *err) {
    vp_graph *g = q->g;
    const vp_node *n = &g->nodes[id];
    const vp_value *y = &g->values[n->outputs[0]];
    int ln = token_wise(g, n) == 2;
    if (ln) {
        int64_t axis = vp_attr_int(n, "axis", -1);
        if (axis < 0) axis += g->values[n->inputs[0]].rank;
        if (axis <= SEQ_AXIS || !q->split[n->inputs[0]]) return refuse(n, "LayerNormalization over the sequence", err);
    }
    vp_status s = VP_OK;
    for (int k = 0; k < n->n_inputs && !s; k++) {
        int v = n->inputs[k];
        if (v < 0 || q->split[v]) continue;
        const vp_value *x = &g->values[v];
        int a = SEQ_AXIS - (y->rank - x->rank); /* x's axis under the sequence, broadcast aligned */
        int along = a >= 0 && x->dims[a] != 1 && !ln;
        if (along && x->dims[a] != y->dims[SEQ_AXIS]) return refuse(n, "a value along the sequence of another length", err);
        if (!(x->flags & VP_VAL_PARAM)) {
            if (along) s = add_edit(q, id, k, SHARE, a, err);
            else if (q->grad[v]) s = add_edit(q, id, k, WRAP, 0, err); /* broadcast: its gradient summed */
        } else if (along) {
            s = slice_rows(q, n, v, a, err);
        } else {
            s = add_edit(q, id, k, WRAP, 0, err); /* read whole: its gradient summed across ranks */
        }
    }
    if (s) return s;
    for (int k = 0; k < n->n_outputs; k++)
        if (n->outputs[k] >= 0 && g->values[n->outputs[k]].rank == y->rank) q->split[n->outputs[k]] = 1;
    return strcmp(n->op_type, "Dropout") ? VP_OK : vp_tp_dropout_part(g, id, SEQ_AXIS, q->n, q->rank, err);
}

vp_status vp_tp_dropout_part(vp_graph *g, int node, int axis, int n, int rank, vp_error *err) {
    /* where each element lies in the whole tensor: the kernels draw the whole tensor's
     * stream and keep this rank's positions (runtime/cpu/k_elementwise_cast.c) */
    if (vp_node_set_attr_int(g, node, "vplan_axis", axis) || vp_node_set_attr_int(g, node, "vplan_ranks", n) ||
        vp_node_set_attr_int(g, node, "vplan_rank", rank))
        return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    return VP_OK;
}

/* The nodes the edits add, each appended with the node it goes in front of. */
typedef struct adder {
    seq *q;
    int *copy_of, *share_of, *gather_of; /* per original value: what was made of it, -1 */
    int *anchor;                         /* per appended node */
    int n0, cap;
} adder;

static int add_node(adder *d, int before, const char *op, const char *domain, const char *stem, int n_in, const int *in) {
    vp_graph *g = d->q->g;
    if (g->n_nodes - d->n0 >= d->cap) return -1;
    int y = vp_graph_add_unique_value(g, stem);
    char name[512];
    snprintf(name, sizeof name, "%s/%s", g->values[in[0]].name, op);
    int id = y < 0 ? -1 : vp_graph_add_node(g, op, domain, name, n_in, in, 1, &y);
    if (id < 0) return -1;
    if (!domain[0]) g->nodes[id].opset = g->opset_onnx > 13 ? g->opset_onnx : 13;
    d->anchor[id - d->n0] = before;
    return y;
}

static int comm_node(adder *d, int before, const char *op, const char *suffix, int v) {
    char stem[512];
    snprintf(stem, sizeof stem, "%s%s", d->q->g->values[v].name, suffix);
    int y = add_node(d, before, op, "vplan", stem, 1, &v);
    return y >= 0 && !vp_node_add_attr_int(d->q->g, d->q->g->n_nodes - 1, "ranks", d->q->n) ? y : -1;
}

static int copy_value(adder *d, int before, int v) {
    if (d->copy_of[v] < 0) {
        d->copy_of[v] = comm_node(d, before, "TPCopy", "_tpcopy", v);
        if (d->copy_of[v] >= 0) d->q->g->values[v].flags & VP_VAL_PARAM ? d->q->r->n_param_copy++ : d->q->r->n_copy++;
    }
    return d->copy_of[v];
}

/* This rank's positions of v along axis, read through a TPCopy where a gradient reaches v. */
static int share_value(adder *d, int before, int v, int axis) {
    if (d->share_of[v] >= 0) return d->share_of[v];
    vp_graph *g = d->q->g;
    int x = d->q->grad[v] ? copy_value(d, before, v) : v;
    int64_t one = 1, part = g->values[v].dims[axis] / d->q->n, at[3] = {d->q->rank * part, (d->q->rank + 1) * part, axis};
    char stem[512];
    snprintf(stem, sizeof stem, "%s_tp_positions", g->values[v].name);
    int in[4] = {x, -1, -1, -1};
    for (int j = 0; j < 3 && x >= 0; j++) in[j + 1] = vp_build_const(g, stem, VP_I64, 1, &one, &at[j]);
    d->share_of[v] = x < 0 || in[1] < 0 || in[2] < 0 || in[3] < 0 ? -1 : add_node(d, before, "Slice", "", stem, 4, in);
    d->q->r->n_seq_share += d->share_of[v] >= 0;
    return d->share_of[v];
}

/* v all-gathered along the sequence for what reads it whole; its gradient, the same on
 * every rank, gives this rank its chunk (planner/ops/collective.c). */
static int gather_value(adder *d, int before, int v) {
    if (d->gather_of[v] >= 0) return d->gather_of[v];
    vp_graph *g = d->q->g;
    int y = comm_node(d, before, "TPAllGather", "_whole", v);
    if (y < 0 || vp_node_add_attr_int(g, g->n_nodes - 1, "axis", SEQ_AXIS) ||
        vp_node_add_attr_int(g, g->n_nodes - 1, "vplan_rank", d->q->rank))
        return -1;
    d->q->r->n_seq_gather++;
    return d->gather_of[v] = y;
}

/* The edits applied, then every appended node placed in front of its anchor. */
static vp_status apply_edits(seq *q, int n0, int nv, vp_error *err) {
    vp_graph *g = q->g;
    adder d = {.q = q, .n0 = n0, .cap = 4 * q->n_edits + 16};
    d.copy_of = malloc(3 * ((size_t)nv + 1) * sizeof *d.copy_of);
    d.anchor = malloc((size_t)d.cap * sizeof *d.anchor);
    int *order = NULL;
    vp_status s = d.copy_of && d.anchor ? VP_OK : vp_fail(err, VP_ERR_NOMEM, "out of memory");
    if (!s) {
        d.share_of = d.copy_of + nv + 1;
        d.gather_of = d.share_of + nv + 1;
        for (int v = 0; v < 3 * (nv + 1); v++) d.copy_of[v] = -1;
    }
    for (int e = 0; e < q->n_edits && !s; e++) {
        const edit *ed = &q->edits[e];
        int v = g->nodes[ed->node].inputs[ed->input];
        int u = ed->kind == WRAP ? copy_value(&d, ed->node, v)
                : ed->kind == SHARE ? share_value(&d, ed->node, v, ed->axis)
                                    : gather_value(&d, ed->node, v);
        if (u < 0) s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
        else g->nodes[ed->node].inputs[ed->input] = u;
    }
    if (!s && g->n_nodes > n0) {
        order = malloc((size_t)g->n_nodes * sizeof *order);
        if (!order) s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
        for (int i = 0, k = 0; !s && i < n0; i++) {
            for (int a = n0; a < g->n_nodes; a++)
                if (d.anchor[a - n0] == i) order[k++] = a;
            order[k++] = i;
        }
        if (!s) s = vp_graph_reorder(g, order, err);
    }
    free(order);
    free(d.copy_of);
    free(d.anchor);
    return s;
}

vp_status vp_tp_sequence(vp_graph *g, int n, int rank, vp_tp_result *r, vp_error *err) {
    int moved = 0;
    vp_status s0 = vp_tp_seq_unflatten(g, &moved, err);
    if (s0) return s0;
    int nv = g->n_values, n0 = g->n_nodes;
    seq q = {.g = g, .n = n, .rank = rank, .r = r};
    q.split = calloc((size_t)nv + 1, 1);
    q.grad = vp_tp_gradients(g);
    vp_status s = q.split && q.grad ? VP_OK : vp_fail(err, VP_ERR_NOMEM, "out of memory");
    for (int i = 0; !s && i < n0; i++) {
        const vp_node *nd = &g->nodes[i];
        int any_split = 0;
        for (int k = 0; k < nd->n_inputs; k++)
            if (nd->inputs[k] >= 0) any_split |= q.split[nd->inputs[k]];
        const vp_value *y = nd->n_outputs ? &g->values[nd->outputs[0]] : NULL;
        if (is_op(nd, "vplan", "TPAllReduce") && !any_split && y->rank != 3) {
            continue; /* a sum of another shape (a classifier's logits): replicated, as it was */
        } else if (is_op(nd, "vplan", "TPAllReduce")) { /* a row product's or an embedding's sum */
            if (any_split || y->dims[SEQ_AXIS] % n)
                s = vp_node_fail(err, VP_ERR_USAGE, nd, "--sp: --tp %d does not divide the sequence of the all-reduced "
                                 "[batch, seq, hidden] (%lld positions)", n, (long long)y->dims[SEQ_AXIS]);
            if (!s) s = set_op(g, i, "TPReduceScatter", err);
            q.split[g->nodes[i].outputs[0]] = 1;
            r->n_scatter++;
        } else if (is_op(nd, "vplan", "TPCopy") && any_split) {
            s = set_op(g, i, "TPAllGather", err);
            r->n_gather++;
        } else if (any_split && !nd->folded) { /* a folded Shape read the whole one's size: constants stay */
            if (token_wise(g, nd)) {
                s = token_node(&q, i, err);
                continue;
            }
            if (!strcmp(nd->domain, "vplan") && !strncmp(nd->op_type, "TP", 2))
                s = refuse(nd, "a collective reads a sequence-split activation", err);
            /* an op that mixes tokens (a classifier's first token, a head left replicated):
             * the whole sequence gathered for it */
            for (int k = 0; k < nd->n_inputs && !s; k++)
                if (nd->inputs[k] >= 0 && q.split[nd->inputs[k]]) s = add_edit(&q, i, k, GATHER, 0, err);
        }
    }
    for (int k = 0; !s && k < g->n_outputs; k++)
        if (q.split[g->outputs[k]])
            s = vp_fail(err, VP_ERR_USAGE, "--sp: the graph output '%s' would be split along the sequence",
                        g->values[g->outputs[k]].name);
    if (!s) s = apply_edits(&q, n0, nv, err);
    for (int i = 0; !s && i < g->n_nodes; i++)
        if (!g->nodes[i].folded) s = vp_infer_node(g, i, 0, NULL, err);
    if (!s) s = vp_graph_link(g, err);
    free(q.split);
    free(q.grad);
    free(q.edits);
    return s;
}
