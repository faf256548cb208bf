/* Kernels for test_cuda_emu: what the emulation must get right (barriers, warp
 * collectives, 3-D indices, atomics) and what it must refuse as a GPU would (a lane
 * that leaves before a shuffle, a bad launch configuration).  Each launcher returns
 * cudaGetLastError() after its launch. */
#include <stdint.h>

#include <cuda_runtime_api.h>

/* y = x reversed within each block, through shared memory: needs the barrier */
__global__ void k_reverse(const int *x, int *y) {
    __shared__ int s[1024];
    int t = threadIdx.x, base = blockIdx.x * blockDim.x;
    s[t] = x[base + t];
    __syncthreads();
    y[base + t] = s[blockDim.x - 1 - t];
}

/* y[warp] = sum of x over the warp, by xor butterfly; z[warp] the same by shuffle-down */
__global__ void k_warp_sums(const int *x, int *y, int *z) {
    int i = blockIdx.x * blockDim.x + threadIdx.x, v = x[i], w = x[i];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    for (int o = 16; o > 0; o >>= 1) w += __shfl_down_sync(0xffffffffu, w, o);
    if ((threadIdx.x & 31) == 0) z[i / 32] = w;
    y[i] = v;
}

/* every thread's linear id in a 3-D block of a 2-D grid, and a counter of all of them */
__global__ void k_ids(int *ids, int *count) {
    int block = blockIdx.y * gridDim.x + blockIdx.x, per = blockDim.x * blockDim.y * blockDim.z;
    int t = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
    ids[block * per + t] = block * per + t;
    atomicAdd(count, 1);
}

/* half of each warp leaves, the other half shuffles: undefined on a GPU, refused here */
__global__ void k_shuffle_after_exit(int *y) {
    if (threadIdx.x < 16) return;
    y[threadIdx.x] = __shfl_xor_sync(0xffffffffu, (int)threadIdx.x, 1);
}

/* threads that exited do not hold a barrier up (as on sm_70 and later) */
__global__ void k_barrier_after_exit(int *y) {
    __shared__ int s;
    if (threadIdx.x >= 40) return;
    if (threadIdx.x == 0) s = 7;
    __syncthreads();
    y[threadIdx.x] = s;
}

extern "C" cudaError_t emu_reverse(const int *x, int *y, int blocks, int threads) {
    k_reverse<<<blocks, threads>>>(x, y);
    return cudaGetLastError();
}
extern "C" cudaError_t emu_warp_sums(const int *x, int *y, int *z, int n) {
    k_warp_sums<<<n / 128, 128>>>(x, y, z);
    return cudaGetLastError();
}
extern "C" cudaError_t emu_ids(int *ids, int *count) {
    k_ids<<<dim3(3, 2), dim3(4, 3, 2), 0, 0>>>(ids, count);
    return cudaGetLastError();
}
extern "C" cudaError_t emu_shuffle_after_exit(int *y) {
    k_shuffle_after_exit<<<1, 32>>>(y);
    return cudaGetLastError();
}
extern "C" cudaError_t emu_barrier_after_exit(int *y) {
    k_barrier_after_exit<<<1, 64>>>(y);
    return cudaGetLastError();
}
extern "C" cudaError_t emu_bad_config(int *y, int threads, size_t shmem) {
    k_barrier_after_exit<<<1, threads, shmem>>>(y);
    return cudaGetLastError();
}
