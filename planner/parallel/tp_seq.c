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
 *     sliced by rows, this rank's s/n: each position lives on one rank.
 * Between them only ops that treat tokens apart are allowed (elementwise ops,
 * LayerNormalization over the hidden axis, Dropout: it keeps, of the mask the one-rank
 * step draws, this rank's positions, its attributes vplan_axis, vplan_ranks and
 * vplan_rank saying which, so the gathered masks are that step's mask and the ranks'
 * losses equal its loss); anything else that reads a sequence-split
 * value, a graph output among them, or a token-dependent value whole beside a split one
 * (an embedding left replicated) refuses, VP_ERR_USAGE naming the node. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op_semantics.h"

#include "ir/infer.h"
#include "ir/op_registry.h"
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

typedef struct seq {
    vp_graph *g;
    int n, rank;
    char *split;   /* per value: split along the sequence */
    char *tokens;  /* per value: depends on a graph input */
    int *wrap;     /* (node, input) pairs of parameters to read through a TPCopy */
    int n_wrap, cap_wrap;
    vp_tp_result *r;
} seq;

static vp_status refuse(const vp_node *n, const char *why, vp_error *err) {
    return vp_node_fail(err, VP_ERR_USAGE, n, "--sp: %s", why);
}

/* A token-wise node with a split input: the others broadcast along the sequence, are
 * split too, or are parameters sliced or wrapped. */
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
    for (int k = 0; k < n->n_inputs; k++) {
        int v = n->inputs[k];
        if (v < 0 || q->split[v]) continue;
        const vp_value *x = &g->values[v];
        int a = SEQ_AXIS - (y->rank - x->rank); /* x's axis under the sequence, broadcast aligned */
        int along = a >= 0 && x->dims[a] != 1;
        if (q->tokens[v] && (along || !(x->flags & (VP_VAL_PARAM | VP_VAL_INITIALIZER | VP_VAL_CONST))))
            return refuse(n, "a token-dependent value whole beside a sequence-split one (is the embedding split by "
                             "vocabulary?)",
                          err);
        if (!(x->flags & VP_VAL_PARAM)) {
            if (along && !ln) return refuse(n, "a constant as long as the sequence", err);
            continue;
        }
        if (along && !ln) { /* a position table added whole: this rank's rows */
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
            continue;
        }
        if (q->n_wrap == q->cap_wrap) return refuse(n, "too many parameters in the sequence-split region", err);
        q->wrap[2 * q->n_wrap] = id; /* read whole: its gradient summed across ranks */
        q->wrap[2 * q->n_wrap + 1] = k;
        q->n_wrap++;
    }
    for (int k = 0; k < n->n_outputs; k++)
        if (n->outputs[k] >= 0 && g->values[n->outputs[k]].rank == y->rank) q->split[n->outputs[k]] = 1;
    return strcmp(n->op_type, "Dropout") ? VP_OK : vp_tp_dropout_part(g, id, SEQ_AXIS, q->n, q->rank, err);
}

vp_status vp_tp_dropout_part(vp_graph *g, int node, int axis, int n, int rank, vp_error *err) {
    /* where each element lies in the whole tensor: the kernels draw the whole tensor's
     * stream and keep this rank's positions (runtime/cpu/k_elementwise_cast.c) */
    if (vp_node_add_attr_int(g, node, "vplan_axis", axis) || vp_node_add_attr_int(g, node, "vplan_ranks", n) ||
        vp_node_add_attr_int(g, node, "vplan_rank", rank))
        return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    return VP_OK;
}

