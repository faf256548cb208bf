/* Gradient checks of the linear algebra ops and their windowed kin: MatMul
 * (broadcast batches, vectors), Gemm, Conv, ConvTranspose, the poolings. */
#include "gradcheck_cases.h"

#include <stddef.h>
#include <string.h>

#include "gradcheck_harness.h"

static void case_matmul(int ra, const int64_t *da, int rb, const int64_t *db) {
    case_binary("MatMul", UNI, ra, da, UNI, rb, db);
}

static void cases_matmul(void) {
    case_matmul(DIMS(3, 4), DIMS(4, 5));
    case_matmul(DIMS(2, 3, 4), DIMS(4, 5));
    case_matmul(DIMS(4, 5), DIMS(2, 5, 3));
    case_matmul(DIMS(2, 3, 4), DIMS(2, 4, 5));
    case_matmul(DIMS(2, 1, 3, 4), DIMS(3, 4, 2));
    case_matmul(DIMS(2, 2, 3, 4), DIMS(4, 2));
    case_matmul(DIMS(4), DIMS(4, 5));
    case_matmul(DIMS(3, 4), DIMS(4));
    case_matmul(DIMS(4), DIMS(4));
    case_matmul(DIMS(4), DIMS(2, 4, 3));
    case_matmul(DIMS(2, 3, 4), DIMS(4));
}

static void cases_gemm(void) {
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int cv = 0; cv < 4; cv++) {
                static const char *cname[4] = {"none", "[5]", "[3,5]", "[3,1]"};
                gc_case k;
                if (!gc_begin(&k, 13, "Gemm transA=%d transB=%d C=%s alpha=0.7 beta=1.3", ta, tb, cname[cv])) continue;
                int a = ta ? gc_param(&k, UNI, DIMS(4, 3)) : gc_param(&k, UNI, DIMS(3, 4));
                int b = tb ? gc_param(&k, UNI, DIMS(5, 4)) : gc_param(&k, UNI, DIMS(4, 5));
                int in[3] = {a, b, -1};
                if (cv == 1) in[2] = gc_param(&k, UNI, DIMS(5));
                if (cv == 2) in[2] = gc_param(&k, UNI, DIMS(3, 5));
                if (cv == 3) in[2] = gc_param(&k, UNI, DIMS(3, 1));
                int n = gc_op(&k, "Gemm", cv ? 3 : 2, in);
                attr_i(&k, n, "transA", ta);
                attr_i(&k, n, "transB", tb);
                attr_f(&k, n, "alpha", 0.7);
                attr_f(&k, n, "beta", 1.3);
                gc_run(&k);
            }
    gc_case k;
    if (gc_begin(&k, 13, "Gemm defaults C scalar")) {
        gc_op(&k, "Gemm", 3,
              (int[]){gc_param(&k, UNI, DIMS(2, 3)), gc_param(&k, UNI, DIMS(3, 4)), gc_param(&k, UNI, 0, NULL)});
        gc_run(&k);
    }
}

/* com.microsoft.FusedMatMul, what fusion makes of MatMul(A, Transpose(W)): a Linear
 * layer's weight read transposed (the Gemm path), and batched products with either
 * operand transposed and alpha (the FusedMatMul path). */
