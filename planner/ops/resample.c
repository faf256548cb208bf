/* The resample family: Resize (opsets 10 to 19) and the deprecated Upsample (7, 9)
 * that old exports still write, their adjoint com.microsoft ResizeGrad, and the
 * N-dimensional index ops ScatterND (11 on, every reduction), GatherND (11 on,
 * batch_dims from 12) and GatherND's adjoint com.microsoft GatherNDGrad, and the
 * element-wise ScatterElements (11 on, every reduction) with GatherElements' adjoint
 * com.microsoft GatherElementsGrad (GatherElements is the tensor family's).
 *
 * In: the node and its inputs' shapes, and for Resize the scales or sizes (and roi),
 * which must be known ahead of time (exporters make them with small subgraphs that
 * folding reduces to data).  Out: the output shapes, through the same resolver the
 * kernels use (vp_resize_resolve, op_semantics.h), so planner and runtime agree on every
 * floor and rounding; a variant the kernels do not compute (cubic, antialias) is
 * refused here, at load.  Kernels: runtime/cpu/k_resample.c, k_scatter.c.
 * Gradient rules: grad_resample.c. */
#include <string.h>

#include "ops/grad_rules.h"
#include "ops/op_semantics.h"

static const vp_dtype index_types[] = {VP_I32, VP_I64};

static vp_status check_storable(const vp_node *n, int input, const vp_value *v, vp_error *err) {
    if (v->dtype == VP_STRING || !vp_dtype_size(v->dtype))
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "input %d ('%s') has dtype %s, which is not supported", input,
                            v->name, vp_dtype_name(v->dtype));
    return VP_OK;
}

/* ---- Resize, Upsample, ResizeGrad ---- */

/* Resolves the plan from the node's input values (tensors over their data, if any). */
static vp_status resolve(vp_graph *g, const vp_node *n, vp_resize_plan *p, vp_error *err) {
    vp_tensor t[4];
    const vp_tensor *in[4] = {0};
    int k = n->n_inputs < 4 ? n->n_inputs : 4;
    for (int i = 0; i < k; i++) {
        const vp_value *v = vp_shape_in(g, n, i);
        if (!v) continue;
        t[i] = vp_value_tensor(v);
        in[i] = &t[i];
    }
    return vp_resize_resolve(n, in, k, p, err);
}

static vp_status check_resize_dtype(const vp_node *n, const vp_value *x, vp_resize_mode mode, vp_error *err) {
    if (mode == VP_RESIZE_LINEAR) return vp_shape_check_dtype(n, 0, x->dtype, vp_float_types, 4, err);
    return check_storable(n, 0, x, err);
}

static vp_status resize_shape(vp_graph *g, vp_node *n, vp_error *err) {
    /* Upsample: X, then scales from opset 9; Resize-10: X, scales; Resize-11: X, roi,
     * scales, [sizes]; from 13 roi and scales are optional too */
    int lo, hi;
    if (!strcmp(n->op_type, "Upsample")) lo = hi = n->opset < 9 ? 1 : 2;
    else if (n->opset < 11) lo = hi = 2;
    else lo = n->opset < 13 ? 3 : 1, hi = 4;
    vp_status s = vp_shape_check_arity(n, lo, hi, 1, 1, err);
    if (s) return s;
    vp_resize_plan p;
    if ((s = resolve(g, n, &p, err))) return s;
    const vp_value *x = vp_shape_in(g, n, 0);
    if ((s = check_resize_dtype(n, x, p.mode, err))) return s;
    return vp_shape_set_output(g, n, 0, x->dtype, p.rank, p.out, err);
}

static vp_status resize_grad_shape(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 2, 4, 1, 1, err);
    if (s) return s;
    const vp_value *dy = vp_shape_in(g, n, 0), *x = vp_shape_in(g, n, 1);
    if ((s = vp_shape_check_dtype(n, 0, dy->dtype, vp_float_types, 4, err))) return s;
    if (x->dtype != dy->dtype)
        return vp_node_fail(err, VP_ERR_INVALID, n, "dY is %s but X is %s", vp_dtype_name(dy->dtype),
                            vp_dtype_name(x->dtype));
    vp_resize_plan p;
    if ((s = resolve(g, n, &p, err))) return s;
    return vp_shape_same_as_input(g, n, 0, 1, err);
}

/* ---- ScatterND ---- */

/* A scatter's data, indices and updates dtypes, and its reduction: none, add and mul
 * from opset 16, max and min from 18. */
static vp_status check_scatter(const vp_node *n, const vp_value *x, const vp_value *idx, const vp_value *upd,
                               vp_error *err) {
    vp_status s = check_storable(n, 0, x, err);
    if (!s) s = vp_shape_check_dtype(n, 1, idx->dtype, index_types, 2, err);
    if (s) return s;
    if (upd->dtype != x->dtype)
        return vp_node_fail(err, VP_ERR_INVALID, n, "updates are %s but data is %s", vp_dtype_name(upd->dtype),
                            vp_dtype_name(x->dtype));
    const char *red = vp_attr_string(n, "reduction", "none");
    int known = !strcmp(red, "none") || (n->opset >= 16 && (!strcmp(red, "add") || !strcmp(red, "mul"))) ||
                (n->opset >= 18 && (!strcmp(red, "max") || !strcmp(red, "min")));
    if (!known) return vp_node_fail(err, VP_ERR_INVALID, n, "reduction '%s' is not defined at opset %d", red, n->opset);
    return VP_OK;
}

