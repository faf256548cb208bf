/* The attention fusion: the exporters' decomposed attention core as one vplan.Attention.
 *
 * In: an inferred forward graph whose trainable parameters are flagged (VP_VAL_PARAM),
 * before the loss and autodiff.  Out: the same graph with every attention core that
 * torch.onnx writes (opsets 13 to 17)
 *
 *     S = MatMul(Q, Transpose(K))        Q [B,H,S,D], K^T [B,H,D,T]
 *     S = Mul(S, c) | Div(S, c)          c a scalar constant           (optional)
 *     S = Mul(Tanh(Div(S, t)), t)        t > 0 a scalar constant: Gemma 2's soft-
 *                                        capping, Attention's softcap  (optional)
 *     S = Add(S, M)                      M an additive mask, or two:
 *     S = Add(Add(S, M1), M2)            (T5: a trained position bias, then a mask), or
 *     S = Where(C, S, f) | Where(C, f, S)  C bool, f a scalar constant  (optional)
 *     S = Max(S, c)                      c <= -1e30 (XGLM's clamp at torch.finfo.min),
 *                                        where every row keeps a key   (optional)
 *     P = Softmax(S, axis=-1)            (then a Cast to its own dtype: Gemma 2, XGLM)
 *     P = Dropout(P, r, true)            a training one of ours (train/train_mode.c),
 *                                        0 < r < 1: Attention's dropout  (optional)
 *     Y = MatMul(P, V)                   V [B,H,T,Dv]
 *
 * (attention written through rank-3 batched products, as BLOOM's, is put in this form
 * first: attention_rank3.h), and the form torch 2.x's dynamo exporter gives
 * scaled_dot_product_attention (opset 18 on):
 * Q and K^T each scaled by sqrt(scale) before their product (Mul(Q, c1), Mul(K^T, c2):
 * the scale is c1 * c2), K^T as Reshape(Transpose(Reshape(K, [B*H,T,D]), [0,2,1]),
 * [B,H,D,T]), and P guarded as Where(IsNaN(P), 0, P) for rows masked whole -- absorbed
 * as it is where no row can be (no mask, or a constant one keeping a key in every row),
 * else by Attention's zero_masked_rows (a row -inf everywhere gives 0s, as the guard
 * makes them) --, GPT-Neo's
 * Add(Where(C, S, f), M) (the Where's mask, then M added: both masks), and ONNX's
 * Attention of opset 23 as planner/ir/attention_op.c expands it, its P times a constant
 * of ones (whether each row keeps a key, under a mask that keeps one in every row), or
 * computed from the Where's own condition (ReduceMax(Cast(C))): the fill then -inf and
 * zero_masked_rows set, so a row C keeps no key of gives 0s as the expansion's does --
 *
 * replaced by Y, LSE = Attention(Q, K, V, [mask]) at the last MatMul's place, Y keeping
 * its value id and name.  K comes from the Transpose's input with the last two axes
 * swapped back (the Transpose's perm is changed, or it goes when that leaves the
 * identity); a Where becomes the additive mask Where(C, 0, f) (or (C, f, 0)) of C's
 * shape, a constant when C is one.  With detect_causal a constant mask of shape
 * [S, T] (after leading 1s, or the same for every batch) that is 0 on and below the
 * diagonal and -inf above becomes causal=1 and no mask, so the kernels skip the masked
 * half.  -inf qualifies, and so does any value at most -1e30, such as the float32
 * lowest that Hugging Face's masks hold (torch.finfo.min): a score plus such a value
 * has probability exactly 0 against any row that keeps its diagonal, as under -inf,
 * unless the scores themselves reach 1e30; -1e4 style masks stay masks.  A mask computed from a frozen
 * buffer (torch.onnx's Slice, Equal, Cast of a registered causal_mask) is such a
 * constant: the training builder folds it first (train/fold_frozen.h).  A constant
 * mask of zeros (a padding mask with no padding, as Hugging Face builds one per layer
 * when no attention_mask is given) adds nothing and goes; constant masks with the same
 * bits are read as one (each layer folds its own copy, batch x seq x seq each: 39 MiB
 * of wav2vec2's step at 4 x 799 positions).  Of two masks, each may go so (T5's decoder:
 * its causal mask becomes causal=1); two that stay are added once per pair, the sum read
 * by every core that adds the same two.  The kernels take any other mask as given, a
 * mask computed from a parameter too (T5's relative position bias): AttentionGrad then
 * writes its gradient as well.
 *
 * Keeps true: the fused graph computes what the decomposed one did (the same
 * arithmetic up to rounding: scale * (QK^T) + mask, softmax over the last axis).
 * Anything that does not match every condition is left alone: ranks other than 4,
 * batch or head axes that broadcast, a softmax over another axis, an intermediate
 * (S, P) read by another node or a graph output, a scale that is not a scalar
 * constant, a mask that would grow the scores' shape, mixed dtypes. */
#ifndef VP_FUSE_ATTENTION_H
#define VP_FUSE_ATTENTION_H

#include "ir/ir.h"

typedef struct vp_fuse_attention_opts {
    int detect_causal; /* a constant 0 / -inf causal mask becomes causal=1 */
} vp_fuse_attention_opts;

/* Fuses every attention core of g in place; *n_fused receives how many. */
vp_status vp_fuse_attention(vp_graph *g, const vp_fuse_attention_opts *o, int *n_fused, vp_error *err);

#endif
