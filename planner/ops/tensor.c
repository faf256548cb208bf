/* Shape functions of the tensor family: ops that reshape, reorder, cut, join, pad and
 * repeat tensors without computing on their elements (the ops that make tensors from
 * attributes and shapes are the source family, source.c).
 *
 * Every op here moves bytes, so every dtype we can store is accepted.  Inputs that
 * decide the output shape (Reshape's shape, Slice's starts, Pad's pads, ...) must be
 * known ahead of time; exporters make them with small Shape -> Gather -> Concat
 * subgraphs that constant folding reduces to data before these functions run (Shape
 * and Size read only their input's shape, so they fold even when its data is
 * unknown).  Slice and Pad share their resolvers with the kernels (op_semantics.h), so
 * planner and runtime agree on every clamp. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "ir/dtype_conv.h"
#include "ops/grad_rules.h"
#include "ops/op_semantics.h"

static vp_status check_storable(const vp_node *n, int input, const vp_value *v, vp_error *err) {
    if (v->dtype == VP_STRING || !vp_dtype_size(v->dtype))
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "input %d ('%s') has dtype %s, which is not supported", input,
                            v->name, vp_dtype_name(v->dtype));
    return VP_OK;
}

static int64_t product(int rank, const int64_t *dims) {
    int64_t k = 1;
    for (int a = 0; a < rank; a++) k *= dims[a];
    return k;
}

/* ---- Reshape, Flatten, Squeeze, Unsqueeze ---- */

/* Resolves Reshape's 0 (copy the input dim unless allowzero) and -1 (infer) entries. */
static vp_status reshape_resolve(const vp_node *n, const vp_value *x, int k, int64_t *shape, int allowzero,
                                 vp_error *err) {
    int infer = -1;
    int64_t known = 1;
    char s1[128], s2[128];
    for (int i = 0; i < k; i++) {
        if (shape[i] == -1) {
            if (infer >= 0) return vp_node_fail(err, VP_ERR_INVALID, n, "shape has more than one -1");
            infer = i;
            continue;
        }
        if (shape[i] < -1)
            return vp_node_fail(err, VP_ERR_INVALID, n, "shape has negative entry %lld", (long long)shape[i]);
        if (shape[i] == 0 && !allowzero) {
            if (i >= x->rank)
                return vp_node_fail(err, VP_ERR_INVALID, n, "shape entry %d is 0 but the input has rank %d", i,
                                    x->rank);
            shape[i] = x->dims[i];
        }
        if (__builtin_mul_overflow(known, shape[i], &known))
            return vp_node_fail(err, VP_ERR_INVALID, n, "shape %s overflows", vp_shape_str(k, shape, s1, sizeof s1));
    }
    int64_t numel = vp_value_numel(x);
    if (infer >= 0) {
        if (known == 0 || numel % known)
            return vp_node_fail(err, VP_ERR_INVALID, n, "cannot infer the -1 in %s from input shape %s",
                                vp_shape_str(k, shape, s1, sizeof s1), vp_shape_str(x->rank, x->dims, s2, sizeof s2));
        shape[infer] = numel / known;
    } else if (known != numel) {
        return vp_node_fail(err, VP_ERR_INVALID, n, "cannot reshape %s to %s",
                            vp_shape_str(x->rank, x->dims, s1, sizeof s1), vp_shape_str(k, shape, s2, sizeof s2));
    }
    return VP_OK;
}

static vp_status reshape_shape(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 2, 2, 1, 1, err);
    if (s) return s;
    const vp_value *x = vp_shape_in(g, n, 0);
    if ((s = check_storable(n, 0, x, err))) return s;
    int64_t shape[VP_MAX_RANK];
    int k;
    if ((s = vp_shape_const_ints(g, n, 1, shape, VP_MAX_RANK, &k, err))) return s;
    int allowzero = n->opset >= 14 && vp_attr_int(n, "allowzero", 0);
    if ((s = reshape_resolve(n, x, k, shape, allowzero, err))) return s;
    return vp_shape_set_output(g, n, 0, x->dtype, k, shape, err);
}

