/* Vocabulary parallelism: the token embedding and the LM head split by vocabulary rows,
 * and the cross-entropy computed across ranks so that the full logits never exist
 * (Megatron-LM's VocabParallelEmbedding and vocab_parallel_cross_entropy).
 *
 * In: a forward graph (embedding) or the loss being built (cross-entropy), n ranks and
 * this rank.  Out: standard ONNX ops plus the vplan collectives, so that autodiff builds
 * the backward and every executor and kernel table runs them as they are.  Rank r holds
 * rows [r V/n, (r + 1) V/n) of the embedding and the same columns of the LM head.
 *
 *   embedding   local = ids - start; ok = 0 <= local < V/n;
 *               rows = Gather(W_r, Where(ok, local, 0)) * ok;  Y = TPAllReduce(rows)
 *               (every token's row lives on one rank; the others add zeros.  Backward:
 *               the all-reduce's gradient is the identity, Gather's scatters into W_r.)
 *   loss        m = TPAllReduceMax(ReduceMax(L_r))          the softmax's shift
 *               s = TPAllReduce(ReduceSum(Exp(L_r - m)))    its denominator
 *               t = TPAllReduce(ReduceSum(Where(label == start + j, L_r - m, 0)))
 *               loss = ReduceMean(Log(s) - t)
 *               Three all-reduces of [N, 1] forward, none backward: dL_r =
 *               (exp(L_r - m) / s - onehot_r) / N is each rank's own.  The shift carries
 *               no gradient (VP_OP_STOP_GRADIENT): the loss does not depend on it.
 *
 * The collectives of both carry `vocab` (V): the bound of the indices they serve, which
 * synthetic data needs (vp_tp_index_bound). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/graph_build.h"
#include "ir/infer.h"
#include "parallel/tp_internal.h"

int vp_tp_vocab_gather(const vp_graph *g, const vp_node *n, int ranks) {
    if (strcmp(n->op_type, "Gather") || n->domain[0] || n->folded || n->n_inputs != 2 || n->n_outputs != 1 ||
        n->inputs[0] < 0 || n->inputs[1] < 0 || n->outputs[0] < 0)
        return 0;
    const vp_value *w = &g->values[n->inputs[0]], *ids = &g->values[n->inputs[1]];
    int64_t axis = vp_attr_int(n, "axis", 0);
    /* a trainable table read only here (a tied LM head stays replicated), indexed by a
     * graph input (token ids: a position table indexed by a constant stays whole) */
    return (w->flags & VP_VAL_PARAM) && w->rank == 2 && w->n_consumers == 1 && w->producer < 0 &&
           (axis == 0 || axis == -2) && (ids->flags & VP_VAL_INPUT) && ids->producer < 0 &&
           (ids->dtype == VP_I64 || ids->dtype == VP_I32) && w->dims[0] % ranks == 0;
}

/* Adds nodes and infers each at once; the first failure sticks in s. */
typedef struct builder {
    vp_graph *g;
    char stem[400];
    vp_phase phase;
    int opset;
    vp_status s;
    vp_error *err;
} builder;

static int begin(builder *b, const char *op, const char *domain, const char *what, int n_in, const int *in, int out) {
    if (b->s) return -1;
    char name[512];
    snprintf(name, sizeof name, "%s/%s", b->stem, what);
    if (out < 0) out = vp_graph_add_unique_value(b->g, name);
    int id = out < 0 ? -1 : vp_graph_add_node(b->g, op, domain, name, n_in, in, 1, &out);
    if (id < 0) {
        b->s = vp_fail(b->err, VP_ERR_NOMEM, "out of memory");
        return -1;
    }
    b->g->nodes[id].phase = b->phase;
    if (!domain[0]) b->g->nodes[id].opset = b->opset;
    return id;
}

static void attr(builder *b, int node, const char *name, int64_t v) {
    if (!b->s && node >= 0) b->s = vp_node_add_attr_int(b->g, node, name, v);
}

static int finish(builder *b, int node) {
    if (b->s || node < 0) return -1;
    b->s = vp_infer_node(b->g, node, 0, NULL, b->err);
    return b->s ? -1 : b->g->nodes[node].outputs[0];
}

