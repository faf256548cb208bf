/* Loop and If expanded in place (control.h says what comes in and goes out).
 *
 * The body's nodes are appended to the graph one iteration at a time and inferred as
 * they come, so that an iteration's condition is known (folded) before the next is made;
 * at the end the appended block is moved to where the Loop stood and the Loop removed.
 * Body values are mapped to graph values: formal inputs to the iteration number, the
 * condition and the carried values; values of the enclosing scope by name; a body's own
 * initializers to constants made once. */
#include "ir/control.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/graph_build.h"
#include "ir/host.h"
#include "ir/infer.h"
#include "ir/op_registry.h"

enum { MAX_UNROLLED_NODES = 1 << 20 };

int vp_control_is(const vp_node *n) {
    return !n->domain[0] && (!strcmp(n->op_type, "Loop") || !strcmp(n->op_type, "If"));
}

static const vp_graph *graph_attr(const vp_node *n, const char *name) {
    const vp_attr *a = vp_node_attr(n, name);
    return a ? a->graph : NULL;
}

static int opset13(const vp_graph *g) { return g->opset_onnx > 13 ? g->opset_onnx : 13; }

/* Maps body values that no body node defines: the enclosing scope's by name (they must
 * be known: made before the node), the body's initializers as constants. */
static vp_status map_free_values(vp_graph *g, int node, const vp_graph *body, int *map, vp_error *err) {
    for (int v = 0; v < body->n_values; v++) {
        const vp_value *bv = &body->values[v];
        if (map[v] >= 0 || bv->producer >= 0 || (bv->flags & VP_VAL_INPUT)) continue;
        if (bv->flags & VP_VAL_OUTER) {
            int id = vp_graph_find_value(g, bv->name);
            if (id < 0 || !vp_value_known(&g->values[id]))
                return vp_node_fail(err, VP_ERR_UNSUPPORTED, &g->nodes[node],
                                    "its graph '%s' reads '%s', which nothing before the node defines", body->graph_name,
                                    bv->name);
            map[v] = id;
        } else if (bv->data || !vp_value_numel(bv)) {
            map[v] = vp_build_const(g, bv->name, bv->dtype, bv->rank, bv->dims, bv->data);
            if (map[v] < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
        }
    }
    return VP_OK;
}

/* Appends one copy of body's nodes, reading map and writing the outputs into it. */
static vp_status inline_body(vp_graph *g, int node, const vp_graph *body, int *map, const char *tag, vp_error *err) {
    int width = 1;
    for (int j = 0; j < body->n_nodes; j++)
        if (body->nodes[j].n_inputs > width) width = body->nodes[j].n_inputs;
    int *ins = malloc((size_t)width * sizeof *ins);
    if (!ins) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    vp_status s = VP_OK;
    for (int j = 0; j < body->n_nodes && !s; j++) {
        const vp_node *bn = &body->nodes[j];
        if (vp_control_is(bn)) {
            s = vp_node_fail(err, VP_ERR_UNSUPPORTED, &g->nodes[node], "its graph '%s' holds %s '%s': nested control flow is not supported",
                             body->graph_name, bn->op_type, bn->name);
            break;
        }
        for (int k = 0; k < bn->n_inputs && !s; k++) {
            ins[k] = bn->inputs[k] >= 0 ? map[bn->inputs[k]] : -1;
            if (bn->inputs[k] >= 0 && ins[k] < 0)
                s = vp_node_fail(err, VP_ERR_INVALID, &g->nodes[node], "its graph '%s': input '%s' of '%s' has no value",
                                 body->graph_name, body->values[bn->inputs[k]].name, bn->name);
        }
        if (s) break;
        char name[1024];
        snprintf(name, sizeof name, "%s/%s", tag, bn->name);
        int id = vp_build_node(g, bn->op_type, bn->domain, name, bn->n_inputs, ins, bn->n_outputs, VP_PHASE_FORWARD, bn->opset);
        if (id < 0 || vp_node_copy_attrs_from(g, id, bn)) {
            s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
            break;
        }
        for (int k = 0; k < bn->n_outputs; k++)
            if (bn->outputs[k] < 0) g->nodes[id].outputs[k] = -1;
        s = vp_infer_node(g, id, 0, NULL, err);
        for (int k = 0; k < bn->n_outputs && !s; k++)
            if (bn->outputs[k] >= 0) map[bn->outputs[k]] = g->nodes[id].outputs[k];
    }
    free(ins);
    return s;
}

/* Adds op (one output, the given value id) and infers it. */
static vp_status add_node_into(vp_graph *g, const char *op, const char *name, int n_in, const int *in, int out, int axis,
                               vp_error *err) {
    int id = vp_graph_add_node(g, op, "", name, n_in, in, 1, &out);
    if (id < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    g->nodes[id].opset = opset13(g);
    if (axis >= 0 && vp_node_add_attr_int(g, id, "axis", axis)) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    return vp_infer_node(g, id, 0, NULL, err);
}

static int producer_of(const vp_graph *g, int v) {
    for (int i = g->n_nodes - 1; i >= 0; i--) /* nodes appended here are not linked yet */
        for (int k = 0; k < g->nodes[i].n_outputs; k++)
            if (g->nodes[i].outputs[k] == v) return i;
    return -1;
}

/* Whether v's data is known, computing it when it follows from data the caller bound
 * (a condition that is the Identity of a fed input, a trip count computed from fed
 * Range bounds): run by its producer's CPU kernel and kept as fed data, which shape
 * functions read and which nothing folds away. */
static int eval_fed(vp_graph *g, int v, int depth) {
    if (g->values[v].data) return 1;
    int p = producer_of(g, v);
    if (depth > 64 || p < 0 || vp_value_numel(&g->values[v]) > 64 || !vp_value_known(&g->values[v])) return 0;
    const vp_node *n = &g->nodes[p];
    if (!n->op || (n->op->flags & VP_OP_NO_FOLD) || n->n_outputs != 1) return 0;
    vp_cpu_fn kernel = vp_host_get(n, "computing a Loop's or If's bound data")->kernel(n->op);
    if (!kernel) return 0;
    for (int k = 0; k < n->n_inputs; k++)
        if (n->inputs[k] >= 0 && !eval_fed(g, n->inputs[k], depth + 1)) return 0;
    vp_tensor *tin = malloc(((size_t)n->n_inputs + 1) * sizeof *tin), out = vp_value_tensor(&g->values[v]);
    const vp_tensor **pin = malloc(((size_t)n->n_inputs + 1) * sizeof *pin);
    vp_tensor *pout[1] = {&out};
    size_t bytes = vp_tensor_nbytes(&out);
    out.data = calloc(1, bytes ? bytes : 1);
    int ok = tin && pin && out.data;
    for (int k = 0; ok && k < n->n_inputs; k++) {
        pin[k] = NULL;
        if (n->inputs[k] < 0) continue;
        tin[k] = vp_value_tensor(&g->values[n->inputs[k]]);
        pin[k] = &tin[k];
    }
    vp_error e;
    ok = ok && !kernel(n, pin, pout, &e);
    free(tin);
    free(pin);
    if (!ok) {
        free(out.data);
        return 0;
    }
    vp_value_set_data(g, v, out.data, VP_DATA_HEAP);
    g->values[v].flags |= VP_VAL_FED;
    return 1;
}

/* A scalar read from a value whose data is known: -1 when it is not. */
static int known_scalar(vp_graph *g, int v, int64_t *out) {
    if (!eval_fed(g, v, 0)) return -1;
    const vp_value *x = &g->values[v];
    if (vp_value_numel(x) != 1) return -1;
    switch (x->dtype) {
    case VP_I64: *out = *(const int64_t *)x->data; return 0;
    case VP_I32: *out = *(const int32_t *)x->data; return 0;
    case VP_BOOL:
    case VP_U8: *out = *(const uint8_t *)x->data; return 0;
    default: return -1;
    }
}

typedef struct loop_state {
    int n_carried, n_scans, iterations;
    int *carried;  /* [n_carried] the values after the last iteration */
    int *scans;    /* [n_scans][trip] each iteration's scan values */
    int *map;      /* [body->n_values] */
} loop_state;

static vp_status unroll(vp_graph *g, int node, const vp_graph *body, int64_t trip, loop_state *ls, vp_error *err) {
    const vp_node *n = &g->nodes[node];
    char loop_name[512];
    snprintf(loop_name, sizeof loop_name, "%s", n->name);
    int cond = n->n_inputs > 1 ? n->inputs[1] : -1;
    for (int c = 0; c < ls->n_carried; c++) ls->carried[c] = g->nodes[node].inputs[2 + c];
    for (int64_t it = 0; it < trip; it++) {
        int64_t go = 1;
        if (cond >= 0 && known_scalar(g, cond, &go))
            return vp_node_fail(err, VP_ERR_UNSUPPORTED, &g->nodes[node],
                                "the condition '%s' of iteration %lld depends on the input data; only a Loop whose "
                                "trip count and condition are known ahead of time is unrolled",
                                g->values[cond].name, (long long)it);
        if (!go) break;
        if ((it + 1) * (int64_t)body->n_nodes > MAX_UNROLLED_NODES)
            return vp_node_fail(err, VP_ERR_UNSUPPORTED, &g->nodes[node],
                                "unrolling %lld iterations of %d nodes would make over %d nodes", (long long)trip,
                                body->n_nodes, MAX_UNROLLED_NODES);
        for (int v = 0; v < body->n_values; v++) ls->map[v] = -1;
        int64_t zero = 0;
        ls->map[body->inputs[0]] = vp_build_const(g, "loop_iter", VP_I64, 0, &zero, &it);
        if (body->inputs[1] >= 0) {
            uint8_t yes = 1;
            ls->map[body->inputs[1]] = cond >= 0 ? cond : vp_build_const(g, "loop_cond", VP_BOOL, 0, &zero, &yes);
        }
        for (int c = 0; c < ls->n_carried; c++) ls->map[body->inputs[2 + c]] = ls->carried[c];
        if (ls->map[body->inputs[0]] < 0 || (body->inputs[1] >= 0 && ls->map[body->inputs[1]] < 0))
            return vp_fail(err, VP_ERR_NOMEM, "out of memory");
        vp_status s = map_free_values(g, node, body, ls->map, err);
        char tag[600];
        snprintf(tag, sizeof tag, "%s/%lld", loop_name, (long long)it);
        if (!s) s = inline_body(g, node, body, ls->map, tag, err);
        if (s) return s;
        cond = body->outputs[0] >= 0 ? ls->map[body->outputs[0]] : -1;
        for (int c = 0; c < ls->n_carried; c++) ls->carried[c] = ls->map[body->outputs[1 + c]];
        for (int k = 0; k < ls->n_scans; k++) ls->scans[k * trip + it] = ls->map[body->outputs[1 + ls->n_carried + k]];
        ls->iterations++;
    }
    return VP_OK;
}

/* The Loop's outputs from the unrolled values: the carried ones as they end, each scan
 * stacked along a new first axis. */
static vp_status loop_outputs(vp_graph *g, int node, const int *outs, int64_t trip, loop_state *ls, vp_error *err) {
    char name[600];
    vp_status s = VP_OK;
    for (int c = 0; c < ls->n_carried && !s; c++) {
        if (outs[c] < 0) continue;
        snprintf(name, sizeof name, "%s/final_%d", g->nodes[node].name, c);
        s = add_node_into(g, "Identity", name, 1, &ls->carried[c], outs[c], -1, err);
    }
    for (int k = 0; k < ls->n_scans && !s; k++) {
        int out = outs[ls->n_carried + k];
        if (out < 0) continue;
        if (!ls->iterations)
            return vp_node_fail(err, VP_ERR_UNSUPPORTED, &g->nodes[node],
                                "runs no iteration, so its scan output '%s' has no shape", g->values[out].name);
        int *parts = malloc((size_t)ls->iterations * sizeof *parts);
        int64_t zero = 0, one = 1;
        int axes = vp_build_const(g, "loop_axes", VP_I64, 1, &one, &zero);
        if (!parts || axes < 0) {
            free(parts);
            return vp_fail(err, VP_ERR_NOMEM, "out of memory");
        }
        for (int it = 0; it < ls->iterations && !s; it++) {
            int in[2] = {ls->scans[k * trip + it], axes};
            snprintf(name, sizeof name, "%s/scan_%d/%d", g->nodes[node].name, k, it);
            int id = vp_build_node(g, "Unsqueeze", "", name, 2, in, 1, VP_PHASE_FORWARD, opset13(g));
            if (id < 0) s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
            else s = vp_infer_node(g, id, 0, NULL, err);
            if (!s) parts[it] = g->nodes[id].outputs[0];
        }
        snprintf(name, sizeof name, "%s/scan_%d", g->nodes[node].name, k);
        if (!s) s = add_node_into(g, "Concat", name, ls->iterations, parts, out, 0, err);
        free(parts);
    }
    return s;
}

static vp_status expand_loop(vp_graph *g, int node, int *outs, vp_error *err) {
    const vp_node *n = &g->nodes[node];
    const vp_graph *body = graph_attr(n, "body");
    if (!body) return vp_node_fail(err, VP_ERR_INVALID, n, "has no body graph");
    int n_carried = n->n_inputs - 2;
    int n_scans = body->n_outputs - 1 - n_carried;
    if (n_carried < 0 || n_scans < 0 || body->n_inputs != 2 + n_carried || n->n_outputs != n_carried + n_scans)
        return vp_node_fail(err, VP_ERR_INVALID, n, "%d inputs and %d outputs do not fit its body's %d inputs and %d outputs",
                            n->n_inputs, n->n_outputs, body->n_inputs, body->n_outputs);
    int64_t trip = 0;
    if (n->inputs[0] < 0)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n,
                            "has no trip count (a while loop); only a Loop whose trip count is known ahead of time is "
                            "unrolled");
    if (known_scalar(g, n->inputs[0], &trip))
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n,
                            "its trip count '%s' depends on the input data; only a Loop whose trip count is known "
                            "ahead of time (after shape inference) is unrolled",
                            g->values[n->inputs[0]].name);
    if (trip < 0) trip = 0;
    loop_state ls = {n_carried, n_scans, 0, NULL, NULL, NULL};
    ls.carried = malloc(((size_t)n_carried + 1) * sizeof *ls.carried);
    ls.map = malloc(((size_t)body->n_values + 1) * sizeof *ls.map);
    ls.scans = trip <= MAX_UNROLLED_NODES ? malloc(((size_t)n_scans * (size_t)trip + 1) * sizeof *ls.scans) : NULL;
    vp_status s = VP_OK;
    if (trip > MAX_UNROLLED_NODES)
        s = vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "a trip count of %lld is too many iterations to unroll", (long long)trip);
    else if (!ls.carried || !ls.map || !ls.scans)
        s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
    if (!s) s = unroll(g, node, body, trip, &ls, err);
    if (!s) s = loop_outputs(g, node, outs, trip, &ls, err);
    free(ls.carried);
    free(ls.map);
    free(ls.scans);
    return s;
}

