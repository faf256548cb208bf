/* Finding the column/row regions: a forward dataflow over split states.
 *
 * In: an inferred forward graph and n.  Out: which products are column- and
 * row-parallel, the weights and biases each rank slices, and the shape constants that
 * change.  Every value is replicated (R) or split along one axis (S): each rank holds a
 * contiguous 1/n of that axis, or of each of `blocks` equal blocks of it when the value
 * lies between a fused QKV product and its Split.  Candidates (products by a weight with
 * a replicated input) are tried in graph order: a candidate is kept when, with it and
 * those kept before, every split value reaches only ops that take it and ends in a
 * row-parallel product.  The states are re-derived from scratch for each candidate:
 * graphs here have hundreds of nodes and a handful of candidates.
 *
 * Between the products a split passes what torch 1.13 and torch 2.x write: elementwise
 * ops (a gate times an up projection joins two products' columns), head reshapes and
 * transposes in any order, Slice and Concat along other axes (rotary embeddings'
 * rotate-half), Unsqueeze and Expand (grouped-query attention's key/value heads repeated
 * per query head: the Expand's shape becomes the rank's share), a fused QKV product's
 * Split after a reshape that keeps its columns whole, the fused Attention; constants
 * folded from whole shapes that nothing reads any more are ignored.
 *
 * A third state, whole (tp_whole.c): a value computed alike on every rank inside a
 * region, from a product marked whole (GQA's key/value projections where n does not
 * divide their heads), cut to this rank's share where a split op reads it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/op_registry.h"
#include "parallel/tp_internal.h"

typedef vp_tp_state state;
typedef vp_tp_walk walk;

int vp_tp_product(const vp_graph *g, const vp_node *n, int *w, int *out_axis, int *in_axis) {
    int trans_b = 0, wi = 1;
    if (!strcmp(n->op_type, "MatMul") && !n->domain[0]) {
    } else if (!strcmp(n->op_type, "FusedMatMul") && !strcmp(n->domain, "com.microsoft")) {
        if (vp_attr_int(n, "transA", 0) || vp_attr_int(n, "transBatchA", 0) || vp_attr_int(n, "transBatchB", 0)) return 0;
        trans_b = (int)vp_attr_int(n, "transB", 0);
    } else if (!strcmp(n->op_type, "GeluMatMul") && !strcmp(n->domain, "vplan")) {
        trans_b = (int)vp_attr_int(n, "transB", 0); /* gelu(H) op(W): elementwise, then a product */
    } else if (!strcmp(n->op_type, "SwiGluMatMul") && !strcmp(n->domain, "vplan")) {
        trans_b = (int)vp_attr_int(n, "transB", 0); /* (swish(G) U) op(W): G and U split alike */
        wi = 2;
    } else if (!strcmp(n->op_type, "Gemm") && !n->domain[0]) {
        if (vp_attr_int(n, "transA", 0)) return 0;
        trans_b = (int)vp_attr_int(n, "transB", 0);
    } else {
        return 0;
    }
    if (n->n_inputs <= wi || n->inputs[0] < 0 || n->inputs[wi] < 0 || (wi == 2 && n->inputs[1] < 0)) return 0;
    const vp_value *b = &g->values[n->inputs[wi]];
    if (!(b->flags & VP_VAL_PARAM) || b->rank != 2 || b->n_consumers != 1) return 0;
    *w = wi;
    *out_axis = trans_b ? 0 : 1;
    *in_axis = trans_b ? 1 : 0;
    return 1;
}

void vp_tp_divides(walk *w, const vp_node *n, int64_t dim, const char *what) {
    if (dim % w->n == 0 || w->div_failed) return;
    w->div_failed = 1;
    vp_node_fail(&w->div_err, VP_ERR_USAGE, n, "--tp %d does not divide %s (%lld)", w->n, what, (long long)dim);
}

void *vp_tp_walk_push(walk *w, void **arr, int *n, int *cap, size_t size) {
    if (*n == *cap) {
        int grown = *cap ? 2 * *cap : 16;
        void *p = realloc(*arr, (size_t)grown * size);
        if (!p) {
            w->nomem = 1;
            return NULL;
        }
        *arr = p;
        *cap = grown;
    }
    return (char *)*arr + (size_t)(*n)++ * size;
}

static void add_slice(walk *w, int value, int axis, int origin) {
    vp_tp_slice *sl = vp_tp_walk_push(w, (void **)&w->f->slices, &w->f->n_slices, &w->cap_slices, sizeof *sl);
    if (sl) *sl = (vp_tp_slice){value, axis, origin};
}

