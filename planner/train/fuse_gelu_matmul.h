/* GELU and the product that reads it, as one vplan.GeluMatMul (fuse_gelu_matmul.c). */
#ifndef VP_FUSE_GELU_MATMUL_H
#define VP_FUSE_GELU_MATMUL_H

#include "ir/ir.h"

/* Fuses every match in an inferred forward graph, in place; *n_fused counts them. */
vp_status vp_fuse_gelu_matmul(vp_graph *g, int *n_fused, vp_error *err);

#endif
