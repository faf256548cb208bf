/* GatherElements over indices that repeat along leading axes, as one Gather of a row.
 *
 * torch.gather(x, dim, idx.expand(...)) is how models index with a pattern shared by
 * every batch and head (DeBERTa's relative-position terms, c2p and p2c).  torch keeps
 * the expanded index a stride-0 view; in ONNX the Expand is a node, and folding makes
 * its output a constant of the gather's full shape in int64, per layer twice the float
 * data it indexes, held for the whole step (the backward's scatter reads it too).
 *
 * In: an inferred forward graph.  Out: each GatherElements whose indices are constant
 * data that repeats along its k >= 1 leading axes (k <= axis, each as long as the
 * data's axis) replaced by
 *     Reshape(data, [rows, M]) -> Gather(axis 1, offsets [Q]) -> Reshape(indices' shape)
 * where rows is the product of the k leading axes, M of the data's others, and offsets
 * are the flat positions, within one row, of one row of indices (Q of them).  The node's
 * output value is kept, so every reader is untouched.
 * Keeps: the result bit for bit (the same elements copied) and the gradient's: Gather's
 * (GatherGrad) adds dY into the same elements in the same order as GatherElementsGrad.
 * Indices out of range are left alone, for the kernel to report at run time. */
#ifndef VP_GATHER_ROWS_H
#define VP_GATHER_ROWS_H

#include "ir/ir.h"

/* Rewrites every such GatherElements in place; *n_rewritten counts them. */
vp_status vp_gather_rows(vp_graph *g, int *n_rewritten, vp_error *err);

#endif
