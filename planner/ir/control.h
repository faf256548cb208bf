/* Loop and If, expanded in place during shape inference.
 *
 * In: a graph whose node `node` is an ai.onnx Loop or If, every input of it inferred.
 * Out: the node replaced by ordinary nodes at its place in the order: a Loop by its body
 * once per iteration (loop-carried values chained, scan outputs stacked by Unsqueeze and
 * Concat), an If by the branch its condition picks; each new node inferred and folded as
 * it is made, the Loop's or If's output values kept (their producers change).
 * Keeps true: the expansion computes what ONNX's Loop and If compute, so the forward,
 * autodiff (through the body's own ops), plans and executors need nothing of their own.
 * Refused with VP_ERR_UNSUPPORTED, naming the node: a trip count or condition that is not
 * known ahead of time (it depends on the input data), a while-loop without a trip count,
 * nested control flow, an unrolling of more than a million nodes.  On failure the graph is
 * as it was. */
#ifndef VP_CONTROL_H
#define VP_CONTROL_H

#include "ir/ir.h"

/* Whether n is a node this pass expands (ai.onnx Loop or If). */
int vp_control_is(const vp_node *n);

/* Expands node `node`; *n_new is the count of nodes now standing where it stood. */
vp_status vp_control_expand(vp_graph *g, int node, int *n_new, vp_error *err);

#endif
