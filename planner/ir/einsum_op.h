/* ONNX's Einsum expanded during shape inference into Transpose, Reshape, MatMul, Mul and
 * ReduceSum.
 *
 * In: a graph whose node `node` is an ai.onnx Einsum, its inputs inferred with known dims.
 * Out: the node replaced at its place in the order by, per operand, each label it repeats
 * reduced to its diagonal (times an identity, summed) and each label no other operand and
 * not the output names summed out; then the operands combined left to right, two at a
 * time: the labels both hold and something later reads lead as batch axes, the labels
 * only they hold are contracted by a MatMul (an elementwise Mul when there are none), the
 * rest become its rows and columns; the last result transposed into the output's order.
 * Each new node is inferred as it is made; the output keeps its value (its producer
 * changes).
 * Keeps true: the output is what ONNX's Einsum (numpy.einsum) computes, explicit and
 * implicit output, ellipsis broadcasting included, so autodiff differentiates it through
 * the ops' own rules and the fusion passes see products as any exporter writes them.
 * Refused naming the node: an equation that does not parse or does not match the inputs'
 * ranks, a label whose sizes disagree (neither 1), an output label no input has or one
 * named twice, unknown dims, inputs of different dtypes or of one MatMul cannot take.
 * On failure the graph is as it was. */
#ifndef VP_EINSUM_OP_H
#define VP_EINSUM_OP_H

#include "ir/ir.h"

/* Whether n is an ai.onnx Einsum. */
int vp_einsum_op_is(const vp_node *n);

/* Expands node `node`; *n_new is the count of nodes now standing where it stood. */
vp_status vp_einsum_op_expand(vp_graph *g, int node, int *n_new, vp_error *err);

#endif
