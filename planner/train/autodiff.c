/* Reverse-mode autodiff over the IR.
 *
 * In: a graph with a scalar loss value and the trainable parameters (t->params).
 * Out: backward nodes appended after the forward ones (phase BACKWARD), and
 * t->grads[i] = d(loss)/d(params[i]), each with its parameter's shape and dtype.
 * Invariant: a gradient is built only for values that depend on a parameter and that
 * the loss depends on; integer values (shapes, indices) never carry gradients. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/grad.h"
#include "ir/graph_build.h"
#include "ir/infer.h"
#include "train/training.h"

struct vp_grad_ctx {
    vp_graph *g;
    char *requires;  /* per value: depends on a trainable parameter */
    int cur_node;    /* forward node being differentiated, for names */
    int counter;
};

vp_graph *vp_grad_graph(vp_grad_ctx *c) { return c->g; }

int vp_grad_needs(vp_grad_ctx *c, int node, int input) {
    const vp_node *n = &c->g->nodes[node];
    if (input < 0 || input >= n->n_inputs || n->inputs[input] < 0) return 0;
    return c->requires[n->inputs[input]];
}

int vp_grad_begin(vp_grad_ctx *c, int node, const char *op, const char *domain, int n_in, const int *in,
                  int n_out) {
    char name[512];
    snprintf(name, sizeof name, "%s_grad/%s_%d", node >= 0 ? c->g->nodes[node].name : "loss", op, c->counter++);
    /* standard ops we emit use opset-13 semantics (axes of ReduceSum, Squeeze as inputs) */
    int opset = domain && domain[0] ? 0 : (c->g->opset_onnx > 13 ? c->g->opset_onnx : 13);
    return vp_build_node(c->g, op, domain ? domain : "", name, n_in, in, n_out, VP_PHASE_BACKWARD, opset);
}

vp_status vp_grad_end(vp_grad_ctx *c, int bnode, int *out, vp_error *err) {
    vp_status s = vp_infer_node(c->g, bnode, 0, NULL, err);
    if (s) return s;
    const vp_node *n = &c->g->nodes[bnode];
    if (out)
        for (int k = 0; k < n->n_outputs; k++) out[k] = n->outputs[k];
    return VP_OK;
}

