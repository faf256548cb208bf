/* Planned execution: the whole step inside one allocation of exactly the plan's arena
 * size; every buffer at its planned offset; steps in the planned order.  What the plan
 * predicts is what this uses.  An offloaded plan's host block (optimizer-state offload)
 * is one more allocation in host memory: plain memory on the CPU backend, page-locked
 * on CUDA, whose copies and host update run through the backend's run_host_step. */
#ifndef VP_PLAN_EXEC_H
#define VP_PLAN_EXEC_H

#include "backend.h"
#include "memory/plan.h"

typedef struct vp_plan_exec vp_plan_exec;

/* Allocates the arena and writes the initial contents (parameters, state, constants). */
vp_status vp_plan_exec_new(const vp_plan *p, vp_backend *b, vp_plan_exec **out, vp_error *err);
void vp_plan_exec_free(vp_plan_exec *x);
vp_status vp_plan_exec_set_input(vp_plan_exec *x, const char *name, const vp_tensor *t, vp_error *err);
/* Runs one training step. */
vp_status vp_plan_exec_run(vp_plan_exec *x, vp_error *err);
/* Copies a value's buffer to the host (heap data); fails when it has no buffer. */
vp_status vp_plan_exec_get(vp_plan_exec *x, int value_id, vp_tensor *out, vp_error *err);
/* Bytes allocated on the device: the arena. */
int64_t vp_plan_exec_device_bytes(const vp_plan_exec *x);

#endif
