/* CUDA ops of windowed pooling: MaxPool (and its Indices), AveragePool, MaxPoolGrad,
 * vplan.MaxPoolInputGrad and AveragePoolGrad over 1-D and 2-D windows, in float32,
 * float16 and bfloat16 (cu_pool.cu).
 *
 * The window comes from vp_window_resolve, the CPU kernels' own reading of the
 * attributes (kernel_shape, strides, pads, dilations, auto_pad, ceil_mode), so both
 * backends pool over the same taps. */
#include <string.h>

#include "cu_kernels.h"
#include "cuda_internal.h"
#include "k_linalg.h"

/* The geometry of pooling an input of dims x_dims (N, C, spatial...). */
static vp_status pool_geom(const vp_node *n, vp_window_kind kind, int rank, const int64_t *x_dims, cu_pool_geom *g,
                           vp_error *err) {
    int sp = rank - 2;
    if (sp < 1 || sp > 2) return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "the CUDA backend pools 1-D and 2-D windows only");
    vp_window w;
    vp_status s = vp_window_resolve(n, kind, sp, x_dims + 2, NULL, &w, err);
    if (s) return s;
    int64_t v[6][2] = {{1, 1}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, {1, 1}}, pb[2] = {0, 0}, pe[2] = {0, 0};
    for (int d = 0; d < sp; d++) {
        int e = d + 2 - sp; /* 1-D pooling runs on the second axis */
        v[0][e] = w.in[d];
        v[1][e] = w.out[d];
        v[2][e] = w.kernel[d];
        v[3][e] = w.stride[d];
        v[4][e] = w.dilation[d];
        pb[e] = w.pad_begin[d];
        pe[e] = w.pad_end[d];
    }
    *g = (cu_pool_geom){.planes = x_dims[0] * x_dims[1], .h = v[0][0], .w = v[0][1], .oh = v[1][0], .ow = v[1][1],
                        .kh = v[2][0], .kw = v[2][1], .sh = v[3][0], .sw = v[3][1], .ph = pb[0], .pw = pb[1],
                        .dh = v[4][0], .dw = v[4][1], .count_include_pad = vp_attr_int(n, "count_include_pad", 0) != 0,
                        .peh = pe[0], .pew = pe[1]};
    return VP_OK;
}

static vp_status op_pool(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                         vp_error *err) {
    const vp_tensor *x = in[0];
    vp_tensor *idx = opt_out(n, out, 1);
    int avg = !strcmp(n->op_type, "AveragePool");
    cu_pool_geom g;
    vp_status s = vp_cuda_need_float(n, x, 0, err);
    if (!s) s = pool_geom(n, avg ? VP_WINDOW_AVGPOOL : VP_WINDOW_MAXPOOL, x->rank, x->dims, &g, err);
    if (s) return s;
    if (idx && idx->dtype != VP_I64) return vp_node_fail(err, VP_ERR_INVALID, n, "Indices must be int64");
    return LAUNCH(cu_pool2d(avg, (int)x->dtype, &g, x->data, out[0]->data, idx ? idx->data : NULL,
                            vp_attr_int(n, "storage_order", 0) != 0, c->stream));
}

/* MaxPoolGrad(dY, Indices), vplan.MaxPoolInputGrad(dY, X), AveragePoolGrad(dY) -> dX. */
static vp_status op_pool_grad(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                              vp_error *err) {
    vp_tensor *dx = out[0];
    if (!dx) return VP_OK;
    const vp_tensor *dy = in[0], *second = opt_in(n, in, 1);
    int kind = !strcmp(n->op_type, "MaxPoolGrad") ? 0 : !strcmp(n->op_type, "MaxPoolInputGrad") ? 1 : 2;
    vp_status s = vp_cuda_need_float(n, dy, 0, err);
    if (!s && kind < 2 && !second) s = vp_node_fail(err, VP_ERR_INVALID, n, "input 1 is missing");
    if (!s && kind == 0 && second->dtype != VP_I64) s = vp_node_fail(err, VP_ERR_INVALID, n, "Indices must be int64");
    if (!s && kind == 1 && second->dtype != dy->dtype) s = vp_node_fail(err, VP_ERR_INVALID, n, "X and dY differ in dtype");
    if (!s && dx->dtype != dy->dtype) s = vp_node_fail(err, VP_ERR_INVALID, n, "dX and dY differ in dtype");
    if (!s && kind == 0 && vp_attr_int(n, "storage_order", 0))
        s = vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "storage_order=1 Indices have no CUDA gradient kernel");
    cu_pool_geom g;
    if (!s) s = pool_geom(n, kind == 2 ? VP_WINDOW_AVGPOOL : VP_WINDOW_MAXPOOL, dx->rank, dx->dims, &g, err);
    if (s) return s;
    if (g.oh * g.ow * g.planes != vp_tensor_numel(dy))
        return vp_node_fail(err, VP_ERR_INVALID, n, "dY has %lld elements where the windows give %lld",
                            (long long)vp_tensor_numel(dy), (long long)(g.oh * g.ow * g.planes));
    return LAUNCH(cu_pool2d_grad(kind, (int)dy->dtype, &g, dy->data, kind == 0 ? second->data : NULL,
                                 kind == 1 ? second->data : NULL, dx->data, c->stream));
}

const cuda_op vp_cuda_ops_pool[] = {
    {"MaxPool", "", op_pool},
    {"AveragePool", "", op_pool},
    {"MaxPoolGrad", "", op_pool_grad},
    {"MaxPoolGrad", "com.microsoft", op_pool_grad},
    {"AveragePoolGrad", "", op_pool_grad},
    {"AveragePoolGrad", "com.microsoft", op_pool_grad},
    {"MaxPoolInputGrad", "vplan", op_pool_grad},
    {NULL, NULL, NULL},
};
