/* Gradient checks of the elementwise ops: arithmetic with broadcasting (and opset 6's
 * legacy broadcast), unary activations and math, Clip, Where/Sum/Max/Min, Dropout. */
#include "gradcheck_cases.h"

#include <stdio.h>

#include "cpu_util.h"
#include "gradcheck_harness.h"
#include "ir/graph_build.h"

static void case_unary(const char *op, int opset, gen ge, const char *attr, double v) {
    gc_case k;
    char a[64] = "";
    if (attr) snprintf(a, sizeof a, " %s=%g", attr, v);
    if (!gc_begin(&k, opset, "%s%s[2,3,4] opset %d", op, a, opset)) return;
    int x = gc_param(&k, ge, DIMS(2, 3, 4));
    int node = gc_op(&k, op, 1, &x);
    if (attr) attr_f(&k, node, attr, v);
    gc_run(&k);
}

void case_binary(const char *op, gen ga, int ra, const int64_t *da, gen gb, int rb, const int64_t *db) {
    gc_case k;
    char sa[64], sb[64];
    if (!gc_begin(&k, 13, "%s%sx%s", op, vp_shape_str(ra, da, sa, sizeof sa), vp_shape_str(rb, db, sb, sizeof sb)))
        return;
    int in[2] = {gc_param(&k, ga, ra, da), gc_param(&k, gb, rb, db)};
    gc_op(&k, op, 2, in);
    gc_run(&k);
}

static void cases_arith(void) {
    static const char *ops[] = {"Add", "Sub", "Mul"};
    for (int i = 0; i < 3; i++) {
        case_binary(ops[i], UNI, DIMS(2, 3, 4), UNI, DIMS(2, 3, 4));
        case_binary(ops[i], UNI, DIMS(2, 3, 4), UNI, DIMS(4));
        case_binary(ops[i], UNI, DIMS(2, 1, 4), UNI, DIMS(3, 1));
        case_binary(ops[i], UNI, 0, NULL, UNI, DIMS(3));
    }
    case_binary("Div", UNI, DIMS(2, 3), POS, DIMS(3));
    case_binary("Div", UNI, DIMS(1, 4), POS, DIMS(3, 1));
    case_binary("Pow", POS, DIMS(2, 3), UNI, DIMS(3));
    case_binary("Pow", POS, DIMS(3, 1), UNI, DIMS(1, 2));
    gc_case k;
    static const char *legacy[4] = {"Add", "Sub", "Mul", "Div"};
    for (int i = 0; i < 4; i++) {
        if (!gc_begin(&k, 6, "%s[2,3,4,5]x[3,4] broadcast=1 axis=1 opset 6 (legacy)", legacy[i])) continue;
        int in[2] = {gc_param(&k, UNI, DIMS(2, 3, 4, 5)), gc_param(&k, i == 3 ? POS : UNI, DIMS(3, 4))};
        int n = gc_op(&k, legacy[i], 2, in);
        attr_i(&k, n, "broadcast", 1);
        attr_i(&k, n, "axis", 1);
        gc_run(&k);
    }
    if (gc_begin(&k, 6, "Mul[2,3,4]x[4] broadcast=1 opset 6 (legacy, trailing)")) {
        int in[2] = {gc_param(&k, UNI, DIMS(2, 3, 4)), gc_param(&k, UNI, DIMS(4))};
        attr_i(&k, gc_op(&k, "Mul", 2, in), "broadcast", 1);
        gc_run(&k);
    }
    if (gc_begin(&k, 9, "PRelu x[2,3,2,2] slope[3,1,1] opset 9")) {
        gc_op(&k, "PRelu", 2, (int[]){gc_param(&k, AWAY, DIMS(2, 3, 2, 2)), gc_param(&k, UNI, DIMS(3, 1, 1))});
        gc_run(&k);
    }
    if (gc_begin(&k, 16, "PRelu x[3,4] slope[] opset 16")) {
        gc_op(&k, "PRelu", 2, (int[]){gc_param(&k, AWAY, DIMS(3, 4)), gc_param(&k, UNI, 0, NULL)});
        gc_run(&k);
    }
    if (gc_begin(&k, 6, "PRelu x[2,3,2] slope[3] opset 6 (channel slope)")) {
        gc_op(&k, "PRelu", 2, (int[]){gc_param(&k, AWAY, DIMS(2, 3, 2)), gc_param(&k, UNI, DIMS(3))});
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "Mean(a[2,3], b[3], c[2,1])")) {
        gc_op(&k, "Mean", 3,
              (int[]){gc_param(&k, UNI, DIMS(2, 3)), gc_param(&k, UNI, DIMS(3)), gc_param(&k, UNI, DIMS(2, 1))});
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "Mul(x, x)[3,2]")) { /* one value feeding both inputs: gradients add */
        int x = gc_param(&k, UNI, DIMS(3, 2));
        gc_op(&k, "Mul", 2, (int[]){x, x});
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "Pow[2,3] ^ constant 3.0")) {
        int x = gc_param(&k, UNI, DIMS(2, 3));
        gc_op(&k, "Pow", 2, (int[]){x, gc_scalar(&k, 3.0)});
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "Pow(a[4] with zeros, b[4] with a zero), as PyTorch at 0")) {
        int a = gc_param(&k, POS, DIMS(4)), b = gc_param(&k, POS, DIMS(4));
        gc_op(&k, "Pow", 2, (int[]){a, b});
        /* a = 0 under the integer b = 2 (a^2 is smooth through 0, and a's finite
         * differences stay real), and b = 0 at a > 0 */
        double *pa = k.g->values[a].data, *pb = k.g->values[b].data;
        if (gc_dtype() == VP_F64 || gc_is_reference()) {
            pa[0] = 0.0, pb[0] = 2.0, pb[1] = 0.0;
        } else {
            vp_store(pa, gc_dtype(), 0, 0.0), vp_store(pb, gc_dtype(), 0, 2.0), vp_store(pb, gc_dtype(), 1, 0.0);
        }
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "Pow[2,3] ^ int64 constant 2")) {
        int x = gc_param(&k, UNI, DIMS(2, 3));
        int64_t two = 2;
        int e = vp_build_const(k.g, "e", VP_I64, 0, NULL, &two);
        gc_op(&k, "Pow", 2, (int[]){x, e});
        gc_run(&k);
    }
}

