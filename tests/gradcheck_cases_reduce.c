/* Gradient checks of the ops that reduce over axes: the normalisations (LRN,
 * BatchNormalization, LayerNormalization, InstanceNormalization), the Reduce* family,
 * Softmax/LogSoftmax and the losses. */
#include "gradcheck_cases.h"

#include <stddef.h>
#include <string.h>

#include "gradcheck_harness.h"
#include "ir/graph_build.h"

static void case_batchnorm(int opset, int rank, const int64_t *x) {
    gc_case k;
    char sx[64];
    if (!gc_begin(&k, opset, "BatchNormalization%s training (BatchNormInternal) opset %d",
                  vp_shape_str(rank, x, sx, sizeof sx), opset))
        return;
    int64_t ch[1] = {x[1]};
    gen var = {GEN_UNIFORM, 0.5, 1.5};
    int in[5] = {gc_param(&k, UNI, rank, x), gc_param(&k, POS, 1, ch), gc_param(&k, UNI, 1, ch),
                 gc_param(&k, UNI, 1, ch), gc_param(&k, var, 1, ch)};
    attr_f(&k, gc_op(&k, "BatchNormalization", 5, in), "epsilon", 1e-3);
    gc_run(&k);
}

/* BatchNormalization exported in training form (training_mode=1, opset 15, with its
 * running-statistics outputs), which the training-mode pass makes BatchNormInternal, or
 * (raw) left as the model has it and differentiated without that pass: training form
 * or inference.  The running statistics are constants. */
static void case_batchnorm_as_is(int training, int raw, int per_activation, int rank, const int64_t *x) {
    gc_case k;
    char sx[64];
    int opset = per_activation ? 7 : 15;
    if (!gc_begin(&k, opset, "BatchNormalization%s %s%s %s, opset %d", vp_shape_str(rank, x, sx, sizeof sx),
                  training ? "training_mode=1" : "inference", per_activation ? " spatial=0" : "",
                  raw ? "as is" : "as BatchNormInternal", opset))
        return;
    int pr = per_activation ? rank - 1 : 1;
    const int64_t *pd = x + 1;
    gen var = {GEN_UNIFORM, 0.5, 1.5};
    int in[5] = {gc_param(&k, UNI, rank, x), gc_param(&k, POS, pr, pd), gc_param(&k, UNI, pr, pd),
                 gc_const(&k, UNI, pr, pd), gc_const(&k, var, pr, pd)};
    int y[3];
    int node = gc_node(&k, "BatchNormalization", "", 5, in, training ? 3 : 1, y);
    gc_loss_on(&k, y[0]);
    attr_f(&k, node, "epsilon", 1e-3);
    if (training) attr_i(&k, node, "training_mode", 1);
    if (per_activation) attr_i(&k, node, "spatial", 0);
    k.raw = raw;
    gc_run(&k);
}

static void case_layernorm(int axis, int bias, int n_out, int rank, const int64_t *x) {
    gc_case k;
    char sx[64];
    if (!gc_begin(&k, 17, "LayerNormalization%s axis=%d%s, %d outputs", vp_shape_str(rank, x, sx, sizeof sx), axis,
                  bias ? "" : " no bias", n_out))
        return;
    int a = axis < 0 ? axis + rank : axis, nr = rank - a;
    int in[3] = {gc_param(&k, UNI, rank, x), gc_param(&k, POS, nr, x + a), bias ? gc_param(&k, UNI, nr, x + a) : -1};
    int y[3];
    int node = gc_node(&k, "LayerNormalization", "", bias ? 3 : 2, in, n_out, y);
    gc_loss_on(&k, y[0]);
    attr_i(&k, node, "axis", axis);
    attr_f(&k, node, "epsilon", 1e-3);
    /* float64 statistics in the float64 pass (float32 ones would defeat the finite
     * differences); float32 ones in the others, as mixed precision has them */
    attr_i(&k, node, "stash_type", gc_dtype() == VP_F64 ? VP_F64 : VP_F32);
    gc_run(&k);
}

/* LayerNorm as torch.onnx writes it below opset 17, (x - mean) / sqrt(var + eps) * w + b
 * over the last `axes` axes (without w and b when !affine): vp_training_build fuses it
 * into LayerNormalization (test_fusion checks that it does), so this checks the fused
 * gradients against finite differences of the exporter's graph. */
