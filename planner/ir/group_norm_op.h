/* ONNX's GroupNormalization (opsets 18 and 21) expanded during shape inference into the
 * InstanceNormalization it is made of, as torch's exporters write GroupNorm before opset
 * 21.
 *
 * In: a graph whose node `node` is an ai.onnx GroupNormalization, X [N, C, ...], scale
 * and bias inferred.
 * Out: the node replaced at its place in the order by X seen as [N, num_groups, rest]
 * (Reshape), InstanceNormalization over that (epsilon kept), seen as X again; opset 18's
 * per-group scale and bias are the InstanceNormalization's own, opset 21's per-channel
 * ones a Mul and an Add over the channel axis after it, with a 16-bit X cast to float32
 * for the normalization (stash_type 1, the default) and back (float64 stays float64).  Each new
 * node is inferred as it is made; Y keeps its value (its producer changes).
 * Keeps true: Y is what ONNX's GroupNormalization computes, so autodiff differentiates
 * it through the ops' own rules and the CPU and CUDA backends run kernels they have.
 * Refused naming the node: X of rank under 2 or not float, channels not a multiple of
 * num_groups, scale or bias of another size than the opset says, a stash_type other
 * than float32.  On failure the graph is as it was. */
#ifndef VP_GROUP_NORM_OP_H
#define VP_GROUP_NORM_OP_H

#include "ir/ir.h"

/* Whether n is an ai.onnx GroupNormalization. */
int vp_group_norm_op_is(const vp_node *n);

/* Expands node `node`; *n_new is the count of nodes now standing where it stood. */
vp_status vp_group_norm_op_expand(vp_graph *g, int node, int *n_new, vp_error *err);

#endif