static vp_tp_edit *add_edit(walk *w, int node, int input) {
    vp_tp_edit *e = vp_tp_walk_push(w, (void **)&w->f->edits, &w->f->n_edits, &w->cap_edits, sizeof *e);
    if (!e) return NULL;
    memset(e, 0, sizeof *e);
    e->node = node;
    e->input = input;
    return e;
}

/* A weight or bias sliced along axis: a parameter (or a frozen float initializer) that
 * only this node reads.  (Without data, as in a graph built to be planned only, its
 * shape is sliced.) */
static int sliceable(const vp_value *v) {
    return (v->flags & (VP_VAL_PARAM | VP_VAL_INITIALIZER)) && v->n_consumers == 1 && v->producer < 0;
}

static int column(walk *w, int id) {
    vp_graph *g = w->g;
    const vp_node *n = &g->nodes[id];
    int wi, oa, ia;
    if (!vp_tp_product(g, n, &wi, &oa, &ia) || w->st[n->inputs[0]].axis != VP_TP_REPLICATED ||
        (wi == 2 && w->st[n->inputs[1]].axis != VP_TP_REPLICATED))
        return 0;
    const vp_value *wv = &g->values[n->inputs[wi]], *y = &g->values[n->outputs[0]];
    vp_tp_divides(w, n, wv->dims[oa], "the output features of its weight");
    add_slice(w, n->inputs[wi], oa, id);
    if (wi == 1 && n->n_inputs > 2 && n->inputs[2] >= 0) { /* Gemm's bias C */
        const vp_value *c = &g->values[n->inputs[2]];
        if (c->rank != 1 || c->dims[0] != wv->dims[oa] || !sliceable(c)) return 0;
        add_slice(w, n->inputs[2], 0, id);
    }
    w->st[n->outputs[0]] = (state){(signed char)(y->rank - 1), id};
    return 1;
}

/* A product whose input is split along its contraction axis: row-parallel. */
static int row(walk *w, int id, state a) {
    vp_graph *g = w->g;
    const vp_node *n = &g->nodes[id];
    int wi, oa, ia;
    const vp_value *x = &g->values[n->inputs[0]];
    if (!vp_tp_product(g, n, &wi, &oa, &ia) || a.axis != x->rank - 1) return 0;
    /* Gemm's bias goes after the all-reduce (tp_split.c), once: whole and unscaled */
    if (wi == 1 && n->n_inputs > 2 && n->inputs[2] >= 0 &&
        (w->st[n->inputs[2]].axis >= 0 || vp_attr_float(n, "beta", 1.0f) != 1.0f))
        return 0;
    if (a.origin >= 0 && w->f->blocks[a.origin] > 1) return 0;
    if (wi == 2) { /* SwiGLU's up half split as its gate: the same columns of the gated width */
        state u = w->st[n->inputs[1]];
        if (w->st[n->inputs[0]].axis != x->rank - 1 || u.axis != x->rank - 1 || (u.origin >= 0 && w->f->blocks[u.origin] > 1))
            return 0;
    }
    add_slice(w, n->inputs[wi], ia, -1);
    w->f->is_row[id] = 1;
    return 1; /* its output is replicated once all-reduced */
}

/* Whether a split from `origin` is plain columns (no fused-QKV blocks): a value from two
 * products' columns may then lose its origin. */
static int one_block(const walk *w, int origin) { return origin < 0 || w->f->blocks[origin] == 1; }

