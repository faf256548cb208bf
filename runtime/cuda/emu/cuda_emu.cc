/* The emulator's runtime (cuda_emu.h says what it models and what it does not): device
 * memory as registered host memory, streams and events, errors; a launch (the fiber
 * scheduler, barriers and warp exchanges) is cuda_emu_launch.cc, cuBLAS cuda_emu_blas.cc.
 *
 * One launch at a time, on the calling host thread; every call runs when it is made but
 * the late work (copies to and from page-locked memory, host functions), queued on its
 * stream until something must see it done. */
#include "cuda_emu.h"

#include <deque>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <stdio.h>
#include <stdlib.h>
#include <vector>

#include "cuda_emu_internal.h"

namespace {

/* ---- errors ---- */

cudaError_t last_error = cudaSuccess;

cudaError_t set_error(cudaError_t e) {
    if (e != cudaSuccess && last_error == cudaSuccess) last_error = e;
    return e;
}

/* ---- device memory: host allocations in a registry ---- */

const size_t TOTAL_MEMORY = (size_t)16 << 30;
std::map<uintptr_t, size_t> allocations;
size_t allocated = 0;

/* 1 when [p, p + n) lies inside one allocation */
bool on_device(const void *p, size_t n) {
    uintptr_t a = (uintptr_t)p;
    auto it = allocations.upper_bound(a);
    if (it == allocations.begin()) return false;
    --it;
    return a >= it->first && a + n <= it->first + it->second;
}

/* page-locked host memory (cudaHostAlloc): host memory, but a copy to or from it is
 * late work */
std::map<uintptr_t, size_t> pinned;

bool in_map(const std::map<uintptr_t, size_t> &m, const void *p, size_t n) {
    uintptr_t a = (uintptr_t)p;
    auto it = m.upper_bound(a);
    if (it == m.begin()) return false;
    --it;
    return a >= it->first && a + n <= it->first + it->second;
}

cudaError_t check_copy(void *dst, const void *src, size_t n, cudaMemcpyKind kind) {
    bool d_dev = on_device(dst, n), s_dev = on_device(src, n);
    bool ok = kind == cudaMemcpyHostToDevice   ? d_dev && !s_dev
              : kind == cudaMemcpyDeviceToHost ? s_dev && !d_dev
              : kind == cudaMemcpyDeviceToDevice ? d_dev && s_dev
              : kind == cudaMemcpyHostToHost     ? !d_dev && !s_dev
                                                 : true;
    if (ok) return cudaSuccess;
    fprintf(stderr, "cuda emulation: cudaMemcpy kind %d of %zu bytes from %p (%s) to %p (%s)\n", (int)kind, n, src,
            s_dev ? "device" : "not a device range", dst, d_dev ? "device" : "not a device range");
    return set_error(cudaErrorInvalidValue);
}

} // namespace

/* ---- the runtime API ---- */

extern "C" {

cudaError_t cudaGetDeviceCount(int *count) {
    *count = 1;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : set_error(cudaErrorInvalidDevice); }

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device) {
    if (device != 0) return set_error(cudaErrorInvalidDevice);
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "host emulation of CUDA (runtime/cuda/emu)");
    prop->major = 9;
    prop->minor = 0;
    prop->totalGlobalMem = TOTAL_MEMORY;
    prop->sharedMemPerBlock = 48 * 1024;
    prop->maxThreadsPerBlock = 1024;
    prop->warpSize = 32;
    prop->multiProcessorCount = 1;
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **ptr, size_t bytes) {
    *ptr = nullptr;
    if (allocated + bytes > TOTAL_MEMORY) return set_error(cudaErrorMemoryAllocation);
    void *p = nullptr;
    /* exactly the bytes asked for, so AddressSanitizer sees a kernel step past them */
    if (posix_memalign(&p, 256, bytes ? bytes : 1)) return set_error(cudaErrorMemoryAllocation);
    memset(p, 0xcd, bytes); /* device memory starts as garbage */
    allocations[(uintptr_t)p] = bytes;
    allocated += bytes;
    *ptr = p;
    return cudaSuccess;
}

cudaError_t cudaFree(void *ptr) {
    if (!ptr) return cudaSuccess;
    auto it = allocations.find((uintptr_t)ptr);
    if (it == allocations.end()) {
        fprintf(stderr, "cuda emulation: cudaFree(%p) of no allocation\n", ptr);
        return set_error(cudaErrorInvalidValue);
    }
    allocated -= it->second;
    allocations.erase(it);
    free(ptr);
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
    *free_bytes = TOTAL_MEMORY - allocated;
    *total_bytes = TOTAL_MEMORY;
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind) {
    if (!bytes) return cudaSuccess;
    cudaError_t e = check_copy(dst, src, bytes, kind);
    if (e) return e;
    memmove(dst, src, bytes);
    return cudaSuccess;
}

struct vp_emu_stream {
    unsigned flags;
    std::deque<std::pair<unsigned long long, std::function<void()>>> late; /* (number, work) */
    unsigned long long queued;                                              /* late work ever queued */
};

