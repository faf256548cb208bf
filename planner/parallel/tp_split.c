/* Rewriting the forward graph into one rank's: the regions tp_find.c chose, applied.
 *
 * In: an inferred forward graph, n and a rank.  Out: the same graph with this rank's
 * slices of the split weights (copied out of the full ones, which the graph no longer
 * holds), new shape constants where a Reshape or Split carried a full size, a TPCopy in
 * front of each column-parallel product's input (one per input value, shared by the
 * products that read it: Q, K and V projections of one LayerNorm) and a TPAllReduce
 * after each row-parallel product (a row Gemm's bias C taken off it and added to the
 * sum once, by an Add "<gemm>/bias"), a vocabulary-parallel embedding's masked lookup and
 * all-reduce (tp_vocab.c), in graph order, every shape inferred again.  Value ids of the
 * original values stay; a row product's output becomes "<name>_partial" (an embedding's
 * "<name>_rows") and the all-reduce writes the original value, so its readers are
 * untouched. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/infer.h"
#include "ir/op_registry.h"
#include "parallel/tp_internal.h"


int64_t vp_tp_node_bytes(const vp_graph *g, const vp_node *nd, int n) {
    if (!nd->op || !(nd->op->flags & VP_OP_COLLECTIVE) || nd->outputs[0] < 0 || nd->inputs[0] < 0) return 0;
    const vp_value *y = &g->values[nd->outputs[0]], *x = &g->values[nd->inputs[0]];
    if (nd->op->flags & VP_OP_COLLECTIVE_GATHER) return vp_tp_gather_bytes(vp_value_numel(y) * (int64_t)vp_dtype_size(y->dtype), n);
    if (nd->op->flags & VP_OP_COLLECTIVE_SCATTER) return vp_tp_gather_bytes(vp_value_numel(x) * (int64_t)vp_dtype_size(x->dtype), n);
    return vp_tp_ring_bytes(vp_value_numel(y) * (int64_t)vp_dtype_size(y->dtype), n);
}

int64_t vp_tp_step_bytes(const vp_graph *g, const int *steps, int n_steps, int n) {
    int64_t total = 0;
    for (int i = 0; i < n_steps; i++) total += vp_tp_node_bytes(g, &g->nodes[steps ? steps[i] : i], n);
    return total;
}

vp_status vp_tp_slice_tensor(const vp_tensor *full, int axis, int blocks, int n, int rank, vp_tensor *out,
                             vp_error *err) {
    size_t es = vp_dtype_size(full->dtype);
    int64_t outer = 1, inner = 1, d = full->dims[axis];
    for (int k = 0; k < axis; k++) outer *= full->dims[k];
    for (int k = axis + 1; k < full->rank; k++) inner *= full->dims[k];
    int64_t block = d / blocks, chunk = block / n;
    *out = *full;
    out->dims[axis] = d / n;
    char *dst = malloc((size_t)(outer * (d / n) * inner) * es + 1), *at = dst;
    out->data = dst;
    if (!dst) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    const char *src = full->data;
    for (int64_t o = 0; o < outer; o++)
        for (int b = 0; b < blocks; b++) {
            size_t bytes = (size_t)(chunk * inner) * es;
            memcpy(at, src + (size_t)((o * d + b * block + rank * chunk) * inner) * es, bytes);
            at += bytes;
        }
    return VP_OK;
}

vp_status vp_tp_unslice_tensor(const vp_tensor *part, const void *parts, int axis, int blocks, int n, vp_tensor *out,
                               vp_error *err) {
    size_t es = vp_dtype_size(part->dtype);
    int64_t outer = 1, inner = 1, pd = part->dims[axis], d = pd * n;
    for (int k = 0; k < axis; k++) outer *= part->dims[k];
    for (int k = axis + 1; k < part->rank; k++) inner *= part->dims[k];
    int64_t block = d / blocks, chunk = block / n, part_elems = outer * pd * inner;
    *out = *part;
    out->dims[axis] = d;
    char *dst = malloc((size_t)(outer * d * inner) * es + 1);
    out->data = dst;
    if (!dst) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    const char *src = parts;
    size_t bytes = (size_t)(chunk * inner) * es;
    for (int r = 0; r < n; r++) /* rank r's chunk of block b of outer row o, where slicing took it from */
        for (int64_t o = 0; o < outer; o++)
            for (int b = 0; b < blocks; b++)
                memcpy(dst + (size_t)((o * d + b * block + r * chunk) * inner) * es,
                       src + (size_t)(r * part_elems + (o * pd + b * chunk) * inner) * es, bytes);
    return VP_OK;
}

