/* CUDA ops of the resample family: Resize and Upsample, ResizeGrad (float32),
 * ScatterND and ScatterElements (any dtype without reduction; float32 with one),
 * GatherND and GatherElements (any dtype), GatherNDGrad and GatherElementsGrad
 * (float32).  The host resolves Resize's plan with the CPU reference's
 * resolver (runtime/cpu/k_resample.h) from host copies of roi, scales and sizes, so
 * both backends sample the same positions; kernels in cu_resample.cu and cu_scatter.cu. */
#include <string.h>

#include "cu_kernels.h"
#include "cuda_internal.h"
#include "k_resample.h"

/* Host copies of the small inputs the plan reads (roi, scales, sizes): the graph's
 * constant data when there is some, else read back from the device. */
typedef struct host_inputs {
    vp_tensor t[4];
    const vp_tensor *in[4];
    double buf[4][2 * VP_MAX_RANK];
} host_inputs;

static vp_status read_small(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, int first, host_inputs *h,
                            vp_error *err) {
    int k = n->n_inputs < 4 ? n->n_inputs : 4;
    for (int i = 0; i < k; i++) {
        h->in[i] = in[i];
        if (i < first || !in[i]) continue;
        h->t[i] = *in[i];
        size_t bytes = vp_tensor_nbytes(in[i]);
        if (bytes > sizeof h->buf[i])
            return vp_node_fail(err, VP_ERR_INVALID, n, "input %d has %lld entries", i, (long long)vp_tensor_numel(in[i]));
        const vp_value *v = c->g && n >= c->g->nodes && n < c->g->nodes + c->g->n_nodes && n->inputs[i] >= 0
                                ? &c->g->values[n->inputs[i]]
                                : NULL;
        if (v && v->data && !(v->flags & (VP_VAL_PARAM | VP_VAL_STATE | VP_VAL_INPUT))) memcpy(h->buf[i], v->data, bytes);
        else if (bytes) {
            vp_status s = LAUNCH(cudaMemcpyAsync(h->buf[i], in[i]->data, bytes, cudaMemcpyDeviceToHost, c->stream));
            if (!s) s = LAUNCH(cudaStreamSynchronize(c->stream));
            if (s) return s;
        }
        h->t[i].data = h->buf[i];
        h->in[i] = &h->t[i];
    }
    return VP_OK;
}

static vp_status plan_of(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, int first, cu_resize_plan *cp,
                         vp_error *err) {
    host_inputs h;
    memset(&h, 0, sizeof h);
    vp_resize_plan p;
    vp_status s = read_small(c, n, in, first, &h, err);
    if (!s) s = vp_resize_resolve(n, h.in, n->n_inputs < 4 ? n->n_inputs : 4, &p, err);
    if (s) return s;
    memset(cp, 0, sizeof *cp);
    cp->rank = p.rank;
    cp->linear = p.mode == VP_RESIZE_LINEAR;
    cp->coord = (int)p.coord;
    cp->round = (int)p.round;
    cp->extrapolation = p.extrapolation;
    for (int a = 0; a < p.rank; a++) {
        cp->in[a] = p.in[a];
        cp->out[a] = p.out[a];
        cp->scale[a] = p.scale[a];
        cp->length[a] = p.length[a];
        cp->roi_start[a] = p.roi_start[a];
        cp->roi_end[a] = p.roi_end[a];
    }
    return VP_OK;
}

static vp_status op_resize(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                           vp_error *err) {
    cu_resize_plan p;
    vp_status s = vp_cuda_need_f32(n, in[0], 0, err);
    if (!s) s = plan_of(c, n, in, 1, &p, err);
    return s ? s : LAUNCH(cu_resize(&p, fptr(in[0]), fptr(out[0]), c->stream));
}

static vp_status op_resize_grad(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                vp_error *err) {
    if (!out[0]) return VP_OK;
    cu_resize_plan p;
    vp_status s = vp_cuda_need_f32(n, in[0], 0, err);
    if (!s) s = plan_of(c, n, in, 2, &p, err);
    return s ? s : LAUNCH(cu_resize_grad(&p, fptr(in[0]), fptr(out[0]), c->stream));
}

/* The rows of idx into dims after b batch axes. */
static vp_status geometry(const vp_node *n, int rank, const int64_t *dims, const vp_tensor *idx, int b, cu_nd_geom *g,
                          int64_t *batches, vp_error *err) {
    if (idx->dtype != VP_I64 && idx->dtype != VP_I32)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "indices are not int32/int64");
    memset(g, 0, sizeof *g);
    g->k = (int)idx->dims[idx->rank - 1];
    *batches = 1;
    g->rows = g->slice = g->block = 1;
    for (int a = 0; a < b; a++) *batches *= dims[a];
    for (int a = b; a < idx->rank - 1; a++) g->rows *= idx->dims[a];
    for (int a = b + g->k; a < rank; a++) g->slice *= dims[a];
    for (int a = b; a < rank; a++) g->block *= dims[a];
    int64_t st[VP_MAX_RANK];
    contiguous_strides(rank - b, dims + b, st);
    for (int t = 0; t < g->k; t++) {
        g->dims[t] = dims[b + t];
        g->strides[t] = st[t];
    }
    return VP_OK;
}

