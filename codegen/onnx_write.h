/* Writing a graph from the IR as an ONNX model: the training step (forward, loss,
 * backward, optimizer update) as one plain ModelProto that loads back here and runs
 * with the same results, bit for bit.
 *
 * What the file holds:
 *   - nodes: every node that was not folded, in the graph's (topological) order.
 *     Outputs of folded nodes, constants and frozen weights are written as Constant
 *     nodes when they are float (so a reader does not take them for parameters) and as
 *     initializers otherwise.
 *   - initializers: the parameters, the optimizer state (zero at the first step), the
 *     running statistics, and integer data (shapes, axes, indices).  Written without a
 *     training step (opts->training NULL), the graph's initializers stay initializers.
 *   - graph inputs: the fed inputs, with the labels or target the loss added; shapes
 *     are concrete (symbolic dims were bound before the step was built).
 *   - graph outputs: the model's own outputs, the loss, then each updated parameter and
 *     state value (SSA: the node writes w' beside w), or each gradient when the step was
 *     built without an optimizer.
 *   - value_info: dtype and shape of every intermediate value.
 *   - opset imports: "" at the opset the nodes use, com.microsoft 1 for ONNX Runtime's
 *     gradient ops, vplan 1 for our optimizer updates.
 *   - metadata_props: "vplan.loss" (the loss value), "vplan.carry" (one "from\tto" line
 *     per value that takes the updated value's contents after a step), "vplan.gradients"
 *     (one "param\tgradient" line per parameter): what a runner needs to loop steps.
 *
 * ONNX Runtime knows every op here except the vplan ones (SGD, Momentum, Adam, ours,
 * documented in planner/ops/update.c); write with no optimizer (training == NULL or a
 * step built with no_optimizer) for a graph that is standard ONNX plus com.microsoft.
 *
 * ONNX imports one version per domain, so every default-domain node must be at the
 * same opset; a model below opset 13 (whose loss and gradient nodes are built at 13)
 * is refused with a message saying so rather than written with changed meanings. */
#ifndef VP_ONNX_WRITE_H
#define VP_ONNX_WRITE_H

#include "ir/ir.h"
#include "train/training.h"

typedef struct vp_onnx_write_opts {
    const vp_training *training; /* the step's loss, gradients and carry pairs; may be NULL */
    const char *doc_string;      /* written as the model's doc_string (the command line); may be NULL */
} vp_onnx_write_opts;

/* Writes g as an ONNX model at path.  o may be NULL.  Fails naming the file and the
 * reason (a value nothing defines, an attribute ONNX cannot hold, mixed opsets, a model
 * over protobuf's 2 GB limit, an I/O error). */
vp_status vp_onnx_write_graph(const vp_graph *g, const char *path, const vp_onnx_write_opts *o, vp_error *err);

#endif
