/* Folding over frozen initializers (planner/train/fold_frozen.c), on small graphs built
 * here, each a training step with a trainable parameter on the loss's path:
 *
 *   carried    BatchNorm's running mean (carried from step to step) read by a Mul
 *              beside the BatchNorm is not folded; the same Mul of a --freeze'd
 *              initializer is, and the step computes the loss and gradients bit for bit
 *              as the step that does not fold (the initializer left trainable).
 *   trainable  a Mul of a trainable initializer is not folded.
 *   caps       an Expand that repeats 1 KiB of frozen data into 2 MiB is not folded (the
 *              growth cap); a Neg of a 2 MiB frozen weight is (no growth); a Neg of a
 *              frozen weight over 64 MiB is not (the absolute cap). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "check.h"
#include "cpu_host.h"
#include "exec.h"
#include "ir/graph_build.h"
#include "model_util.h"
#include "train/training.h"

static vp_graph *new_graph(void) {
    vp_graph *g = vp_graph_new();
    g->path = strdup("fold-frozen-test");
    g->opset_onnx = 15;
    g->opset_ms = 1;
    return g;
}

/* A float32 initializer, element i = scale * ((i % 7) - 3). */
static int init(vp_graph *g, const char *name, int rank, const int64_t *dims, float scale) {
    float *d;
    int id = test_f32_initializer(g, vp_graph_add_value(g, name), rank, dims, &d);
    for (int64_t i = 0, n = vp_value_numel(&g->values[id]); i < n; i++) d[i] = scale * (float)((i % 7) - 3);
    return id;
}

static int input(vp_graph *g, const char *name, int rank, const int64_t *dims) {
    int id = -1;
    vp_error err;
    vp_build_input(g, name, VP_F32, rank, dims, &id, &err);
    return id;
}

/* Node `name` of op on n inputs, one output; -1 when it does not build. */
static int op(vp_graph *g, const char *type, const char *name, int n, const int *in) {
    int out = -1;
    vp_error err;
    int id = vp_build_node(g, type, "", name, n, in, 1, VP_PHASE_FORWARD, 15);
    if (id < 0 || vp_build_finish(g, id, &out, &err)) {
        fprintf(stderr, "building %s: %s\n", name, id < 0 ? "out of memory" : err.msg);
        return -1;
    }
    return out;
}

static int op2(vp_graph *g, const char *type, const char *name, int a, int b) {
    int in[2] = {a, b};
    return op(g, type, name, 2, in);
}

/* Makes y the graph's output and builds the step with the mse loss on it. */
static vp_status build(vp_graph *g, int y, const char *freeze, vp_training *t, vp_error *err) {
    g->outputs = malloc(sizeof *g->outputs);
    g->outputs[g->n_outputs++] = y;
    g->values[y].flags |= VP_VAL_OUTPUT;
    vp_status s = vp_graph_link(g, err);
    vp_train_spec spec;
    memset(&spec, 0, sizeof spec);
    char loss[300];
    snprintf(loss, sizeof loss, "mse:%s", g->values[y].name);
    vp_loss_parse(loss, &spec.loss, err);
    vp_opt_parse("sgd", &spec.opt, err);
    spec.no_optimizer = 1;
    spec.freeze = freeze;
    return s ? s : vp_training_build(g, &spec, t, err);
}

static const vp_node *node_named(const vp_graph *g, const char *name) {
    for (int i = 0; i < g->n_nodes; i++)
        if (!strcmp(g->nodes[i].name, name)) return &g->nodes[i];
    return NULL;
}

static int folded(const vp_graph *g, const char *name) {
    const vp_node *n = node_named(g, name);
    return n ? n->folded : -1;
}

/* x [2, 3, 3] -> BatchNorm (running mean rm) -> + rm * 2 -> + k * 2: rm is carried, k an
 * initializer that trains unless frozen. */
static vp_graph *bn_graph(int *y) {
    vp_graph *g = new_graph();
    int64_t xd[3] = {2, 3, 3}, c[1] = {3}, none[1] = {0};
    float two = 2;
    int x = input(g, "x", 3, xd);
    int bn_in[5] = {x, init(g, "scale", 1, c, 0.5f), init(g, "bias", 1, c, 0.25f), init(g, "rm", 1, c, 0.125f),
                    init(g, "rv", 1, c, 0.0f)};
    float *rv = g->values[bn_in[4]].data;
    for (int i = 0; i < 3; i++) rv[i] = 1.0f + (float)i;
    int k = init(g, "k", 1, c, 0.375f), c2 = vp_build_const(g, "two", VP_F32, 0, none, &two);
    int h = op(g, "BatchNormalization", "bn", 5, bn_in);
    h = op2(g, "Add", "add_rm", h, op2(g, "Mul", "mul_rm", bn_in[3], c2));
    *y = op2(g, "Add", "add_k", h, op2(g, "Mul", "mul_k", k, c2));
    return g;
}

