/* Cast fusion: a Cast whose input nothing else reads is folded into that input's
 * producer, which then stores the cast value itself.
 *
 * In: a built training step (forward, loss, backward, optimizer) after mixed precision
 * placement; its consumers linked.
 * Out: the same step with fewer Casts.  A producer P whose output k fed such a Cast
 * carries the attribute `vplan_cast` (VP_CAST_ATTR, ir/ir.h) (ints, triples: output index, the dtype the op
 * computes that output in, the dtype it stores) and its output k is the Cast's output:
 * P computes exactly what it computed before, then converts on store as Cast would
 * (round to nearest even to a narrower float, exact to a wider one).  Shape inference
 * applies the triples after the op's own shape function (ir/infer.c), so every later
 * pass (remat's clones, liveness, the plan, its loader) sees the stored dtype.
 *
 * Keeps true: every value the step reads afterwards has the bits it had; a fused
 * value was read by its Cast only (not a graph output, not carried, not the loss, not a
 * gradient), so nothing else needed the producer's own dtype. */
#ifndef VP_CAST_FUSE_H
#define VP_CAST_FUSE_H

#include "ir/ir.h"

struct vp_training;
struct vp_device_profile;

typedef struct vp_cast_fuse_counts {
    int casts_before; /* Cast nodes in the step before the pass */
    int fused;        /* of them folded into their producer */
    int64_t bytes;    /* bytes of the producers' own outputs no longer stored */
} vp_cast_fuse_counts;

/* Where the step will be planned, which the widenings are weighed against: device dev
 * (NULL, not known yet: h100's workspaces) with updates fused or not (both when dev is
 * NULL). */
typedef struct vp_cast_fuse_opts {
    const struct vp_device_profile *dev;
    int fused_update;
    int narrow_only; /* the narrowings alone */
} vp_cast_fuse_opts;

/* Folds every fusable Cast of g (t names the values that must keep their dtype): each
 * narrowing, and each widening that keeps the live bytes around it in the schedules
 * of o at or under their local maximum. */
vp_status vp_cast_fuse(vp_graph *g, const struct vp_training *t, const vp_cast_fuse_opts *o, vp_cast_fuse_counts *counts,
                       vp_error *err);

/* The most bytes live at one step of the schedules of o (the planner's order, buffers
 * and a GPU's product workspaces): peak[0], and peak[1] when o->dev is NULL (updates
 * last). */
vp_status vp_cast_fuse_peaks(vp_graph *g, const struct vp_training *t, const vp_cast_fuse_opts *o, int64_t peak[2],
                             vp_error *err);

#endif
