/* Pictures of a plan: the DOT graph (Graphviz) and the memory timeline (SVG). */
#ifndef VP_PLAN_ARTIFACTS_H
#define VP_PLAN_ARTIFACTS_H

#include "memory/plan.h"

/* The plan as a Graphviz digraph: nodes coloured by phase (forward, loss, backward,
 * recompute, optimizer), edges labelled with tensor sizes, the peak step marked,
 * clusters per layer or block (from node name prefixes) so a real model stays readable. */
vp_status vp_dot_write(const vp_plan *p, const char *path, vp_error *err);

/* An SVG: live bytes over the steps stacked by category with the budget and arena
 * lines, and beneath it the arena layout (offset against lifetime, one rectangle per
 * buffer). */
vp_status vp_timeline_write(const vp_plan *p, const char *path, vp_error *err);

#endif
