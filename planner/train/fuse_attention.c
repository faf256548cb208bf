/* The attention fusion (fuse_attention.h says what it matches and what it keeps true).
 *
 * Matching (fuse_attention_match.c) walks up from each MatMul through Softmax, the
 * optional mask and scale ops, to the MatMul of Q and K^T; a rewrite here then
 * appends the new nodes (the K transpose where one is needed, the mask, the Attention)
 * and marks the replaced ones dead.  At the end one reorder puts each Attention at its
 * last MatMul's place and drops the dead nodes, so the node order stays topological. */
#include "train/fuse_attention.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/dtype_conv.h"
#include "ir/graph_build.h"
#include "ir/infer.h"
#include "train/fuse_attention_match.h"


typedef struct fuser {
    vp_graph *g;
    const vp_fuse_attention_opts *o;
    int n_orig_values;
    int n_orig_nodes;
    char *dead;       /* per node (grown as nodes are added) */
    int *insert_at;   /* per original node: first of its inserted nodes in `inserted`, or -1 */
    int *n_insert;
    int *inserted;
    int n_inserted, cap_inserted;
    int *masks, n_masks; /* the constant masks the fused cores read so far, each once */
    int *sums, n_sums;   /* (mask, mask2, their Add's output) made so far, each pair once */
    int causal_seen;     /* the last mask found causal, -1: none */
} fuser;

/* ---- rewriting ---- */

static vp_status nomem(vp_error *err) { return vp_fail(err, VP_ERR_NOMEM, "out of memory fusing attention"); }

static vp_status note_insert(fuser *fz, int at, int node, vp_error *err) {
    if (fz->n_inserted == fz->cap_inserted) {
        int cap = fz->cap_inserted ? 2 * fz->cap_inserted : 16;
        int *p = realloc(fz->inserted, (size_t)cap * sizeof *p);
        if (!p) return nomem(err);
        fz->inserted = p;
        fz->cap_inserted = cap;
    }
    if (fz->insert_at[at] < 0) fz->insert_at[at] = fz->n_inserted;
    fz->inserted[fz->n_inserted++] = node;
    fz->n_insert[at]++;
    char *d = realloc(fz->dead, (size_t)fz->g->n_nodes);
    if (!d) return nomem(err);
    fz->dead = d;
    d[node] = 0;
    return VP_OK;
}

/* Adds a node of one new output named after stem, infers it, notes it for `at`. */
static vp_status add_node(fuser *fz, int at, const char *op, const char *domain, const char *name, int n_in,
                          const int *ins, int n_out, int *outs, vp_error *err) {
    vp_graph *g = fz->g;
    int o[2];
    for (int k = 0; k < n_out; k++) {
        if (outs[k] >= 0) {
            o[k] = outs[k];
            continue;
        }
        char stem[600];
        snprintf(stem, sizeof stem, "%.570s_output_%d", name, k); /* cut: made unique below */
        if ((o[k] = vp_graph_add_unique_value(g, stem)) < 0) return nomem(err);
    }
    int id = vp_graph_add_node(g, op, domain, name, n_in, ins, n_out, o);
    if (id < 0) return nomem(err);
    g->nodes[id].opset = g->nodes[at].opset;
    for (int k = 0; k < n_out; k++) {
        outs[k] = o[k];
        g->values[o[k]].producer = id;
    }
    return note_insert(fz, at, id, err);
}

static vp_status infer_last(fuser *fz, vp_error *err) {
    return vp_infer_node(fz->g, fz->inserted[fz->n_inserted - 1], 0, NULL, err);
}

/* torch 2.x writes K^T [B,H,D,T] as Reshape(Transpose(Reshape(K, [B*H,T,D]), [0,2,1]),
 * [B,H,D,T]): K itself, the Transpose and the outer Reshape marked dead when each
 * output has no other reader (the inner Reshape too when it has none), else -1. */
