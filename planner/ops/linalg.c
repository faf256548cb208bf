/* The linalg family: MatMul, Gemm, Conv, ConvTranspose, pooling, normalisation, LRN.
 *
 * Shape functions validate arity, dtypes and attributes and set the outputs; window
 * ops derive output extents and pads through vp_window_resolve() (op_semantics.h), the
 * same function the CPU kernels call, so planner and kernels cannot disagree.  Kernels
 * live in runtime/cpu/k_linalg.c, k_conv.c, k_pool.c and k_norm.c. */
#include <string.h>

#include "ir/op_registry.h"
#include "ops/grad_rules.h"
#include "ops/op_semantics.h"

static const vp_dtype matmul_types[] = {VP_F32, VP_F64, VP_F16, VP_BF16, VP_I32, VP_I64};
static const vp_dtype maxpool_types[] = {VP_F32, VP_F64, VP_F16, VP_BF16, VP_I8, VP_U8};

static vp_status check_float(const vp_node *n, int i, const vp_value *v, vp_error *err) {
    return vp_shape_check_dtype(n, i, v->dtype, vp_float_types, 4, err);
}

static vp_status check_same_dtype(const vp_node *n, int i, const vp_value *v, const vp_value *ref, vp_error *err) {
    if (v->dtype == ref->dtype) return VP_OK;
    return vp_node_fail(err, VP_ERR_INVALID, n, "input %d is %s, expected %s like input 0", i, vp_dtype_name(v->dtype),
                        vp_dtype_name(ref->dtype));
}

static vp_status check_rank_at_least(const vp_node *n, int i, const vp_value *v, int rank, vp_error *err) {
    if (v->rank >= rank) return VP_OK;
    return vp_node_fail(err, VP_ERR_INVALID, n, "input %d has rank %d, expected at least %d", i, v->rank, rank);
}

/* A per-channel vector input: float, shape [c]. */
static vp_status check_channel_vector(const vp_node *n, int i, const vp_value *v, int64_t c, vp_error *err) {
    vp_status s = check_float(n, i, v, err);
    if (s) return s;
    if (v->rank != 1 || v->dims[0] != c)
        return vp_node_fail(err, VP_ERR_INVALID, n, "input %d must have shape [%lld]", i, (long long)c);
    return VP_OK;
}

/* p broadcasts unidirectionally (numpy) to the shape dims[0..rank). */
static vp_status check_broadcasts_to(const vp_node *n, int i, const vp_value *p, int rank, const int64_t *dims,
                                     vp_error *err) {
    int ok = p->rank <= rank;
    for (int d = 0; ok && d < p->rank; d++) {
        int64_t pd = p->dims[p->rank - 1 - d], td = dims[rank - 1 - d];
        ok = pd == 1 || pd == td;
    }
    if (ok) return VP_OK;
    char s1[128], s2[128];
    return vp_node_fail(err, VP_ERR_INVALID, n, "input %d of shape %s does not broadcast to %s", i,
                        vp_shape_str(p->rank, p->dims, s1, sizeof s1), vp_shape_str(rank, dims, s2, sizeof s2));
}

/* ---- MatMul, Gemm ---- */

/* MatMul, and com.microsoft.FusedMatMul (alpha transA(A) transB(B); the transposes
 * swap the last two axes of an operand of rank 2 or more), which gradient rules emit
 * so that a product with a transposed operand needs no Transpose. */
