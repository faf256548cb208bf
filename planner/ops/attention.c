/* The attention family: one fused attention op and its gradient (domain "vplan").
 *
 *   Attention(Q [B,H,S,D], K [B,Hk,T,D], V [B,Hk,T,Dv], [mask], [step]) -> Y [B,H,S,Dv], [LSE [B,H,S]]
 *       Hk divides H: grouped-query attention, query head h reading key/value head
 *       h / (H / Hk) (Hk = H: one each), so K and V are never repeated to H heads
 *       attrs scale (float, default 1/sqrt(D)), causal (int, default 0), y_bshd (int,
 *       default 0: Y is [B,S,H,Dv] where 1, the heads merged as the output projection
 *       reads them, so no transposed copy of Y is kept beside it; dY likewise),
 *       q_bshd and kv_bshd (int, default 0: Q is [B,S,H,D], and K, V [B,T,Hk,D|Dv],
 *       where 1, as the projections write them, so the head transposes before the
 *       attention are never copied; their gradients in the same layout)
 *       softcap (float, default 0: none): where c > 0, the scores are soft-capped
 *       before the mask, as Gemma 2 and ONNX's Attention define it
 *       A    = scale * Q K^T                   (c tanh(scale * Q K^T / c) under softcap)
 *       A    = A + mask                         (mask additive, broadcast to [B,H,S,T])
 *       A_ij = -inf where causal and j > i      (top-left aligned, as torch's
 *                                                tril(ones(S, T)) and is_causal)
 *       LSE  = log sum_j exp(A_ij)              (row log-sum-exp)
 *       Y    = softmax(A) V = exp(A - LSE) V
 *       zero_masked_rows (int, default 0): where 1, a row whose every A_ij is -inf (its
 *       mask keeps no key) gives Y_i = 0, LSE_i = +inf and no gradient, as torch's guard
 *       Where(IsNaN(P), 0, P) and ONNX's Attention define it; where 0, NaN, as Softmax
 *       dropout (float in [0, 1), default 0) and seed (int): where r > 0, P is dropped
 *       as a training Dropout of ours drops it, Y = (P * M / (1 - r)) V, M_ij kept by
 *       runtime/dropout_rng.h at P's index in [B, H, S, T] (the whole tensor's under
 *       vplan_axis/vplan_ranks/vplan_rank, as a split Dropout), drawn for the step count
 *       of the optional int64 input [step] after the mask (0 without it); never stored:
 *       the backward draws M again
 *
 *   AttentionGrad(dY, Q, K, V, Y, LSE, [mask], [step]) -> dQ, dK, dV, [dMask] (each optional),
 *       same attrs
 *       P  = exp(A - LSE)                       (recomputed, never read from memory)
 *       D_i = sum_d dY_id Y_id,  dS = P * (dY V^T - D)
 *       (under dropout dS = P * (M / (1 - r) * dY V^T - D) and dV = (P * M / (1 - r))^T dY,
 *       D unchanged: sum_j P_ij M_ij / (1 - r) (dY V^T)_ij is still dY_i . Y_i)
 *       dMask = dS summed over the axes the mask broadcasts along, in the mask's shape
 *               (a trained bias: T5's relative position bias, ALiBi slopes learned)
 *       dS *= 1 - tanh^2(scale * Q K^T / c)     (under softcap; the tanh recomputed)
 *       dQ = scale dS K,  dK = scale dS^T Q,  dV = P^T dY  (dK, dV summed over the
 *                                                         query heads of a group)
 *
 * This is FlashAttention's split of the work (Dao et al. 2022): the forward keeps Y and
 * the row log-sum-exp, so the backward never needs the a*s*s probabilities that the
 * decomposed graph (MatMul, Mul, Add, Softmax, MatMul) saves for SoftmaxGrad and the
 * second MatMul's gradient: the 5as/h term of Korthikanti et al. 2022.  Kernels
 * (runtime/cpu/k_attention.c, runtime/cuda/cu_attention.cu) work a block of query rows
 * at a time with O(block * T) scratch.
 *
 * LSE is float32 for float32 and narrower inputs and float64 for float64 ones, so a
 * float64 gradient check recomputes P to float64 accuracy.  The mask has Q's dtype; where
 * it depends on a parameter the backward also writes its gradient, which the kernels
 * sum in a fixed order (the same bits on any number of threads). */
#include <math.h>
#include <string.h>

#include "ir/op_registry.h"
#include "ops/grad_macros.h"

/* ---- shapes ---- */

static vp_status fail_dims(const vp_node *n, const char *what, const vp_value *v, vp_error *err) {
    char s[128];
    return vp_node_fail(err, VP_ERR_INVALID, n, "%s has shape %s: %s", v->name, vp_shape_str(v->rank, v->dims, s, sizeof s),
                        what);
}