static vp_status slice_value(vp_graph *g, int id, int axis, int blocks, int n, int rank, vp_error *err) {
    vp_value *v = &g->values[id];
    if (!v->data) { /* a graph built to be planned, not run */
        v->dims[axis] /= n;
        return VP_OK;
    }
    vp_tensor full = vp_value_tensor(v), part;
    vp_status s = vp_tp_slice_tensor(&full, axis, blocks, n, rank, &part, err);
    if (s) {
        vp_error_prefix(err, "slicing '%s': ", v->name);
        return s;
    }
    v->dims[axis] = part.dims[axis];
    vp_value_set_data(g, id, part.data, VP_DATA_HEAP);
    return VP_OK;
}

void vp_tp_result_free(vp_tp_result *r) {
    free(r->sliced);
    free(r->replicated);
    memset(r, 0, sizeof *r);
}

static int new_const_ints(vp_graph *g, const char *stem, const int64_t *vals, int n) {
    int id = vp_graph_add_unique_value(g, stem);
    int64_t *data = malloc((size_t)n * sizeof *data + 1);
    if (id < 0 || !data) {
        free(data);
        return -1;
    }
    memcpy(data, vals, (size_t)n * sizeof *data);
    vp_value *v = &g->values[id];
    v->dtype = VP_I64;
    v->rank = 1;
    v->dims[0] = n;
    v->flags |= VP_VAL_CONST;
    v->producer = -1;
    vp_value_set_data(g, id, data, VP_DATA_HEAP);
    return id;
}

static char *stem_of(const vp_graph *g, int v, const char *suffix, char *buf, size_t len) {
    snprintf(buf, len, "%s%s", g->values[v].name, suffix);
    return buf;
}

/* Adds node op(x) -> y in the vplan domain, named after the value it reads, with the
 * rank count (the cost model's ring). */
static int add_comm(vp_graph *g, const char *op, int x, int y, int ranks) {
    char name[512];
    snprintf(name, sizeof name, "%s/%s", g->values[x].name, op);
    int id = vp_graph_add_node(g, op, "vplan", name, 1, &x, 1, &y);
    if (id >= 0 && vp_node_add_attr_int(g, id, "ranks", ranks)) return -1;
    return id;
}

int vp_tp_copy(vp_graph *g, int x, int *copy_of, int ranks) {
    if (copy_of[x] >= 0) return g->nodes[copy_of[x]].outputs[0];
    char stem[512];
    int y = vp_graph_add_unique_value(g, stem_of(g, x, "_tpcopy", stem, sizeof stem));
    int c = y < 0 ? -1 : add_comm(g, "TPCopy", x, y, ranks);
    if (c >= 0) copy_of[x] = c;
    return c < 0 ? -1 : y;
}

/* Add(sum, bias) -> y after row product `node`'s all-reduce, in the node's opset. */
static int add_bias(vp_graph *g, int node, int sum, int bias, int y) {
    char name[512];
    snprintf(name, sizeof name, "%s/bias", g->nodes[node].name);
    int in[2] = {sum, bias};
    int id = vp_graph_add_node(g, "Add", "", name, 2, in, 1, &y);
    if (id >= 0) g->nodes[id].opset = g->nodes[node].opset;
    return id;
}

/* A product computed whole inside a region: the node that reads each rank's share, its
 * heads where that is an Attention ([batch, heads, seq, head_dim]), its parameters'
 * gradients summed (its weight's, its bias's) and its forward and backward products' FLOPs. */
