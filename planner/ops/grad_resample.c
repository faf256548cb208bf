/* Gradient rules of the resample family (planner/ops/resample.c).
 *
 * Resize and Upsample: dX = ResizeGrad(dY, X, roi, scales), ONNX Runtime's
 * com.microsoft op with the forward's attributes (mode, coordinate mode, nearest mode,
 * axes), the adjoint of the forward sampling, extended here to nearest.  Upsample
 * and Resize-10 spell their fixed rule (asymmetric, floor) out as attributes.
 * GatherND: dData = GatherNDGrad(shape, indices, dY), ONNX Runtime's op.
 * ScatterND: dUpdates = GatherND(dY, indices); dData = dY with the written positions
 * zeroed (reduction none: a ScatterND of zeros) or dY itself (add).  The other
 * reductions (mul, max, min) are refused.  ScatterElements likewise, element for element:
 * dUpdates = GatherElements(dY, indices), dData = dY with the written elements zeroed or
 * dY.  Indices get no gradient. */
#include <string.h>

#include "ops/grad_macros.h"
#include "ir/graph_build.h"

static vp_status build(vp_grad_ctx *c, int node, const char *op, const char *domain, int n_in, const int *in, int *b,
                       vp_error *err) {
    *b = vp_grad_begin(c, node, op, domain, n_in, in, 1);
    return *b < 0 ? vp_gr_nomem(err) : VP_OK;
}

static vp_status attr_string(vp_grad_ctx *c, int b, const char *name, const char *v, vp_error *err) {
    return vp_node_add_attr_string(vp_grad_graph(c), b, name, v) ? vp_gr_nomem(err) : VP_OK;
}

/* Upsample-7's scales attribute as the float input ResizeGrad reads. */
static vp_status attr_scales(vp_grad_ctx *c, int node, int *out, vp_error *err) {
    const float *f;
    int k = vp_attr_floats(vp_gr_node(c, node), "scales", &f);
    if (k < 0) return vp_node_fail(err, VP_ERR_INVALID, vp_gr_node(c, node), "attribute scales is required");
    int64_t dims[1] = {k};
    *out = vp_build_const(vp_grad_graph(c), "scales", VP_F32, 1, dims, f);
    return *out < 0 ? vp_gr_nomem(err) : VP_OK;
}

VP_GRAD_RULE(vp_grad_resize) {
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    const vp_node *n = vp_gr_node(c, node);
    int upsample = !strcmp(n->op_type, "Upsample"), legacy = upsample || n->opset < 11;
    int sizes = !legacy && IN(3) >= 0 && vp_value_numel(vp_gr_val(c, IN(3))) > 0;
    if (sizes && strcmp(vp_attr_string(n, "keep_aspect_ratio_policy", "stretch"), "stretch"))
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "keep_aspect_ratio_policy '%s' has no gradient rule (stretch has)",
                            vp_attr_string(n, "keep_aspect_ratio_policy", ""));
    int in[4] = {dy[0], IN(0), legacy ? -1 : IN(1), -1}, b;
    if (upsample && n->opset < 9) TRY(attr_scales(c, node, &in[3], err));
    else in[3] = legacy ? IN(1) : IN(2);
    TRY(build(c, node, "ResizeGrad", "com.microsoft", 4, in, &b, err));
    if (legacy) {
        TRY(attr_string(c, b, "mode", vp_attr_string(vp_gr_node(c, node), "mode", "nearest"), err));
        TRY(attr_string(c, b, "coordinate_transformation_mode", "asymmetric", err));
        TRY(attr_string(c, b, "nearest_mode", "floor", err));
    } else {
        TRY(vp_gr_copy_attrs(c, node, b, err));
    }
    return vp_grad_end(c, b, &dx[0], err);
}

VP_GRAD_RULE(vp_grad_gather_nd) {
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    const vp_value *x = vp_gr_val(c, IN(0));
    int64_t b_dims = vp_attr_int(vp_gr_node(c, node), "batch_dims", 0);
    int in[3] = {-1, IN(1), dy[0]}, b;
    TRY(vp_gr_ints(c, x->dims, x->rank, &in[0], err));
    TRY(build(c, node, "GatherNDGrad", "com.microsoft", 3, in, &b, err));
    TRY(vp_gr_attr_int(c, b, "batch_dims", b_dims, err));
    return vp_grad_end(c, b, &dx[0], err);
}

/* A scatter's gradient: dUpdates = gather_op(dY, indices) (GatherND, or GatherElements
 * along axis), dData = dY (add) or dY with the written positions zeroed (none: the same
 * scatter of zeros).  axis < 0: the ND ops, which have none. */
static vp_status scatter_grad(vp_grad_ctx *c, int node, const int *dy, int *dx, const char *scatter_op,
                              const char *gather_op, int64_t axis, vp_error *err) {
    const vp_node *n = vp_gr_node(c, node);
    const char *red = vp_attr_string(n, "reduction", "none");
    int add = !strcmp(red, "add"), b;
    if (!add && strcmp(red, "none"))
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "reduction '%s' has no gradient rule (none and add have)", red);
    if (vp_grad_needs(c, node, 2)) {
        int in[2] = {dy[0], IN(1)};
        TRY(build(c, node, gather_op, "", 2, in, &b, err));
        if (axis >= 0) TRY(vp_gr_attr_int(c, b, "axis", axis, err));
        TRY(vp_grad_end(c, b, &dx[2], err));
    }
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    if (add) {
        dx[0] = dy[0];
        return VP_OK;
    }
    const vp_value *u = vp_gr_val(c, IN(2));
    int64_t dims[VP_MAX_RANK];
    int rank = u->rank, zeros;
    memcpy(dims, u->dims, sizeof dims);
    TRY(vp_gr_zeros(c, node, u->dtype, rank, dims, &zeros, err));
    int in[3] = {dy[0], IN(1), zeros};
    TRY(build(c, node, scatter_op, "", 3, in, &b, err));
    if (axis >= 0) TRY(vp_gr_attr_int(c, b, "axis", axis, err));
    return vp_grad_end(c, b, &dx[0], err);
}

VP_GRAD_RULE(vp_grad_scatter_nd) { return scatter_grad(c, node, dy, dx, "ScatterND", "GatherND", -1, err); }

VP_GRAD_RULE(vp_grad_scatter_elements) {
    int64_t axis = vp_attr_int(vp_gr_node(c, node), "axis", 0);
    if (axis < 0) axis += vp_gr_val(c, IN(0))->rank;
    return scatter_grad(c, node, dy, dx, "ScatterElements", "GatherElements", axis, err);
}
