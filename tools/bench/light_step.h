/* The training step of one of ONNX's light/ model-zoo graphs, for benchmarks: symbolic
 * dims bound to 1, the ConstantOfShape weights promoted to parameters, cross-entropy on
 * the final Softmax's input (mse on the output of a graph without one), AdamW. */
#ifndef VP_LIGHT_STEP_H
#define VP_LIGHT_STEP_H

#include "ir/ir.h"
#include "train/training.h"

/* *used_mse is set when the graph has no Softmax and mse was used. */
vp_status light_step_build(const char *path, vp_graph **g, vp_training *t, int *used_mse, vp_error *err);

#endif
