/* CUDA ops that reduce over rows or channels: LayerNormalization and
 * BatchNormalization with their gradients, InstanceNormalization, the Reduce* ops, Softmax and LogSoftmax
 * with their gradients, and SoftmaxCrossEntropyLoss with its gradient (cu_reduce.cu).
 * The losses use the backend's scratch scalars for their sums. */
#include <string.h>

#include "cu_kernels.h"
#include "cuda_internal.h"
#include "k_train.h"

/* ---- normalisation ---- */

/* LayerNormalization, and com.microsoft.SimplifiedLayerNormalization (RMSNorm: no bias,
 * its output 1 the inverse RMS). */
static vp_status op_layernorm(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                              vp_error *err) {
    int rms = !strcmp(n->op_type, "SimplifiedLayerNormalization");
    const vp_tensor *x = in[0], *scale = in[1], *bias = rms ? NULL : opt_in(n, in, 2);
    vp_status s = vp_cuda_need_f32(n, x, 0, err);
    if (!s) s = vp_cuda_need_f32(n, scale, 1, err);
    if (!s && bias) s = vp_cuda_need_f32(n, bias, 2, err);
    if (s) return s;
    int axis = norm_axis(vp_attr_int(n, "axis", -1), x->rank);
    int64_t len = 1;
    for (int d = axis; d < x->rank; d++) len *= x->dims[d];
    if (vp_tensor_numel(scale) != len || (bias && vp_tensor_numel(bias) != len))
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "scale and bias must cover the normalised shape");
    int64_t rows = len ? vp_tensor_numel(x) / len : 0;
    /* Y float32, or rounded on store to the dtype a fused Cast gave it */
    vp_dtype yt = out[0]->dtype, from = VP_F32;
    if (yt != VP_F32 && (!vp_node_cast_output(n, 0, &from, NULL) || from != VP_F32 || (yt != VP_F16 && yt != VP_BF16)))
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "output 0 is %s", vp_dtype_name(yt));
    float *mean = rms ? NULL : fptr(opt_out(n, out, 1)), *inv = fptr(opt_out(n, out, rms ? 1 : 2));
    return LAUNCH(cu_layernorm(rows, len, vp_attr_float(n, "epsilon", 1e-5f), rms, x->data, scale->data, fptr(bias),
                               (int)yt, out[0]->data, mean, inv, c->stream));
}

static vp_status op_layernorm_grad(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                   vp_error *err) {
    int rms = !strcmp(n->op_type, "SimplifiedLayerNormalizationGrad"); /* (dY, X, scale, inv_std_var) */
    const vp_tensor *dy = in[0], *x = in[1], *scale = in[2], *mean = rms ? NULL : in[3], *inv = in[rms ? 3 : 4];
    vp_status s = vp_cuda_need_f32(n, dy, 0, err);
    for (int k = 1; k < 5 - rms && !s; k++) s = vp_cuda_need_f32(n, in[k], k, err);
    if (s) return s;
    int64_t len = vp_tensor_numel(scale), rows = len ? vp_tensor_numel(x) / len : 0;
    return LAUNCH(cu_layernorm_grad(rows, len, dy->data, x->data, scale->data, mean ? mean->data : NULL, inv->data,
                                    fptr(opt_out(n, out, 0)), fptr(opt_out(n, out, 1)),
                                    rms ? NULL : fptr(opt_out(n, out, 2)), c->stream));
}

