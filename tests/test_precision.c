/* Mixed precision (planner/precision): placement, execution and memory.
 * - Placement on the models: the matrix ops (and their gradient ops) compute low, the
 *   loss, LayerNorm and softmax float32; every parameter's gradient and every optimizer
 *   state value is float32; each parameter read low has exactly one low copy.
 * - The CPU kernels compute low precision as a GPU does: a bf16 MatMul accumulates in
 *   float32 and rounds once, to nearest even, on store.
 * - Planned bf16 and fp16 execution is bit-identical to naive execution of the same graph,
 *   plainly and with checkpointing (recomputed low-precision ops repeat their roundings).
 * - bf16 training of every model in models/ tracks PyTorch CPU autocast over 20 AdamW
 *   steps (fixtures/train_adamw_bf16.json, tools/scripts/make_precision_fixtures.py);
 *   fp16 with loss scaling tracks the float32 curve of the same fixture.
 * - bf16 and fp16 arenas are below the float32 arena for models/gpt and models/cnn.
 * - fp16 dynamic loss scaling (GradScaler's rule): a forced overflow skips the step,
 *   leaving parameters and optimizer state bit-identical, halves the scale, and training
 *   goes on; clean steps grow it; planned execution of it is bit-identical to naive.
 *   What `train --save` keeps of the scale reads back exactly, and bad saved values are
 *   refused (tests/cli_loss_scale.sh runs the skip and the resume through `train`). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "check.h"
#include "cpu_host.h"
#include "cpu_kernels.h"
#include "cpu_util.h"
#include "exec.h"
#include "ir/op_registry.h"
#include "memory/plan.h"
#include "model_util.h"
#include "remat/remat.h"

static double get_scalar(struct vp_exec *x, int id, vp_status *s, vp_error *err);

static vp_status load(test_model *m, const char *name, const char *opt, vp_precision prec, vp_error *err) {
    vp_train_spec spec;
    memset(&spec, 0, sizeof spec);
    vp_loss_parse("ce:logits", &spec.loss, err);
    vp_opt_parse(opt, &spec.opt, err);
    spec.precision = prec;
    return test_model_load(m, name, &spec, err);
}

static int is_op(const vp_node *n, const char *op) { return !strcmp(n->op_type, op); }

/* The dtype a node computes in, read from the graph: its first float input's. */
static vp_dtype node_dtype(const vp_graph *g, const vp_node *n) {
    for (int k = 0; k < n->n_inputs; k++)
        if (n->inputs[k] >= 0 && vp_dtype_is_float(g->values[n->inputs[k]].dtype)) return g->values[n->inputs[k]].dtype;
    return VP_UNDEFINED;
}

