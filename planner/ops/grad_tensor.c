/* Gradient rules of the tensor family: each undoes the data movement of its op on the
 * gradient (a reshape back, the inverse permutation, a Split for a Concat, a Pad for
 * a Slice), with standard ops; Gather uses ONNX Runtime's GatherGrad, GatherElements its
 * GatherElementsGrad (vp_gr_scatter_add).  Shapes and the parameters that decide them
 * (Slice's starts, Pad's pads) are known ahead of time, so the rules resolve them here
 * with the resolvers the kernels use (op_semantics.h). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "ir/graph_build.h"
#include "ops/grad_macros.h"
#include "ops/op_semantics.h"


static vp_status build(vp_grad_ctx *c, int node, const char *op, const char *domain, int n_in, const int *in, int n_out,
                       int *b) {
    *b = vp_grad_begin(c, node, op, domain, n_in, in, n_out);
    return *b < 0 ? VP_ERR_NOMEM : VP_OK;
}

/* Reshape, Flatten, Squeeze, Unsqueeze: the gradient takes the input's vp_gr_shape back. */
VP_GRAD_RULE(vp_grad_reshape) {
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    vp_gr_shape x = vp_gr_shape_of(c, IN(0));
    return vp_gr_reshape(c, node, dy[0], x.rank, x.dims, &dx[0], err);
}

VP_GRAD_RULE(vp_grad_transpose) {
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    int rank = vp_gr_val(c, IN(0))->rank;
    int64_t perm[VP_MAX_RANK], inv[VP_MAX_RANK];
    const int64_t *p = NULL;
    int k = vp_attr_ints(vp_gr_node(c, node), "perm", &p);
    for (int a = 0; a < rank; a++) perm[a] = k == rank ? p[a] : rank - 1 - a;
    for (int a = 0; a < rank; a++) {
        if (perm[a] < 0 || perm[a] >= rank)
            return vp_node_fail(err, VP_ERR_INVALID, vp_gr_node(c, node), "perm entry %lld is out of range",
                                (long long)perm[a]);
        inv[perm[a]] = a;
    }
    return vp_gr_transpose(c, node, dy[0], rank, inv, &dx[0], err);
}

VP_GRAD_RULE(vp_grad_expand) { return vp_gr_to_input(c, node, dy[0], 0, dx, err); }

/* Concat: Split the gradient at the inputs' sizes along the axis.  Fan-in has no limit
 * (DenseNet-121 concatenates up to 117 inputs). */
VP_GRAD_RULE(vp_grad_concat) {
    const vp_node *n = vp_gr_node(c, node);
    int n_in = n->n_inputs, rank = vp_gr_val(c, OUT(0))->rank, axis, sizes_v, b;
    TRY(vp_shape_axis(n, vp_attr_int(n, "axis", 0), rank, &axis, err));
    int *outs = malloc((size_t)n_in * sizeof *outs);
    int64_t *sizes = malloc((size_t)n_in * sizeof *sizes);
    vp_status s = outs && sizes ? VP_OK : vp_gr_nomem(err);
    for (int k = 0; !s && k < n_in; k++) sizes[k] = vp_gr_val(c, IN(k))->dims[axis];
    if (!s) s = vp_gr_ints(c, sizes, n_in, &sizes_v, err);
    int in[2] = {dy[0], s ? -1 : sizes_v};
    if (!s && build(c, node, "Split", "", 2, in, n_in, &b)) s = vp_gr_nomem(err);
    if (!s) s = vp_gr_attr_int(c, b, "axis", axis, err);
    if (!s) s = vp_grad_end(c, b, outs, err);
    for (int k = 0; !s && k < n_in; k++)
        if (vp_grad_needs(c, node, k)) dx[k] = outs[k];
    free(outs);
    free(sizes);
    return s;
}