static vp_status flatten_shape(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 1, 1, 1, 1, err);
    if (s) return s;
    const vp_value *x = vp_shape_in(g, n, 0);
    if ((s = check_storable(n, 0, x, err))) return s;
    int64_t axis = vp_attr_int(n, "axis", 1);
    if (axis < -x->rank || axis > x->rank) /* axis == rank is allowed: everything goes to the first dim */
        return vp_node_fail(err, VP_ERR_INVALID, n, "axis %lld is out of range for rank %d", (long long)axis, x->rank);
    int a = (int)(axis < 0 ? axis + x->rank : axis);
    int64_t dims[2] = {product(a, x->dims), product(x->rank - a, x->dims + a)};
    return vp_shape_set_output(g, n, 0, x->dtype, 2, dims, err);
}

/* Squeeze and Unsqueeze take axes as an attribute before opset 13, as input 1 from it. */
static vp_status read_axes(vp_graph *g, const vp_node *n, int64_t *axes, int *count, int *given, vp_error *err) {
    *count = 0;
    *given = 0;
    if (n->opset < 13) {
        const int64_t *p;
        int k = vp_attr_ints(n, "axes", &p);
        if (k < 0) return VP_OK;
        if (k > VP_MAX_RANK) return vp_node_fail(err, VP_ERR_INVALID, n, "axes has %d entries", k);
        for (int i = 0; i < k; i++) axes[i] = p[i];
        *count = k;
        *given = 1;
        return VP_OK;
    }
    if (!vp_shape_in(g, n, 1)) return VP_OK;
    *given = 1;
    return vp_shape_const_ints(g, n, 1, axes, VP_MAX_RANK, count, err);
}

static vp_status squeeze_shape(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 1, n->opset < 13 ? 1 : 2, 1, 1, err);
    if (s) return s;
    const vp_value *x = vp_shape_in(g, n, 0);
    if ((s = check_storable(n, 0, x, err))) return s;
    int64_t axes[VP_MAX_RANK], dims[VP_MAX_RANK];
    int k, given, drop[VP_MAX_RANK] = {0};
    if ((s = read_axes(g, n, axes, &k, &given, err))) return s;
    for (int i = 0; i < k; i++) {
        int a;
        if ((s = vp_shape_axis(n, axes[i], x->rank, &a, err))) return s;
        if (x->dims[a] != 1)
            return vp_node_fail(err, VP_ERR_INVALID, n, "cannot squeeze axis %d of size %lld", a,
                                (long long)x->dims[a]);
        drop[a] = 1;
    }
    int r = 0, squeeze_all = !given || k == 0; /* empty axes squeeze every unit dim, as onnxruntime does */
    for (int a = 0; a < x->rank; a++)
        if (!(squeeze_all ? x->dims[a] == 1 : drop[a])) dims[r++] = x->dims[a];
    return vp_shape_set_output(g, n, 0, x->dtype, r, dims, err);
}

static vp_status unsqueeze_shape(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, n->opset < 13 ? 1 : 2, n->opset < 13 ? 1 : 2, 1, 1, err);
    if (s) return s;
    const vp_value *x = vp_shape_in(g, n, 0);
    if ((s = check_storable(n, 0, x, err))) return s;
    int64_t axes[VP_MAX_RANK], dims[VP_MAX_RANK];
    int k, given, inserted[VP_MAX_RANK] = {0};
    if ((s = read_axes(g, n, axes, &k, &given, err))) return s;
    if (!given) return vp_node_fail(err, VP_ERR_INVALID, n, "needs axes");
    int rank = x->rank + k;
    if (rank > VP_MAX_RANK)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "output rank %d is above the supported %d", rank, VP_MAX_RANK);
    for (int i = 0; i < k; i++) {
        int a;
        if ((s = vp_shape_axis(n, axes[i], rank, &a, err))) return s;
        if (inserted[a]++) return vp_node_fail(err, VP_ERR_INVALID, n, "axis %d is given twice", a);
    }
    for (int a = 0, j = 0; a < rank; a++) dims[a] = inserted[a] ? 1 : x->dims[j++];
    return vp_shape_set_output(g, n, 0, x->dtype, rank, dims, err);
}