static void case_layernorm_pattern(int affine, int axes, int rank, const int64_t *x) {
    gc_case k;
    char sx[64];
    if (!gc_begin(&k, 13, "LayerNorm pattern%s over %d last axes%s (fused)", vp_shape_str(rank, x, sx, sizeof sx), axes,
                  affine ? ", affine" : ""))
        return;
    int64_t ax[VP_MAX_RANK];
    for (int i = 0; i < axes; i++) ax[i] = rank - axes + i;
    int v = gc_param(&k, UNI, rank, x), y[6];
    int in[2] = {v, -1};
    attr_is(&k, gc_node(&k, "ReduceMean", "", 1, in, 1, &y[0]), "axes", axes, ax);
    gc_node(&k, "Sub", "", 2, (int[]){v, y[0]}, 1, &y[1]);
    gc_node(&k, "Pow", "", 2, (int[]){y[1], gc_scalar(&k, 2)}, 1, &y[2]);
    attr_is(&k, gc_node(&k, "ReduceMean", "", 1, &y[2], 1, &y[3]), "axes", axes, ax);
    gc_node(&k, "Add", "", 2, (int[]){y[3], gc_scalar(&k, 1e-3)}, 1, &y[4]);
    gc_node(&k, "Sqrt", "", 1, &y[4], 1, &y[5]);
    int out;
    gc_node(&k, "Div", "", 2, (int[]){y[1], y[5]}, 1, &out);
    if (affine) {
        gc_node(&k, "Mul", "", 2, (int[]){out, gc_param(&k, POS, axes, x + rank - axes)}, 1, &out);
        gc_node(&k, "Add", "", 2, (int[]){out, gc_param(&k, UNI, axes, x + rank - axes)}, 1, &out);
    }
    gc_loss_on(&k, out);
    gc_run(&k);
}

/* com.microsoft.SimplifiedLayerNormalization (RMSNorm), Y alone or with inv_std_var. */
static void case_rms_norm(int axis, int n_out, int rank, const int64_t *x) {
    gc_case k;
    char sx[64];
    if (!gc_begin(&k, 17, "SimplifiedLayerNormalization%s axis=%d, %d outputs", vp_shape_str(rank, x, sx, sizeof sx),
                  axis, n_out))
        return;
    int a = axis < 0 ? axis + rank : axis, nr = rank - a;
    int in[2] = {gc_param(&k, UNI, rank, x), gc_param(&k, POS, nr, x + a)}, y[2];
    int node = gc_node(&k, "SimplifiedLayerNormalization", "com.microsoft", 2, in, n_out, y);
    gc_loss_on(&k, y[0]);
    attr_i(&k, node, "axis", axis);
    attr_f(&k, node, "epsilon", 1e-3);
    attr_i(&k, node, "stash_type", gc_dtype() == VP_F64 ? VP_F64 : VP_F32);
    gc_run(&k);
}

/* RMSNorm as torch 2.x writes Llama's, x * Reciprocal(Sqrt(ReduceMean(Pow(x, 2)) + eps)) * w
 * (recip: the Reciprocal form; else Div, with x * x for the square, as infer expands ONNX's
 * RMSNormalization): fused into SimplifiedLayerNormalization, its gradients checked
 * against finite differences of the exporter's graph. */