static vp_status shape_matmul(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 2, 2, 1, 1, err);
    if (s) return s;
    vp_value *a = vp_shape_in(g, n, 0), *b = vp_shape_in(g, n, 1);
    int fused = !strcmp(n->domain, "com.microsoft");
    int ta = fused && vp_attr_int(n, "transA", 0), tb = fused && vp_attr_int(n, "transB", 0);
    if (fused && (vp_attr_int(n, "transBatchA", 0) || vp_attr_int(n, "transBatchB", 0)))
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "transBatchA and transBatchB are not implemented");
    if ((s = vp_shape_check_dtype(n, 0, a->dtype, matmul_types, fused ? 4 : 6, err))) return s;
    if ((s = check_same_dtype(n, 1, b, a, err))) return s;
    if ((s = check_rank_at_least(n, 0, a, ta ? 2 : 1, err)) || (s = check_rank_at_least(n, 1, b, tb ? 2 : 1, err)))
        return s;
    int64_t ka = a->dims[a->rank - (ta ? 2 : 1)], kb = b->rank == 1 ? b->dims[0] : b->dims[b->rank - (tb ? 1 : 2)];
    if (ka != kb) {
        char s1[128], s2[128];
        return vp_node_fail(err, VP_ERR_INVALID, n, "cannot multiply shapes %s and %s",
                            vp_shape_str(a->rank, a->dims, s1, sizeof s1),
                            vp_shape_str(b->rank, b->dims, s2, sizeof s2));
    }
    int64_t dims[VP_MAX_RANK + 2];
    int rank;
    int ra = a->rank > 2 ? a->rank - 2 : 0, rb = b->rank > 2 ? b->rank - 2 : 0;
    if ((s = vp_shape_broadcast(n, ra, a->dims, rb, b->dims, &rank, dims, err))) return s;
    if (a->rank > 1) dims[rank++] = a->dims[a->rank - (ta ? 1 : 2)];
    if (b->rank > 1) dims[rank++] = b->dims[b->rank - (tb ? 2 : 1)];
    return vp_shape_set_output(g, n, 0, a->dtype, rank, dims, err);
}

static vp_status shape_gemm(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, n->opset < 11 ? 3 : 2, 3, 1, 1, err);
    if (s) return s;
    vp_value *a = vp_shape_in(g, n, 0), *b = vp_shape_in(g, n, 1), *c = vp_shape_in(g, n, 2);
    if ((s = check_float(n, 0, a, err)) || (s = check_same_dtype(n, 1, b, a, err))) return s;
    if (a->rank != 2 || b->rank != 2)
        return vp_node_fail(err, VP_ERR_INVALID, n, "A and B must be matrices (ranks %d and %d)", a->rank, b->rank);
    int ta = vp_attr_int(n, "transA", 0) != 0, tb = vp_attr_int(n, "transB", 0) != 0;
    int64_t m = a->dims[ta ? 1 : 0], k = a->dims[ta ? 0 : 1], kb = b->dims[tb ? 1 : 0], nn = b->dims[tb ? 0 : 1];
    if (k != kb)
        return vp_node_fail(err, VP_ERR_INVALID, n, "inner dimensions differ: %lld and %lld", (long long)k,
                            (long long)kb);
    int64_t dims[2] = {m, nn};
    if (c) {
        if ((s = check_same_dtype(n, 2, c, a, err)) || (s = check_broadcasts_to(n, 2, c, 2, dims, err))) return s;
        /* before opset 7, C broadcasts only when the broadcast attribute says so */
        int exact = c->rank == 2 && c->dims[0] == m && c->dims[1] == nn;
        if (n->opset < 7 && !vp_attr_int(n, "broadcast", 0) && !exact)
            return vp_node_fail(err, VP_ERR_INVALID, n, "C must be [M, N] unless broadcast=1 (opset %d)", n->opset);
    }
    return vp_shape_set_output(g, n, 0, a->dtype, 2, dims, err);
}

/* ---- Conv, ConvTranspose ---- */

/* Checks X [N, C, D...], W and the optional bias [M] of Conv (W [M, C/group, k...]) and
 * ConvTranspose (W [C, M/group, k...]); *m_out gets M, the output channels. */
