/* Shape functions of the source family: ops whose output is made from attributes and
 * from their inputs' shapes, not computed from input elements (Shape, Size, Constant,
 * ConstantOfShape, Range).
 *
 * Their outputs decide other ops' shapes (Reshape's shape, Slice's starts), so constant
 * folding must be able to run them before shape inference finishes: Shape and Size read
 * only their input's shape and fold even when its data is unknown; Range's bounds must
 * be known ahead of time, and a data-dependent Range is refused naming the node. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir/dtype_conv.h"
#include "ops/grad_rules.h"
#include "ops/op_semantics.h"

/* ---- Shape and Size ---- */

static vp_status shape_shape(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 1, 1, 1, 1, err);
    if (s) return s;
    int start, end;
    vp_shape_op_bounds(n, vp_shape_in(g, n, 0)->rank, &start, &end);
    int64_t len = end > start ? end - start : 0;
    return vp_shape_set_output(g, n, 0, VP_I64, 1, &len, err);
}

static vp_status size_shape(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 1, 1, 1, 1, err);
    if (s) return s;
    return vp_shape_set_output(g, n, 0, VP_I64, 0, NULL, err);
}

/* ---- Constant and ConstantOfShape ---- */

static vp_status constant_shape(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 0, 0, 1, 1, err);
    if (s) return s;
    const vp_attr *a = vp_constant_value_attr(n);
    if (!a || n->n_attrs != 1)
        return vp_node_fail(err, VP_ERR_INVALID, n, "needs exactly one value attribute, has %d attributes", n->n_attrs);
    int64_t len = a->n;
    if (!strcmp(a->name, "value") && a->type == VP_ATTR_TENSOR)
        return vp_shape_set_output(g, n, 0, a->t->dtype, a->t->rank, a->t->dims, err);
    if (!strcmp(a->name, "value_float") && a->type == VP_ATTR_FLOAT)
        return vp_shape_set_output(g, n, 0, VP_F32, 0, NULL, err);
    if (!strcmp(a->name, "value_int") && a->type == VP_ATTR_INT)
        return vp_shape_set_output(g, n, 0, VP_I64, 0, NULL, err);
    if (!strcmp(a->name, "value_floats") && a->type == VP_ATTR_FLOATS)
        return vp_shape_set_output(g, n, 0, VP_F32, 1, &len, err);
    if (!strcmp(a->name, "value_ints") && a->type == VP_ATTR_INTS)
        return vp_shape_set_output(g, n, 0, VP_I64, 1, &len, err);
    if (!strcmp(a->name, "value_string") || !strcmp(a->name, "value_strings"))
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "string constants are not supported");
    if (!strcmp(a->name, "sparse_value"))
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "sparse constants are not supported");
    return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "attribute '%s' of type %d is not a supported constant value",
                        a->name, (int)a->type);
}

static vp_status constant_of_shape_shape(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 1, 1, 1, 1, err);
    if (s) return s;
    int64_t dims[VP_MAX_RANK];
    int rank;
    if ((s = vp_shape_const_ints(g, n, 0, dims, VP_MAX_RANK, &rank, err))) return s;
    const vp_attr *value = vp_node_attr(n, "value");
    vp_dtype dtype = VP_F32; /* the default value is a float32 zero */
    if (value) {
        if (value->type != VP_ATTR_TENSOR || vp_tensor_numel(value->t) != 1)
            return vp_node_fail(err, VP_ERR_INVALID, n, "value must be a tensor of one element");
        dtype = value->t->dtype;
    }
    return vp_shape_set_output(g, n, 0, dtype, rank, dims, err);
}

/* ---- Range ---- */

static const vp_dtype range_types[] = {VP_F32, VP_F64, VP_F16, VP_BF16, VP_I16, VP_I32, VP_I64};

/* Integers stay exact: an int64 range past 2^53 must not go through double. */
static int64_t scalar_int(const vp_value *v) {
    return v->dtype == VP_I64 ? *(const int64_t *)v->data : (int64_t)vp_load(v->data, v->dtype, 0);
}

static vp_status range_count_ints(const vp_node *n, const vp_value *const *v, int64_t *count, vp_error *err) {
    int64_t start = scalar_int(v[0]), limit = scalar_int(v[1]), delta = scalar_int(v[2]), diff;
    if (delta == 0) return vp_node_fail(err, VP_ERR_INVALID, n, "delta is 0");
    if (__builtin_sub_overflow(limit, start, &diff)) return vp_node_fail(err, VP_ERR_INVALID, n, "range is too long");
    *count = 0;
    if (diff != 0 && (diff > 0) == (delta > 0)) {
        uint64_t span = diff > 0 ? (uint64_t)diff : -(uint64_t)diff;
        uint64_t step = delta > 0 ? (uint64_t)delta : -(uint64_t)delta;
        *count = (int64_t)((span - 1) / step + 1);
    }
    return VP_OK;
}

static vp_status range_count_floats(const vp_node *n, const vp_value *const *v, int64_t *count, vp_error *err) {
    double start = vp_load(v[0]->data, v[0]->dtype, 0), limit = vp_load(v[1]->data, v[1]->dtype, 0);
    double delta = vp_load(v[2]->data, v[2]->dtype, 0);
    double q = ceil((limit - start) / delta);
    if (delta == 0 || isnan(q) || q > 4.0e18)
        return vp_node_fail(err, VP_ERR_INVALID, n, "range from %g to %g by %g has no finite length", start, limit,
                            delta);
    *count = q > 0 ? (int64_t)q : 0;
    return VP_OK;
}

static vp_status range_shape(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 3, 3, 1, 1, err);
    if (s) return s;
    const vp_value *v[3];
    for (int i = 0; i < 3; i++) {
        v[i] = vp_shape_in(g, n, i);
        if ((s = vp_shape_check_dtype(n, i, v[i]->dtype, range_types, 7, err))) return s;
        if (v[i]->dtype != v[0]->dtype)
            return vp_node_fail(err, VP_ERR_INVALID, n, "inputs are %s and %s", vp_dtype_name(v[0]->dtype),
                                vp_dtype_name(v[i]->dtype));
        if (vp_value_numel(v[i]) != 1)
            return vp_node_fail(err, VP_ERR_INVALID, n, "input %d ('%s') is not a scalar", i, v[i]->name);
        if (!v[i]->data)
            return vp_node_fail(err, VP_ERR_UNSUPPORTED, n,
                                "input %d ('%s') decides the output length but is not known ahead of time "
                                "(data-dependent shapes are not supported)",
                                i, v[i]->name);
    }
    int64_t count;
    s = vp_dtype_is_int(v[0]->dtype) ? range_count_ints(n, v, &count, err) : range_count_floats(n, v, &count, err);
    if (s) return s;
    return vp_shape_set_output(g, n, 0, v[0]->dtype, 1, &count, err);
}

const vp_op_def vp_ops_source[] = {
    {"Shape", "", 1, shape_shape, VP_OP_FOLD_SHAPE_ONLY, NULL},
    {"Size", "", 1, size_shape, VP_OP_FOLD_SHAPE_ONLY, NULL},
    {"Constant", "", 1, constant_shape, 0, NULL},
    {"ConstantOfShape", "", 9, constant_of_shape_shape, 0, NULL},
    {"Range", "", 11, range_shape, 0, NULL},
    {0},
};
