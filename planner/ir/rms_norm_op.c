/* ONNX's RMSNormalization expanded in place (rms_norm_op.h says what comes in and goes
 * out), through vp_build_replace_node as attention_op.c. */
#include "ir/rms_norm_op.h"

#include <stdio.h>
#include <string.h>

#include "ir/graph_build.h"
#include "ir/infer.h"
#include "ir/op_registry.h"

int vp_rms_norm_op_is(const vp_node *n) {
    return (!n->domain[0] || !strcmp(n->domain, "ai.onnx")) && !strcmp(n->op_type, "RMSNormalization");
}

static vp_status expand(vp_graph *g, int node, int y, void *ctx, vp_error *err) {
    (void)ctx;
    const vp_node *n = &g->nodes[node];
    if (n->n_inputs < 2 || n->inputs[0] < 0 || n->inputs[1] < 0)
        return vp_node_fail(err, VP_ERR_INVALID, n, "needs inputs X and scale");
    if (y < 0) return VP_OK;
    int x = n->inputs[0], scale = n->inputs[1], rank = g->values[x].rank, axis;
    vp_dtype dt = g->values[x].dtype;
    if (!vp_dtype_is_float(dt) || dt == VP_F64)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "has X of dtype %s (float, float16, bfloat16 supported)",
                            vp_dtype_name(dt));
    if (vp_attr_int(n, "stash_type", 1) != VP_F32)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "has stash_type %lld: only float32 (1) is supported",
                            (long long)vp_attr_int(n, "stash_type", 1));
    vp_status s = vp_shape_axis(n, vp_attr_int(n, "axis", -1), rank, &axis, err);
    if (s) return s;
    float eps = vp_attr_float(n, "epsilon", 1e-5f);
    char stem[512];
    snprintf(stem, sizeof stem, "%s", n->name[0] ? n->name : "RMSNormalization");
    int64_t axes[VP_MAX_RANK];
    for (int a = axis; a < rank; a++) axes[a - axis] = a;
    int c_axes = vp_build_const(g, "axes", VP_I64, 1, (int64_t[]){rank - axis}, axes);
    int c_eps = vp_build_const(g, "epsilon", VP_F32, 0, NULL, &eps);
    if (c_axes < 0 || c_eps < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    int xs = x, sq = -1, ms = -1, var = -1, rms = -1, normed = -1, back = -1;
    if (dt != VP_F32) {
        xs = -1;
        s = vp_build_op(g, stem, "Cast", 1, &x, "to", VP_F32, &xs, err);
    }
    if (!s) s = vp_build_op(g, stem, "Mul", 2, (int[]){xs, xs}, NULL, 0, &sq, err);
    if (!s) s = vp_build_op(g, stem, "ReduceMean", 2, (int[]){sq, c_axes}, "keepdims", 1, &ms, err);
    if (!s) s = vp_build_op(g, stem, "Add", 2, (int[]){ms, c_eps}, NULL, 0, &var, err);
    if (!s) s = vp_build_op(g, stem, "Sqrt", 1, &var, NULL, 0, &rms, err);
    if (!s) s = vp_build_op(g, stem, "Div", 2, (int[]){xs, rms}, NULL, 0, &normed, err);
    if (dt == VP_F32) back = normed;
    else if (!s) s = vp_build_op(g, stem, "Cast", 1, &normed, "to", dt, &back, err);
    if (!s) s = vp_build_op(g, stem, "Mul", 2, (int[]){back, scale}, NULL, 0, &y, err);
    return s;
}

vp_status vp_rms_norm_op_expand(vp_graph *g, int node, int *n_new, vp_error *err) {
    return vp_build_replace_node(g, node, expand, NULL, n_new, err);
}