static int op1(builder *b, const char *op, const char *what, int x) { return finish(b, begin(b, op, "", what, 1, &x, -1)); }

static int op2(builder *b, const char *op, const char *what, int x, int y) {
    int in[2] = {x, y};
    return finish(b, begin(b, op, "", what, 2, in, -1));
}

static int constant(builder *b, vp_dtype dt, int rank, const int64_t *dims, const void *data) {
    if (b->s) return -1;
    int id = vp_build_const(b->g, b->stem, dt, rank, dims, data);
    if (id < 0) b->s = vp_fail(b->err, VP_ERR_NOMEM, "out of memory");
    return id;
}

static int scalar_i64(builder *b, int64_t v) { return constant(b, VP_I64, 0, NULL, &v); }

static int allreduce(builder *b, const char *op, const char *what, int x, int out, int ranks, int64_t vocab) {
    int id = begin(b, op, "vplan", what, 1, &x, out);
    attr(b, id, "ranks", ranks);
    attr(b, id, "vocab", vocab);
    return finish(b, id);
}

/* ReduceOp over the last axis of a rank-2 value, kept: axes an input from opset 13
 * (ReduceSum) or 18 (the others), an attribute before. */
static int reduce_last(builder *b, const char *op, const char *what, int x) {
    int64_t one = 1, axis = 1;
    int as_input = b->opset >= (strcmp(op, "ReduceSum") ? 18 : 13);
    int axes = as_input ? constant(b, VP_I64, 1, &one, &axis) : -1;
    int in[2] = {x, axes};
    int id = begin(b, op, "", what, as_input ? 2 : 1, in, -1);
    if (!as_input && !b->s) b->s = vp_node_add_attr_ints(b->g, id, "axes", &axis, 1);
    attr(b, id, "keepdims", 1);
    return finish(b, id);
}

static int unsqueeze_last(builder *b, const char *what, int x) {
    int64_t one = 1, axis = -1;
    return op2(b, "Unsqueeze", what, x, constant(b, VP_I64, 1, &one, &axis));
}

static int opset_of(const vp_graph *g) { return g->opset_onnx > 13 ? g->opset_onnx : 13; }