static void cases_fused_matmul(void) {
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            gc_case k;
            if (gc_begin(&k, 13, "FusedMatMul A[2,3,4] W[%s] transA=%d transB=%d alpha=0.7", tb ? "5,4" : "4,5", ta, tb)) {
                int a = ta ? gc_param(&k, UNI, DIMS(2, 4, 3)) : gc_param(&k, UNI, DIMS(2, 3, 4));
                int b = tb ? gc_param(&k, UNI, DIMS(5, 4)) : gc_param(&k, UNI, DIMS(4, 5));
                int y;
                int n = gc_node(&k, "FusedMatMul", "com.microsoft", 2, (int[]){a, b}, 1, &y);
                gc_loss_on(&k, y);
                attr_i(&k, n, "transA", ta);
                attr_i(&k, n, "transB", tb);
                attr_f(&k, n, "alpha", 0.7);
                gc_run(&k);
            }
            if (gc_begin(&k, 13, "FusedMatMul A[2,1,3,4] B[3,%s] batched transA=%d transB=%d", tb ? "5,4" : "4,5", ta, tb)) {
                int a = ta ? gc_param(&k, UNI, DIMS(2, 1, 4, 3)) : gc_param(&k, UNI, DIMS(2, 1, 3, 4));
                int b = tb ? gc_param(&k, UNI, DIMS(3, 5, 4)) : gc_param(&k, UNI, DIMS(3, 4, 5));
                int y;
                int n = gc_node(&k, "FusedMatMul", "com.microsoft", 2, (int[]){a, b}, 1, &y);
                gc_loss_on(&k, y);
                attr_i(&k, n, "transA", ta);
                attr_i(&k, n, "transB", tb);
                gc_run(&k);
            }
        }
}

/* vplan.GeluMatMul (the fusion of a GELU into the product reading it): both GELU forms,
 * W [K, N] and [N, K], a rank-3 H whose rows fold together, dH and dW checked. */
static void cases_gelu_matmul(void) {
    for (int tanh_form = 0; tanh_form < 2; tanh_form++)
        for (int tb = 0; tb < 2; tb++) {
            gc_case k;
            if (!gc_begin(&k, 17, "GeluMatMul H[2,3,4] W[%s] approximate=%s", tb ? "5,4" : "4,5",
                          tanh_form ? "tanh" : "none"))
                continue;
            int h = gc_param(&k, UNI, DIMS(2, 3, 4));
            int w = tb ? gc_param(&k, UNI, DIMS(5, 4)) : gc_param(&k, UNI, DIMS(4, 5));
            int y[2];
            int n = gc_node(&k, "GeluMatMul", "vplan", 2, (int[]){h, w}, 2, y);
            gc_loss_on(&k, y[0]);
            attr_i(&k, n, "transB", tb);
            attr_s(&k, n, "approximate", tanh_form ? "tanh" : "none");
            gc_run(&k);
        }
}

/* vplan.SwiGluMatMul (a gated MLP's act(G) U fused into its down product): W [K, N]
 * and [N, K], rank-3 G and U whose rows fold together, dG, dU and dW checked; the swish
 * gate, and the GELU gate in both forms (Gemma's GeGLU). */
static void cases_swiglu_matmul(void) {
    static const char *const gates[3][2] = {{"swish", NULL}, {"gelu", "none"}, {"gelu", "tanh"}};
    for (int gi = 0; gi < 3; gi++)
        for (int tb = 0; tb < 2; tb++) {
            gc_case k;
            if (!gc_begin(&k, 17, "SwiGluMatMul gate %s%s%s G[2,3,4] U[2,3,4] W[%s]", gates[gi][0],
                          gates[gi][1] ? " " : "", gates[gi][1] ? gates[gi][1] : "", tb ? "5,4" : "4,5"))
                continue;
            int gate = gc_param(&k, UNI, DIMS(2, 3, 4)), up = gc_param(&k, UNI, DIMS(2, 3, 4));
            int w = tb ? gc_param(&k, UNI, DIMS(5, 4)) : gc_param(&k, UNI, DIMS(4, 5));
            int y[2];
            int n = gc_node(&k, "SwiGluMatMul", "vplan", 3, (int[]){gate, up, w}, 2, y);
            gc_loss_on(&k, y[0]);
            attr_i(&k, n, "transB", tb);
            if (gi) {
                attr_s(&k, n, "gate", gates[gi][0]);
                attr_s(&k, n, "approximate", gates[gi][1]);
            }
            gc_run(&k);
        }
}

typedef struct conv_spec {
    const char *what;
    int rank; /* spatial rank */
    int64_t x[5], w[5];
    int bias;
    int64_t strides[3], pads[6], dilations[3], group;
    const char *auto_pad;
} conv_spec;

