/* The recurrent family: ONNX's LSTM and GRU, the training forms that keep what the
 * backward reads, and their gradients.
 *
 *   LSTM(X, W, R, [B], [sequence_lens], [initial_h], [initial_c], [P]) -> [Y], [Y_h], [Y_c]
 *   GRU(X, W, R, [B], [sequence_lens], [initial_h])                    -> [Y], [Y_h]
 *       X [S, N, I] (layout 1: [N, S, I]), W [D, G*H, I], R [D, G*H, H], B [D, 2*G*H],
 *       gates iofc (LSTM, G = 4) and zrh (GRU, G = 3), default activations only
 *       (Sigmoid, Tanh, Tanh), no clip, no input_forget; sequence_lens int32 [N], each
 *       at most S (a reverse direction reverses each sequence within its length).
 *
 *   vplan.LSTMTraining: LSTM's inputs and attributes -> Y, Y_h, Y_c, C [S, D, N, H],
 *       Gates [S, D, N, 4H] (the activated i, o, f, c of each step, in step order)
 *   vplan.GRUTraining: GRU's -> Y, Y_h, Gates [S, D, N, G'H] (z, r, h~ and, when
 *       linear_before_reset, the pre-reset term R_h h + Rb_h: G' = 4, else 3)
 *   vplan.LSTMGrad(X, W, R, B, sequence_lens, initial_h, initial_c, Y, C, Gates,
 *       dY, dY_h, dY_c) -> dX, dW, dR, dB, d_initial_h, d_initial_c
 *   vplan.GRUGrad(X, W, R, B, sequence_lens, initial_h, Y, Gates, dY, dY_h)
 *       -> dX, dW, dR, dB, d_initial_h
 *
 * Training rewrites a forward LSTM or GRU in place into its training form (same inputs,
 * same first outputs, more outputs), so the backward reads the gate activations instead
 * of recomputing them: what ONNX Runtime's LSTMTraining/GRUTraining keep for its
 * LSTMGrad/GRUGrad.  Ours live in the vplan domain because they also cover two
 * directions, layout 1 and sequence lengths.  Peepholes run forward only: the rule
 * refuses P on the gradient path rather than drop its term.  Kernels:
 * runtime/cpu/k_recurrent.c. */
#include <stdlib.h>
#include <string.h>

#include "ir/op_registry.h"
#include "ops/grad_macros.h"

/* ---- shapes ---- */

typedef struct rnn_dims {
    vp_dtype dt;
    int64_t S, N, I, H, D, G;
    int layout;
} rnn_dims;

static vp_status bad_shape(const vp_node *n, const vp_value *v, const char *want, vp_error *err) {
    char s[128];
    return vp_node_fail(err, VP_ERR_INVALID, n, "input '%s' has shape %s, expected %s", v->name,
                        vp_shape_str(v->rank, v->dims, s, sizeof s), want);
}

static int dims_are(const vp_value *v, vp_dtype dt, int rank, const int64_t *d) {
    if (v->dtype != dt || v->rank != rank) return 0;
    for (int k = 0; k < rank; k++)
        if (v->dims[k] != d[k]) return 0;
    return 1;
}

/* Attributes we do not compute are refused here, naming the node. */
static vp_status check_attrs(const vp_node *n, int gates, vp_error *err) {
    static const char *const dflt[3] = {"Sigmoid", "Tanh", "Tanh"};
    const vp_attr *a = vp_node_attr(n, "activations");
    if (a && a->n) {
        int per = gates == 4 ? 3 : 2;
        for (int k = 0; k < a->n; k++)
            if (strcmp(a->strings[k], dflt[k % per]))
                return vp_node_fail(err, VP_ERR_UNSUPPORTED, n,
                                    "unsupported: activation %d is %s; only the defaults (%s) are computed", k,
                                    a->strings[k], per == 3 ? "Sigmoid, Tanh, Tanh" : "Sigmoid, Tanh");
    }
    if (vp_node_attr(n, "clip")) return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "unsupported: the clip attribute");
    if (vp_attr_int(n, "input_forget", 0))
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "unsupported: input_forget=1 (coupled input and forget gates)");
    const char *dir = vp_attr_string(n, "direction", "forward");
    if (strcmp(dir, "forward") && strcmp(dir, "reverse") && strcmp(dir, "bidirectional"))
        return vp_node_fail(err, VP_ERR_INVALID, n, "direction '%s' is not forward, reverse or bidirectional", dir);
    int64_t layout = vp_attr_int(n, "layout", 0);
    if (layout != 0 && layout != 1) return vp_node_fail(err, VP_ERR_INVALID, n, "layout must be 0 or 1");
    if (gates == 3) {
        int64_t lbr = vp_attr_int(n, "linear_before_reset", 0);
        if (lbr != 0 && lbr != 1) return vp_node_fail(err, VP_ERR_INVALID, n, "linear_before_reset must be 0 or 1");
    }
    return VP_OK;
}