static void placement_case(const char *name, vp_precision prec) {
    test_model m;
    vp_error err;
    char what[96];
    snprintf(what, sizeof what, "%s %s", name, vp_precision_name(prec));
    if (load(&m, name, "adam", prec, &err)) {
        check(0, "%s: %s", what, err.msg);
        return;
    }
    const vp_graph *g = m.g;
    vp_dtype low = vp_precision_dtype(prec);
    static const char *const low_ops[] = {"MatMul", "Gemm", "FusedMatMul", "Conv", "ConvGrad", "Attention", "AttentionGrad"};
    static const char *const fp32_ops[] = {"SoftmaxCrossEntropyLoss", "SoftmaxCrossEntropyLossGrad", "LayerNormalization",
                                           "LayerNormalizationGrad", "Softmax", "Adam"};
    int n_low = 0, n_fp32 = 0, wrong = 0;
    char first[300] = "";
    for (int i = 0; i < g->n_nodes; i++) {
        const vp_node *n = &g->nodes[i];
        vp_dtype want = VP_UNDEFINED;
        for (size_t k = 0; k < sizeof low_ops / sizeof *low_ops; k++) want = is_op(n, low_ops[k]) ? low : want;
        for (size_t k = 0; k < sizeof fp32_ops / sizeof *fp32_ops; k++) want = is_op(n, fp32_ops[k]) ? VP_F32 : want;
        if (!want) continue;
        n_low += want == low;
        n_fp32 += want == VP_F32;
        if (node_dtype(g, n) != want && !wrong++)
            snprintf(first, sizeof first, "; '%s' (%s) computes in %s", n->name, n->op_type, vp_dtype_name(node_dtype(g, n)));
    }
    check(n_low > 0 && !wrong, "%s: %d matrix nodes (forward and gradient) in %s, %d loss/norm/softmax/update nodes in float32%s",
          what, n_low, vp_dtype_name(low), n_fp32, first);
    /* master weights: float32 parameters, gradients and state */
    int bad = 0;
    for (int i = 0; i < m.t.n_params; i++)
        bad += g->values[m.t.params[i]].dtype != VP_F32 || (m.t.grads[i] >= 0 && g->values[m.t.grads[i]].dtype != VP_F32);
    int n_state = 0;
    for (int c = 0; c < m.t.n_carry; c++) {
        if (m.t.loss_scaled && m.t.carry[c].from == m.t.scaling.count) continue; /* the int32 clean-step count */
        bad += g->values[m.t.carry[c].to].dtype != VP_F32;
        n_state++;
    }
    check(!bad, "%s: %d parameters, their gradients and %d carried values (Adam moments%s) are float32", what,
          m.t.n_params, n_state, m.t.loss_scaled ? ", the loss scale" : "");
    /* the weight cache: one low copy per parameter, shared by all its low readers */
    int copies_of_one = 0, params_read_low = 0;
    for (int i = 0; i < m.t.n_params; i++) {
        const vp_value *w = &g->values[m.t.params[i]];
        int casts = 0;
        for (int c = 0; c < w->n_consumers; c++) {
            const vp_node *n = &g->nodes[w->consumers[c]];
            casts += is_op(n, "Cast") && n->phase == VP_PHASE_FORWARD && g->values[n->outputs[0]].dtype == low;
        }
        params_read_low += casts > 0;
        copies_of_one += casts == 1;
    }
    check(params_read_low > 0 && copies_of_one == params_read_low && m.t.precision.weight_copies == params_read_low,
          "%s: %d parameters read in %s, each through exactly one copy (%d copies, %lld bytes)", what, params_read_low,
          vp_dtype_name(low), m.t.precision.weight_copies, (long long)m.t.precision.weight_copy_bytes);
    test_model_free(&m);
}

/* --fp32-ops and --low-ops move ops over the lists; unknown names are refused. */
static void override_case(void) {
    test_model m;
    vp_error err;
    vp_train_spec spec;
    memset(&spec, 0, sizeof spec);
    vp_loss_parse("ce:logits", &spec.loss, &err);
    vp_opt_parse("sgd", &spec.opt, &err);
    spec.precision = VP_PRECISION_BF16;
    spec.fp32_ops = "Gemm";
    vp_status s = test_model_load(&m, "mlp", &spec, &err);
    check(!s && m.t.precision.low_nodes == 0 && m.t.precision.casts == 0,
          "mlp bf16 with --fp32-ops Gemm: %d nodes low, %d casts (nothing left to run low)", s ? -1 : m.t.precision.low_nodes,
          s ? -1 : m.t.precision.casts);
    if (!s) test_model_free(&m);
    spec.fp32_ops = NULL;
    spec.low_ops = "Softmax,LayerNormalization";
    s = test_model_load(&m, "gpt", &spec, &err);
    int low = 0, total = 0;
    for (int i = 0; !s && i < m.g->n_nodes; i++) {
        const vp_node *n = &m.g->nodes[i];
        if (n->phase != VP_PHASE_FORWARD || (strcmp(n->op_type, "Softmax") && strcmp(n->op_type, "LayerNormalization")))
            continue;
        total++;
        low += node_dtype(m.g, n) == VP_BF16;
    }
    check(!s && total > 0 && low == total, "gpt bf16 with --low-ops Softmax,LayerNormalization: %d of %d run in bf16", low,
          total);
    if (!s) test_model_free(&m);
    vp_precision_opts po = {VP_PRECISION_BF16, "Relu,Frobnicate", NULL};
    s = vp_precision_check_ops(&po, &err);
    check(s == VP_ERR_USAGE && strstr(err.msg, "'Frobnicate'"), "an unknown op in --fp32-ops is refused: %s",
          s ? err.msg : "accepted");
}

