/* A GPT-style decoder built directly in the IR, the way torch.onnx exports one
 * (LayerNormalization, MatMul + Add, Split, Reshape/Transpose heads, scaled masked
 * Softmax, GELU written with Erf), at any depth and width, with no weight data: enough
 * to plan and to count memory at sizes whose weights would not fit in the repository. */
#ifndef VP_GPT_GRAPH_H
#define VP_GPT_GRAPH_H

#include "ir.h"

typedef struct gpt_config {
    int layers, hidden, heads, seq, batch, vocab;
} gpt_config;

/* Builds and shape-infers the forward graph; output "logits" [batch, seq, vocab]. */
vp_status gpt_graph_build(const gpt_config *c, vp_graph **out, vp_error *err);

#endif