static vp_status op_batchnorm(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                              vp_error *err) {
    const vp_tensor *x = in[0];
    vp_status s = vp_cuda_need_float(n, x, 0, err);
    for (int k = 1; k < 5 && !s; k++) s = vp_cuda_need_f32(n, in[k], k, err);
    if (!s && out[0] && out[0]->dtype != x->dtype) s = vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "Y's dtype is not X's");
    if (s) return s;
    int internal = !strcmp(n->op_type, "BatchNormInternal");
    int training = internal ? vp_attr_int(n, "training_mode", 1) != 0 : vp_attr_int(n, "training_mode", 0) != 0;
    if (!internal && (training || n->n_outputs > 1))
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "BatchNormalization in training mode: use BatchNormInternal");
    if (vp_attr_int(n, "spatial", 1) == 0) return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "spatial=0");
    int64_t plane = 1;
    for (int d = 2; d < x->rank; d++) plane *= x->dims[d];
    if (training && x->dims[0] * plane < 2)
        return vp_node_fail(err, VP_ERR_RUNTIME, n, "training needs more than one value per channel");
    double eps = vp_train_attr_double(n, "epsilon", 1e-5), momentum = vp_train_attr_double(n, "momentum", 0.9);
    return LAUNCH(cu_batchnorm((int)x->dtype, x->dims[0], x->rank > 1 ? x->dims[1] : 1, plane, training, eps, momentum,
                               x->data, fptr(in[1]), fptr(in[2]), fptr(in[3]), fptr(in[4]), out[0] ? out[0]->data : NULL,
                               fptr(opt_out(n, out, 1)), fptr(opt_out(n, out, 2)), fptr(opt_out(n, out, 3)),
                               fptr(opt_out(n, out, 4)), c->stream));
}

static vp_status op_instancenorm(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                  vp_error *err) {
    const vp_tensor *x = in[0];
    vp_status s = vp_cuda_need_float(n, x, 0, err);
    for (int k = 1; k < 3 && !s; k++) s = vp_cuda_need_f32(n, in[k], k, err);
    if (!s && out[0]->dtype != x->dtype) s = vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "Y's dtype is not X's");
    if (s) return s;
    int64_t plane = 1;
    for (int d = 2; d < x->rank; d++) plane *= x->dims[d];
    return LAUNCH(cu_instancenorm((int)x->dtype, x->dims[0], x->dims[1], plane, vp_train_attr_double(n, "epsilon", 1e-5),
                                  x->data, fptr(in[1]), fptr(in[2]), out[0]->data, c->stream));
}

static vp_status op_batchnorm_grad(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                   vp_error *err) {
    const vp_tensor *x = in[1];
    vp_tensor *dx = opt_out(n, out, 0);
    vp_status s = vp_cuda_need_float(n, in[0], 0, err);
    if (!s) s = vp_cuda_need_float(n, x, 1, err);
    for (int k = 2; k < 5 && !s; k++) s = vp_cuda_need_f32(n, in[k], k, err);
    if (!s && (in[0]->dtype != x->dtype || (dx && dx->dtype != x->dtype)))
        s = vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "dY, X and dX of different dtypes");
    if (s) return s;
    int64_t plane = 1;
    for (int d = 2; d < x->rank; d++) plane *= x->dims[d];
    return LAUNCH(cu_batchnorm_grad((int)x->dtype, x->dims[0], x->rank > 1 ? x->dims[1] : 1, plane, in[0]->data, x->data,
                                    fptr(in[2]), fptr(in[3]), fptr(in[4]), dx ? dx->data : NULL,
                                    fptr(opt_out(n, out, 1)), fptr(opt_out(n, out, 2)), c->stream));
}

/* ---- reductions, softmax, losses ---- */

static int reduce_op_of(const char *op) {
    static const struct {
        const char *name;
        int op;
    } t[] = {{"ReduceSum", CU_RSUM},       {"ReduceMean", CU_RMEAN},     {"ReduceMax", CU_RMAX},
             {"ReduceMin", CU_RMIN},       {"ReduceProd", CU_RPROD},     {"ReduceSumSquare", CU_RSUMSQ},
             {"ReduceL1", CU_RL1},         {"ReduceL2", CU_RL2},         {"ReduceLogSumExp", CU_RLOGSUMEXP},
             {"ReduceLogSum", CU_RLOGSUM}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!strcmp(t[i].name, op)) return t[i].op;
    return -1;
}

