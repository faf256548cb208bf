/* CUDA ops that move data without arithmetic: copies (Identity, Reshape and the other
 * views), Transpose, Expand, Tile, Concat, Split, Slice, Pad, Gather and its gradient,
 * Shape and Size; and CumSum.  Most are one strided n-d copy (cu_copy_nd); Pad resolves
 * its pads on the host with the CPU reference's resolver (op_semantics.h). */
#include <string.h>

#include "cu_kernels.h"
#include "cuda_internal.h"
#include "ir/dtype_conv.h"
#include "ops/op_semantics.h"

static vp_status op_copy(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                         vp_error *err) {
    if (!out[0]) return VP_OK;
    if (vp_tensor_nbytes(in[0]) != vp_tensor_nbytes(out[0]))
        return vp_node_fail(err, VP_ERR_RUNTIME, n, "output size differs from the input's");
    return vp_cuda_copy_d2d(c, n, out[0]->data, in[0]->data, vp_tensor_nbytes(in[0]), err);
}

static vp_status op_transpose(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                              vp_error *err) {
    const vp_tensor *x = in[0];
    vp_tensor *y = out[0];
    const int64_t *perm = NULL;
    int np = vp_attr_ints(n, "perm", &perm);
    int64_t xs[VP_MAX_RANK], ys[VP_MAX_RANK], src[VP_MAX_RANK];
    contiguous_strides(x->rank, x->dims, xs);
    contiguous_strides(y->rank, y->dims, ys);
    for (int d = 0; d < y->rank; d++) {
        int64_t p = np == x->rank ? perm[d] : x->rank - 1 - d;
        if (p < 0) p += x->rank;
        if (p < 0 || p >= x->rank) return vp_node_fail(err, VP_ERR_INVALID, n, "bad perm");
        src[d] = xs[p];
    }
    return LAUNCH(cu_copy_nd((int)vp_dtype_size(x->dtype), y->rank, y->dims, x->data, src, y->data, ys, c->stream));
}

static vp_status op_expand(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                           vp_error *err) {
    vp_tensor *y = out[0];
    int64_t src[VP_MAX_RANK], ys[VP_MAX_RANK];
    broadcast_strides(in[0], y->rank, y->dims, src);
    contiguous_strides(y->rank, y->dims, ys);
    return LAUNCH(cu_copy_nd((int)vp_dtype_size(y->dtype), y->rank, y->dims, in[0]->data, src, y->data, ys, c->stream));
}

/* Tile: the output seen as (repeat, dim) pairs of axes, the input read with stride 0
 * along each repeat, as the CPU kernel does; one copy of rank 2 x rank. */
static vp_status op_tile(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                         vp_error *err) {
    const vp_tensor *x = in[0];
    vp_tensor *y = out[0];
    if (!vp_tensor_numel(y)) return VP_OK;
    if (2 * x->rank > CU_MAX_RANK)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "tiles a tensor of rank %d: at most %d on CUDA", x->rank,
                            CU_MAX_RANK / 2);
    int64_t xs[VP_MAX_RANK], ys[VP_MAX_RANK], dims[CU_MAX_RANK], src[CU_MAX_RANK], dst[CU_MAX_RANK];
    contiguous_strides(x->rank, x->dims, xs);
    contiguous_strides(y->rank, y->dims, ys);
    for (int d = 0; d < x->rank; d++) {
        dims[2 * d] = y->dims[d] / x->dims[d];
        dims[2 * d + 1] = x->dims[d];
        src[2 * d] = 0;
        src[2 * d + 1] = xs[d];
        dst[2 * d] = ys[d] * x->dims[d];
        dst[2 * d + 1] = ys[d];
    }
    return LAUNCH(cu_copy_nd((int)vp_dtype_size(y->dtype), 2 * x->rank, dims, x->data, src, y->data, dst, c->stream));
}

/* Pad: pads (and the fill, and opset 18's axes) from inputs, or attributes below opset
 * 11; resolved on the host as the CPU kernel resolves them. */
