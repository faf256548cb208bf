/* Small numeric helpers shared by the CPU kernels: float32/float64 access for widened
 * kernels and broadcasting strides, over the base's conversions (ir/dtype_conv.h). */
#ifndef VP_CPU_UTIL_H
#define VP_CPU_UTIL_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ir/dtype_conv.h"
#include "ir/ir.h"

/* float32 or float64 only, for kernels that widen narrower types before they run
 * (vp_lin_run_widened): no switch over every dtype in the inner loops. */
static inline double vp_load_wide(const void *p, vp_dtype t, int64_t i) {
    return t == VP_F32 ? (double)((const float *)p)[i] : ((const double *)p)[i];
}

static inline void vp_store_wide(void *p, vp_dtype t, int64_t i, double v) {
    if (t == VP_F32) ((float *)p)[i] = (float)v;
    else ((double *)p)[i] = v;
}

/* Element strides of t as seen from an output of rank out_rank under numpy
 * broadcasting: 0 along axes t lacks or has size 1. */
static inline void vp_broadcast_strides(const vp_tensor *t, int out_rank, int64_t *strides) {
    int64_t s = 1;
    for (int d = out_rank - 1; d >= 0; d--) {
        int td = d - (out_rank - t->rank);
        if (td < 0) {
            strides[d] = 0;
            continue;
        }
        strides[d] = t->dims[td] == 1 ? 0 : s;
        s *= t->dims[td];
    }
}

/* Walks a multi-index over dims (row-major), keeping offsets into up to 4 operands. */
typedef struct vp_nd_iter {
    int rank;
    int64_t dims[VP_MAX_RANK];
    int64_t idx[VP_MAX_RANK];
    int n_ops;
    int64_t strides[4][VP_MAX_RANK];
    int64_t off[4];
} vp_nd_iter;

static inline void vp_nd_iter_next(vp_nd_iter *it) {
    for (int d = it->rank - 1; d >= 0; d--) {
        it->idx[d]++;
        for (int k = 0; k < it->n_ops; k++) it->off[k] += it->strides[k][d];
        if (it->idx[d] < it->dims[d]) return;
        for (int k = 0; k < it->n_ops; k++) it->off[k] -= it->strides[k][d] * it->dims[d];
        it->idx[d] = 0;
    }
}

#endif
