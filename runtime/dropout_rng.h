/* The masks of the Dropouts our training steps draw (attribute vplan_step: planner's
 * train/train_mode.c) and of the fused Attention's dropout, on the CPU and the GPU alike.
 *
 * In: the node's seed and the step count (their key, vp_dropout_key), an element's
 * index in the whole tensor (every rank's part of it under tensor parallelism), and the
 * threshold of the drop ratio.  Out: whether the element is kept.  Keeps true: a function of those
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

/* splitmix64's finaliser: a bijection of 64 bits that moves every bit. */
VP_DROPOUT_FN uint64_t vp_dropout_mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The key of a node's masks at a step: distinct for every (seed, step) with the step
 * under 2^32 (the mix is a bijection), so no two nodes or steps share a mask but by a
 * 2^-64 chance of the keys' streams overlapping. */
VP_DROPOUT_FN uint64_t vp_dropout_key(uint32_t seed, int64_t step) {
    return vp_dropout_mix((((uint64_t)seed << 32) ^ (uint64_t)step) + 0x9e3779b97f4a7c15ull);
}

/* Element `index` under `key` stays where its 24 bits reach the threshold: with
 * probability 1 - ratio to within 2^-24 (splitmix64's stream at the index). */
VP_DROPOUT_FN int vp_dropout_keeps(uint64_t key, uint64_t index, uint32_t threshold) {
    return (uint32_t)(vp_dropout_mix(key + (index + 1) * 0x9e3779b97f4a7c15ull) >> 40) >= threshold;
}

/* Where local element `index` of one rank's part lies in the whole tensor: the parts
 * are `ranks` chunks of `chunk` elements in each outer row (vplan_axis splits). */
VP_DROPOUT_FN uint64_t vp_dropout_global_index(uint64_t index, uint64_t chunk, int ranks, int rank) {
    if (ranks <= 1 || !chunk) return index;
    return index / chunk * chunk * (uint64_t)ranks + (uint64_t)rank * chunk + index % chunk;
}

#endif