/* Checks X, W, R and the optional B, sequence_lens, initial states (and, with has_p,
 * LSTM's P): inputs 0..5 (GRU) or 0..7 (LSTM) in ONNX's order, which the gradient ops
 * keep. */
static vp_status rnn_dims_of(vp_graph *g, const vp_node *n, int gates, int has_p, rnn_dims *r, vp_error *err) {
    vp_status s = check_attrs(n, gates, err);
    if (s) return s;
    const vp_value *x = vp_shape_in(g, n, 0), *w = vp_shape_in(g, n, 1), *rr = vp_shape_in(g, n, 2);
    s = vp_shape_check_dtype(n, 0, x->dtype, vp_float_types, 4, err);
    if (s) return s;
    r->dt = x->dtype;
    r->G = gates;
    r->layout = (int)vp_attr_int(n, "layout", 0);
    r->D = strcmp(vp_attr_string(n, "direction", "forward"), "bidirectional") ? 1 : 2;
    if (x->rank != 3) return bad_shape(n, x, r->layout ? "[batch, seq, input]" : "[seq, batch, input]", err);
    r->S = x->dims[r->layout ? 1 : 0];
    r->N = x->dims[r->layout ? 0 : 1];
    r->I = x->dims[2];
    if (rr->rank != 3) return bad_shape(n, rr, "[directions, gates*hidden, hidden]", err);
    r->H = vp_attr_int(n, "hidden_size", rr->dims[2]);
    if (r->H <= 0) return vp_node_fail(err, VP_ERR_INVALID, n, "hidden_size must be positive");
    int64_t GH = gates * r->H;
    if (!dims_are(w, r->dt, 3, (int64_t[]){r->D, GH, r->I})) return bad_shape(n, w, "[directions, gates*hidden, input] of X's dtype", err);
    if (!dims_are(rr, r->dt, 3, (int64_t[]){r->D, GH, r->H})) return bad_shape(n, rr, "[directions, gates*hidden, hidden] of X's dtype", err);
    const vp_value *b = vp_shape_in(g, n, 3);
    if (b && !dims_are(b, r->dt, 2, (int64_t[]){r->D, 2 * GH})) return bad_shape(n, b, "[directions, 2*gates*hidden]", err);
    const vp_value *sl = vp_shape_in(g, n, 4);
    if (sl && (sl->dtype != VP_I32 || sl->rank != 1 || sl->dims[0] != r->N))
        return bad_shape(n, sl, "int32 [batch]", err);
    int64_t st[3] = {r->layout ? r->N : r->D, r->layout ? r->D : r->N, r->H};
    int last_state = gates == 4 ? 6 : 5;
    for (int k = 5; k <= last_state; k++) {
        const vp_value *h = vp_shape_in(g, n, k);
        if (h && !dims_are(h, r->dt, 3, st)) return bad_shape(n, h, r->layout ? "[batch, directions, hidden]" : "[directions, batch, hidden]", err);
    }
    if (has_p) {
        const vp_value *p = vp_shape_in(g, n, 7);
        if (p && !dims_are(p, r->dt, 2, (int64_t[]){r->D, 3 * r->H})) return bad_shape(n, p, "[directions, 3*hidden]", err);
    }
    return VP_OK;
}

/* Y, Y_h (and Y_c), as outputs 0.. of a forward, or inputs of a gradient. */
static void y_dims(const rnn_dims *r, int64_t *y, int64_t *yh) {
    if (r->layout) {
        int64_t a[4] = {r->N, r->S, r->D, r->H}, b[3] = {r->N, r->D, r->H};
        memcpy(y, a, sizeof a), memcpy(yh, b, sizeof b);
    } else {
        int64_t a[4] = {r->S, r->D, r->N, r->H}, b[3] = {r->D, r->N, r->H};
        memcpy(y, a, sizeof a), memcpy(yh, b, sizeof b);
    }
}

