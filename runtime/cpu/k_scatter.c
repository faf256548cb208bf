/* ScatterND, GatherND and GatherNDGrad, ScatterElements and GatherElementsGrad on the CPU.
 *
 * ND: each row of the indices (their last axis, k long) names a slice of the data: the
 * first k coordinates of an element, the rest of its axes taken whole.  GatherND
 * copies those slices out (after batch_dims leading axes shared by data and indices),
 * ScatterND writes or combines updates into a copy of the data, GatherNDGrad adds
 * slices into zeros.  Elements: each index names one coordinate along the axis, the
 * element's others its own position in the indices; ScatterElements writes or combines
 * updates there in a copy of the data, GatherElementsGrad adds dY there into zeros.
 * Indices come from data, so every one is checked before anything is written; negative
 * coordinates count from the end of their axis.  Duplicates combine in index order, so
 * results do not depend on the run. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_util.h"
#include "k_linalg.h"
#include "k_resample.h"
#include "k_tensor.h"

/* The element offset of the slice that indices row `row` names within a block of
 * `dims` (k of them checked, strides in elements). */
static vp_status row_offset(const vp_node *n, const vp_tensor *idx, int64_t row, int k, const int64_t *dims,
                            const int64_t *strides, int64_t *off, vp_error *err) {
    *off = 0;
    for (int t = 0; t < k; t++) {
        int64_t i = vp_tensor_int_at(idx, row * k + t);
        if (i < -dims[t] || i >= dims[t])
            return vp_node_fail(err, VP_ERR_RUNTIME, n, "index %lld (row %lld, entry %d of the indices) is out of range "
                                "for an axis of size %lld", (long long)i, (long long)row, t, (long long)dims[t]);
        *off += (i < 0 ? i + dims[t] : i) * strides[t];
    }
    return VP_OK;
}

static void row_major(int rank, const int64_t *dims, int64_t *strides) {
    int64_t s = 1;
    for (int a = rank - 1; a >= 0; a--) {
        strides[a] = s;
        s *= dims[a];
    }
}

static int64_t product(int from, int to, const int64_t *dims) {
    int64_t p = 1;
    for (int a = from; a < to; a++) p *= dims[a];
    return p;
}

enum { COMBINE_SET, COMBINE_ADD, COMBINE_MUL, COMBINE_MAX, COMBINE_MIN };

/* Integers wrap (as two's complement) rather than overflow. */
#define COMBINE_AS(T, U)                                                              \
    do {                                                                              \
        T *d_ = dst;                                                                  \
        const T *s_ = src;                                                            \
        for (int64_t i = 0; i < len; i++) {                                           \
            T a = d_[i], b = s_[i];                                                   \
            switch (op) {                                                             \
            case COMBINE_ADD: d_[i] = (T)((U)a + (U)b); break;                        \
            case COMBINE_MUL: d_[i] = (T)((U)a * (U)b); break;                        \
            case COMBINE_MAX: d_[i] = a > b ? a : b; break;                           \
            default: d_[i] = a < b ? a : b; break;                                    \
            }                                                                         \
        }                                                                             \
    } while (0)

/* dst[i] = dst[i] op src[i] for len elements of dtype t. */
static void combine(void *dst, const void *src, vp_dtype t, int64_t len, int op) {
    switch (t) {
    case VP_F32: COMBINE_AS(float, float); return;
    case VP_F64: COMBINE_AS(double, double); return;
    case VP_I32: COMBINE_AS(int32_t, uint32_t); return;
    case VP_I64: COMBINE_AS(int64_t, uint64_t); return;
    case VP_U8: COMBINE_AS(uint8_t, uint8_t); return;
    case VP_I8: COMBINE_AS(int8_t, uint8_t); return;
    default: break;
    }
    for (int64_t i = 0; i < len; i++) { /* half types and the rarer integers, through double */
        double a = vp_load(dst, t, i), b = vp_load(src, t, i);
        double r = op == COMBINE_ADD ? a + b : op == COMBINE_MUL ? a * b : op == COMBINE_MAX ? (a > b ? a : b) : (a < b ? a : b);
        vp_store(dst, t, i, r);
    }
}

static int reduction_of(const vp_node *n) {
    const char *r = vp_attr_string(n, "reduction", "none");
    return !strcmp(r, "add") ? COMBINE_ADD : !strcmp(r, "mul") ? COMBINE_MUL : !strcmp(r, "max") ? COMBINE_MAX
         : !strcmp(r, "min") ? COMBINE_MIN : COMBINE_SET;
}

/* ---- ScatterND(data, indices, updates): a copy of data, updates written or combined ---- */

vp_status vp_cpu_scatter_nd(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    const vp_tensor *x = in[0], *idx = in[1], *upd = in[2];
    int k = (int)idx->dims[idx->rank - 1], op = reduction_of(n);
    int64_t rows = product(0, idx->rank - 1, idx->dims), slice = product(k, x->rank, x->dims), strides[VP_MAX_RANK], off;
    size_t esize = vp_dtype_size(x->dtype);
    row_major(x->rank, x->dims, strides);
    for (int64_t r = 0; r < rows; r++) {
        vp_status s = row_offset(n, idx, r, k, x->dims, strides, &off, err);
        if (s) return s;
    }
    if (out[0]->data != x->data) memcpy(out[0]->data, x->data, vp_tensor_nbytes(x));
    char *dst = out[0]->data;
    const char *src = upd->data;
    for (int64_t r = 0; r < rows; r++) {
        row_offset(n, idx, r, k, x->dims, strides, &off, err);
        if (op == COMBINE_SET) memcpy(dst + (size_t)off * esize, src + (size_t)(r * slice) * esize, (size_t)slice * esize);
        else combine(dst + (size_t)off * esize, src + (size_t)(r * slice) * esize, x->dtype, slice, op);
    }
    return VP_OK;
}