static void case_conv(const conv_spec *cs) {
    gc_case k;
    if (!gc_begin(&k, 13, "Conv %s", cs->what)) return;
    int r = cs->rank + 2;
    int in[3] = {gc_param(&k, UNI, r, cs->x), gc_param(&k, UNI, r, cs->w), -1};
    if (cs->bias) in[2] = gc_param(&k, UNI, 1, (int64_t[]){cs->w[0]});
    int n = gc_op(&k, "Conv", cs->bias ? 3 : 2, in);
    if (cs->strides[0]) attr_is(&k, n, "strides", cs->rank, cs->strides);
    if (cs->dilations[0]) attr_is(&k, n, "dilations", cs->rank, cs->dilations);
    if (cs->auto_pad) attr_s(&k, n, "auto_pad", cs->auto_pad);
    else attr_is(&k, n, "pads", 2 * cs->rank, cs->pads);
    if (cs->group) attr_i(&k, n, "group", cs->group);
    gc_run(&k);
}

static void cases_conv(void) {
    static const conv_spec specs[] = {
        {"2-D [1,2,5,5]*[3,2,3,3] bias", 2, {1, 2, 5, 5}, {3, 2, 3, 3}, 1, {0}, {0}, {0}, 0, NULL},
        {"2-D no bias", 2, {2, 2, 4, 4}, {2, 2, 2, 2}, 0, {0}, {0}, {0}, 0, NULL},
        {"2-D stride 2 pads 1", 2, {1, 2, 6, 5}, {3, 2, 3, 3}, 1, {2, 2}, {1, 1, 1, 1}, {0}, 0, NULL},
        {"2-D asymmetric pads, stride [1,2]", 2, {1, 1, 5, 6}, {2, 1, 2, 3}, 1, {1, 2}, {0, 1, 2, 0}, {0}, 0, NULL},
        {"2-D dilation 2", 2, {1, 2, 7, 7}, {2, 2, 3, 3}, 1, {0}, {1, 1, 1, 1}, {2, 2}, 0, NULL},
        {"2-D groups 2", 2, {1, 4, 5, 5}, {4, 2, 3, 3}, 1, {0}, {1, 1, 1, 1}, {0}, 2, NULL},
        {"2-D depthwise", 2, {1, 3, 4, 4}, {3, 1, 3, 3}, 0, {0}, {1, 1, 1, 1}, {0}, 3, NULL},
        {"2-D auto_pad SAME_UPPER stride 2", 2, {1, 2, 5, 5}, {2, 2, 3, 3}, 1, {2, 2}, {0}, {0}, 0, "SAME_UPPER"},
        {"2-D auto_pad SAME_LOWER stride 2", 2, {1, 2, 6, 5}, {2, 2, 2, 3}, 1, {2, 2}, {0}, {0}, 0, "SAME_LOWER"},
        {"2-D auto_pad VALID stride 2", 2, {1, 2, 6, 5}, {2, 2, 3, 2}, 0, {2, 2}, {0}, {0}, 0, "VALID"},
        {"1-D stride 2 pad 1", 1, {2, 2, 7}, {3, 2, 3}, 1, {2}, {1, 1}, {0}, 0, NULL},
        {"3-D", 3, {1, 2, 3, 4, 3}, {2, 2, 2, 2, 2}, 1, {0}, {0, 1, 0, 0, 0, 1}, {0}, 0, NULL},
    };
    for (size_t i = 0; i < sizeof specs / sizeof *specs; i++) case_conv(&specs[i]);
}

typedef struct conv_t_spec {
    const char *what;
    int rank; /* spatial rank */
    int64_t x[5], w[5];
    int bias;
    int64_t strides[3], pads[6], dilations[3], output_padding[3], output_shape[3], group;
    const char *auto_pad;
} conv_t_spec;

