/* ONNX's Col2Im (opset 18; torch's F.fold, which MobileViTv2 folds its patches back
 * with) expanded during shape inference into the ConvTranspose that computes it.
 *
 * In: a graph whose node `node` is an ai.onnx Col2Im: input X [N, C * K, L] inferred (K
 * the block's size, prod(block_shape)), image_shape and block_shape constant int64 of S
 * values (1 to 3 spatial axes), attributes dilations, pads and strides.
 * Out: the node replaced at its place in the order by X seen as [N, C * K, L_1 .. L_S]
 * (Reshape; L_d the block positions along spatial axis d, their product L) and a
 * ConvTranspose of that with group C and a constant one-hot weight [C * K, 1, block...]
 * (input channel c * K + k carries block offset k, row-major), Col2Im's strides,
 * dilations and pads, and the output_padding that makes the output image_shape exactly.
 * Each new node is inferred as it is made; Y keeps its value (its producer changes).
 * Keeps true: Y[n, c, p] is the sum of the entries of X whose block offset lands on p,
 * as Col2Im defines it: each product with the weight is x * 1 or x * 0 (a non-finite x
 * would spread NaN over its block's window, where Col2Im keeps it in place), so autodiff
 * differentiates it through ConvTranspose's own rule (the gradient is a Conv with the
 * same weight: im2col) and both backends run kernels they have.
 * Refused naming the node: image_shape or block_shape not constant, of different lengths
 * or of more than 3 values, X not [N, C * K, L] for those, an image smaller than one
 * block.  On failure the graph is as it was. */
#ifndef VP_COL2IM_OP_H
#define VP_COL2IM_OP_H

#include "ir/ir.h"

/* Whether n is an ai.onnx Col2Im. */
int vp_col2im_op_is(const vp_node *n);

/* Expands node `node`; *n_new is the count of nodes now standing where it stood. */
vp_status vp_col2im_op_expand(vp_graph *g, int node, int *n_new, vp_error *err);

#endif
