/* The fusion pass (planner/train/fuse.c) on real torch.onnx exports: tests/data/fusion,
 * made by tools/scripts/make_fusion_models.py, five small modules (GELU erf and tanh
 * forms, LayerNorm with and without affine, a transformer block) at opsets 13 to 17,
 * exported for eval and for training.  For each export:
 *   - the pass fuses exactly the module's GELUs and LayerNorms (expect.txt): a pattern
 *     torch writes that stops being recognised fails here;
 *   - the fused forward graph computes what the unfused one does (1e-5 relative) and
 *     what torch did;
 *   - the fused training step's loss and gradients (every parameter, and the input,
 *     made a parameter here) match PyTorch's (1e-4 relative, as test_training) and the
 *     unfused step's (1e-5).
 * The pool module checks the MaxPool(Relu) gradient (planner/train/fuse_pool_grad.c,
 * after autodiff) the same way, and that its gradients equal the unfused step's bit for
 * bit, since no other fusion applies there.
 * Then hand-built graphs: the operand orders and forms torch 1.13 does not write
 * (Mul by 1/sqrt 2, 0.5 first, Pow for the cube, two normalised axes, ReduceMean's axes
 * as an input at opset 18) are fused too, and near misses (a constant off, an
 * intermediate also read elsewhere, a reduction over another axis) are left alone;
 * fused or not, each computes what its unfused graph does.  Last, GatherElements over
 * repeating indices as a Gather of one row (planner/train/gather_rows.c): the same
 * output bit for bit, and the near misses left alone. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "check.h"
#include "cpu_host.h"
#include "cpu_util.h"
#include "exec.h"
#include "ir/graph_build.h"
#include "ir/infer.h"
#include "ir/rng.h"
#include "onnx/onnx_load.h"
#include "onnx/tensor_proto.h"
#include "train/gather_rows.h"
#include "train/training.h"

#define DATA VP_SOURCE_DIR "/tests/data/fusion"

static const char *const modules[] = {"gelu", "gelu_tanh", "ln", "ln_plain", "block", "pool"};

/* Worst |a-b| / (|b| + max|b|) over the tensor (test_training's measure). */
static double rel_error(const vp_tensor *a, const vp_tensor *b) {
    int64_t n = vp_tensor_numel(b);
    if (vp_tensor_numel(a) != n) return INFINITY;
    double scale = 0, worst = 0;
    for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(vp_load(b->data, b->dtype, i)));
    for (int64_t i = 0; i < n; i++) {
        double d = fabs(vp_load(a->data, a->dtype, i) - vp_load(b->data, b->dtype, i));
        worst = fmax(worst, d / (fabs(vp_load(b->data, b->dtype, i)) + scale + 1e-30));
    }
    return worst;
}

static vp_status read_pb(const char *dir, const char *file, vp_tensor *t, vp_error *err) {
    char path[1700];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    return vp_tensor_read_pb(path, t, NULL, err);
}

static vp_status load(const char *model_dir, vp_graph **g, vp_error *err) {
    char path[1024];
    snprintf(path, sizeof path, "%s/model.onnx", model_dir);
    vp_status s = vp_onnx_load(path, g, err);
    if (!s) s = vp_infer(*g, NULL, NULL, err);
    return s;
}

/* Runs g forward on x; *y receives output "y". */
static vp_status forward(const vp_graph *g, const vp_tensor *x, vp_tensor *y, vp_error *err) {
    vp_backend *b = vp_backend_cpu_new();
    vp_exec *ex = NULL;
    vp_status s = vp_exec_new(g, b, &ex, err);
    if (!s) s = vp_exec_set_input(ex, "x", x, err);
    if (!s) s = vp_exec_run(ex, err);
    if (!s) s = vp_exec_get(ex, vp_graph_find_value(g, "y"), y, err);
    vp_exec_free(ex);
    vp_backend_free(b);
    return s;
}