static int elementwise(walk *w, const vp_node *n) {
    static const char *const binary[] = {"Add", "Sub", "Mul", "Div", "Dropout", NULL}; /* Dropout's ratio, mode: scalars */
    static const char *const unary[] = {"Gelu", "FastGelu", "Relu", "Sigmoid", "Swish", "Tanh", "Erf", "Neg", "Identity",
                                        "Cast", "Sqrt", "Exp", "Softplus", "LeakyRelu", "Elu", NULL};
    int is_bin = 0, is_un = 0;
    for (int k = 0; binary[k]; k++) is_bin |= !strcmp(n->op_type, binary[k]);
    for (int k = 0; unary[k]; k++) is_un |= !strcmp(n->op_type, unary[k]);
    if (!is_bin && !is_un) return -1;
    if (is_un && n->n_inputs != 1) return 0;
    vp_graph *g = w->g;
    const vp_value *y = &g->values[n->outputs[0]];
    int out_axis = -1, origin = -1;
    for (int k = 0; k < n->n_inputs; k++) { /* the split inputs agree on one output axis */
        state s = w->st[n->inputs[k]];
        if (s.axis < 0) continue;
        const vp_value *x = &g->values[n->inputs[k]];
        int a = s.axis + (y->rank - x->rank);
        if (x->dims[s.axis] != y->dims[a] || (out_axis >= 0 && a != out_axis)) return 0;
        if (out_axis >= 0 && s.origin != origin) { /* two products' columns: a gate times an up projection */
            if (!one_block(w, origin) || !one_block(w, s.origin)) return 0;
            s.origin = -1;
        }
        out_axis = a;
        origin = s.origin;
    }
    for (int k = 0; k < n->n_inputs; k++) { /* the replicated ones broadcast along it or are sliced */
        if (w->st[n->inputs[k]].axis >= 0) continue;
        const vp_value *x = &g->values[n->inputs[k]];
        int a = out_axis - (y->rank - x->rank);
        if (a < 0 || x->dims[a] == 1) { /* broadcast: its gradient, this rank's part, summed */
            if (!vp_tp_wrap_input(w, (int)(n - g->nodes), k, origin)) return 0;
            continue;
        }
        if (!sliceable(x)) return 0;
        add_slice(w, n->inputs[k], a, origin);
    }
    for (int k = 0; k < n->n_outputs; k++)
        if (n->outputs[k] >= 0) w->st[n->outputs[k]] = (state){(signed char)out_axis, origin};
    if (!strcmp(n->op_type, "Dropout")) { /* its mask, the one-rank mask's slice (vp_tp_dropout_part) */
        w->f->drop_axis[n - g->nodes] = out_axis;
        w->f->drop_origin[n - g->nodes] = origin;
    }
    return 1;
}

static int split_op(walk *w, int id, state s) {
    vp_graph *g = w->g;
    const vp_node *n = &g->nodes[id];
    const vp_value *x = &g->values[n->inputs[0]];
    int axis = (int)vp_attr_int(n, "axis", 0);
    if (axis < 0) axis += x->rank;
    int64_t sizes[8];
    int k = n->n_outputs;
    if (k > 8) return 0;
    for (int i = 0; i < k; i++) {
        if (n->outputs[i] < 0) return 0;
        sizes[i] = g->values[n->outputs[i]].dims[axis];
    }
    if (axis == s.axis) {
        if (s.origin < 0 || w->f->blocks[s.origin] != 1) return 0;
        for (int i = 0; i < k; i++) {
            if (sizes[i] != sizes[0]) return 0; /* blocks of one size: Q, K, V */
            vp_tp_divides(w, n, sizes[i], "the sizes it splits into");
        }
        w->f->blocks[s.origin] = k;
        const int64_t *attr;
        if (n->n_inputs > 1 && n->inputs[1] >= 0) {
            vp_tp_edit *e = add_edit(w, id, 1);
            if (!e) return 0;
            e->n = k;
            for (int i = 0; i < k; i++) e->vals[i] = sizes[i] / w->n;
        } else if (vp_attr_ints(n, "split", &attr) >= 0) {
            return 0; /* opset < 13 split attribute: not rewritten */
        }
        s.origin = -1;
    }
    for (int i = 0; i < k; i++) w->st[n->outputs[i]] = s;
    return 1;
}

/* Reshape moves the split to the output axis with the same product of leading dims: the
 * heads when [.., h] becomes [.., heads, head_dim], the hidden size when they merge. */