static void note_whole(const vp_graph *g, const vp_tp_find *f, int i, int w, int oa, vp_tp_replicated *p) {
    const vp_node *nd = &g->nodes[i];
    const vp_value *wv = &g->values[nd->inputs[w]], *y = &g->values[nd->outputs[0]];
    int at = f->whole_at[i];
    p->whole = 1;
    if (at >= 0) {
        snprintf(p->at, sizeof p->at, "%s", g->nodes[at].name);
        snprintf(p->at_op, sizeof p->at_op, "%s", g->nodes[at].op_type);
    }
    for (int c = 0; c < f->n_cuts; c++) {
        const vp_value *x = &g->values[g->nodes[f->cuts[c].node].inputs[f->cuts[c].input]];
        if (f->cuts[c].origin == i && !strcmp(g->nodes[f->cuts[c].node].op_type, "Attention") && x->rank == 4 &&
            wv->dims[oa] % x->dims[3] == 0)
            p->heads = wv->dims[oa] / x->dims[3];
    }
    for (int k = 0; k < f->n_wraps; k++)
        if (f->wraps[k].origin == i) { /* its parameters (a table it shares with others is not its own) */
            const vp_value *v = &g->values[g->nodes[f->wraps[k].node].inputs[f->wraps[k].input]];
            if (v->flags & VP_VAL_PARAM) p->grad_bytes += vp_value_numel(v) * (int64_t)vp_dtype_size(v->dtype);
        }
    p->flops = 6.0 * (double)vp_value_numel(y) * (double)wv->dims[1 - oa]; /* Y, dX, dW: 2 m k n each */
}

/* The products the finder left whole (neither column- nor row-parallel), with the node
 * its split stopped at, named before the rewrite renumbers the nodes. */
static vp_status note_replicated(const vp_graph *g, const vp_tp_find *f, vp_tp_result *r, vp_error *err) {
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        int w, oa, ia;
        n += vp_tp_product(g, &g->nodes[i], &w, &oa, &ia) && !f->is_column[i] && !f->is_row[i];
    }
    if (!n) return VP_OK;
    if (!(r->replicated = calloc((size_t)n, sizeof *r->replicated))) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    for (int i = 0; i < g->n_nodes; i++) {
        int w, oa, ia;
        if (!vp_tp_product(g, &g->nodes[i], &w, &oa, &ia) || f->is_column[i] || f->is_row[i]) continue;
        vp_tp_replicated *p = &r->replicated[r->n_replicated++];
        snprintf(p->node, sizeof p->node, "%s", g->values[g->nodes[i].inputs[w]].name); /* named by its weight */
        int st = f->stop_at[i];
        if (st >= 0) {
            snprintf(p->stop, sizeof p->stop, "%s", g->nodes[st].name);
            snprintf(p->stop_op, sizeof p->stop_op, "%s", g->nodes[st].op_type);
        }
        if (f->is_whole[i]) note_whole(g, f, i, w, oa, p);
    }
    return VP_OK;
}