static vp_status scatter_nd_shape(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 3, 3, 1, 1, err);
    if (s) return s;
    const vp_value *x = vp_shape_in(g, n, 0), *idx = vp_shape_in(g, n, 1), *upd = vp_shape_in(g, n, 2);
    if ((s = check_scatter(n, x, idx, upd, err))) return s;
    if (x->rank == 0 || idx->rank == 0)
        return vp_node_fail(err, VP_ERR_INVALID, n, "data and indices need rank >= 1");
    int64_t k = idx->dims[idx->rank - 1];
    char s1[128], s2[128], s3[128];
    int want_rank = idx->rank - 1 + x->rank - (int)k, ok = k >= 1 && k <= x->rank && upd->rank == want_rank;
    for (int a = 0; ok && a < idx->rank - 1; a++) ok = upd->dims[a] == idx->dims[a];
    for (int a = 0; ok && a < x->rank - k; a++) ok = upd->dims[idx->rank - 1 + a] == x->dims[k + a];
    if (!ok)
        return vp_node_fail(err, VP_ERR_INVALID, n, "updates %s do not fit data %s at indices %s",
                            vp_shape_str(upd->rank, upd->dims, s1, sizeof s1), vp_shape_str(x->rank, x->dims, s2, sizeof s2),
                            vp_shape_str(idx->rank, idx->dims, s3, sizeof s3));
    return vp_shape_same_as_input(g, n, 0, 0, err);
}

/* ---- ScatterElements, GatherElementsGrad ---- */

/* Indices of data's rank (dims), no longer than data off the axis, and what they pair
 * with element for element (updates, dY: `what`, input `in`) of their shape; the axis. */
static vp_status check_elements(const vp_node *n, int rank, const int64_t *dims, const vp_value *idx, int in,
                                const vp_value *paired, const char *what, int *axis, vp_error *err) {
    char s1[128], s2[128];
    if (rank == 0 || idx->rank != rank)
        return vp_node_fail(err, VP_ERR_INVALID, n, "data (rank %d) and indices (rank %d) need the same rank >= 1", rank,
                            idx->rank);
    vp_status s = vp_shape_axis(n, vp_attr_int(n, "axis", 0), rank, axis, err);
    if (s) return s;
    for (int a = 0; a < rank; a++)
        if (a != *axis && idx->dims[a] > dims[a])
            return vp_node_fail(err, VP_ERR_INVALID, n, "indices shape %s is larger than data shape %s off axis %d",
                                vp_shape_str(idx->rank, idx->dims, s1, sizeof s1), vp_shape_str(rank, dims, s2, sizeof s2),
                                *axis);
    int same = paired->rank == idx->rank;
    for (int a = 0; same && a < rank; a++) same = paired->dims[a] == idx->dims[a];
    if (!same)
        return vp_node_fail(err, VP_ERR_INVALID, n, "%s (input %d) %s must have the indices' shape %s", what, in,
                            vp_shape_str(paired->rank, paired->dims, s1, sizeof s1),
                            vp_shape_str(idx->rank, idx->dims, s2, sizeof s2));
    return VP_OK;
}

/* ScatterElements(data, indices, updates): data's shape. */
static vp_status scatter_elements_shape(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 3, 3, 1, 1, err);
    if (s) return s;
    const vp_value *x = vp_shape_in(g, n, 0), *idx = vp_shape_in(g, n, 1), *upd = vp_shape_in(g, n, 2);
    if ((s = check_scatter(n, x, idx, upd, err))) return s;
    int axis;
    if ((s = check_elements(n, x->rank, x->dims, idx, 2, upd, "updates", &axis, err))) return s;
    return vp_shape_same_as_input(g, n, 0, 0, err);
}

/* GatherElementsGrad(dY, shape, indices): dX of that shape, dY's dtype. */
static vp_status gather_elements_grad_shape(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 3, 3, 1, 1, err);
    if (s) return s;
    const vp_value *dy = vp_shape_in(g, n, 0), *idx = vp_shape_in(g, n, 2);
    if ((s = vp_shape_check_dtype(n, 0, dy->dtype, vp_float_types, 4, err))) return s;
    if ((s = vp_shape_check_dtype(n, 2, idx->dtype, index_types, 2, err))) return s;
    int64_t shape[VP_MAX_RANK];
    int rank, axis;
    if ((s = vp_shape_const_ints(g, n, 1, shape, VP_MAX_RANK, &rank, err))) return s;
    for (int a = 0; a < rank; a++)
        if (shape[a] < 0) return vp_node_fail(err, VP_ERR_INVALID, n, "shape (input 1) has negative dim %d", a);
    if ((s = check_elements(n, rank, shape, idx, 0, dy, "dY", &axis, err))) return s;
    return vp_shape_set_output(g, n, 0, dy->dtype, rank, shape, err);
}

