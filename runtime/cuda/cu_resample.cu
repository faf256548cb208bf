/* CUDA kernels of the resample family: Resize and ResizeGrad (float32), ScatterND,
 * GatherND (any element size; ScatterND's reductions in float32) and GatherNDGrad
 * (float32); ScatterElements and GatherElements (any element size, reductions in
 * float32) and GatherElementsGrad (float32).
 *
 * Resize threads compute their sample positions from the plan the host resolved
 * (cu_resize_plan, mirroring runtime/cpu/k_resample.c's arithmetic in double), so no
 * table is allocated.  Adjoints scatter with atomicAdd: sums are exact up to float32
 * rounding order.  Index rows out of range are skipped here; the CPU reference fails
 * on them. */
#include <math.h>

#include "cu_common.cuh"

/* ---- Resize ---- */

struct cu_tap {
    int64_t i0, i1;
    double w;
    int outside;
};

__device__ static double cu_source(const cu_resize_plan &p, int a, int64_t o) {
    double s = p.scale[a], x = (double)o, lin = (double)p.in[a], lout = p.length[a];
    switch (p.coord) {
    case 0: return (x + 0.5) / s - 0.5;
    case 1: return lin / 2 * (1 - (double)p.out[a] / lout) + (x + 0.5) / s - 0.5;
    case 2: return lout > 1 ? (x + 0.5) / s - 0.5 : 0;
    case 3: return lout == 1 ? 0 : x * (lin - 1) / (lout - 1);
    case 4: return x / s;
    case 5: return (x + 0.5) / s;
    default: {
        double st = p.roi_start[a], en = p.roi_end[a];
        return lout > 1 ? st * (lin - 1) + x * (en - st) * (lin - 1) / (lout - 1) : 0.5 * (st + en) * (lin - 1);
    }
    }
}

__device__ static int64_t cu_clamp(double v, int64_t n) { return v < 0 ? 0 : v > (double)(n - 1) ? n - 1 : (int64_t)v; }

__device__ static cu_tap cu_make_tap(const cu_resize_plan &p, int a, int64_t o) {
    double x = cu_source(p, a, o);
    int64_t n = p.in[a];
    cu_tap t = {0, 0, 0, 0};
    if (p.coord == 6 && (x < 0 || x > (double)(n - 1))) {
        t.outside = 1;
        return t;
    }
    if (!p.linear) {
        double f = floor(x), r;
        switch (p.round) {
        case 0: r = x - f <= 0.5 ? f : f + 1; break;
        case 1: r = x - f < 0.5 ? f : f + 1; break;
        case 2: r = f; break;
        default: r = ceil(x); break;
        }
        t.i0 = t.i1 = cu_clamp(r, n);
        return t;
    }
    x = x < 0 ? 0 : x > (double)(n - 1) ? (double)(n - 1) : x;
    t.i0 = (int64_t)x;
    t.i1 = t.i0 + 1 < n ? t.i0 + 1 : t.i0;
    t.w = t.i1 == t.i0 ? 0 : x - (double)t.i0;
    return t;
}

/* The neighbourhood of output e: corner offset, steps and weights of interpolating axes. */
struct cu_visit {
    int64_t base, step[CU_MAX_RANK];
    double w[CU_MAX_RANK];
    int k, outside;
};

__device__ static cu_visit cu_neighbourhood(const cu_resize_plan &p, int64_t e) {
    cu_visit v;
    v.base = 0;
    v.k = 0;
    v.outside = 0;
    int64_t xs = 1;
    for (int a = p.rank - 1; a >= 0; a--) {
        int64_t o = e % p.out[a];
        e /= p.out[a];
        cu_tap t = cu_make_tap(p, a, o);
        v.outside |= t.outside;
        v.base += t.i0 * xs;
        if (t.w != 0) {
            v.step[v.k] = (t.i1 - t.i0) * xs;
            v.w[v.k++] = t.w;
        }
        xs *= p.in[a];
    }
    return v;
}

__device__ static double cu_corner(const cu_visit &v, unsigned m, int64_t *off) {
    double wt = 1;
    *off = v.base;
    for (int j = 0; j < v.k; j++) {
        if (m >> j & 1) *off += v.step[j], wt *= v.w[j];
        else wt *= 1 - v.w[j];
    }
    return wt;
}

__global__ void k_resize(cu_resize_plan p, int64_t total, const float *x, float *y) {
    CU_FOR(e, total) {
        cu_visit v = cu_neighbourhood(p, e);
        double acc = 0;
        if (v.outside) acc = p.extrapolation;
        else
            for (unsigned m = 0; m < 1u << v.k; m++) {
                int64_t off;
                double wt = cu_corner(v, m, &off);
                acc += wt * x[off];
            }
        y[e] = (float)acc;
    }
}

