/* MaxPool(Relu(X)) differentiated from a one-byte argmax and the pooled output, so the
 * Relu output is not kept for the backward (fuse_pool_grad.c says how and when). */
#ifndef VP_FUSE_POOL_GRAD_H
#define VP_FUSE_POOL_GRAD_H

#include "ir/ir.h"

/* Rewrites every match in a training graph after autodiff; *n_fused counts them. */
vp_status vp_fuse_pool_grad(vp_graph *g, int *n_fused, vp_error *err);

#endif