static void cases_unary(void) {
    case_unary("Neg", 13, UNI, NULL, 0);
    case_unary("Abs", 13, AWAY, NULL, 0);
    case_unary("Sqrt", 13, POS, NULL, 0);
    case_unary("Exp", 13, UNI, NULL, 0);
    case_unary("Log", 13, POS, NULL, 0);
    case_unary("Reciprocal", 13, POS, NULL, 0);
    case_unary("Erf", 13, UNI, NULL, 0);
    case_unary("Relu", 13, AWAY, NULL, 0);
    case_unary("Relu", 6, AWAY, NULL, 0);
    case_unary("LeakyRelu", 13, AWAY, NULL, 0);
    case_unary("LeakyRelu", 13, AWAY, "alpha", 0.2);
    case_unary("LeakyRelu", 13, AWAY, "alpha", 0.0);  /* LeakyReluGrad(dY, Y) still */
    case_unary("LeakyRelu", 13, AWAY, "alpha", -0.5); /* Y's sign is not X's: from X */
    case_unary("Sigmoid", 13, UNI, NULL, 0);
    case_unary("Tanh", 13, UNI, NULL, 0);
    case_unary("Softplus", 13, UNI, NULL, 0);
    case_unary("Elu", 13, AWAY, NULL, 0);
    case_unary("Elu", 13, AWAY, "alpha", 0.5);
    case_unary("Elu", 13, AWAY, "alpha", -0.5); /* from X */
    case_unary("Identity", 13, UNI, NULL, 0);
    case_unary("Sin", 13, UNI, NULL, 0);
    case_unary("Cos", 13, UNI, NULL, 0);
    case_unary("Softsign", 13, AWAY, NULL, 0);
    case_unary("Selu", 13, AWAY, NULL, 0);
    case_unary("Selu", 13, AWAY, "gamma", 2.0);
    case_unary("Selu", 13, AWAY, "alpha", -1.0); /* from X */
    case_unary("HardSigmoid", 13, HARD, NULL, 0);
    case_unary("HardSigmoid", 13, HARD, "alpha", 0.4);
    case_unary("HardSwish", 14, HARD, NULL, 0);
    case_unary("Tan", 13, UNI, NULL, 0);
    case_unary("Asin", 13, HALF, NULL, 0);
    case_unary("Acos", 13, HALF, NULL, 0);
    case_unary("Atan", 13, UNI, NULL, 0);
    case_unary("Sinh", 13, UNI, NULL, 0);
    case_unary("Cosh", 13, UNI, NULL, 0);
    case_unary("Asinh", 13, UNI, NULL, 0);
    case_unary("Acosh", 13, ABOVE1, NULL, 0);
    case_unary("Atanh", 13, HALF, NULL, 0);
    case_unary("Swish", 24, UNI, NULL, 0);
    case_unary("Swish", 24, UNI, "alpha", 1.7);
    case_unary("Celu", 13, AWAY, NULL, 0);
    case_unary("Celu", 13, AWAY, "alpha", 2.0);
    case_unary("Celu", 13, AWAY, "alpha", -1.5); /* Y has X's sign for any alpha */
    case_unary("Mish", 18, UNI, NULL, 0);
    case_unary("Shrink", 13, AWAY, NULL, 0);
    case_unary("Shrink", 13, AWAY, "lambd", 0.3);
    case_unary("ThresholdedRelu", 13, AWAY, "alpha", 0.3);
    case_unary("Floor", 13, AWAY, NULL, 0);
    case_unary("Round", 13, AWAY, NULL, 0);
    case_unary("Sign", 13, AWAY, NULL, 0);
    case_unary("Hardmax", 13, DISTINCT, NULL, 0);
    case_unary("Gelu", 20, UNI, NULL, 0);
    gc_case k;
    if (gc_begin(&k, 20, "Gelu approximate=tanh [2,3,4] opset 20")) {
        int x = gc_param(&k, UNI, DIMS(2, 3, 4));
        attr_s(&k, gc_op(&k, "Gelu", 1, &x), "approximate", "tanh");
        gc_run(&k);
    }
    static const char *ms_gelu[2] = {"FastGelu", "BiasGelu"};
    for (int i = 0; i < 2; i++) {
        if (gc_begin(&k, 13, "com.microsoft.%s(x[2,3,4], bias[4])", ms_gelu[i])) {
            int in[2] = {gc_param(&k, UNI, DIMS(2, 3, 4)), gc_param(&k, UNI, DIMS(4))}, y;
            gc_node(&k, ms_gelu[i], "com.microsoft", 2, in, 1, &y);
            gc_loss_on(&k, y);
            gc_run(&k);
        }
    }
    if (gc_begin(&k, 13, "com.microsoft.FastGelu(x[3,4])")) {
        int x = gc_param(&k, UNI, DIMS(3, 4)), y;
        gc_node(&k, "FastGelu", "com.microsoft", 1, &x, 1, &y);
        gc_loss_on(&k, y);
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "com.microsoft.Gelu[2,3,4]")) {
        int x = gc_param(&k, UNI, DIMS(2, 3, 4)), y;
        gc_node(&k, "Gelu", "com.microsoft", 1, &x, 1, &y);
        gc_loss_on(&k, y);
        gc_run(&k);
    }
    if (gc_begin(&k, 15, "CastLike(x[2,3], like[])")) {
        gc_op(&k, "CastLike", 2, (int[]){gc_param(&k, UNI, DIMS(2, 3)), gc_scalar(&k, 0)});
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "Cast(to float64)[2,3]")) {
        int x = gc_param(&k, UNI, DIMS(2, 3));
        attr_i(&k, gc_op(&k, "Cast", 1, &x), "to", VP_F64);
        gc_run(&k);
    }
}