static void case_conv_transpose(const conv_t_spec *cs) {
    gc_case k;
    if (!gc_begin(&k, 13, "ConvTranspose %s", cs->what)) return;
    int r = cs->rank + 2;
    int in[3] = {gc_param(&k, UNI, r, cs->x), gc_param(&k, UNI, r, cs->w), -1};
    int64_t group = cs->group ? cs->group : 1;
    if (cs->bias) in[2] = gc_param(&k, UNI, 1, (int64_t[]){cs->w[1] * group});
    int n = gc_op(&k, "ConvTranspose", cs->bias ? 3 : 2, in);
    if (cs->strides[0]) attr_is(&k, n, "strides", cs->rank, cs->strides);
    if (cs->dilations[0]) attr_is(&k, n, "dilations", cs->rank, cs->dilations);
    if (cs->output_padding[0]) attr_is(&k, n, "output_padding", cs->rank, cs->output_padding);
    if (cs->output_shape[0]) attr_is(&k, n, "output_shape", cs->rank, cs->output_shape);
    if (cs->auto_pad) attr_s(&k, n, "auto_pad", cs->auto_pad);
    else if (!cs->output_shape[0]) attr_is(&k, n, "pads", 2 * cs->rank, cs->pads);
    if (cs->group) attr_i(&k, n, "group", cs->group);
    gc_run(&k);
}

static void cases_conv_transpose(void) {
    static const conv_t_spec specs[] = {
        {"2-D [1,2,3,3]*[2,3,3,3] bias", 2, {1, 2, 3, 3}, {2, 3, 3, 3}, 1, {0}, {0}, {0}, {0}, {0}, 0, NULL},
        {"2-D stride 2 pads 1 output_padding 1",
         2,
         {2, 2, 3, 4},
         {2, 2, 3, 3},
         1,
         {2, 2},
         {1, 1, 1, 1},
         {0},
         {1, 1},
         {0},
         0,
         NULL},
        {"2-D stride [2,3] asymmetric pads, no bias",
         2,
         {1, 1, 3, 2},
         {1, 2, 2, 3},
         0,
         {2, 3},
         {0, 1, 1, 0},
         {0},
         {0},
         {0},
         0,
         NULL},
        {"2-D dilation 2", 2, {1, 2, 3, 3}, {2, 1, 2, 2}, 1, {0}, {0}, {2, 2}, {0}, {0}, 0, NULL},
        {"2-D groups 2", 2, {1, 4, 3, 3}, {4, 1, 3, 3}, 1, {2, 2}, {1, 1, 1, 1}, {0}, {0}, {0}, 2, NULL},
        {"2-D auto_pad SAME_UPPER stride 2",
         2,
         {1, 2, 3, 3},
         {2, 2, 3, 3},
         1,
         {2, 2},
         {0},
         {0},
         {0},
         {0},
         0,
         "SAME_UPPER"},
        {"2-D output_shape [6,7] stride 2", 2, {1, 2, 3, 3}, {2, 1, 3, 3}, 0, {2, 2}, {0}, {0}, {0}, {6, 7}, 0, NULL},
        {"1-D stride 3", 1, {2, 2, 4}, {2, 3, 3}, 1, {3}, {0, 0}, {0}, {0}, {0}, 0, NULL},
    };
    for (size_t i = 0; i < sizeof specs / sizeof *specs; i++) case_conv_transpose(&specs[i]);
}

static void case_pool(const char *op, const char *what, int rank, const int64_t *x, int n_k, const int64_t *kernel,
                      const int64_t *strides, const int64_t *pads, int extra_attr, int indices_output) {
    gc_case k;
    if (!gc_begin(&k, 13, "%s %s", op, what)) return;
    int in = gc_param(&k, strcmp(op, "MaxPool") ? UNI : DISTINCT, rank, x), y[2];
    int node = gc_node(&k, op, "", 1, &in, indices_output ? 2 : 1, y);
    gc_loss_on(&k, y[0]);
    attr_is(&k, node, "kernel_shape", n_k, kernel);
    if (strides) attr_is(&k, node, "strides", n_k, strides);
    if (pads) attr_is(&k, node, "pads", 2 * n_k, pads);
    if (extra_attr && !strcmp(op, "AveragePool")) attr_i(&k, node, "count_include_pad", 1);
    if (extra_attr && !strcmp(op, "MaxPool")) attr_is(&k, node, "dilations", n_k, (int64_t[]){2, 2});
    gc_run(&k);
}