__global__ void k_resize_grad(cu_resize_plan p, int64_t total, const float *dy, float *dx) {
    CU_FOR(e, total) {
        cu_visit v = cu_neighbourhood(p, e);
        if (v.outside) continue;
        for (unsigned m = 0; m < 1u << v.k; m++) {
            int64_t off;
            double wt = cu_corner(v, m, &off);
            atomicAdd(&dx[off], (float)(wt * dy[e]));
        }
    }
}

static int64_t plan_out(const cu_resize_plan *p) {
    int64_t t = 1;
    for (int a = 0; a < p->rank; a++) t *= p->out[a];
    return t;
}

static int64_t plan_in(const cu_resize_plan *p) {
    int64_t t = 1;
    for (int a = 0; a < p->rank; a++) t *= p->in[a];
    return t;
}

extern "C" cudaError_t cu_resize(const cu_resize_plan *p, const float *x, float *y, cudaStream_t st) {
    int64_t total = plan_out(p);
    if (total == 0) return cudaSuccess;
    k_resize<<<cu_blocks(total), CU_THREADS, 0, st>>>(*p, total, x, y);
    return cudaGetLastError();
}

extern "C" cudaError_t cu_resize_grad(const cu_resize_plan *p, const float *dy, float *dx, cudaStream_t st) {
    cudaError_t e = cudaMemsetAsync(dx, 0, (size_t)plan_in(p) * sizeof(float), st);
    int64_t total = plan_out(p);
    if (e || total == 0) return e;
    k_resize_grad<<<cu_blocks(total), CU_THREADS, 0, st>>>(*p, total, dy, dx);
    return cudaGetLastError();
}

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
    switch (esize) {
    case 1: k_scatter_nd<uint8_t><<<b, CU_THREADS, 0, st>>>(*g, total, idx, idx64, (const uint8_t *)upd, (uint8_t *)out); break;
    case 2: k_scatter_nd<uint16_t><<<b, CU_THREADS, 0, st>>>(*g, total, idx, idx64, (const uint16_t *)upd, (uint16_t *)out); break;
    case 4: k_scatter_nd<uint32_t><<<b, CU_THREADS, 0, st>>>(*g, total, idx, idx64, (const uint32_t *)upd, (uint32_t *)out); break;
    case 8: k_scatter_nd<uint64_t><<<b, CU_THREADS, 0, st>>>(*g, total, idx, idx64, (const uint64_t *)upd, (uint64_t *)out); break;
    default: return cudaErrorInvalidValue;
    }
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
    switch (esize) {
    case 1: k_gather_nd<uint8_t><<<b, CU_THREADS, 0, st>>>(*g, total, idx, idx64, (const uint8_t *)x, (uint8_t *)y); break;
    case 2: k_gather_nd<uint16_t><<<b, CU_THREADS, 0, st>>>(*g, total, idx, idx64, (const uint16_t *)x, (uint16_t *)y); break;
    case 4: k_gather_nd<uint32_t><<<b, CU_THREADS, 0, st>>>(*g, total, idx, idx64, (const uint32_t *)x, (uint32_t *)y); break;
    case 8: k_gather_nd<uint64_t><<<b, CU_THREADS, 0, st>>>(*g, total, idx, idx64, (const uint64_t *)x, (uint64_t *)y); break;
    default: return cudaErrorInvalidValue;
    }
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
    switch (esize) {
    case 1: k_gather_elements<uint8_t><<<b, CU_THREADS, 0, st>>>(*g, total, idx, idx64, (const uint8_t *)x, (uint8_t *)y); break;
    case 2: k_gather_elements<uint16_t><<<b, CU_THREADS, 0, st>>>(*g, total, idx, idx64, (const uint16_t *)x, (uint16_t *)y); break;
    case 4: k_gather_elements<uint32_t><<<b, CU_THREADS, 0, st>>>(*g, total, idx, idx64, (const uint32_t *)x, (uint32_t *)y); break;
    case 8: k_gather_elements<uint64_t><<<b, CU_THREADS, 0, st>>>(*g, total, idx, idx64, (const uint64_t *)x, (uint64_t *)y); break;
    default: return cudaErrorInvalidValue;
    }
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
    switch (esize) {
    case 1: k_scatter_elements<uint8_t><<<b, CU_THREADS, 0, st>>>(*g, total, idx, idx64, (const uint8_t *)upd, (uint8_t *)out); break;
    case 2: k_scatter_elements<uint16_t><<<b, CU_THREADS, 0, st>>>(*g, total, idx, idx64, (const uint16_t *)upd, (uint16_t *)out); break;
    case 4: k_scatter_elements<uint32_t><<<b, CU_THREADS, 0, st>>>(*g, total, idx, idx64, (const uint32_t *)upd, (uint32_t *)out); break;
    case 8: k_scatter_elements<uint64_t><<<b, CU_THREADS, 0, st>>>(*g, total, idx, idx64, (const uint64_t *)upd, (uint64_t *)out); break;
    default: return cudaErrorInvalidValue;
    }
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
