/* The backward pass (and its recompute nodes) in a memory-aware order, for the schedule
 * (schedule.c).
 *
 * In: the graph, order[lo..hi) the segment's nodes in the builder's order (a valid
 * one), pos_of[node] each scheduled node's index in order (-1: optimizer or folded),
 * and whether the updates will be fused.  Out: order[lo..hi) rewritten in place.
 *
 * List scheduling that always runs, among the nodes whose inputs are ready, the one
 * that adds the fewest bytes (its outputs less the inputs it reads last), the builder's
 * order breaking ties.  The builder emits a node's whole backward before moving on, so
 * a branch whose gradient is only needed at a residual Add (a downsample convolution's)
 * holds its result across the other branch; here it waits until that result can be
 * consumed.  With fused updates a parameter's gradient counts as held only until its
 * update can run (after the last read of the weight it writes).  A weight's copy cast
 * again for the backward runs right before its first reader.
 *
 * Keeps true: the result is a topological order of the segment; a local choice can
 * raise the peak (it did on MobileNet-v2), so the new order is kept only where it holds
 * fewer bytes at once, by the same count, than the builder's. */
#ifndef VP_BACKWARD_ORDER_H
#define VP_BACKWARD_ORDER_H

#include "ir/ir.h"

/* VP_OK; VP_ERR_NOMEM; VP_ERR_RUNTIME when no node is ready (a cycle, stale
 * consumers): order is then left as it was. */
vp_status vp_order_backward(const vp_graph *g, int *order, int lo, int hi, const int *pos_of, int fused_update);

#endif
