/* The attention family's CUDA ops: vplan.Attention and vplan.AttentionGrad in float32,
 * float16 and bfloat16 (cu_attention.cu); float64 is refused.  Under dropout the kernels
 * read the step count on the device and make the masks' key there (no copy back). */
#include <math.h>

#include "cu_attention.h"
#include "cuda_internal.h"

static void shape_of(const vp_node *n, const vp_tensor *q, const vp_tensor *k, const vp_tensor *v,
                     const vp_tensor *mask, cu_attention_shape *s) {
    s->q_bshd = vp_attr_int(n, "q_bshd", 0) != 0;
    s->kv_bshd = vp_attr_int(n, "kv_bshd", 0) != 0;
    s->B = q->dims[0];
    s->H = q->dims[s->q_bshd ? 2 : 1]; /* logical [B, H, S, D] whatever the layout */
    s->Hk = k->dims[s->kv_bshd ? 2 : 1];
    s->S = q->dims[s->q_bshd ? 1 : 2];
    s->D = q->dims[3];
    s->T = k->dims[s->kv_bshd ? 1 : 2];
    s->Dv = v->dims[3];
    s->scale = vp_attr_float(n, "scale", s->D ? (float)(1.0 / sqrt((double)s->D)) : 1.0f);
    s->softcap = vp_attr_float(n, "softcap", 0.0f);
    if (!(s->softcap > 0)) s->softcap = 0;
    s->causal = vp_attr_int(n, "causal", 0) != 0;
    s->zero_rows = vp_attr_int(n, "zero_masked_rows", 0) != 0;
    s->y_bshd = vp_attr_int(n, "y_bshd", 0) != 0;
    s->mask = mask ? mask->data : NULL;
    int64_t full[4] = {s->B, s->H, s->S, s->T};
    for (int d = 0; d < 4; d++) {
        int md = mask ? d - (4 - mask->rank) : -1;
        s->mask_dims[d] = md >= 0 ? mask->dims[md] : 1;
        s->mask_strides[d] = 0;
    }
    if (mask) broadcast_strides(mask, 4, full, s->mask_strides);
    s->dropout = vp_attr_float(n, "dropout", 0.0f);
    if (!(s->dropout > 0)) s->dropout = 0;
    s->drop_seed = (uint32_t)vp_attr_int(n, "seed", 0);
    s->drop_step = NULL;
    s->drop_ranks = (int)vp_attr_int(n, "vplan_ranks", 1);
    s->drop_rank = (int)vp_attr_int(n, "vplan_rank", 0);
}

/* Under dropout, the step count (input k, an int64 the kernels read on the device). */
static vp_status drop_step(const vp_node *n, const vp_tensor *const *in, int k, cu_attention_shape *s, vp_error *err) {
    const vp_tensor *st = opt_in(n, in, k);
    if (!(s->dropout > 0) || !st) return VP_OK;
    if (st->dtype != VP_I64) return vp_node_fail(err, VP_ERR_INVALID, n, "input %d (the step count) must be int64", k);
    s->drop_step = (const int64_t *)st->data;
    return VP_OK;
}

/* Inputs 0..count-1 and the mask (input m, may be NULL) of one float type the kernels
 * take; the LSE is float32 (checked apart). */
static vp_status same_float(const vp_node *n, const vp_tensor *const *in, int count, const vp_tensor *mask, int m,
                            vp_error *err) {
    vp_status s = vp_cuda_need_float(n, in[0], 0, err);
    for (int k = 1; k < count && !s; k++)
        if (!in[k] || in[k]->dtype != in[0]->dtype)
            s = vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "input %d is not of input 0's dtype", k);
    if (!s && mask && mask->dtype != in[0]->dtype)
        s = vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "the mask (input %d) is not of input 0's dtype", m);
    return s;
}

static vp_status op_attention(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                              vp_error *err) {
    const vp_tensor *mask = opt_in(n, in, 3);
    vp_status s = same_float(n, in, 3, mask, 3, err);
    if (!s && opt_out(n, out, 1)) s = vp_cuda_need_f32(n, opt_out(n, out, 1), 1, err);
    if (s) return s;
    cu_attention_shape sh;
    shape_of(n, in[0], in[1], in[2], mask, &sh);
    if ((s = drop_step(n, in, 4, &sh, err))) return s;
    return LAUNCH(cu_attention((int)in[0]->dtype, &sh, in[0]->data, in[1]->data, in[2]->data, out[0]->data,
                               fptr(opt_out(n, out, 1)), c->stream));
}

static vp_status op_attention_grad(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                   vp_error *err) {
    const vp_tensor *mask = opt_in(n, in, 6);
    vp_status s = same_float(n, in, 5, mask, 6, err);
    if (!s) s = vp_cuda_need_f32(n, in[5], 5, err);
    if (s) return s;
    cu_attention_shape sh;
    shape_of(n, in[1], in[2], in[3], mask, &sh);
    if ((s = drop_step(n, in, 7, &sh, err))) return s;
    vp_tensor *dq = opt_out(n, out, 0), *dk = opt_out(n, out, 1), *dv = opt_out(n, out, 2);
    vp_tensor *dmask = mask ? opt_out(n, out, 3) : NULL;
    return LAUNCH(cu_attention_grad((int)in[1]->dtype, &sh, in[0]->data, in[1]->data, in[2]->data, in[3]->data,
                                    in[4]->data, in[5]->data, dq ? dq->data : NULL, dk ? dk->data : NULL,
                                    dv ? dv->data : NULL, dmask ? dmask->data : NULL, c->stream));
}

const cuda_op vp_cuda_ops_attention[] = {
    {"Attention", "vplan", op_attention},
    {"AttentionGrad", "vplan", op_attention_grad},
    {NULL, NULL, NULL},
};