static vp_status emit(vp_grad_ctx *c, int node, const char *op, int n_in, const int *in, int *out, vp_error *err) {
    int b = vp_grad_begin(c, node, op, "", n_in, in, 1);
    if (b < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory building gradients");
    return vp_grad_end(c, b, out, err);
}

vp_status vp_grad_op1(vp_grad_ctx *c, int node, const char *op, int a, int *out, vp_error *err) {
    return emit(c, node, op, 1, &a, out, err);
}

vp_status vp_grad_op2(vp_grad_ctx *c, int node, const char *op, int a, int b, int *out, vp_error *err) {
    int in[2] = {a, b};
    return emit(c, node, op, 2, in, out, err);
}

static int const_filled(vp_graph *g, vp_dtype dt, int rank, const int64_t *dims, double x) {
    int64_t n = 1;
    for (int d = 0; d < rank; d++) n *= dims[d];
    if (dt != VP_F32 && dt != VP_F64) return -1; /* half types get a float32 constant and a Cast */
    void *p = calloc((size_t)(n ? n : 1), vp_dtype_size(dt));
    if (!p) return -1;
    for (int64_t i = 0; i < n; i++) {
        if (dt == VP_F32) ((float *)p)[i] = (float)x;
        else ((double *)p)[i] = x;
    }
    char stem[64];
    snprintf(stem, sizeof stem, "const_%s_%g", vp_dtype_name(dt), x);
    int id = vp_build_const(g, stem, dt, rank, dims, p);
    free(p);
    return id;
}

int vp_grad_const_scalar(vp_grad_ctx *c, vp_dtype dt, double v) { return const_filled(c->g, dt, 0, NULL, v); }

int vp_grad_const_ints(vp_grad_ctx *c, const int64_t *v, int n) {
    int64_t dims[1] = {n};
    return vp_build_const(c->g, "const_ints", VP_I64, 1, dims, v);
}

vp_status vp_grad_sum_to(vp_grad_ctx *c, int node, int gv, int like, int *out, vp_error *err) {
    vp_graph *g = c->g;
    const vp_value *G = &g->values[gv], *L = &g->values[like];
    int same = G->rank == L->rank;
    for (int d = 0; same && d < G->rank; d++) same = G->dims[d] == L->dims[d];
    if (same) {
        *out = gv;
        return VP_OK;
    }
    /* axes where the target broadcast: missing leading axes and size-1 axes */
    int64_t axes[VP_MAX_RANK];
    int n_axes = 0, lead = G->rank - L->rank;
    if (lead < 0) return vp_node_fail(err, VP_ERR_INVALID, &g->nodes[node], "gradient has lower rank than its input");
    for (int d = 0; d < G->rank; d++)
        if (d < lead || (L->dims[d - lead] == 1 && G->dims[d] != 1)) axes[n_axes++] = d;
    /* keepdims=0 when dropping the summed axes leaves exactly the target's dims (a bias
     * [N] from [B, T, N]): one ReduceSum, no Reshape after it */
    int drop = 1;
    for (int d = lead; drop && d < G->rank; d++) drop = L->dims[d - lead] != 1 || G->dims[d] == 1;
    int summed = gv;
    if (n_axes) {
        int ax = vp_grad_const_ints(c, axes, n_axes);
        int in[2] = {gv, ax};
        int b = vp_grad_begin(c, node, "ReduceSum", "", 2, in, 1);
        if (ax < 0 || b < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory building gradients");
        vp_status s = vp_node_add_attr_int(g, b, "keepdims", !drop);
        if (!s) s = vp_grad_end(c, b, &summed, err);
        if (s) return s;
        if (drop) {
            *out = summed;
            return VP_OK;
        }
    }
    L = &g->values[like];
    int shape = vp_grad_const_ints(c, L->dims, L->rank);
    if (shape < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory building gradients");
    return vp_grad_op2(c, node, "Reshape", summed, shape, out, err);
}

/* Marks values that depend on a trainable parameter through float values. */
static void propagate_requires(vp_graph *g, char *req) {
    for (int i = 0; i < g->n_nodes; i++) {
        const vp_node *n = &g->nodes[i];
        if (n->folded || (n->op && (n->op->flags & VP_OP_STOP_GRADIENT))) continue;
        int any = 0;
        for (int k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] >= 0 && req[n->inputs[k]]) any = 1;
        if (!any) continue;
        for (int k = 0; k < n->n_outputs; k++) {
            int v = n->outputs[k];
            if (v >= 0 && vp_dtype_is_float(g->values[v].dtype)) req[v] = 1;
        }
    }
}

vp_status vp_autodiff_blockers(const vp_graph *g, int **nodes, int *n_nodes, vp_error *err) {
    *nodes = NULL;
    *n_nodes = 0;
    char *req = calloc((size_t)g->n_values + 1, 1), *reaches = calloc((size_t)g->n_values + 1, 1);
    int *out = malloc(((size_t)g->n_nodes + 1) * sizeof *out);
    if (!req || !reaches || !out) {
        free(req);
        free(reaches);
        free(out);
        return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    }
    for (int v = 0; v < g->n_values; v++) {
        const vp_value *val = &g->values[v];
        req[v] = (val->flags & VP_VAL_INITIALIZER) && !(val->flags & VP_VAL_CONST) && vp_dtype_is_float(val->dtype);
    }
    propagate_requires((vp_graph *)g, req);
    for (int k = 0; k < g->n_outputs; k++) reaches[g->outputs[k]] = 1;
    for (int i = g->n_nodes - 1; i >= 0; i--) {
        const vp_node *n = &g->nodes[i];
        int any_out = 0, any_in = 0;
        for (int k = 0; k < n->n_outputs; k++) any_out |= n->outputs[k] >= 0 && reaches[n->outputs[k]] && req[n->outputs[k]];
        if (!any_out || n->folded) continue;
        for (int k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] >= 0 && req[n->inputs[k]]) reaches[n->inputs[k]] = any_in = 1;
        /* a training graph's own gradient and update ops are not for differentiating */
        int training_op = strstr(n->op_type, "Grad") || !strcmp(n->domain, "vplan");
        if (any_in && (!n->op || !n->op->grad) && !training_op) out[(*n_nodes)++] = i;
    }
    free(req);
    free(reaches);
    *nodes = out;
    return VP_OK;
}

static vp_status accumulate(vp_grad_ctx *c, int node, int *grads, int v, int gnew, vp_error *err) {
    if (grads[v] < 0) {
        grads[v] = gnew;
        return VP_OK;
    }
    return vp_grad_op2(c, node, "Add", grads[v], gnew, &grads[v], err);
}

vp_status vp_autodiff(vp_graph *g, vp_training *t, vp_error *err) {
    vp_status s = VP_OK;
    int n_fwd_nodes = g->n_nodes;
    int n_fwd_values = g->n_values;
    vp_grad_ctx c = {g, NULL, -1, 0};
    int *dy = NULL, *dx = NULL;
    char *reaches = calloc((size_t)n_fwd_values + 1, 1);
    int *grads = malloc(((size_t)n_fwd_values + 1) * sizeof *grads);
    c.requires = calloc((size_t)n_fwd_values + 1, 1);
    if (!reaches || !grads || !c.requires) {
        s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int v = 0; v < n_fwd_values; v++) grads[v] = -1;
    for (int i = 0; i < t->n_params; i++) c.requires[t->params[i]] = 1;
    propagate_requires(g, c.requires);
    if (!c.requires[t->loss]) {
        s = vp_fail(err, VP_ERR_INVALID, "%s: the loss '%s' does not depend on any trainable parameter", g->path,
                    g->values[t->loss].name);
        goto done;
    }
    reaches[t->loss] = 1;
    for (int i = n_fwd_nodes - 1; i >= 0; i--) {
        const vp_node *n = &g->nodes[i];
        int any = 0;
        for (int k = 0; k < n->n_outputs; k++)
            if (n->outputs[k] >= 0 && reaches[n->outputs[k]]) any = 1;
        if (!any) continue;
        for (int k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] >= 0 && c.requires[n->inputs[k]]) reaches[n->inputs[k]] = 1;
    }

    /* seed: d(loss)/d(loss) = 1 */
    {
        const vp_value *L = &g->values[t->loss];
        int one = const_filled(g, L->dtype, L->rank, L->dims, 1.0);
        if (one < 0) {
            s = vp_fail(err, VP_ERR_UNSUPPORTED, "%s: the loss '%s' must be float32 or float64, not %s", g->path, L->name,
                        vp_dtype_name(L->dtype));
            goto done;
        }
        grads[t->loss] = one;
    }
    t->first_backward_node = g->n_nodes;
    /* dy and dx sized for the widest node (a DenseNet Concat has over a hundred inputs) */
    int arity = 1;
    for (int i = 0; i < n_fwd_nodes; i++) {
        if (g->nodes[i].n_inputs > arity) arity = g->nodes[i].n_inputs;
        if (g->nodes[i].n_outputs > arity) arity = g->nodes[i].n_outputs;
    }
    dy = malloc((size_t)arity * sizeof *dy);
    dx = malloc((size_t)arity * sizeof *dx);
    if (!dy || !dx) s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
    for (int i = n_fwd_nodes - 1; i >= 0 && !s; i--) {
        int any_dy = 0, any_need = 0;
        const vp_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_outputs; k++) {
            int v = n->outputs[k];
            dy[k] = v >= 0 && v < n_fwd_values && reaches[v] && c.requires[v] ? grads[v] : -1;
            any_dy |= dy[k] >= 0;
        }
        for (int k = 0; k < n->n_inputs; k++) {
            dx[k] = -1;
            any_need |= vp_grad_needs(&c, i, k);
        }
        if (!any_dy || !any_need) continue;
        if (!n->op || !n->op->grad) {
            s = vp_node_fail(err, VP_ERR_UNSUPPORTED, n,
                             "has no gradient rule, and it lies on the path from a trainable parameter to the loss "
                             "(freeze the parameters before it with --freeze, or file the op)");
            vp_error_prefix(err, "%s: ", g->path);
            break;
        }
        c.cur_node = i;
        s = n->op->grad(&c, i, dy, dx, err);
        if (s) break;
        for (int k = 0; k < g->nodes[i].n_inputs && !s; k++) {
            n = &g->nodes[i]; /* builders and accumulation grow the node array */
            int v = n->inputs[k];
            if (dx[k] < 0 || !vp_grad_needs(&c, i, k)) continue;
            const vp_value *X = &g->values[v], *G = &g->values[dx[k]];
            int same = X->rank == G->rank && X->dtype == G->dtype;
            for (int d = 0; same && d < X->rank; d++) same = X->dims[d] == G->dims[d];
            if (!same) { /* a broken invariant of a gradient rule: report it, never go on */
                char a[128], b[128];
                s = vp_node_fail(err, VP_ERR_RUNTIME, n, "gradient rule made %s %s for input '%s' of %s %s",
                                 vp_dtype_name(G->dtype), vp_shape_str(G->rank, G->dims, a, sizeof a), X->name,
                                 vp_dtype_name(X->dtype), vp_shape_str(X->rank, X->dims, b, sizeof b));
                break;
            }
            s = accumulate(&c, i, grads, v, dx[k], err);
        }
    }
    if (s) goto done;
    t->grads = malloc(((size_t)t->n_params + 1) * sizeof *t->grads);
    if (!t->grads) {
        s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int i = 0; i < t->n_params; i++) t->grads[i] = grads[t->params[i]];
done:
    free(dy);
    free(dx);
    free(reaches);
    free(grads);
    free(c.requires);
    return s;
}