static int64_t saved_width(const vp_node *n, const rnn_dims *r) {
    if (r->G == 4) return 4 * r->H;
    return vp_attr_int(n, "linear_before_reset", 0) ? 4 * r->H : 3 * r->H;
}

static vp_status shape_forward(vp_graph *g, vp_node *n, int gates, int training, vp_error *err) {
    int n_states = gates == 4 ? 3 : 2; /* Y, Y_h, [Y_c] */
    int n_out = n_states + (training ? (gates == 4 ? 2 : 1) : 0);
    vp_status s = vp_shape_check_arity(n, 3, gates == 4 ? 8 : 6, 0, n_out, err); /* the training form grows its outputs one at a time */
    rnn_dims r;
    if (!s) s = rnn_dims_of(g, n, gates, gates == 4, &r, err);
    if (s) return s;
    int64_t y[4], yh[3];
    y_dims(&r, y, yh);
    s = vp_shape_set_output(g, n, 0, r.dt, 4, y, err);
    for (int k = 1; k < n_states && !s; k++) s = vp_shape_set_output(g, n, k, r.dt, 3, yh, err);
    if (training && !s) {
        int64_t c[4] = {r.S, r.D, r.N, r.H}, gt[4] = {r.S, r.D, r.N, saved_width(n, &r)};
        if (gates == 4) s = vp_shape_set_output(g, n, 3, r.dt, 4, c, err);
        if (!s) s = vp_shape_set_output(g, n, n_out - 1, r.dt, 4, gt, err);
    }
    return s;
}

static vp_status shape_lstm(vp_graph *g, vp_node *n, vp_error *err) { return shape_forward(g, n, 4, 0, err); }
static vp_status shape_lstm_training(vp_graph *g, vp_node *n, vp_error *err) { return shape_forward(g, n, 4, 1, err); }
static vp_status shape_gru(vp_graph *g, vp_node *n, vp_error *err) { return shape_forward(g, n, 3, 0, err); }
static vp_status shape_gru_training(vp_graph *g, vp_node *n, vp_error *err) { return shape_forward(g, n, 3, 1, err); }

/* The gradient ops take the forward's inputs first (LSTM's 0..6, GRU's 0..5, no P),
 * then Y, the saved tensors and the output gradients; outputs are the input
 * gradients in the same order. */
static vp_status shape_grad(vp_graph *g, vp_node *n, int gates, vp_error *err) {
    int first = gates == 4 ? 7 : 6, n_saved = gates == 4 ? 2 : 1, n_dy = gates == 4 ? 3 : 2;
    vp_status s = vp_shape_check_arity(n, 3, first + 1 + n_saved + n_dy, 1, first, err);
    for (int k = first; k <= first + n_saved && !s; k++) /* Y and the saved tensors */
        if (k >= n->n_inputs || n->inputs[k] < 0) s = vp_node_fail(err, VP_ERR_INVALID, n, "required input %d is empty", k);
    rnn_dims r;
    if (!s) s = rnn_dims_of(g, n, gates, 0, &r, err);
    if (s) return s;
    int64_t y[4], yh[3], c[4] = {r.S, r.D, r.N, r.H}, gt[4] = {r.S, r.D, r.N, saved_width(n, &r)};
    y_dims(&r, y, yh);
    const vp_value *v = vp_shape_in(g, n, first);
    if (!dims_are(v, r.dt, 4, y)) return bad_shape(n, v, "Y's shape", err);
    if (gates == 4 && !dims_are(v = vp_shape_in(g, n, first + 1), r.dt, 4, c)) return bad_shape(n, v, "[seq, directions, batch, hidden]", err);
    if (!dims_are(v = vp_shape_in(g, n, first + n_saved), r.dt, 4, gt)) return bad_shape(n, v, "[seq, directions, batch, gates*hidden]", err);
    for (int k = 0; k < n_dy; k++)
        if ((v = vp_shape_in(g, n, first + 1 + n_saved + k)) && !dims_are(v, r.dt, k ? 3 : 4, k ? yh : y))
            return bad_shape(n, v, k ? "Y_h's shape" : "Y's shape", err);
    for (int k = 0; k < first && !s; k++) {
        if (k == 4) continue; /* sequence_lens has no gradient */
        const vp_value *in = vp_shape_in(g, n, k);
        if (in) s = vp_shape_same_as_input(g, n, k, k, err);
        else if (k == 3) s = vp_shape_set_output(g, n, 3, r.dt, 2, (int64_t[]){r.D, 2 * r.G * r.H}, err);
        else if (k >= 5) s = vp_shape_set_output(g, n, k, r.dt, 3, yh, err);
    }
    return s;
}