/* A 2-D pooling of [1,2,5,6] by 2x3 windows, stride 2, with ceil_mode or auto_pad. */
static void case_pool_window(const char *op, int ceil_mode, const char *auto_pad) {
    gc_case k;
    if (!gc_begin(&k, 13, "%s [1,2,5,6] 2x3 stride 2%s%s%s", op, ceil_mode ? " ceil_mode" : "",
                  auto_pad ? " auto_pad=" : "", auto_pad ? auto_pad : ""))
        return;
    int x = gc_param(&k, strcmp(op, "MaxPool") ? UNI : DISTINCT, DIMS(1, 2, 5, 6));
    int n = gc_op(&k, op, 1, &x);
    attr_is(&k, n, "kernel_shape", 2, (int64_t[]){2, 3});
    attr_is(&k, n, "strides", 2, (int64_t[]){2, 2});
    if (ceil_mode) attr_i(&k, n, "ceil_mode", 1);
    if (auto_pad) attr_s(&k, n, "auto_pad", auto_pad);
    gc_run(&k);
}

/* A window wider than the input under ceil_mode (Hugging Face's EfficientNet pools its
 * 8 x 8 map by AvgPool2d(320, ceil_mode=True)): one output, the mean (or max) of what
 * the window covers. */
static void case_pool_wide(const char *op, int count_include_pad) {
    gc_case k;
    if (!gc_begin(&k, 13, "%s [1,2,3,3] 5x5 stride 5 ceil_mode%s", op, count_include_pad ? " count_include_pad" : ""))
        return;
    int x = gc_param(&k, strcmp(op, "MaxPool") ? UNI : DISTINCT, DIMS(1, 2, 3, 3));
    int n = gc_op(&k, op, 1, &x);
    attr_is(&k, n, "kernel_shape", 2, (int64_t[]){5, 5});
    attr_is(&k, n, "strides", 2, (int64_t[]){5, 5});
    attr_i(&k, n, "ceil_mode", 1);
    if (count_include_pad) attr_i(&k, n, "count_include_pad", 1);
    gc_run(&k);
}