/* ---- Transpose ---- */

static vp_status transpose_shape(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 1, 1, 1, 1, err);
    if (s) return s;
    const vp_value *x = vp_shape_in(g, n, 0);
    if ((s = check_storable(n, 0, x, err))) return s;
    const int64_t *perm;
    int k = vp_attr_ints(n, "perm", &perm);
    int64_t dims[VP_MAX_RANK];
    int used[VP_MAX_RANK] = {0};
    if (k >= 0 && k != x->rank)
        return vp_node_fail(err, VP_ERR_INVALID, n, "perm has %d entries for rank %d", k, x->rank);
    for (int a = 0; a < x->rank; a++) {
        int64_t p = k >= 0 ? perm[a] : x->rank - 1 - a;
        if (p < 0 || p >= x->rank || used[p]++)
            return vp_node_fail(err, VP_ERR_INVALID, n, "perm is not a permutation of 0..%d", x->rank - 1);
        dims[a] = x->dims[p];
    }
    return vp_shape_set_output(g, n, 0, x->dtype, x->rank, dims, err);
}

/* ---- Concat and Split ---- */

static vp_status concat_shape(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 1, INT_MAX, 1, 1, err);
    if (s) return s;
    const vp_value *x0 = vp_shape_in(g, n, 0);
    if ((s = check_storable(n, 0, x0, err))) return s;
    if (n->opset >= 4 && !vp_node_attr(n, "axis"))
        return vp_node_fail(err, VP_ERR_INVALID, n, "needs the axis attribute");
    if (x0->rank == 0) return vp_node_fail(err, VP_ERR_INVALID, n, "cannot concatenate scalars");
    int axis;
    if ((s = vp_shape_axis(n, vp_attr_int(n, "axis", 1), x0->rank, &axis, err))) return s;
    int64_t dims[VP_MAX_RANK];
    for (int a = 0; a < x0->rank; a++) dims[a] = x0->dims[a];
    dims[axis] = 0;
    char s1[128], s2[128];
    for (int i = 0; i < n->n_inputs; i++) {
        const vp_value *x = vp_shape_in(g, n, i);
        if (!x) return vp_node_fail(err, VP_ERR_INVALID, n, "input %d is empty", i);
        int same = x->dtype == x0->dtype && x->rank == x0->rank;
        for (int a = 0; same && a < x->rank; a++) same = a == axis || x->dims[a] == x0->dims[a];
        if (!same)
            return vp_node_fail(err, VP_ERR_INVALID, n, "input %d (%s %s) does not match input 0 (%s %s) off axis %d",
                                i, vp_dtype_name(x->dtype), vp_shape_str(x->rank, x->dims, s1, sizeof s1),
                                vp_dtype_name(x0->dtype), vp_shape_str(x0->rank, x0->dims, s2, sizeof s2), axis);
        dims[axis] += x->dims[axis];
    }
    return vp_shape_set_output(g, n, 0, x0->dtype, x0->rank, dims, err);
}

/* Split sizes: given (attribute before opset 13, input from it), or equal parts, where
 * opset 18 lets the last one be smaller. */
