/* Grouped-query attention reading K and V at their own heads (fuse_gqa.c). */
#ifndef VP_FUSE_GQA_H
#define VP_FUSE_GQA_H

#include "ir/ir.h"

/* Drops the key/value repeat before every vplan.Attention that reads one, in place;
 * *n_fused counts the attentions. */
vp_status vp_fuse_gqa(vp_graph *g, int *n_fused, vp_error *err);

#endif
