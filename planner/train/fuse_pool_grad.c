/* MaxPool of a Relu output, differentiated without keeping the Relu output.
 *
 * In: a training graph after autodiff.  Out: the same graph where each match of
 *
 *     R = Relu(X);  P = MaxPool(R);  ...  dX = ReluGrad(vplan.MaxPoolInputGrad(dP, R), R)
 *
 * reads R no more in the backward:
 *
 *     R = Relu(X);  P, A = vplan.MaxPoolArgmax(R);  ...  dX = vplan.MaxPoolReluGrad(dP, A, P)
 *
 * A (uint8, P's shape) records which kernel offset held each window's maximum.  dP
 * reaches X only through a window's maximum that is positive, and the maximum is P, so
 * the pair's gradient needs A and P, not R: R dies in the forward, where it lived to
 * the backward before.  The stem of ResNet, VGG and SqueezeNet pools a ReLU output at
 * full resolution (ResNet-18 at batch 8: 24.5 MiB kept for 1.5 MiB of A).  P is kept
 * anyway wherever a Conv reads it next.
 *
 * Keeps true: dX is bit-identical to the unfused pair's (the kernel sums in
 * MaxPoolInputGrad's order; tests/test_fuse_pool_grad.c compares both graphs).  A match
 * needs R read by exactly those three nodes (no other reader, no graph output), dR read
 * only by the ReluGrad, MaxPool without Indices, float32 or float64, and windows of at
 * most 255 elements; anything else is left as autodiff built it. */
#include "train/fuse_pool_grad.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/graph_build.h"

static int is_node(const vp_node *n, const char *domain, const char *op) {
    return !strcmp(n->domain, domain) && !strcmp(n->op_type, op);
}

typedef struct pool_match {
    int relu_grad, input_grad, pool; /* node ids */
} pool_match;

static int kernel_volume(const vp_node *pool) {
    const int64_t *k;
    int n = vp_attr_ints(pool, "kernel_shape", &k);
    int64_t v = 1;
    for (int d = 0; d < n; d++) v *= k[d];
    return n > 0 && v <= 255;
}

/* Whether the ReluGrad node gn heads a match; fills m. */
static int find_match(const vp_graph *g, int gn, pool_match *m) {
    const vp_node *rg = &g->nodes[gn];
    if (!is_node(rg, "com.microsoft", "ReluGrad") || rg->n_inputs != 2 || rg->n_outputs != 1) return 0;
    int dr = rg->inputs[0], r = rg->inputs[1];
    if (dr < 0 || r < 0 || rg->outputs[0] < 0) return 0;
    const vp_value *rv = &g->values[r], *drv = &g->values[dr];
    if (rv->producer < 0 || !is_node(&g->nodes[rv->producer], "", "Relu")) return 0;
    if ((rv->dtype != VP_F32 && rv->dtype != VP_F64) || (rv->flags & VP_VAL_OUTPUT)) return 0;
    if (drv->producer < 0 || drv->n_consumers != 1 || (drv->flags & VP_VAL_OUTPUT)) return 0;
    const vp_node *ig = &g->nodes[drv->producer];
    if (!is_node(ig, "vplan", "MaxPoolInputGrad") || ig->n_inputs != 2 || ig->inputs[1] != r) return 0;
    /* R's readers: the MaxPool, the MaxPoolInputGrad and this ReluGrad, once each */
    int pool = -1, seen_ig = 0, seen_rg = 0;
    for (int i = 0; i < rv->n_consumers; i++) {
        int c = rv->consumers[i];
        if (c == drv->producer && !seen_ig) seen_ig = 1;
        else if (c == gn && !seen_rg) seen_rg = 1;
        else if (pool < 0 && is_node(&g->nodes[c], "", "MaxPool") && g->nodes[c].inputs[0] == r) pool = c;
        else return 0;
    }
    if (pool < 0 || !seen_ig || !seen_rg) return 0;
    const vp_node *pn = &g->nodes[pool];
    if ((pn->n_outputs > 1 && pn->outputs[1] >= 0) || pn->outputs[0] < 0 || !kernel_volume(pn)) return 0;
    if (vp_attr_int(pn, "storage_order", 0)) return 0;
    *m = (pool_match){gn, drv->producer, pool};
    return 1;
}