vp_status vp_tp_sequence(vp_graph *g, int n, int rank, vp_tp_result *r, vp_error *err) {
    int nv = g->n_values, n0 = g->n_nodes;
    seq q = {.g = g, .n = n, .rank = rank, .r = r, .cap_wrap = 4 * n0 + 16};
    q.split = calloc((size_t)nv + 1, 1);
    q.tokens = calloc((size_t)nv + 1, 1);
    q.wrap = malloc((size_t)(2 * q.cap_wrap) * sizeof *q.wrap);
    int *copy_of = malloc(((size_t)nv + 1) * sizeof *copy_of), *order = NULL;
    vp_status s = q.split && q.tokens && q.wrap && copy_of ? VP_OK : vp_fail(err, VP_ERR_NOMEM, "out of memory");
    for (int v = 0; !s && v < nv; v++) {
        q.tokens[v] = (g->values[v].flags & VP_VAL_INPUT) != 0;
        copy_of[v] = -1;
    }
    for (int i = 0; !s && i < n0; i++) {
        const vp_node *nd = &g->nodes[i];
        int any_tok = 0, any_split = 0;
        for (int k = 0; k < nd->n_inputs; k++)
            if (nd->inputs[k] >= 0) any_tok |= q.tokens[nd->inputs[k]], any_split |= q.split[nd->inputs[k]];
        for (int k = 0; k < nd->n_outputs; k++)
            if (nd->outputs[k] >= 0 && !nd->folded) q.tokens[nd->outputs[k]] = (char)any_tok;
        if (is_op(nd, "vplan", "TPAllReduce")) { /* a row product's or an embedding's sum */
            const vp_value *y = &g->values[nd->outputs[0]];
            if (any_split || y->rank != 3 || y->dims[SEQ_AXIS] % n)
                s = refuse(nd, "the all-reduced activation is not [batch, seq, hidden] with seq divisible by --tp", err);
            if (!s) s = set_op(g, i, "TPReduceScatter", err);
            q.split[g->nodes[i].outputs[0]] = 1;
            r->n_scatter++;
        } else if (is_op(nd, "vplan", "TPCopy") && any_split) {
            s = set_op(g, i, "TPAllGather", err);
            r->n_gather++;
        } else if (any_split && !nd->folded) { /* a folded Shape read the whole one's size: constants stay */
            if (!token_wise(g, nd)) s = refuse(nd, "reads a sequence-split activation (only token-wise ops may)", err);
            else s = token_node(&q, i, err);
        }
    }
    for (int k = 0; !s && k < g->n_outputs; k++)
        if (q.split[g->outputs[k]])
            s = vp_fail(err, VP_ERR_USAGE, "--sp: the graph output '%s' would be split along the sequence",
                        g->values[g->outputs[k]].name);
    /* the wrapped parameters' TPCopy nodes, appended, then placed first (they read
     * parameters only) */
    for (int w = 0; !s && w < q.n_wrap; w++) {
        int node = q.wrap[2 * w], k = q.wrap[2 * w + 1], v = g->nodes[node].inputs[k];
        if (copy_of[v] < 0) {
            char name[512];
            snprintf(name, sizeof name, "%s_tpcopy", g->values[v].name);
            int y = vp_graph_add_unique_value(g, name);
            snprintf(name, sizeof name, "%s/TPCopy", g->values[v].name);
            int c = y < 0 ? -1 : vp_graph_add_node(g, "TPCopy", "vplan", name, 1, &v, 1, &y);
            if (c < 0 || vp_node_add_attr_int(g, c, "ranks", n)) {
                s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
                break;
            }
            copy_of[v] = y;
            r->n_param_copy++;
        }
        g->nodes[node].inputs[k] = copy_of[v];
    }
    if (!s && g->n_nodes > n0) {
        order = malloc((size_t)g->n_nodes * sizeof *order);
        if (!order) s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
        for (int i = 0; !s && i < g->n_nodes; i++) order[i] = i < g->n_nodes - n0 ? n0 + i : i - (g->n_nodes - n0);
        if (!s) s = vp_graph_reorder(g, order, err);
    }
    for (int i = 0; !s && i < g->n_nodes; i++)
        if (!g->nodes[i].folded) s = vp_infer_node(g, i, 0, NULL, err);
    if (!s) s = vp_graph_link(g, err);
    free(order);
    free(copy_of);
    free(q.split);
    free(q.tokens);
    free(q.wrap);
    return s;
}
