/* train --save OUT --qdq: the QAT-trained model as a QDQ model (codegen/onnx_qdq.h). */
#ifndef VP_CLI_QDQ_H
#define VP_CLI_QDQ_H

#include "exec.h"
#include "train/training.h"

/* Runs one more step on the fed batch without carrying its updates (the forward with the
 * trained weights and the observers' ranges), then rewrites dst (the model with its
 * trained weights, already written) with the scales and zero points that forward's
 * fake quantisation used.  *ref (may be NULL) gets that forward's value ref_value (the
 * model's output: what the QDQ model should compute, within a quantisation step). */
vp_status cli_qdq_save(const char *dst, vp_exec *x, const vp_graph *g, int ref_value, vp_tensor *ref, vp_error *err);

#endif
