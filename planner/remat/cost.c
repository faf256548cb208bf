/* FLOPs of the ops that dominate (matrix products, convolutions and their gradients);
 * every other op is charged one FLOP per output element, or a few for the
 * transcendental ones.  Bytes are what a node reads and writes once.  A tensor-parallel
 * all-reduce costs its ring traffic over the device's link (2(n-1)/n of the bytes,
 * 2(n-1) latencies), or its memory traffic when that is longer. */
#include "remat/cost.h"

#include <string.h>

#include "ir/op_registry.h"
#include "parallel/parallel.h"

static double numel(const vp_graph *g, int v) { return v >= 0 ? (double)vp_value_numel(&g->values[v]) : 0.0; }

static double matmul_flops(const vp_graph *g, const vp_node *n) {
    const vp_value *a = &g->values[n->inputs[0]], *y = &g->values[n->outputs[0]];
    int64_t k = a->rank ? a->dims[a->rank - 1] : 1;
    return 2.0 * (double)vp_value_numel(y) * (double)k;
}

/* 2 * output elements * (input channels per group * kernel elements) */
static double conv_flops(const vp_graph *g, int out, int weight) {
    const vp_value *w = &g->values[weight];
    double per_out = 1;
    for (int d = 1; d < w->rank; d++) per_out *= (double)w->dims[d];
    return 2.0 * numel(g, out) * per_out;
}

/* vplan.Attention (forward: scores, exp, P V) and AttentionGrad (scores again, dP,
 * dQ, dK, dV): per score, a dot over D or Dv for each product; causal halves them;
 * a softcap's tanh costs about 8 more a score (and its derivative 2 more). */
static double attention_flops(const vp_graph *g, const vp_node *n, int grad) {
    const vp_value *q = &g->values[n->inputs[grad]], *k = &g->values[n->inputs[grad + 1]], *v = &g->values[n->inputs[grad + 2]];
    double d = (double)q->dims[3], dv = (double)v->dims[3];
    double scores = (double)vp_value_numel(q) / d * (double)k->dims[2] * (vp_attr_int(n, "causal", 0) ? 0.5 : 1.0);
    double cap = vp_attr_float(n, "softcap", 0.0f) > 0 ? (grad ? 10.0 : 8.0) : 0.0;
    return scores * (grad ? 6.0 * d + 4.0 * dv + 16.0 : 2.0 * d + 2.0 * dv + 8.0) + scores * cap;
}

/* LSTM and GRU (and their vplan training forms and gradients): per step and direction,
 * X W^T and H R^T over the G*H gates, then about ten FLOPs a gate; the gradient's four
 * products (dX, dW, dR, dH) cost twice the forward's two. */
static double rnn_flops(const vp_graph *g, const vp_node *n, int grad) {
    const vp_value *w = &g->values[n->inputs[1]], *r = &g->values[n->inputs[2]];
    double I = (double)w->dims[2], D = (double)r->dims[0], GH = (double)r->dims[1], H = (double)r->dims[2];
    double rows = I > 0 ? numel(g, n->inputs[0]) / I : 0; /* sequence * batch */
    return rows * D * GH * ((grad ? 4.0 : 2.0) * (I + H) + 10.0);
}

static int is_rnn(const vp_node *n, int *grad) {
    const char *op = n->op_type;
    int plain = !n->domain[0] && (!strcmp(op, "LSTM") || !strcmp(op, "GRU"));
    int ours = !strcmp(n->domain, "vplan") && (!strcmp(op, "LSTMTraining") || !strcmp(op, "GRUTraining") ||
                                               !strcmp(op, "LSTMGrad") || !strcmp(op, "GRUGrad"));
    *grad = ours && strstr(op, "Grad") != NULL;
    return (plain || ours) && n->n_inputs >= 3;
}

/* An activation fused into its product (planner/ops/act_matmul.c): the product's 2 M K N
 * and about 8 operations an element of the activation; the gradient's two products (dW
 * and dA, each when wanted) and the activation recomputed and differentiated. */
