/* The attention family's CUDA ops: vplan.Attention and vplan.AttentionGrad, float32
 * (cu_attention.cu); other dtypes are refused and run on the CPU reference. */
#include <math.h>

#include "cu_attention.h"
#include "cuda_internal.h"

static void shape_of(const vp_node *n, const vp_tensor *q, const vp_tensor *k, const vp_tensor *v,
                     const vp_tensor *mask, cu_attention_shape *s) {
    s->B = q->dims[0];
    s->H = q->dims[1];
    s->S = q->dims[2];
    s->D = q->dims[3];
    s->T = k->dims[2];
    s->Dv = v->dims[3];
    s->scale = vp_attr_float(n, "scale", s->D ? (float)(1.0 / sqrt((double)s->D)) : 1.0f);
    s->causal = vp_attr_int(n, "causal", 0) != 0;
    s->y_bshd = vp_attr_int(n, "y_bshd", 0) != 0;
    s->mask = fptr(mask);
    int64_t full[4] = {s->B, s->H, s->S, s->T};
    if (mask) broadcast_strides(mask, 4, full, s->mask_strides);
    else s->mask_strides[0] = s->mask_strides[1] = s->mask_strides[2] = s->mask_strides[3] = 0;
}

static vp_status op_attention(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                              vp_error *err) {
    const vp_tensor *mask = opt_in(n, in, 3);
    vp_status s = VP_OK;
    for (int k = 0; k < 3 && !s; k++) s = vp_cuda_need_f32(n, in[k], k, err);
    if (!s && mask) s = vp_cuda_need_f32(n, mask, 3, err);
    if (s) return s;
    cu_attention_shape sh;
    shape_of(n, in[0], in[1], in[2], mask, &sh);
    return LAUNCH(cu_attention(&sh, in[0]->data, in[1]->data, in[2]->data, fptr(out[0]), fptr(opt_out(n, out, 1)),
                               c->stream));
}

static vp_status op_attention_grad(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                   vp_error *err) {
    const vp_tensor *mask = opt_in(n, in, 6);
    vp_status s = VP_OK;
    for (int k = 0; k < 6 && !s; k++) s = vp_cuda_need_f32(n, in[k], k, err);
    if (!s && mask) s = vp_cuda_need_f32(n, mask, 6, err);
    if (s) return s;
    cu_attention_shape sh;
    shape_of(n, in[1], in[2], in[3], mask, &sh);
    return LAUNCH(cu_attention_grad(&sh, in[0]->data, in[1]->data, in[2]->data, in[3]->data, in[4]->data, in[5]->data,
                                    fptr(out[0]), fptr(opt_out(n, out, 1)), fptr(opt_out(n, out, 2)), c->stream));
}

const cuda_op vp_cuda_ops_attention[] = {
    {"Attention", "vplan", op_attention},
    {"AttentionGrad", "vplan", op_attention_grad},
    {NULL, NULL, NULL},
};