static vp_status split_sizes(vp_graph *g, const vp_node *n, int64_t dim, int64_t *sizes, vp_error *err) {
    int k = n->n_outputs, count = -1;
    vp_status s = VP_OK;
    if (n->opset < 13) {
        const int64_t *p;
        count = vp_attr_ints(n, "split", &p);
        for (int i = 0; i < count && i < k; i++) sizes[i] = p[i];
    } else if (vp_shape_in(g, n, 1)) {
        int64_t *buf = malloc((size_t)(k + 1) * sizeof *buf);
        if (!buf) return vp_node_fail(err, VP_ERR_NOMEM, n, "out of memory");
        s = vp_shape_const_ints(g, n, 1, buf, k + 1, &count, err);
        for (int i = 0; !s && i < count && i < k; i++) sizes[i] = buf[i];
        free(buf);
        if (s) return s;
    }
    if (count >= 0) {
        if (count != k) return vp_node_fail(err, VP_ERR_INVALID, n, "split has %d entries for %d outputs", count, k);
        int64_t sum = 0;
        for (int i = 0; i < k; i++) {
            if (sizes[i] < 0) return vp_node_fail(err, VP_ERR_INVALID, n, "split entry %d is negative", i);
            if (__builtin_add_overflow(sum, sizes[i], &sum)) sum = -1;
        }
        if (sum != dim)
            return vp_node_fail(err, VP_ERR_INVALID, n, "split sizes add up to %lld, the axis has %lld", (long long)sum,
                                (long long)dim);
        return VP_OK;
    }
    int64_t num = n->opset >= 18 ? vp_attr_int(n, "num_outputs", k) : k;
    if (num != k)
        return vp_node_fail(err, VP_ERR_INVALID, n, "num_outputs is %lld but the node has %d outputs", (long long)num,
                            k);
    if (n->opset < 18 && dim % k)
        return vp_node_fail(err, VP_ERR_INVALID, n, "axis of size %lld does not split into %d equal parts",
                            (long long)dim, k);
    int64_t chunk = (dim + k - 1) / k, left = dim;
    for (int i = 0; i < k; i++) {
        sizes[i] = left < chunk ? left : chunk;
        left -= sizes[i];
    }
    return VP_OK;
}

static vp_status split_shape(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 1, n->opset < 13 ? 1 : 2, 1, INT_MAX, err);
    if (s) return s;
    const vp_value *x = vp_shape_in(g, n, 0);
    if ((s = check_storable(n, 0, x, err))) return s;
    if (x->rank == 0) return vp_node_fail(err, VP_ERR_INVALID, n, "cannot split a scalar");
    int axis;
    if ((s = vp_shape_axis(n, vp_attr_int(n, "axis", 0), x->rank, &axis, err))) return s;
    for (int i = 0; i < n->n_outputs; i++)
        if (n->outputs[i] < 0) return vp_node_fail(err, VP_ERR_INVALID, n, "output %d is empty", i);
    int64_t *sizes = malloc((size_t)n->n_outputs * sizeof *sizes);
    if (!sizes) return vp_node_fail(err, VP_ERR_NOMEM, n, "out of memory");
    s = split_sizes(g, n, x->dims[axis], sizes, err);
    int64_t dims[VP_MAX_RANK];
    for (int a = 0; a < x->rank; a++) dims[a] = x->dims[a];
    for (int i = 0; !s && i < n->n_outputs; i++) {
        dims[axis] = sizes[i];
        s = vp_shape_set_output(g, n, i, x->dtype, x->rank, dims, err);
    }
    free(sizes);
    return s;
}

/* ---- Slice ---- */

