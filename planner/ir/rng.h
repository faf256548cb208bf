/* A small seeded generator (splitmix64) so every random tensor the tool draws is
 * reproducible from its seed on every machine. */
#ifndef VP_RNG_H
#define VP_RNG_H

#include <stdint.h>

typedef struct vp_rng {
    uint64_t state;
} vp_rng;

static inline uint64_t vp_rng_next(vp_rng *r) {
    uint64_t z = (r->state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1) with 53 random bits. */
static inline double vp_rng_uniform(vp_rng *r) { return (double)(vp_rng_next(r) >> 11) * (1.0 / 9007199254740992.0); }

#endif
