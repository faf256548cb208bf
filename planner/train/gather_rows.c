/* GatherElements over repeating indices as a Gather of one row (gather_rows.h). */
#include "train/gather_rows.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/graph_build.h"
#include "ir/infer.h"

typedef struct rows_plan {
    int64_t rows, m, q; /* the k leading axes' product, the data's other elements, one row of indices */
    int64_t *offsets;   /* q flat offsets within a data row */
} rows_plan;

static int64_t index_at(const vp_value *v, int64_t i) {
    return v->dtype == VP_I32 ? ((const int32_t *)v->data)[i] : ((const int64_t *)v->data)[i];
}

static int64_t product(const int64_t *d, int from, int to) {
    int64_t p = 1;
    for (int a = from; a < to; a++) p *= d[a];
    return p;
}

/* Every block of q indices equals the first. */
static int repeats(const vp_value *idx, int64_t blocks, int64_t q) {
    for (int64_t b = 1; b < blocks; b++)
        for (int64_t j = 0; j < q; j++)
            if (index_at(idx, b * q + j) != index_at(idx, j)) return 0;
    return 1;
}

/* Fills p for node n when it can be rewritten (offsets allocated); 0 otherwise. */
static int plan_rows(const vp_graph *g, const vp_node *n, rows_plan *p) {
    if (n->folded || n->domain[0] || strcmp(n->op_type, "GatherElements") || n->n_inputs != 2 || n->n_outputs != 1 ||
        n->inputs[0] < 0 || n->inputs[1] < 0 || n->outputs[0] < 0)
        return 0;
    const vp_value *x = &g->values[n->inputs[0]], *idx = &g->values[n->inputs[1]];
    int r = x->rank;
    if (!idx->data || !(idx->flags & VP_VAL_CONST) || (idx->dtype != VP_I32 && idx->dtype != VP_I64) || idx->rank != r ||
        r < 2)
        return 0;
    int64_t axis = vp_attr_int(n, "axis", 0);
    if (axis < 0) axis += r;
    if (axis < 1 || axis >= r) return 0;
    /* the most leading axes the indices repeat along, each the data's length */
    int k = (int)axis;
    for (; k >= 1; k--) {
        int same = 1;
        for (int a = 0; a < k && same; a++) same = idx->dims[a] == x->dims[a];
        if (same && product(idx->dims, 0, k) > 1 && repeats(idx, product(idx->dims, 0, k), product(idx->dims, k, r)))
            break;
    }
    if (k < 1) return 0;
    p->rows = product(x->dims, 0, k);
    p->m = product(x->dims, k, r);
    p->q = product(idx->dims, k, r);
    p->offsets = malloc((size_t)(p->q ? p->q : 1) * sizeof *p->offsets);
    if (!p->offsets) return 0;
    int64_t stride[VP_MAX_RANK], coord[VP_MAX_RANK] = {0}, s = 1;
    for (int a = r - 1; a >= k; a--) {
        stride[a] = s;
        s *= x->dims[a];
    }
    for (int64_t j = 0; j < p->q; j++) {
        int64_t v = index_at(idx, j), dim = x->dims[axis], off = 0;
        if (v < -dim || v >= dim) { /* the kernel names it at run time */
            free(p->offsets);
            return 0;
        }
        for (int a = k; a < r; a++) off += (a == axis ? (v < 0 ? v + dim : v) : coord[a]) * stride[a];
        p->offsets[j] = off;
        for (int a = r - 1; a >= k && ++coord[a] == idx->dims[a]; a--) coord[a] = 0;
    }
    return 1;
}

static vp_status expand(vp_graph *g, int node, int y, void *ctx, vp_error *err) {
    const rows_plan *p = ctx;
    const vp_node *n = &g->nodes[node];
    int x = n->inputs[0], idx = n->inputs[1];
    char stem[512];
    snprintf(stem, sizeof stem, "%s", n->name[0] ? n->name : "GatherElements");
    int rank = g->values[idx].rank;
    int64_t flat[2] = {p->rows, p->m}, back[VP_MAX_RANK];
    memcpy(back, g->values[idx].dims, (size_t)rank * sizeof *back);
    int c_flat = vp_build_const(g, "rows", VP_I64, 1, (int64_t[]){2}, flat);
    int c_offsets = vp_build_const(g, "row_offsets", VP_I64, 1, &p->q, p->offsets);
    int c_back = vp_build_const(g, "shape", VP_I64, 1, (int64_t[]){rank}, back);
    if (c_flat < 0 || c_offsets < 0 || c_back < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    int x2 = -1, picked = -1;
    vp_status s = vp_build_op(g, stem, "Reshape", 2, (int[]){x, c_flat}, NULL, 0, &x2, err);
    if (!s) s = vp_build_op(g, stem, "Gather", 2, (int[]){x2, c_offsets}, "axis", 1, &picked, err);
    if (!s) s = vp_build_op(g, stem, "Reshape", 2, (int[]){picked, c_back}, NULL, 0, &y, err);
    return s;
}

vp_status vp_gather_rows(vp_graph *g, int *n_rewritten, vp_error *err) {
    *n_rewritten = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        rows_plan p;
        if (!plan_rows(g, &g->nodes[i], &p)) continue;
        int added = 0;
        vp_status s = vp_build_replace_node(g, i, expand, &p, &added, err);
        free(p.offsets);
        if (s) return s;
        i += added - 1;
        (*n_rewritten)++;
    }
    return VP_OK;
}