vp_status vp_slice_read(vp_graph *g, const vp_node *n, int64_t (*v)[VP_MAX_RANK], int *count, int *given,
                        vp_error *err) {
    static const char *const names[] = {"starts", "ends", "axes", "steps"};
    for (int j = 0; j < 4; j++) {
        int k = -1;
        if (n->opset < 10) {
            const int64_t *p = NULL;
            if (j < 3) k = vp_attr_ints(n, names[j], &p);
            if (k > VP_MAX_RANK) return vp_node_fail(err, VP_ERR_INVALID, n, "%s has %d entries", names[j], k);
            for (int i = 0; i < k; i++) v[j][i] = p[i];
        } else if (vp_shape_in(g, n, j + 1)) {
            vp_status s = vp_shape_const_ints(g, n, j + 1, v[j], VP_MAX_RANK, &k, err);
            if (s) return s;
        }
        given[j] = k >= 0;
        count[j] = k;
        if (j < 2 && !given[j]) return vp_node_fail(err, VP_ERR_INVALID, n, "needs %s", names[j]);
        if (j > 0 && given[j] && k != count[0])
            return vp_node_fail(err, VP_ERR_INVALID, n, "%s has %d entries, starts has %d", names[j], k, count[0]);
    }
    return VP_OK;
}

static vp_status slice_shape(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = n->opset < 10 ? vp_shape_check_arity(n, 1, 1, 1, 1, err) : vp_shape_check_arity(n, 3, 5, 1, 1, err);
    if (s) return s;
    const vp_value *x = vp_shape_in(g, n, 0);
    if ((s = check_storable(n, 0, x, err))) return s;
    int64_t v[4][VP_MAX_RANK];
    int count[4], given[4];
    if ((s = vp_slice_read(g, n, v, count, given, err))) return s;
    vp_slice_plan plan;
    char why[256];
    if (vp_slice_resolve(x->rank, x->dims, count[0], v[0], v[1], given[2] ? v[2] : NULL, given[3] ? v[3] : NULL, &plan,
                         why, sizeof why))
        return vp_node_fail(err, VP_ERR_INVALID, n, "%s", why);
    return vp_shape_set_output(g, n, 0, x->dtype, x->rank, plan.count, err);
}

/* ---- Expand and Tile ---- */

static vp_status expand_shape(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 2, 2, 1, 1, err);
    if (s) return s;
    const vp_value *x = vp_shape_in(g, n, 0);
    if ((s = check_storable(n, 0, x, err))) return s;
    int64_t shape[VP_MAX_RANK], dims[VP_MAX_RANK];
    int k, rank;
    if ((s = vp_shape_const_ints(g, n, 1, shape, VP_MAX_RANK, &k, err))) return s;
    for (int i = 0; i < k; i++)
        if (shape[i] < 0)
            return vp_node_fail(err, VP_ERR_INVALID, n, "shape has negative entry %lld", (long long)shape[i]);
    if ((s = vp_shape_broadcast(n, x->rank, x->dims, k, shape, &rank, dims, err))) return s;
    return vp_shape_set_output(g, n, 0, x->dtype, rank, dims, err);
}

static vp_status tile_shape(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 2, 2, 1, 1, err);
    if (s) return s;
    const vp_value *x = vp_shape_in(g, n, 0);
    if ((s = check_storable(n, 0, x, err))) return s;
    int64_t repeats[VP_MAX_RANK], dims[VP_MAX_RANK];
    int k;
    if ((s = vp_shape_const_ints(g, n, 1, repeats, VP_MAX_RANK, &k, err))) return s;
    if (k != x->rank) return vp_node_fail(err, VP_ERR_INVALID, n, "repeats has %d entries for rank %d", k, x->rank);
    for (int a = 0; a < k; a++) {
        if (repeats[a] < 0) return vp_node_fail(err, VP_ERR_INVALID, n, "repeats entry %d is negative", a);
        if (__builtin_mul_overflow(x->dims[a], repeats[a], &dims[a]))
            return vp_node_fail(err, VP_ERR_INVALID, n, "output dim %d overflows", a);
    }
    return vp_shape_set_output(g, n, 0, x->dtype, x->rank, dims, err);
}

static const vp_dtype index_types[] = {VP_I32, VP_I64};

/* ---- Gather and GatherElements ---- */

