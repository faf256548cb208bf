/* Finite-difference check of every gradient rule.
 *
 * Each case is a tiny graph: random trainable parameters, one op under test, and a
 * scalar loss over its outputs.  Its gradients are compared with five-point central
 * differences in float64, and then, in float32, float16 and bfloat16, with those of a
 * float64 twin of the case (gradcheck_harness.c says how, and within what bounds).  The
 * cases live in one table per op family (gradcheck_cases_*.c); here are the cases at
 * kinks and of refused variants, and the order in which all run.
 *
 * Inputs of ops with kinks (Relu, Abs, Clip, Max, pooling, ReduceMax) are drawn away
 * from the kinks (and distinct from one another), since a finite difference across a
 * kink measures neither side.  At the kinks themselves a few cases compare with the
 * exact gradients PyTorch gives there (Relu and Abs 0 at 0, Clip 1 on its closed
 * range, ties of Max and ReduceMax split evenly, ...), with the loss sum(y).
 * Variants a rule does not handle are checked to be refused, never differentiated.
 *
 * usage: test_gradcheck [SUBSTR]   (only cases whose label contains SUBSTR)
 * Prints one line per case and a final "N passed, N failed". */
#include "cpu_host.h"
#include "gradcheck_cases.h"
#include "gradcheck_harness.h"
#include "ir/graph_build.h"

/* A unary op at its kinks, with PyTorch's gradient there (the loss is sum(y)). */
static void case_kink(const char *op, const char *attr, double attr_v, int n, const double *x, const double *want) {
    gc_case k;
    if (!gc_begin(&k, 14, "%s at its kinks, as PyTorch", op)) return;
    int p = gc_param(&k, UNI, 1, (int64_t[]){n});
    gc_set_values(&k, p, n, x);
    int node = gc_op(&k, op, 1, &p);
    if (attr) attr_f(&k, node, attr, attr_v);
    k.expect[0] = want;
    gc_run(&k);
}

static void cases_kinks(void) {
    case_kink("Relu", NULL, 0, 3, (double[]){0, -1, 2}, (double[]){0, 0, 1});
    case_kink("Abs", NULL, 0, 3, (double[]){0, -2, 3}, (double[]){0, -1, 1});
    case_kink("LeakyRelu", "alpha", 0.25, 3, (double[]){0, -1, 1}, (double[]){0.25, 0.25, 1});
    case_kink("HardSwish", NULL, 0, 4, (double[]){-3, 3, -4, 4}, (double[]){-0.5, 1.5, 0, 1});
    case_kink("Shrink", "lambd", 0.5, 3, (double[]){-0.5, 0.5, 1}, (double[]){0, 0, 1});
    gc_case k;
    /* read off the output, as PyTorch's hardtanh and relu6 (torch.clamp would pass 1) */
    if (gc_begin(&k, 13, "Clip at its bounds, as PyTorch's hardtanh (0 outside (min, max))")) {
        int p = gc_param(&k, UNI, 1, (int64_t[]){4});
        gc_set_values(&k, p, 4, (double[]){-0.5, 0.5, -1, 1});
        gc_op(&k, "Clip", 3, (int[]){p, gc_scalar(&k, -0.5), gc_scalar(&k, 0.5)});
        k.expect[0] = (double[]){0, 0, 0, 0};
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "Max ties split evenly, as torch.maximum")) {
        int a = gc_param(&k, UNI, 1, (int64_t[]){2}), b = gc_param(&k, UNI, 1, (int64_t[]){2});
        gc_set_values(&k, a, 2, (double[]){1, 2});
        gc_set_values(&k, b, 2, (double[]){1, 3});
        gc_op(&k, "Max", 2, (int[]){a, b});
        k.expect[0] = (double[]){0.5, 0};
        k.expect[1] = (double[]){0.5, 1};
        gc_run(&k);
    }
    if (gc_begin(&k, 18, "ReduceMax ties split evenly, as torch.amax")) {
        int p = gc_param(&k, UNI, 1, (int64_t[]){4});
        gc_set_values(&k, p, 4, (double[]){1, 3, 3, 2});
        attr_i(&k, gc_op(&k, "ReduceMax", 1, &p), "keepdims", 0);
        k.expect[0] = (double[]){0, 0.5, 0.5, 0};
        gc_run(&k);
    }
}

/* Variants the rules refuse (with VP_ERR_UNSUPPORTED), never differentiate wrongly. */
static void cases_refused(void) {
    gc_case k;
    if (gc_begin(&k, 13, "refused: Pad mode=reflect")) {
        int x = gc_param(&k, UNI, DIMS(3, 4));
        attr_s(&k, gc_op(&k, "Pad", 2, (int[]){x, gc_ints(&k, 4, (int64_t[]){1, 1, 1, 1})}), "mode", "reflect");
        k.refusal = "mode 'reflect' has no gradient rule";
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "refused: trainable SoftmaxCrossEntropyLoss weights")) {
        int64_t labels[4] = {0, 2, 1, 2};
        int in[3] = {gc_param(&k, UNI, DIMS(4, 3)), vp_build_const(k.g, "l", VP_I64, 1, (int64_t[]){4}, labels),
                     gc_param(&k, POS, DIMS(3))};
        gc_op(&k, "SoftmaxCrossEntropyLoss", 3, in);
        k.refusal = "class weights";
        gc_run(&k);
    }
    if (gc_begin(&k, 17, "refused: LayerNormalization Mean output in the loss")) {
        int in[2] = {gc_param(&k, UNI, DIMS(2, 3)), gc_param(&k, POS, DIMS(3))}, y[3];
        gc_node(&k, "LayerNormalization", "", 2, in, 3, y);
        gc_loss_on(&k, y[0]);
        gc_loss_on(&k, y[1]);
        k.refusal = "only Y has a gradient rule";
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "refused: MaxPool storage_order=1")) {
        int x = gc_param(&k, DISTINCT, DIMS(1, 1, 4, 4));
        int n = gc_op(&k, "MaxPool", 1, &x);
        attr_is(&k, n, "kernel_shape", 2, (int64_t[]){2, 2});
        attr_i(&k, n, "storage_order", 1);
        k.refusal = "storage_order";
        gc_run(&k);
    }
}

static void run_all(void) {
    gc_cases_elementwise();
    gc_cases_tensor();
    gc_cases_linalg();
    gc_cases_reduce();
    gc_cases_resample();
    gc_cases_recurrent();
    cases_kinks();
    cases_refused();
}

int main(int argc, char **argv) {
    vp_cpu_host_install();
    return gc_check_all(argc > 1 ? argv[1] : NULL, run_all);
}