static int reshape(walk *w, int id, state s) {
    vp_graph *g = w->g;
    const vp_node *n = &g->nodes[id];
    const vp_value *x = &g->values[n->inputs[0]], *y = &g->values[n->outputs[0]];
    const vp_value *shape = n->n_inputs > 1 && n->inputs[1] >= 0 ? &g->values[n->inputs[1]] : NULL;
    if (!shape || !shape->data || shape->dtype != VP_I64 || shape->rank != 1 || shape->dims[0] != y->rank ||
        y->rank > 8 || (s.origin >= 0 && w->f->blocks[s.origin] > 1))
        return 0;
    int64_t lead = 1, out_lead = 1;
    for (int d = 0; d < s.axis; d++) lead *= x->dims[d];
    int b = 0;
    for (; b < y->rank && out_lead < lead; b++) out_lead *= y->dims[b];
    if (b >= y->rank || out_lead != lead) return 0;
    while (b < y->rank - 1 && y->dims[b] == 1) b++;
    /* the split must be the outermost factor of the axis: whole heads, whole rows */
    int64_t in_tail = 1, out_tail = 1;
    for (int d = s.axis; d < x->rank; d++) in_tail *= x->dims[d];
    for (int d = b; d < y->rank; d++) out_tail *= y->dims[d];
    if (in_tail != out_tail) return 0;
    if (y->dims[b] > x->dims[s.axis] && y->dims[b] % x->dims[s.axis]) return 0;
    vp_tp_divides(w, n, y->dims[b], y->rank > x->rank ? "the heads" : "the size of the axis it splits");
    const int64_t *sv = shape->data;
    vp_tp_edit *e = add_edit(w, id, 1);
    if (!e) return 0;
    e->n = y->rank;
    for (int d = 0; d < y->rank; d++) e->vals[d] = sv[d];
    if (sv[b] > 0) e->vals[b] = sv[b] / w->n;
    else if (sv[b] == 0) return 0; /* "copy the input's dim" would keep the full size */
    /* the axis whole and last on both sides ([B*T, 3h] to [B, T, 3h]): still the product's
     * columns, blocks and all, for the Split of a fused QKV after it */
    int same = y->dims[b] == x->dims[s.axis] && b == y->rank - 1 && s.axis == x->rank - 1;
    w->st[n->outputs[0]] = (state){(signed char)b, same ? s.origin : -1};
    return 1;
}

static int transpose(walk *w, const vp_node *n, state s) {
    const int64_t *perm;
    int np = vp_attr_ints(n, "perm", &perm);
    const vp_value *x = &w->g->values[n->inputs[0]];
    int out = -1;
    if (np < 0) out = x->rank - 1 - s.axis;
    for (int d = 0; d < np; d++)
        if (perm[d] == s.axis) out = d;
    if (out < 0) return 0;
    w->st[n->outputs[0]] = (state){(signed char)out, s.origin};
    return 1;
}

/* The constant int64 vector input k of n (axes, a shape), or NULL. */
static const int64_t *const_ints(const vp_graph *g, const vp_node *n, int k, int *count) {
    if (k >= n->n_inputs || n->inputs[k] < 0) return NULL;
    const vp_value *v = &g->values[n->inputs[k]];
    if (!v->data || v->dtype != VP_I64 || v->rank != 1) return NULL;
    *count = (int)v->dims[0];
    return v->data;
}

/* Slice along axes other than the split one (rotary embeddings' halves of head_dim). */
static int slice_op(walk *w, const vp_node *n, state s) {
    const vp_graph *g = w->g;
    const vp_value *x = &g->values[n->inputs[0]];
    for (int k = 1; k < n->n_inputs; k++)
        if (n->inputs[k] >= 0 && w->st[n->inputs[k]].axis >= 0) return 0;
    int n_starts = 0, n_axes = 0;
    if (n->opset < 10 || !const_ints(g, n, 1, &n_starts)) return 0;
    const int64_t *axes = const_ints(g, n, 3, &n_axes);
    if (n->n_inputs > 3 && n->inputs[3] >= 0 && !axes) return 0;
    for (int k = 0; k < (axes ? n_axes : n_starts); k++) {
        int64_t a = axes ? axes[k] : k;
        if (a < 0) a += x->rank;
        if (a == s.axis) return 0;
    }
    w->st[n->outputs[0]] = s;
    return 1;
}

/* Concat along another axis of inputs all split along the same one. */
static int concat_op(walk *w, const vp_node *n) {
    const vp_graph *g = w->g;
    const vp_value *y = &g->values[n->outputs[0]];
    int64_t axis = vp_attr_int(n, "axis", 0);
    if (axis < 0) axis += y->rank;
    state out = {-1, -1};
    for (int k = 0; k < n->n_inputs; k++) {
        state s = w->st[n->inputs[k]];
        if (s.axis < 0 || s.axis == axis || (out.axis >= 0 && s.axis != out.axis)) return 0;
        if (out.axis >= 0 && s.origin != out.origin) {
            if (!one_block(w, out.origin) || !one_block(w, s.origin)) return 0;
            s.origin = -1;
        }
        out = s;
    }
    w->st[n->outputs[0]] = out;
    return 1;
}