static void check_forward(const char *mod, const char *dir, const char *exp, const int want[4], const vp_tensor *x,
                          const vp_tensor *torch_y) {
    vp_error err;
    vp_graph *g = NULL, *f = NULL;
    vp_tensor y0 = {0}, y1 = {0};
    vp_fuse_counts c;
    vp_status s = load(dir, &g, &err);
    if (!s && !(f = vp_graph_clone(g))) s = vp_fail(&err, VP_ERR_NOMEM, "out of memory");
    int nodes = f ? f->n_nodes : 0;
    if (!s) s = vp_fuse(f, &c, &err);
    if (!s) s = forward(g, x, &y0, &err);
    if (!s) s = forward(f, x, &y1, &err);
    if (s) {
        check(0, "%s %s forward: %s", mod, exp, err.msg);
    } else {
        check(c.gelu == want[0] && c.fast_gelu == want[1] && c.layer_norm == want[2] &&
                  f->n_nodes == nodes - c.removed + c.gelu + c.fast_gelu + c.layer_norm + c.matmul_t,
              "%s %s: fused %d Gelu, %d FastGelu, %d LayerNormalization (expected %d, %d, %d), %d MatMul of a "
              "transposed weight, %d nodes -> %d",
              mod, exp, c.gelu, c.fast_gelu, c.layer_norm, want[0], want[1], want[2], c.matmul_t, nodes, f->n_nodes);
        double r = rel_error(&y1, &y0), rt = rel_error(&y1, torch_y);
        check(r <= 1e-5 && rt <= 1e-4, "%s %s: fused forward vs unfused %.2g, vs torch %.2g", mod, exp, r, rt);
    }
    free(y0.data);
    free(y1.data);
    vp_graph_free(f);
    vp_graph_free(g);
}

/* Makes graph input x an initializer holding the fixture, so the step builds its
 * gradient like a parameter's. */
static vp_status input_as_param(vp_graph *g, const vp_tensor *x, int *id, vp_error *err) {
    *id = vp_graph_find_value(g, "x");
    if (*id < 0) return vp_fail(err, VP_ERR_INVALID, "no input x");
    void *data = malloc(vp_tensor_nbytes(x));
    if (!data) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    memcpy(data, x->data, vp_tensor_nbytes(x));
    vp_value_set_data(g, *id, data, VP_DATA_HEAP);
    g->values[*id].flags = (g->values[*id].flags & ~VP_VAL_INPUT) | VP_VAL_INITIALIZER;
    int k = 0;
    for (int i = 0; i < g->n_inputs; i++)
        if (g->inputs[i] != *id) g->inputs[k++] = g->inputs[i];
    g->n_inputs = k;
    return VP_OK;
}

typedef struct step {
    vp_graph *g;
    vp_training t;
    vp_tensor loss;
    vp_tensor *grads; /* per parameter */
} step;

static vp_status run_step(const char *dir, const vp_tensor *x, const vp_tensor *target, int no_fuse, step *st,
                          vp_error *err) {
    memset(st, 0, sizeof *st);
    vp_train_spec spec;
    memset(&spec, 0, sizeof spec);
    spec.no_optimizer = 1;
    spec.no_fuse = no_fuse;
    int xid;
    vp_status s = vp_loss_parse("mse:y", &spec.loss, err);
    if (!s) s = load(dir, &st->g, err);
    if (!s) s = input_as_param(st->g, x, &xid, err);
    if (!s) s = vp_training_build(st->g, &spec, &st->t, err);
    if (s) return s;
    vp_backend *b = vp_backend_cpu_new();
    vp_exec *ex = NULL;
    st->grads = calloc((size_t)st->t.n_params + 1, sizeof *st->grads);
    if (!st->grads) s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
    if (!s) s = vp_exec_new(st->g, b, &ex, err);
    if (!s) s = vp_exec_set_input(ex, "target", target, err);
    if (!s) s = vp_exec_run(ex, err);
    if (!s) s = vp_exec_get(ex, st->t.loss, &st->loss, err);
    for (int i = 0; i < st->t.n_params && !s; i++) {
        if (st->t.grads[i] < 0)
            s = vp_fail(err, VP_ERR_INVALID, "parameter '%s' got no gradient", st->g->values[st->t.params[i]].name);
        else s = vp_exec_get(ex, st->t.grads[i], &st->grads[i], err);
    }
    vp_exec_free(ex);
    vp_backend_free(b);
    return s;
}

static void step_free(step *st) {
    for (int i = 0; st->grads && i < st->t.n_params; i++) free(st->grads[i].data);
    free(st->grads);
    free(st->loss.data);
    vp_training_free(&st->t);
    vp_graph_free(st->g);
}

