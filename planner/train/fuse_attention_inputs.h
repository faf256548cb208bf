/* The fused attention's inputs as their producers wrote them (fuse_attention_inputs.c). */
#ifndef VP_FUSE_ATTENTION_INPUTS_H
#define VP_FUSE_ATTENTION_INPUTS_H

#include "ir/ir.h"

/* Drops the key/value repeat before every vplan.Attention that reads one (*n_fused
 * counts those attentions) and the head transposes of Q, K and V (*n_read counts the
 * inputs read in place), in place. */
vp_status vp_fuse_attention_inputs(vp_graph *g, int *n_fused, int *n_read, vp_error *err);

#endif
