/* ONNX's GroupNormalization expanded in place (group_norm_op.h says what comes in and goes
 * out), through vp_build_replace_node as rms_norm_op.c. */
#include "ir/group_norm_op.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/dtype_conv.h"
#include "ir/graph_build.h"
#include "ir/infer.h"

int vp_group_norm_op_is(const vp_node *n) {
    return (!n->domain[0] || !strcmp(n->domain, "ai.onnx")) && !strcmp(n->op_type, "GroupNormalization");
}

/* x seen with dims[0..rank) into *out. */
static vp_status reshape(vp_graph *g, const char *stem, int x, int rank, const int64_t *dims, int *out, vp_error *err) {
    int shape = vp_build_const(g, "shape", VP_I64, 1, (const int64_t[]){rank}, dims);
    if (shape < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    return vp_build_op(g, stem, "Reshape", 2, (const int[]){x, shape}, NULL, 0, out, err);
}

static vp_status expand(vp_graph *g, int node, int y, void *ctx, vp_error *err) {
    (void)ctx;
    const vp_node *n = &g->nodes[node];
    if (n->n_inputs < 3 || n->inputs[0] < 0 || n->inputs[1] < 0 || n->inputs[2] < 0)
        return vp_node_fail(err, VP_ERR_INVALID, n, "needs inputs X, scale and bias");
    int x = n->inputs[0], scale = n->inputs[1], bias = n->inputs[2];
    const vp_value *xv = &g->values[x];
    vp_dtype dt = xv->dtype;
    int rank = xv->rank, per_group = n->opset > 0 && n->opset < 21; /* opset 18's scale and bias */
    int64_t groups = vp_attr_int(n, "num_groups", 0), c = rank >= 2 ? xv->dims[1] : 0;
    float eps = vp_attr_float(n, "epsilon", 1e-5f);
    if (rank < 2 || !vp_dtype_is_float(dt))
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "has X of rank %d and dtype %s (rank 2 or more of a float "
                            "type supported)", rank, vp_dtype_name(dt));
    if (groups <= 0 || c % groups)
        return vp_node_fail(err, VP_ERR_INVALID, n, "has num_groups %lld for %lld channels (it must divide them)",
                            (long long)groups, (long long)c);
    int64_t want = per_group ? groups : c;
    for (int k = 1; k < 3; k++) {
        const vp_value *p = &g->values[n->inputs[k]];
        if (vp_value_numel(p) != want || p->rank != 1)
            return vp_node_fail(err, VP_ERR_INVALID, n, "has %s '%s' of %lld elements (opset %d: one per %s, %lld)",
                                k == 1 ? "scale" : "bias", p->name, (long long)vp_value_numel(p), n->opset,
                                per_group ? "group" : "channel", (long long)want);
    }
    if (!per_group && vp_attr_int(n, "stash_type", 1) != VP_F32)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "has stash_type %lld: only float32 (1) is supported",
                            (long long)vp_attr_int(n, "stash_type", 1));
    if (y < 0) return VP_OK;
    char stem[512];
    snprintf(stem, sizeof stem, "%s", n->name[0] ? n->name : "GroupNormalization");
    int64_t dims[VP_MAX_RANK], rows = xv->dims[0] * groups;
    int64_t grouped[3] = {xv->dims[0], groups, rows > 0 ? vp_value_numel(xv) / rows : 0};
    memcpy(dims, xv->dims, (size_t)rank * sizeof *dims);
    /* stash_type float32: a 16-bit X normalised in float32 (float64 in float64, no narrower) */
    int narrow = !per_group && (dt == VP_F16 || dt == VP_BF16);
    vp_dtype nt = narrow ? VP_F32 : dt;
    int xs = x, x3 = -1, n3 = -1, back = -1, cast = -1, sc = -1, bs = -1, scaled = -1, in_scale = scale, in_bias = bias;
    vp_status s = VP_OK;
    if (narrow) {
        xs = -1;
        s = vp_build_op(g, stem, "Cast", 1, &x, "to", VP_F32, &xs, err);
    }
    if (!s) s = reshape(g, stem, xs, 3, grouped, &x3, err);
    if (!s && !per_group) { /* the normalisation alone: scale 1 and bias 0 per group */
        void *ones = malloc((size_t)groups * vp_dtype_size(nt)), *zeros = calloc((size_t)groups, vp_dtype_size(nt));
        for (int64_t i = 0; ones && i < groups; i++) vp_store(ones, nt, i, 1.0);
        in_scale = ones && zeros ? vp_build_const(g, "ones", nt, 1, &groups, ones) : -1;
        in_bias = ones && zeros ? vp_build_const(g, "zeros", nt, 1, &groups, zeros) : -1;
        free(ones);
        free(zeros);
        if (in_scale < 0 || in_bias < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    }
    if (s) return s;
    /* InstanceNormalization over [N, groups, rest]: each group's statistics */
    char name[600];
    snprintf(name, sizeof name, "%s/InstanceNormalization", stem);
    int out3 = vp_graph_add_unique_value(g, name);
    int id = out3 < 0 ? -1 : vp_graph_add_node(g, "InstanceNormalization", "", name, 3, (const int[]){x3, in_scale, in_bias}, 1, &out3);
    if (id < 0 || vp_node_add_attr_float(g, id, "epsilon", eps)) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    g->nodes[id].opset = g->opset_onnx;
    if ((s = vp_infer_node(g, id, 0, NULL, err))) return s;
    n3 = out3;
    if (per_group) return reshape(g, stem, n3, rank, dims, &y, err);
    s = reshape(g, stem, n3, rank, dims, &back, err);
    if (!s && narrow) s = vp_build_op(g, stem, "Cast", 1, &back, "to", dt, &cast, err);
    else cast = back;
    /* opset 21: scale and bias per channel, over axis 1 */
    int64_t cdims[VP_MAX_RANK];
    for (int i = 0; i < rank; i++) cdims[i] = i == 1 ? c : 1;
    if (!s) s = reshape(g, stem, scale, rank, cdims, &sc, err);
    if (!s) s = reshape(g, stem, bias, rank, cdims, &bs, err);
    if (!s) s = vp_build_op(g, stem, "Mul", 2, (const int[]){cast, sc}, NULL, 0, &scaled, err);
    if (!s) s = vp_build_op(g, stem, "Add", 2, (const int[]){scaled, bs}, NULL, 0, &y, err);
    return s;
}

vp_status vp_group_norm_op_expand(vp_graph *g, int node, int *n_new, vp_error *err) {
    return vp_build_replace_node(g, node, expand, NULL, n_new, err);
}