/* Builds the two nodes of one match; *fwd and *bwd get their ids. */
static vp_status rewrite(vp_graph *g, const pool_match *m, int *fwd, int *bwd, vp_error *err) {
    int r = g->nodes[m->pool].inputs[0], p = g->nodes[m->pool].outputs[0];
    int dp = g->nodes[m->input_grad].inputs[0], dx = g->nodes[m->relu_grad].outputs[0];
    const vp_value *rv = &g->values[r];
    int64_t shape[VP_MAX_RANK];
    int rank = rv->rank;
    memcpy(shape, rv->dims, sizeof shape);

    int f = vp_build_node(g, "MaxPoolArgmax", "vplan", g->nodes[m->pool].name, 1, &r, 2, VP_PHASE_FORWARD, 0);
    if (f < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory fusing MaxPool's gradient");
    if (vp_node_copy_attrs(g, f, m->pool)) return vp_fail(err, VP_ERR_NOMEM, "out of memory fusing MaxPool's gradient");
    g->nodes[f].opset = g->nodes[m->pool].opset;
    int fo[2];
    vp_status s = vp_build_finish(g, f, fo, err);
    if (s) return s;

    int in[3] = {dp, fo[1], fo[0]};
    int b = vp_build_node(g, "MaxPoolReluGrad", "vplan", g->nodes[m->relu_grad].name, 3, in, 1, VP_PHASE_BACKWARD, 0);
    if (b < 0 || vp_node_copy_attrs(g, b, m->pool) || vp_node_add_attr_ints(g, b, "input_shape", shape, rank))
        return vp_fail(err, VP_ERR_NOMEM, "out of memory fusing MaxPool's gradient");
    g->nodes[b].phase = g->nodes[m->relu_grad].phase;
    int bo;
    if ((s = vp_build_finish(g, b, &bo, err))) return s;

    /* the new nodes produce P and dX themselves (their outputs were built only to infer
     * them), so every reader, graph output and name stays as it was */
    g->nodes[f].outputs[0] = p;
    g->nodes[b].outputs[0] = dx;
    g->nodes[b].inputs[2] = p;
    *fwd = f;
    *bwd = b;
    return VP_OK;
}

vp_status vp_fuse_pool_grad(vp_graph *g, int *n_fused, vp_error *err) {
    *n_fused = 0;
    vp_status s = vp_graph_link(g, err);
    if (s) return s;
    int n0 = g->n_nodes;
    pool_match *ms = malloc(((size_t)n0 + 1) * sizeof *ms);
    if (!ms) return vp_fail(err, VP_ERR_NOMEM, "out of memory fusing MaxPool's gradient");
    int n_m = 0;
    for (int i = 0; i < n0; i++)
        if (find_match(g, i, &ms[n_m])) n_m++;
    if (!n_m) {
        free(ms);
        return VP_OK;
    }
    /* each old node's replacement, or -1 to drop it (-2: keep as is) */
    int *repl = malloc(((size_t)n0 + 1) * sizeof *repl);
    int *order = malloc(((size_t)n0 + 1) * sizeof *order);
    if (!repl || !order) s = vp_fail(err, VP_ERR_NOMEM, "out of memory fusing MaxPool's gradient");
    for (int i = 0; !s && i < n0; i++) repl[i] = -2;
    for (int k = 0; !s && k < n_m; k++) {
        int f = -1, b = -1;
        s = rewrite(g, &ms[k], &f, &b, err);
        if (s) break;
        repl[ms[k].pool] = f;
        repl[ms[k].input_grad] = -1;
        repl[ms[k].relu_grad] = b;
    }
    int n_order = 0;
    for (int i = 0; !s && i < n0; i++) {
        if (repl[i] == -2) order[n_order++] = i;
        else if (repl[i] >= 0) order[n_order++] = repl[i];
    }
    /* every node built after n0 replaces one of the first n0 and stands in its place */
    if (!s) s = vp_graph_keep_nodes(g, order, n_order, err);
    if (!s) *n_fused = n_m;
    free(ms);
    free(repl);
    free(order);
    return s;
}