static void case_rms_norm_pattern(int recip, int rank, const int64_t *x) {
    gc_case k;
    char sx[64];
    if (!gc_begin(&k, 18, "RMSNorm pattern%s, %s (fused)", vp_shape_str(rank, x, sx, sizeof sx),
                  recip ? "Pow and Reciprocal" : "Mul and Div"))
        return;
    int v = gc_param(&k, UNI, rank, x), sq, ms, var, rms, out;
    if (recip) gc_node(&k, "Pow", "", 2, (int[]){v, gc_scalar(&k, 2)}, 1, &sq);
    else gc_node(&k, "Mul", "", 2, (int[]){v, v}, 1, &sq);
    int axes = gc_ints(&k, 1, (int64_t[]){-1});
    gc_node(&k, "ReduceMean", "", 2, (int[]){sq, axes}, 1, &ms);
    gc_node(&k, "Add", "", 2, (int[]){ms, gc_scalar(&k, 1e-3)}, 1, &var);
    gc_node(&k, "Sqrt", "", 1, &var, 1, &rms);
    if (recip) {
        int inv;
        gc_node(&k, "Reciprocal", "", 1, &rms, 1, &inv);
        gc_node(&k, "Mul", "", 2, (int[]){v, inv}, 1, &out);
    } else {
        gc_node(&k, "Div", "", 2, (int[]){v, rms}, 1, &out);
    }
    gc_node(&k, "Mul", "", 2, (int[]){gc_param(&k, POS, 1, x + rank - 1), out}, 1, &out);
    gc_loss_on(&k, out);
    gc_run(&k);
}

static void case_lrn(int size, double alpha, double beta, double bias, int rank, const int64_t *x) {
    gc_case k;
    char sx[64];
    if (!gc_begin(&k, 13, "LRN%s size=%d alpha=%g beta=%g bias=%g", vp_shape_str(rank, x, sx, sizeof sx), size, alpha,
                  beta, bias))
        return;
    int p = gc_param(&k, UNI, rank, x);
    int n = gc_op(&k, "LRN", 1, &p);
    attr_i(&k, n, "size", size);
    attr_f(&k, n, "alpha", alpha);
    attr_f(&k, n, "beta", beta);
    attr_f(&k, n, "bias", bias);
    gc_run(&k);
}

static void cases_norm(void) {
    case_lrn(3, 0.5, 0.75, 1.0, DIMS(2, 5, 3, 2));
    case_lrn(4, 0.3, 0.5, 2.0, DIMS(1, 6, 4));
    case_lrn(5, 1e-4, 0.75, 1.0, DIMS(1, 3, 2, 2));
    case_lrn(1, 0.8, 1.5, 1.5, DIMS(2, 4, 3));
    case_batchnorm(13, DIMS(2, 3, 4, 4));
    case_batchnorm(9, DIMS(5, 3));
    case_batchnorm(15, DIMS(3, 2, 5));
    case_batchnorm_as_is(1, 0, 0, DIMS(2, 3, 4, 4));
    case_batchnorm_as_is(1, 0, 0, DIMS(5, 3));
    case_batchnorm_as_is(1, 1, 0, DIMS(2, 3, 4, 4));
    case_batchnorm_as_is(1, 1, 0, DIMS(5, 3));
    case_batchnorm_as_is(0, 1, 0, DIMS(2, 3, 4, 4));
    case_batchnorm_as_is(0, 1, 1, DIMS(4, 3, 2));
    case_layernorm(-1, 1, 1, DIMS(2, 3, 4));
    case_layernorm(1, 1, 1, DIMS(2, 3, 4));
    case_layernorm(0, 1, 1, DIMS(2, 3, 4));
    case_layernorm(-1, 0, 1, DIMS(3, 5));
    case_layernorm(2, 1, 3, DIMS(2, 3, 4, 2));
    case_layernorm_pattern(1, 1, DIMS(2, 3, 4));
    case_layernorm_pattern(0, 1, DIMS(3, 5));
    case_layernorm_pattern(1, 2, DIMS(2, 3, 4));
    case_rms_norm(-1, 1, DIMS(2, 3, 4));
    case_rms_norm(1, 2, DIMS(2, 3, 4));
    case_rms_norm_pattern(1, DIMS(2, 3, 4));
    case_rms_norm_pattern(0, DIMS(3, 5));
    gc_case k;
    if (gc_begin(&k, 13, "InstanceNormalization[2,3,4,5]")) {
        int in[3] = {gc_param(&k, UNI, DIMS(2, 3, 4, 5)), gc_param(&k, POS, DIMS(3)), gc_param(&k, UNI, DIMS(3))};
        attr_f(&k, gc_op(&k, "InstanceNormalization", 3, in), "epsilon", 1e-3);
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "InstanceNormalization[3,2,6] 1-D")) {
        int in[3] = {gc_param(&k, UNI, DIMS(3, 2, 6)), gc_param(&k, POS, DIMS(2)), gc_param(&k, UNI, DIMS(2))};
        gc_op(&k, "InstanceNormalization", 3, in);
        gc_run(&k);
    }
    /* GroupNormalization, expanded into InstanceNormalization (planner/ir/group_norm_op.c):
     * opset 21's scale and bias per channel, opset 18's per group */
    if (gc_begin(&k, 21, "GroupNormalization[2,6,5] 3 groups, opset 21")) {
        int in[3] = {gc_param(&k, UNI, DIMS(2, 6, 5)), gc_param(&k, POS, DIMS(6)), gc_param(&k, UNI, DIMS(6))};
        int n = gc_op(&k, "GroupNormalization", 3, in);
        attr_i(&k, n, "num_groups", 3);
        attr_f(&k, n, "epsilon", 1e-3);
        gc_run(&k);
    }
    if (gc_begin(&k, 18, "GroupNormalization[2,4,3,2] 2 groups, opset 18")) {
        int in[3] = {gc_param(&k, UNI, DIMS(2, 4, 3, 2)), gc_param(&k, POS, DIMS(2)), gc_param(&k, UNI, DIMS(2))};
        attr_i(&k, gc_op(&k, "GroupNormalization", 3, in), "num_groups", 2);
        gc_run(&k);
    }
}

