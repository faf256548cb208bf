/* Helpers shared by the .cu files: grid sizing, n-d offsets, warp and block sums. */
#ifndef VP_CU_COMMON_CUH
#define VP_CU_COMMON_CUH

#include <stdint.h>

#include "cu_kernels.h"

#define CU_THREADS 256

static inline unsigned cu_blocks(int64_t n) {
    int64_t b = (n + CU_THREADS - 1) / CU_THREADS;
    if (b < 1) b = 1;
    return (unsigned)(b > 65535 * 8 ? 65535 * 8 : b);
}

/* Runs the statement with T an unsigned integer of ES bytes (1, 2, 4 or 8): the kernels
 * that move elements without reading them; any other size returns cudaErrorInvalidValue
 * from the enclosing function. */
#define CU_SIZE_DISPATCH(ES, ...)                \
    do {                                         \
        switch (ES) {                            \
        case 1: {                                \
            typedef uint8_t T;                   \
            __VA_ARGS__;                         \
        } break;                                 \
        case 2: {                                \
            typedef uint16_t T;                  \
            __VA_ARGS__;                         \
        } break;                                 \
        case 4: {                                \
            typedef uint32_t T;                  \
            __VA_ARGS__;                         \
        } break;                                 \
        case 8: {                                \
            typedef uint64_t T;                  \
            __VA_ARGS__;                         \
        } break;                                 \
        default: return cudaErrorInvalidValue;   \
        }                                        \
    } while (0)

/* Grid-stride loop over [0, n). */
#define CU_FOR(i, n) for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

/* Offsets of output element i in up to three inputs. */
__device__ static inline void cu_offsets(const cu_nd &nd, int64_t i, int64_t *o0, int64_t *o1, int64_t *o2) {
    int64_t a = 0, b = 0, c = 0;
    for (int d = nd.rank - 1; d >= 0; d--) {
        int64_t k = i % nd.dims[d];
        i /= nd.dims[d];
        a += k * nd.s0[d];
        b += k * nd.s1[d];
        c += k * nd.s2[d];
    }
    *o0 = a;
    *o1 = b;
    *o2 = c;
}

__device__ static inline double cu_warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ static inline double cu_warp_max(double v) {
    for (int o = 16; o > 0; o >>= 1) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets it. */
__device__ static inline double cu_block_sum(double v) {
    __shared__ double part[32];
    __shared__ double total;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = cu_warp_sum(v);
    __syncthreads(); /* part[] may still be read by a previous call */
    if (lane == 0) part[warp] = v;
    __syncthreads();
    if (warp == 0) {
        double s = lane < warps ? part[lane] : 0.0;
        s = cu_warp_sum(s);
        if (lane == 0) total = s;
    }
    __syncthreads();
    return total;
}

#endif