/* Unsqueeze: the split axis moves past the axes inserted before it. */
static int unsqueeze_op(walk *w, const vp_node *n, state s) {
    const vp_graph *g = w->g;
    const vp_value *y = &g->values[n->outputs[0]];
    int count = 0;
    const int64_t *axes = n->opset >= 13 ? const_ints(g, n, 1, &count) : NULL;
    if (n->opset < 13) count = vp_attr_ints(n, "axes", &axes);
    if (!axes || count <= 0 || count > 8) return 0;
    char inserted[VP_MAX_RANK] = {0};
    for (int k = 0; k < count; k++) {
        int64_t a = axes[k] < 0 ? axes[k] + y->rank : axes[k];
        if (a < 0 || a >= y->rank) return 0;
        inserted[a] = 1;
    }
    int out = -1;
    for (int d = 0, i = 0; d < y->rank; d++)
        if (!inserted[d] && i++ == s.axis) out = d;
    if (out < 0) return 0;
    w->st[n->outputs[0]] = (state){(signed char)out, s.origin};
    return 1;
}

/* Expand to a constant shape that keeps the split axis whole (GQA's key/value heads,
 * repeated per query head): that entry of the shape becomes the rank's share. */
static int expand_op(walk *w, int id, state s) {
    vp_graph *g = w->g;
    const vp_node *n = &g->nodes[id];
    const vp_value *x = &g->values[n->inputs[0]], *y = &g->values[n->outputs[0]];
    int count = 0;
    const int64_t *shape = const_ints(g, n, 1, &count);
    if (!shape || count != y->rank || count > 8 || w->st[n->inputs[1]].axis >= 0) return 0;
    int out = s.axis + (y->rank - x->rank);
    if (y->dims[out] != x->dims[s.axis] || x->dims[s.axis] == 1) return 0;
    vp_tp_divides(w, n, x->dims[s.axis], "the axis it expands along");
    vp_tp_edit *e = add_edit(w, id, 1);
    if (!e) return 0;
    e->n = count;
    for (int d = 0; d < count; d++) e->vals[d] = shape[d];
    if (shape[out] > 1) e->vals[out] = shape[out] / w->n;
    w->st[n->outputs[0]] = (state){(signed char)out, s.origin};
    return 1;
}

/* Attention over whole heads: Q, K, V split along the head axis, the mask shared; Y
 * split along its head axis (2 where it is written with the heads merged, y_bshd).
 * Keys and values computed whole (tp_whole.c) are cut to this rank's heads.  Under
 * dropout its probabilities' masks are the one-rank step's at this rank's heads
 * (vp_tp_dropout_part, as a Dropout split along the heads). */
static int attention(walk *w, int id) {
    const vp_node *n = &w->g->nodes[id];
    int64_t heads = 0;
    for (int k = 0; k < 3; k++)
        if (w->st[n->inputs[k]].axis == 1) heads = w->g->values[n->inputs[k]].dims[1];
    for (int k = 0; k < 3; k++) {
        int a = w->st[n->inputs[k]].axis;
        if (a != 1 && !(a == VP_TP_WHOLE && heads && vp_tp_cut_whole(w, id, k, 1, heads))) return 0;
    }
    if (n->n_inputs > 3 && n->inputs[3] >= 0) {
        const vp_value *m = &w->g->values[n->inputs[3]];
        if (w->st[n->inputs[3]].axis != VP_TP_REPLICATED || (m->rank == 4 && m->dims[1] != 1) ||
            !vp_tp_wrap_input(w, id, 3, -1))
            return 0;
    }
    for (int k = 0; k < n->n_outputs; k++)
        if (n->outputs[k] >= 0) w->st[n->outputs[k]] = (state){k == 0 && vp_attr_int(n, "y_bshd", 0) ? 2 : 1, -1};
    if (vp_attr_float(n, "dropout", 0.0f) > 0) { /* its masks, the one-rank ones at this rank's heads */
        w->f->drop_axis[id] = 1;
        w->f->drop_origin[id] = -1;
    }
    return 1;
}

/* The plain core's Q K^T and P V: both operands split along the same batch axis (a
 * whole one cut to this rank's share). */
static int batched_matmul(walk *w, int id) {
    const vp_node *n = &w->g->nodes[id];
    if (strcmp(n->op_type, "MatMul") || n->domain[0]) return 0;
    state a = w->st[n->inputs[0]], b = w->st[n->inputs[1]];
    const vp_value *x = &w->g->values[n->inputs[0]], *y = &w->g->values[n->outputs[0]], *z = &w->g->values[n->inputs[1]];
    if (a.axis == VP_TP_WHOLE && b.axis >= 0 && b.axis < z->rank - 2 && vp_tp_cut_whole(w, id, 0, b.axis, z->dims[b.axis]))
        a = b;
    if (b.axis == VP_TP_WHOLE && a.axis >= 0 && a.axis < x->rank - 2 && vp_tp_cut_whole(w, id, 1, a.axis, x->dims[a.axis]))
        b = a;
    if (a.axis < 0 || b.axis != a.axis || a.axis >= x->rank - 2 || x->rank != y->rank) return 0;
    w->st[n->outputs[0]] = (state){a.axis, -1};
    return 1;
}

