/* QDQ export of a QAT-trained model: the user's model file (its trained weights already
 * written by vp_onnx_save_initializers) rewritten with QuantizeLinear/DequantizeLinear
 * pairs where the training step fake-quantised, so ONNX Runtime (or TensorRT) runs it
 * as an int8 model.
 *
 * What the rewrite does, per quantised value:
 *   - a weight (an initializer): stored as int8 (quantised as FakeQuant did, so its
 *     dequantised values are the fake-quantised ones bit for bit) behind a
 *     DequantizeLinear, per channel (the axis attribute) or per tensor;
 *   - an activation: QuantizeLinear then DequantizeLinear right after its producer,
 *     uint8 with a zero point (affine) or int8 with zero point 0 (symmetric);
 *   - only the readers that read it quantised in training are rewired (a weight read
 *     both ways, such as a tied embedding, keeps its float copy for the others);
 *     through a Transpose too, for a MatMul our fusion read as FusedMatMul(transB);
 *   - the bias of a Conv or Gemm whose input and weight are quantised: int32 with scale
 *     s_input * s_weight (per output channel) and zero point 0, behind a DequantizeLinear.
 * Requires a default-domain opset of 13 or later (per-axis QuantizeLinear). */
#ifndef VP_ONNX_QDQ_H
#define VP_ONNX_QDQ_H

#include "ir/ir.h"

typedef struct vp_qdq_point {
    const char *value;          /* the quantised value's name in the model */
    int weight;                 /* an initializer, stored int8 with data below */
    int axis;                   /* per-channel axis, -1 per tensor */
    int64_t n;                  /* elements of scale and zero_point (1 per tensor) */
    const float *scale, *zero_point;
    int qmin, qmax;             /* -128..127 (int8) or 0..255 (uint8) */
    vp_tensor data;             /* weight: its trained float32 values */
    int n_readers;
    const char *const *readers; /* output-0 names of the nodes that read it quantised */
} vp_qdq_point;

typedef struct vp_qdq_counts {
    int weights, activations, biases, rewired;
} vp_qdq_counts;

/* Rewrites the model at path in place (see above).  Fails naming the value or node. */
vp_status vp_onnx_qdq_rewrite(const char *path, const vp_qdq_point *pts, int n, vp_qdq_counts *counts, vp_error *err);

#endif