/* grads/<name>.pb with every character but [A-Za-z0-9._-] written '_' (the script's rule). */
static void grad_file(const char *name, char *out, size_t len) {
    size_t k = (size_t)snprintf(out, len, "grads/");
    for (const char *p = name; *p && k + 4 < len; p++) {
        char ch = *p;
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' ||
                 ch == '_' || ch == '-';
        out[k++] = ok ? ch : '_';
    }
    snprintf(out + k, len - k, ".pb");
}

static void check_training(const char *mod, const char *dir, const char *exp, const int want[4], const vp_tensor *x,
                           const vp_tensor *target) {
    vp_error err;
    char mdir[600], file[600];
    snprintf(mdir, sizeof mdir, DATA "/%s", mod);
    step fused, plain;
    vp_tensor ref = {0};
    vp_status s = run_step(dir, x, target, 0, &fused, &err);
    if (!s) s = run_step(dir, x, target, 1, &plain, &err);
    else memset(&plain, 0, sizeof plain);
    if (!s) s = read_pb(mdir, "loss.pb", &ref, &err);
    if (s) {
        check(0, "%s %s training: %s", mod, exp, err.msg);
        goto done;
    }
    const vp_fuse_counts *c = &fused.t.fused;
    /* every GELU of these modules feeds a Linear: each fuses into its product too */
    check(c->gelu == want[0] && c->fast_gelu == want[1] && c->layer_norm == want[2] &&
              fused.t.n_gelu_matmul == want[0] + want[1] && fused.t.n_pool_grad == want[3] &&
              !plain.t.fused.removed && !plain.t.n_pool_grad && !plain.t.n_gelu_matmul,
          "%s %s: the training build fused %d, %d, %d, %d GeluMatMul, %d MaxPool(Relu) gradients", mod, exp, c->gelu,
          c->fast_gelu, c->layer_norm, fused.t.n_gelu_matmul, fused.t.n_pool_grad);
    double lf = vp_load(fused.loss.data, fused.loss.dtype, 0), lt = vp_load(ref.data, ref.dtype, 0);
    check(fabs(lf - lt) <= 1e-4 * fabs(lt), "%s %s: loss %.7g, torch %.7g", mod, exp, lf, lt);
    double worst_torch = 0, worst_plain = 0;
    const char *worst_name = "";
    int missing = 0;
    check(fused.t.n_params == plain.t.n_params, "%s %s: %d parameters fused, %d unfused", mod, exp, fused.t.n_params,
          plain.t.n_params);
    for (int i = 0; i < fused.t.n_params && i < plain.t.n_params; i++) {
        const char *pname = fused.g->values[fused.t.params[i]].name;
        vp_tensor want_g = {0};
        grad_file(pname, file, sizeof file);
        s = !strcmp(pname, "x") ? read_pb(mdir, "grads/x.pb", &want_g, &err) : read_pb(dir, file, &want_g, &err);
        if (s) {
            check(0, "%s %s: %s", mod, exp, err.msg);
            missing++;
            continue;
        }
        double r = rel_error(&fused.grads[i], &want_g);
        if (r > worst_torch) worst_torch = r, worst_name = pname;
        worst_plain = fmax(worst_plain, rel_error(&fused.grads[i], &plain.grads[i]));
        free(want_g.data);
    }
    /* the MaxPool(Relu) gradient sums in the unfused pair's order: alone, it changes no bit */
    double plain_tol = c->removed ? 1e-5 : 0;
    check(!missing && worst_torch <= 1e-4 && worst_plain <= plain_tol,
          "%s %s: %d gradients vs torch worst %.2g ('%s'), vs unfused worst %.2g", mod, exp, fused.t.n_params,
          worst_torch, worst_name, worst_plain);
done:
    free(ref.data);
    step_free(&fused);
    step_free(&plain);
}

static void check_module(const char *mod) {
    char dir[600], line[256];
    snprintf(dir, sizeof dir, DATA "/%s/expect.txt", mod);
    FILE *f = fopen(dir, "r");
    vp_error err;
    vp_tensor x = {0}, y = {0}, target = {0};
    snprintf(dir, sizeof dir, DATA "/%s", mod);
    vp_status s = f ? VP_OK : vp_fail(&err, VP_ERR_IO, "%s/expect.txt: cannot read", dir);
    if (!s) s = read_pb(dir, "x.pb", &x, &err);
    if (!s) s = read_pb(dir, "y.pb", &y, &err);
    if (!s) s = read_pb(dir, "target.pb", &target, &err);
    int exports = 0;
    while (!s && fgets(line, sizeof line, f)) {
        char exp[64];
        int want[4];
        if (sscanf(line, "%63s %d %d %d %d", exp, &want[0], &want[1], &want[2], &want[3]) != 5) continue;
        char mdir[700];
        snprintf(mdir, sizeof mdir, "%s/%s", dir, exp);
        check_forward(mod, mdir, exp, want, &x, &y);
        check_training(mod, mdir, exp, want, &x, &target);
        exports++;
    }
    if (s) check(0, "%s: %s", mod, err.msg);
    else check(exports >= 8, "%s: %d exports", mod, exports);
    if (f) fclose(f);
    free(x.data);
    free(y.data);
    free(target.data);
}