static int softmax(walk *w, const vp_node *n, state s) {
    const vp_value *x = &w->g->values[n->inputs[0]];
    int axis = (int)vp_attr_int(n, "axis", -1);
    if (axis < 0) axis += x->rank;
    if (axis == s.axis) return 0;
    w->st[n->outputs[0]] = s;
    return 1;
}

/* Whether a folded node's outputs reach a node that is not folded: a constant computed
 * from whole shapes (torch 2.x's Shape -> Slice -> Concat chains) is wrong on a rank
 * only where something reads it; what the fusions left unread is harmless. */
static int read_later(const vp_graph *g, int id, int depth) {
    const vp_node *n = &g->nodes[id];
    if (!n->folded || depth > 16) return 1;
    for (int k = 0; k < n->n_outputs; k++) {
        const vp_value *y = n->outputs[k] >= 0 ? &g->values[n->outputs[k]] : NULL;
        if (!y) continue;
        if (y->flags & VP_VAL_OUTPUT) return 1;
        for (int c = 0; c < y->n_consumers; c++)
            if (read_later(g, y->consumers[c], depth + 1)) return 1;
    }
    return 0;
}

/* One node given its inputs' states; 0 when it cannot take them. */
static int step(walk *w, int id) {
    vp_graph *g = w->g;
    const vp_node *n = &g->nodes[id];
    if (w->column[id] >= 3) return vp_tp_whole_product(w, id);
    if (w->column[id]) return column(w, id);
    if (w->f->is_embedding[id]) { /* its output replicated once all-reduced */
        add_slice(w, n->inputs[0], 0, -1);
        return 1;
    }
    state first = {-1, -1};
    int any = 0, whole = 0;
    for (int k = 0; k < n->n_inputs; k++) {
        if (n->inputs[k] < 0) continue;
        whole |= w->st[n->inputs[k]].axis == VP_TP_WHOLE;
        if (w->st[n->inputs[k]].axis >= 0) {
            if (!any) first = w->st[n->inputs[k]];
            any = 1;
        }
    }
    if (whole && !any) return vp_tp_whole_step(w, id);
    int is_attention = !strcmp(n->domain, "vplan") && !strcmp(n->op_type, "Attention");
    if (whole && !is_attention && (strcmp(n->op_type, "MatMul") || n->domain[0]))
        return 0; /* a whole value beside a split one: only where its share is cut for it */
    if (!any) return 1;
    if (n->folded) return !read_later(g, id, 0); /* a constant of the full sizes: only where nothing reads it */
    int r = elementwise(w, n);
    if (r >= 0) return r;
    if (is_attention) return attention(w, id);
    if (!strcmp(n->domain, "vplan") && (!strcmp(n->op_type, "GeluMatMul") || !strcmp(n->op_type, "SwiGluMatMul")))
        return row(w, id, first);
    if (n->domain[0] && strcmp(n->domain, "com.microsoft")) return 0;
    if (w->st[n->inputs[0]].axis < 0 && strcmp(n->op_type, "MatMul")) return 0;
    if (!strcmp(n->op_type, "Split")) return split_op(w, id, first);
    if (!strcmp(n->op_type, "Reshape")) return reshape(w, id, first);
    if (!strcmp(n->op_type, "Transpose")) return transpose(w, n, first);
    if (!strcmp(n->op_type, "Softmax")) return softmax(w, n, first);
    if (!strcmp(n->op_type, "Slice")) return slice_op(w, n, first);
    if (!strcmp(n->op_type, "Concat")) return concat_op(w, n);
    if (!strcmp(n->op_type, "Unsqueeze")) return unsqueeze_op(w, n, first);
    if (!strcmp(n->op_type, "Expand")) return expand_op(w, id, first);
    if (row(w, id, first)) return 1;
    return batched_matmul(w, id);
}

