/* The independent plan verifier.  It re-derives every buffer's lifetime from the steps
 * alone (who writes it first, who reads it last, what must survive the step) without
 * the planner's liveness code, then proves that no two buffers live at the same step
 * share a byte, that everything fits in the arena, and that nothing is read before it
 * is written.  Within an alias group it follows the versions written into the shared
 * storage (a view adds none, an in-place op or an update adds one): each is read for
 * the last time no later than the step that writes the next, only ops that allow it
 * write over their own input, and nothing writes over an input or a constant.  A step's
 * workspace (memory/workspace.h) is live during that step only, serves no other step,
 * shares storage with nothing, and no node reads or writes it as a tensor.  A
 * parameter's gradient (category gradients) that is no output is read by some step
 * after it is written: a plan whose update was dropped is refused, not run with that
 * parameter silently frozen. */
#ifndef VP_VERIFY_H
#define VP_VERIFY_H

#include "memory/plan.h"

typedef struct vp_verify_report {
    int n_buffers, n_groups, n_steps;
    int64_t max_live_bytes; /* re-derived lower bound */
} vp_verify_report;

vp_status vp_plan_verify(const vp_plan *p, vp_verify_report *rep, vp_error *err);

#endif