struct vp_emu_event {
    cudaStream_t stream; /* recorded on; NULL before a record */
    unsigned long long mark; /* the late work queued before the record */
};

namespace {
std::set<cudaStream_t> streams;

/* Runs st's late work numbered below mark, in order. */
void drain_to(cudaStream_t st, unsigned long long mark) {
    while (st && !st->late.empty() && st->late.front().first < mark) {
        std::function<void()> work = std::move(st->late.front().second);
        st->late.pop_front();
        work();
    }
}

void queue_late(cudaStream_t st, std::function<void()> work) { st->late.emplace_back(st->queued++, std::move(work)); }
} // namespace

void vp_emu_stream_drain(cudaStream_t st) { drain_to(st, ~0ull); }

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t st) {
    bool to_pinned = in_map(pinned, dst, bytes), from_pinned = in_map(pinned, src, bytes);
    if (!st || !bytes || !(to_pinned || from_pinned)) {
        vp_emu_stream_drain(st);
        return cudaMemcpy(dst, src, bytes, kind);
    }
    cudaError_t e = check_copy(dst, src, bytes, kind);
    if (e) return e;
    queue_late(st, [=]() { memmove(dst, src, bytes); });
    return cudaSuccess;
}

cudaError_t cudaHostAlloc(void **ptr, size_t bytes, unsigned flags) {
    *ptr = nullptr;
    if (flags != cudaHostAllocDefault) return set_error(cudaErrorInvalidValue);
    void *p = nullptr;
    if (posix_memalign(&p, 4096, bytes ? bytes : 1)) return set_error(cudaErrorMemoryAllocation);
    memset(p, 0xcd, bytes); /* garbage, as cudaHostAlloc gives */
    pinned[(uintptr_t)p] = bytes ? bytes : 1;
    *ptr = p;
    return cudaSuccess;
}

cudaError_t cudaFreeHost(void *ptr) {
    if (!ptr) return cudaSuccess;
    auto it = pinned.find((uintptr_t)ptr);
    if (it == pinned.end()) {
        fprintf(stderr, "cuda emulation: cudaFreeHost(%p) of no cudaHostAlloc\n", ptr);
        return set_error(cudaErrorInvalidValue);
    }
    for (cudaStream_t st : streams) vp_emu_stream_drain(st); /* as a GPU: the free waits for the device */
    pinned.erase(it);
    free(ptr);
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *ev) { return cudaEventCreateWithFlags(ev, cudaEventDefault); }

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *ev, unsigned) {
    *ev = new vp_emu_event{nullptr, 0};
    return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t ev) {
    delete ev;
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t st) {
    if (!ev) return set_error(cudaErrorInvalidValue);
    ev->stream = st;
    ev->mark = st ? st->queued : 0;
    return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t ev) {
    if (!ev) return set_error(cudaErrorInvalidValue);
    drain_to(ev->stream, ev->mark);
    return last_error;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t st, cudaEvent_t ev, unsigned) {
    if (!ev) return set_error(cudaErrorInvalidValue);
    /* what st runs from now on runs after the event: the recorded work, just in time */
    if (ev->stream != st) drain_to(ev->stream, ev->mark);
    return cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t st, cudaHostFn_t fn, void *user_data) {
    if (!fn) return set_error(cudaErrorInvalidValue);
    if (!st) {
        fn(user_data);
        return cudaSuccess;
    }
    queue_late(st, [=]() { fn(user_data); });
    return cudaSuccess;
}

cudaError_t cudaMemset(void *ptr, int value, size_t bytes) {
    if (!bytes) return cudaSuccess;
    if (!on_device(ptr, bytes)) {
        fprintf(stderr, "cuda emulation: cudaMemset of %zu bytes at %p, not a device range\n", bytes, ptr);
        return set_error(cudaErrorInvalidValue);
    }
    memset(ptr, value, bytes);
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *ptr, int value, size_t bytes, cudaStream_t st) {
    vp_emu_stream_drain(st);
    return cudaMemset(ptr, value, bytes);
}

cudaError_t cudaStreamCreate(cudaStream_t *st) { return cudaStreamCreateWithFlags(st, 0); }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *st, unsigned flags) {
    *st = new vp_emu_stream{flags, {}, 0};
    streams.insert(*st);
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t st) {
    vp_emu_stream_drain(st);
    streams.erase(st);
    delete st;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t st) {
    vp_emu_stream_drain(st);
    return last_error;
}

cudaError_t cudaDeviceSynchronize(void) {
    for (cudaStream_t st : streams) vp_emu_stream_drain(st);
    return last_error;
}

cudaError_t cudaGetLastError(void) {
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void) { return last_error; }

const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchOutOfResources: return "cudaErrorLaunchOutOfResources";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    }
    return "cudaErrorUnknown";
}

const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorLaunchFailure: return "unspecified launch failure (the emulator printed why)";
    default: return cudaGetErrorName(e);
    }
}

} // extern "C"

bool vp_emu_on_device(const void *p, size_t n) { return on_device(p, n); }

cudaError_t vp_emu_set_error(cudaError_t e) { return set_error(e); }

cudaError_t vp_emu_peek_error(void) { return last_error; }
