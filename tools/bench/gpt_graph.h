/* A GPT-style decoder built directly in the IR, the way torch.onnx exports one
 * (LayerNormalization, MatMul + Add, Split, Reshape/Transpose heads, scaled masked
 * Softmax, GELU written with Erf), at any depth and width, with no weight data: enough
 * to plan and to count memory at sizes whose weights would not fit in the repository.
 *
 * Two styles of the same graph:
 *
 * - plain: every Reshape's target shape and every literal is a constant value, so the
 *   graph is what shape inference leaves of an export once it has folded it (about 31
 *   nodes a layer);
 * - exporter: what torch.onnx writes for the module exported with a dynamic batch and
 *   sequence, as models/gpt/model.onnx (a torch 1.13 export of a small model of this
 *   shape) shows: every literal is a Constant node, and every Reshape's target shape is
 *   computed at run time, Shape -> Gather (a Constant index) -> Unsqueeze (a Constant
 *   axes input, opset 13+) -> Concat, one Shape per size taken.  Beyond that file, which
 *   keeps head_dim as a literal, head_dim = C // n_head is computed at run time as
 *   torch's integer floor_divide writes it (Div, then the Less/Xor/Equal/Not/And/Where
 *   fix-up for negative operands), and the attention scale as 1 / sqrt(q.size(-1))
 *   (Shape -> Gather -> Cast -> Sqrt -> Div).  That is 94 more nodes a layer (125 in
 *   all), every one of which folds.  (That file also has a Transpose of each Linear
 *   weight, which does not fold; neither style has it.)
 *
 * After inference both styles have the same unfolded nodes, in the same order, with
 * the same shapes and constant data: only the folded shape arithmetic differs. */
#ifndef VP_GPT_GRAPH_H
#define VP_GPT_GRAPH_H

#include "ir/ir.h"

typedef struct gpt_config {
    int layers, hidden, heads, seq, batch, vocab;
} gpt_config;

/* The shape arithmetic is a build option beside gpt_config rather than a field of it,
 * so that positional initialisers of gpt_config elsewhere stay complete under
 * -Wmissing-field-initializers. */
typedef enum gpt_style {
    GPT_STYLE_PLAIN = 0, /* constant Reshape shapes and literals */
    GPT_STYLE_EXPORTER,  /* torch.onnx with dynamic axes: shape arithmetic from Shape */
} gpt_style;

/* Builds the forward graph in that style as a loader returns a model: nodes linked,
 * parameters and the input shaped, nothing else inferred or folded (vp_infer's job).
 * Output "logits" [batch, seq, vocab]. */
vp_status gpt_graph_build_raw(const gpt_config *c, gpt_style style, vp_graph **out, vp_error *err);

/* Builds and shape-infers the plain forward graph; output "logits" [batch, seq, vocab]. */
vp_status gpt_graph_build(const gpt_config *c, vp_graph **out, vp_error *err);

/* Saved activations of layer 1 (a middle layer): every forward value of /blocks.1/ the
 * plan counts as an activation (live when the backward starts); with print, one table
 * row per value in units of sbh4 bytes.  (bench_planner, bench_tp) */
struct vp_plan;
int64_t gpt_saved_of_layer(const struct vp_plan *p, const vp_graph *g, int print, double sbh4);

#endif