/* ---- hand-built graphs ---- */

typedef struct hb {
    vp_graph *g;
    int x;
    int n; /* names made so far */
} hb;

static void hb_init(hb *b, int opset, int rank, const int64_t *dims) {
    memset(b, 0, sizeof *b);
    b->g = vp_graph_new();
    b->g->path = strdup("hand-built");
    b->g->opset_onnx = opset;
    vp_build_input(b->g, "x", VP_F32, rank, dims, &b->x, NULL);
}

static int hb_const(hb *b, float v) { return vp_build_const(b->g, "c", VP_F32, 0, NULL, &v); }

/* A trainable parameter of that shape, values 0.5 + i / 10. */
static int hb_param(hb *b, int rank, const int64_t *dims) {
    char name[32];
    snprintf(name, sizeof name, "w%d", b->n++);
    int id = vp_graph_add_value(b->g, name);
    vp_value *v = &b->g->values[id];
    v->dtype = VP_F32;
    v->rank = rank;
    if (rank) memcpy(v->dims, dims, (size_t)rank * sizeof *dims);
    int64_t n = vp_value_numel(v);
    float *d = malloc((size_t)n * sizeof *d);
    for (int64_t i = 0; i < n; i++) d[i] = 0.5f + (float)i / 10;
    vp_value_set_data(b->g, id, d, VP_DATA_HEAP);
    v->flags |= VP_VAL_INITIALIZER;
    return id;
}

static int hb_op(hb *b, const char *op, int a, int c) {
    char name[32];
    snprintf(name, sizeof name, "n%d", b->n++);
    int out = vp_graph_add_value(b->g, name);
    int in[2] = {a, c};
    vp_graph_add_node(b->g, op, "", name, c >= 0 ? 2 : 1, in, 1, &out);
    return out;
}

static int hb_mean(hb *b, int a, int n_axes, const int64_t *axes) {
    char name[32];
    snprintf(name, sizeof name, "n%d", b->n++);
    int out = vp_graph_add_value(b->g, name);
    int in[2] = {a, -1};
    if (b->g->opset_onnx >= 18) in[1] = vp_build_const(b->g, "axes", VP_I64, 1, (int64_t[]){n_axes}, axes);
    int node = vp_graph_add_node(b->g, "ReduceMean", "", name, b->g->opset_onnx >= 18 ? 2 : 1, in, 1, &out);
    if (b->g->opset_onnx < 18) vp_node_add_attr_ints(b->g, node, "axes", axes, n_axes);
    return out;
}

static void hb_output(hb *b, int v) {
    b->g->outputs = realloc(b->g->outputs, (size_t)(b->g->n_outputs + 1) * sizeof *b->g->outputs);
    b->g->outputs[b->g->n_outputs++] = v;
    b->g->values[v].flags |= VP_VAL_OUTPUT;
}

/* Infers b's graph, fuses a copy (rows: runs vp_gather_rows instead), and checks the
 * count of fused patterns (gelu + fast_gelu + layer_norm, or the gathers rewritten ==
 * want) and that both compute the same outputs (bit for bit for the gathers). */
