/* A host emulation of the parts of CUDA and cuBLAS the backend uses, so that the CUDA
 * backend's own sources (the C files of runtime/cuda and the kernels of its .cu files)
 * run, and are tested, where no GPU is.
 *
 * In:  the .cu files compiled by g++ as C++ (after emu/rewrite.cmake turns each
 *      `k<<<grid, block, shmem, stream>>>(args)` into a call of vp_emu::launch), and the
 *      backend's C files compiled against this header through the shims in emu/include
 *      (cuda_runtime_api.h, cublas_v2.h, cuda_fp16.h).
 * Out: a kernel launch runs every block of the grid in turn, every thread of a block as
 *      a cooperative fiber (one small stack each; a six-register switch on x86-64,
 *      ucontext elsewhere; AddressSanitizer told of each switch) that runs until it exits or
 *      waits at __syncthreads or a warp collective; the scheduler releases a barrier once
 *      every live thread of the block (of the warp) waits at it.  Device memory is host
 *      memory with a registry of allocations; cuBLAS SGEMM is OpenBLAS's cblas_sgemm,
 *      and cublasGemmEx on float16/bfloat16 (CUBLAS_COMPUTE_32F) widens the operands
 *      into host copies, runs cblas_sgemm and rounds the result once, to nearest even.
 * Kept true: a launch computes what a GPU computes for every kernel that is free of
 *      races and does not depend on timing; an invalid launch configuration, a warp
 *      collective a lane has left, a barrier that can never release, a copy outside an
 *      allocation or in the wrong direction, and a bad cuBLAS argument are reported
 *      (cudaGetLastError, cuBLAS status, and a line on stderr), as a GPU would fail.
 *
 * Not modelled: blocks running concurrently (they run one after another, in a
 * permuted order), data races and the memory model (threads switch only at barriers,
 * so a missing __syncthreads between two threads' accesses is caught only when the
 * permuted thread order changes the result; atomics are trivially atomic), timing and
 * occupancy, shared-memory capacity for static __shared__ arrays, device math
 * precision (host libm, not CUDA's ulp bounds), asynchrony (every call runs when made,
 * except the late work below), TF32 beyond rounding the operands to 10 mantissa bits, the order of
 * cuBLAS's float32 sums in GemmEx (OpenBLAS's here), cuDNN.
 *
 * Late work: copies between device memory and page-locked host memory (cudaHostAlloc)
 * and host functions (cudaLaunchHostFunc) are queued on their stream and run as late as
 * a GPU may run them: before the next launch, cuBLAS call or other copy on the same
 * stream, or when the stream is synchronized, an event recorded after them is waited on
 * (cudaStreamWaitEvent, cudaEventSynchronize) or the device is synchronized.  So a
 * missing event between a copy stream and the compute stream shows as a wrong result
 * (the copy reads what a later kernel wrote, or a kernel reads what the copy has not
 * written yet), as it would on a GPU on a bad day.
 *
 * Environment: VP_CUDA_EMU_ORDER=forward runs threads and blocks in index order (to
 * tell a race from a wrong formula); VP_CUDA_EMU_STATS=1 prints the launches of each
 * kernel at exit. */
#ifndef VP_CUDA_EMU_H
#define VP_CUDA_EMU_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the runtime API (C) ---- */

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevice = 101,
    cudaErrorNoDevice = 100,
    cudaErrorIllegalAddress = 700,
    cudaErrorLaunchOutOfResources = 701,
    cudaErrorLaunchFailure = 719,
} cudaError_t;

typedef enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
} cudaMemcpyKind;

typedef struct vp_emu_stream *cudaStream_t;
#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01

struct cudaDeviceProp {
    char name[256];
    int major, minor;
    size_t totalGlobalMem, sharedMemPerBlock;
    int maxThreadsPerBlock, warpSize, multiProcessorCount;
};

cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device);
cudaError_t cudaMalloc(void **ptr, size_t bytes);
cudaError_t cudaFree(void *ptr);
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t st);
cudaError_t cudaMemset(void *ptr, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void *ptr, int value, size_t bytes, cudaStream_t st);
cudaError_t cudaStreamCreate(cudaStream_t *st);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *st, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t st);
cudaError_t cudaStreamSynchronize(cudaStream_t st);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);

/* page-locked host memory, events and host functions (the late work above) */
typedef struct vp_emu_event *cudaEvent_t;
#define cudaEventDefault 0x00
#define cudaEventDisableTiming 0x02
#define cudaHostAllocDefault 0x00
typedef void (*cudaHostFn_t)(void *user_data);
cudaError_t cudaHostAlloc(void **ptr, size_t bytes, unsigned flags);
cudaError_t cudaFreeHost(void *ptr);
cudaError_t cudaEventCreate(cudaEvent_t *ev);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *ev, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t ev);
cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t st);
cudaError_t cudaEventSynchronize(cudaEvent_t ev);
cudaError_t cudaStreamWaitEvent(cudaStream_t st, cudaEvent_t ev, unsigned flags);
cudaError_t cudaLaunchHostFunc(cudaStream_t st, cudaHostFn_t fn, void *user_data);
const char *cudaGetErrorName(cudaError_t e);
const char *cudaGetErrorString(cudaError_t e);