/* ---- GatherND, GatherNDGrad ---- */

/* The output shape of GatherND(data dims, indices), checking batch_dims and the rows. */
static vp_status gather_nd_dims(const vp_node *n, int rank, const int64_t *dims, const vp_value *idx, int *out_rank,
                                int64_t *out, vp_error *err) {
    int64_t b = vp_attr_int(n, "batch_dims", 0);
    if (idx->rank == 0) return vp_node_fail(err, VP_ERR_INVALID, n, "indices need rank >= 1");
    int64_t k = idx->dims[idx->rank - 1];
    if (b < 0 || b >= rank || b >= idx->rank)
        return vp_node_fail(err, VP_ERR_INVALID, n, "batch_dims %lld is out of range", (long long)b);
    if (k < 1 || k > rank - b)
        return vp_node_fail(err, VP_ERR_INVALID, n, "index rows of %lld entries for data of rank %d after %lld batch axes",
                            (long long)k, rank, (long long)b);
    for (int a = 0; a < b; a++)
        if (idx->dims[a] != dims[a])
            return vp_node_fail(err, VP_ERR_INVALID, n, "batch axis %d is %lld in the indices but %lld in the data", a,
                                (long long)idx->dims[a], (long long)dims[a]);
    int r = 0;
    int64_t o[2 * VP_MAX_RANK];
    for (int a = 0; a < idx->rank - 1; a++) o[r++] = idx->dims[a];
    for (int a = (int)(b + k); a < rank; a++) o[r++] = dims[a];
    if (r > VP_MAX_RANK)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "output rank %d is above the supported %d", r, VP_MAX_RANK);
    memcpy(out, o, (size_t)r * sizeof *o);
    *out_rank = r;
    return VP_OK;
}

static vp_status gather_nd_shape(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 2, 2, 1, 1, err);
    if (s) return s;
    const vp_value *x = vp_shape_in(g, n, 0), *idx = vp_shape_in(g, n, 1);
    if ((s = check_storable(n, 0, x, err))) return s;
    if ((s = vp_shape_check_dtype(n, 1, idx->dtype, index_types, 2, err))) return s;
    int64_t dims[VP_MAX_RANK];
    int r;
    if ((s = gather_nd_dims(n, x->rank, x->dims, idx, &r, dims, err))) return s;
    return vp_shape_set_output(g, n, 0, x->dtype, r, dims, err);
}

/* GatherNDGrad(shape, indices, dY): dY must be what GatherND of that shape gives. */
static vp_status gather_nd_grad_shape(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 3, 3, 1, 1, err);
    if (s) return s;
    const vp_value *idx = vp_shape_in(g, n, 1), *dy = vp_shape_in(g, n, 2);
    if ((s = vp_shape_check_dtype(n, 1, idx->dtype, index_types, 2, err))) return s;
    if ((s = vp_shape_check_dtype(n, 2, dy->dtype, vp_float_types, 4, err))) return s;
    int64_t shape[VP_MAX_RANK], dims[VP_MAX_RANK];
    int rank, r;
    if ((s = vp_shape_const_ints(g, n, 0, shape, VP_MAX_RANK, &rank, err))) return s;
    if ((s = gather_nd_dims(n, rank, shape, idx, &r, dims, err))) return s;
    int ok = r == dy->rank;
    for (int a = 0; ok && a < r; a++) ok = dims[a] == dy->dims[a];
    char s1[128], s2[128];
    if (!ok)
        return vp_node_fail(err, VP_ERR_INVALID, n, "dY is %s, GatherND gives %s", vp_shape_str(dy->rank, dy->dims, s1, sizeof s1),
                            vp_shape_str(r, dims, s2, sizeof s2));
    return vp_shape_set_output(g, n, 0, dy->dtype, rank, shape, err);
}

const vp_op_def vp_ops_resample[] = {
    {"Resize", "", 10, resize_shape, 0, vp_grad_resize},
    {"Upsample", "", 7, resize_shape, 0, vp_grad_resize},
    {"ScatterND", "", 11, scatter_nd_shape, 0, vp_grad_scatter_nd},
    {"GatherND", "", 11, gather_nd_shape, 0, vp_grad_gather_nd},
    {"ScatterElements", "", 11, scatter_elements_shape, 0, vp_grad_scatter_elements},
    /* their adjoints, ONNX Runtime's training ops with its inputs and attributes */
    {"ResizeGrad", "com.microsoft", 0, resize_grad_shape, 0, NULL},
    {"GatherNDGrad", "com.microsoft", 0, gather_nd_grad_shape, 0, NULL},
    {"GatherElementsGrad", "com.microsoft", 0, gather_elements_grad_shape, 0, NULL},
    {0},
};