static void case_reduce(const char *op, int opset, gen ge, int n_axes, const int64_t *axes, int keepdims, int noop) {
    gc_case k;
    char sa[64];
    if (!gc_begin(&k, opset, "%s[2,3,4] axes=%s keepdims=%d%s opset %d", op,
                  n_axes ? vp_shape_str(n_axes, axes, sa, sizeof sa) : "none", keepdims,
                  noop ? " noop_with_empty_axes" : "", opset))
        return;
    int axes_input = opset >= (strcmp(op, "ReduceSum") ? 18 : 13);
    int in[2] = {gc_param(&k, ge, DIMS(2, 3, 4)), -1};
    if (axes_input && n_axes) in[1] = gc_ints(&k, n_axes, axes);
    int n = gc_op(&k, op, in[1] >= 0 ? 2 : 1, in);
    if (!axes_input && n_axes) attr_is(&k, n, "axes", n_axes, axes);
    attr_i(&k, n, "keepdims", keepdims);
    if (noop) attr_i(&k, n, "noop_with_empty_axes", 1);
    gc_run(&k);
}

static void cases_reduce(void) {
    static const char *ops[] = {"ReduceSum", "ReduceMean", "ReduceMax",    "ReduceMin",      "ReduceSumSquare",
                                "ReduceL2",  "ReduceL1",   "ReduceLogSum", "ReduceLogSumExp"};
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) {
        gen ge = i == 2 || i == 3                  ? DISTINCT
                 : !strcmp(ops[i], "ReduceL1")     ? AWAY
                 : !strcmp(ops[i], "ReduceLogSum") ? POS
                                                   : UNI;
        case_reduce(ops[i], 13, ge, 1, (int64_t[]){1}, 1, 0);
        case_reduce(ops[i], 11, ge, 2, (int64_t[]){0, -1}, 0, 0);
        case_reduce(ops[i], 18, ge, 1, (int64_t[]){-1}, 0, 0);
        case_reduce(ops[i], 13, ge, 0, NULL, 0, 0);
    }
    case_reduce("ReduceProd", 13, UNI, 1, (int64_t[]){1}, 1, 0);
    case_reduce("ReduceProd", 18, UNI, 2, (int64_t[]){0, 2}, 0, 0);
    gc_case k;
    if (gc_begin(&k, 18, "ReduceProd with zeros, as PyTorch")) {
        int p = gc_param(&k, UNI, 2, (int64_t[]){3, 3});
        /* rows: no zero, one zero, two zeros */
        gc_set_values(&k, p, 9, (double[]){2, 3, 0.5, 2, 0, 3, 0, 4, 0});
        gc_op(&k, "ReduceProd", 2, (int[]){p, gc_ints(&k, 1, (int64_t[]){1})});
        k.expect[0] = (double[]){1.5, 1, 6, 0, 6, 0, 0, 0, 0};
        gc_run(&k);
    }
    case_reduce("ReduceSum", 13, UNI, 0, NULL, 1, 1);
    case_reduce("ReduceMean", 18, UNI, 0, NULL, 0, 1);
}