static vp_status op_reduce(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                           vp_error *err) {
    const vp_tensor *x = in[0];
    if (x->dtype != VP_F32 && x->dtype != VP_F64 && x->dtype != VP_F16 && x->dtype != VP_BF16)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "no CUDA kernel for %s on %s", n->op_type, vp_dtype_name(x->dtype));
    int64_t axes[VP_MAX_RANK];
    int na = 0;
    vp_status s = VP_OK;
    if (opt_in(n, in, 1)) {
        s = vp_cuda_read_ints(c, n, in[1], 1, axes, VP_MAX_RANK, &na, err);
    } else {
        const int64_t *p;
        int k = vp_attr_ints(n, "axes", &p);
        if (k > VP_MAX_RANK) return vp_node_fail(err, VP_ERR_INVALID, n, "too many axes");
        for (int i = 0; i < k; i++) axes[i] = p[i];
        na = k < 0 ? 0 : k;
    }
    if (s) return s;
    unsigned mask = 0;
    if (!na) {
        if (vp_attr_int(n, "noop_with_empty_axes", 0)) return vp_cuda_copy_d2d(c, n, out[0]->data, x->data, vp_tensor_nbytes(x), err);
        mask = (1u << x->rank) - 1;
    }
    for (int i = 0; i < na; i++) {
        int a = norm_axis(axes[i], x->rank);
        if (a < 0 || a >= x->rank) return vp_node_fail(err, VP_ERR_INVALID, n, "axis %lld out of range", (long long)axes[i]);
        mask |= 1u << a;
    }
    cu_reduce_geom g;
    memset(&g, 0, sizeof g);
    int64_t xs[VP_MAX_RANK];
    contiguous_strides(x->rank, x->dims, xs);
    g.n_out = g.n_red = 1;
    for (int d = 0; d < x->rank; d++) {
        if (mask >> d & 1) {
            g.rdims[g.nr] = x->dims[d];
            g.rs[g.nr++] = xs[d];
            g.n_red *= x->dims[d];
        } else {
            g.kdims[g.nk] = x->dims[d];
            g.ks[g.nk++] = xs[d];
            g.n_out *= x->dims[d];
        }
    }
    return LAUNCH(cu_reduce((int)x->dtype, reduce_op_of(n->op_type), &g, x->data, out[0]->data, c->stream));
}

/* Rows of a softmax: opset 13 forms over one axis, older over the flattened tail. */
static vp_status softmax_rows(const vp_node *n, const vp_tensor *t, int legacy, int64_t *outer, int64_t *len,
                              int64_t *inner, vp_error *err) {
    int64_t axis = vp_attr_int(n, "axis", legacy ? 1 : -1);
    if (axis < -t->rank || axis >= t->rank) return vp_node_fail(err, VP_ERR_INVALID, n, "axis out of range");
    int a = norm_axis(axis, t->rank);
    *outer = *len = *inner = 1;
    for (int d = 0; d < t->rank; d++) {
        if (d < a) *outer *= t->dims[d];
        else if (d == a || legacy) *len *= t->dims[d];
        else *inner *= t->dims[d];
    }
    return VP_OK;
}

static vp_status op_softmax(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                            vp_error *err) {
    int64_t outer = 0, len = 0, inner = 0;
    vp_status s = vp_cuda_need_f32(n, in[0], 0, err);
    if (!s) s = softmax_rows(n, in[0], n->opset < 13, &outer, &len, &inner, err);
    if (s) return s;
    return LAUNCH(cu_softmax(!strcmp(n->op_type, "LogSoftmax"), outer, len, inner, in[0]->data, out[0]->data, c->stream));
}

static vp_status op_softmax_grad(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                 vp_error *err) {
    if (!out[0]) return VP_OK;
    size_t len_name = strlen(n->op_type);
    int is13 = len_name > 3 && !strcmp(n->op_type + len_name - 3, "_13");
    int64_t outer = 0, len = 0, inner = 0;
    vp_status s = vp_cuda_need_f32(n, in[0], 0, err);
    if (!s) s = vp_cuda_need_f32(n, in[1], 1, err);
    if (!s) s = softmax_rows(n, in[1], !is13, &outer, &len, &inner, err);
    if (s) return s;
    int log_kind = !strncmp(n->op_type, "LogSoftmax", 10);
    return LAUNCH(cu_softmax_grad(log_kind, outer, len, inner, in[0]->data, in[1]->data, out[0]->data, c->stream));
}

