/* Registry lookup and the helpers every shape function shares. */
#include "ir/op_registry.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

const vp_dtype vp_float_types[4] = {VP_F32, VP_F64, VP_F16, VP_BF16};
const vp_dtype vp_numeric_types[6] = {VP_F32, VP_F64, VP_F16, VP_BF16, VP_I32, VP_I64};

static const vp_op_def *const families[] = {vp_ops_elementwise, vp_ops_tensor, vp_ops_source, vp_ops_linalg, vp_ops_reduce,
                                            vp_ops_resample, vp_ops_train, vp_ops_update, vp_ops_attention, vp_ops_recurrent,
                                            vp_ops_act_matmul, vp_ops_collective,
                                            vp_ops_quant};

static int same_domain(const char *a, const char *b) {
    /* "ai.onnx" is the long spelling of the default domain */
    if (!a || !strcmp(a, "ai.onnx")) a = "";
    if (!b || !strcmp(b, "ai.onnx")) b = "";
    return strcmp(a, b) == 0;
}

const vp_op_def *vp_op_find(const char *domain, const char *op_type) {
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++)
        for (const vp_op_def *op = families[f]; op->name; op++)
            if (!strcmp(op->name, op_type) && same_domain(op->domain, domain)) return op;
    return NULL;
}

void vp_op_foreach(void (*fn)(const vp_op_def *op, void *ctx), void *ctx) {
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++)
        for (const vp_op_def *op = families[f]; op->name; op++) fn(op, ctx);
}

vp_value *vp_shape_in(vp_graph *g, const vp_node *n, int i) {
    if (i < 0 || i >= n->n_inputs || n->inputs[i] < 0) return NULL;
    return &g->values[n->inputs[i]];
}

vp_status vp_shape_check_arity(const vp_node *n, int lo_in, int hi_in, int lo_out, int hi_out,
                               vp_error *err) {
    if (n->n_inputs < lo_in || n->n_inputs > hi_in)
        return vp_node_fail(err, VP_ERR_INVALID, n, "has %d inputs, expected %d to %d", n->n_inputs,
                            lo_in, hi_in);
    for (int i = 0; i < lo_in; i++)
        if (n->inputs[i] < 0)
            return vp_node_fail(err, VP_ERR_INVALID, n, "required input %d is empty", i);
    if (n->n_outputs < lo_out || n->n_outputs > hi_out)
        return vp_node_fail(err, VP_ERR_INVALID, n, "has %d outputs, expected %d to %d",
                            n->n_outputs, lo_out, hi_out);
    return VP_OK;
}

vp_status vp_shape_check_draws(vp_graph *g, const vp_node *n, int rank, int step, vp_error *err) {
    int64_t ranks = vp_attr_int(n, "vplan_ranks", 1), r = vp_attr_int(n, "vplan_rank", 0);
    int64_t axis = vp_attr_int(n, "vplan_axis", 0);
    if (ranks < 1 || ranks > INT_MAX || r < 0 || r >= ranks || (ranks > 1 && (axis < 0 || axis >= rank)))
        return vp_node_fail(err, VP_ERR_INVALID, n, "attributes vplan_ranks %lld, vplan_rank %lld, vplan_axis %lld do not fit "
                            "its rank-%d input", (long long)ranks, (long long)r, (long long)axis, rank);
    const vp_value *v = vp_shape_in(g, n, step);
    if (v && (v->dtype != VP_I64 || vp_value_numel(v) != 1))
        return vp_node_fail(err, VP_ERR_INVALID, n, "input %d (the step count) must be one int64, got %s", step,
                            vp_dtype_name(v->dtype));
    return VP_OK;
}

vp_status vp_shape_set_output(vp_graph *g, const vp_node *n, int i, vp_dtype dtype, int rank,
                              const int64_t *dims, vp_error *err) {
    if (i >= n->n_outputs || n->outputs[i] < 0) return VP_OK; /* omitted optional output */
    if (rank < 0 || rank > VP_MAX_RANK)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "output %d has rank %d (at most %d supported)",
                            i, rank, VP_MAX_RANK);
    size_t esize = vp_dtype_size(dtype);
    if (!esize)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "output %d has unsupported dtype %s", i,
                            vp_dtype_name(dtype));
    int64_t bytes = (int64_t)esize;
    for (int d = 0; d < rank; d++) {
        if (dims[d] < 0)
            return vp_node_fail(err, VP_ERR_INVALID, n, "output %d gets negative dim %lld at axis %d",
                                i, (long long)dims[d], d);
        if (dims[d] && bytes > INT64_MAX / dims[d])
            return vp_node_fail(err, VP_ERR_INVALID, n, "output %d is too large (size overflows)", i);
        bytes *= dims[d];
    }
    vp_value *v = &g->values[n->outputs[i]];
    v->dtype = dtype;
    v->rank = rank;
    memset(v->dims, 0, sizeof v->dims);
    if (rank) memcpy(v->dims, dims, (size_t)rank * sizeof *dims);
    return VP_OK;
}

