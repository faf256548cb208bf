/* ONNX's Attention (opset 23) expanded during shape inference into the ops ONNX defines
 * it by.
 *
 * In: a graph whose node `node` is an ai.onnx Attention, its Q, K and V (and attn_mask)
 * inferred, all of rank 4: [batch, heads, sequence, head size], or all of rank 3:
 * [batch, sequence, heads * head size] with attributes q_num_heads and kv_num_heads.
 * Out: the node replaced at its place in the order by: rank-3 inputs split into their
 * heads (Reshape, Transpose to rank 4), K and V repeated per query head
 * where they have fewer heads (grouped-query attention: Unsqueeze, Expand, Reshape),
 * Transpose of K, MatMul, Mul by the scale (attribute `scale`, else 1/sqrt(head size)),
 * softcap c > 0 as c * Tanh(scores / c) (Gemma 2's soft-capping, before the mask), the mask (is_causal as a constant lower-triangular boolean mask, joined with a boolean
 * attn_mask, through Where with the dtype's lowest value; a float attn_mask added),
 * Softmax over the last axis, zeroed on rows a boolean mask keeps no key of (as ONNX
 * defines them: no NaN), MatMul with V (then the heads merged back: Transpose, Reshape,
 * for rank-3 inputs); each new
 * node inferred as it is made, Y kept (its producer changes).
 * Keeps true: Y is what ONNX's Attention computes, so autodiff differentiates it through
 * the ops' own rules, and the fusion pass may find the attention core in it like any
 * exporter's.  Refused with VP_ERR_UNSUPPORTED, naming the node: past_key/past_value and
 * the present and qk outputs (a KV cache: inference, not training); with VP_ERR_INVALID:
 * query heads not a multiple of the K/V heads, rank-3 head counts that do not divide the
 * hidden sizes.
 * On failure the graph is as it was.
 *
 * torch 2.x's exporter writes scaled_dot_product_attention as this op from opset 23. */
#ifndef VP_ATTENTION_OP_H
#define VP_ATTENTION_OP_H

#include "ir/ir.h"

/* Whether n is an ai.onnx Attention. */
int vp_attention_op_is(const vp_node *n);

/* Expands node `node`; *n_new is the count of nodes now standing where it stood. */
vp_status vp_attention_op_expand(vp_graph *g, int node, int *n_new, vp_error *err);

#endif