/* A bf16 MatMul [1 x 4] x [4 x 1]: 256 + 1 + 1 + 1 is 259 in float32, which rounds to
 * 260 in bf16 (8 significant bits: 256, 258, 260); summed in bf16 it stays 256 (each
 * +1 is a tie that rounds to even).  257 (256 + 1) is a tie and rounds to 256. */
static void kernel_case(void) {
    const vp_op_def *op = vp_op_find("", "MatMul");
    uint16_t a[2][4], b[4], y = 0;
    const float av[2][4] = {{256, 1, 1, 1}, {256, 1, 0, 0}};
    for (int r = 0; r < 2; r++)
        for (int k = 0; k < 4; k++) a[r][k] = vp_f32_to_bf16(av[r][k]);
    for (int k = 0; k < 4; k++) b[k] = vp_f32_to_bf16(1.0f);
    const float want[2] = {260, 256};
    int inputs[2] = {0, 1}, outputs[1] = {2};
    vp_node n;
    memset(&n, 0, sizeof n);
    n.name = "bf16_matmul";
    n.op_type = "MatMul";
    n.domain = "";
    n.op = op;
    n.n_inputs = 2;
    n.inputs = inputs;
    n.n_outputs = 1;
    n.outputs = outputs;
    for (int r = 0; r < 2; r++) {
        vp_tensor ta = {.dtype = VP_BF16, .rank = 2, .dims = {1, 4}, .data = a[r]};
        vp_tensor tb = {.dtype = VP_BF16, .rank = 2, .dims = {4, 1}, .data = b};
        vp_tensor ty = {.dtype = VP_BF16, .rank = 2, .dims = {1, 1}, .data = &y};
        const vp_tensor *in[2] = {&ta, &tb};
        vp_tensor *out[1] = {&ty};
        vp_error err;
        vp_cpu_fn kernel = vp_cpu_kernel_of(op);
        vp_status s = kernel ? kernel(&n, in, out, &err) : VP_ERR_UNSUPPORTED;
        float got = vp_bf16_to_f32(y);
        check(!s && got == want[r], "bf16 MatMul of [%g, %g, %g, %g] and ones: %g (float32 accumulation, round to nearest even: %g)",
              av[r][0], av[r][1], av[r][2], av[r][3], got, want[r]);
    }
}

static int checkpointed_plans; /* dp plans that recompute something */

static void planned_case(const char *name, vp_precision prec) {
    test_model m;
    vp_error err;
    char what[96], why[1024];
    snprintf(what, sizeof what, "%s %s adamw", name, vp_precision_name(prec));
    vp_plan p;
    memset(&p, 0, sizeof p);
    vp_status s = load(&m, name, "adamw", prec, &err);
    if (!s) s = test_plan_step(m.g, &m.t, vp_device_find("cpu"), 1, &p, &err);
    if (s) check(0, "%s: %s", what, err.msg);
    else {
        int r = test_compare_planned(&m, &p, 3, m.t.params, m.t.n_params, why, sizeof why);
        check(r == 1, "%s: planned execution bit-identical to naive over 3 steps, %d parameters compared%s%s", what,
              m.t.n_params, r == 1 ? "" : ": ", r == 1 ? "" : why);
    }
    /* checkpointed at 70% of that arena: recompute nodes run in the dtype of what they redo */
    if (!s) {
        vp_plan q;
        memset(&q, 0, sizeof q);
        vp_graph *planned = NULL;
        vp_remat_result rr;
        if (test_plan_step_remat(m.g, &m.t, vp_device_find("cpu"), 1, p.arena_bytes * 7 / 10, VP_REMAT_DP, NULL,
                                    &planned, &q, &rr, &err))
            check(0, "%s dp at 70%%: %s", what, err.msg);
        else {
            int r = test_compare_planned(&m, &q, 3, m.t.params, m.t.n_params, why, sizeof why);
            checkpointed_plans += rr.n_recompute > 0;
            check(r == 1,
                  "%s dp at 70%% (%d recompute nodes, arena %lld of %lld): bit-identical to naive%s%s", what,
                  rr.n_recompute, (long long)q.arena_bytes, (long long)p.arena_bytes, r == 1 ? "" : ": ",
                  r == 1 ? "" : why);
        }
        vp_plan_free(&q);
        if (planned && planned != m.g) vp_graph_free(planned);
    }
    vp_plan_free(&p);
    test_model_free(&m);
}