/* ---- cuBLAS (C) ---- */

typedef enum cublasStatus {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_ARCH_MISMATCH = 8,
    CUBLAS_STATUS_MAPPING_ERROR = 11,
    CUBLAS_STATUS_EXECUTION_FAILED = 13,
    CUBLAS_STATUS_INTERNAL_ERROR = 14,
    CUBLAS_STATUS_NOT_SUPPORTED = 15,
} cublasStatus_t;
typedef enum cublasOperation { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 } cublasOperation_t;
typedef enum cublasMath {
    CUBLAS_DEFAULT_MATH = 0,
    CUBLAS_TENSOR_OP_MATH = 1,
    CUBLAS_PEDANTIC_MATH = 2,
    CUBLAS_TF32_TENSOR_OP_MATH = 3,
} cublasMath_t;
typedef struct vp_emu_blas *cublasHandle_t;

cublasStatus_t cublasCreate(cublasHandle_t *h);
cublasStatus_t cublasDestroy(cublasHandle_t h);
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t st);
cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *ws, size_t bytes);
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode);
cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const float *alpha, const float *a, int lda, const float *b, int ldb, const float *beta,
                           float *c, int ldc);
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                         int k, const float *alpha, const float *a, int lda, long long sa,
                                         const float *b, int ldb, long long sb, const float *beta, float *c, int ldc,
                                         long long sc, int batch);

/* cublasGemmEx and its strided batched form: float32, float16 and bfloat16 operands
 * (all three of one type), accumulated in float32 and rounded once on store. */
typedef enum cudaDataType_t { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14 } cudaDataType;
typedef enum cublasComputeType_t { CUBLAS_COMPUTE_32F = 68 } cublasComputeType_t;
typedef enum cublasGemmAlgo_t { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void *alpha, const void *a, cudaDataType at, int lda, const void *b, cudaDataType bt,
                            int ldb, const void *beta, void *c, cudaDataType ct, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t algo);
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                          int k, const void *alpha, const void *a, cudaDataType at, int lda,
                                          long long sa, const void *b, cudaDataType bt, int ldb, long long sb,
                                          const void *beta, void *c, cudaDataType ct, int ldc, long long sc, int batch,
                                          cublasComputeType_t compute, cublasGemmAlgo_t algo);

/* ---- the emulator's own ---- */

/* Kernel launches so far. */
long long vp_emu_launch_count(void);

#ifdef __cplusplus
}
#endif

/* ---- the device side (C++, the .cu files only) ---- */
#ifdef __cplusplus
#include <math.h>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
/* one instance for the block: blocks run one after another */
#define __shared__ static

struct uint3 {
    unsigned x, y, z;
};
struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};

/* The running fiber's coordinates; the scheduler sets them before each switch (a
 * kernel reads them again after every barrier, which is an opaque call). */
extern uint3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;
static const int warpSize = 32;

void __syncthreads(void);
void __syncwarp(unsigned mask = 0xffffffffu);
void __threadfence(void);

namespace vp_emu {
/* Waits until every lane of the caller's warp arrives; slot is the caller's 8-byte
 * exchange slot for this round, the return value the base of the warp's slots. */
uint64_t *warp_exchange(uint64_t value);
void *dynamic_shared(void);

template <typename T> static inline T shfl_src(T v, int src_lane, int width) {
    static_assert(sizeof(T) <= 8, "shuffle of a value over 8 bytes");
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof v);
    uint64_t *slots = warp_exchange(bits);
    int lane = (int)(threadIdx.x & 31), base = lane & ~(width - 1);
    int from = base + (src_lane & (width - 1));
    T r;
    memcpy(&r, &slots[from], sizeof r);
    return r;
}

struct config {
    dim3 grid, block;
    size_t shmem;
    cudaStream_t stream;
};
static inline config make_config(dim3 g, dim3 b, size_t shmem = 0, cudaStream_t st = 0) { return config{g, b, shmem, st}; }

/* Runs body(arg) as every thread of the launch. */
void run(const char *name, const config &c, void (*body)(void *), void *arg);

template <typename F> struct launcher {
    F kernel;
    const char *name;
    config cfg;
    template <typename... A> void operator()(A &&...args) {
        /* each thread calls the kernel, so gets its own copy of the by-value parameters */
        auto call = [&]() { kernel(args...); };
        run(name, cfg, [](void *p) { (*static_cast<decltype(call) *>(p))(); }, &call);
    }
};
template <typename F> static inline launcher<F> launch(F k, const char *name, const config &c) {
    return launcher<F>{k, name, c};
}
} // namespace vp_emu

