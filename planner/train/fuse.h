/* Fusion of the patterns exporters write for one op, before autodiff.
 *
 * torch.onnx writes GELU as Div/Erf/Add/Mul/Mul (or its tanh form as Mul/Add/Tanh
 * chains) and LayerNorm below opset 17 as ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div
 * (then Mul/Add when affine).  Differentiated piece by piece, each piece keeps its
 * inputs for the backward: four or five tensors of the hidden size per GELU where one
 * suffices.  vp_fuse replaces each pattern by one op whose gradient op reads only what
 * it needs, as ONNX Runtime's GeluFusion, FastGeluFusion and LayerNormFusion do:
 *
 *   x * 0.5 * (1 + erf(x / sqrt 2))                       -> com.microsoft.Gelu(x)
 *   x * 0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))  -> com.microsoft.FastGelu(x)
 *     (or BLOOM's factored (sqrt(2/pi) x) * (1 + 0.044715 x^2) inside the tanh)
 *   (x - mean) / sqrt(var + eps) [* w [+ b]], over a suffix of axes
 *                                                         -> LayerNormalization(x, w|ones, [b])
 *   x / sqrt(mean(x^2) + eps) [* w], over a suffix of axes (RMSNorm: x^2 as Pow or Mul, the
 *   division as Div or Mul by Reciprocal)                -> com.microsoft.SimplifiedLayerNormalization(x, w|ones)
 *   MatMul(A, Transpose(W)), W a matrix                    -> com.microsoft.FusedMatMul(A, W, transB=1)
 *
 * A pattern is rewritten only when every condition holds: each constant has the
 * expected value (within float rounding), each intermediate value has exactly the one
 * consumer the pattern gives it and is no graph output, the reductions are over the
 * last axes with keepdims, scale and bias have the normalised axes' shape, and every
 * value has x's float dtype and the result x's shape.  Anything else is left alone.
 *
 * The fused node takes the place of the pattern's last node and the name of its first,
 * and produces the pattern's result value (same id, name, shape), so every consumer
 * and graph output is untouched.  Bias adds after MatMul are not fused: see fuse.c. */
#ifndef VP_FUSE_H
#define VP_FUSE_H

#include "ir/ir.h"

typedef struct vp_fuse_counts {
    int gelu;       /* erf form -> com.microsoft.Gelu */
    int fast_gelu;  /* tanh form -> com.microsoft.FastGelu */
    int layer_norm; /* decomposed LayerNorm -> LayerNormalization */
    int matmul_t;   /* MatMul(A, Transpose(W)) -> com.microsoft.FusedMatMul(A, W, transB=1) */
    int swish;      /* Mul(x, Sigmoid(x)), SiLU -> Swish(x) (its backward keeps x and y, not the sigmoid) */
    int rms_norm;   /* decomposed RMSNorm -> SimplifiedLayerNormalization (its backward keeps x, not x / rms) */
    int gather_rows; /* GatherElements over indices repeating along leading axes -> Gather of a row (gather_rows.h) */
    int removed;    /* nodes the fused ones replaced */
} vp_fuse_counts;

/* Fuses every pattern in an inferred graph, in place; counts what it did. */
vp_status vp_fuse(vp_graph *g, vp_fuse_counts *counts, vp_error *err);

#endif