static vp_status op_pad(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                        vp_error *err) {
    const vp_tensor *x = in[0];
    vp_tensor *y = out[0];
    int mode = vp_pad_mode_parse(vp_attr_string(n, "mode", "constant"));
    if (mode < 0) return vp_node_fail(err, VP_ERR_INVALID, n, "unknown mode '%s'", vp_attr_string(n, "mode", ""));
    if (x->rank > CU_MAX_RANK) return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "rank %d (at most %d on CUDA)", x->rank, CU_MAX_RANK);
    int64_t pads[2 * VP_MAX_RANK], axes[VP_MAX_RANK];
    int n_pads = 0, n_axes = 0;
    double fill = 0;
    vp_status s = VP_OK;
    if (n->opset < 11) {
        const int64_t *p;
        n_pads = vp_attr_ints(n, "pads", &p);
        n_pads = n_pads < 0 ? 0 : n_pads > 2 * VP_MAX_RANK ? 2 * VP_MAX_RANK : n_pads;
        memcpy(pads, p, (size_t)n_pads * sizeof *p);
        fill = vp_attr_float(n, "value", 0.0f);
    } else {
        s = vp_cuda_read_ints(c, n, in[1], 1, pads, 2 * VP_MAX_RANK, &n_pads, err);
        const vp_tensor *v = opt_in(n, in, 2), *ax = opt_in(n, in, 3);
        if (!s && v && vp_tensor_numel(v)) {
            if (vp_dtype_is_float(v->dtype)) s = vp_cuda_read_float_scalar(c, n, v, 2, &fill, err);
            else {
                int64_t iv;
                int one;
                s = vp_cuda_read_ints(c, n, v, 2, &iv, 1, &one, err);
                fill = (double)iv;
            }
        }
        if (!s && ax) s = vp_cuda_read_ints(c, n, ax, 3, axes, VP_MAX_RANK, &n_axes, err);
        if (s) return s;
    }
    int64_t begin[VP_MAX_RANK], end[VP_MAX_RANK];
    char why[256];
    if (vp_pad_resolve(x->rank, x->dims, (vp_pad_mode)mode, n_pads / 2, pads, opt_in(n, in, 3) ? axes : NULL, begin, end,
                       why, sizeof why))
        return vp_node_fail(err, VP_ERR_RUNTIME, n, "%s", why);
    cu_pad_geom g = {.rank = x->rank, .mode = mode == VP_PAD_CONSTANT ? 0 : mode == VP_PAD_REFLECT ? 1
                                                                            : mode == VP_PAD_EDGE ? 2 : 3};
    int64_t xs[VP_MAX_RANK];
    contiguous_strides(x->rank, x->dims, xs);
    for (int a = 0; a < x->rank; a++) {
        g.out_dims[a] = y->dims[a];
        g.in_strides[a] = xs[a];
        g.first[a] = begin[a] < 0 ? -begin[a] : 0;
        g.pad[a] = begin[a] > 0 ? begin[a] : 0;
        g.kept[a] = vp_pad_kept(x->dims[a], begin[a], end[a]);
        if (g.kept[a] <= 0 && g.mode) return vp_node_fail(err, VP_ERR_RUNTIME, n, "axis %d keeps nothing to read from", a);
    }
    vp_store(&g.value, x->dtype, 0, fill);
    return LAUNCH(cu_pad((int)vp_dtype_size(x->dtype), &g, x->data, y->data, c->stream));
}

/* CumSum along the axis input's one value; exclusive and reverse as attributes. */
static vp_status op_cumsum(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                           vp_error *err) {
    const vp_tensor *x = in[0];
    if (x->dtype != VP_F32 && x->dtype != VP_F64 && x->dtype != VP_I32 && x->dtype != VP_I64)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "CumSum of %s (float32, float64, int32, int64 on CUDA)",
                            vp_dtype_name(x->dtype));
    int64_t axis;
    int one;
    vp_status s = vp_cuda_read_ints(c, n, in[1], 1, &axis, 1, &one, err);
    if (s) return s;
    if (one != 1 || axis < -x->rank || axis >= x->rank)
        return vp_node_fail(err, VP_ERR_RUNTIME, n, "axis must be one value in [-%d, %d)", x->rank, x->rank);
    int a = norm_axis(axis, x->rank);
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < a; d++) outer *= x->dims[d];
    for (int d = a + 1; d < x->rank; d++) inner *= x->dims[d];
    return LAUNCH(cu_cumsum((int)x->dtype, outer, x->dims[a], inner, vp_attr_int(n, "exclusive", 0) != 0,
                            vp_attr_int(n, "reverse", 0) != 0, x->data, out[0]->data, c->stream));
}

static vp_status op_concat(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                           vp_error *err) {
    vp_tensor *y = out[0];
    int axis = norm_axis(vp_attr_int(n, "axis", 0), y->rank);
    if (axis < 0 || axis >= y->rank) return vp_node_fail(err, VP_ERR_INVALID, n, "axis out of range");
    int64_t ys[VP_MAX_RANK], es = (int64_t)vp_dtype_size(y->dtype), at = 0;
    contiguous_strides(y->rank, y->dims, ys);
    vp_status s = VP_OK;
    for (int k = 0; k < n->n_inputs && !s; k++) {
        const vp_tensor *x = in[k];
        if (!x) continue;
        int64_t xs[VP_MAX_RANK];
        contiguous_strides(x->rank, x->dims, xs);
        s = LAUNCH(cu_copy_nd((int)es, x->rank, x->dims, x->data, xs, (char *)y->data + at * ys[axis] * es, ys, c->stream));
        at += x->dims[axis];
    }
    return s;
}