static void cases_pool(void) {
    case_pool_wide("AveragePool", 0);
    case_pool_wide("AveragePool", 1);
    case_pool_wide("MaxPool", 0);
    static const char *pads[3] = {"SAME_UPPER", "SAME_LOWER", "VALID"};
    for (int i = 0; i < 2; i++) {
        const char *op = i ? "AveragePool" : "MaxPool";
        case_pool_window(op, 1, NULL);
        for (int j = 0; j < 3; j++) case_pool_window(op, 0, pads[j]);
    }
    static const char *ops[2] = {"MaxPool", "AveragePool"};
    for (int i = 0; i < 2; i++) {
        case_pool(ops[i], "[2,2,4,4] 2x2 stride 2", DIMS(2, 2, 4, 4), 2, (int64_t[]){2, 2}, (int64_t[]){2, 2}, NULL, 0,
                  0);
        case_pool(ops[i], "[1,2,5,5] 3x3 stride 1 pads 1", DIMS(1, 2, 5, 5), 2, (int64_t[]){3, 3}, NULL,
                  (int64_t[]){1, 1, 1, 1}, 0, 0);
        case_pool(ops[i], "[1,1,5,6] 3x2 stride 2 pads [1,0,1,1]", DIMS(1, 1, 5, 6), 2, (int64_t[]){3, 2},
                  (int64_t[]){2, 2}, (int64_t[]){1, 0, 1, 1}, 0, 0);
        case_pool(ops[i], "1-D [2,3,7] k3 s2", DIMS(2, 3, 7), 1, (int64_t[]){3}, (int64_t[]){2}, NULL, 0, 0);
    }
    case_pool("AveragePool", "[1,2,5,5] 3x3 pads 1 count_include_pad", DIMS(1, 2, 5, 5), 2, (int64_t[]){3, 3}, NULL,
              (int64_t[]){1, 1, 1, 1}, 1, 0);
    case_pool("MaxPool", "[1,2,6,6] 2x2 dilation 2", DIMS(1, 2, 6, 6), 2, (int64_t[]){2, 2}, NULL, NULL, 1, 0);
    case_pool("MaxPool", "[1,2,4,4] 2x2 Indices output declared", DIMS(1, 2, 4, 4), 2, (int64_t[]){2, 2},
              (int64_t[]){2, 2}, NULL, 0, 1);
    /* which input MaxPool's gradient reads: X after a Relu (kept anyway), Indices after
     * a Sigmoid (whose gradient does not keep its output's input) */
    static const char *before[2] = {"Relu", "Sigmoid"};
    for (int i = 0; i < 2; i++) {
        gc_case k;
        if (!gc_begin(&k, 13, "MaxPool after %s [2,2,5,5] 3x3 stride 2 (gradient from %s)", before[i], i ? "Indices" : "X"))
            continue;
        int x = gc_param(&k, DISTINCT, DIMS(2, 2, 5, 5));
        int a = gc_node(&k, before[i], "", 1, &x, 1, (int[1]){0}), av = k.g->nodes[a].outputs[0];
        int n = gc_op(&k, "MaxPool", 1, &av);
        attr_is(&k, n, "kernel_shape", 2, (int64_t[]){3, 3});
        attr_is(&k, n, "strides", 2, (int64_t[]){2, 2});
        gc_run(&k);
    }
    gc_case k;
    if (gc_begin(&k, 13, "GlobalMaxPool[2,3,3,4]")) {
        int x = gc_param(&k, DISTINCT, DIMS(2, 3, 3, 4));
        gc_op(&k, "GlobalMaxPool", 1, &x);
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "GlobalAveragePool[2,3,4,5]")) {
        int x = gc_param(&k, UNI, DIMS(2, 3, 4, 5));
        gc_op(&k, "GlobalAveragePool", 1, &x);
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "GlobalAveragePool[2,3,4] 1-D")) {
        int x = gc_param(&k, UNI, DIMS(2, 3, 4));
        gc_op(&k, "GlobalAveragePool", 1, &x);
        gc_run(&k);
    }
}

/* Einsum, expanded during inference (planner/ir/einsum_op.c): the gradient of each
 * expansion, through contractions, broadcast batch and contracted labels of size 1,
 * diagonals, ellipses, three operands and sums, against finite differences. */
static void case_einsum(const char *eq, int n, const int *rank, const int64_t *const *dims) {
    gc_case k;
    if (!gc_begin(&k, 13, "Einsum %s", eq)) return;
    int in[3];
    for (int i = 0; i < n; i++) in[i] = gc_param(&k, UNI, rank[i], dims[i]);
    attr_s(&k, gc_op(&k, "Einsum", n, in), "equation", eq);
    gc_run(&k);
}