static vp_status check_conv_inputs(vp_graph *g, vp_node *n, int64_t *m_out, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 2, 3, 1, 1, err);
    if (s) return s;
    vp_value *x = vp_shape_in(g, n, 0), *w = vp_shape_in(g, n, 1), *b = vp_shape_in(g, n, 2);
    if ((s = check_float(n, 0, x, err)) || (s = check_same_dtype(n, 1, w, x, err))) return s;
    if ((s = check_rank_at_least(n, 0, x, 3, err))) return s;
    if (w->rank != x->rank)
        return vp_node_fail(err, VP_ERR_INVALID, n, "weight rank %d differs from input rank %d", w->rank, x->rank);
    int64_t group = vp_attr_int(n, "group", 1), c = x->dims[1];
    if (group < 1 || c % group)
        return vp_node_fail(err, VP_ERR_INVALID, n, "group %lld does not divide the %lld input channels",
                            (long long)group, (long long)c);
    int transpose = !strcmp(n->op_type, "ConvTranspose");
    int64_t m = transpose ? w->dims[1] * group : w->dims[0];
    int64_t w_in = transpose ? w->dims[0] : w->dims[1] * group;
    if (w_in != c || (!transpose && m % group))
        return vp_node_fail(err, VP_ERR_INVALID, n, "weight shape does not fit %lld input channels in %lld groups",
                            (long long)c, (long long)group);
    if (b && ((s = check_same_dtype(n, 2, b, x, err)) || (s = check_channel_vector(n, 2, b, m, err)))) return s;
    *m_out = m;
    return VP_OK;
}

static vp_status shape_conv_common(vp_graph *g, vp_node *n, vp_window_kind kind, vp_error *err) {
    int64_t m = 0;
    vp_status s = check_conv_inputs(g, n, &m, err);
    if (s) return s;
    vp_value *x = vp_shape_in(g, n, 0), *w = vp_shape_in(g, n, 1);
    vp_window win;
    if ((s = vp_window_resolve(n, kind, x->rank - 2, x->dims + 2, w->dims + 2, &win, err))) return s;
    int64_t dims[VP_MAX_RANK] = {x->dims[0], m};
    memcpy(dims + 2, win.out, (size_t)win.n_sp * sizeof *dims);
    return vp_shape_set_output(g, n, 0, x->dtype, x->rank, dims, err);
}

static vp_status shape_conv(vp_graph *g, vp_node *n, vp_error *err) {
    return shape_conv_common(g, n, VP_WINDOW_CONV, err);
}

static vp_status shape_conv_transpose(vp_graph *g, vp_node *n, vp_error *err) {
    return shape_conv_common(g, n, VP_WINDOW_CONV_TRANSPOSE, err);
}

/* ---- pooling ---- */

static vp_status shape_pool(vp_graph *g, vp_node *n, vp_window_kind kind, vp_error *err) {
    int is_max = kind == VP_WINDOW_MAXPOOL;
    vp_status s = vp_shape_check_arity(n, 1, 1, 1, is_max ? 2 : 1, err);
    if (s) return s;
    vp_value *x = vp_shape_in(g, n, 0);
    if (is_max) s = vp_shape_check_dtype(n, 0, x->dtype, maxpool_types, 6, err);
    else s = check_float(n, 0, x, err);
    if (s || (s = check_rank_at_least(n, 0, x, 3, err))) return s;
    int with_indices = n->n_outputs > 1 && n->outputs[1] >= 0;
    vp_window win;
    if ((s = vp_window_resolve(n, kind, x->rank - 2, x->dims + 2, NULL, &win, err))) return s;
    int64_t dims[VP_MAX_RANK] = {x->dims[0], x->dims[1]};
    memcpy(dims + 2, win.out, (size_t)win.n_sp * sizeof *dims);
    if ((s = vp_shape_set_output(g, n, 0, x->dtype, x->rank, dims, err))) return s;
    return with_indices ? vp_shape_set_output(g, n, 1, VP_I64, x->rank, dims, err) : VP_OK;
}

static vp_status shape_maxpool(vp_graph *g, vp_node *n, vp_error *err) {
    return shape_pool(g, n, VP_WINDOW_MAXPOOL, err);
}

static vp_status shape_avgpool(vp_graph *g, vp_node *n, vp_error *err) {
    return shape_pool(g, n, VP_WINDOW_AVGPOOL, err);
}

static vp_status shape_global_pool(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 1, 1, 1, 1, err);
    if (s) return s;
    vp_value *x = vp_shape_in(g, n, 0);
    if ((s = check_float(n, 0, x, err)) || (s = check_rank_at_least(n, 0, x, 3, err))) return s;
    int64_t dims[VP_MAX_RANK] = {x->dims[0], x->dims[1]};
    for (int d = 2; d < x->rank; d++) dims[d] = 1;
    return vp_shape_set_output(g, n, 0, x->dtype, x->rank, dims, err);
}