static vp_status gather_shape(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 2, 2, 1, 1, err);
    if (s) return s;
    const vp_value *x = vp_shape_in(g, n, 0), *idx = vp_shape_in(g, n, 1);
    if ((s = check_storable(n, 0, x, err))) return s;
    if ((s = vp_shape_check_dtype(n, 1, idx->dtype, index_types, 2, err))) return s;
    if (x->rank == 0) return vp_node_fail(err, VP_ERR_INVALID, n, "cannot gather from a scalar");
    int axis, rank = x->rank - 1 + idx->rank;
    if ((s = vp_shape_axis(n, vp_attr_int(n, "axis", 0), x->rank, &axis, err))) return s;
    if (rank > VP_MAX_RANK)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "output rank %d is above the supported %d", rank, VP_MAX_RANK);
    int64_t dims[VP_MAX_RANK];
    int r = 0;
    for (int a = 0; a < axis; a++) dims[r++] = x->dims[a];
    for (int a = 0; a < idx->rank; a++) dims[r++] = idx->dims[a];
    for (int a = axis + 1; a < x->rank; a++) dims[r++] = x->dims[a];
    return vp_shape_set_output(g, n, 0, x->dtype, rank, dims, err);
}

static vp_status gather_elements_shape(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 2, 2, 1, 1, err);
    if (s) return s;
    const vp_value *x = vp_shape_in(g, n, 0), *idx = vp_shape_in(g, n, 1);
    if ((s = check_storable(n, 0, x, err))) return s;
    if ((s = vp_shape_check_dtype(n, 1, idx->dtype, index_types, 2, err))) return s;
    if (x->rank == 0 || idx->rank != x->rank)
        return vp_node_fail(err, VP_ERR_INVALID, n, "data (rank %d) and indices (rank %d) need the same rank >= 1",
                            x->rank, idx->rank);
    int axis;
    if ((s = vp_shape_axis(n, vp_attr_int(n, "axis", 0), x->rank, &axis, err))) return s;
    char s1[128], s2[128];
    for (int a = 0; a < x->rank; a++)
        if (a != axis && idx->dims[a] > x->dims[a])
            return vp_node_fail(err, VP_ERR_INVALID, n, "indices shape %s is larger than data shape %s off axis %d",
                                vp_shape_str(idx->rank, idx->dims, s1, sizeof s1),
                                vp_shape_str(x->rank, x->dims, s2, sizeof s2), axis);
    return vp_shape_set_output(g, n, 0, x->dtype, idx->rank, idx->dims, err);
}

/* ---- Trilu ---- */

static vp_status trilu_shape(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 1, 2, 1, 1, err);
    if (s) return s;
    const vp_value *x = vp_shape_in(g, n, 0), *k = vp_shape_in(g, n, 1);
    if ((s = check_storable(n, 0, x, err))) return s;
    if (x->rank < 2) return vp_node_fail(err, VP_ERR_INVALID, n, "needs rank >= 2, got %d", x->rank);
    if (k && (k->dtype != VP_I64 || vp_value_numel(k) != 1))
        return vp_node_fail(err, VP_ERR_INVALID, n, "k must be an int64 scalar");
    return vp_shape_same_as_input(g, n, 0, 0, err);
}

/* ---- Pad ---- */

