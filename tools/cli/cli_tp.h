/* Tensor parallelism as the commands see it after the steps: a weight each rank holds a
 * slice of (planner/parallel), made whole again for a trained model (train --save,
 * run --save). */
#ifndef VP_CLI_TP_H
#define VP_CLI_TP_H

#include "comm.h"
#include "ir/ir.h"

/* Every rank's slice of *v gathered and put back where the split took it from (along
 * axis, of each of `blocks` blocks, rank r's chunk r): *v becomes the whole tensor (its
 * data heap, the slice's freed).  Collective: every rank calls it for the same weights in
 * the same order. */
vp_status cli_tp_gather(vp_comm *comm, int axis, int blocks, vp_tensor *v, vp_error *err);

#endif