/* Split: Concat the outputs' gradients, zeros for outputs no gradient reaches. */
VP_GRAD_RULE(vp_grad_split) {
    const vp_node *n = vp_gr_node(c, node);
    int n_out = n->n_outputs, rank = vp_gr_val(c, IN(0))->rank, axis, b;
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    TRY(vp_shape_axis(n, vp_attr_int(n, "axis", 0), rank, &axis, err));
    int *parts = malloc((size_t)n_out * sizeof *parts);
    vp_status s = parts ? VP_OK : vp_gr_nomem(err);
    for (int k = 0; !s && k < n_out; k++) {
        parts[k] = dy[k];
        if (parts[k] >= 0) continue;
        vp_gr_shape y = vp_gr_shape_of(c, OUT(k));
        s = vp_gr_zeros(c, node, y.dtype, y.rank, y.dims, &parts[k], err);
    }
    if (!s && build(c, node, "Concat", "", n_out, parts, 1, &b)) s = vp_gr_nomem(err);
    if (!s) s = vp_gr_attr_int(c, b, "axis", axis, err);
    if (!s) s = vp_grad_end(c, b, &dx[0], err);
    free(parts);
    return s;
}

/* ---- Slice ---- */

/* Slice's starts/ends/axes/steps (vp_slice_read); *count: how many axes it slices. */
static vp_status slice_params(vp_grad_ctx *c, int node, int64_t (*v)[VP_MAX_RANK], int *count, int *given,
                              vp_error *err) {
    vp_graph *g = vp_grad_graph(c);
    int counts[4];
    vp_status s = vp_slice_read(g, &g->nodes[node], v, counts, given, err);
    *count = counts[0] < 0 ? 0 : counts[0];
    return s;
}

/* One-axis Slice of g: [start, end) by step along axis. */
static vp_status slice_axis(vp_grad_ctx *c, int node, int g, int axis, int64_t start, int64_t end, int64_t step,
                            int *out, vp_error *err) {
    int64_t v[4] = {start, end, axis, step};
    int in[5] = {g, -1, -1, -1, -1}, b;
    for (int j = 0; j < 4; j++) TRY(vp_gr_ints(c, &v[j], 1, &in[j + 1], err));
    if (build(c, node, "Slice", "", 5, in, 1, &b)) return vp_gr_nomem(err);
    return vp_grad_end(c, b, out, err);
}

static vp_status pad_zeros(vp_grad_ctx *c, int node, int g, int rank, const int64_t *begin, const int64_t *end,
                           int *out, vp_error *err) {
    int64_t pads[2 * VP_MAX_RANK];
    int any = 0;
    for (int a = 0; a < rank; a++) {
        pads[a] = begin[a];
        pads[rank + a] = end[a];
        any |= begin[a] || end[a];
    }
    if (!any) {
        *out = g;
        return VP_OK;
    }
    int p;
    TRY(vp_gr_ints(c, pads, 2 * rank, &p, err));
    return vp_grad_op2(c, node, "Pad", g, p, out, err);
}

/* Spreads g's elements along axis `axis` to every `step`-th position: [.., m, ..] ->
 * [.., (m-1)*step + 1, ..], zeros between (insert an axis, pad it, merge, trim). */
static vp_status spread(vp_grad_ctx *c, int node, int g, int axis, int64_t step, int *out, vp_error *err) {
    vp_gr_shape s = vp_gr_shape_of(c, g);
    int64_t m = s.dims[axis], dims[VP_MAX_RANK], begin[VP_MAX_RANK] = {0}, end[VP_MAX_RANK] = {0};
    if (s.rank + 1 > VP_MAX_RANK)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, vp_gr_node(c, node), "strided Slice of rank %d", s.rank);
    for (int a = 0, d = 0; a <= s.rank; a++) dims[a] = a == axis + 1 ? 1 : s.dims[d++];
    end[axis + 1] = step - 1;
    int t;
    TRY(vp_gr_reshape(c, node, g, s.rank + 1, dims, &t, err));
    TRY(pad_zeros(c, node, t, s.rank + 1, begin, end, &t, err));
    s.dims[axis] = m * step;
    TRY(vp_gr_reshape(c, node, t, s.rank, s.dims, &t, err));
    return slice_axis(c, node, t, axis, 0, (m - 1) * step + 1, 1, out, err);
}

/* Slice: the gradient lands where the elements came from, zeros elsewhere.  A negative
 * step is a reversal followed by a positive step; a step above 1 spreads the gradient;
 * one Pad then places it. */
