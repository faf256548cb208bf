/* Constant weights made parameters.
 *
 * ONNX's "light" test models replace every float initializer by a ConstantOfShape
 * node, so a training step built from them finds nothing to train.  This pass undoes
 * that for the weights: a float ConstantOfShape output that feeds a weight input of
 * Conv (W, B), Gemm (B, C), MatMul (B) or BatchNormalization (scale, B, mean, var)
 * becomes an initializer holding the node's value at every element, and the node is
 * left folded, with no output.  The graph must be inferred (dtypes and shapes known);
 * training then sees the values as parameters (BatchNormalization's mean and variance
 * as running statistics). */
#ifndef VP_PROMOTE_H
#define VP_PROMOTE_H

#include "ir/ir.h"

/* Promotes every such value; VP_OK when none is found. */
vp_status vp_promote_constant_weights(vp_graph *g, vp_error *err);

#endif
