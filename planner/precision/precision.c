/* Mixed precision placement: see precision.h and README.md.
 *
 * The lists follow PyTorch autocast (torch/csrc/autograd/autocast_mode.cpp, CPU and
 * CUDA), mapped to the ONNX ops our exports and fusions produce. */
#include "precision/precision.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/graph_build.h"
#include "ir/infer.h"
#include "ir/op_registry.h"

typedef struct op_name {
    const char *domain, *op;
} op_name;

/* Matrix units: autocast's lower_precision_fp list (mm, addmm, matmul, conv*, linear,
 * and scaled_dot_product_attention), as ONNX ops. */
static const op_name low_ops[] = {
    {"", "MatMul"}, {"", "Gemm"}, {"", "Conv"}, {"", "ConvTranspose"},
    {"com.microsoft", "FusedMatMul"}, {"vplan", "Attention"}, {"vplan", "GeluMatMul"}, {"vplan", "SwiGluMatMul"},
};

/* Autocast's fp32 list: what loses too much in 8 (bf16) or 11 (fp16) significant bits,
 * or overflows float16's 65504: softmax, normalisation statistics, reductions, exp, log,
 * pow, erf, the losses. */
static const op_name fp32_ops[] = {
    {"", "Softmax"}, {"", "LogSoftmax"},
    {"", "LayerNormalization"},
    {"", "InstanceNormalization"}, {"", "GroupNormalization"}, {"com.microsoft", "SimplifiedLayerNormalization"},
    {"", "ReduceSum"}, {"", "ReduceMean"}, {"", "ReduceSumSquare"}, {"", "ReduceL1"}, {"", "ReduceL2"},
    {"", "ReduceLogSum"}, {"", "ReduceLogSumExp"}, {"", "ReduceProd"}, {"", "ReduceMax"}, {"", "ReduceMin"},
    {"", "GlobalAveragePool"}, {"", "GlobalLpPool"}, {"", "LpNormalization"},
    {"", "Exp"}, {"", "Log"}, {"", "Pow"}, {"", "Erf"}, {"", "Sqrt"}, {"", "Reciprocal"},
    {"", "SoftmaxCrossEntropyLoss"}, {"", "NegativeLogLikelihoodLoss"},
    /* QAT's fake quantisation and observers: float32 kernels, a grid of 256 levels
     * that a bfloat16 product would not keep */
    {"vplan", "FakeQuant"}, {"vplan", "QuantObserver"}, {"vplan", "QuantParams"},
};

/* Float inputs that are not data (a ratio, scales, a region of interest): never cast.
 * BatchNorm's scale, bias and statistics among them: BatchNorm follows its input X, its
 * statistics and parameters stay float32, and the kernel accumulates in float32 or
 * wider, as cuDNN's and PyTorch's batch_norm do with half X (autocast lists it in
 * neither list).  Keeping X float32 instead would keep both a low and a float32 copy
 * of every Conv output for the backward: more memory than float32 alone. */
static const struct {
    const char *op;
    int first, last;
} not_data[] = {{"Dropout", 1, 1},
                {"Resize", 1, 2},
                {"Upsample", 1, 1},
                {"BatchNormalization", 1, 4},
                {"BatchNormInternal", 1, 4}};

enum { FOLLOW = 0, LOW, FP32 };

static int listed(const op_name *list, size_t n, const vp_node *nd) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(list[i].domain, nd->domain) && !strcmp(list[i].op, nd->op_type)) return 1;
    return 0;
}

/* Whether op_type is one of the names in the comma-separated list. */
static int in_list(const char *list, const char *op_type) {
    size_t len = strlen(op_type);
    for (const char *p = list; p && *p;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n == len && !strncmp(p, op_type, n)) return 1;
        p = end ? end + 1 : p + n;
    }
    return 0;
}

typedef struct find_ctx {
    const char *name;
    size_t len;
    int found;
} find_ctx;

static void find_op(const vp_op_def *op, void *ctx) {
    find_ctx *f = ctx;
    f->found |= strlen(op->name) == f->len && !strncmp(op->name, f->name, f->len);
}

static vp_status check_list(const char *list, const char *flag, const char *other, vp_error *err) {
    for (const char *p = list; p && *p;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        find_ctx f = {p, n, 0};
        if (n) vp_op_foreach(find_op, &f);
        if (!f.found) return vp_fail(err, VP_ERR_USAGE, "%s: unknown op '%.*s'", flag, (int)n, p);
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)n, p);
        if (other && in_list(other, name))
            return vp_fail(err, VP_ERR_USAGE, "%s: op '%s' is also in the other list", flag, name);
        p = end ? end + 1 : p + n;
    }
    return VP_OK;
}