VP_GRAD_RULE(vp_grad_slice) {
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    int64_t v[4][VP_MAX_RANK];
    int count = 0, given[4] = {0, 0, 0, 0};
    TRY(slice_params(c, node, v, &count, given, err));
    vp_gr_shape x = vp_gr_shape_of(c, IN(0));
    vp_slice_plan plan;
    char why[256];
    if (vp_slice_resolve(x.rank, x.dims, count, v[0], v[1], given[2] ? v[2] : NULL, given[3] ? v[3] : NULL, &plan, why,
                         sizeof why))
        return vp_node_fail(err, VP_ERR_INVALID, vp_gr_node(c, node), "%s", why);
    int64_t begin[VP_MAX_RANK], end[VP_MAX_RANK];
    int g = dy[0];
    for (int a = 0; a < x.rank; a++) {
        int64_t m = plan.count[a], step = plan.step[a], mag = step < 0 ? -step : step;
        if (m == 0) return vp_gr_zeros(c, node, x.dtype, x.rank, x.dims, &dx[0], err);
        if (step < 0) TRY(slice_axis(c, node, g, a, -1, INT64_MIN, -1, &g, err));
        if (mag > 1 && m > 1) TRY(spread(c, node, g, a, mag, &g, err));
        begin[a] = step > 0 ? plan.start[a] : plan.start[a] - (m - 1) * mag;
        end[a] = x.dims[a] - begin[a] - ((m - 1) * mag + 1);
    }
    return pad_zeros(c, node, g, x.rank, begin, end, &dx[0], err);
}

/* The padding row of torch's nn.Embedding(padding_idx=p) kept out of its gradient, as
 * torch's embedding backward does: Where(row != p, g, 0) over the table's rows. */
static vp_status keep_padding_row(vp_grad_ctx *c, int node, const vp_gr_shape *x, int64_t pad, int g, int *out,
                                  vp_error *err) {
    int64_t dims[VP_MAX_RANK];
    for (int d = 0; d < x->rank; d++) dims[d] = d ? 1 : x->dims[0];
    unsigned char *keep = malloc((size_t)x->dims[0] + 1);
    if (!keep) return vp_gr_nomem(err);
    for (int64_t r = 0; r < x->dims[0]; r++) keep[r] = r != pad;
    vp_graph *gg = vp_grad_graph(c);
    int k = vp_build_const(gg, "padding_row_kept", VP_BOOL, x->rank, dims, keep);
    free(keep);
    unsigned char zero[8] = {0};
    int z = vp_build_const(gg, "zero", x->dtype, 0, NULL, zero);
    if (k < 0 || z < 0) return vp_gr_nomem(err);
    int in[3] = {k, g, z}, b;
    if (build(c, node, "Where", "", 3, in, 1, &b)) return vp_gr_nomem(err);
    return vp_grad_end(c, b, out, err);
}

/* Gather: GatherGrad(shape, indices, dY) scatters-adds rows back; indices get none.  A
 * Gather torch wrote for nn.Embedding trains as torch trains it: its padding row gets no
 * gradient; scale_grad_by_freq is refused. */
VP_GRAD_RULE(vp_grad_gather) {
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    const vp_node *n = vp_gr_node(c, node);
    const vp_embedding_hint e = n->embedding; /* copies: adding nodes below moves the node array */
    const int64_t axis = vp_attr_int(n, "axis", 0);
    if (e.from_embedding && e.scale_grad_by_freq)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "is torch's embedding with scale_grad_by_freq=True, whose "
                            "gradient scales each row by how often the batch reads it: not supported");
    vp_gr_shape x = vp_gr_shape_of(c, IN(0));
    int sh, b;
    TRY(vp_gr_ints(c, x.dims, x.rank, &sh, err));
    int in[3] = {sh, IN(1), dy[0]};
    if (build(c, node, "GatherGrad", "com.microsoft", 3, in, 1, &b)) return vp_gr_nomem(err);
    TRY(vp_gr_attr_int(c, b, "axis", axis, err));
    int pad = e.from_embedding && axis == 0 && x.rank >= 1 && e.padding_idx >= 0 && e.padding_idx < x.dims[0];
    if (!pad) return vp_grad_end(c, b, &dx[0], err);
    int g;
    TRY(vp_grad_end(c, b, &g, err));
    return keep_padding_row(c, node, &x, e.padding_idx, g, &dx[0], err);
}

