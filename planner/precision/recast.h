/* Weight copies cast again for the backward (recast.c). */
#ifndef VP_RECAST_H
#define VP_RECAST_H

#include "ir/ir.h"

struct vp_training;

/* Gives every backward reader of a forward Cast of a weight (a trainable parameter or
 * an initializer) its own Cast from the weight, placed right before its first reader;
 * *n_recast counts the weights.  g is a built training step; t its carries. */
vp_status vp_recast_weights(vp_graph *g, const struct vp_training *t, int *n_recast, vp_error *err);

#endif