template <typename T> static inline T __shfl_sync(unsigned, T v, int src, int width = 32) {
    return vp_emu::shfl_src(v, src, width);
}
template <typename T> static inline T __shfl_xor_sync(unsigned, T v, int mask, int width = 32) {
    return vp_emu::shfl_src(v, (int)(threadIdx.x & 31) ^ mask, width);
}
template <typename T> static inline T __shfl_down_sync(unsigned, T v, unsigned d, int width = 32) {
    int lane = (int)(threadIdx.x & (unsigned)(width - 1));
    /* lanes past the segment's end keep their own value, as on the GPU */
    T other = vp_emu::shfl_src(v, (int)(threadIdx.x & 31) + (int)d, width);
    return lane + (int)d < width ? other : v;
}
template <typename T> static inline T __shfl_up_sync(unsigned, T v, unsigned d, int width = 32) {
    int lane = (int)(threadIdx.x & (unsigned)(width - 1));
    T other = vp_emu::shfl_src(v, (int)(threadIdx.x & 31) - (int)d, width);
    return lane >= (int)d ? other : v;
}
static inline unsigned __ballot_sync(unsigned, int pred) {
    uint64_t *slots = vp_emu::warp_exchange(pred != 0);
    unsigned r = 0;
    unsigned lanes = blockDim.x * blockDim.y * blockDim.z - (threadIdx.x & ~31u);
    for (unsigned l = 0; l < 32 && l < lanes; l++) r |= slots[l] ? 1u << l : 0;
    return r;
}
static inline int __any_sync(unsigned m, int pred) { return __ballot_sync(m, pred) != 0; }
static inline int __all_sync(unsigned m, int pred) {
    unsigned lanes = blockDim.x * blockDim.y * blockDim.z - (threadIdx.x & ~31u);
    unsigned full = lanes >= 32 ? 0xffffffffu : (1u << lanes) - 1;
    return __ballot_sync(m, pred) == full;
}

/* Atomics: fibers switch only at barriers, so a plain read-modify-write is atomic. */
template <typename T> static inline T atomicAdd(T *p, T v) {
    T old = *p;
    *p = old + v;
    return old;
}
template <typename T> static inline T atomicSub(T *p, T v) {
    T old = *p;
    *p = old - v;
    return old;
}
template <typename T> static inline T atomicExch(T *p, T v) {
    T old = *p;
    *p = v;
    return old;
}
template <typename T> static inline T atomicMax(T *p, T v) {
    T old = *p;
    if (v > old) *p = v;
    return old;
}
template <typename T> static inline T atomicMin(T *p, T v) {
    T old = *p;
    if (v < old) *p = v;
    return old;
}
template <typename T> static inline T atomicCAS(T *p, T compare, T v) {
    T old = *p;
    if (old == compare) *p = v;
    return old;
}

/* Intrinsics: the _rn forms are single IEEE operations (the host build does not
 * contract a * b + c into an fma). */
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline unsigned __float_as_uint(float f) {
    unsigned u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float __uint_as_float(unsigned u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline int __float_as_int(float f) { return (int)__float_as_uint(f); }
static inline float __int_as_float(int i) { return __uint_as_float((unsigned)i); }

struct __half {
    uint16_t bits;
};
static inline float __half2float(__half h) {
    uint32_t sign = (uint32_t)(h.bits & 0x8000) << 16, exp = (h.bits >> 10) & 0x1f, man = h.bits & 0x3ff, bits;
    if (exp == 0) {
        if (!man) bits = sign;
        else {
            exp = 127 - 15 + 1;
            while (!(man & 0x400)) {
                man <<= 1;
                exp--;
            }
            man &= 0x3ff;
            bits = sign | (exp << 23) | (man << 13);
        }
    } else if (exp == 31) bits = sign | 0x7f800000u | (man << 13);
    else bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    return __uint_as_float(bits);
}
/* round to nearest even */
static inline __half __float2half_rn(float f) {
    uint32_t x = __float_as_uint(f);
    uint32_t sign = (x >> 16) & 0x8000;
    int32_t exp = (int32_t)((x >> 23) & 0xff) - 127 + 15;
    uint32_t man = x & 0x7fffff;
    if (((x >> 23) & 0xff) == 0xff) return __half{(uint16_t)(sign | 0x7c00 | (man ? 0x200 : 0))};
    if (exp >= 31) return __half{(uint16_t)(sign | 0x7c00)};
    if (exp <= 0) {
        if (exp < -10) return __half{(uint16_t)sign};
        man |= 0x800000;
        uint32_t shift = (uint32_t)(14 - exp);
        uint32_t half = man >> shift, rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return __half{(uint16_t)(sign | half)};
    }
    uint32_t h = sign | ((uint32_t)exp << 10) | (man >> 13);
    uint32_t rem = man & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
    return __half{(uint16_t)h};
}
static inline __half __float2half(float f) { return __float2half_rn(f); }
#endif /* __cplusplus */

#endif