/* v's dims as [B, heads, length, depth], from [B, length, heads, depth] when bshd. */
static vp_value heads_first(const vp_value *v, int bshd) {
    vp_value l = *v;
    if (bshd && l.rank == 4) {
        l.dims[1] = v->dims[2];
        l.dims[2] = v->dims[1];
    }
    return l;
}

/* Q's [B, H, S, D] whatever its layout. */
static vp_value q_logical(vp_graph *g, const vp_node *n, int q) {
    return heads_first(vp_shape_in(g, n, q), vp_attr_int(n, "q_bshd", 0) != 0);
}

/* Q, K, V (inputs q, q+1, q+2) and the optional mask (input m): ranks, dtypes and
 * dims agree; *dt is their dtype. */
static vp_status check_qkv(vp_graph *g, const vp_node *n, int q, int m, vp_dtype *dt, vp_error *err) {
    int kv_bshd = vp_attr_int(n, "kv_bshd", 0) != 0;
    vp_value lq = q_logical(g, n, q), lk = heads_first(vp_shape_in(g, n, q + 1), kv_bshd),
             lv = heads_first(vp_shape_in(g, n, q + 2), kv_bshd);
    const vp_value *vq = &lq, *vk = &lk, *vv = &lv;
    vp_status s = vp_shape_check_dtype(n, q, vq->dtype, vp_float_types, 4, err);
    if (s) return s;
    if (vk->dtype != vq->dtype || vv->dtype != vq->dtype)
        return vp_node_fail(err, VP_ERR_INVALID, n, "Q, K and V must share a dtype (%s, %s, %s)", vp_dtype_name(vq->dtype),
                            vp_dtype_name(vk->dtype), vp_dtype_name(vv->dtype));
    if (vq->rank != 4) return fail_dims(n, "Q must be [B, H, S, D] ([B, S, H, D] under q_bshd)", vq, err);
    if (vk->rank != 4 || vk->dims[0] != vq->dims[0] || vk->dims[1] < 1 || vq->dims[1] % vk->dims[1] ||
        vk->dims[3] != vq->dims[3])
        return fail_dims(n, "K must be [B, Hk, T, D] ([B, T, Hk, D] under kv_bshd) with Q's B and D, Hk dividing H", vk,
                         err);
    if (vv->rank != 4 || vv->dims[0] != vq->dims[0] || vv->dims[1] != vk->dims[1] || vv->dims[2] != vk->dims[2])
        return fail_dims(n, "V must be [B, Hk, T, Dv] with K's B, Hk and T", vv, err);
    const vp_value *mask = vp_shape_in(g, n, m);
    if (mask) {
        if (mask->dtype != vq->dtype)
            return vp_node_fail(err, VP_ERR_INVALID, n, "the mask must have Q's dtype %s, got %s", vp_dtype_name(vq->dtype),
                                vp_dtype_name(mask->dtype));
        int64_t full[4] = {vq->dims[0], vq->dims[1], vq->dims[2], vk->dims[2]};
        int ok = mask->rank <= 4;
        for (int d = 0; ok && d < mask->rank; d++) {
            int64_t md = mask->dims[mask->rank - 1 - d], fd = full[3 - d];
            ok = md == fd || md == 1;
        }
        if (!ok) return fail_dims(n, "the mask must broadcast to [B, H, S, T] without growing it", mask, err);
    }
    int64_t causal = vp_attr_int(n, "causal", 0);
    if (causal != 0 && causal != 1) return vp_node_fail(err, VP_ERR_INVALID, n, "attribute causal must be 0 or 1");
    float softcap = vp_attr_float(n, "softcap", 0.0f);
    if (!(softcap >= 0) || isinf(softcap))
        return vp_node_fail(err, VP_ERR_INVALID, n, "attribute softcap must be finite and at least 0 (0: none), got %g",
                            (double)softcap);
    float dropout = vp_attr_float(n, "dropout", 0.0f);
    if (!(dropout >= 0 && dropout < 1))
        return vp_node_fail(err, VP_ERR_INVALID, n, "attribute dropout must be in [0, 1), got %g", (double)dropout);
    s = vp_shape_check_draws(g, n, 4, m + 1, err); /* the split of the heads, axis 1 */
    if (s) return s;
    *dt = vq->dtype;
    return VP_OK;
}

static vp_dtype lse_dtype(vp_dtype dt) { return dt == VP_F64 ? VP_F64 : VP_F32; }

/* Y's (and dY's) extents: [B, H, S, Dv], or [B, S, H, Dv] under y_bshd. */
static void y_dims(const vp_node *n, const vp_value *q, const vp_value *v, int64_t *y) {
    int bshd = vp_attr_int(n, "y_bshd", 0) != 0;
    y[0] = q->dims[0];
    y[1] = bshd ? q->dims[2] : q->dims[1];
    y[2] = bshd ? q->dims[1] : q->dims[2];
    y[3] = v->dims[3];
}