static void cases_einsum(void) {
    case_einsum("bind,bjnd->bnij", 2, (int[]){4, 4}, (const int64_t *[]){(int64_t[]){2, 3, 2, 4}, (int64_t[]){2, 5, 2, 4}});
    case_einsum("bnij,bjnd->bind", 2, (int[]){4, 4}, (const int64_t *[]){(int64_t[]){2, 2, 3, 5}, (int64_t[]){2, 5, 2, 4}});
    case_einsum("td,dnh->tnh", 2, (int[]){2, 3}, (const int64_t *[]){(int64_t[]){3, 4}, (int64_t[]){4, 2, 3}});
    case_einsum("bij,bjk->bik", 2, (int[]){3, 3}, (const int64_t *[]){(int64_t[]){1, 3, 4}, (int64_t[]){2, 4, 2}});
    case_einsum("ij,jk->ik", 2, (int[]){2, 2}, (const int64_t *[]){(int64_t[]){3, 1}, (int64_t[]){4, 2}});
    case_einsum("...ij,...jk->...ik", 2, (int[]){4, 3}, (const int64_t *[]){(int64_t[]){2, 1, 3, 4}, (int64_t[]){3, 4, 2}});
    case_einsum("iij,jk->ik", 2, (int[]){3, 2}, (const int64_t *[]){(int64_t[]){3, 3, 4}, (int64_t[]){4, 2}});
    case_einsum("bn,anm,bm->ba", 3, (int[]){2, 3, 2}, (const int64_t *[]){(int64_t[]){2, 3}, (int64_t[]){4, 3, 5}, (int64_t[]){2, 5}});
    case_einsum("bi,bj->bij", 2, (int[]){2, 2}, (const int64_t *[]){(int64_t[]){2, 3}, (int64_t[]){2, 4}});
    case_einsum("ij->j", 1, (int[]){2}, (const int64_t *[]){(int64_t[]){3, 4}});
}

/* Col2Im (opset 18, torch's F.fold), expanded into a grouped ConvTranspose with a one-hot
 * weight (planner/ir/col2im_op.c): overlapping blocks, strides, dilations, pads, an image
 * whose last row no block reaches, one and three spatial axes. */
static void case_col2im(const char *what, int sp, const int64_t *image, const int64_t *block, const int64_t *x3,
                        const int64_t *strides, const int64_t *dilations, const int64_t *pads) {
    gc_case k;
    if (!gc_begin(&k, 18, "Col2Im %s", what)) return;
    int in[3] = {gc_param(&k, UNI, 3, x3), gc_ints(&k, sp, image), gc_ints(&k, sp, block)};
    int n = gc_op(&k, "Col2Im", 3, in);
    if (strides) attr_is(&k, n, "strides", sp, strides);
    if (dilations) attr_is(&k, n, "dilations", sp, dilations);
    if (pads) attr_is(&k, n, "pads", 2 * sp, pads);
    gc_run(&k);
}

static void cases_col2im(void) {
    /* 2 channels, 2x2 blocks, stride 1 over 4x4: 9 overlapping blocks */
    case_col2im("[2,8,9] -> [2,2,4,4] 2x2 blocks", 2, (int64_t[]){4, 4}, (int64_t[]){2, 2}, (int64_t[]){2, 8, 9}, NULL,
                NULL, NULL);
    /* stride 2, pads 1, dilation 2 on one axis; 5 rows: the last one no block reaches */
    case_col2im("[1,12,6] -> [1,3,5,4] strides, dilation, pads", 2, (int64_t[]){5, 4}, (int64_t[]){2, 2},
                (int64_t[]){1, 12, 6}, (int64_t[]){2, 2}, (int64_t[]){1, 2}, (int64_t[]){1, 1, 1, 1});
    case_col2im("1-D [2,6,4] -> [2,2,6]", 1, (int64_t[]){6}, (int64_t[]){3}, (int64_t[]){2, 6, 4}, NULL, NULL, NULL);
    case_col2im("3-D [1,8,8] -> [1,1,3,3,3]", 3, (int64_t[]){3, 3, 3}, (int64_t[]){2, 2, 2}, (int64_t[]){1, 8, 8}, NULL,
                NULL, NULL);
}

/* DFT (opsets 17 and 20), expanded into products with constant cosine and sine matrices
 * (planner/ir/dft_op.c): a real and a complex signal, another axis, a one-sided forward
 * transform, the inverse, and the inverse of a one-sided spectrum (irfft) cut to a length. */