/* Derives every state with the candidates in w->column; 1 when consistent. */
static int walk_graph(walk *w) {
    vp_graph *g = w->g;
    vp_tp_find *f = w->f;
    for (int v = 0; v < g->n_values; v++) w->st[v] = (state){-1, -1};
    memset(f->is_row, 0, (size_t)g->n_nodes);
    for (int i = 0; i < g->n_nodes; i++) f->blocks[i] = 1, f->drop_axis[i] = -1;
    memset(f->is_whole, 0, (size_t)g->n_nodes);
    for (int i = 0; i < g->n_nodes; i++) f->whole_at[i] = -1;
    f->n_slices = f->n_edits = f->n_cuts = f->n_wraps = 0;
    w->div_failed = 0;
    w->stop = -1;
    for (int i = 0; i < g->n_nodes; i++)
        if (!step(w, i) || w->nomem) {
            w->stop = i;
            return 0;
        }
    for (int i = 0; i < g->n_nodes; i++) /* a mask of Q, K, V blocks is no chunk of the one-rank mask */
        if (f->drop_axis[i] >= 0 && f->drop_origin[i] >= 0 && f->blocks[f->drop_origin[i]] > 1) return 0;
    f->logits_split = 0;
    for (int k = 0; k < g->n_outputs; k++) {
        int v = g->outputs[k];
        state s = w->st[v];
        if (s.axis == VP_TP_WHOLE) return 0; /* its gradient would be each rank's part */
        if (s.axis < 0) continue;
        /* vocabulary columns reaching the loss's logits: the loss is computed across ranks */
        if (!w->allow_logits || v != w->logits || s.axis != g->values[v].rank - 1 ||
            (s.origin >= 0 && f->blocks[s.origin] > 1))
            return 0;
        f->logits_split = 1;
    }
    return 1;
}

/* After the Megatron regions: a product whose columns reach the loss's logits (the LM
 * head) splits by vocabulary, where n divides it; where not it stays replicated, as in
 * Megatron-LM before the vocabulary is padded. */
static void lm_head(walk *w, char *column) {
    vp_graph *g = w->g;
    w->allow_logits = 1;
    for (int i = 0; i < g->n_nodes && !w->f->logits_split; i++) {
        int wi, oa, ia;
        if (!vp_tp_product(g, &g->nodes[i], &wi, &oa, &ia) || column[i] || w->f->is_row[i]) continue;
        column[i] = 1;
        if (walk_graph(w) && !w->div_failed && w->f->logits_split) break;
        column[i] = 0;
        w->f->logits_split = 0;
    }
    w->div_failed = 0;
}

char *vp_tp_gradients(const vp_graph *g) {
    char *grad = calloc((size_t)g->n_values + 1, 1);
    for (int v = 0; grad && v < g->n_values; v++) grad[v] = (g->values[v].flags & VP_VAL_PARAM) != 0;
    for (int i = 0; grad && i < g->n_nodes; i++) {
        const vp_node *n = &g->nodes[i];
        char any = 0;
        for (int k = 0; k < n->n_inputs && !n->folded; k++) any |= n->inputs[k] >= 0 && grad[n->inputs[k]];
        for (int k = 0; k < n->n_outputs; k++)
            if (n->outputs[k] >= 0) grad[n->outputs[k]] = any;
    }
    return grad;
}

/* Walks with the tentative marks (2: by columns, 4: whole): kept as 1 and 3 when every
 * state is consistent and n divides what they cut (or `strict` is 0), else cleared. */
static int try_marked(walk *w, char *column, int strict) {
    int ok = walk_graph(w) && !(strict && w->div_failed);
    for (int j = 0; j < w->g->n_nodes; j++)
        if (column[j] == 2 || column[j] == 4) column[j] = (char)(ok ? column[j] - 1 : 0);
    return ok;
}

enum { MAX_GROUP = 8 };

/* Where a group cannot all split (n does not divide grouped-query attention's key/value
 * heads): the largest subset by columns, the others whole on every rank, as Megatron-LM
 * replicates key/value heads; 1 when one is kept. */
static int split_some(walk *w, char *column, const int *group, int n_group) {
    if (n_group < 2 || n_group > MAX_GROUP) return 0;
    for (int size = n_group - 1; size >= 1; size--)
        for (unsigned mask = 1; mask < (1u << n_group) - 1; mask++) {
            if (__builtin_popcount(mask) != size) continue;
            for (int k = 0; k < n_group; k++) column[group[k]] = (char)(mask >> k & 1 ? 2 : 4);
            if (try_marked(w, column, 1)) return 1;
        }
    return 0;
}

/* Candidate i and the products reading its input after it: all by columns; else some
 * by columns, the others whole; else i alone.  *s set where a split that fits stops
 * at a size n does not divide. */
