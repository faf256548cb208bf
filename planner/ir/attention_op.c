/* ONNX's Attention expanded in place (attention_op.h says what comes in and goes out).
 *
 * The new nodes are appended, each inferred as it is made, then spliced in where the
 * Attention stood (vp_build_splice). */
#include "ir/attention_op.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/dtype_conv.h"
#include "ir/graph_build.h"
#include "ir/infer.h"

int vp_attention_op_is(const vp_node *n) {
    return (!n->domain[0] || !strcmp(n->domain, "ai.onnx")) && !strcmp(n->op_type, "Attention");
}

typedef struct emitter {
    vp_graph *g;
    const char *stem; /* the Attention's name: each new node is "<stem>/<what>" */
    vp_dtype dtype;   /* Q's: what Cast makes */
    const int64_t *perm; /* a Transpose's, 4 of them; NULL: the last two axes swapped */
} emitter;

/* Adds op reading in[0..n_in) into *out (a new value when *out < 0) and infers it. */
static vp_status emit(emitter *e, const char *op, const char *what, int n_in, const int *in, int *out, vp_error *err) {
    char name[600];
    snprintf(name, sizeof name, "%s/%s", e->stem, what);
    if (*out < 0 && (*out = vp_graph_add_unique_value(e->g, name)) < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    int id = vp_graph_add_node(e->g, op, "", name, n_in, in, 1, out);
    if (id < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    e->g->nodes[id].opset = e->g->opset_onnx;
    if (!strcmp(op, "Transpose") &&
        vp_node_add_attr_ints(e->g, id, "perm", e->perm ? e->perm : (const int64_t[]){0, 1, 3, 2}, 4))
        return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    if (!strcmp(op, "Softmax") && vp_node_add_attr_int(e->g, id, "axis", -1))
        return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    if (!strcmp(op, "Cast") && vp_node_add_attr_int(e->g, id, "to", e->dtype))
        return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    return vp_infer_node(e->g, id, 0, NULL, err);
}

/* A scalar of dtype dt (float32, float16, bfloat16 or float64) holding x. */
static int scalar_const(vp_graph *g, const char *stem, vp_dtype dt, double x) {
    if (dt == VP_F64) return vp_build_const(g, stem, dt, 0, NULL, &x);
    float f = (float)x; /* x fits: the narrow dtypes' values come here as floats */
    uint16_t h = dt == VP_F16 ? vp_f32_to_f16(f) : vp_f32_to_bf16(f);
    return vp_build_const(g, stem, dt, 0, NULL, dt == VP_F32 ? (const void *)&f : (const void *)&h);
}

static int ints_const(vp_graph *g, const char *stem, int n, const int64_t *v) {
    return vp_build_const(g, stem, VP_I64, 1, (int64_t[]){n}, v);
}

/* K or V [b, hkv, l, d] with each head repeated rep times: [b, hkv * rep, l, d]. */
static vp_status repeat_heads(emitter *e, int x, int64_t rep, const char *what, int *out, vp_error *err) {
    const vp_value *v = &e->g->values[x];
    int64_t b = v->dims[0], hkv = v->dims[1], l = v->dims[2], d = v->dims[3];
    char step[64];
    int axes = ints_const(e->g, "axes", 1, (const int64_t[]){2});
    int shape5 = ints_const(e->g, "shape", 5, (const int64_t[]){b, hkv, rep, l, d});
    int shape4 = ints_const(e->g, "shape", 4, (const int64_t[]){b, hkv * rep, l, d});
    if (axes < 0 || shape5 < 0 || shape4 < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    int u = -1, x5 = -1;
    snprintf(step, sizeof step, "%s_unsqueeze", what);
    vp_status s = emit(e, "Unsqueeze", step, 2, (int[]){x, axes}, &u, err);
    snprintf(step, sizeof step, "%s_expand", what);
    if (!s) s = emit(e, "Expand", step, 2, (int[]){u, shape5}, &x5, err);
    snprintf(step, sizeof step, "%s_repeat", what);
    if (!s) s = emit(e, "Reshape", step, 2, (int[]){x5, shape4}, out, err);
    return s;
}

/* [B, L, heads * d] (rank-3 Q, K or V) as [B, heads, L, d], or the reverse (rank-4 Y
 * back to [B, L, hidden]): a Reshape and a Transpose of the middle axes, in that order or
 * the other. */
static const int64_t swap_middle[4] = {0, 2, 1, 3};
static vp_status split_heads(emitter *e, int x, int64_t heads, const char *what, int *out, vp_error *err) {
    const vp_value *v = &e->g->values[x];
    int64_t b = v->dims[0], l = v->dims[1], d = v->dims[2] / heads;
    int shape = ints_const(e->g, "shape", 4, (const int64_t[]){b, l, heads, d}), r = -1;
    if (shape < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    char step[64];
    snprintf(step, sizeof step, "%s_heads", what);
    vp_status s = emit(e, "Reshape", step, 2, (int[]){x, shape}, &r, err);
    e->perm = swap_middle;
    snprintf(step, sizeof step, "%s_heads_first", what);
    if (!s) s = emit(e, "Transpose", step, 1, &r, out, err);
    e->perm = NULL;
    return s;
}
static vp_status merge_heads(emitter *e, int y4, int y, vp_error *err) {
    const vp_value *v = &e->g->values[y4];
    int64_t b = v->dims[0], h = v->dims[1], l = v->dims[2], d = v->dims[3];
    int shape = ints_const(e->g, "shape", 3, (const int64_t[]){b, l, h * d}), t = -1;
    if (shape < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    e->perm = swap_middle;
    vp_status s = emit(e, "Transpose", "out_heads_last", 1, &y4, &t, err);
    e->perm = NULL;
    return s ? s : emit(e, "Reshape", "out_merged", 2, (int[]){t, shape}, &y, err);
}

/* The boolean [s, l] mask of is_causal: query i sees keys 0..i (top-left aligned). */
static int causal_const(vp_graph *g, int64_t s, int64_t l) {
    unsigned char *m = malloc((size_t)(s * l) + 1);
    if (!m) return -1;
    for (int64_t i = 0; i < s; i++)
        for (int64_t j = 0; j < l; j++) m[i * l + j] = j <= i;
    int id = vp_build_const(g, "causal_mask", VP_BOOL, 2, (const int64_t[]){s, l}, m);
    free(m);
    return id;
}

static int present(const vp_node *n, int i, int outputs) {
    int k = outputs ? n->n_outputs : n->n_inputs;
    const int *ids = outputs ? n->outputs : n->inputs;
    return i < k && ids[i] >= 0;
}

static vp_status expand(vp_graph *g, int node, int y, vp_error *err) {
    const vp_node *n = &g->nodes[node];
    for (int i = 0; i < 3; i++)
        if (!present(n, i, 0)) return vp_node_fail(err, VP_ERR_INVALID, n, "has no input %d (Q, K and V are required)", i);
    if (present(n, 4, 0) || present(n, 5, 0) || present(n, 1, 1) || present(n, 2, 1) || present(n, 3, 1))
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n,
                            "has past_key/past_value inputs or present/qk outputs (a KV cache): only attention "
                            "without a cache is supported");
    if (n->n_inputs > 6 && n->inputs[6] >= 0)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "has nonpad_kv_seqlen: only attention without it is supported");
    int q = n->inputs[0], k = n->inputs[1], v = n->inputs[2], mask = present(n, 3, 0) ? n->inputs[3] : -1;
    const vp_value *qv = &g->values[q], *kv = &g->values[k], *vv = &g->values[v];
    int rank3 = qv->rank == 3 && kv->rank == 3 && vv->rank == 3;
    int64_t nq = vp_attr_int(n, "q_num_heads", 0), nkv = vp_attr_int(n, "kv_num_heads", 0);
    if (!rank3 && (qv->rank != 4 || kv->rank != 4 || vv->rank != 4))
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n,
                            "has Q, K, V of ranks %d, %d, %d: [batch, heads, sequence, head size] (rank 4) or "
                            "[batch, sequence, hidden] (rank 3, with q_num_heads and kv_num_heads) are supported",
                            qv->rank, kv->rank, vv->rank);
    if (rank3 && (nq <= 0 || nkv <= 0 || nq % nkv || qv->dims[2] % nq || kv->dims[2] % nkv || vv->dims[2] % nkv ||
                  kv->dims[2] / nkv != qv->dims[2] / nq))
        return vp_node_fail(err, VP_ERR_INVALID, n,
                            "has rank-3 Q, K, V of hidden sizes %lld, %lld, %lld and q_num_heads %lld, kv_num_heads "
                            "%lld: the heads must be given, kv_num_heads divide q_num_heads and each divide its hidden "
                            "sizes, Q and K of one head size",
                            (long long)qv->dims[2], (long long)kv->dims[2], (long long)vv->dims[2], (long long)nq,
                            (long long)nkv);
    vp_dtype dt = qv->dtype;
    if (dt != VP_F32 && dt != VP_F16 && dt != VP_BF16 && dt != VP_F64)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "has Q of dtype %s (float, float16, bfloat16 and double "
                            "supported)", vp_dtype_name(dt));
    float scale = vp_attr_float(n, "scale", 0.0f);
    int causal = (int)vp_attr_int(n, "is_causal", 0);
    float softcap = vp_attr_float(n, "softcap", 0.0f); /* applied where > 0, as ONNX's reference does */
    char stem[512];
    snprintf(stem, sizeof stem, "%s", n->name[0] ? n->name : "Attention");
    emitter e = {g, stem, dt, NULL};
    vp_status s = VP_OK;
    int y_out = y;
    if (rank3) { /* emitting moves nodes and values: n, qv, kv and vv are fetched again after */
        int q4 = -1, k4 = -1, v4 = -1;
        s = split_heads(&e, q, nq, "q", &q4, err);
        if (!s) s = split_heads(&e, k, nkv, "k", &k4, err);
        if (!s) s = split_heads(&e, v, nkv, "v", &v4, err);
        if (s) return s;
        q = q4;
        k = k4;
        v = v4;
        n = &g->nodes[node];
        qv = &g->values[q];
        kv = &g->values[k];
        vv = &g->values[v];
        y = -1; /* the product is [B, H, S, Dv], merged into Y after it */
    }
    int64_t hq = qv->dims[1], hkv = kv->dims[1], sq = qv->dims[2], l = kv->dims[2], d = qv->dims[3];
    if (vv->dims[1] != hkv || hkv <= 0 || hq % hkv)
        return vp_node_fail(err, VP_ERR_INVALID, n, "has %lld query heads and %lld/%lld key/value heads: the query "
                            "heads must be a multiple of the key/value heads", (long long)hq, (long long)hkv,
                            (long long)vv->dims[1]);
    if (scale == 0.0f) scale = 1.0f / sqrtf((float)d);
    if (hq != hkv) {
        int kr = -1, vr = -1;
        s = repeat_heads(&e, k, hq / hkv, "k", &kr, err);
        if (!s) s = repeat_heads(&e, v, hq / hkv, "v", &vr, err);
        k = kr;
        v = vr;
    }
    /* masked scores take the dtype's lowest finite value, not -inf: a row every key of
     * which is masked then has finite uniform probabilities, which the row's "any key
     * kept" factor zeroes, as ONNX defines it (no NaN forward or backward) */
    double lowest = dt == VP_F16 ? -65504.0 : dt == VP_BF16 ? -3.3895314e38 : dt == VP_F64 ? -DBL_MAX : -FLT_MAX;
    int kt = -1, scores = -1, scaled = -1, masked = -1, probs = -1, keep = -1;
    int c_scale = scalar_const(g, "scale", dt, scale), c_low = scalar_const(g, "masked", dt, lowest);
    if (c_scale < 0 || c_low < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    if (!s) s = emit(&e, "Transpose", "k_transposed", 1, &k, &kt, err);
    if (!s) s = emit(&e, "MatMul", "scores", 2, (int[]){q, kt}, &scores, err);
    if (!s) s = emit(&e, "Mul", "scaled", 2, (int[]){scores, c_scale}, &scaled, err);
    if (!s && softcap > 0) { /* before the mask, so that masked scores stay masked */
        int c_cap = scalar_const(g, "softcap", dt, softcap), over = -1, t = -1, capped = -1;
        if (c_cap < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
        s = emit(&e, "Div", "softcap_div", 2, (int[]){scaled, c_cap}, &over, err);
        if (!s) s = emit(&e, "Tanh", "softcap_tanh", 1, &over, &t, err);
        if (!s) s = emit(&e, "Mul", "softcapped", 2, (int[]){t, c_cap}, &capped, err);
        scaled = capped;
    }
    int bool_mask = mask >= 0 && g->values[mask].dtype == VP_BOOL;
    if (!s && causal) { /* a boolean mask of its own, joined with a boolean attn_mask */
        int c = causal_const(g, sq, l);
        if (c < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
        if (bool_mask) s = emit(&e, "And", "causal_and_mask", 2, (int[]){c, mask}, &keep, err);
        else keep = c;
    } else if (bool_mask) {
        keep = mask;
    }
    if (!s && keep >= 0) {
        s = emit(&e, "Where", "masked", 3, (int[]){keep, scaled, c_low}, &masked, err);
        scaled = masked;
    }
    if (!s && mask >= 0 && !bool_mask) {
        masked = -1;
        s = emit(&e, "Add", "mask_added", 2, (int[]){scaled, mask}, &masked, err);
        scaled = masked;
    }
    if (!s) s = emit(&e, "Softmax", "probs", 1, &scaled, &probs, err);
    if (!s && bool_mask) { /* 1 where a row keeps a key, 0 where it keeps none */
        int kf = -1, any = -1, kept = -1, axes = ints_const(g, "axes", 1, (const int64_t[]){-1});
        if (axes < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
        s = emit(&e, "Cast", "keep_float", 1, &keep, &kf, err);
        if (!s) s = emit(&e, "ReduceMax", "row_keeps_any", 2, (int[]){kf, axes}, &any, err);
        if (!s) s = emit(&e, "Mul", "probs_kept", 2, (int[]){probs, any}, &kept, err);
        probs = kept;
    }
    if (!s) s = emit(&e, "MatMul", "out", 2, (int[]){probs, v}, &y, err);
    if (!s && rank3) s = merge_heads(&e, y, y_out, err);
    return s;
}

static vp_status expand_fn(vp_graph *g, int node, int y, void *ctx, vp_error *err) {
    (void)ctx;
    if (y < 0) return vp_node_fail(err, VP_ERR_INVALID, &g->nodes[node], "has no output Y");
    return expand(g, node, y, err);
}

vp_status vp_attention_op_expand(vp_graph *g, int node, int *n_new, vp_error *err) {
    return vp_build_replace_node(g, node, expand_fn, NULL, n_new, err);
}
