/* Helpers the gradient builders share: constants, reshapes, reductions, attribute
 * copies, and the growth of a forward node by an optional output the backward pass
 * needs.  Each builds one or two standard nodes through planner/grad.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/graph_build.h"
#include "ir/infer.h"
#include "ops/grad_rules.h"
#include "ops/op_semantics.h"

int vp_gr_in(vp_grad_ctx *c, int node, int k) {
    const vp_node *n = &vp_grad_graph(c)->nodes[node];
    return k < n->n_inputs ? n->inputs[k] : -1;
}

int vp_gr_out(vp_grad_ctx *c, int node, int k) {
    const vp_node *n = &vp_grad_graph(c)->nodes[node];
    return k < n->n_outputs ? n->outputs[k] : -1;
}

vp_gr_shape vp_gr_shape_of(vp_grad_ctx *c, int v) {
    const vp_value *x = vp_gr_val(c, v);
    vp_gr_shape s = {x->rank, {0}, x->dtype};
    memcpy(s.dims, x->dims, sizeof s.dims);
    return s;
}

const vp_value *vp_gr_val(vp_grad_ctx *c, int v) { return &vp_grad_graph(c)->values[v]; }

const vp_node *vp_gr_node(vp_grad_ctx *c, int node) { return &vp_grad_graph(c)->nodes[node]; }

vp_status vp_gr_nomem(vp_error *err) { return vp_fail(err, VP_ERR_NOMEM, "out of memory building gradients"); }

vp_status vp_gr_attr_int(vp_grad_ctx *c, int bnode, const char *name, int64_t v, vp_error *err) {
    return vp_node_add_attr_int(vp_grad_graph(c), bnode, name, v) ? vp_gr_nomem(err) : VP_OK;
}

vp_status vp_gr_attr_float(vp_grad_ctx *c, int bnode, const char *name, float v, vp_error *err) {
    return vp_node_add_attr_float(vp_grad_graph(c), bnode, name, v) ? vp_gr_nomem(err) : VP_OK;
}

vp_status vp_gr_attr_ints(vp_grad_ctx *c, int bnode, const char *name, const int64_t *v, int n, vp_error *err) {
    return vp_node_add_attr_ints(vp_grad_graph(c), bnode, name, v, n) ? vp_gr_nomem(err) : VP_OK;
}

vp_status vp_gr_cast(vp_grad_ctx *c, int node, int x, vp_dtype to, int *out, vp_error *err) {
    if (vp_gr_val(c, x)->dtype == to) {
        *out = x;
        return VP_OK;
    }
    int b = vp_grad_begin(c, node, "Cast", "", 1, &x, 1);
    if (b < 0) return vp_gr_nomem(err);
    vp_status s = vp_gr_attr_int(c, b, "to", to, err);
    return s ? s : vp_grad_end(c, b, out, err);
}

vp_status vp_gr_scalar(vp_grad_ctx *c, int node, vp_dtype dt, double v, int *out, vp_error *err) {
    int wide = dt == VP_F64 ? VP_F64 : VP_F32;
    int k = vp_grad_const_scalar(c, wide, v);
    if (k < 0) return vp_gr_nomem(err);
    return vp_gr_cast(c, node, k, dt, out, err);
}

vp_status vp_gr_ints(vp_grad_ctx *c, const int64_t *v, int n, int *out, vp_error *err) {
    *out = vp_grad_const_ints(c, v, n);
    return *out < 0 ? vp_gr_nomem(err) : VP_OK;
}

vp_status vp_gr_scale(vp_grad_ctx *c, int node, int x, double v, int *out, vp_error *err) {
    if (v == 1.0) {
        *out = x;
        return VP_OK;
    }
    int k;
    vp_status s = vp_gr_scalar(c, node, vp_gr_val(c, x)->dtype, v, &k, err);
    return s ? s : vp_grad_op2(c, node, "Mul", x, k, out, err);
}

vp_status vp_gr_op_scalar(vp_grad_ctx *c, int node, const char *op, int a, double v, int *out, vp_error *err) {
    int k;
    vp_status s = vp_gr_scalar(c, node, vp_gr_val(c, a)->dtype, v, &k, err);
    return s ? s : vp_grad_op2(c, node, op, a, k, out, err);
}

vp_status vp_gr_where(vp_grad_ctx *c, int node, int cond, int a, int b, int *out, vp_error *err) {
    int in[3] = {cond, a, b};
    int w = vp_grad_begin(c, node, "Where", "", 3, in, 1);
    return w < 0 ? vp_gr_nomem(err) : vp_grad_end(c, w, out, err);
}

vp_status vp_gr_times_dy(vp_grad_ctx *c, int node, const int *dy, int f, int *dx, vp_error *err) {
    if (!vp_grad_needs(c, node, 0)) return VP_OK;
    return vp_grad_op2(c, node, "Mul", dy[0], f, &dx[0], err);
}

vp_status vp_gr_ms2(vp_grad_ctx *c, int node, const char *op, int a, int b, int *out, vp_error *err) {
    int in[2] = {a, b};
    int n = vp_grad_begin(c, node, op, "com.microsoft", 2, in, 1);
    return n < 0 ? vp_gr_nomem(err) : vp_grad_end(c, n, out, err);
}

/* An op taking x and one int64 vector input (Reshape, Expand, Transpose-free ops). */
static vp_status op_with_ints(vp_grad_ctx *c, int node, const char *op, int x, int n, const int64_t *v, int *out,
                              vp_error *err) {
    int k;
    vp_status s = vp_gr_ints(c, v, n, &k, err);
    return s ? s : vp_grad_op2(c, node, op, x, k, out, err);
}

