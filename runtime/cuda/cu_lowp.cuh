/* float16 and bfloat16 in the kernels: loads widen to float, stores round to nearest
 * even, as the CPU reference does (runtime/cpu/cpu_util.h), so a kernel templated on
 * its storage type computes in float whatever it reads and writes.
 *
 * bfloat16 is held as its bits (cu_bf16) and converted by bit operations, the same on
 * the device and in the host emulation; float16 uses cuda_fp16.h's __half. */
#ifndef VP_CU_LOWP_CUH
#define VP_CU_LOWP_CUH

#include <stdint.h>

#include <cuda_fp16.h>

typedef struct cu_bf16 {
    uint16_t bits;
} cu_bf16;

__device__ static inline float cu_ld(const float *p, int64_t i) { return p[i]; }
__device__ static inline float cu_ld(const __half *p, int64_t i) { return __half2float(p[i]); }
__device__ static inline float cu_ld(const cu_bf16 *p, int64_t i) { return __uint_as_float((unsigned)p[i].bits << 16); }

__device__ static inline cu_bf16 cu_to_bf16(float f) {
    unsigned x = __float_as_uint(f);
    if ((x & 0x7f800000u) == 0x7f800000u && (x & 0x7fffffu)) return cu_bf16{(uint16_t)((x >> 16) | 0x40)};
    x += 0x7fffu + ((x >> 16) & 1u);
    return cu_bf16{(uint16_t)(x >> 16)};
}

__device__ static inline void cu_st(float *p, int64_t i, float v) { p[i] = v; }
__device__ static inline void cu_st(__half *p, int64_t i, float v) { p[i] = __float2half_rn(v); }
__device__ static inline void cu_st(cu_bf16 *p, int64_t i, float v) { p[i] = cu_to_bf16(v); }

/* Runs the statement with T the storage type of dtype code DT (1 float32, 10 float16, 16
 * bfloat16); any other code returns cudaErrorInvalidValue from the enclosing function. */
#define CU_FLOAT_DISPATCH(DT, ...)                   \
    do {                                             \
        switch (DT) {                                \
        case 1: {                                    \
            typedef float T;                         \
            __VA_ARGS__;                             \
        } break;                                     \
        case 10: {                                   \
            typedef __half T;                        \
            __VA_ARGS__;                             \
        } break;                                     \
        case 16: {                                   \
            typedef cu_bf16 T;                       \
            __VA_ARGS__;                             \
        } break;                                     \
        default: return cudaErrorInvalidValue;       \
        }                                            \
    } while (0)

#endif