static vp_status op_scatter_nd(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                               vp_error *err) {
    const vp_tensor *x = in[0], *idx = in[1];
    const char *r = vp_attr_string(n, "reduction", "none");
    int op = !strcmp(r, "add") ? 1 : !strcmp(r, "mul") ? 2 : !strcmp(r, "max") ? 3 : !strcmp(r, "min") ? 4 : 0;
    cu_nd_geom g;
    int64_t batches;
    vp_status s = op ? vp_cuda_need_f32(n, x, 0, err) : VP_OK;
    if (!s) s = geometry(n, x->rank, x->dims, idx, 0, &g, &batches, err);
    if (!s) s = vp_cuda_copy_d2d(c, n, out[0]->data, x->data, vp_tensor_nbytes(x), err);
    return s ? s
             : LAUNCH(cu_scatter_nd((int)vp_dtype_size(x->dtype), &g, g.rows, idx->data, idx->dtype == VP_I64,
                                    in[2]->data, out[0]->data, op, c->stream));
}

static vp_status op_gather_nd(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                              vp_error *err) {
    const vp_tensor *x = in[0], *idx = in[1];
    cu_nd_geom g;
    int64_t batches;
    vp_status s = geometry(n, x->rank, x->dims, idx, (int)vp_attr_int(n, "batch_dims", 0), &g, &batches, err);
    return s ? s
             : LAUNCH(cu_gather_nd((int)vp_dtype_size(x->dtype), &g, batches, idx->data, idx->dtype == VP_I64, x->data,
                                   out[0]->data, c->stream));
}

static vp_status op_gather_nd_grad(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                   vp_error *err) {
    vp_tensor *dx = out[0];
    if (!dx) return VP_OK;
    cu_nd_geom g;
    int64_t batches;
    vp_status s = vp_cuda_need_f32(n, in[2], 2, err);
    if (!s) s = geometry(n, dx->rank, dx->dims, in[1], (int)vp_attr_int(n, "batch_dims", 0), &g, &batches, err);
    return s ? s
             : LAUNCH(cu_gather_nd_grad(&g, batches, in[1]->data, in[1]->dtype == VP_I64, fptr(in[2]), fptr(dx),
                                        c->stream));
}

/* The element geometry of indices idx over data of (rank, dims) along the node's axis. */
static vp_status element_geometry(const vp_node *n, int rank, const int64_t *dims, const vp_tensor *idx, cu_el_geom *g,
                                  vp_error *err) {
    if (idx->dtype != VP_I64 && idx->dtype != VP_I32)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "indices are not int32/int64");
    if (rank > CU_MAX_RANK || idx->rank != rank)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "data and indices of rank %d and %d (at most %d, equal)", rank,
                            idx->rank, CU_MAX_RANK);
    int axis = norm_axis(vp_attr_int(n, "axis", 0), rank);
    if (axis < 0 || axis >= rank) return vp_node_fail(err, VP_ERR_INVALID, n, "axis out of range");
    g->rank = rank;
    g->axis = axis;
    g->dim = dims[axis];
    contiguous_strides(rank, dims, g->strides);
    for (int a = 0; a < rank; a++) g->idx_dims[a] = idx->dims[a];
    return VP_OK;
}

static vp_status op_gather_elements(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                    vp_error *err) {
    const vp_tensor *x = in[0], *idx = in[1];
    cu_el_geom g;
    vp_status s = element_geometry(n, x->rank, x->dims, idx, &g, err);
    return s ? s
             : LAUNCH(cu_gather_elements((int)vp_dtype_size(x->dtype), &g, idx->data, idx->dtype == VP_I64, x->data,
                                         out[0]->data, c->stream));
}

static vp_status op_scatter_elements(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                     vp_error *err) {
    const vp_tensor *x = in[0], *idx = in[1];
    const char *r = vp_attr_string(n, "reduction", "none");
    int op = !strcmp(r, "add") ? 1 : !strcmp(r, "mul") ? 2 : !strcmp(r, "max") ? 3 : !strcmp(r, "min") ? 4 : 0;
    cu_el_geom g;
    vp_status s = op ? vp_cuda_need_f32(n, x, 0, err) : VP_OK;
    if (!s) s = element_geometry(n, x->rank, x->dims, idx, &g, err);
    if (!s && out[0]->data != x->data) s = vp_cuda_copy_d2d(c, n, out[0]->data, x->data, vp_tensor_nbytes(x), err);
    return s ? s
             : LAUNCH(cu_scatter_elements((int)vp_dtype_size(x->dtype), &g, idx->data, idx->dtype == VP_I64,
                                          in[2]->data, out[0]->data, op, c->stream));
}

static vp_status op_gather_elements_grad(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in,
                                         vp_tensor *const *out, vp_error *err) {
    vp_tensor *dx = out[0];
    if (!dx) return VP_OK;
    cu_el_geom g;
    vp_status s = vp_cuda_need_f32(n, in[0], 0, err);
    if (!s) s = element_geometry(n, dx->rank, dx->dims, in[2], &g, err);
    return s ? s
             : LAUNCH(cu_gather_elements_grad(&g, vp_tensor_numel(dx), in[2]->data, in[2]->dtype == VP_I64, fptr(in[0]),
                                              fptr(dx), c->stream));
}

const cuda_op vp_cuda_ops_resample[] = {
    {"Resize", "", op_resize},
    {"Upsample", "", op_resize},
    {"ScatterND", "", op_scatter_nd},
    {"GatherND", "", op_gather_nd},
    {"GatherElements", "", op_gather_elements},
    {"ScatterElements", "", op_scatter_elements},
    {"ResizeGrad", "com.microsoft", op_resize_grad},
    {"GatherNDGrad", "com.microsoft", op_gather_nd_grad},
    {"GatherElementsGrad", "com.microsoft", op_gather_elements_grad},
    {NULL, NULL, NULL},
};