vp_status vp_precision_check_ops(const vp_precision_opts *o, vp_error *err) {
    vp_status s = check_list(o->fp32_ops, "--fp32-ops", o->low_ops, err);
    return s ? s : check_list(o->low_ops, "--low-ops", NULL, err);
}

/* LOW, FP32 or FOLLOW: the user's lists first, then autocast's. */
static int classify(const vp_precision_opts *o, const vp_node *n) {
    if (n->phase == VP_PHASE_LOSS) return FP32;
    if (in_list(o->low_ops, n->op_type)) return LOW;
    if (in_list(o->fp32_ops, n->op_type)) return FP32;
    if (listed(low_ops, sizeof low_ops / sizeof *low_ops, n)) return LOW;
    if (listed(fp32_ops, sizeof fp32_ops / sizeof *fp32_ops, n)) return FP32;
    return FOLLOW;
}

static int is_data(const vp_node *n, int k) {
    for (size_t i = 0; i < sizeof not_data / sizeof *not_data; i++)
        if (!strcmp(n->op_type, not_data[i].op) && k >= not_data[i].first && k <= not_data[i].last) return 0;
    return 1;
}

/* A float input the pass may retype: float32 or the low dtype (float64 stays). */
static int castable(const vp_graph *g, const vp_node *n, int k, vp_dtype low) {
    int v = n->inputs[k];
    if (v < 0 || !is_data(n, k)) return 0;
    vp_dtype t = g->values[v].dtype;
    return t == VP_F32 || t == low;
}

/* An Add of a parameter to a low-precision MatMul's output: the bias of a Linear that
 * the exporter wrote as MatMul then Add (torch.onnx does for inputs of rank 3 and more).
 * Autocast runs the whole Linear, bias included, in the low dtype, so the Add does too
 * rather than widening the activation to float32. */
static int is_linear_bias(const vp_graph *g, const vp_precision_opts *o, const vp_node *n, vp_dtype low) {
    if (n->domain[0] || strcmp(n->op_type, "Add") || n->n_inputs != 2 || n->inputs[0] < 0 || n->inputs[1] < 0) return 0;
    for (int k = 0; k < 2; k++) {
        const vp_value *x = &g->values[n->inputs[k]], *b = &g->values[n->inputs[1 - k]];
        if (x->dtype != low || x->producer < 0 || !(b->flags & VP_VAL_PARAM) || b->rank != 1) continue;
        if (classify(o, &g->nodes[x->producer]) == LOW) return 1;
    }
    return 0;
}

/* Elementwise and data movement follow their widest input, as tensor type promotion
 * does; constants (scalars an exporter wrote as tensors) do not widen, as a Python
 * scalar does not in PyTorch. */
static vp_dtype follow_dtype(const vp_graph *g, const vp_precision_opts *o, const vp_node *n, vp_dtype low) {
    if (is_linear_bias(g, o, n, low)) return low;
    vp_dtype t = VP_UNDEFINED, any = VP_UNDEFINED;
    for (int k = 0; k < n->n_inputs; k++) {
        if (!castable(g, n, k, low)) continue;
        const vp_value *v = &g->values[n->inputs[k]];
        any = any == VP_F32 || v->dtype == VP_F32 ? VP_F32 : v->dtype;
        if (v->flags & VP_VAL_CONST) continue;
        t = t == VP_F32 || v->dtype == VP_F32 ? VP_F32 : v->dtype;
    }
    return t ? t : any;
}

const char *vp_precision_name(vp_precision p) {
    return p == VP_PRECISION_FP32 ? "fp32" : p == VP_PRECISION_BF16 ? "bf16" : p == VP_PRECISION_FP16 ? "fp16" : NULL;
}

vp_dtype vp_precision_dtype(vp_precision p) {
    return p == VP_PRECISION_BF16 ? VP_BF16 : p == VP_PRECISION_FP16 ? VP_F16 : VP_F32;
}

typedef struct pass {
    vp_graph *g;
    const vp_precision_opts *opts;
    vp_dtype low;
    int n_values0;
    int *cast_low, *cast_f32; /* original value id -> its Cast's output, -1 none */
    int *order, n_order;
    vp_precision_counts *counts;
} pass;

/* The Cast of value v to dtype t, made once and reused by every reader (a weight's
 * copy is autocast's weight cache).  The Cast takes the phase of its first reader. */
