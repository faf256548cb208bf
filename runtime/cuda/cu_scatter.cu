/* CUDA kernels of the resample family's index ops (runtime/cpu/k_scatter.c is their CPU
 * reference): ScatterND and GatherND (any element size; ScatterND's reductions in
 * float32) and GatherNDGrad (float32); ScatterElements and GatherElements (any element
 * size, reductions in float32) and GatherElementsGrad (float32).
 *
 * Adjoints and reductions combine with atomics (atomicAdd, or compare-and-swap for mul,
 * max and min): sums are exact up to float32 rounding order.  Indices out of range are
 * skipped here; the CPU reference fails on them. */
#include <math.h>

#include "cu_common.cuh"

/* ---- ScatterND, GatherND, GatherNDGrad ---- */

__device__ static int64_t cu_index(const void *idx, int idx64, int64_t j) {
    return idx64 ? ((const int64_t *)idx)[j] : (int64_t)((const int32_t *)idx)[j];
}

/* Offset of the slice index row r names in a block of g.dims; -1 when out of range. */
__device__ static int64_t cu_row_offset(const cu_nd_geom &g, const void *idx, int idx64, int64_t r) {
    int64_t off = 0;
    for (int t = 0; t < g.k; t++) {
        int64_t i = cu_index(idx, idx64, r * g.k + t);
        if (i < 0) i += g.dims[t];
        if (i < 0 || i >= g.dims[t]) return -1;
        off += i * g.strides[t];
    }
    return off;
}

/* A read-modify-write of one float32 by compare-and-swap (mul, max, min). */
__device__ static void cu_atomic_combine(float *at, float v, int op) {
    unsigned *p = (unsigned *)at, old = *p, assumed;
    do {
        assumed = old;
        float a = __uint_as_float(assumed);
        float r = op == 2 ? a * v : op == 3 ? fmaxf(a, v) : fminf(a, v);
        old = atomicCAS(p, assumed, __float_as_uint(r));
    } while (assumed != old);
}

template <typename T>
__global__ void k_scatter_nd(cu_nd_geom g, int64_t total, const void *idx, int idx64, const T *upd, T *out) {
    CU_FOR(i, total) {
        int64_t r = i / g.slice, off = cu_row_offset(g, idx, idx64, r);
        if (off >= 0) out[off + i % g.slice] = upd[i];
    }
}

__global__ void k_scatter_nd_f32(cu_nd_geom g, int64_t total, const void *idx, int idx64, const float *upd, float *out,
                                 int op) {
    CU_FOR(i, total) {
        int64_t r = i / g.slice, off = cu_row_offset(g, idx, idx64, r);
        if (off < 0) continue;
        if (op == 1) atomicAdd(&out[off + i % g.slice], upd[i]);
        else cu_atomic_combine(&out[off + i % g.slice], upd[i], op);
    }
}

extern "C" cudaError_t cu_scatter_nd(int esize, const cu_nd_geom *g, int64_t rows, const void *idx, int idx64,
                                     const void *upd, void *out, int op, cudaStream_t st) {
    int64_t total = rows * g->slice;
    if (total == 0) return cudaSuccess;
    unsigned b = cu_blocks(total);
    if (op) {
        if (esize != 4) return cudaErrorInvalidValue;
        k_scatter_nd_f32<<<b, CU_THREADS, 0, st>>>(*g, total, idx, idx64, (const float *)upd, (float *)out, op);
        return cudaGetLastError();
    }
    CU_SIZE_DISPATCH(esize, k_scatter_nd<T><<<b, CU_THREADS, 0, st>>>(*g, total, idx, idx64, (const T *)upd, (T *)out));
    return cudaGetLastError();
}

/* GatherND over batches: output element i is row i / slice (of batch row / rows). */
template <typename T>
__global__ void k_gather_nd(cu_nd_geom g, int64_t total, const void *idx, int idx64, const T *x, T *y) {
    CU_FOR(i, total) {
        int64_t r = i / g.slice, off = cu_row_offset(g, idx, idx64, r);
        y[i] = off < 0 ? (T)0 : x[(r / g.rows) * g.block + off + i % g.slice];
    }
}

__global__ void k_gather_nd_grad(cu_nd_geom g, int64_t total, const void *idx, int idx64, const float *dy, float *dx) {
    CU_FOR(i, total) {
        int64_t r = i / g.slice, off = cu_row_offset(g, idx, idx64, r);
        if (off >= 0) atomicAdd(&dx[(r / g.rows) * g.block + off + i % g.slice], dy[i]);
    }
}

extern "C" cudaError_t cu_gather_nd(int esize, const cu_nd_geom *g, int64_t batches, const void *idx, int idx64,
                                    const void *x, void *y, cudaStream_t st) {
    int64_t total = batches * g->rows * g->slice;
    if (total == 0) return cudaSuccess;
    unsigned b = cu_blocks(total);
    CU_SIZE_DISPATCH(esize, k_gather_nd<T><<<b, CU_THREADS, 0, st>>>(*g, total, idx, idx64, (const T *)x, (T *)y));
    return cudaGetLastError();
}

