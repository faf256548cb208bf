/* Dropout in a training step: the exported inference Dropout trains with its mask
 * (about half the activations zeroed at ratio 0.5, the rest scaled by 2, as PyTorch's
 * train() mode), two Dropouts of one input and shape without seeds of their own draw
 * different masks (each gets one from its name), the next step draws new masks (the
 * step count the optimizer carries), and a checkpointed plan that recomputes them draws
 * the same masks at each step, so it trains bit-identically to the step that keeps them
 * over two steps. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "check.h"
#include "model_util.h"
#include "cpu_host.h"
#include "exec.h"
#include "ir/graph_build.h"
#include "memory/plan.h"
#include "plan_exec.h"
#include "remat/remat.h"
#include "ir/rng.h"
#include "train/training.h"

static int param(vp_graph *g, const char *name, int64_t r, int64_t c, vp_rng *rng) {
    int id = vp_graph_add_value(g, name);
    vp_value *v = &g->values[id];
    v->dtype = VP_F32;
    v->rank = 2;
    v->dims[0] = r;
    v->dims[1] = c;
    v->flags |= VP_VAL_INITIALIZER;
    float *d = malloc((size_t)(r * c) * sizeof *d);
    for (int64_t i = 0; i < r * c; i++) d[i] = (float)(vp_rng_uniform(rng) - 0.25);
    vp_value_set_data(g, id, d, VP_DATA_HEAP);
    return id;
}

static int node(vp_graph *g, const char *op, const char *name, int a, int b, vp_error *err) {
    int in[2] = {a, b}, out;
    int id = vp_build_node(g, op, "", name, b < 0 ? 1 : 2, in, 1, VP_PHASE_FORWARD, 13);
    return id < 0 || vp_build_finish(g, id, &out, err) ? -1 : out;
}

int main(void) {
    vp_cpu_host_install();
    vp_error err;
    vp_rng rng = {7};
    vp_graph *g = vp_graph_new();
    g->path = strdup("dropout-test");
    g->opset_onnx = 13;
    g->opset_ms = 1;
    int64_t xd[2] = {8, 64}, none[1] = {0};
    int x;
    vp_build_input(g, "x", VP_F32, 2, xd, &x, &err);
    float half = 0.5f;
    int h = node(g, "MatMul", "/fc1/MatMul", x, param(g, "w1", 64, 64, &rng), &err);
    int r = node(g, "Relu", "/relu", h, -1, &err);
    int d = node(g, "Dropout", "/drop/Dropout", r, vp_build_const(g, "ratio", VP_F32, 0, none, &half), &err);
    int d2 = node(g, "Dropout", "/drop2/Dropout", r, vp_build_const(g, "ratio", VP_F32, 0, none, &half), &err);
    int sum = node(g, "Add", "/add", d, d2, &err);
    int y = node(g, "MatMul", "/fc2/MatMul", sum, param(g, "w2", 64, 8, &rng), &err);
    g->outputs = malloc(sizeof *g->outputs);
    g->outputs[g->n_outputs++] = y;
    g->values[y].flags |= VP_VAL_OUTPUT;
    vp_graph_link(g, &err);
    vp_train_spec spec;
    memset(&spec, 0, sizeof spec);
    char loss[300];
    snprintf(loss, sizeof loss, "mse:%s", g->values[y].name);
    vp_loss_parse(loss, &spec.loss, &err);
    vp_opt_parse("sgd", &spec.opt, &err);
    vp_training t;
    vp_status s = vp_training_build(g, &spec, &t, &err);
    check(!s, "training step with Dropout built%s%s", s ? ": " : "", s ? err.msg : "");
    if (s) return check_summary();

    /* naive step: the Dropout output is the Relu output masked and scaled by 2 */
    vp_backend *b = vp_backend_cpu_new();
    vp_exec *nx = NULL;
    float xin[8 * 64], tgt[8 * 8];
    for (int i = 0; i < 8 * 64; i++) xin[i] = (float)vp_rng_uniform(&rng);
    for (int i = 0; i < 8 * 8; i++) tgt[i] = (float)vp_rng_uniform(&rng);
    vp_tensor tx = {VP_F32, 2, {8, 64}, xin}, tt = {VP_F32, 2, {8, 8}, tgt};
    vp_tensor relu = {0}, drop = {0}, drop2 = {0};
    s = vp_exec_new(g, b, &nx, &err);
    if (!s) s = vp_exec_set_input(nx, "x", &tx, &err);
    if (!s) s = vp_exec_set_input(nx, "target", &tt, &err);
    if (!s) s = vp_exec_run(nx, &err);
    if (!s) s = vp_exec_get(nx, r, &relu, &err);
    if (!s) s = vp_exec_get(nx, d, &drop, &err);
    if (!s) s = vp_exec_get(nx, d2, &drop2, &err);
    int zeroed = 0, kept = 0, scaled = 1, differ = 0;
    for (int i = 0; !s && i < 8 * 64; i++) {
        float a = ((float *)relu.data)[i], o = ((float *)drop.data)[i];
        if (a == 0) continue;
        differ += (o == 0) != (((float *)drop2.data)[i] == 0);
        if (o == 0) zeroed++;
        else {
            kept++;
            scaled &= o == 2 * a;
        }
    }
    check(!s && zeroed > 0.3 * (zeroed + kept) && kept > 0.3 * (zeroed + kept) && scaled,
          "training-mode Dropout: %d of %d positive activations zeroed, the rest scaled by 2%s%s", zeroed, zeroed + kept,
          s ? ": " : "", s ? err.msg : "");
    check(!s && differ > 0, "two seedless Dropouts of one input: masks differ at %d of %d positive activations", differ,
          zeroed + kept);
    /* its mask output, which the gradient reads */
    int mask_id = g->nodes[g->values[d].producer].n_outputs > 1 ? g->nodes[g->values[d].producer].outputs[1] : -1;
    vp_tensor mask0 = {0};
    if (!s) s = mask_id < 0 ? vp_fail(&err, VP_ERR_INVALID, "the Dropout has no mask output") : vp_exec_get(nx, mask_id, &mask0, &err);
    free(relu.data);
    free(drop.data);
    free(drop2.data);
    vp_tensor l0 = {0};
    if (!s) s = vp_exec_get(nx, t.loss, &l0, &err);

    /* a plan that recomputes everything it can, Dropout included */
    vp_plan p;
    memset(&p, 0, sizeof p);
    vp_graph *planned = NULL;
    vp_remat_result rr;
    if (!s) s = test_plan_step_remat(g, &t, vp_device_find("cpu"), 1, 0, VP_REMAT_SQRTN, NULL, &planned, &p, &rr, &err);
    int recomputes_dropout = 0;
    for (int i = 0; !s && i < planned->n_nodes; i++)
        recomputes_dropout |= planned->nodes[i].phase == VP_PHASE_RECOMPUTE && !strcmp(planned->nodes[i].op_type, "Dropout");
    check(!s && recomputes_dropout, "the checkpointed plan recomputes the Dropout (%d recompute nodes)", rr.n_recompute);
    vp_plan_exec *px = NULL;
    vp_tensor l1 = {0};
    if (!s) s = vp_plan_exec_new(&p, b, &px, &err);
    if (!s) s = vp_plan_exec_set_input(px, "x", &tx, &err);
    if (!s) s = vp_plan_exec_set_input(px, "target", &tt, &err);
    if (!s) s = vp_plan_exec_run(px, &err);
    if (!s) s = vp_plan_exec_get(px, t.loss, &l1, &err);
    int same = !s && !memcmp(l0.data, l1.data, 4);
    for (int i = 0; !s && i < t.n_params && same; i++) {
        /* after one update the weights depend on the gradients, so on the mask */
        vp_tensor a = {0}, c = {0};
        for (int k = 0; k < t.n_carry && !s; k++) s = vp_exec_copy_value(nx, t.carry[k].from, t.carry[k].to, &err);
        if (!s) s = vp_exec_get(nx, t.params[i], &a, &err);
        if (!s) s = vp_plan_exec_get(px, t.params[i], &c, &err);
        same = !s && vp_tensor_nbytes(&a) == vp_tensor_nbytes(&c) && !memcmp(a.data, c.data, vp_tensor_nbytes(&a));
        free(a.data);
        free(c.data);
    }
    check(same, "recomputed Dropout repeats the mask: loss and updated weights bit-identical%s%s", s ? ": " : "",
          s ? err.msg : "");

    /* the second step: new masks, drawn alike by the step that keeps them and the one
     * that recomputes them (before the count moves on) */
    vp_tensor mask1 = {0}, l2 = {0}, l3 = {0};
    for (int k = 0; k < t.n_carry && !s; k++) s = vp_exec_copy_value(nx, t.carry[k].from, t.carry[k].to, &err);
    if (!s) s = vp_exec_run(nx, &err);
    if (!s) s = vp_exec_get(nx, mask_id, &mask1, &err);
    int moved = 0;
    for (int i = 0; !s && i < 8 * 64; i++) moved += ((uint8_t *)mask0.data)[i] != ((uint8_t *)mask1.data)[i];
    check(!s && moved > 8 * 64 / 4, "the next step draws a new mask: %d of %d positions change", moved, 8 * 64);
    if (!s) s = vp_exec_get(nx, t.loss, &l2, &err);
    if (!s) s = vp_plan_exec_run(px, &err);
    if (!s) s = vp_plan_exec_get(px, t.loss, &l3, &err);
    check(!s && !memcmp(l2.data, l3.data, 4), "the second step's loss bit-identical, recomputed or kept (%.9g, %.9g)%s%s",
          !s ? ((float *)l2.data)[0] : 0.0, !s ? ((float *)l3.data)[0] : 0.0, s ? ": " : "", s ? err.msg : "");
    free(mask0.data);
    free(mask1.data);
    free(l2.data);
    free(l3.data);
    free(l0.data);
    free(l1.data);
    vp_plan_exec_free(px);
    vp_exec_free(nx);
    vp_backend_free(b);
    vp_plan_free(&p);
    if (planned && planned != g) vp_graph_free(planned);
    vp_training_free(&t);
    vp_graph_free(g);
    return check_summary();
}