/* One output of a node of the standard domain: op(a) or op(a, b). */
static int op_of(gc_case *k, const char *op, int a, int b) {
    int y, in[2] = {a, b};
    gc_node(k, op, "", b >= 0 ? 2 : 1, in, 1, &y);
    return y;
}

/* GELU as torch.onnx writes it (erf and tanh forms): vp_training_build fuses each into
 * com.microsoft.Gelu or FastGelu before autodiff (test_fusion checks that it does), so
 * these check the fused gradients against finite differences of the exporter's graph. */
static void cases_gelu_patterns(void) {
    gc_case k;
    if (gc_begin(&k, 13, "GELU erf pattern x * (1 + erf(x / sqrt 2)) * 0.5 [2,3,4] (fused)")) {
        int x = gc_param(&k, HARD, DIMS(2, 3, 4));
        int e = op_of(&k, "Erf", op_of(&k, "Div", x, gc_scalar(&k, M_SQRT2)), -1);
        int y = op_of(&k, "Mul", op_of(&k, "Mul", x, op_of(&k, "Add", e, gc_scalar(&k, 1))), gc_scalar(&k, 0.5));
        gc_loss_on(&k, y);
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "GELU tanh pattern 0.5 * (x * (1 + tanh(k * (x + 0.044715 x*x*x)))) [2,3,4] (fused)")) {
        int x = gc_param(&k, HARD, DIMS(2, 3, 4));
        int cube = op_of(&k, "Mul", x, op_of(&k, "Mul", x, x));
        int s = op_of(&k, "Add", x, op_of(&k, "Mul", gc_scalar(&k, 0.044715), cube));
        int t = op_of(&k, "Tanh", op_of(&k, "Mul", gc_scalar(&k, sqrt(2 / M_PI)), s), -1);
        int y = op_of(&k, "Mul", gc_scalar(&k, 0.5), op_of(&k, "Mul", x, op_of(&k, "Add", gc_scalar(&k, 1), t)));
        gc_loss_on(&k, y);
        gc_run(&k);
    }
}