/* 20 AdamW steps in bf16 against torch.autocast("cpu", torch.bfloat16).  The tolerance
 * is bf16's own effect on the curve, measured by torch on the same model: G, the largest
 * |torch bf16 - torch fp32| over the steps.  Two correct bf16 implementations round at
 * different points (torch's CPU BatchNorm and AdaptiveAvgPool run in bf16, ours keep
 * float32 statistics and pool in float32 as autocast's reduction list says; accumulation
 * orders differ), so each carries rounding noise of about G of its own, and Adam turns
 * the sign of tiny gradient components into full lr-sized steps; the distance between
 * the two is then up to about 2G.  We allow 3G, and never more than 1% of the first
 * loss (so that a model whose torch bf16 curve strays far from float32 cannot make the
 * bound loose).  In float32 the same curves match torch to 1e-6 (test_training), so
 * what is left is precision.  Measured: mlp G 7.1e-4, ours 1.3e-3 off; cnn G 3.4e-3,
 * ours 4.7e-3 off; gpt (both exports) G 2.3e-2, ours 1.8e-2 off (closer to torch's
 * float32 curve than torch's bf16 is: the GPT's LayerNorm and softmax run in float32
 * in both, its residual stream too, so the difference is where the two round inside
 * the fused attention and GELU and in their accumulation orders).  Since G bounds how
 * far bf16 moves a curve at all, the bound alone would also pass a float32 run; that
 * bf16 is really computed shows at the first loss, before any update: it is farther
 * from torch's float32 loss than 8x our float32 accuracy (1e-6). */
/* The losses of 20 AdamW steps of m's graph on the fixture batch (carries copied). */
static vp_status run_curve(test_model *m, int steps, double *got, double *final_scale, vp_error *err) {
    vp_backend *b = vp_backend_cpu_new();
    vp_exec *x = NULL;
    vp_status s = vp_exec_new(m->g, b, &x, err);
    if (!s) s = test_model_feed(x, m, err);
    for (int k = 0; k < steps && !s; k++) {
        s = vp_exec_run(x, err);
        got[k] = get_scalar(x, m->t.loss, &s, err);
        if (!s) s = test_model_carry(x, m, err);
    }
    if (final_scale) *final_scale = m->t.loss_scaled ? get_scalar(x, m->t.scaling.scale, &s, err) : 1;
    vp_exec_free(x);
    vp_backend_free(b);
    return s;
}

/* fp16 (with loss scaling at GradScaler's 65536) against float32: torch's float32 curve
 * of the same fixture (ours matches it to 1e-6, test_training).  float16 rounds at
 * 2^-11, 8x finer than bfloat16's 2^-8, so its effect on the curve should be about G/8
 * (G: torch's own bf16-to-fp32 gap, the measure of bf16's effect); we allow G/2.  No
 * step may have been skipped (the scale is still 65536 after 20 steps). */
static void fp16_curve_case(const char *name) {
    char path[4200];
    snprintf(path, sizeof path, "%s/models/%s/fixtures/train_adamw_bf16.json", VP_SOURCE_DIR, name);
    mj *fx = mj_parse_file(path);
    const mj *bf = fx ? mj_get(fx, "losses") : NULL, *ref32 = fx ? mj_get(fx, "losses_fp32") : NULL;
    if (!bf || !ref32 || bf->n != ref32->n || ref32->n > 64) {
        check(0, "%s: cannot read %s", name, path);
        mj_free(fx);
        return;
    }
    test_model m;
    vp_error err;
    double got[64], scale = 0, worst = 0, gap = 0;
    vp_status s = load(&m, name, "adamw", VP_PRECISION_FP16, &err);
    if (!s) s = run_curve(&m, ref32->n, got, &scale, &err);
    for (int k = 0; !s && k < ref32->n; k++) {
        worst = fmax(worst, fabs(got[k] - ref32->items[k].num));
        gap = fmax(gap, fabs(bf->items[k].num - ref32->items[k].num));
    }
    if (s) check(0, "%s fp16 curve: %s", name, err.msg);
    else
        check(worst <= gap / 2 && scale == 65536.0,
              "%s fp16: %d AdamW steps, worst difference from torch float32 %.2g (tolerance %.2g: half torch's bf16 gap); "
              "loss scale %g (no step skipped)", name, ref32->n, worst, gap / 2, scale);
    if (!s) test_model_free(&m);
    mj_free(fx);
}