static void case_dft(const char *what, int opset, const int64_t *x4, int64_t axis, int inverse, int onesided,
                     int64_t length) {
    gc_case k;
    if (!gc_begin(&k, opset, "DFT %s", what)) return;
    int in[3] = {gc_param(&k, UNI, 4, x4), -1, -1}, n_in = 1;
    if (length) {
        in[1] = gc_ints(&k, 1, (int64_t[]){length});
        n_in = 2;
    }
    if (opset >= 20) {
        in[2] = gc_ints(&k, 1, (int64_t[]){axis});
        n_in = 3;
    }
    int n = gc_op(&k, "DFT", n_in, in);
    if (opset < 20) attr_i(&k, n, "axis", axis);
    if (inverse) attr_i(&k, n, "inverse", 1);
    if (onesided) attr_i(&k, n, "onesided", 1);
    gc_run(&k);
}

static void cases_dft(void) {
    case_dft("real [2,5,3,1] axis 1", 20, (int64_t[]){2, 5, 3, 1}, 1, 0, 0, 0);
    case_dft("complex [2,3,6,2] axis -2", 20, (int64_t[]){2, 3, 6, 2}, -2, 0, 0, 0);
    case_dft("real one-sided [1,6,2,1] axis 1, opset 17", 17, (int64_t[]){1, 6, 2, 1}, 1, 0, 1, 0);
    case_dft("inverse [2,4,3,2] axis 1", 20, (int64_t[]){2, 4, 3, 2}, 1, 1, 0, 0);
    case_dft("irfft [1,2,4,2] length 7", 20, (int64_t[]){1, 2, 4, 2}, 2, 1, 1, 7);
}

/* ONNX's Attention (opset 23), expanded during inference (planner/ir/attention_op.c):
 * rank 4 and rank 3 (heads split by q_num_heads and kv_num_heads, Y merged back),
 * grouped-query heads, causal, softcap (before the mask), against finite differences. */
static void case_onnx_attention(const char *what, int rank3, int64_t hq, int64_t hkv, int causal, double softcap) {
    gc_case k;
    if (!gc_begin(&k, 23, "Attention (ONNX) %s", what)) return;
    int64_t b = 2, s = 3, l = 4, d = 4, dv = 3;
    int in[3];
    if (rank3) {
        in[0] = gc_param(&k, UNI, DIMS(b, s, hq * d));
        in[1] = gc_param(&k, UNI, DIMS(b, l, hkv * d));
        in[2] = gc_param(&k, UNI, DIMS(b, l, hkv * dv));
    } else {
        in[0] = gc_param(&k, UNI, DIMS(b, hq, s, d));
        in[1] = gc_param(&k, UNI, DIMS(b, hkv, l, d));
        in[2] = gc_param(&k, UNI, DIMS(b, hkv, l, dv));
    }
    int n = gc_op(&k, "Attention", 3, in);
    if (rank3) {
        attr_i(&k, n, "q_num_heads", hq);
        attr_i(&k, n, "kv_num_heads", hkv);
    }
    if (causal) attr_i(&k, n, "is_causal", 1);
    if (softcap > 0) attr_f(&k, n, "softcap", softcap);
    gc_run(&k);
}

static void cases_onnx_attention(void) {
    case_onnx_attention("rank 4, softcap", 0, 2, 2, 0, 0.8);
    case_onnx_attention("rank 4, grouped-query, causal, softcap", 0, 4, 2, 1, 1.2);
    case_onnx_attention("rank 3", 1, 2, 2, 0, 0);
    case_onnx_attention("rank 3, grouped-query, causal, softcap", 1, 4, 2, 1, 0.9);
}

void gc_cases_linalg(void) {
    cases_matmul();
    cases_gemm();
    cases_einsum();
    cases_onnx_attention();
    cases_col2im();
    cases_dft();
    cases_fused_matmul();
    cases_gelu_matmul();
    cases_swiglu_matmul();
    cases_conv();
    cases_conv_transpose();
    cases_pool();
}