static void cases_clip(void) {
    gc_case k;
    if (gc_begin(&k, 6, "Clip[3,4] min=-0.5 max=0.5 opset 6")) {
        int x = gc_param(&k, AWAY, DIMS(3, 4));
        int n = gc_op(&k, "Clip", 1, &x);
        attr_f(&k, n, "min", -0.5);
        attr_f(&k, n, "max", 0.5);
        gc_run(&k);
    }
    if (gc_begin(&k, 6, "Clip[3,4] max=0.5 opset 6")) {
        int x = gc_param(&k, AWAY, DIMS(3, 4));
        attr_f(&k, gc_op(&k, "Clip", 1, &x), "max", 0.5);
        gc_run(&k);
    }
    if (gc_begin(&k, 11, "Clip[3,4] constant min, max opset 11")) {
        int x = gc_param(&k, AWAY, DIMS(3, 4));
        gc_op(&k, "Clip", 3, (int[]){x, gc_scalar(&k, -0.5), gc_scalar(&k, 0.5)});
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "Clip[3,4] constant min only opset 13")) {
        int x = gc_param(&k, AWAY, DIMS(3, 4));
        gc_op(&k, "Clip", 2, (int[]){x, gc_scalar(&k, -0.5)});
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "Clip[3,4] trainable min, max opset 13")) {
        int x = gc_param(&k, DISTINCT, DIMS(3, 4));
        gen lo = {GEN_UNIFORM, -0.45, -0.3}, hi = {GEN_UNIFORM, 0.3, 0.45};
        gc_op(&k, "Clip", 3, (int[]){x, gc_param(&k, lo, 0, NULL), gc_param(&k, hi, 0, NULL)});
        gc_run(&k);
    }
}