static int reduction_of(const vp_node *n) {
    const char *r = vp_attr_string(n, "reduction", "mean");
    return !strcmp(r, "none") ? 0 : !strcmp(r, "sum") ? 1 : 2;
}

static vp_status op_sce_loss(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                             vp_error *err) {
    const vp_tensor *x = in[0], *labels = in[1], *w = opt_in(n, in, 2);
    vp_status s = vp_cuda_need_f32(n, x, 0, err);
    if (!s && w) s = vp_cuda_need_f32(n, w, 2, err);
    if (s) return s;
    if (labels->dtype != VP_I64 && labels->dtype != VP_I32) return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "labels are not int32/int64");
    int64_t spatial = 1;
    for (int d = 2; d < x->rank; d++) spatial *= x->dims[d];
    return LAUNCH(cu_sce_loss(x->dims[0], x->dims[1], spatial, x->data, labels->data, labels->dtype == VP_I64, fptr(w),
                              vp_node_attr(n, "ignore_index") != NULL, vp_attr_int(n, "ignore_index", 0), reduction_of(n),
                              fptr(out[0]), fptr(opt_out(n, out, 1)), c->scratch, c->stream));
}

static vp_status op_sce_loss_grad(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                  vp_error *err) {
    if (!out[0]) return VP_OK;
    const vp_tensor *dy = in[0], *lp = in[1], *labels = in[2], *w = opt_in(n, in, 3), *bias = opt_in(n, in, 4);
    vp_status s = vp_cuda_need_f32(n, dy, 0, err);
    if (!s) s = vp_cuda_need_f32(n, lp, 1, err);
    if (!s && w) s = vp_cuda_need_f32(n, w, 3, err);
    if (!s && bias) s = vp_cuda_need_f32(n, bias, 4, err);
    if (s) return s;
    if (labels->dtype != VP_I64 && labels->dtype != VP_I32) return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "labels are not int32/int64");
    int64_t spatial = 1;
    for (int d = 2; d < lp->rank; d++) spatial *= lp->dims[d];
    return LAUNCH(cu_sce_loss_grad(lp->dims[0], lp->dims[1], spatial, dy->data, lp->data, labels->data,
                                   labels->dtype == VP_I64, fptr(w), vp_attr_int(n, "ignore_index", -1), reduction_of(n),
                                   fptr(bias), out[0]->data, c->scratch, c->stream));
}

const cuda_op vp_cuda_ops_reduce[] = {
    {"BatchNormalization", "", op_batchnorm}, {"InstanceNormalization", "", op_instancenorm},
    {"LayerNormalization", "", op_layernorm},
    {"ReduceSum", "", op_reduce}, {"ReduceMean", "", op_reduce}, {"ReduceMax", "", op_reduce},
    {"ReduceMin", "", op_reduce}, {"ReduceProd", "", op_reduce}, {"ReduceSumSquare", "", op_reduce},
    {"ReduceL1", "", op_reduce}, {"ReduceL2", "", op_reduce}, {"ReduceLogSumExp", "", op_reduce},
    {"ReduceLogSum", "", op_reduce}, {"Softmax", "", op_softmax}, {"LogSoftmax", "", op_softmax},
    {"SoftmaxCrossEntropyLoss", "", op_sce_loss},
    /* gradients (com.microsoft) */
    {"SoftmaxGrad", "com.microsoft", op_softmax_grad}, {"SoftmaxGrad_13", "com.microsoft", op_softmax_grad},
    {"LogSoftmaxGrad", "com.microsoft", op_softmax_grad}, {"LogSoftmaxGrad_13", "com.microsoft", op_softmax_grad},
    {"LayerNormalizationGrad", "com.microsoft", op_layernorm_grad},
    {"SimplifiedLayerNormalization", "com.microsoft", op_layernorm},
    {"SimplifiedLayerNormalizationGrad", "com.microsoft", op_layernorm_grad},
    {"BatchNormInternal", "com.microsoft", op_batchnorm},
    {"BatchNormalizationGrad", "com.microsoft", op_batchnorm_grad},
    {"SoftmaxCrossEntropyLossGrad", "com.microsoft", op_sce_loss_grad},
    {NULL, NULL, NULL},
};