static void try_candidate(walk *w, char *column, int i, vp_status *s, vp_error *err) {
    vp_graph *g = w->g;
    vp_tp_find *f = w->f;
    int group[MAX_GROUP + 1], n_group = 0, total = 0;
    for (int j = i; j < g->n_nodes; j++) {
        int wj, oj, ij;
        if (!vp_tp_product(g, &g->nodes[j], &wj, &oj, &ij) || g->nodes[j].inputs[0] != g->nodes[i].inputs[0] || column[j])
            continue;
        column[j] = 2;
        if (n_group <= MAX_GROUP) group[n_group++] = j;
        total++;
    }
    int ok = try_marked(w, column, 0), stop = w->stop, div_failed = ok && w->div_failed;
    vp_error div = w->div_err;
    if (ok && div_failed) /* split, but not among n: undone, then tried in part */
        for (int k = 0; k < n_group; k++) column[group[k]] = 0;
    if (ok && !div_failed) {
        f->stop_at[i] = -1;
        return;
    }
    if (total == n_group && split_some(w, column, group, n_group)) {
        for (int k = 0; k < n_group; k++) f->stop_at[group[k]] = column[group[k]] == 3 ? stop : -1;
        return;
    }
    if (!div_failed && n_group > 1) {
        column[i] = 2;
        ok = try_marked(w, column, 0);
        stop = w->stop;
        div_failed = ok && w->div_failed;
        div = w->div_err;
    }
    f->stop_at[i] = ok ? -1 : stop;
    if (div_failed) {
        *err = div;
        *s = VP_ERR_USAGE;
    }
}

vp_status vp_tp_find_regions(vp_graph *g, int n, int logits, vp_tp_find *f, vp_error *err) {
    memset(f, 0, sizeof *f);
    walk w = {.g = g, .n = n, .f = f, .logits = logits};
    size_t nn = (size_t)g->n_nodes + 1;
    char *column = calloc(nn, 1), *grad = vp_tp_gradients(g);
    w.st = malloc(((size_t)g->n_values + 1) * sizeof *w.st);
    f->is_column = calloc(nn, 1);
    f->is_row = calloc(nn, 1);
    f->is_embedding = calloc(nn, 1);
    f->is_whole = calloc(nn, 1);
    f->blocks = malloc(nn * sizeof *f->blocks);
    f->drop_axis = malloc(nn * sizeof *f->drop_axis);
    f->drop_origin = malloc(nn * sizeof *f->drop_origin);
    f->stop_at = malloc(nn * sizeof *f->stop_at);
    f->whole_at = malloc(nn * sizeof *f->whole_at);
    for (size_t i = 0; f->stop_at && i < nn; i++) f->stop_at[i] = -1;
    w.column = column;
    w.grad = grad;
    vp_status s = column && grad && w.st && f->is_column && f->is_row && f->is_embedding && f->is_whole && f->blocks &&
                          f->drop_axis && f->drop_origin && f->stop_at && f->whole_at
                      ? VP_OK
                      : vp_fail(err, VP_ERR_NOMEM, "out of memory");
    for (int i = 0; !s && i < g->n_nodes; i++) f->is_embedding[i] = (char)vp_tp_vocab_gather(g, &g->nodes[i], n);
    for (int i = 0; !s && i < g->n_nodes; i++) {
        int wi, oa, ia;
        if (!vp_tp_product(g, &g->nodes[i], &wi, &oa, &ia) || column[i]) continue;
        /* with the regions kept so far: a product already inside one is no candidate */
        if (!walk_graph(&w)) continue;
        if (f->is_row[i] || w.st[g->nodes[i].inputs[0]].axis != VP_TP_REPLICATED) continue;
        try_candidate(&w, column, i, &s, err);
    }
    if (!s && logits >= 0 && walk_graph(&w)) lm_head(&w, column);
    if (!s && w.nomem) s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
    if (!s && !walk_graph(&w)) s = vp_fail(err, VP_ERR_INVALID, "tensor-parallel regions inconsistent (a bug)");
    for (int i = 0; !s && i < g->n_nodes; i++) f->is_column[i] = column[i] == 1;
    free(column);
    free(grad);
    free(w.st);
    if (s) vp_tp_find_free(f);
    return s;
}

void vp_tp_find_free(vp_tp_find *f) {
    free(f->is_column);
    free(f->is_row);
    free(f->is_embedding);
    free(f->blocks);
    free(f->drop_axis);
    free(f->drop_origin);
    free(f->slices);
    free(f->edits);
    free(f->stop_at);
    free(f->is_whole);
    free(f->whole_at);
    free(f->cuts);
    free(f->wraps);
    memset(f, 0, sizeof *f);
}