static int k_of_merged_transpose(fuser *fz, const match *m) {
    vp_graph *g = fz->g;
    const vp_node *r2 = producer(g, m->kt, "Reshape"), *t, *r1;
    if (!r2 || !only_use(g, m->kt, m->k_scale >= 0 ? m->k_scale : m->mm1)) return -1;
    int x3t = in(r2, 0), x3, k4;
    if (!(t = producer(g, x3t, "Transpose")) || !only_use(g, x3t, node_id(g, r2))) return -1;
    const int64_t *perm;
    if (vp_attr_ints(t, "perm", &perm) != 3 || perm[0] != 0 || perm[1] != 2 || perm[2] != 1) return -1;
    x3 = in(t, 0);
    if (!(r1 = producer(g, x3, "Reshape"))) return -1;
    k4 = in(r1, 0);
    const vp_value *kv = &g->values[k4], *kt = &g->values[m->kt];
    if (kv->rank != 4 || kv->dims[0] != kt->dims[0] || kv->dims[1] != kt->dims[1] || kv->dims[2] != kt->dims[3] ||
        kv->dims[3] != kt->dims[2])
        return -1;
    const vp_value *v3 = &g->values[x3];
    if (v3->rank != 3 || v3->dims[0] != kv->dims[0] * kv->dims[1] || v3->dims[1] != kv->dims[2]) return -1;
    /* K's merged view may have other readers (DeBERTa's position terms read K too) */
    if (only_use(g, x3, node_id(g, t))) fz->dead[node_id(g, r1)] = 1;
    fz->dead[node_id(g, t)] = fz->dead[node_id(g, r2)] = 1;
    return k4;
}

/* K [B,H,T,D] from K^T: the producing Transpose changed (or gone), else a new one. */
static vp_status make_k(fuser *fz, const match *m, const char *base, int *k, vp_error *err) {
    vp_graph *g = fz->g;
    const vp_node *t = producer(g, m->kt, "Transpose");
    if (t && only_use(g, m->kt, m->k_scale >= 0 ? m->k_scale : m->mm1) && g->values[in(t, 0)].rank == 4) {
        int tid = node_id(g, t);
        const int64_t *p;
        int64_t perm[4] = {3, 2, 1, 0};
        if (vp_attr_ints(t, "perm", &p) == 4) memcpy(perm, p, sizeof perm);
        int64_t swap = perm[2];
        perm[2] = perm[3];
        perm[3] = swap;
        if (perm[0] == 0 && perm[1] == 1 && perm[2] == 2 && perm[3] == 3) {
            fz->dead[tid] = 1;
            *k = in(t, 0);
            return VP_OK;
        }
        vp_node *tn = &g->nodes[tid];
        for (int a = 0; a < tn->n_attrs; a++)
            if (!strcmp(tn->attrs[a].name, "perm")) memcpy(tn->attrs[a].ints, perm, sizeof perm);
        if (!vp_node_attr(tn, "perm") && vp_node_add_attr_ints(g, tid, "perm", perm, 4)) return nomem(err);
        *k = m->kt;
        return vp_infer_node(g, tid, 0, NULL, err);
    }
    int k4 = k_of_merged_transpose(fz, m);
    if (k4 >= 0) {
        *k = k4;
        return VP_OK;
    }
    static const int64_t swap_last[4] = {0, 1, 3, 2};
    char name[600];
    snprintf(name, sizeof name, "%s/K", base);
    *k = -1;
    vp_status s = add_node(fz, m->mm2, "Transpose", "", name, 1, &m->kt, 1, k, err);
    if (!s && vp_node_add_attr_ints(g, fz->inserted[fz->n_inserted - 1], "perm", swap_last, 4)) s = nomem(err);
    return s ? s : infer_last(fz, err);
}

/* The additive mask of a Where(C, S, f) / Where(C, f, S): a constant when C is one. */
static vp_status make_where_mask(fuser *fz, const match *m, const char *base, int *mask, vp_error *err) {
    vp_graph *g = fz->g;
    vp_dtype dt = g->values[m->q].dtype;
    double f = m->rows_kept_cond >= 0 ? -INFINITY : vp_load(g->values[m->fill].data, dt, 0);
    const vp_value *c = &g->values[m->cond];
    char name[600];
    snprintf(name, sizeof name, "%s/mask", base);
    if (fixed_data(c)) {
        int64_t count = vp_value_numel(c), dims[VP_MAX_RANK];
        int rank = c->rank;
        memcpy(dims, c->dims, sizeof dims);
        void *data = malloc((size_t)(count ? count : 1) * vp_dtype_size(dt));
        if (!data) return nomem(err);
        for (int64_t i = 0; i < count; i++)
            vp_store(data, dt, i, (((const unsigned char *)c->data)[i] != 0) == m->fill_then ? f : 0.0);
        *mask = vp_build_const(g, name, dt, rank, dims, data);
        free(data);
        return *mask < 0 ? nomem(err) : VP_OK;
    }
    unsigned char zero_bytes[8] = {0}, fill_bytes[8];
    int zero = vp_build_const(g, "attention_mask_zero", dt, 0, NULL, zero_bytes), fill = m->fill;
    if (m->rows_kept_cond >= 0) {
        vp_store(fill_bytes, dt, 0, -INFINITY);
        fill = vp_build_const(g, "attention_mask_fill", dt, 0, NULL, fill_bytes);
    }
    if (zero < 0 || fill < 0) return nomem(err);
    int ins[3] = {m->cond, m->fill_then ? fill : zero, m->fill_then ? zero : fill};
    *mask = -1;
    vp_status s = add_node(fz, m->mm2, "Where", "", name, 3, ins, 1, mask, err);
    return s ? s : infer_last(fz, err);
}