static void hb_check_pass(hb *b, int rows, int want, const char *what) {
    vp_error err;
    vp_graph *f = NULL;
    vp_fuse_counts c = {0};
    vp_tensor x = vp_value_tensor(&b->g->values[b->x]);
    vp_rng r = {42};
    x.data = malloc(vp_tensor_nbytes(&x));
    for (int64_t i = 0; i < vp_tensor_numel(&x); i++) ((float *)x.data)[i] = (float)(vp_rng_uniform(&r) * 4 - 2);
    vp_status s = vp_graph_link(b->g, &err);
    if (!s) s = vp_infer(b->g, NULL, NULL, &err);
    if (!s && !(f = vp_graph_clone(b->g))) s = vp_fail(&err, VP_ERR_NOMEM, "out of memory");
    if (!s) s = rows ? vp_gather_rows(f, &c.gather_rows, &err) : vp_fuse(f, &c, &err);
    double worst = 0;
    for (int k = 0; !s && k < b->g->n_outputs; k++) {
        vp_tensor y[2] = {{0}, {0}};
        const vp_graph *gs[2] = {b->g, f};
        for (int i = 0; i < 2 && !s; i++) {
            vp_backend *be = vp_backend_cpu_new();
            vp_exec *ex = NULL;
            s = vp_exec_new(gs[i], be, &ex, &err);
            if (!s) s = vp_exec_set_input(ex, "x", &x, &err);
            if (!s) s = vp_exec_run(ex, &err);
            if (!s) s = vp_exec_get(ex, b->g->outputs[k], &y[i], &err);
            vp_exec_free(ex);
            vp_backend_free(be);
        }
        if (!s) worst = fmax(worst, rel_error(&y[1], &y[0]));
        free(y[0].data);
        free(y[1].data);
    }
    int got = rows ? c.gather_rows : c.gelu + c.fast_gelu + c.layer_norm;
    if (s) check(0, "%s: %s", what, err.msg);
    else check(got == want && worst <= (rows ? 0 : 1e-5), "%s: %d fused (expected %d), outputs differ by %.2g", what, got,
               want, worst);
    free(x.data);
    vp_graph_free(f);
    vp_graph_free(b->g);
}

static void hb_check(hb *b, int want, const char *what) { hb_check_pass(b, 0, want, what); }

/* GatherElements(x [2, 3, 5], idx [i0, 3, 4] int64, axis) with idx repeating along its
 * leading axes, or a near miss (miss 1: one index of the second row differs; 2: idx is
 * shorter than x on axis 0; 3: axis 0). */
static void gather_rows_case(int miss, int want, const char *what) {
    static const int64_t dims[3] = {2, 3, 5};
    hb b;
    hb_init(&b, 13, 3, dims);
    int64_t row[12] = {0, 4, -1, 2, 3, 3, 0, -5, 1, 2, 4, 0}, idx[24], id[3] = {miss == 2 ? 1 : 2, 3, 4};
    for (int i = 0; i < 24; i++) idx[i] = row[i % 12];
    if (miss == 1) idx[12 + 5] = 1;
    if (miss == 3)
        for (int i = 0; i < 24; i++) idx[i] = idx[i] < 0 ? 1 : idx[i] % 2;
    char name[32];
    snprintf(name, sizeof name, "n%d", b.n++);
    int y = vp_graph_add_value(b.g, name);
    int in[2] = {b.x, vp_build_const(b.g, "idx", VP_I64, 3, id, idx)};
    vp_node_add_attr_int(b.g, vp_graph_add_node(b.g, "GatherElements", "", name, 2, in, 1, &y), "axis", miss == 3 ? 0 : 2);
    hb_output(&b, y);
    hb_check_pass(&b, 1, want, what);
}

static void gather_rows_variants(void) {
    gather_rows_case(0, 1, "GatherElements over indices repeating along axis 0 (negative ones too): a Gather of one row");
    gather_rows_case(1, 0, "GatherElements near miss: the second row differs");
    gather_rows_case(2, 0, "GatherElements near miss: indices shorter than the data on axis 0");
    gather_rows_case(3, 0, "GatherElements near miss: along axis 0");
}