extern "C" cudaError_t cu_gather_nd_grad(const cu_nd_geom *g, int64_t batches, const void *idx, int idx64,
                                         const float *dy, float *dx, cudaStream_t st) {
    cudaError_t e = cudaMemsetAsync(dx, 0, (size_t)(batches * g->block) * sizeof(float), st);
    int64_t total = batches * g->rows * g->slice;
    if (e || total == 0) return e;
    k_gather_nd_grad<<<cu_blocks(total), CU_THREADS, 0, st>>>(*g, total, idx, idx64, dy, dx);
    return cudaGetLastError();
}

/* ---- GatherElements, ScatterElements, GatherElementsGrad ---- */

/* The data offset of indices element j (index i along the axis, the rest its own
 * coordinates); -1 when i is out of range. */
__device__ static int64_t cu_element_offset(const cu_el_geom &g, const void *idx, int idx64, int64_t j) {
    int64_t off = 0, rest = j;
    for (int a = g.rank - 1; a >= 0; a--) {
        int64_t c = rest % g.idx_dims[a];
        rest /= g.idx_dims[a];
        if (a == g.axis) {
            c = cu_index(idx, idx64, j);
            if (c < 0) c += g.dim;
            if (c < 0 || c >= g.dim) return -1;
        }
        off += c * g.strides[a];
    }
    return off;
}

template <typename T>
__global__ void k_gather_elements(cu_el_geom g, int64_t total, const void *idx, int idx64, const T *x, T *y) {
    CU_FOR(j, total) {
        int64_t off = cu_element_offset(g, idx, idx64, j);
        y[j] = off < 0 ? (T)0 : x[off];
    }
}

template <typename T>
__global__ void k_scatter_elements(cu_el_geom g, int64_t total, const void *idx, int idx64, const T *upd, T *out) {
    CU_FOR(j, total) {
        int64_t off = cu_element_offset(g, idx, idx64, j);
        if (off >= 0) out[off] = upd[j];
    }
}

__global__ void k_scatter_elements_f32(cu_el_geom g, int64_t total, const void *idx, int idx64, const float *upd,
                                       float *out, int op) {
    CU_FOR(j, total) {
        int64_t off = cu_element_offset(g, idx, idx64, j);
        if (off < 0) continue;
        if (op == 1) atomicAdd(&out[off], upd[j]);
        else cu_atomic_combine(&out[off], upd[j], op);
    }
}

extern "C" cudaError_t cu_gather_elements(int esize, const cu_el_geom *g, const void *idx, int idx64, const void *x,
                                          void *y, cudaStream_t st) {
    int64_t total = 1;
    for (int a = 0; a < g->rank; a++) total *= g->idx_dims[a];
    if (total == 0) return cudaSuccess;
    unsigned b = cu_blocks(total);
    CU_SIZE_DISPATCH(esize, k_gather_elements<T><<<b, CU_THREADS, 0, st>>>(*g, total, idx, idx64, (const T *)x, (T *)y));
    return cudaGetLastError();
}

extern "C" cudaError_t cu_scatter_elements(int esize, const cu_el_geom *g, const void *idx, int idx64, const void *upd,
                                           void *out, int op, cudaStream_t st) {
    int64_t total = 1;
    for (int a = 0; a < g->rank; a++) total *= g->idx_dims[a];
    if (total == 0) return cudaSuccess;
    unsigned b = cu_blocks(total);
    if (op) {
        if (esize != 4) return cudaErrorInvalidValue;
        k_scatter_elements_f32<<<b, CU_THREADS, 0, st>>>(*g, total, idx, idx64, (const float *)upd, (float *)out, op);
        return cudaGetLastError();
    }
    CU_SIZE_DISPATCH(esize, k_scatter_elements<T><<<b, CU_THREADS, 0, st>>>(*g, total, idx, idx64, (const T *)upd, (T *)out));
    return cudaGetLastError();
}

extern "C" cudaError_t cu_gather_elements_grad(const cu_el_geom *g, int64_t dx_elems, const void *idx, int idx64,
                                               const float *dy, float *dx, cudaStream_t st) {
    cudaError_t e = cudaMemsetAsync(dx, 0, (size_t)dx_elems * sizeof(float), st);
    int64_t total = 1;
    for (int a = 0; a < g->rank; a++) total *= g->idx_dims[a];
    if (e || total == 0) return e;
    k_scatter_elements_f32<<<cu_blocks(total), CU_THREADS, 0, st>>>(*g, total, idx, idx64, dy, dx, 1);
    return cudaGetLastError();
}