/* Whether element x of a mask is what a causal mask holds at (i, j): 0 on and below the
 * diagonal, -inf or the dtype's lowest (torch's finfo.min) above. */
#define CAUSAL_AT(x, i, j) ((j) <= (i) ? (x) == 0 : (x) <= -1e30)

/* A constant mask [.., S, T] that is 0 on and below the diagonal and -inf above, in
 * every [S, T] slice (torch 2.x expands it over the batch).  Every layer's core reads
 * its own copy of the same mask, batch x seq x seq: one slice is checked element by
 * element, the others and a copy of the last mask found causal compared as bytes. */
static int causal_mask(fuser *fz, int mask, int64_t S, int64_t T) {
    const vp_graph *g = fz->g;
    const vp_value *m = &g->values[mask];
    if (!fixed_data(m) || m->rank < 2 || S <= 0 || T <= 0) return 0;
    if (m->dims[m->rank - 2] != S || m->dims[m->rank - 1] != T) return 0;
    size_t slice = (size_t)(S * T) * vp_dtype_size(m->dtype), bytes = slice * (size_t)(vp_value_numel(m) / (S * T));
    if (fz->causal_seen >= 0) {
        const vp_value *c = &g->values[fz->causal_seen];
        if (c->dtype == m->dtype && c->rank == m->rank && !memcmp(c->dims, m->dims, (size_t)m->rank * sizeof *m->dims) &&
            !memcmp(c->data, m->data, bytes))
            return 1;
    }
    const float *f = m->dtype == VP_F32 ? m->data : NULL; /* the common case, without a load per element */
    for (int64_t i = 0; i < S; i++)
        for (int64_t j = 0; j < T; j++)
            if (!(f ? CAUSAL_AT(f[i * T + j], i, j) : CAUSAL_AT(vp_load(m->data, m->dtype, i * T + j), i, j))) return 0;
    for (size_t at = slice; at < bytes; at += slice)
        if (memcmp((const char *)m->data + at, m->data, slice)) return 0;
    fz->causal_seen = mask;
    return 1;
}
#undef CAUSAL_AT

/* A constant mask of zeros adds nothing to any score (S + 0 is S, bit for bit): the
 * padding mask of a batch with no padding, which Hugging Face builds all the same. */
static int zero_mask(const vp_graph *g, int mask) {
    const vp_value *m = &g->values[mask];
    if (!fixed_data(m) || !vp_dtype_is_float(m->dtype)) return 0;
    for (int64_t i = 0, n = vp_value_numel(m); i < n; i++)
        if (vp_load(m->data, m->dtype, i) != 0) return 0;
    return 1;
}

/* A constant mask with the bits of one an earlier core reads: that one (every layer of a
 * Hugging Face model builds its own copy of the same mask, each a constant of batch x
 * seq x seq otherwise). */
static vp_status shared_mask(fuser *fz, int *mask, vp_error *err) {
    const vp_graph *g = fz->g;
    const vp_value *m = &g->values[*mask];
    if (!fixed_data(m)) return VP_OK;
    size_t bytes = (size_t)vp_value_numel(m) * (size_t)vp_dtype_size(m->dtype);
    for (int i = 0; i < fz->n_masks; i++) {
        const vp_value *o = &g->values[fz->masks[i]];
        if (o->dtype == m->dtype && o->rank == m->rank && !memcmp(o->dims, m->dims, (size_t)m->rank * sizeof *m->dims) &&
            !memcmp(o->data, m->data, bytes)) {
            *mask = fz->masks[i];
            return VP_OK;
        }
    }
    int *grown = realloc(fz->masks, ((size_t)fz->n_masks + 1) * sizeof *grown);
    if (!grown) return nomem(err);
    fz->masks = grown;
    fz->masks[fz->n_masks++] = *mask;
    return VP_OK;
}