static vp_status shape_attention(vp_graph *g, vp_node *n, vp_error *err) {
    vp_dtype dt;
    vp_status s = vp_shape_check_arity(n, 3, 5, 1, 2, err);
    if (!s) s = check_qkv(g, n, 0, 3, &dt, err);
    if (s) return s;
    vp_value lq = q_logical(g, n, 0);
    const vp_value *q = &lq, *v = vp_shape_in(g, n, 2);
    int64_t y[4];
    y_dims(n, q, v, y);
    int64_t lse[3] = {q->dims[0], q->dims[1], q->dims[2]};
    s = vp_shape_set_output(g, n, 0, dt, 4, y, err);
    if (!s) s = vp_shape_set_output(g, n, 1, lse_dtype(dt), 3, lse, err);
    return s;
}

static vp_status shape_attention_grad(vp_graph *g, vp_node *n, vp_error *err) {
    vp_dtype dt;
    vp_status s = vp_shape_check_arity(n, 6, 8, 1, 4, err);
    if (!s) s = check_qkv(g, n, 1, 6, &dt, err);
    if (!s && n->n_outputs > 3 && n->outputs[3] >= 0 && !vp_shape_in(g, n, 6))
        return vp_node_fail(err, VP_ERR_INVALID, n, "has a mask gradient (output 3) but no mask (input 6)");
    if (s) return s;
    vp_value lq = q_logical(g, n, 1);
    const vp_value *q = &lq, *v = vp_shape_in(g, n, 3);
    int64_t ydims[4];
    y_dims(n, q, v, ydims);
    for (int i = 0; i < 5; i += 4) { /* dY and Y */
        const vp_value *x = vp_shape_in(g, n, i);
        if (x->dtype != dt || x->rank != 4 || memcmp(x->dims, ydims, sizeof ydims))
            return fail_dims(n, vp_attr_int(n, "y_bshd", 0) ? "dY and Y must be [B, S, H, Dv] of Q's dtype (y_bshd)"
                                                           : "dY and Y must be [B, H, S, Dv] of Q's dtype",
                             x, err);
    }
    const vp_value *lse = vp_shape_in(g, n, 5);
    if (lse->dtype != lse_dtype(dt) || lse->rank != 3 || memcmp(lse->dims, q->dims, sizeof(int64_t) * 3))
        return fail_dims(n, "LSE must be [B, H, S], float64 for float64 inputs and float32 otherwise", lse, err);
    for (int k = 0; k < 3 && !s; k++) s = vp_shape_same_as_input(g, n, k, k + 1, err);
    if (!s && n->n_outputs > 3) s = vp_shape_same_as_input(g, n, 3, 6, err);
    return s;
}

/* ---- gradient ---- */

/* AttentionGrad(dY, Q, K, V, Y, LSE, [mask], [step]) with the forward's attributes;
 * output 3, the mask's gradient, only where the mask depends on a parameter. */
static VP_GRAD_RULE(grad_attention) {
    const vp_node *n = vp_gr_node(c, node);
    if (n->n_outputs > 1 && n->outputs[1] >= 0 && dy[1] >= 0)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "the row log-sum-exp (output 1) reaches the loss; only Y has a gradient rule");
    if (dy[0] < 0) return VP_OK;
    int lse, outs[4];
    TRY(vp_gr_forward_output(c, node, 1, "lse", &lse, err));
    int want[4] = {vp_grad_needs(c, node, 0), vp_grad_needs(c, node, 1), vp_grad_needs(c, node, 2),
                   IN(3) >= 0 && vp_grad_needs(c, node, 3)};
    int in[8] = {dy[0], IN(0), IN(1), IN(2), OUT(0), lse, IN(3), IN(4)};
    int b = vp_grad_begin(c, node, "AttentionGrad", "vplan", IN(4) >= 0 ? 8 : IN(3) >= 0 ? 7 : 6, in, want[3] ? 4 : 3);
    if (b < 0) return vp_gr_nomem(err);
    TRY(vp_gr_copy_attrs(c, node, b, err));
    vp_node *bn = &vp_grad_graph(c)->nodes[b];
    for (int k = 0; k < 4; k++)
        if (k < bn->n_outputs && !want[k]) bn->outputs[k] = -1;
    TRY(vp_grad_end(c, b, outs, err));
    for (int k = 0; k < 4; k++)
        if (want[k]) dx[k] = outs[k];
    return VP_OK;
}

const vp_op_def vp_ops_attention[] = {
    {.name = "Attention", .domain = "vplan", .shape = shape_attention, .grad = grad_attention},
    {.name = "AttentionGrad", .domain = "vplan", .shape = shape_attention_grad},
    {0},
};
