/* ONNX's RMSNormalization (opset 23) expanded during shape inference into the ops ONNX
 * defines it by.
 *
 * In: a graph whose node `node` is an ai.onnx RMSNormalization, X and scale inferred.
 * Out: the node replaced at its place in the order by X cast to the stash type (float32)
 * where it is narrower, X * X, ReduceMean over the axes from `axis` to the last, + epsilon,
 * Sqrt, X divided by it, cast back to X's dtype, times scale; each new node inferred as it
 * is made, Y kept (its producer changes).
 * Keeps true: Y is what ONNX's RMSNormalization computes, so autodiff differentiates it
 * through the ops' own rules.  Refused naming the node: a stash type other than float32,
 * an X that is not a float tensor.  On failure the graph is as it was. */
#ifndef VP_RMS_NORM_OP_H
#define VP_RMS_NORM_OP_H

#include "ir/ir.h"

/* Whether n is an ai.onnx RMSNormalization. */
int vp_rms_norm_op_is(const vp_node *n);

/* Expands node `node`; *n_new is the count of nodes now standing where it stood. */
vp_status vp_rms_norm_op_expand(vp_graph *g, int node, int *n_new, vp_error *err);

#endif