static vp_status op_split(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                          vp_error *err) {
    const vp_tensor *x = in[0];
    int axis = norm_axis(vp_attr_int(n, "axis", 0), x->rank);
    if (axis < 0 || axis >= x->rank) return vp_node_fail(err, VP_ERR_INVALID, n, "axis out of range");
    int64_t xs[VP_MAX_RANK], es = (int64_t)vp_dtype_size(x->dtype), at = 0;
    contiguous_strides(x->rank, x->dims, xs);
    vp_status s = VP_OK;
    for (int k = 0; k + 1 < n->n_outputs; k++)
        if (!out[k]) return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "an omitted output before the last one");
    /* each output's extent along the axis is its shape's, which the planner decided */
    for (int k = 0; k < n->n_outputs && !s; k++) {
        vp_tensor *y = out[k];
        if (!y) continue;
        int64_t ys[VP_MAX_RANK];
        contiguous_strides(y->rank, y->dims, ys);
        s = LAUNCH(cu_copy_nd((int)es, y->rank, y->dims, (const char *)x->data + at * xs[axis] * es, xs, y->data, ys, c->stream));
        at += y->dims[axis];
    }
    return s;
}

static vp_status op_slice(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                          vp_error *err) {
    const vp_tensor *x = in[0];
    vp_tensor *y = out[0];
    int64_t starts[VP_MAX_RANK], ends[VP_MAX_RANK], axes[VP_MAX_RANK], steps[VP_MAX_RANK];
    int ns = 0, ne = 0, na = -1, nst = -1;
    vp_status s = VP_OK;
    if (n->opset < 10 && n->n_inputs == 1) {
        const int64_t *p;
        ns = vp_attr_ints(n, "starts", &p);
        for (int i = 0; i < ns && i < VP_MAX_RANK; i++) starts[i] = p[i];
        ne = vp_attr_ints(n, "ends", &p);
        for (int i = 0; i < ne && i < VP_MAX_RANK; i++) ends[i] = p[i];
        na = vp_attr_ints(n, "axes", &p);
        for (int i = 0; i < na && i < VP_MAX_RANK; i++) axes[i] = p[i];
        if (ns > VP_MAX_RANK || na > VP_MAX_RANK) return vp_node_fail(err, VP_ERR_INVALID, n, "too many axes");
    } else {
        s = vp_cuda_read_ints(c, n, in[1], 1, starts, VP_MAX_RANK, &ns, err);
        if (!s) s = vp_cuda_read_ints(c, n, in[2], 2, ends, VP_MAX_RANK, &ne, err);
        if (!s && opt_in(n, in, 3)) s = vp_cuda_read_ints(c, n, in[3], 3, axes, VP_MAX_RANK, &na, err);
        if (!s && opt_in(n, in, 4)) s = vp_cuda_read_ints(c, n, in[4], 4, steps, VP_MAX_RANK, &nst, err);
        if (s) return s;
    }
    int64_t xs[VP_MAX_RANK], ys[VP_MAX_RANK], src[VP_MAX_RANK], offset = 0;
    contiguous_strides(x->rank, x->dims, xs);
    contiguous_strides(y->rank, y->dims, ys);
    for (int d = 0; d < x->rank; d++) src[d] = xs[d];
    for (int i = 0; i < ns; i++) {
        int a = norm_axis(na < 0 ? i : axes[i], x->rank);
        if (a < 0 || a >= x->rank) return vp_node_fail(err, VP_ERR_INVALID, n, "axis out of range");
        int64_t dim = x->dims[a], st = nst < 0 ? 1 : steps[i], b = starts[i];
        if (st == 0) return vp_node_fail(err, VP_ERR_INVALID, n, "step 0");
        if (b < 0) b += dim;
        if (st > 0) b = b < 0 ? 0 : b > dim ? dim : b;
        else b = b < 0 ? 0 : b > dim - 1 ? dim - 1 : b;
        offset += b * xs[a];
        src[a] = xs[a] * st;
    }
    int64_t es = (int64_t)vp_dtype_size(x->dtype);
    return LAUNCH(cu_copy_nd((int)es, y->rank, y->dims, (const char *)x->data + offset * es, src, y->data, ys, c->stream));
}

static vp_status op_gather(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                           vp_error *err) {
    const vp_tensor *x = in[0], *idx = in[1];
    int axis = norm_axis(vp_attr_int(n, "axis", 0), x->rank);
    if (axis < 0 || axis >= x->rank) return vp_node_fail(err, VP_ERR_INVALID, n, "axis out of range");
    if (idx->dtype != VP_I64 && idx->dtype != VP_I32) return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "indices are not int32/int64");
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; d++) outer *= x->dims[d];
    for (int d = axis + 1; d < x->rank; d++) inner *= x->dims[d];
    return LAUNCH(cu_gather((int)vp_dtype_size(x->dtype), outer, x->dims[axis], vp_tensor_numel(idx), inner, x->data,
                            idx->data, idx->dtype == VP_I64, out[0]->data, c->stream));
}