static double act_matmul_flops(const vp_graph *g, const vp_node *n) {
    int grad = strstr(n->op_type, "Grad") != NULL, n_act = n->op_type[0] == 'S' ? 2 : 1;
    int h_in = grad, w_in = grad + n_act;
    if (n->n_inputs <= w_in || n->inputs[h_in] < 0 || n->inputs[w_in] < 0) return 0;
    const vp_value *h = &g->values[n->inputs[h_in]], *w = &g->values[n->inputs[w_in]];
    double act = numel(g, n->inputs[h_in]), k = (double)h->dims[h->rank - 1];
    double mkn = act * (double)(w->dims[0] * w->dims[1]) / (k > 0 ? k : 1);
    if (!grad) return 2.0 * mkn + 8.0 * n_act * act;
    int products = 0;
    for (int o = 0; o < n->n_outputs; o++)
        if (n->outputs[o] >= 0) products |= o == n->n_outputs - 1 ? 1 : 2; /* dW : dA */
    return 2.0 * mkn * ((products & 1) + ((products & 2) >> 1)) + 16.0 * n_act * act;
}

vp_node_cost vp_cost_node(const vp_graph *g, const vp_node *n) {
    vp_node_cost c = {0};
    for (int k = 0; k < n->n_inputs; k++)
        if (n->inputs[k] >= 0) {
            vp_dtype t = g->values[n->inputs[k]].dtype;
            c.bytes += numel(g, n->inputs[k]) * (double)vp_dtype_size(t);
            c.half |= t == VP_F16 || t == VP_BF16;
        }
    double out = 0;
    for (int k = 0; k < n->n_outputs; k++)
        if (n->outputs[k] >= 0) {
            out += numel(g, n->outputs[k]);
            c.bytes += numel(g, n->outputs[k]) * (double)vp_dtype_size(g->values[n->outputs[k]].dtype);
        }
    const char *op = n->op_type;
    int rnn_grad = 0;
    if (!strcmp(op, "MatMul") && n->n_inputs >= 2) c.flops = matmul_flops(g, n);
    else if (!strcmp(op, "FusedMatMul") && n->n_inputs >= 2) {
        const vp_value *a = &g->values[n->inputs[0]];
        int64_t k = vp_attr_int(n, "transA", 0) && a->rank >= 2 ? a->dims[a->rank - 2] : a->dims[a->rank - 1];
        c.flops = 2.0 * numel(g, n->outputs[0]) * (double)k;
    }
    else if (!strcmp(op, "Gemm") && n->n_inputs >= 2) {
        const vp_value *a = &g->values[n->inputs[0]];
        int64_t k = vp_attr_int(n, "transA", 0) ? a->dims[0] : a->dims[a->rank - 1];
        c.flops = 2.0 * numel(g, n->outputs[0]) * (double)k;
    } else if (!strcmp(op, "Conv") && n->n_inputs >= 2) c.flops = conv_flops(g, n->outputs[0], n->inputs[1]);
    else if (!strcmp(op, "ConvTranspose") && n->n_inputs >= 2) c.flops = conv_flops(g, n->inputs[0], n->inputs[1]);
    else if (!strcmp(op, "ConvGrad") && n->n_inputs >= 3) {
        /* dX and dW each cost one forward convolution */
        double fwd = conv_flops(g, n->inputs[0], n->inputs[2]);
        c.flops = fwd * ((n->n_outputs > 0 && n->outputs[0] >= 0) + (n->n_outputs > 1 && n->outputs[1] >= 0));
    } else if (!strcmp(op, "Erf") || !strcmp(op, "Exp") || !strcmp(op, "Tanh") || !strcmp(op, "Sigmoid") || !strcmp(op, "Swish") ||
               !strcmp(op, "Gelu") || !strcmp(op, "GeluGrad") || !strcmp(op, "Softmax") || !strcmp(op, "LogSoftmax"))
        c.flops = 8.0 * out;
    else if (!strcmp(op, "LayerNormalization") || !strcmp(op, "BatchNormalization") || !strcmp(op, "BatchNormInternal") ||
             !strcmp(op, "LayerNormalizationGrad") || !strcmp(op, "BatchNormalizationGrad") ||
             !strcmp(op, "SimplifiedLayerNormalization") || !strcmp(op, "SimplifiedLayerNormalizationGrad"))
        c.flops = 8.0 * numel(g, n->inputs[0]);
    else if (!strcmp(op, "Adam")) c.flops = 12.0 * out;
    /* QAT: fake quantisation is a multiply, a rounding, a clamp and a multiply back per
     * element (its gradient the same again to rebuild the mask, and LSQ's scale term);
     * an observer compares each element twice.  Memory-bound on any device. */
    else if (!strcmp(n->domain, "vplan") && !strcmp(op, "FakeQuant")) c.flops = 6.0 * out;
    else if (!strcmp(n->domain, "vplan") && !strcmp(op, "FakeQuantGrad")) c.flops = 10.0 * numel(g, n->inputs[0]);
    else if (!strcmp(n->domain, "vplan") && !strcmp(op, "QuantObserver") && n->n_inputs > 0)
        c.flops = 2.0 * numel(g, n->inputs[0]);
    else if (!strcmp(n->domain, "vplan") && (!strcmp(op, "GeluMatMul") || !strcmp(op, "SwiGluMatMul") ||
                                             !strcmp(op, "GeluMatMulGrad") || !strcmp(op, "SwiGluMatMulGrad")))
        c.flops = act_matmul_flops(g, n);
    else if (!strcmp(n->domain, "vplan") && !strcmp(op, "Attention") && n->n_inputs >= 3)
        c.flops = attention_flops(g, n, 0);
    else if (!strcmp(n->domain, "vplan") && !strcmp(op, "AttentionGrad") && n->n_inputs >= 6)
        c.flops = attention_flops(g, n, 1);
    else if (is_rnn(n, &rnn_grad)) c.flops = rnn_flops(g, n, rnn_grad);
    else if (n->op && (n->op->flags & VP_OP_COLLECTIVE) && n->outputs[0] >= 0) {
        int ranks = (int)vp_attr_int(n, "ranks", 1);
        c.comm_bytes = (double)vp_tp_node_bytes(g, n, ranks);
        /* a ring all-reduce is a reduce-scatter then an all-gather: n - 1 hops each */
        int half = (n->op->flags & (VP_OP_COLLECTIVE_GATHER | VP_OP_COLLECTIVE_SCATTER)) != 0;
        c.comm_hops = ranks > 1 ? (half ? 1 : 2) * (ranks - 1) : 0;
    } else c.flops = out;
    /* offload (planner/train/offload.h): a copy between the spaces crosses the host link;
     * the update whose every operand is on the host runs there */
    if (n->n_outputs > 0 && n->outputs[0] >= 0) {
        unsigned yh = g->values[n->outputs[0]].flags & VP_VAL_HOST;
        unsigned xh = n->n_inputs > 0 && n->inputs[0] >= 0 ? g->values[n->inputs[0]].flags & VP_VAL_HOST : yh;
        if (xh != yh) c.host_link_bytes = numel(g, n->outputs[0]) * (double)vp_dtype_size(g->values[n->outputs[0]].dtype);
        else c.on_host = yh != 0;
    }
    return c;
}

double vp_cost_seconds(const vp_node_cost *c, const vp_device_profile *dev, int half_precision) {
    if (c->host_link_bytes > 0)
        return (dev->host_link_bandwidth > 0 ? c->host_link_bytes / dev->host_link_bandwidth : 0) + dev->launch_overhead;
    if (c->on_host) return dev->host_bandwidth > 0 ? c->bytes / dev->host_bandwidth : 0;
    double peak = half_precision || c->half ? dev->peak_flops_fp16 : dev->peak_flops_fp32;
    double t_compute = peak > 0 ? c->flops / peak : 0, t_mem = dev->mem_bandwidth > 0 ? c->bytes / dev->mem_bandwidth : 0;
    double t_link = c->comm_bytes > 0 && dev->link_bandwidth > 0 ? c->comm_bytes / dev->link_bandwidth : 0;
    t_link += c->comm_hops * dev->link_latency;
    t_mem = t_mem > t_link ? t_mem : t_link;
    return (t_compute > t_mem ? t_compute : t_mem) + dev->launch_overhead;
}