static void case_softmax(const char *op, int opset, int axis) {
    gc_case k;
    if (!gc_begin(&k, opset, "%s[2,3,4] axis=%d opset %d", op, axis, opset)) return;
    int x = gc_param(&k, UNI, DIMS(2, 3, 4));
    attr_i(&k, gc_op(&k, op, 1, &x), "axis", axis);
    gc_run(&k);
}

static void cases_softmax(void) {
    static const char *ops[2] = {"Softmax", "LogSoftmax"};
    for (int i = 0; i < 2; i++) {
        gc_case k;
        if (gc_begin(&k, 7, "%s[2,3,4] default axis opset 7", ops[i])) {
            int x = gc_param(&k, UNI, DIMS(2, 3, 4));
            gc_op(&k, ops[i], 1, &x);
            gc_run(&k);
        }
        case_softmax(ops[i], 13, -1);
        case_softmax(ops[i], 13, 1);
        case_softmax(ops[i], 13, 0);
        case_softmax(ops[i], 11, 1);
        case_softmax(ops[i], 11, 2);
        case_softmax(ops[i], 11, 0);
    }
}

static void case_loss(const char *op, const char *reduction, int rank, const int64_t *dims, int weights, int ignore,
                      int log_prob) {
    gc_case k;
    char sd[64];
    if (!gc_begin(&k, 13, "%s%s reduction=%s%s%s%s", op, vp_shape_str(rank, dims, sd, sizeof sd), reduction,
                  weights ? " weights" : "", ignore ? " ignore_index=1" : "", log_prob ? " log_prob in the loss" : ""))
        return;
    int64_t ldims[VP_MAX_RANK], labels[64];
    int lrank = 0;
    for (int d = 0; d < rank; d++)
        if (d != 1) ldims[lrank++] = dims[d];
    int64_t n = gc_numel(lrank, ldims);
    for (int64_t i = 0; i < n; i++) labels[i] = (int64_t)(vp_rng_next(&k.rng) % (uint64_t)dims[1]);
    labels[0] = 1;         /* one ignored entry at least when ignore_index is set */
    if (ignore && n > 2) { /* two ignored, one counted at least: a mean over none is NaN */
        labels[n - 1] = 1;
        labels[1] = 0;
    }
    int in[3] = {gc_param(&k, UNI, rank, dims), vp_build_const(k.g, "labels", VP_I64, lrank, ldims, labels), -1};
    if (weights) in[2] = gc_const(&k, POS, 1, dims + 1);
    int y[2];
    int node = gc_node(&k, op, "", weights ? 3 : 2, in, log_prob ? 2 : 1, y);
    attr_s(&k, node, "reduction", reduction);
    if (ignore) attr_i(&k, node, "ignore_index", 1);
    gc_loss_on(&k, y[0]);
    if (log_prob) gc_loss_on(&k, y[1]);
    gc_run(&k);
}

static void cases_loss(void) {
    static const char *ops[2] = {"SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"};
    for (int i = 0; i < 2; i++) {
        case_loss(ops[i], "mean", DIMS(4, 3), 0, 0, 0);
        case_loss(ops[i], "sum", DIMS(4, 3), 0, 0, 0);
        case_loss(ops[i], "none", DIMS(4, 3), 0, 0, 0);
        case_loss(ops[i], "mean", DIMS(4, 5), 1, 0, 0);
        case_loss(ops[i], "mean", DIMS(4, 5), 1, 1, 0);
        case_loss(ops[i], "mean", DIMS(4, 5), 0, 1, 0);
        case_loss(ops[i], "sum", DIMS(2, 3, 4), 0, 1, 0);
        case_loss(ops[i], "none", DIMS(2, 3, 2, 2), 1, 0, 0);
        case_loss(ops[i], "none", DIMS(2, 3, 2, 2), 1, 1, 0);
    }
    case_loss(ops[0], "mean", DIMS(4, 3), 0, 0, 1);
}

void gc_cases_reduce(void) {
    cases_norm();
    cases_reduce();
    cases_softmax();
    cases_loss();
}