/* x * 0.5 * (1 + erf(x * (1/sqrt 2))) with the 0.5 applied first, or a near miss. */
static void gelu_variants(void) {
    static const int64_t dims[3] = {2, 3, 4};
    hb b;
    for (int miss = 0; miss < 4; miss++) {
        hb_init(&b, 13, 3, dims);
        int d = hb_op(&b, "Mul", hb_const(&b, miss == 1 ? 0.75f : (float)M_SQRT1_2), b.x);
        int e = hb_op(&b, "Erf", d, -1);
        int one = miss == 2 ? hb_param(&b, 0, NULL) : hb_const(&b, 1.0f); /* a trainable 1 is no constant */
        int a = hb_op(&b, "Add", one, e);
        int h = hb_op(&b, "Mul", b.x, hb_const(&b, 0.5f));
        hb_output(&b, hb_op(&b, "Mul", a, h));
        if (miss == 3) hb_output(&b, e);
        static const char *what[4] = {"Gelu: Mul by 1/sqrt 2, (0.5 * x) * (1 + erf)", "Gelu near miss: Mul by 0.75",
                                      "Gelu near miss: 1 is a parameter", "Gelu near miss: erf is also an output"};
        hb_check(&b, !miss, what[miss]);
    }
    /* x * ((1 + erf(x / sqrt 2)) * 0.5) */
    hb_init(&b, 13, 3, dims);
    int a = hb_op(&b, "Add", hb_op(&b, "Erf", hb_op(&b, "Div", b.x, hb_const(&b, (float)M_SQRT2)), -1), hb_const(&b, 1));
    hb_output(&b, hb_op(&b, "Mul", b.x, hb_op(&b, "Mul", a, hb_const(&b, 0.5f))));
    hb_check(&b, 1, "Gelu: x * ((1 + erf) * 0.5)");
    /* the tanh form with Pow for the cube, and with Pow(x, 2) */
    for (int miss = 0; miss < 2; miss++) {
        hb_init(&b, 13, 3, dims);
        int cube = hb_op(&b, "Pow", b.x, hb_const(&b, miss ? 2.0f : 3.0f));
        int sum = hb_op(&b, "Add", b.x, hb_op(&b, "Mul", cube, hb_const(&b, 0.044715f)));
        int t = hb_op(&b, "Tanh", hb_op(&b, "Mul", sum, hb_const(&b, (float)sqrt(2 / M_PI))), -1);
        int m1 = hb_op(&b, "Mul", b.x, hb_op(&b, "Add", t, hb_const(&b, 1)));
        hb_output(&b, hb_op(&b, "Mul", m1, hb_const(&b, 0.5f)));
        hb_check(&b, !miss, miss ? "FastGelu near miss: Pow(x, 2)" : "FastGelu: Pow(x, 3), (x * (1 + tanh)) * 0.5");
    }
}

/* (x - mean) / sqrt(var + eps) * w + b over the given axes of [2, 3, 4]; miss: 1 the
 * deviation is also an output, 2 the scale is [1, 4] (the affine part stays apart). */
static void layer_norm_case(int opset, int n_axes, const int64_t *axes, int miss, int want, const char *what) {
    static const int64_t dims[3] = {2, 3, 4};
    hb b;
    hb_init(&b, opset, 3, dims);
    int mean = hb_mean(&b, b.x, n_axes, axes);
    int dev = hb_op(&b, "Sub", b.x, mean);
    int var = hb_mean(&b, hb_op(&b, "Pow", dev, hb_const(&b, 2)), n_axes, axes);
    int sd = hb_op(&b, "Sqrt", hb_op(&b, "Add", var, hb_const(&b, 1e-5f)), -1);
    int y = hb_op(&b, "Div", dev, sd);
    int64_t wd[2] = {n_axes == 2 ? 3 : 4, 4};
    int w = miss == 2 ? hb_param(&b, 2, (int64_t[]){1, 4}) : hb_param(&b, n_axes, wd + (n_axes == 1));
    y = hb_op(&b, "Add", hb_op(&b, "Mul", y, w), hb_param(&b, n_axes, wd + (n_axes == 1)));
    hb_output(&b, y);
    if (miss == 1) hb_output(&b, dev);
    hb_check(&b, want, what);
}

static void layer_norm_variants(void) {
    layer_norm_case(13, 2, (int64_t[]){1, 2}, 0, 1, "LayerNormalization over the last two axes, written 1, 2");
    layer_norm_case(18, 1, (int64_t[]){-1}, 0, 1, "LayerNormalization, opset 18 (ReduceMean axes as an input)");
    layer_norm_case(13, 1, (int64_t[]){2}, 2, 1, "LayerNormalization with a [1, 4] scale left outside");
    layer_norm_case(13, 1, (int64_t[]){1}, 0, 0, "LayerNorm near miss: over axis 1 of 3");
    layer_norm_case(13, 1, (int64_t[]){-1}, 1, 0, "LayerNorm near miss: the deviation is also an output");
}

int main(void) {
    vp_cpu_host_install();
    for (size_t i = 0; i < sizeof modules / sizeof modules[0]; i++) check_module(modules[i]);
    gelu_variants();
    layer_norm_variants();
    gather_rows_variants();
    return check_summary();
}
