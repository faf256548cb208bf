/* CUDA ops that move data without arithmetic: copies (Identity, Reshape and the other
 * views), Transpose, Expand, Concat, Split, Slice, Gather and its
 * gradient, Shape and Size.  Most are one strided n-d copy (cu_copy_nd). */
#include <string.h>

#include "cu_kernels.h"
#include "cuda_internal.h"

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
    vp_status s = vp_cuda_need_f32(n, dy, 2, err);
    if (s) return s;
    if (idx->dtype != VP_I64 && idx->dtype != VP_I32) return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "indices are not int32/int64");
    int axis = norm_axis(vp_attr_int(n, "axis", 0), dx->rank);
    if (axis < 0 || axis >= dx->rank) return vp_node_fail(err, VP_ERR_INVALID, n, "axis out of range");
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; d++) outer *= dx->dims[d];
    for (int d = axis + 1; d < dx->rank; d++) inner *= dx->dims[d];
    return LAUNCH(cu_gather_grad(outer, dx->dims[axis], vp_tensor_numel(idx), inner, idx->data, idx->dtype == VP_I64,
                                 dy->data, dx->data, c->stream));
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
    {"Transpose", "", op_transpose}, {"Expand", "", op_expand}, {"Concat", "", op_concat}, {"Split", "", op_split},
    {"Slice", "", op_slice}, {"Gather", "", op_gather}, {"Shape", "", op_shape}, {"Size", "", op_shape},
    {"GatherGrad", "com.microsoft", op_gather_grad},
    /* tensor-parallel: the one-rank case; with a communicator the backend all-reduces */
    {"TPCopy", "vplan", op_copy}, {"TPAllReduce", "vplan", op_copy},
    {"TPAllReduceMax", "vplan", op_copy}, {"TPAllGather", "vplan", op_tp_one_rank},
    {"TPReduceScatter", "vplan", op_tp_one_rank},
    {NULL, NULL, NULL},
};
