/* Attention written through rank-3 batched products ([B*H, S, T] scores, as Hugging
 * Face's BLOOM writes baddbmm and bmm) put in the rank-4 form [B, H, S, T] that the
 * attention fusion (fuse_attention.h) takes.  attention_rank3.c says what it matches. */
#ifndef VP_ATTENTION_RANK3_H
#define VP_ATTENTION_RANK3_H

#include "ir/ir.h"

/* Rewrites every match in g; *n_rewritten counts them. */
vp_status vp_attention_rank3(vp_graph *g, int *n_rewritten, vp_error *err);

#endif