static int same_dims(const vp_value *v, int rank, const int64_t *dims) {
    if (v->rank != rank) return 0;
    for (int d = 0; d < rank; d++)
        if (v->dims[d] != dims[d]) return 0;
    return 1;
}

vp_status vp_gr_reshape(vp_grad_ctx *c, int node, int x, int rank, const int64_t *dims, int *out, vp_error *err) {
    if (same_dims(vp_gr_val(c, x), rank, dims)) {
        *out = x;
        return VP_OK;
    }
    return op_with_ints(c, node, "Reshape", x, rank, dims, out, err);
}

vp_status vp_gr_expand(vp_grad_ctx *c, int node, int x, int rank, const int64_t *dims, int *out, vp_error *err) {
    if (same_dims(vp_gr_val(c, x), rank, dims)) {
        *out = x;
        return VP_OK;
    }
    return op_with_ints(c, node, "Expand", x, rank, dims, out, err);
}

vp_status vp_gr_transpose(vp_grad_ctx *c, int node, int x, int rank, const int64_t *perm, int *out, vp_error *err) {
    int b = vp_grad_begin(c, node, "Transpose", "", 1, &x, 1);
    if (b < 0) return vp_gr_nomem(err);
    vp_status s = vp_gr_attr_ints(c, b, "perm", perm, rank, err);
    return s ? s : vp_grad_end(c, b, out, err);
}

vp_status vp_gr_reduce_sum(vp_grad_ctx *c, int node, int x, int n_axes, const int64_t *axes, int keepdims, int *out,
                           vp_error *err) {
    int ax, b;
    vp_status s = vp_gr_ints(c, axes, n_axes, &ax, err);
    if (s) return s;
    int in[2] = {x, ax};
    if ((b = vp_grad_begin(c, node, "ReduceSum", "", 2, in, 1)) < 0) return vp_gr_nomem(err);
    if ((s = vp_gr_attr_int(c, b, "keepdims", keepdims, err))) return s;
    return vp_grad_end(c, b, out, err);
}

vp_status vp_gr_zeros(vp_grad_ctx *c, int node, vp_dtype dt, int rank, const int64_t *dims, int *out, vp_error *err) {
    int z;
    vp_status s = vp_gr_scalar(c, node, dt, 0.0, &z, err);
    if (s) return s;
    return op_with_ints(c, node, "Expand", z, rank, dims, out, err);
}

vp_status vp_gr_sum_to_dims(vp_grad_ctx *c, int node, int g, int rank, const int64_t *dims, int *out, vp_error *err) {
    const vp_value *G = vp_gr_val(c, g);
    int lead = G->rank - rank;
    if (lead < 0)
        return vp_node_fail(err, VP_ERR_INVALID, vp_gr_node(c, node), "gradient has lower rank than its input");
    int64_t axes[VP_MAX_RANK];
    int n_axes = 0;
    for (int d = 0; d < G->rank; d++)
        if (d < lead || (dims[d - lead] == 1 && G->dims[d] != 1)) axes[n_axes++] = d;
    /* keepdims=0 when dropping the summed axes leaves exactly dims: no Reshape after */
    int drop = 1;
    for (int d = lead; drop && d < G->rank; d++) drop = dims[d - lead] != 1 || G->dims[d] == 1;
    int summed = g;
    vp_status s = n_axes ? vp_gr_reduce_sum(c, node, g, n_axes, axes, !drop, &summed, err) : VP_OK;
    return s ? s : vp_gr_reshape(c, node, summed, rank, dims, out, err);
}

/* Input 1 of a binary op before opset 7 broadcasts the legacy way (from attribute axis
 * on): its dims at input 0's rank, which numpy broadcasting then treats alike. */
static vp_status legacy_dims(vp_grad_ctx *c, int node, int *rank, int64_t *dims, vp_error *err) {
    const vp_node *n = vp_gr_node(c, node);
    const vp_value *a = vp_gr_val(c, n->inputs[0]), *b = vp_gr_val(c, n->inputs[1]);
    if (!vp_ew_legacy_shape(n, !strcmp(n->op_type, "PRelu"), a->rank, a->dims, b->rank, b->dims, dims))
        return vp_node_fail(err, VP_ERR_INVALID, n, "input 1 does not broadcast onto input 0");
    *rank = a->rank;
    return VP_OK;
}

static int legacy_operand(vp_grad_ctx *c, int node, int k) {
    const vp_node *n = vp_gr_node(c, node);
    return k == 1 && n->n_inputs == 2 && vp_ew_is_legacy(n);
}