static vp_status shape_lstm_grad(vp_graph *g, vp_node *n, vp_error *err) { return shape_grad(g, n, 4, err); }
static vp_status shape_gru_grad(vp_graph *g, vp_node *n, vp_error *err) { return shape_grad(g, n, 3, err); }

/* ---- gradient ---- */

static vp_status rename_node(vp_grad_ctx *c, int node, const char *op, vp_error *err) {
    vp_node *n = &vp_grad_graph(c)->nodes[node];
    char *t = strdup(op), *d = strdup("vplan");
    if (!t || !d) {
        free(t), free(d);
        return vp_gr_nomem(err);
    }
    free(n->op_type), free(n->domain);
    n->op_type = t, n->domain = d;
    n->op = NULL;
    return VP_OK;
}

/* Turns the forward into its training form (keeping every output it had), emits the
 * gradient op and hands back the input gradients wanted. */
static vp_status grad_rnn(vp_grad_ctx *c, int node, const int *dy, int *dx, int gates, vp_error *err) {
    const vp_node *n = vp_gr_node(c, node);
    int n_states = gates == 4 ? 3 : 2, first = gates == 4 ? 7 : 6;
    if (gates == 4 && IN(7) >= 0)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "unsupported: peepholes (input P) have no gradient rule");
    int any = 0, had = n->n_outputs < n_states ? n->n_outputs : n_states; /* dy has had entries */
    for (int k = 0; k < had; k++) any |= dy[k] >= 0;
    if (!any) return VP_OK;
    TRY(rename_node(c, node, gates == 4 ? "LSTMTraining" : "GRUTraining", err));
    int y, saved[2];
    TRY(vp_gr_forward_output(c, node, 0, "Y", &y, err));
    if (gates == 4) {
        TRY(vp_gr_forward_output(c, node, 3, "C", &saved[0], err));
        TRY(vp_gr_forward_output(c, node, 4, "gates", &saved[1], err));
    } else {
        TRY(vp_gr_forward_output(c, node, 2, "gates", &saved[0], err));
    }
    int in[13], k = 0;
    for (int j = 0; j < first; j++) in[k++] = IN(j);
    in[k++] = y;
    for (int j = 0; j < (gates == 4 ? 2 : 1); j++) in[k++] = saved[j];
    for (int j = 0; j < n_states; j++) in[k++] = j < had ? dy[j] : -1;
    int b = vp_grad_begin(c, node, gates == 4 ? "LSTMGrad" : "GRUGrad", "vplan", k, in, first);
    if (b < 0) return vp_gr_nomem(err);
    TRY(vp_gr_copy_attrs(c, node, b, err));
    vp_node *bn = &vp_grad_graph(c)->nodes[b];
    int want[7];
    for (int j = 0; j < first; j++) {
        want[j] = j != 4 && vp_grad_needs(c, node, j);
        if (!want[j]) bn->outputs[j] = -1;
    }
    int outs[7];
    TRY(vp_grad_end(c, b, outs, err));
    for (int j = 0; j < first; j++)
        if (want[j]) dx[j] = outs[j];
    return VP_OK;
}

static VP_GRAD_RULE(grad_lstm) { return grad_rnn(c, node, dy, dx, 4, err); }
static VP_GRAD_RULE(grad_gru) { return grad_rnn(c, node, dy, dx, 3, err); }

const vp_op_def vp_ops_recurrent[] = {
    {.name = "LSTM", .min_opset = 7, .shape = shape_lstm, .flags = VP_OP_OUTPUT0_OPTIONAL, .grad = grad_lstm},
    {.name = "GRU", .min_opset = 7, .shape = shape_gru, .flags = VP_OP_OUTPUT0_OPTIONAL, .grad = grad_gru},
    {.name = "LSTMTraining", .domain = "vplan", .shape = shape_lstm_training, .grad = grad_lstm},
    {.name = "GRUTraining", .domain = "vplan", .shape = shape_gru_training, .grad = grad_gru},
    {.name = "LSTMGrad", .domain = "vplan", .shape = shape_lstm_grad},
    {.name = "GRUGrad", .domain = "vplan", .shape = shape_gru_grad},
    {0},
};
