/* Folding over frozen initializers, once the trainable set is known.
 *
 * In: the forward graph after the trainable set is chosen (parameters flagged
 * VP_VAL_PARAM, running statistics VP_VAL_STATE and paired in t->carry), before the
 * attention fusion.  Out: every node whose inputs are all data known ahead of time --
 * constants, folded values, integer initializers, and float initializers this step never
 * writes (frozen: not trained, not carried, not fed by the caller) -- is folded by the
 * constant folder (vp_fold_node, ir/infer.h): its CPU kernel computes its outputs now, they
 * become constants, and the node leaves the step.  So an exporter's mask arithmetic over
 * a registered buffer (torch.onnx's Slice, Equal, Cast of a causal_mask buffer) is a
 * constant when the attention fusion looks at it, and becomes causal=1.
 *
 * Keeps true: a folded output has the bits the step computed (the same kernel, on the
 * same data, which no step changes); nothing trained, carried or fed is folded into
 * anything; a fold never makes an output much larger than the data it reads (see
 * fold_frozen.c: the caps). */
#ifndef VP_FOLD_FROZEN_H
#define VP_FOLD_FROZEN_H

#include "train/training.h"

/* Folds g's nodes over frozen initializers in place; *n_folded receives how many. */
vp_status vp_fold_frozen(vp_graph *g, const vp_training *t, int *n_folded, vp_error *err);

#endif