/* Tile: the output seen as (repeat, dim) pairs; sum over the repeats. */
VP_GRAD_RULE(vp_grad_tile) {
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    vp_gr_shape x = vp_gr_shape_of(c, IN(0));
    int64_t dims[VP_MAX_RANK], axes[VP_MAX_RANK];
    int rank = 0, n_axes = 0, t;
    const vp_value *y = vp_gr_val(c, OUT(0));
    for (int a = 0; a < x.rank; a++) {
        int64_t r = x.dims[a] ? y->dims[a] / x.dims[a] : 1;
        if (r != 1) {
            if (rank + 2 > VP_MAX_RANK)
                return vp_node_fail(err, VP_ERR_UNSUPPORTED, vp_gr_node(c, node), "tiles too many axes for a gradient");
            axes[n_axes++] = rank;
            dims[rank++] = r;
        } else if (rank + 1 > VP_MAX_RANK) {
            return vp_node_fail(err, VP_ERR_UNSUPPORTED, vp_gr_node(c, node), "tiles too many axes for a gradient");
        }
        dims[rank++] = x.dims[a];
    }
    TRY(vp_gr_reshape(c, node, dy[0], rank, dims, &t, err));
    if (n_axes) TRY(vp_gr_reduce_sum(c, node, t, n_axes, axes, 0, &t, err));
    return vp_gr_reshape(c, node, t, x.rank, x.dims, &dx[0], err);
}

/* ---- Pad (constant mode) ---- */

/* Pad's mode, pads and axes: attributes before opset 11, inputs after (axes from 18). */
static vp_status pad_params(vp_grad_ctx *c, int node, int64_t *begin, int64_t *end, vp_error *err) {
    vp_graph *g = vp_grad_graph(c);
    const vp_node *n = &g->nodes[node];
    const vp_value *x = &g->values[n->inputs[0]];
    const char *mode = vp_attr_string(n, "mode", "constant");
    if (strcmp(mode, "constant"))
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "mode '%s' has no gradient rule (constant only)", mode);
    int64_t pads[2 * VP_MAX_RANK], axes[VP_MAX_RANK];
    int k = 0, n_axes = -1;
    if (n->opset < 11) {
        const int64_t *p = NULL;
        k = vp_attr_ints(n, "pads", &p);
        if (k < 0 || k > 2 * VP_MAX_RANK) return vp_node_fail(err, VP_ERR_INVALID, n, "needs pads");
        memcpy(pads, p, (size_t)k * sizeof *p);
    } else {
        TRY(vp_shape_const_ints(g, n, 1, pads, 2 * VP_MAX_RANK, &k, err));
        if (vp_shape_in(g, n, 3)) TRY(vp_shape_const_ints(g, n, 3, axes, VP_MAX_RANK, &n_axes, err));
    }
    char why[256];
    if (vp_pad_resolve(x->rank, x->dims, VP_PAD_CONSTANT, k / 2, pads, n_axes >= 0 ? axes : NULL, begin, end, why,
                       sizeof why))
        return vp_node_fail(err, VP_ERR_INVALID, n, "%s", why);
    return VP_OK;
}

/* The constant value's gradient: dY summed over the padding, picked by a mask made by
 * the same Pad of zeros with value 1 (a constant the build folds).  Summing the padding
 * alone, rather than all of dY less the input's part, keeps low precision from
 * cancelling. */
static vp_status pad_value_grad(vp_grad_ctx *c, int node, const int *dy, const int64_t *begin, const int64_t *end,
                                int *dx, vp_error *err) {
    vp_gr_shape x = vp_gr_shape_of(c, IN(0)), v = vp_gr_shape_of(c, IN(2));
    int64_t pads[2 * VP_MAX_RANK], axes[VP_MAX_RANK];
    for (int a = 0; a < x.rank; a++) {
        pads[a] = begin[a];
        pads[x.rank + a] = end[a];
        axes[a] = a;
    }
    int zeros, one, p, mask, b, t;
    TRY(vp_gr_zeros(c, node, x.dtype, x.rank, x.dims, &zeros, err));
    TRY(vp_gr_scalar(c, node, x.dtype, 1.0, &one, err));
    TRY(vp_gr_ints(c, pads, 2 * x.rank, &p, err));
    int in[3] = {zeros, p, one};
    if (build(c, node, "Pad", "", 3, in, 1, &b)) return vp_gr_nomem(err);
    TRY(vp_grad_end(c, b, &mask, err));
    TRY(vp_grad_op2(c, node, "Mul", dy[0], mask, &t, err));
    TRY(vp_gr_reduce_sum(c, node, t, x.rank, axes, 0, &t, err));
    return vp_gr_reshape(c, node, t, v.rank, v.dims, &dx[2], err);
}

