/* LoRA (Hu et al. 2021): low-rank adapters beside a model's frozen product weights.
 *
 * In: an inferred forward graph after vp_fuse, the rank r, alpha and a regex of weight
 * names.  Out: for each product Y = X op(W) whose weight W (a float matrix initializer,
 * the right operand of MatMul, FusedMatMul or Gemm) matches, two new trainable
 * initializers and
 *
 *     Y = X op(W) [+ bias]  +  (alpha / r) * (X op(A)) op(B)
 *
 * where the adapters are stored in W's own layout, so that merging is one product:
 *   W [out, in] read transposed (Gemm or FusedMatMul with transB=1, torch's Linear):
 *       A [r, in], B [out, r], and the merged weight is W + scale * B A;
 *   W [in, out] read as is (MatMul, Gemm with transB=0):
 *       A [in, r], B [r, out] (the transposes of the above), merged W + scale * A B.
 * An ungrouped Conv (1-D, 2-D or 3-D) with weight W [O, C, k...] gets
 *     Y = Conv(X, W) [+ bias]  +  (alpha / r) * Conv1x1(Conv(X, A), B)
 * with A [r, C, k...] a convolution like W's (its kernel, strides, pads, dilations) to
 * r channels and B [O, r, 1...] a 1x1 convolution back to the O output channels: the
 * factorisation PEFT's Conv2d LoRA uses.  Why: convolution is linear in its weight, and
 * Conv1x1(Conv(X, A), B) = Conv(X, B A) with (B A)[o, c, k...] = sum_j B[o, j] A[j, c, k...],
 * so the pair is exactly a rank-r update of W read as the [O, C k...] matrix of im2col
 * (in = C k..., out = O): r(in + out) parameters as for a Linear, merged W + scale B A
 * with A and B read flat, A's bound 1/sqrt(C k...) is the Conv's own fan-in, and the
 * adapter's activation is r channels at the output's resolution, not a full copy.  (A
 * 1x1 A with a kxk B would cost the same parameters but keep an r-channel map at the
 * input's resolution, before any stride.)  Grouped convolutions are left alone: the
 * product B A would mix the groups.
 * A starts uniform in +-1/sqrt(in) (torch's Linear initialisation, from a generator
 * seeded by the weight's name, so a rebuild gives the same adapters), B at zero, so the
 * adapted model starts as the base model.  Y keeps its value id and name.
 *
 * Keeps true: with adapters, vp_training_build trains the adapters alone: every other
 * parameter (the adapted weights, biases, norms, embeddings) is frozen, with no gradient
 * and no optimizer state.  r(in + out) parameters per adapted weight. */
#ifndef VP_LORA_H
#define VP_LORA_H

#include "ir/ir.h"

typedef struct vp_lora_opts {
    int rank;            /* r; 0: no adapters */
    double alpha;        /* the scale is alpha / r; 0: alpha = r */
    const char *regex;   /* POSIX extended regex of weight names to adapt; NULL: every product weight */
    const char *load;    /* an adapters file (vp_lora_save) to start from, or NULL */
} vp_lora_opts;

typedef struct vp_lora_adapter {
    int weight;          /* the adapted weight's value id */
    int a, b;            /* the adapters' value ids */
    int transposed;      /* W is [out, in] (read with transB=1, or a Conv's [O, C k...]) */
    int64_t in, out;
} vp_lora_adapter;

typedef struct vp_lora_result {
    int n;
    vp_lora_adapter *adapters; /* heap, freed with the training step */
    double scale;              /* alpha / r */
    int64_t params;            /* adapter elements: sum of r(in + out) */
} vp_lora_result;

/* Parses "r=8[,alpha=16][:REGEX]". */
vp_status vp_lora_parse(const char *arg, vp_lora_opts *out, vp_error *err);

/* Adds the adapters (loading their values from o->load when given). */
vp_status vp_lora_apply(vp_graph *g, const vp_lora_opts *o, vp_lora_result *r, vp_error *err);
int vp_lora_is_adapter(const vp_lora_result *r, int value);

/* After tensor parallelism's split (planner/parallel), which finds an adapter pair as
 * a column/row pair of its own (X A then H B, the base weight frozen and whole): A split
 * by its rank rows, B by its rank columns, an all-reduce after B, so each rank trains r/n
 * of the rank and their sum is the adapter, exactly.  Refused (VP_ERR_UNSUPPORTED,
 * naming the product): a split base weight (its adapters would need a split of their
 * own, and the replicated one's gradient an all-reduce: not built), and a pair split
 * otherwise than both along the rank. */
struct vp_tp_result;
vp_status vp_lora_check_split(const vp_graph *g, const vp_lora_result *r, const struct vp_tp_result *tp, vp_error *err);
void vp_lora_result_free(vp_lora_result *r);

/* merged = W + scale * (B A in W's layout) for one adapter, all float32 row-major (a
 * Conv's W, A and B read flat: [O, C k...], [r, C k...], [O, r]). */
void vp_lora_merge(const vp_lora_adapter *ad, int rank, double scale, const float *w, const float *a, const float *b,
                   float *merged);

#endif