static vp_status expand_if(vp_graph *g, int node, int *outs, vp_error *err) {
    const vp_node *n = &g->nodes[node];
    int64_t cond = 0;
    if (n->n_inputs < 1 || n->inputs[0] < 0) return vp_node_fail(err, VP_ERR_INVALID, n, "has no condition");
    if (known_scalar(g, n->inputs[0], &cond))
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n,
                            "its condition '%s' depends on the input data; only an If whose condition is known ahead "
                            "of time (after shape inference) is expanded",
                            g->values[n->inputs[0]].name);
    const char *which = cond ? "then_branch" : "else_branch";
    const vp_graph *branch = graph_attr(n, which);
    if (!branch) return vp_node_fail(err, VP_ERR_INVALID, n, "has no %s graph", which);
    if (branch->n_outputs != n->n_outputs)
        return vp_node_fail(err, VP_ERR_INVALID, n, "has %d outputs, its %s %d", n->n_outputs, which, branch->n_outputs);
    int *map = malloc(((size_t)branch->n_values + 1) * sizeof *map);
    if (!map) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    for (int v = 0; v < branch->n_values; v++) map[v] = -1;
    char tag[600];
    snprintf(tag, sizeof tag, "%s/%s", n->name, cond ? "then" : "else");
    vp_status s = map_free_values(g, node, branch, map, err);
    if (!s) s = inline_body(g, node, branch, map, tag, err);
    for (int k = 0; k < branch->n_outputs && !s; k++) {
        if (outs[k] < 0) continue;
        char name[700];
        snprintf(name, sizeof name, "%s/out_%d", tag, k);
        s = add_node_into(g, "Identity", name, 1, &map[branch->outputs[k]], outs[k], -1, err);
    }
    free(map);
    return s;
}

vp_status vp_control_expand(vp_graph *g, int node, int *n_new, vp_error *err) {
    *n_new = 0;
    int first_new = g->n_nodes, n_out = g->nodes[node].n_outputs;
    int *outs = malloc(((size_t)n_out + 1) * sizeof *outs);
    if (!outs) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    /* the node gives up its outputs, which the expansion's last nodes produce */
    for (int k = 0; k < n_out; k++) {
        outs[k] = g->nodes[node].outputs[k];
        g->nodes[node].outputs[k] = -1;
    }
    int is_loop = !strcmp(g->nodes[node].op_type, "Loop");
    vp_status s = is_loop ? expand_loop(g, node, outs, err) : expand_if(g, node, outs, err);
    if (s) { /* as it was: the node keeps its outputs, what was appended goes */
        for (int k = 0; k < n_out; k++) g->nodes[node].outputs[k] = outs[k];
        vp_build_unsplice(g, first_new);
    } else {
        *n_new = g->n_nodes - first_new;
        s = vp_build_splice(g, node, first_new, err);
    }
    free(outs);
    return s;
}