/* Pads (and axes, opset 18) from the attribute before opset 11, from inputs after. */
static vp_status pad_read(vp_graph *g, const vp_node *n, const vp_value *x, int64_t *pads, int *n_pads, int64_t *axes,
                          int *n_axes, vp_error *err) {
    *n_axes = -1;
    if (n->opset < 11) {
        const int64_t *p;
        *n_pads = vp_attr_ints(n, "pads", &p);
        if (*n_pads < 0) return vp_node_fail(err, VP_ERR_INVALID, n, "needs the pads attribute");
        if (*n_pads > 2 * VP_MAX_RANK) return vp_node_fail(err, VP_ERR_INVALID, n, "pads has %d entries", *n_pads);
        for (int i = 0; i < *n_pads; i++) pads[i] = p[i];
        if (!vp_dtype_is_float(x->dtype) && !vp_dtype_is_int(x->dtype) && x->dtype != VP_BOOL)
            return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "the value attribute cannot be converted to %s",
                                vp_dtype_name(x->dtype));
        return VP_OK;
    }
    vp_status s = vp_shape_const_ints(g, n, 1, pads, 2 * VP_MAX_RANK, n_pads, err);
    if (s) return s;
    const vp_value *value = vp_shape_in(g, n, 2);
    if (value && (value->dtype != x->dtype || vp_value_numel(value) > 1))
        return vp_node_fail(err, VP_ERR_INVALID, n, "constant_value must be a %s scalar", vp_dtype_name(x->dtype));
    if (vp_shape_in(g, n, 3)) return vp_shape_const_ints(g, n, 3, axes, VP_MAX_RANK, n_axes, err);
    return VP_OK;
}

static vp_status pad_shape(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = n->opset < 11 ? vp_shape_check_arity(n, 1, 1, 1, 1, err) : vp_shape_check_arity(n, 2, 4, 1, 1, err);
    if (s) return s;
    const vp_value *x = vp_shape_in(g, n, 0);
    if ((s = check_storable(n, 0, x, err))) return s;
    const char *mode_name = vp_attr_string(n, "mode", "constant");
    int mode = vp_pad_mode_parse(mode_name);
    if (mode < 0) return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "mode '%s' is not supported", mode_name);
    int64_t pads[2 * VP_MAX_RANK], axes[VP_MAX_RANK], begin[VP_MAX_RANK], end[VP_MAX_RANK], dims[VP_MAX_RANK];
    int n_pads, n_axes;
    if ((s = pad_read(g, n, x, pads, &n_pads, axes, &n_axes, err))) return s;
    if (n_pads % 2 || (n_axes >= 0 && n_pads != 2 * n_axes))
        return vp_node_fail(err, VP_ERR_INVALID, n, "pads has %d entries, expected twice the %d axes", n_pads,
                            n_axes >= 0 ? n_axes : x->rank);
    char why[256];
    if ((s = vp_pad_resolve(x->rank, x->dims, (vp_pad_mode)mode, n_pads / 2, pads, n_axes >= 0 ? axes : NULL, begin,
                            end, why, sizeof why)))
        return vp_node_fail(err, s, n, "%s", why);
    for (int a = 0; a < x->rank; a++) dims[a] = x->dims[a] + begin[a] + end[a];
    return vp_shape_set_output(g, n, 0, x->dtype, x->rank, dims, err);
}

const vp_op_def vp_ops_tensor[] = {
    {"Reshape", "", 5, reshape_shape, VP_OP_VIEW, vp_grad_reshape},
    {"Flatten", "", 1, flatten_shape, VP_OP_VIEW, vp_grad_reshape},
    {"Squeeze", "", 1, squeeze_shape, VP_OP_VIEW, vp_grad_reshape},
    {"Unsqueeze", "", 1, unsqueeze_shape, VP_OP_VIEW, vp_grad_reshape},
    {"Transpose", "", 1, transpose_shape, 0, vp_grad_transpose},
    {"Concat", "", 1, concat_shape, 0, vp_grad_concat},
    {"Split", "", 2, split_shape, 0, vp_grad_split},
    {"Slice", "", 1, slice_shape, 0, vp_grad_slice},
    {"Expand", "", 8, expand_shape, 0, vp_grad_expand},
    {"Tile", "", 6, tile_shape, 0, vp_grad_tile},
    {"Gather", "", 1, gather_shape, 0, vp_grad_gather},
    {"GatherElements", "", 11, gather_elements_shape, 0, vp_grad_gather_elements},
    {"Trilu", "", 14, trilu_shape, 0, vp_grad_trilu},
    {"Pad", "", 2, pad_shape, 0, vp_grad_pad},
    {0},
};