/* Loss and the gradients of scale and bias after one naive step on a fixed batch. */
static vp_status run_step(vp_graph *g, const vp_training *t, float out[7], vp_error *err) {
    float xin[18], tgt[18];
    for (int i = 0; i < 18; i++) xin[i] = (float)((i * 5) % 11) / 4.0f - 1.0f, tgt[i] = (float)(i % 3) / 2.0f;
    vp_tensor tx = {VP_F32, 3, {2, 3, 3}, xin}, tt = {VP_F32, 3, {2, 3, 3}, tgt};
    vp_backend *b = vp_backend_cpu_new();
    vp_exec *x = NULL;
    vp_status s = vp_exec_new(g, b, &x, err);
    if (!s) s = vp_exec_set_input(x, "x", &tx, err);
    if (!s) s = vp_exec_set_input(x, "target", &tt, err);
    if (!s) s = vp_exec_run(x, err);
    vp_tensor v = {0};
    if (!s && !(s = vp_exec_get(x, t->loss, &v, err))) out[0] = *(float *)v.data;
    free(v.data);
    int at = 1;
    for (int i = 0; !s && i < t->n_params; i++) {
        const char *name = g->values[t->params[i]].name;
        if (strcmp(name, "scale") && strcmp(name, "bias")) continue;
        v = (vp_tensor){0};
        if (!(s = vp_exec_get(x, t->grads[i], &v, err))) memcpy(out + at, v.data, 3 * sizeof(float));
        at += 3;
        free(v.data);
    }
    vp_exec_free(x);
    vp_backend_free(b);
    return s;
}

static void carried_and_trainable(void) {
    vp_error err;
    vp_training t, u;
    int y;
    vp_graph *g = bn_graph(&y), *h = NULL;
    vp_status s = build(g, y, "^k$", &t, &err);
    check(!s && folded(g, "mul_rm") == 0 && folded(g, "mul_k") == 1 && t.n_frozen_folded == 1,
          "carried: %s; rm * 2 folded %d (no: rm is BatchNorm's running mean, carried), k * 2 folded %d (yes: k "
          "frozen), %d folded in all", s ? err.msg : "built", folded(g, "mul_rm"), folded(g, "mul_k"),
          s ? -1 : t.n_frozen_folded);
    if (!s) {
        h = bn_graph(&y);
        s = build(h, y, NULL, &u, &err);
        check(!s && folded(h, "mul_k") == 0 && u.n_frozen_folded == 0,
              "trainable: %s; k * 2 folded %d (no: k trains), %d folded in all", s ? err.msg : "built",
              folded(h, "mul_k"), s ? -1 : u.n_frozen_folded);
        float a[7], b[7];
        if (!s) s = run_step(g, &t, a, &err);
        if (!s) s = run_step(h, &u, b, &err);
        check(!s && !memcmp(a, b, sizeof a), "the folding step's loss (%g) and scale, bias gradients are the bits of "
              "the step that computes k * 2 (%g)%s%s", s ? 0.0 : a[0], s ? 0.0 : b[0], s ? ": " : "", s ? err.msg : "");
        vp_training_free(&u);
        vp_graph_free(h);
    }
    vp_training_free(&t);
    vp_graph_free(g);
}

/* x + p * Expand(e), and x * p + Neg(w) at two sizes: p trains, e and w are frozen. */
static void caps(void) {
    vp_error err;
    vp_training t;
    /* growth: 1 KiB of frozen data repeated 2048 times */
    vp_graph *g = new_graph();
    int64_t big[2] = {2048, 256}, row[2] = {1, 256}, two[1] = {2}, one[1] = {1};
    int x = input(g, "x", 2, big), p = init(g, "p", 1, one, 0.5f);
    int e = init(g, "e", 2, row, 1.0f), shape = vp_build_const(g, "shape", VP_I64, 1, two, big);
    int y = op2(g, "Add", "add", x, op2(g, "Mul", "mul_p", p, op2(g, "Expand", "expand", e, shape)));
    vp_status s = build(g, y, "^e$", &t, &err);
    check(!s && folded(g, "expand") == 0, "caps: Expand of 1 KiB frozen into 2 MiB: %s, folded %d (no)",
          s ? err.msg : "built", folded(g, "expand"));
    if (!s) vp_training_free(&t);
    vp_graph_free(g);

    /* no growth, 2 MiB; then no growth past the absolute cap (64 MiB) */
    static const int64_t rows[2] = {2048, 65600};
    for (int c = 0; c < 2; c++) {
        int64_t wd[2] = {rows[c], 256};
        g = new_graph();
        x = input(g, "x", 2, wd);
        p = init(g, "p", 1, one, 0.5f);
        int w = init(g, "w", 2, wd, 1.0f);
        int neg[1] = {w};
        y = op2(g, "Add", "add", op2(g, "Mul", "mul_p", x, p), op(g, "Neg", "neg", 1, neg));
        s = build(g, y, "^w$", &t, &err);
        check(!s && folded(g, "neg") == !c, "caps: Neg of a %lld MiB frozen weight: %s, folded %d (%s)",
              (long long)(rows[c] * 256 * 4 >> 20), s ? err.msg : "built", folded(g, "neg"), c ? "no" : "yes");
        if (!s) vp_training_free(&t);
        vp_graph_free(g);
    }
}

int main(void) {
    vp_cpu_host_install();
    carried_and_trainable();
    caps();
    return check_summary();
}
