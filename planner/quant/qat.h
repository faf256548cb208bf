/* Quantisation-aware training: where fake quantisation goes in a training step.
 *
 * In: a forward graph, inferred, with its trainable set chosen and the attention cores
 * fused, before the loss (vp_training_build runs it there) and `vp_qat_opts`.
 * Out: a vplan.FakeQuant on every float input of Conv, ConvTranspose, Gemm, MatMul and
 * com.microsoft.FusedMatMul (not the bias) and on the residual input of each
 * skip-connection Add, the readers rewired to it; an observer per quantised value
 * (vplan.QuantObserver, its range carried between steps like optimizer state, then
 * vplan.QuantParams), or with `lsq` a learned scale.  See README.md. */
#ifndef VP_QUANT_QAT_H
#define VP_QUANT_QAT_H

#include "ir/ir.h"

struct vp_training;

typedef struct vp_qat_opts {
    int enabled;               /* --qat given */
    int per_tensor_weights;    /* weights per tensor (default: per output channel) */
    int symmetric_activations; /* activations int8 with zero point 0 (default: uint8 affine) */
    int lsq;                   /* learned scales (LSQ) instead of observed ranges */
    const char *exclude;       /* POSIX extended regex of node names left in float, or NULL */
    int64_t freeze_after;      /* observers keep their range after this many steps (0: never) */
} vp_qat_opts;

/* Parses "int8[:per-channel|per-tensor][:asym|sym][:lsq]"; an unknown scheme or variant
 * is a usage error naming it. */
vp_status vp_qat_parse(const char *arg, vp_qat_opts *o, vp_error *err);
/* "int8:per-channel:asym" and so on: the scheme as the plan records it. */
void vp_qat_name(const vp_qat_opts *o, char *buf, size_t len);

typedef struct vp_qat_counts {
    int nodes;        /* quantised nodes (Conv, Gemm, MatMul, ...) */
    int weights;      /* fake-quantised weights */
    int activations;  /* fake-quantised activations (residual inputs among them) */
    int residuals;    /* residual inputs of skip-connection Adds */
    int excluded;     /* nodes --qat-exclude left in float */
    int learned;      /* LSQ scale parameters */
    int masks;        /* straight-through masks kept as bytes (qat_mask.c) */
    int64_t mask_bytes;
    int64_t state_bytes; /* observer state (ranges, step counts) */
} vp_qat_counts;

/* Places fake quantisation (see above).  t gains the observers' carries and the LSQ
 * scales as trainable parameters.  Fails when nothing is left to quantise; *warning
 * (may be NULL, 512 bytes) tells of an --qat-exclude that matches no node. */
vp_status vp_qat_apply(vp_graph *g, const vp_qat_opts *o, struct vp_training *t, vp_qat_counts *counts, char *warning,
                       vp_error *err);

/* After the optimizer: a learned activation scale takes its observer's scale at the
 * first step (LSQ initialised from data, as torch's LearnableFakeQuantize's static
 * estimate); afterwards the optimizer moves it. */
vp_status vp_qat_finish(vp_graph *g, const vp_qat_opts *o, struct vp_training *t, vp_error *err);

/* After autodiff: a FakeQuant whose input nothing else in the backward reads keeps a
 * byte mask for its gradient instead of the input (qat_mask.c). */
vp_status vp_qat_masks(vp_graph *g, const vp_qat_opts *o, vp_qat_counts *counts, vp_error *err);

/* Whether value v is an LSQ scale the pass added (a parameter the model file does not
 * have: the QDQ export writes it as a scale, the weights' save skips it). */
int vp_qat_is_learned_scale(const vp_graph *g, int v);

/* Whether node n is a fake quantisation of the pass (DOT and the reports mark it). */
int vp_qat_is_fake_quant(const vp_node *n);

#endif