vp_status vp_gr_operand(vp_grad_ctx *c, int node, int k, int *out, vp_error *err) {
    *out = vp_gr_in(c, node, k);
    if (!legacy_operand(c, node, k)) return VP_OK;
    int rank;
    int64_t dims[VP_MAX_RANK];
    vp_status s = legacy_dims(c, node, &rank, dims, err);
    return s ? s : vp_gr_reshape(c, node, *out, rank, dims, out, err);
}

vp_status vp_gr_to_input(vp_grad_ctx *c, int node, int g, int k, int *dx, vp_error *err) {
    if (!vp_grad_needs(c, node, k)) return VP_OK;
    if (!legacy_operand(c, node, k)) return vp_grad_sum_to(c, node, g, vp_gr_in(c, node, k), &dx[k], err);
    int rank, t;
    int64_t dims[VP_MAX_RANK];
    vp_status s = legacy_dims(c, node, &rank, dims, err);
    if (!s) s = vp_gr_sum_to_dims(c, node, g, rank, dims, &t, err);
    const vp_value *b = vp_gr_val(c, vp_gr_in(c, node, k));
    int64_t bdims[VP_MAX_RANK];
    memcpy(bdims, b->dims, sizeof bdims);
    return s ? s : vp_gr_reshape(c, node, t, b->rank, bdims, &dx[k], err);
}

vp_status vp_gr_copy_attrs(vp_grad_ctx *c, int from, int to, vp_error *err) {
    vp_graph *g = vp_grad_graph(c);
    for (int i = 0; i < g->nodes[from].n_attrs; i++) {
        const vp_attr *a = &g->nodes[from].attrs[i];
        vp_status s = VP_OK;
        switch (a->type) {
        case VP_ATTR_INT: s = vp_node_add_attr_int(g, to, a->name, a->i); break;
        case VP_ATTR_FLOAT: s = vp_node_add_attr_float(g, to, a->name, a->f); break;
        case VP_ATTR_INTS: s = vp_node_add_attr_ints(g, to, a->name, a->ints, a->n); break;
        case VP_ATTR_STRING: s = vp_node_add_attr_string(g, to, a->name, a->s); break;
        default:
            return vp_node_fail(err, VP_ERR_UNSUPPORTED, &g->nodes[from],
                                "attribute '%s' has a type the gradient builder cannot copy", a->name);
        }
        if (s) return vp_gr_nomem(err);
    }
    return VP_OK;
}

vp_status vp_gr_forward_output(vp_grad_ctx *c, int node, int k, const char *suffix, int *out, vp_error *err) {
    vp_graph *g = vp_grad_graph(c);
    if ((*out = vp_gr_out(c, node, k)) >= 0) return VP_OK;
    char name[600];
    snprintf(name, sizeof name, "%s/%s", g->nodes[node].name, suffix);
    int v = vp_graph_add_unique_value(g, name);
    if (v < 0) return vp_gr_nomem(err);
    vp_node *n = &g->nodes[node];
    if (k >= n->n_outputs) {
        int *o = realloc(n->outputs, (size_t)(k + 1) * sizeof *o);
        if (!o) return vp_gr_nomem(err);
        for (int j = n->n_outputs; j <= k; j++) o[j] = -1;
        n->outputs = o;
        n->n_outputs = k + 1;
    }
    n->outputs[k] = v;
    g->values[v].producer = node;
    *out = v;
    return vp_build_finish(g, node, NULL, err);
}

/* Axes a Reduce* node takes as an input: ReduceSum from opset 13, the others from 18. */
static int axes_are_input(const vp_node *n) { return n->opset >= (strcmp(n->op_type, "ReduceSum") ? 18 : 13); }

vp_status vp_gr_reduce_axes(vp_grad_ctx *c, int node, int *reduced, int *noop, vp_error *err) {
    vp_graph *g = vp_grad_graph(c);
    const vp_node *n = &g->nodes[node];
    int rank = g->values[n->inputs[0]].rank;
    int64_t axes[VP_MAX_RANK];
    int k = -1;
    *noop = 0;
    if (axes_are_input(n)) {
        if (vp_shape_in(g, n, 1)) {
            vp_status s = vp_shape_const_ints(g, n, 1, axes, VP_MAX_RANK, &k, err);
            if (s) return s;
        }
    } else {
        const int64_t *p = NULL;
        k = vp_attr_ints(n, "axes", &p);
        if (k > VP_MAX_RANK) return vp_node_fail(err, VP_ERR_INVALID, n, "has %d axes", k);
        for (int i = 0; i < k; i++) axes[i] = p[i];
    }
    if (k <= 0 && vp_attr_int(n, "noop_with_empty_axes", 0)) *noop = 1;
    for (int d = 0; d < rank; d++) reduced[d] = k <= 0;
    for (int i = 0; i < k; i++) {
        int a;
        vp_status s = vp_shape_axis(n, axes[i], rank, &a, err);
        if (s) return s;
        reduced[a] = 1;
    }
    return VP_OK;
}
