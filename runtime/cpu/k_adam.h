/* The Adam/AdamW update (vplan.Adam) of one range of elements: the one definition that
 * the CPU kernel (k_train_optim.c, vp_cpu_adam) and generated steps (codegen: the
 * node's hyperparameters compiled in, the loop compiled for the host's vector units)
 * both compile, so that their bits agree.
 *
 * In: the node's hyperparameters, the step's scalars (from the step count), the
 * tensors' data (an output may be its own input: the update is in place; NULL outputs
 * are not written).  Out: each element's new weight and moments.  Keeps true: every
 * element is the same operations in the same order (torch 1.13's single-tensor Adam,
 * see k_train_optim.c): fmaf, sqrtf and the divisions are correctly rounded whether a
 * compiler issues them one at a time, as library calls or in vector lanes, and no
 * element reads another, so neither the split nor the vector width changes a bit. */
#ifndef VP_K_ADAM_H
#define VP_K_ADAM_H

#include <math.h>
#include <stdint.h>

/* The optimizers' attributes, as k_train_optim.c reads them (vp_train_opt_hyper). */
typedef struct vp_opt_hyper {
    double lr, weight_decay, momentum, beta1, beta2, eps;
    int decoupled;
} vp_opt_hyper;

/* What one step of Adam derives from its count: 1 - lr * wd; lr / (1 - beta1^t);
 * sqrt(1 - beta2^t), in double as Python computes them. */
typedef struct vp_adam_scalars {
    double decay, step_size, bias2_sqrt;
} vp_adam_scalars;

typedef struct vp_adam_io {
    const void *w, *g, *m, *v;
    void *w_out, *m_out, *v_out;
} vp_adam_io;

/* t: the step count after this step's increment (a float32 count, read as a double).
 * In libvplanrt, compiled once: a caller built with FMA and contraction (-std=gnu17
 * -mfma) would round 1 - lr * wd differently. */
vp_adam_scalars vp_adam_scalars_at(const vp_opt_hyper *h, float t);

/* vp_adam_core_T: the update of elements [lo, hi), with what the node fixes (AdamW's
 * decoupled decay, L2 decay, which outputs are written) as arguments, so that a caller
 * passing constants (a generated step) gets a loop without branches, and always
 * inlined, so that a caller compiled for wider vector units (the same step) compiles
 * the loop for them.  The scalars are copied to locals first, so that stores through
 * the outputs cannot be taken to change them; ivdep says what the plan guarantees: an
 * output is its own input or disjoint from every input, so no element reads another's
 * result and the loop may run in vector lanes (GCC vectorises sqrtf under
 * -fno-math-errno only: vv is never negative, so no errno is ever set).  A caller
 * compiled with FMA must not contract (GCC's -ffp-contract=fast, its default in GNU
 * mode, would fuse p * decay into the final add): generated steps say
 * optimize("fp-contract=off") on the functions that inline it. */
#if defined(__GNUC__)
#define VP_ADAM_INLINE static inline __attribute__((always_inline))
#else
#define VP_ADAM_INLINE static inline
#endif
#if defined(__GNUC__) && !defined(__clang__)
#define VP_ADAM_IVDEP _Pragma("GCC ivdep")
#else
#define VP_ADAM_IVDEP
#endif
#define VP_ADAM_DEFINE(T, FMA, SQRT)                                                                           \
    VP_ADAM_INLINE void vp_adam_core_##T(const vp_opt_hyper *h, const vp_adam_scalars *st, int64_t lo,         \
                                         int64_t hi, const vp_adam_io *io, int decoupled, int decay_on,        \
                                         int has_w, int has_m, int has_v) {                                    \
        const T *w = io->w, *g = io->g, *m = io->m, *v = io->v;                                                \
        T *w_out = io->w_out, *m_out = io->m_out, *v_out = io->v_out;                                          \
        const T wd = (T)h->weight_decay, decay = (T)st->decay;                                                 \
        const T b1 = (T)h->beta1, one_b1 = (T)(1 - h->beta1), b2 = (T)h->beta2, one_b2 = (T)(1 - h->beta2);    \
        const T bias2_sqrt = (T)st->bias2_sqrt, eps = (T)h->eps, neg_step = (T)-st->step_size;                 \
        VP_ADAM_IVDEP                                                                                          \
        for (int64_t i = lo; i < hi; i++) {                                                                    \
            T p = w[i], d = g[i];                                                                              \
            if (decoupled) p = p * decay;                                                                      \
            else if (decay_on) d = FMA(wd, p, d);                                                              \
            T mm = FMA(one_b1, d, m[i] * b1);                                                                  \
            T vv = FMA(one_b2 * d, d, v[i] * b2);                                                              \
            T denom = SQRT(vv) / bias2_sqrt + eps;                                                             \
            if (has_m) m_out[i] = mm;                                                                          \
            if (has_v) v_out[i] = vv;                                                                          \
            if (has_w) w_out[i] = p + (neg_step * mm) / denom;                                                 \
        }                                                                                                      \
    }                                                                                                          \
    /* the node's flags read from h and io: the library's kernel */                                            \
    VP_ADAM_INLINE void vp_adam_range_##T(const vp_opt_hyper *h, const vp_adam_scalars *st, int64_t lo,        \
                                          int64_t hi, const vp_adam_io *io) {                                  \
        vp_adam_core_##T(h, st, lo, hi, io, h->decoupled, h->weight_decay != 0, io->w_out != 0,               \
                         io->m_out != 0, io->v_out != 0);                                                      \
    }
VP_ADAM_DEFINE(float, fmaf, sqrtf)
VP_ADAM_DEFINE(double, fma, sqrt)
#undef VP_ADAM_DEFINE

#endif