/* Pad: the gradient is the slice of dY where the input landed; cropped (negative pad)
 * input elements get zeros. */
VP_GRAD_RULE(vp_grad_pad) {
    int value_needed = vp_gr_node(c, node)->opset >= 11 && vp_grad_needs(c, node, 2);
    if (!vp_grad_needs(c, node, 0) && !value_needed) return VP_OK;
    int64_t begin[VP_MAX_RANK], end[VP_MAX_RANK], v[4][VP_MAX_RANK], crop_b[VP_MAX_RANK], crop_e[VP_MAX_RANK];
    TRY(pad_params(c, node, begin, end, err));
    vp_gr_shape x = vp_gr_shape_of(c, IN(0));
    int in[5] = {dy[0], -1, -1, -1, -1}, kept, b;
    for (int a = 0; a < x.rank; a++) {
        crop_b[a] = begin[a] < 0 ? -begin[a] : 0;
        crop_e[a] = end[a] < 0 ? -end[a] : 0;
        v[0][a] = begin[a] > 0 ? begin[a] : 0;
        v[1][a] = v[0][a] + x.dims[a] - crop_b[a] - crop_e[a];
        v[2][a] = a;
        v[3][a] = 1;
    }
    for (int j = 0; j < 4; j++) TRY(vp_gr_ints(c, v[j], x.rank, &in[j + 1], err));
    if (build(c, node, "Slice", "", 5, in, 1, &b)) return vp_gr_nomem(err);
    TRY(vp_grad_end(c, b, &kept, err));
    if (value_needed) TRY(pad_value_grad(c, node, dy, begin, end, dx, err));
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    return pad_zeros(c, node, kept, x.rank, crop_b, crop_e, &dx[0], err);
}

/* Trilu keeps a triangle: its gradient is the same triangle of dY. */
VP_GRAD_RULE(vp_grad_trilu) {
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    const vp_node *n = vp_gr_node(c, node);
    int in[2] = {dy[0], IN(1)}, b;
    int64_t upper = vp_attr_int(n, "upper", 1);
    if (build(c, node, "Trilu", "", IN(1) >= 0 ? 2 : 1, in, 1, &b)) return vp_gr_nomem(err);
    TRY(vp_gr_attr_int(c, b, "upper", upper, err));
    return vp_grad_end(c, b, &dx[0], err);
}

/* ---- GatherElements (and TopK's values): a scatter-add ---- */

vp_status vp_gr_scatter_add(vp_grad_ctx *c, int node, int g, int idx, int axis, int rank, const int64_t *xdims,
                            int *out, vp_error *err) {
    int sh, b;
    TRY(vp_gr_ints(c, xdims, rank, &sh, err));
    int in[3] = {g, sh, idx};
    if (build(c, node, "GatherElementsGrad", "com.microsoft", 3, in, 1, &b)) return vp_gr_nomem(err);
    TRY(vp_gr_attr_int(c, b, "axis", axis, err));
    return vp_grad_end(c, b, out, err);
}

/* GatherElements: dY scatter-added back to the positions the indices name. */
VP_GRAD_RULE(vp_grad_gather_elements) {
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    vp_gr_shape x = vp_gr_shape_of(c, IN(0));
    int axis;
    TRY(vp_shape_axis(vp_gr_node(c, node), vp_attr_int(vp_gr_node(c, node), "axis", 0), x.rank, &axis, err));
    return vp_gr_scatter_add(c, node, dy[0], IN(1), axis, x.rank, x.dims, &dx[0], err);
}