static vp_status shape_lrn(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 1, 1, 1, 1, err);
    if (s) return s;
    vp_value *x = vp_shape_in(g, n, 0);
    if ((s = check_float(n, 0, x, err)) || (s = check_rank_at_least(n, 0, x, 2, err))) return s;
    if (vp_attr_int(n, "size", 0) < 1)
        return vp_node_fail(err, VP_ERR_INVALID, n, "attribute size is required and must be positive");
    return vp_shape_same_as_input(g, n, 0, 0, err);
}

/* ---- normalisation ---- */

/* A spatial=0 BatchNormalization parameter: float, shaped like one image, [C, D1, ...]. */
static vp_status check_per_activation(const vp_node *n, int i, const vp_value *p, const vp_value *x, vp_error *err) {
    vp_status s = check_float(n, i, p, err);
    if (s) return s;
    int same = p->rank == x->rank - 1;
    for (int d = 0; same && d < p->rank; d++) same = p->dims[d] == x->dims[d + 1];
    if (same) return VP_OK;
    char s1[128];
    return vp_node_fail(err, VP_ERR_INVALID, n, "input %d must have shape %s (spatial=0)", i,
                        vp_shape_str(x->rank - 1, x->dims + 1, s1, sizeof s1));
}

static vp_status shape_batchnorm(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 5, 5, 1, n->opset >= 14 ? 3 : 5, err);
    if (s) return s;
    vp_value *x = vp_shape_in(g, n, 0);
    if ((s = check_float(n, 0, x, err)) || (s = check_rank_at_least(n, 0, x, 2, err))) return s;
    for (int i = 1; i < 5; i++) {
        vp_value *p = vp_shape_in(g, n, i);
        if (vp_batchnorm_is_per_activation(n)) s = check_per_activation(n, i, p, x, err);
        else s = check_channel_vector(n, i, p, x->dims[1], err);
        if (s) return s;
    }
    int extra = 0;
    for (int i = 1; i < n->n_outputs; i++) extra |= n->outputs[i] >= 0;
    if (extra && !vp_batchnorm_is_training(n))
        return vp_node_fail(err, VP_ERR_INVALID, n, "running statistics outputs need training_mode=1");
    if ((s = vp_shape_same_as_input(g, n, 0, 0, err))) return s;
    for (int i = 1; i < n->n_outputs && !s; i++) s = vp_shape_same_as_input(g, n, i, i < 3 ? i + 2 : 3, err);
    return s;
}

static vp_status shape_instancenorm(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 3, 3, 1, 1, err);
    if (s) return s;
    vp_value *x = vp_shape_in(g, n, 0);
    if ((s = check_float(n, 0, x, err)) || (s = check_rank_at_least(n, 0, x, 3, err))) return s;
    for (int i = 1; i < 3; i++)
        if ((s = check_channel_vector(n, i, vp_shape_in(g, n, i), x->dims[1], err))) return s;
    return vp_shape_same_as_input(g, n, 0, 0, err);
}

/* LayerNormalization(X, scale[, B]) -> Y[, Mean, InvStdDev], and ONNX Runtime's
 * com.microsoft.SimplifiedLayerNormalization(X, scale) -> Y[, inv_std_var], RMSNorm:
 * Y = X / sqrt(mean(X^2) + epsilon) * scale over the axes from axis (planner/train/fuse.c
 * makes it of RMSNorm as exporters decompose it). */