vp_status vp_shape_same_as_input(vp_graph *g, const vp_node *n, int i, int j, vp_error *err) {
    vp_value *in = vp_shape_in(g, n, j);
    if (!in) return vp_node_fail(err, VP_ERR_INVALID, n, "input %d is empty", j);
    return vp_shape_set_output(g, n, i, in->dtype, in->rank, in->dims, err);
}

vp_status vp_shape_broadcast(const vp_node *n, int ra, const int64_t *a, int rb, const int64_t *b,
                             int *rout, int64_t *out, vp_error *err) {
    int r = ra > rb ? ra : rb;
    for (int d = 0; d < r; d++) {
        int ia = d - (r - ra), ib = d - (r - rb);
        int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
        if (da == db || db == 1) out[d] = da;
        else if (da == 1) out[d] = db;
        else {
            char sa[128], sb[128];
            return vp_node_fail(err, VP_ERR_INVALID, n, "cannot broadcast shapes %s and %s",
                                vp_shape_str(ra, a, sa, sizeof sa), vp_shape_str(rb, b, sb, sizeof sb));
        }
    }
    *rout = r;
    return VP_OK;
}

vp_status vp_shape_const_ints(vp_graph *g, const vp_node *n, int i, int64_t *out, int max,
                              int *count, vp_error *err) {
    vp_value *v = vp_shape_in(g, n, i);
    if (!v) return vp_node_fail(err, VP_ERR_INVALID, n, "input %d is empty", i);
    if (!v->data)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n,
                            "input %d ('%s') decides the output shape but is not known ahead of "
                            "time (data-dependent shapes are not supported)", i, v->name);
    if (v->dtype != VP_I64 && v->dtype != VP_I32)
        return vp_node_fail(err, VP_ERR_INVALID, n, "input %d ('%s') must be int64 or int32, got %s", i,
                            v->name, vp_dtype_name(v->dtype));
    if (v->rank > 1)
        return vp_node_fail(err, VP_ERR_INVALID, n, "input %d ('%s') must be a scalar or 1-D", i, v->name);
    int64_t k = vp_value_numel(v);
    if (k > max)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "input %d ('%s') has %lld entries, at most %d supported",
                            i, v->name, (long long)k, max);
    for (int64_t e = 0; e < k; e++)
        out[e] = v->dtype == VP_I64 ? ((const int64_t *)v->data)[e] : ((const int32_t *)v->data)[e];
    *count = (int)k;
    return VP_OK;
}

vp_status vp_shape_axis(const vp_node *n, int64_t axis, int rank, int *out, vp_error *err) {
    if (axis < -rank || axis >= (rank ? rank : 1))
        return vp_node_fail(err, VP_ERR_INVALID, n, "axis %lld is out of range for rank %d",
                            (long long)axis, rank);
    *out = (int)(axis < 0 ? axis + rank : axis);
    return VP_OK;
}

vp_status vp_shape_check_dtype(const vp_node *n, int input, vp_dtype dt, const vp_dtype *allowed,
                               int n_allowed, vp_error *err) {
    for (int i = 0; i < n_allowed; i++)
        if (allowed[i] == dt) return VP_OK;
    return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "input %d has dtype %s, which this op does not support here",
                        input, vp_dtype_name(dt));
}

int vp_shape_equal(const vp_value *a, const vp_value *b) {
    if (a->rank != b->rank) return 0;
    for (int d = 0; d < a->rank; d++)
        if (a->dims[d] != b->dims[d]) return 0;
    return 1;
}

vp_status vp_shape_fail_like(const vp_node *n, int i, const vp_value *v, const vp_value *ref, int j, vp_error *err) {
    char s1[128], s2[128];
    return vp_node_fail(err, VP_ERR_INVALID, n, "input %d has shape %s, expected %s like input %d", i,
                        vp_shape_str(v->rank, v->dims, s1, sizeof s1), vp_shape_str(ref->rank, ref->dims, s2, sizeof s2),
                        j);
}

vp_status vp_shape_check_like(vp_graph *g, const vp_node *n, int i, int j, vp_error *err) {
    const vp_value *v = vp_shape_in(g, n, i), *ref = vp_shape_in(g, n, j);
    if (v->dtype != ref->dtype)
        return vp_node_fail(err, VP_ERR_INVALID, n, "input %d is %s, expected %s like input %d", i,
                            vp_dtype_name(v->dtype), vp_dtype_name(ref->dtype), j);
    return vp_shape_equal(v, ref) ? VP_OK : vp_shape_fail_like(n, i, v, ref, j, err);
}

vp_status vp_shape_check_scalar(vp_graph *g, const vp_node *n, int i, const vp_dtype *types, int n_types,
                                vp_error *err) {
    const vp_value *v = vp_shape_in(g, n, i);
    if (!v) return VP_OK;
    vp_status s = vp_shape_check_dtype(n, i, v->dtype, types, n_types, err);
    if (!s && vp_value_numel(v) != 1)
        s = vp_node_fail(err, VP_ERR_INVALID, n, "input %d must hold one element", i);
    return s;
}