static void curve_case(const char *name, int same_placement) {
    char path[4200];
    snprintf(path, sizeof path, "%s/models/%s/fixtures/train_adamw_bf16.json", VP_SOURCE_DIR, name);
    mj *fx = mj_parse_file(path);
    const mj *losses = fx ? mj_get(fx, "losses") : NULL, *ref32 = fx ? mj_get(fx, "losses_fp32") : NULL;
    if (!losses || !ref32 || losses->n != ref32->n || losses->n > 64) {
        check(0, "%s: cannot read %s", name, path);
        mj_free(fx);
        return;
    }
    test_model m;
    vp_error err;
    vp_backend *b = vp_backend_cpu_new();
    vp_exec *x = NULL;
    vp_status s = load(&m, name, "adamw", VP_PRECISION_BF16, &err);
    if (!s) s = vp_exec_new(m.g, b, &x, &err);
    if (!s) s = test_model_feed(x, &m, &err);
    double worst = 0, gap = 0, got[64] = {0};
    int steps = losses->n < 64 ? losses->n : 64;
    if (!s) s = test_model_run_steps(x, &m, steps, got, &err);
    for (int k = 0; k < steps && !s; k++) {
        worst = fmax(worst, fabs(got[k] - losses->items[k].num));
        gap = fmax(gap, fabs(ref32->items[k].num - losses->items[k].num));
    }
    double tol = fmin(3 * gap, 0.01 * losses->items[0].num);
    if (s) check(0, "%s bf16 curve: %s", name, err.msg);
    else
        check(worst <= tol,
              "%s bf16: %d AdamW steps, losses %.6f .. %.6f, worst difference from torch autocast %.2g (tolerance %.2g: "
              "3x torch's own bf16-to-fp32 gap %.2g, at most 1%% of the first loss)",
              name, steps, got[0], got[steps - 1], worst, tol, gap);
    /* where torch places every op as we do (the MLP: Linear with its bias, ReLU, all in
     * bf16), the first loss, before any update, is the same to float32 printing
     * accuracy, and farther from the float32 loss: bf16 is really computed */
    double l0 = losses->items[0].num, f0 = ref32->items[0].num;
    if (!s)
        check(fabs(got[0] - f0) > 8e-6, "%s bf16: first loss %.7f, %.2g from torch float32's %.7f (bf16 computed)", name,
              got[0], fabs(got[0] - f0), f0);
    if (!s && same_placement)
        check(fabs(got[0] - l0) <= 2e-6 && fabs(got[0] - f0) > 4 * fabs(got[0] - l0),
              "%s bf16: first loss %.7f, torch autocast %.7f, torch float32 %.7f", name, got[0], l0, f0);
    vp_exec_free(x);
    vp_backend_free(b);
    test_model_free(&m);
    mj_free(fx);
}

static double get_scalar(vp_exec *x, int id, vp_status *s, vp_error *err) {
    vp_tensor t = {0};
    if (!*s) *s = vp_exec_get(x, id, &t, err);
    double v = *s ? 0 : vp_load(t.data, t.dtype, 0);
    free(t.data);
    return v;
}

static int same_value(vp_exec *x, int a, int b, vp_status *s, vp_error *err) {
    vp_tensor ta = {0}, tb = {0};
    if (!*s) *s = vp_exec_get(x, a, &ta, err);
    if (!*s) *s = vp_exec_get(x, b, &tb, err);
    int same = !*s && ta.dtype == tb.dtype && vp_tensor_nbytes(&ta) == vp_tensor_nbytes(&tb) &&
               !memcmp(ta.data, tb.data, vp_tensor_nbytes(&ta));
    free(ta.data);
    free(tb.data);
    return same;
}