/* ---- GatherND(data, indices) and its adjoint ---- */

typedef struct nd_geom {
    int64_t batches;  /* product of the batch_dims leading axes */
    int64_t rows;     /* index rows per batch */
    int64_t slice;    /* elements per slice */
    int64_t block;    /* data elements per batch */
    int k;
    const int64_t *dims; /* data's dims after the batch axes */
    int64_t strides[VP_MAX_RANK];
} nd_geom;

static nd_geom geometry(const vp_node *n, int rank, const int64_t *dims, const vp_tensor *idx) {
    int b = (int)vp_attr_int(n, "batch_dims", 0);
    nd_geom g;
    g.k = (int)idx->dims[idx->rank - 1];
    g.batches = product(0, b, dims);
    g.rows = product(b, idx->rank - 1, idx->dims);
    g.slice = product(b + g.k, rank, dims);
    g.block = product(b, rank, dims);
    g.dims = dims + b;
    row_major(rank - b, dims + b, g.strides);
    return g;
}

vp_status vp_cpu_gather_nd(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    const vp_tensor *x = in[0], *idx = in[1];
    nd_geom g = geometry(n, x->rank, x->dims, idx);
    size_t esize = vp_dtype_size(x->dtype);
    const char *src = x->data;
    char *dst = out[0]->data;
    for (int64_t bi = 0; bi < g.batches; bi++)
        for (int64_t r = 0; r < g.rows; r++) {
            int64_t off;
            vp_status s = row_offset(n, idx, bi * g.rows + r, g.k, g.dims, g.strides, &off, err);
            if (s) return s;
            memcpy(dst, src + (size_t)(bi * g.block + off) * esize, (size_t)g.slice * esize);
            dst += (size_t)g.slice * esize;
        }
    return VP_OK;
}

vp_status vp_cpu_gather_nd_grad(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    if (!out[0]) return VP_OK;
    const vp_tensor *idx = in[1], *dy = in[2];
    vp_tensor *dx = out[0];
    nd_geom g = geometry(n, dx->rank, dx->dims, idx);
    size_t esize = vp_dtype_size(dx->dtype);
    memset(dx->data, 0, vp_tensor_nbytes(dx));
    const char *src = dy->data;
    char *dst = dx->data;
    for (int64_t bi = 0; bi < g.batches; bi++)
        for (int64_t r = 0; r < g.rows; r++) {
            int64_t off;
            vp_status s = row_offset(n, idx, bi * g.rows + r, g.k, g.dims, g.strides, &off, err);
            if (s) return s;
            combine(dst + (size_t)(bi * g.block + off) * esize, src, dx->dtype, g.slice, COMBINE_ADD);
            src += (size_t)g.slice * esize;
        }
    return VP_OK;
}

/* ---- ScatterElements(data, indices, updates) and GatherElementsGrad(dY, shape, indices) ---- */

static int element_axis(const vp_node *n, int rank) {
    int64_t a = vp_attr_int(n, "axis", 0);
    return (int)(a < 0 ? a + rank : a);
}

vp_status vp_cpu_scatter_elements(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    const vp_tensor *x = in[0], *idx = in[1], *upd = in[2];
    int axis = element_axis(n, x->rank), op = reduction_of(n);
    int64_t count = vp_tensor_numel(idx), axis_stride = 1, *ix;
    vp_status s = vp_cpu_axis_indices(n, idx, axis, x->dims[axis], &ix, err);
    if (s) return s;
    if (out[0]->data != x->data) memcpy(out[0]->data, x->data, vp_tensor_nbytes(x));
    size_t esize = vp_dtype_size(x->dtype);
    vp_nd_iter it = vp_cpu_elements_walk(x->rank, x->dims, idx->dims, axis, &axis_stride);
    char *dst = out[0]->data;
    const char *src = upd->data;
    for (int64_t j = 0; j < count; j++, vp_nd_iter_next(&it)) {
        char *d = dst + (size_t)(it.off[0] + ix[j] * axis_stride) * esize;
        if (op == COMBINE_SET) memcpy(d, src + (size_t)j * esize, esize);
        else combine(d, src + (size_t)j * esize, x->dtype, 1, op);
    }
    free(ix);
    return VP_OK;
}

vp_status vp_cpu_gather_elements_grad(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                      vp_error *err) {
    if (!out[0]) return VP_OK;
    const vp_tensor *dy = in[0], *idx = in[2];
    vp_tensor *dx = out[0];
    if (vp_lin_is_narrow(dy->dtype)) return vp_lin_run_widened(vp_cpu_gather_elements_grad, n, in, out, err);
    int axis = element_axis(n, dx->rank);
    int64_t count = vp_tensor_numel(idx), axis_stride = 1, *ix;
    vp_status s = vp_cpu_axis_indices(n, idx, axis, dx->dims[axis], &ix, err);
    if (s) return s;
    memset(dx->data, 0, vp_tensor_nbytes(dx));
    size_t esize = vp_dtype_size(dx->dtype);
    vp_nd_iter it = vp_cpu_elements_walk(dx->rank, dx->dims, idx->dims, axis, &axis_stride);
    for (int64_t j = 0; j < count; j++, vp_nd_iter_next(&it)) {
        int64_t o = it.off[0] + ix[j] * axis_stride;
        if (dx->dtype == VP_F32) ((float *)dx->data)[o] += ((const float *)dy->data)[j];
        else combine((char *)dx->data + (size_t)o * esize, (const char *)dy->data + (size_t)j * esize, dx->dtype, 1,
                     COMBINE_ADD);
    }
    free(ix);
    return VP_OK;
}