vp_status vp_tp_split(vp_graph *g, const vp_tp_opts *o, vp_tp_result *r, vp_error *err) {
    memset(r, 0, sizeof *r);
    r->n = o->n > 1 ? o->n : 1;
    r->rank = o->rank;
    r->vocab_logits = -1;
    if (o->n <= 1) return VP_OK;
    if (o->rank < 0 || o->rank >= o->n) return vp_fail(err, VP_ERR_USAGE, "rank %d is not in [0, %d)", o->rank, o->n);
    vp_tp_find f;
    int logits = o->logits ? vp_graph_find_value(g, o->logits) : -1;
    vp_status s = vp_tp_find_regions(g, o->n, logits, &f, err);
    if (s) return s;
    if (f.logits_split) { /* its full width, before shapes are inferred again */
        r->vocab_logits = logits;
        r->vocab = g->values[logits].dims[g->values[logits].rank - 1];
    }
    r->sliced = calloc((size_t)f.n_slices + 1, sizeof *r->sliced);
    if (!r->sliced) s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
    s = s ? s : note_replicated(g, &f, r, err);
    int n0 = g->n_nodes;
    for (int i = 0; i < f.n_slices && !s; i++) {
        const vp_tp_slice *sl = &f.slices[i];
        int blocks = sl->origin >= 0 ? f.blocks[sl->origin] : 1;
        r->sliced_elems_full += vp_value_numel(&g->values[sl->value]);
        s = slice_value(g, sl->value, sl->axis, blocks, o->n, o->rank, err);
        r->sliced[r->n_sliced++] = (vp_tp_sliced){sl->value, sl->axis, blocks};
    }
    char stem[512];
    for (int i = 0; i < f.n_edits && !s; i++) {
        const vp_tp_edit *e = &f.edits[i];
        int old = g->nodes[e->node].inputs[e->input];
        int id = new_const_ints(g, stem_of(g, old, "_tp", stem, sizeof stem), e->vals, e->n);
        if (id < 0) s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
        else g->nodes[e->node].inputs[e->input] = id;
    }
    /* the communication nodes, appended; each appended node goes before or after an
     * original one (place: 2 * node + after), in the order appended; ordered below */
    int *copy_of = malloc(((size_t)g->n_values + 1) * sizeof *copy_of); /* value -> its TPCopy node */
    int cap = 16 * n0 + 64, *place = malloc((size_t)cap * sizeof *place);
    if (!s && (!copy_of || !place)) s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
    int nv = g->n_values;
    for (int v = 0; !s && v < nv; v++) copy_of[v] = -1;
    for (int i = 0; !s && i < n0; i++) {
        int first = g->n_nodes, n_before = 0;
        if (f.drop_axis[i] >= 0) s = vp_tp_dropout_part(g, i, f.drop_axis[i], o->n, o->rank, err);
        if (!s) s = vp_tp_whole_node(g, &f, i, o->n, o->rank, copy_of, r, err); /* in front of it */
        if (s) break;
        int ahead = g->n_nodes - first;
        if (f.is_embedding[i]) {
            s = vp_tp_vocab_embedding(g, i, o->n, o->rank, &n_before, err);
            r->n_embedding++;
        } else if (f.is_column[i] || f.is_whole[i]) { /* a whole one's input gradient is its share's part: summed too */
            int x = g->nodes[i].inputs[0], fresh = copy_of[x] < 0;
            int y = vp_tp_copy(g, x, copy_of, o->n);
            if (y < 0) {
                s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
                break;
            }
            g->nodes[i].inputs[0] = y;
            n_before = g->n_nodes - first - ahead;
            r->n_copy += fresh;
            r->n_column += f.is_column[i];
        } else if (f.is_row[i]) {
            int gemm = !strcmp(g->nodes[i].op_type, "Gemm") && !g->nodes[i].domain[0];
            int y = g->nodes[i].outputs[0], bias = gemm && g->nodes[i].n_inputs > 2 ? g->nodes[i].inputs[2] : -1;
            int p = vp_graph_add_unique_value(g, stem_of(g, y, "_partial", stem, sizeof stem));
            /* a Gemm's bias, added once to the sum rather than by every rank */
            int sum = p < 0 || bias < 0 ? p : vp_graph_add_unique_value(g, stem_of(g, y, "_sum", stem, sizeof stem));
            int c = sum < 0 ? -1 : add_comm(g, "TPAllReduce", p, bias < 0 ? y : sum, o->n);
            if (c >= 0 && bias >= 0) c = add_bias(g, i, sum, bias, y);
            if (c < 0) {
                s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
                break;
            }
            g->nodes[i].outputs[0] = p;
            if (bias >= 0) g->nodes[i].n_inputs = 2;
            r->n_row++;
            r->n_allreduce++;
        }
        n_before += ahead;
        if (!s && g->n_nodes - n0 > cap) s = vp_fail(err, VP_ERR_INVALID, "tensor-parallel split: too many nodes added (a bug)");
        for (int k = first; !s && k < g->n_nodes; k++) place[k - n0] = 2 * i + (k - first >= n_before);
    }
    int *order = s ? NULL : malloc(((size_t)g->n_nodes + 1) * sizeof *order);
    if (!s && !order) s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
    if (!s) { /* appended nodes come in the order of their anchors: one pass */
        int k = 0, a = n0;
        for (int i = 0; i < n0; i++) {
            for (; a < g->n_nodes && place[a - n0] == 2 * i; a++) order[k++] = a;
            order[k++] = i;
            for (; a < g->n_nodes && place[a - n0] == 2 * i + 1; a++) order[k++] = a;
        }
        s = k == g->n_nodes ? vp_graph_reorder(g, order, err) : vp_fail(err, VP_ERR_INVALID, "tensor-parallel split: nodes out of place (a bug)");
    }
    for (int i = 0; !s && i < g->n_nodes; i++) {
        if (g->nodes[i].folded) continue;
        s = vp_infer_node(g, i, 0, NULL, err);
    }
    if (!s) s = vp_graph_link(g, err);
    if (!s && o->sp) s = vp_tp_sequence(g, o->n, o->rank, r, err);
    free(order);
    free(copy_of);
    free(place);
    vp_tp_find_free(&f);
    return s;
}