/* Starts at 2^40, far past float16's range for these gradients, with growth after 3
 * clean steps: the first steps overflow and are skipped, the scale halves each time,
 * then training goes on and the scale grows back. */
static void loss_scale_case(const char *name) {
    test_model m;
    vp_error err;
    vp_train_spec spec;
    memset(&spec, 0, sizeof spec);
    vp_loss_parse("ce:logits", &spec.loss, &err);
    vp_opt_parse("adam", &spec.opt, &err);
    spec.precision = VP_PRECISION_FP16;
    spec.loss_scale.init = 1099511627776.0; /* 2^40 */
    spec.loss_scale.interval = 3;
    vp_status s = test_model_load(&m, name, &spec, &err);
    if (s || !m.t.loss_scaled) {
        check(0, "%s fp16 loss scaling: %s", name, s ? err.msg : "not built");
        if (!s) test_model_free(&m);
        return;
    }
    const vp_loss_scale *ls = &m.t.scaling;
    vp_backend *b = vp_backend_cpu_new();
    vp_exec *x = NULL;
    s = vp_exec_new(m.g, b, &x, &err);
    if (!s) s = test_model_feed(x, &m, &err);
    int skipped = 0, leading_skips = 0, grown = 0, rule_broken = 0, skip_changed = 0, steps = 0, first_clean = -1;
    double first_loss = 0, last_loss = 0, scale0 = get_scalar(x, ls->scale, &s, &err);
    for (int k = 0; k < 60 && !s; k++, steps++) {
        double scale = get_scalar(x, ls->scale, &s, &err), count = get_scalar(x, ls->count, &s, &err);
        if (!s) s = vp_exec_run(x, &err);
        int finite = get_scalar(x, ls->finite, &s, &err) != 0;
        double nscale = get_scalar(x, ls->new_scale, &s, &err), ncount = get_scalar(x, ls->new_count, &s, &err);
        double loss = get_scalar(x, m.t.loss, &s, &err);
        if (k == 0) first_loss = loss;
        last_loss = loss;
        /* GradScaler's rule */
        double want_scale = !finite ? scale * 0.5 : count + 1 == 3 ? scale * 2 : scale;
        double want_count = !finite || count + 1 == 3 ? 0 : count + 1;
        rule_broken += nscale != want_scale || ncount != want_count;
        skipped += !finite;
        leading_skips += !finite && first_clean < 0;
        grown += finite && nscale > scale;
        if (finite && first_clean < 0) first_clean = k;
        /* a skipped step leaves every optimizer-carried value (parameters, moments, steps) as it was */
        for (int c = ls->n_opt_carry0; !finite && c < m.t.n_carry - 2 && !s; c++)
            skip_changed += !same_value(x, m.t.carry[c].from, m.t.carry[c].to, &s, &err);
        if (!s) s = test_model_carry(x, &m, &err);
    }
    if (s) check(0, "%s fp16 loss scaling: %s", name, err.msg);
    else {
        check(leading_skips > 0 && first_clean == leading_skips && !skip_changed,
              "%s fp16: scale %g overflowed the first %d steps, then %d more over %d steps; each skipped with "
              "parameters and optimizer state bit-identical (%d carried values changed)",
              name, scale0, leading_skips, skipped - leading_skips, steps, skip_changed);
        check(!rule_broken && grown > 0,
              "%s fp16: over %d steps the scale followed GradScaler's rule (halve on overflow, double after 3 clean "
              "steps; %d growths, %d breaks)", name, steps, grown, rule_broken);
        check(last_loss < first_loss, "%s fp16: training went on after the skipped steps, loss %.6f -> %.6f", name,
              first_loss, last_loss);
    }
    vp_exec_free(x);
    vp_backend_free(b);
    /* the same graph planned: skipped and clean steps bit-identical to naive */
    vp_plan p;
    memset(&p, 0, sizeof p);
    char why[1024];
    if (test_plan_step(m.g, &m.t, vp_device_find("cpu"), 1, &p, &err)) check(0, "%s fp16 plan: %s", name, err.msg);
    else {
        int r = test_compare_planned(&m, &p, 3, m.t.params, m.t.n_params, why, sizeof why);
        check(r == 1, "%s fp16 loss scaling (overflowing steps): planned execution bit-identical to naive%s%s", name,
              r == 1 ? "" : ": ", r == 1 ? "" : why);
    }
    vp_plan_free(&p);
    test_model_free(&m);
}

