/* CUDA kernels of the data-layout ops that walk axes by index: Pad (any element size,
 * every mode) and CumSum (float32, float64, int32, int64).
 *
 * Pad mirrors runtime/cpu/k_tensor_index.c: negative pads crop the axis first, and an
 * output position outside the kept box reads the fill value (constant) or the source
 * its mode names (reflect, edge, wrap).  CumSum mirrors runtime/cpu/k_scan.c: one
 * thread walks each line along the axis in order, summing in double for floats and in
 * wrapping int64 for integers, so its sums are the CPU's bit for bit. */
#include <stdint.h>

#include "cu_common.cuh"

/* ---- Pad ---- */

/* Where position i of the kept box (of dim elements) reads, outside it by the mode. */
__device__ static int64_t pad_source(int mode, int64_t i, int64_t dim) {
    if (i >= 0 && i < dim) return i;
    if (mode == 2) return i < 0 ? 0 : dim - 1; /* edge */
    if (mode == 3) {                           /* wrap */
        int64_t m = i % dim;
        return m < 0 ? m + dim : m;
    }
    if (dim == 1) return 0; /* reflect: period 2 (dim - 1), as numpy repeats it */
    int64_t period = 2 * (dim - 1), m = i % period;
    if (m < 0) m += period;
    return m >= dim ? period - m : m;
}

template <typename T>
__global__ void k_pad(cu_pad_geom g, int64_t total, const T *x, T *y) {
    T fill;
    memcpy(&fill, &g.value, sizeof fill);
    CU_FOR(i, total) {
        int64_t rest = i, off = 0;
        int outside = 0;
        for (int a = g.rank - 1; a >= 0; a--) {
            int64_t o = rest % g.out_dims[a], k = o - g.pad[a];
            rest /= g.out_dims[a];
            if (k < 0 || k >= g.kept[a]) {
                if (g.mode == 0) outside = 1;
                else k = pad_source(g.mode, k, g.kept[a]);
            }
            off += (g.first[a] + k) * g.in_strides[a];
        }
        y[i] = outside ? fill : x[off];
    }
}

extern "C" cudaError_t cu_pad(int esize, const cu_pad_geom *g, const void *x, void *y, cudaStream_t st) {
    int64_t total = 1;
    for (int a = 0; a < g->rank; a++) total *= g->out_dims[a];
    if (total == 0) return cudaSuccess;
    unsigned b = cu_blocks(total);
    CU_SIZE_DISPATCH(esize, k_pad<T><<<b, CU_THREADS, 0, st>>>(*g, total, (const T *)x, (T *)y));
    return cudaGetLastError();
}

/* ---- CumSum ---- */

/* The running sum's type: double for floats, uint64 for integers (which wraps, as the
 * CPU's int64 sums do); what an element adds and what a sum stores as T. */
__device__ static inline double cumsum_in(double acc, float x) { return acc + (double)x; }
__device__ static inline double cumsum_in(double acc, double x) { return acc + x; }
__device__ static inline uint64_t cumsum_in(uint64_t acc, int32_t x) { return acc + (uint64_t)(int64_t)x; }
__device__ static inline uint64_t cumsum_in(uint64_t acc, int64_t x) { return acc + (uint64_t)x; }
template <typename T> __device__ static inline T cumsum_out(double acc) { return (T)acc; }
template <typename T> __device__ static inline T cumsum_out(uint64_t acc) { return (T)(int64_t)acc; }

/* Line l of [outer, len, inner] (l = o * inner + c) summed along len in order, in A. */
template <typename T, typename A>
__global__ void k_cumsum(int64_t outer, int64_t len, int64_t inner, int exclusive, int reverse, const T *x, T *y) {
    CU_FOR(l, outer * inner) {
        int64_t o = l / inner, c = l % inner;
        A acc = 0;
        for (int64_t r = 0; r < len; r++) {
            int64_t at = (o * len + (reverse ? len - 1 - r : r)) * inner + c;
            A before = acc;
            acc = cumsum_in(acc, x[at]);
            y[at] = cumsum_out<T>(exclusive ? before : acc);
        }
    }
}

extern "C" cudaError_t cu_cumsum(int dtype, int64_t outer, int64_t len, int64_t inner, int exclusive, int reverse,
                                 const void *x, void *y, cudaStream_t st) {
    int64_t lines = outer * inner;
    if (lines == 0 || len == 0) return cudaSuccess;
    unsigned b = cu_blocks(lines);
    switch (dtype) {
    case 1: k_cumsum<float, double><<<b, CU_THREADS, 0, st>>>(outer, len, inner, exclusive, reverse, (const float *)x, (float *)y); break;
    case 11: k_cumsum<double, double><<<b, CU_THREADS, 0, st>>>(outer, len, inner, exclusive, reverse, (const double *)x, (double *)y); break;
    case 6: k_cumsum<int32_t, uint64_t><<<b, CU_THREADS, 0, st>>>(outer, len, inner, exclusive, reverse, (const int32_t *)x, (int32_t *)y); break;
    case 7: k_cumsum<int64_t, uint64_t><<<b, CU_THREADS, 0, st>>>(outer, len, inner, exclusive, reverse, (const int64_t *)x, (int64_t *)y); break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}