/* Two additive masks as one, mask + mask2, made once for each pair (T5's layers add the
 * same position bias and the same padding mask): the Add goes before the first core
 * reading it. */
static vp_status mask_sum(fuser *fz, const match *m, const char *base, int *mask, int mask2, vp_error *err) {
    for (int i = 0; i < fz->n_sums; i++)
        if (fz->sums[3 * i] == *mask && fz->sums[3 * i + 1] == mask2) {
            *mask = fz->sums[3 * i + 2];
            return VP_OK;
        }
    int *grown = realloc(fz->sums, ((size_t)fz->n_sums + 1) * 3 * sizeof *grown);
    if (!grown) return nomem(err);
    fz->sums = grown;
    char name[600];
    snprintf(name, sizeof name, "%s/masks_added", base);
    int out = -1;
    vp_status s = add_node(fz, m->mm2, "Add", "", name, 2, (int[]){*mask, mask2}, 1, &out, err);
    if (!s) s = infer_last(fz, err);
    if (s) return s;
    fz->sums[3 * fz->n_sums] = *mask;
    fz->sums[3 * fz->n_sums + 1] = mask2;
    fz->sums[3 * fz->n_sums++ + 2] = out;
    *mask = out;
    return VP_OK;
}

static vp_status rewrite(fuser *fz, const match *m, vp_error *err) {
    vp_graph *g = fz->g;
    char base[512];
    const char *name = g->nodes[m->mm2].name, *slash = strrchr(name, '/');
    snprintf(base, sizeof base, "%.*s%s", slash ? (int)(slash - name) : (int)strlen(name), name,
             slash ? "" : "_attention");
    int k, mask = m->mask;
    vp_status s = make_k(fz, m, base, &k, err);
    if (!s && m->cond >= 0) s = make_where_mask(fz, m, base, &mask, err);
    if (s) return s;
    int causal = 0, mask2 = m->mask2;
    int64_t S = g->values[m->q].dims[2], T = g->values[k].dims[2];
    for (int t = 0; t < 2; t++) {
        int *mv = t ? &mask2 : &mask;
        if (*mv >= 0 && fz->o && fz->o->detect_causal && causal_mask(fz, *mv, S, T)) {
            causal = 1;
            *mv = -1;
        }
        if (*mv >= 0 && zero_mask(g, *mv)) *mv = -1;
    }
    if (mask < 0) mask = mask2, mask2 = -1;
    if (mask2 >= 0 && (s = mask_sum(fz, m, base, &mask, mask2, err))) return s;
    if (mask >= 0 && (s = shared_mask(fz, &mask, err))) return s;
    int y = g->nodes[m->mm2].outputs[0];
    g->nodes[m->mm2].outputs[0] = -1; /* Y is the Attention's now */
    /* Y read only by the transpose to [B, S, H, Dv] that merges the heads: the Attention
     * writes that layout itself, so Y is kept once for the backward, not beside its
     * transposed copy (the output projection's input) */
    int bshd = -1, same = -1;
    const vp_value *yv = &g->values[y];
    if (yv->n_consumers == 1 && !(yv->flags & VP_VAL_OUTPUT)) {
        /* torch 2.x's dynamo writes a Reshape to Y's own shape before the transpose */
        const vp_node *r = &g->nodes[yv->consumers[0]];
        if (!strcmp(r->op_type, "Reshape") && !r->domain[0] && r->n_outputs == 1 && r->outputs[0] >= 0) {
            const vp_value *rv = &g->values[r->outputs[0]];
            if (rv->n_consumers == 1 && !(rv->flags & VP_VAL_OUTPUT) && rv->rank == yv->rank &&
                !memcmp(rv->dims, yv->dims, (size_t)yv->rank * sizeof *yv->dims)) {
                same = yv->consumers[0];
                yv = rv;
            }
        }
        const vp_node *t = &g->nodes[yv->consumers[0]];
        const int64_t *perm;
        if (!strcmp(t->op_type, "Transpose") && !t->domain[0] && t->n_outputs == 1 && t->outputs[0] >= 0 &&
            vp_attr_ints(t, "perm", &perm) == 4 && perm[0] == 0 && perm[1] == 2 && perm[2] == 1 && perm[3] == 3)
            bshd = yv->consumers[0];
    }
    if (bshd >= 0) {
        if (same >= 0) fz->dead[same] = 1;
        fz->dead[bshd] = 1;
        y = g->nodes[bshd].outputs[0];
        g->nodes[bshd].outputs[0] = -1;
    }
    int ins[4] = {m->q, k, m->v, mask}, outs[2] = {y, -1};
    char aname[600];
    snprintf(aname, sizeof aname, "%s/Attention", base);
    if ((s = add_node(fz, m->mm2, "Attention", "vplan", aname, mask >= 0 ? 4 : 3, ins, 2, outs, err))) return s;
    int a = fz->inserted[fz->n_inserted - 1];
    if (vp_node_add_attr_float(g, a, "scale", (float)m->scale) || vp_node_add_attr_int(g, a, "causal", causal) ||
        (bshd >= 0 && vp_node_add_attr_int(g, a, "y_bshd", 1)) ||
        (m->zero_rows && vp_node_add_attr_int(g, a, "zero_masked_rows", 1)) ||
        (m->softcap > 0 && vp_node_add_attr_float(g, a, "softcap", (float)m->softcap)) ||
        (m->dropout >= 0 && (vp_node_add_attr_float(g, a, "dropout", (float)m->dropout_ratio) ||
                             vp_node_add_attr_int(g, a, "seed", m->dropout_seed))))
        return nomem(err);
    int gone[17] = {m->mm1, m->scale_node, m->mask_node, m->softmax, m->mm2, m->q_scale, m->k_scale, m->guard_isnan,
                    m->guard_where, m->mask2_node, m->rows_kept, m->cap_div, m->cap_tanh, m->cap_mul, m->p_cast,
                    m->clamp, m->dropout};
    for (int i = 0; i < 17; i++)
        if (gone[i] >= 0) fz->dead[gone[i]] = 1;
    return infer_last(fz, err);
}

