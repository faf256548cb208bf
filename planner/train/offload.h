/* Optimizer-state offload (ZeRO-Offload, Ren et al. 2021): Adam's moments and step, the
 * float32 master weights and the update itself in host memory; each gradient streamed
 * out to the host as soon as it is final, each updated weight streamed back.
 *
 * In: a training step whose optimizer is Adam or AdamW (vp_optimizer_build's nodes).
 * Out: for each update Adam(W, G, M, V, T) -> W', M', V', T' the chain
 *
 *     Gh = Cast(G)                      device -> host   (phase OPTIMIZER)
 *     Adam(Wh, Gh, M, V, T) -> Wh', M', V', T'           on the host
 *     W' = Cast(Wh')                    host -> device
 *
 * where Wh is the host's master copy of W (state carried step to step, starting as W's
 * data), and the carries become Wh <- Wh', W <- W'.  The copies are Casts to the same
 * dtype, exact, so the step computes what it computed before, bit for bit.  Every host
 * value carries VP_VAL_HOST: the planner gives them the host block (VP_CAT_HOST), not
 * the arena, and the cost model charges the copies to the host link and the update to
 * host memory's bandwidth (planner/remat/cost.c).
 *
 * Keeps true: host and device values never share storage; the device holds no optimizer
 * state; the naive executor runs the step unchanged (its values are all host memory). */
#ifndef VP_OFFLOAD_H
#define VP_OFFLOAD_H

#include "train/training.h"

/* Moves every Adam update of t to the host; *moved gets how many, *state_bytes the
 * optimizer state's bytes (moments and steps) now on the host. */
vp_status vp_offload_apply(vp_graph *g, vp_training *t, int *moved, int64_t *state_bytes, vp_error *err);

#endif
