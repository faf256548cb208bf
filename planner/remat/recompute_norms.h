/* Norm outputs recomputed for the backward (recompute_norms.c). */
#ifndef VP_RECOMPUTE_NORMS_H
#define VP_RECOMPUTE_NORMS_H

#include "train/training.h"

/* Gives every backward reader of a LayerNormalization's or RMSNorm's output (or of a
 * view or Cast of it) a second run of the norm from its input, where the backward keeps
 * that input for the norm's own gradient; *n_norms counts the norms.  g is a built
 * training step; t its carries, and where the second runs' values are recorded. */
vp_status vp_remat_norms(vp_graph *g, vp_training *t, int *n_norms, vp_error *err);

/* The step as it was before vp_remat_norms: every reader of a second run's value reads
 * the norm's own again, and the second runs are gone.  Checkpointing weighs this step
 * (it chooses what to recompute itself, a norm among the rest). */
vp_status vp_remat_norms_undo(vp_graph *g, const vp_training *t, vp_error *err);

#endif