static void cases_select(void) {
    gc_case k;
    if (gc_begin(&k, 13, "Where(cond[2,3], a[2,3], b[3])")) {
        unsigned char cond[6] = {1, 0, 0, 1, 1, 0};
        int c = gc_bools(&k, DIMS(2, 3), cond);
        gc_op(&k, "Where", 3, (int[]){c, gc_param(&k, UNI, DIMS(2, 3)), gc_param(&k, UNI, DIMS(3))});
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "Where(cond[3,1], a[], b[1,4])")) {
        unsigned char cond[3] = {1, 0, 1};
        int c = gc_bools(&k, DIMS(3, 1), cond);
        gc_op(&k, "Where", 3, (int[]){c, gc_param(&k, UNI, 0, NULL), gc_param(&k, UNI, DIMS(1, 4))});
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "Sum(a[2,3], b[3], c[2,1])")) {
        gc_op(&k, "Sum", 3,
              (int[]){gc_param(&k, UNI, DIMS(2, 3)), gc_param(&k, UNI, DIMS(3)), gc_param(&k, UNI, DIMS(2, 1))});
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "Sum(a[2,3])")) {
        gc_op(&k, "Sum", 1, (int[]){gc_param(&k, UNI, DIMS(2, 3))});
        gc_run(&k);
    }
    static const char *mm[2] = {"Max", "Min"};
    for (int i = 0; i < 2; i++) {
        if (gc_begin(&k, 13, "%s(a[2,3], b[3])", mm[i])) {
            gc_op(&k, mm[i], 2, (int[]){gc_param(&k, UNI, DIMS(2, 3)), gc_param(&k, UNI, DIMS(3))});
            gc_run(&k);
        }
        if (gc_begin(&k, 13, "%s of 18 inputs, 6 parameters each 3 times [3]", mm[i])) {
            int in[18];
            for (int j = 0; j < 6; j++) in[j] = gc_param(&k, UNI, DIMS(3));
            for (int j = 6; j < 18; j++) in[j] = in[j % 6];
            gc_op(&k, mm[i], 18, in);
            gc_run(&k);
        }
        if (gc_begin(&k, 13, "%s(a[2,3], b[2,3], c[1])", mm[i])) {
            gc_op(&k, mm[i], 3,
                  (int[]){gc_param(&k, UNI, DIMS(2, 3)), gc_param(&k, UNI, DIMS(2, 3)), gc_param(&k, UNI, DIMS(1))});
            gc_run(&k);
        }
    }
}

static void cases_dropout(void) {
    gc_case k;
    if (gc_begin(&k, 11, "Dropout[3,4] opset 11 (inference)")) {
        int x = gc_param(&k, UNI, DIMS(3, 4));
        attr_f(&k, gc_op(&k, "Dropout", 1, &x), "ratio", 0.3);
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "Dropout[3,4] opset 13 training_mode=false")) {
        int x = gc_param(&k, UNI, DIMS(3, 4));
        gc_op(&k, "Dropout", 3, (int[]){x, gc_scalar(&k, 0.3), gc_bool(&k, 0)});
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "Dropout[3,4] opset 13 training_mode=true seed=7")) {
        int x = gc_param(&k, UNI, DIMS(3, 4));
        attr_i(&k, gc_op(&k, "Dropout", 3, (int[]){x, gc_scalar(&k, 0.3), gc_bool(&k, 1)}), "seed", 7);
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "Dropout[3,4] opset 13 training, ratio omitted (0.5)")) {
        int x = gc_param(&k, UNI, DIMS(3, 4));
        attr_i(&k, gc_op(&k, "Dropout", 3, (int[]){x, -1, gc_bool(&k, 1)}), "seed", 11);
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "Dropout[3,4] opset 13 training, mask output declared")) {
        int x = gc_param(&k, UNI, DIMS(3, 4)), y[2];
        int n = gc_node(&k, "Dropout", "", 3, (int[]){x, gc_scalar(&k, 0.5), gc_bool(&k, 1)}, 2, y);
        attr_i(&k, n, "seed", 3);
        gc_loss_on(&k, y[0]);
        gc_run(&k);
    }
}

void gc_cases_elementwise(void) {
    cases_arith();
    cases_unary();
    cases_gelu_patterns();
    cases_clip();
    cases_select();
    cases_dropout();
}
