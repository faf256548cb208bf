/* An activation and the product that reads it as one op: vplan.GeluMatMul and
 * vplan.SwiGluMatMul (fuse_act_matmul.c). */
#ifndef VP_FUSE_ACT_MATMUL_H
#define VP_FUSE_ACT_MATMUL_H

#include "ir/ir.h"

/* Fuses every match in an inferred forward graph, in place; *n_fused counts the GELUs,
 * *n_swiglu the gated MLPs, *n_geglu those of them with a GELU gate. */
vp_status vp_fuse_act_matmul(vp_graph *g, int *n_fused, int *n_swiglu, int *n_geglu, vp_error *err);

#endif