static vp_status cast_of(pass *ps, int v, vp_dtype t, vp_phase phase, int *out, vp_error *err) {
    vp_graph *g = ps->g;
    int *slot = v < ps->n_values0 ? (t == VP_F32 ? &ps->cast_f32[v] : &ps->cast_low[v]) : NULL;
    if (slot && *slot >= 0) {
        *out = *slot;
        return VP_OK;
    }
    char name[600];
    snprintf(name, sizeof name, "%s/to_%s", g->values[v].name, t == VP_F32 ? "fp32" : vp_dtype_name(t));
    int id = vp_build_node(g, "Cast", "", name, 1, &v, 1, phase, 0);
    vp_status s = id < 0 ? vp_fail(err, VP_ERR_NOMEM, "out of memory inserting casts") : VP_OK;
    if (!s) s = vp_node_add_attr_int(g, id, "to", t);
    int o = -1;
    if (!s) s = vp_build_finish(g, id, &o, err);
    if (s) return s;
    g->nodes[id].precision = t;
    ps->order[ps->n_order++] = id;
    ps->counts->casts++;
    if (g->values[v].flags & VP_VAL_PARAM) {
        ps->counts->weight_copies++;
        ps->counts->weight_copy_bytes += vp_value_numel(&g->values[o]) * (int64_t)vp_dtype_size(t);
    }
    if (slot) *slot = o;
    *out = o;
    return VP_OK;
}

static vp_status place(pass *ps, int i, vp_error *err) {
    vp_graph *g = ps->g;
    vp_node *n = &g->nodes[i];
    int cls = classify(ps->opts, n);
    vp_dtype target = cls == LOW ? ps->low : cls == FP32 ? VP_F32 : follow_dtype(g, ps->opts, n, ps->low);
    int has_float = 0;
    for (int k = 0; k < n->n_inputs; k++) {
        if (!castable(g, n, k, ps->low)) continue;
        has_float = 1;
        int v = n->inputs[k];
        if (g->values[v].dtype == target) continue;
        int c;
        vp_phase phase = n->phase;
        vp_status s = cast_of(ps, v, target, phase, &c, err);
        if (s) return s;
        n = &g->nodes[i]; /* the node array may have moved */
        n->inputs[k] = c;
    }
    if (has_float) {
        n->precision = target;
        ps->counts->low_nodes += target == ps->low;
        ps->counts->fp32_nodes += target == VP_F32;
    }
    ps->order[ps->n_order++] = i;
    return vp_infer_node(g, i, 0, NULL, err);
}

vp_status vp_precision_apply(vp_graph *g, const vp_precision_opts *o, int *first_loss_node, vp_precision_counts *counts,
                             vp_error *err) {
    memset(counts, 0, sizeof *counts);
    if (o->precision == VP_PRECISION_FP32) return VP_OK;
    vp_status s0 = vp_precision_check_ops(o, err);
    if (s0) return s0;
    pass ps = {.g = g, .opts = o, .low = vp_precision_dtype(o->precision), .n_values0 = g->n_values, .counts = counts};
    int n0 = g->n_nodes, max_casts = 0;
    for (int i = 0; i < n0; i++) max_casts += g->nodes[i].n_inputs;
    ps.cast_low = malloc(((size_t)g->n_values + 1) * sizeof *ps.cast_low);
    ps.cast_f32 = malloc(((size_t)g->n_values + 1) * sizeof *ps.cast_f32);
    ps.order = malloc(((size_t)n0 + (size_t)max_casts + 1) * sizeof *ps.order);
    vp_status s = ps.cast_low && ps.cast_f32 && ps.order ? VP_OK : vp_fail(err, VP_ERR_NOMEM, "out of memory");
    for (int v = 0; !s && v < g->n_values; v++) ps.cast_low[v] = ps.cast_f32[v] = -1;
    int new_first_loss = -1;
    for (int i = 0; !s && i < n0; i++) {
        if (first_loss_node && i == *first_loss_node) new_first_loss = ps.n_order;
        if (g->nodes[i].folded) ps.order[ps.n_order++] = i;
        else s = place(&ps, i, err);
    }
    if (!s && ps.n_order != g->n_nodes)
        s = vp_fail(err, VP_ERR_RUNTIME, "internal: precision pass ordered %d of %d nodes", ps.n_order, g->n_nodes);
    if (!s && counts->casts) s = vp_graph_keep_nodes(g, ps.order, ps.n_order, err);
    if (!s && first_loss_node && new_first_loss >= 0) *first_loss_node = new_first_loss;
    free(ps.cast_low);
    free(ps.cast_f32);
    free(ps.order);
    return s;
}
