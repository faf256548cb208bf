/* What the fusion passes ask of a graph while matching a pattern (fuse_attention.c,
 * fuse_act_matmul.c, attention_rank3.c): one answer each, so the passes agree on what
 * an intermediate they may swallow is and what a constant is. */
#ifndef VP_PATTERN_H
#define VP_PATTERN_H

#include "ir/ir.h"

/* v's only reader, when v is an intermediate a match may swallow (one use, no graph
 * output); -1 otherwise. */
int vp_pattern_sole_reader(const vp_graph *g, int v);

/* Data fixed ahead of time: a constant or an initializer nobody trains (not a fed input). */
int vp_pattern_fixed_data(const vp_value *v);

/* v a float scalar fixed ahead of time: 1 and its value in *out (out may be NULL). */
int vp_pattern_fixed_scalar(const vp_graph *g, int v, double *out);

#endif