/* ---- dropping the replaced nodes ---- */

/* Each original node in order with its inserted nodes in its place; the dead go. */
static vp_status compact(fuser *fz, vp_error *err) {
    vp_graph *g = fz->g;
    int *order = malloc(((size_t)g->n_nodes + 1) * sizeof *order), n = 0;
    if (!order) return nomem(err);
    for (int i = 0; i < fz->n_orig_nodes; i++) {
        for (int j = 0; fz->insert_at[i] >= 0 && j < fz->n_insert[i]; j++) order[n++] = fz->inserted[fz->insert_at[i] + j];
        if (!fz->dead[i]) order[n++] = i;
    }
    vp_status s = vp_graph_keep_nodes(g, order, n, err);
    free(order);
    return s;
}

/* ---- the pass ---- */

vp_status vp_fuse_attention(vp_graph *g, const vp_fuse_attention_opts *o, int *n_fused, vp_error *err) {
    fuser fz = {.g = g, .o = o, .n_orig_values = g->n_values, .n_orig_nodes = g->n_nodes,
               .causal_seen = -1};
    *n_fused = 0;
    vp_status s = vp_graph_link(g, err);
    if (s) return s;
    fz.dead = calloc((size_t)g->n_nodes + 1, 1);
    fz.insert_at = malloc(((size_t)g->n_nodes + 1) * sizeof *fz.insert_at);
    fz.n_insert = calloc((size_t)g->n_nodes + 1, sizeof *fz.n_insert);
    if (!fz.dead || !fz.insert_at || !fz.n_insert) s = nomem(err);
    for (int i = 0; !s && i < fz.n_orig_nodes; i++) fz.insert_at[i] = -1;
    for (int i = 0; !s && i < fz.n_orig_nodes; i++) {
        match m;
        if (!vp_attention_match(fz.g, i, &m)) continue;
        if (!(s = rewrite(&fz, &m, err))) ++*n_fused;
    }
    if (!s && *n_fused) s = compact(&fz, err);
    free(fz.dead);
    free(fz.insert_at);
    free(fz.n_insert);
    free(fz.inserted);
    free(fz.masks);
    free(fz.sums);
    return s;
}
