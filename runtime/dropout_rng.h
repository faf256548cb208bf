/* The masks of the Dropouts our training steps draw (attribute vplan_step: planner's
 * train/train_mode.c) and of the fused Attention's dropout, on the CPU and the GPU alike.
 *
 * In: the node's 32-bit seed for this step (vp_dropout_seed), an element's index in the
 * whole tensor (every rank's part of it under tensor parallelism), and the threshold of
 * the drop ratio.  Out: whether the element is kept.  Keeps true: a function of those
 * alone, in integer arithmetic, so a recomputed Dropout, the fused attention's backward
 * and each rank's slice draw exactly the forward's mask, on either backend, and a fused
 * attention keeps the elements its decomposed Softmax, Dropout, MatMul kept.  A counter
 * hashed as splitmix64 draws it (a Dropout of ONNX's own, without the attribute, draws
 * numpy's MT19937 stream instead, as ONNX's reference does). */
#ifndef VP_DROPOUT_RNG_H
#define VP_DROPOUT_RNG_H

#include <stdint.h>

#if defined(__CUDACC__)
#define VP_DROPOUT_FN __host__ __device__ static inline
#else
#define VP_DROPOUT_FN static inline
#endif

/* The ratio as a threshold on 24 random bits: ratio * 2^24, exact in double. */
VP_DROPOUT_FN uint32_t vp_dropout_threshold(double ratio) {
    return ratio <= 0 ? 0u : ratio >= 1 ? 1u << 24 : (uint32_t)(ratio * 16777216.0);
}

/* Element `index` under `seed` stays where its 24 bits reach the threshold: with
 * probability 1 - ratio to within 2^-24. */
VP_DROPOUT_FN int vp_dropout_keeps(uint32_t seed, uint64_t index, uint32_t threshold) {
    uint64_t z = (uint64_t)seed * 0xd1b54a32d192ed03ull + (index + 1) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (uint32_t)(z >> 40) >= threshold;
}

/* Where local element `index` of one rank's part lies in the whole tensor: the parts
 * are `ranks` chunks of `chunk` elements in each outer row (vplan_axis splits). */
VP_DROPOUT_FN uint64_t vp_dropout_global_index(uint64_t index, uint64_t chunk, int ranks, int rank) {
    if (ranks <= 1 || !chunk) return index;
    return index / chunk * chunk * (uint64_t)ranks + (uint64_t)rank * chunk + index % chunk;
}

#endif