static vp_status op_gather_grad(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                vp_error *err) {
    const vp_tensor *idx = in[1], *dy = in[2];
    vp_tensor *dx = out[0];
    if (!dx) return VP_OK;
    vp_status s = vp_cuda_need_float(n, dy, 2, err);
    if (s) return s;
    if (dx->dtype != dy->dtype) return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "dX's dtype is not dY's");
    if (idx->dtype != VP_I64 && idx->dtype != VP_I32) return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "indices are not int32/int64");
    int axis = norm_axis(vp_attr_int(n, "axis", 0), dx->rank);
    if (axis < 0 || axis >= dx->rank) return vp_node_fail(err, VP_ERR_INVALID, n, "axis out of range");
    int64_t outer = 1, inner = 1, dim = dx->dims[axis];
    for (int d = 0; d < axis; d++) outer *= dx->dims[d];
    for (int d = axis + 1; d < dx->rank; d++) inner *= dx->dims[d];
    if (dy->dtype == VP_F32)
        return LAUNCH(cu_gather_grad(outer, dim, vp_tensor_numel(idx), inner, idx->data, idx->dtype == VP_I64, dy->data,
                                     dx->data, c->stream));
    /* 16-bit: float32 sums in index order, a dX row per block in shared memory */
    if (dim * (int64_t)sizeof(float) > 48 * 1024)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "%s gradient of an axis of %lld: at most %d on CUDA (float32 has no "
                            "limit)", vp_dtype_name(dy->dtype), (long long)dim, 48 * 1024 / (int)sizeof(float));
    return LAUNCH(cu_gather_grad_lowp((int)dy->dtype, outer, dim, vp_tensor_numel(idx), inner, idx->data,
                                      idx->dtype == VP_I64, dy->data, dx->data, c->stream));
}

static vp_status op_shape(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                          vp_error *err) {
    int rank = in[0]->rank;
    int64_t start = vp_attr_int(n, "start", 0), end = vp_attr_int(n, "end", rank), v[VP_MAX_RANK];
    if (start < 0) start += rank;
    if (end < 0) end += rank;
    start = start < 0 ? 0 : start > rank ? rank : start;
    end = end < start ? start : end > rank ? rank : end;
    int k = 0;
    if (!strcmp(n->op_type, "Size")) v[k++] = vp_tensor_numel(in[0]);
    else
        for (int64_t a = start; a < end; a++) v[k++] = in[0]->dims[a];
    if ((size_t)k * sizeof(int64_t) != vp_tensor_nbytes(out[0])) return vp_node_fail(err, VP_ERR_RUNTIME, n, "output size");
    /* pageable host memory: the copy is staged before cudaMemcpyAsync returns */
    return LAUNCH(cudaMemcpyAsync(out[0]->data, v, (size_t)k * sizeof(int64_t), cudaMemcpyHostToDevice, c->stream));
}

/* --sp's all-gather and reduce-scatter of one rank: a copy (more ranks go through the
 * backend's communicator, cuda_backend.c). */
static vp_status op_tp_one_rank(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                vp_error *err) {
    if (vp_attr_int(n, "ranks", 1) != 1)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "a collective of %d ranks needs a communicator (mpirun)",
                            (int)vp_attr_int(n, "ranks", 1));
    return op_copy(c, n, in, out, err);
}

const cuda_op vp_cuda_ops_tensor[] = {
    {"Identity", "", op_copy},
    {"Reshape", "", op_copy}, {"Flatten", "", op_copy}, {"Squeeze", "", op_copy}, {"Unsqueeze", "", op_copy},
    {"Transpose", "", op_transpose}, {"Expand", "", op_expand}, {"Tile", "", op_tile}, {"Concat", "", op_concat}, {"Split", "", op_split},
    {"Slice", "", op_slice}, {"Pad", "", op_pad}, {"CumSum", "", op_cumsum}, {"Gather", "", op_gather}, {"Shape", "", op_shape}, {"Size", "", op_shape},
    {"GatherGrad", "com.microsoft", op_gather_grad},
    /* tensor-parallel: the one-rank case; with a communicator the backend all-reduces */
    {"TPCopy", "vplan", op_copy}, {"TPAllReduce", "vplan", op_copy},
    {"TPAllReduceMax", "vplan", op_copy}, {"TPAllGather", "vplan", op_tp_one_rank},
    {"TPReduceScatter", "vplan", op_tp_one_rank},
    {NULL, NULL, NULL},
};
