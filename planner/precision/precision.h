/* Mixed precision: which nodes of a training step compute in bfloat16 or float16.
 *
 * In: a forward graph with its loss built (before autodiff), every value inferred.
 * Out: the same graph with each float node assigned a precision (node->precision), a
 * Cast wherever a value reaches a node of another precision, and the outputs re-inferred
 * in their new dtype.  Autodiff then differentiates through the Casts, so every gradient
 * op runs in its forward op's precision and the gradient of a weight's low-precision
 * copy is cast back to float32 before it reaches the update (see README.md). */
#ifndef VP_PRECISION_H
#define VP_PRECISION_H

#include "ir/ir.h"

typedef enum vp_precision {
    VP_PRECISION_FP32 = 0, /* the default: the pass changes nothing */
    VP_PRECISION_BF16,
    VP_PRECISION_FP16,
} vp_precision;

/* "fp32", "bf16", "fp16"; names NULL for anything else. */
const char *vp_precision_name(vp_precision p);
/* The low dtype of p (VP_F32 for fp32). */
vp_dtype vp_precision_dtype(vp_precision p);

typedef struct vp_precision_counts {
    int low_nodes;     /* nodes computing in the low dtype */
    int fp32_nodes;    /* float nodes kept in (or promoted to) float32 */
    int casts;         /* Cast nodes inserted, weight copies included */
    int weight_copies; /* one per parameter a low-precision node reads */
    int64_t weight_copy_bytes;
} vp_precision_counts;

/* What the user asks for: the precision, and op names (comma-separated op_types, any
 * domain; NULL for none) moved to float32 or to the low dtype over the built-in lists.
 * The loss always stays float32. */
typedef struct vp_precision_opts {
    vp_precision precision;
    const char *fp32_ops, *low_ops;
} vp_precision_opts;

/* Fails (VP_ERR_USAGE) naming an op name that no registered op has, or one in both lists. */
vp_status vp_precision_check_ops(const vp_precision_opts *o, vp_error *err);

/* Assigns precisions and inserts Casts.  *first_loss_node (the loss builder's first
 * node id; may be NULL) is moved with the reordering the inserted Casts cause. */
vp_status vp_precision_apply(vp_graph *g, const vp_precision_opts *o, int *first_loss_node, vp_precision_counts *counts,
                             vp_error *err);

#endif