static vp_status shape_norm(vp_graph *g, vp_node *n, int max_in, int max_out, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 2, max_in, 1, max_out, err);
    if (s) return s;
    vp_value *x = vp_shape_in(g, n, 0);
    if ((s = check_float(n, 0, x, err)) || (s = check_rank_at_least(n, 0, x, 1, err))) return s;
    int axis;
    if ((s = vp_shape_axis(n, vp_attr_int(n, "axis", -1), x->rank, &axis, err))) return s;
    for (int i = 1; i < n->n_inputs; i++) {
        vp_value *p = vp_shape_in(g, n, i);
        if (!p) continue;
        if ((s = check_float(n, i, p, err)) || (s = check_broadcasts_to(n, i, p, x->rank - axis, x->dims + axis, err)))
            return s;
    }
    if ((s = vp_shape_same_as_input(g, n, 0, 0, err))) return s;
    /* Mean and InvStdDev keep the leading axes and reduce the rest to 1 */
    int64_t dims[VP_MAX_RANK];
    for (int d = 0; d < x->rank; d++) dims[d] = d < axis ? x->dims[d] : 1;
    vp_dtype stash = (vp_dtype)vp_attr_int(n, "stash_type", VP_F32);
    if (stash != VP_F32 && stash != VP_F64 && stash != VP_F16 && stash != VP_BF16)
        return vp_node_fail(err, VP_ERR_INVALID, n, "stash_type %d is not a float type", (int)stash);
    for (int i = 1; i < n->n_outputs && !s; i++) s = vp_shape_set_output(g, n, i, stash, x->rank, dims, err);
    return s;
}

static vp_status shape_layernorm(vp_graph *g, vp_node *n, vp_error *err) { return shape_norm(g, n, 3, 3, err); }
static vp_status shape_simplified_layernorm(vp_graph *g, vp_node *n, vp_error *err) { return shape_norm(g, n, 2, 2, err); }

/* Designated fields, so columns added to vp_op_def later start out empty here.  Ops
 * without a gradient rule (NULL) are not differentiable here; BatchNormalization is
 * rewritten to com.microsoft.BatchNormInternal for training (planner/train_mode.c). */
#define LINALG_OP(op, opset, shape_fn, grad_fn) \
    { .name = op, .domain = "", .min_opset = opset, .shape = shape_fn, .grad = grad_fn }
/* normalisations read each channel or row whole before writing it: Y may go over X */
#define LINALG_INPLACE_OP(op, opset, shape_fn, grad_fn) \
    { .name = op, .domain = "", .min_opset = opset, .shape = shape_fn, .flags = VP_OP_INPLACE, .grad = grad_fn }

const vp_op_def vp_ops_linalg[] = {
    LINALG_OP("MatMul", 1, shape_matmul, vp_grad_matmul),
    LINALG_OP("Gemm", 1, shape_gemm, vp_grad_gemm),
    {.name = "FusedMatMul", .domain = "com.microsoft", .min_opset = 0, .shape = shape_matmul, 
     .grad = vp_grad_fused_matmul},
    LINALG_OP("Conv", 1, shape_conv, vp_grad_conv),
    LINALG_OP("ConvTranspose", 1, shape_conv_transpose, vp_grad_conv_transpose),
    LINALG_OP("MaxPool", 1, shape_maxpool, vp_grad_max_pool),
    LINALG_OP("AveragePool", 1, shape_avgpool, vp_grad_average_pool),
    LINALG_OP("GlobalAveragePool", 1, shape_global_pool, vp_grad_global_average_pool),
    LINALG_OP("GlobalMaxPool", 1, shape_global_pool, vp_grad_global_max_pool),
    LINALG_OP("LRN", 1, shape_lrn, vp_grad_lrn),
    LINALG_INPLACE_OP("BatchNormalization", 6, shape_batchnorm, vp_grad_batch_norm),
    LINALG_INPLACE_OP("InstanceNormalization", 6, shape_instancenorm, vp_grad_instance_norm),
    /* standard from opset 17; ONNX Runtime has it in the default domain from opset 1 (its
     * contrib schema), where its LayerNormFusion and ours (planner/train/fuse.c) write it */
    LINALG_INPLACE_OP("LayerNormalization", 1, shape_layernorm, vp_grad_layer_norm),
    {.name = "SimplifiedLayerNormalization", .domain = "com.microsoft", .min_opset = 0, .shape = shape_simplified_layernorm,
     .flags = VP_OP_INPLACE, .grad = vp_grad_simplified_layer_norm},
    {0},
};