vp_status vp_tp_vocab_embedding(vp_graph *g, int node, int n, int rank, int *n_before, vp_error *err) {
    builder b = {.g = g, .phase = g->nodes[node].phase, .opset = opset_of(g), .err = err};
    snprintf(b.stem, sizeof b.stem, "%s/tp_vocab", g->nodes[node].name);
    int first = g->n_nodes, w = g->nodes[node].inputs[0], ids = g->nodes[node].inputs[1], y = g->nodes[node].outputs[0];
    int64_t part = g->values[w].dims[0], vocab = part * n; /* the table is this rank's slice already */
    vp_dtype dt = g->values[w].dtype;
    vp_embedding_hint *e = &g->nodes[node].embedding; /* torch's padding row, where this slice holds it */
    if (e->from_embedding && e->padding_idx >= 0)
        e->padding_idx = e->padding_idx >= rank * part && e->padding_idx < (rank + 1) * part ? e->padding_idx - rank * part
                                                                                              : -1;
    int zero = scalar_i64(&b, 0);
    int local = op2(&b, "Sub", "shift", ids, scalar_i64(&b, rank * part));
    if (local >= 0 && g->values[local].dtype != VP_I64) local = -1, b.s = vp_fail(err, VP_ERR_UNSUPPORTED, "int32 token ids");
    int ok = op2(&b, "And", "in_slice", op2(&b, "GreaterOrEqual", "at_least_start", local, zero),
                 op2(&b, "Less", "below_end", local, scalar_i64(&b, part)));
    int in3[3] = {ok, local, zero};
    int idx = finish(&b, begin(&b, "Where", "", "local_ids", 3, in3, -1));
    int cast = begin(&b, "Cast", "", "in_slice_float", 1, &ok, -1);
    attr(&b, cast, "to", (int64_t)dt); /* vp_dtype is the ONNX code */
    int mask = unsqueeze_last(&b, "in_slice_mask", finish(&b, cast));
    if (b.s) return b.s;
    *n_before = g->n_nodes - first;
    char name[512];
    snprintf(name, sizeof name, "%s_rows", g->values[y].name);
    int rows = vp_graph_add_unique_value(g, name);
    if (rows < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    g->nodes[node].inputs[1] = idx;
    g->nodes[node].outputs[0] = rows;
    b.s = vp_infer_node(g, node, 0, NULL, err);
    int partial = op2(&b, "Mul", "rows_of_slice", rows, mask);
    allreduce(&b, "TPAllReduce", "TPAllReduce", partial, y, n, vocab);
    return b.s;
}

vp_status vp_tp_vocab_ce(vp_graph *g, int logits, int labels, const vp_tp_result *tp, int *loss, vp_error *err) {
    builder b = {.g = g, .phase = VP_PHASE_LOSS, .opset = opset_of(g), .err = err};
    snprintf(b.stem, sizeof b.stem, "loss/vocab_parallel");
    const vp_value *L = &g->values[logits];
    int64_t part = L->dims[1], start = part * tp->rank, ones[2] = {1, part};
    vp_dtype dt = L->dtype;
    int m = allreduce(&b, "TPAllReduceMax", "max", reduce_last(&b, "ReduceMax", "local_max", logits), -1, tp->n, tp->vocab);
    int z = op2(&b, "Sub", "shifted", logits, m);
    int s = allreduce(&b, "TPAllReduce", "sum_exp", reduce_last(&b, "ReduceSum", "local_sum_exp", op1(&b, "Exp", "exp", z)),
                      -1, tp->n, tp->vocab);
    /* the label's shifted logit, on the rank whose slice holds it (zero elsewhere) */
    int64_t *pos = b.s ? NULL : malloc((size_t)part * sizeof *pos + 1);
    if (!b.s && !pos) b.s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
    for (int64_t j = 0; pos && j < part; j++) pos[j] = start + j;
    int cls = constant(&b, VP_I64, 2, ones, pos);
    free(pos);
    int hit = op2(&b, "Equal", "is_label", unsqueeze_last(&b, "labels_column", labels), cls);
    double zero64 = 0;
    float zero32 = 0;
    int zero = constant(&b, dt, 0, NULL, dt == VP_F64 ? (const void *)&zero64 : (const void *)&zero32);
    if (!b.s && dt != VP_F32 && dt != VP_F64) b.s = vp_fail(err, VP_ERR_UNSUPPORTED, "vocabulary-parallel logits of %s", vp_dtype_name(dt));
    int in3[3] = {hit, z, zero};
    int picked = finish(&b, begin(&b, "Where", "", "label_logit", 3, in3, -1));
    int t = allreduce(&b, "TPAllReduce", "label_logit_sum", reduce_last(&b, "ReduceSum", "local_label_logit", picked), -1,
                      tp->n, tp->vocab);
    int per_row = op2(&b, "Sub", "per_token", op1(&b, "Log", "log_sum_exp", s), t);
    int mean = begin(&b, "ReduceMean", "", "mean", 1, &per_row, -1);
    attr(&b, mean, "keepdims", 0);
    *loss = finish(&b, mean);
    return b.s;
}

/* Follows an integer input's readers a few nodes down to a collective that says which
 * vocabulary it serves. */
int64_t vp_tp_index_bound(const vp_graph *g, int value) {
    int frontier[16], n = 0;
    frontier[n++] = value;
    for (int depth = 0; depth < 7 && n; depth++) {
        int next[16], m = 0;
        for (int k = 0; k < n; k++) {
            const vp_value *v = &g->values[frontier[k]];
            for (int c = 0; c < v->n_consumers; c++) {
                const vp_node *nd = &g->nodes[v->consumers[c]];
                int64_t vocab = !strcmp(nd->domain, "vplan") ? vp_attr_int(nd, "vocab", 0) : 0;
                if (vocab > 0) return vocab;
                for (int o = 0; o < nd->n_outputs && m < 16; o++)
                    if (nd->outputs[o] >= 0) next[m++] = nd->outputs[o];
            }
        }
        memcpy(frontier, next, (size_t)m * sizeof *next);
        n = m;
    }
    return 0;
}
