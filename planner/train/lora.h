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
    int transposed;      /* W is [out, in] (read with transB=1) */
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
void vp_lora_result_free(vp_lora_result *r);

/* merged = W + scale * (B A in W's layout) for one adapter, all float32 row-major. */
void vp_lora_merge(const vp_lora_adapter *ad, int rank, double scale, const float *w, const float *a, const float *b,
                   float *merged);

#endif