/* What `train --save` writes for the scale and its count reads back exactly; a saved
 * value that would break the rule (not a power of two: unscaling is no longer exact; a
 * count past the growth interval) is refused naming the key. */
static void resume_case(void) {
    char sb[32], cb[32];
    vp_loss_scale_opts o = {0};
    vp_error err;
    vp_loss_scale_format(1099511627776.0 / 1024, 1999, sb, cb);
    vp_status s = vp_loss_scale_resume(sb, cb, &o, &err);
    check(!s && o.init == 1073741824.0 && o.clean_steps == 1999, "loss scale saved as '%s', '%s': read back %.17g, %lld", sb,
          cb, o.init, (long long)o.clean_steps);
    static const char *const bad[][2] = {{"0x1.8p+1", "0"}, {"-65536", "0"}, {"inf", "0"}, {"0x1p+200", "0"},
                                         {"65536", "2000"}, {"65536", "-1"}, {"65536", "12x"}};
    int refused = 0;
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        vp_loss_scale_opts q = {0};
        s = vp_loss_scale_resume(bad[i][0], bad[i][1], &q, &err);
        refused += s == VP_ERR_INVALID && strstr(err.msg, "metadata 'vplan.loss_scale");
    }
    check(refused == (int)(sizeof bad / sizeof *bad), "%d of %d bad saved scales or counts refused (last: %s)", refused,
          (int)(sizeof bad / sizeof *bad), err.msg);
}

static void arena_case(const char *name, int must_shrink) {
    int64_t arena[3] = {0}, act[3] = {0};
    for (int prec = 0; prec < 3; prec++) {
        test_model m;
        vp_error err;
        vp_plan p;
        memset(&p, 0, sizeof p);
        vp_status s = load(&m, name, "adam", (vp_precision)prec, &err);
        if (!s) s = test_plan_step(m.g, &m.t, vp_device_find("h100"), 1, &p, &err);
        if (s) check(0, "%s %s plan: %s", name, vp_precision_name((vp_precision)prec), err.msg);
        arena[prec] = p.arena_bytes;
        act[prec] = p.category_bytes[VP_CAT_ACTIVATIONS];
        vp_plan_free(&p);
        test_model_free(&m);
    }
    char line[400];
    snprintf(line, sizeof line,
             "%s adam arena fp32 %lld, bf16 %lld (%.2f), fp16 %lld (%.2f); activations %lld, %lld, %lld", name,
             (long long)arena[0], (long long)arena[1], (double)arena[1] / (double)arena[0], (long long)arena[2],
             (double)arena[2] / (double)arena[0], (long long)act[0], (long long)act[1], (long long)act[2]);
    if (must_shrink) check(arena[1] < arena[0] && arena[2] < arena[0] && act[1] < act[0], "%s", line);
    else printf("info %s\n", line);
}

int main(void) {
    vp_cpu_host_install();
    kernel_case();
    override_case();
    static const char *const models[] = {"mlp", "cnn", "gpt"};
    for (int i = 0; i < 3; i++)
        for (int prec = VP_PRECISION_BF16; prec <= VP_PRECISION_FP16; prec++) {
            placement_case(models[i], (vp_precision)prec);
            planned_case(models[i], (vp_precision)prec);
        }
    check(checkpointed_plans >= 4, "%d of the 6 checkpointed low-precision plans recompute something", checkpointed_plans);
    /* every model in models/ against its torch.autocast fixture */
    char names[32][64];
    int n_models = test_model_list(names, 32);
    for (int i = 0; i < n_models; i++) {
        curve_case(names[i], !strcmp(names[i], "mlp"));
        fp16_curve_case(names[i]);
    }
    check(n_models >= 4, "%d models in models/ have bf16 and fp16 curves checked", n_models);
    resume_case();
    loss_scale_case("mlp");
    loss_scale_case("cnn");
    arena_case("gpt", 1);
    arena_case("gpt_ln_decomposed", 1);
    arena_case("cnn", 1);
    arena_case("mlp", 0);
    return check_summary();
}
