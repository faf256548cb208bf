/* The emulator's runtime (cuda_emu.h says what it models and what it does not): the
 * fiber scheduler behind a launch, barriers and warp exchanges, device memory as
 * registered host memory, streams and events; cuBLAS is cuda_emu_blas.cc.
 *
 * One launch at a time, on the calling host thread; every call runs when it is made but
 * the late work (copies to and from page-locked memory, host functions), queued on its
 * stream until something must see it done. */
#include "cuda_emu.h"

#include <sys/mman.h>
#include <ucontext.h>

#include <deque>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <stdio.h>
#include <stdlib.h>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define VP_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define VP_EMU_ASAN 1
#endif
#endif
#ifdef VP_EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;

#include "cuda_emu_internal.h"

namespace {

/* ---- errors ---- */

cudaError_t last_error = cudaSuccess;
long long launches = 0;

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

/* ---- fibers ---- */

enum { RUNNABLE, AT_BLOCK, AT_WARP, DONE };

#ifdef VP_EMU_ASAN
const size_t STACK_BYTES = 512 << 10;
#else
const size_t STACK_BYTES = 64 << 10;
#endif
const size_t PAGE = 4096;

/* A switch saves the callee-saved registers on the old stack and resumes the new one:
 * no signal mask to save, unlike swapcontext's system call, so a switch costs a few
 * nanoseconds (x86-64; elsewhere ucontext). */
#if defined(__x86_64__)
#define VP_EMU_ASM_SWITCH 1
extern "C" void vp_emu_switch(void **save_sp, void *new_sp);
asm(".text\n"
    ".globl vp_emu_switch\n"
    ".type vp_emu_switch,@function\n"
    "vp_emu_switch:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    ".size vp_emu_switch, .-vp_emu_switch\n");
#endif

struct fiber {
#ifdef VP_EMU_ASM_SWITCH
    void *sp;
#else
    ucontext_t ctx;
#endif
    char *stack; /* NULL until started */
    int state;
    uint3 idx;
    int warp_round;
#ifdef VP_EMU_ASAN
    void *fake_stack;
#endif
};

struct block_run {
    std::vector<fiber> f;
    std::vector<int> order;
    std::vector<int> warp_waiting, warp_lanes;
    std::vector<uint64_t> slots[2]; /* warp exchange slots, double-buffered by round */
    std::vector<int> warp_round;
    int live = 0, block_waiting = 0;
    int cur = -1;
    void (*body)(void *) = nullptr;
    void *arg = nullptr;
    const char *name = "";
    bool failed = false;
} B;

#ifdef VP_EMU_ASM_SWITCH
void *sched_sp;
#else
ucontext_t sched_ctx;
#endif
std::vector<char *> free_stacks, all_stacks;
#ifdef VP_EMU_ASAN
const void *sched_stack_bottom;
size_t sched_stack_size;
#endif

char *take_stack() {
    if (!free_stacks.empty()) {
        char *s = free_stacks.back();
        free_stacks.pop_back();
#ifdef VP_EMU_ASAN
        /* the frames that never returned (a finished fiber's entry and its last switch,
         * at the top of the stack) left their redzones poisoned; every frame below them
         * returned and cleaned up after itself, so the top is all that needs clearing
         * (the whole stack cost a 64 KiB memset of shadow per thread) */
        __asan_unpoison_memory_region(s + STACK_BYTES - (16 << 10), 16 << 10);
#endif
        return s;
    }
    /* a guard page below each stack catches an overflow */
    char *m = (char *)mmap(nullptr, STACK_BYTES + PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                           -1, 0);
    if (m == MAP_FAILED) return nullptr;
    mprotect(m, PAGE, PROT_NONE);
    all_stacks.push_back(m);
    return m + PAGE;
}

/* fiber -> scheduler */
void yield_to_scheduler(bool dying) {
    fiber &me = B.f[(size_t)B.cur];
#ifdef VP_EMU_ASAN
    __sanitizer_start_switch_fiber(dying ? nullptr : &me.fake_stack, sched_stack_bottom, sched_stack_size);
#else
    (void)dying;
#endif
#ifdef VP_EMU_ASM_SWITCH
    vp_emu_switch(&me.sp, sched_sp);
#else
    swapcontext(&me.ctx, &sched_ctx);
#endif
#ifdef VP_EMU_ASAN
    __sanitizer_finish_switch_fiber(me.fake_stack, nullptr, nullptr);
#endif
}

void fiber_main() {
#ifdef VP_EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &sched_stack_bottom, &sched_stack_size);
#endif
    B.body(B.arg);
    fiber &me = B.f[(size_t)B.cur];
    me.state = DONE;
    B.live--;
    yield_to_scheduler(true);
    abort(); /* never resumed */
}

/* scheduler -> fiber t, until it waits or exits */
void resume(int t) {
    fiber &f = B.f[(size_t)t];
    if (!f.stack) {
        f.stack = take_stack();
        if (!f.stack) {
            fprintf(stderr, "cuda emulation: %s: cannot map a fiber stack\n", B.name);
            B.failed = true;
            f.state = DONE;
            B.live--;
            return;
        }
#ifdef VP_EMU_ASM_SWITCH
        /* what vp_emu_switch pops: six registers, fiber_main as the return address,
         * then a null return address for fiber_main itself (the floating-point control
         * words are the same in every fiber: nothing changes them) */
        uint64_t *sp = (uint64_t *)(f.stack + STACK_BYTES);
        *--sp = 0;
        *--sp = (uint64_t)(uintptr_t)&fiber_main;
        for (int r = 0; r < 6; r++) *--sp = 0;
        f.sp = sp;
#else
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = f.stack;
        f.ctx.uc_stack.ss_size = STACK_BYTES;
        f.ctx.uc_link = nullptr;
        makecontext(&f.ctx, fiber_main, 0);
#endif
    }
    f.state = RUNNABLE;
    B.cur = t;
    threadIdx = f.idx;
#ifdef VP_EMU_ASAN
    void *fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, f.stack, STACK_BYTES);
#endif
#ifdef VP_EMU_ASM_SWITCH
    vp_emu_switch(&sched_sp, f.sp);
#else
    swapcontext(&sched_ctx, &f.ctx);
#endif
#ifdef VP_EMU_ASAN
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
    B.cur = -1;
    if (f.state == DONE) {
        free_stacks.push_back(f.stack);
        f.stack = nullptr;
    }
}

unsigned order_seed = 0x9e3779b9u;
bool order_forward = false;

/* A permutation of [0, n): threads and blocks run in a shuffled order so that a result
 * that depends on the order (a race) differs from the GPU's and from run to run of
 * different seeds. */
void permutation(std::vector<int> &p, int n) {
    p.resize((size_t)n);
    for (int i = 0; i < n; i++) p[(size_t)i] = i;
    if (order_forward) return;
    for (int i = n - 1; i > 0; i--) {
        order_seed = order_seed * 1664525u + 1013904223u;
        int j = (int)((order_seed >> 8) % (unsigned)(i + 1));
        int t = p[(size_t)i];
        p[(size_t)i] = p[(size_t)j];
        p[(size_t)j] = t;
    }
}

void run_block(int threads) {
    B.live = threads;
    B.block_waiting = 0;
    for (int t = 0; t < threads; t++) {
        fiber &f = B.f[(size_t)t];
        f.state = RUNNABLE;
        f.stack = nullptr;
        f.warp_round = 0;
    }
    int warps = (threads + 31) / 32;
    for (int w = 0; w < warps; w++) {
        B.warp_waiting[(size_t)w] = 0;
        B.warp_round[(size_t)w] = 0;
    }
    for (int k = 0; k < threads && !B.failed; k++) resume(B.order[(size_t)k]);
    while (B.live > 0 && !B.failed) {
        bool released = false;
        for (int w = 0; w < warps; w++)
            if (B.warp_waiting[(size_t)w] && B.warp_waiting[(size_t)w] == B.warp_lanes[(size_t)w]) {
                B.warp_waiting[(size_t)w] = 0;
                B.warp_round[(size_t)w]++;
                for (int l = w * 32; l < threads && l < w * 32 + 32; l++)
                    if (B.f[(size_t)l].state == AT_WARP) B.f[(size_t)l].state = RUNNABLE;
                released = true;
            }
        if (!released && B.block_waiting == B.live) {
            B.block_waiting = 0;
            for (int t = 0; t < threads; t++)
                if (B.f[(size_t)t].state == AT_BLOCK) B.f[(size_t)t].state = RUNNABLE;
            released = true;
        }
        if (!released) {
            int at_warp = 0, done = 0;
            for (int t = 0; t < threads; t++) {
                at_warp += B.f[(size_t)t].state == AT_WARP;
                done += B.f[(size_t)t].state == DONE;
            }
            fprintf(stderr,
                    "cuda emulation: %s block (%u,%u,%u): no barrier can release (%d threads at __syncthreads, %d at a "
                    "warp collective whose warp has lanes that exited or wait elsewhere, %d exited)\n",
                    B.name, blockIdx.x, blockIdx.y, blockIdx.z, B.block_waiting, at_warp, done);
            B.failed = true;
            break;
        }
        for (int k = 0; k < threads && !B.failed; k++) {
            int t = B.order[(size_t)k];
            if (B.f[(size_t)t].state == RUNNABLE) resume(t);
        }
    }
    /* a failed block abandons its waiting fibers: their stacks go back unused */
    for (int t = 0; t < threads; t++)
        if (B.f[(size_t)t].stack) {
#ifdef VP_EMU_ASAN
            __asan_unpoison_memory_region(B.f[(size_t)t].stack, STACK_BYTES); /* frames that never returned */
#endif
            free_stacks.push_back(B.f[(size_t)t].stack);
            B.f[(size_t)t].stack = nullptr;
        }
}

std::vector<unsigned char> dyn_shared;

/* VP_CUDA_EMU_STATS=1: launches per kernel, printed at exit (which kernels a test reached) */
std::map<std::string, long long> kernel_launches;

void print_stats() {
    for (auto &k : kernel_launches) fprintf(stderr, "cuda emulation: %8lld launches of %s\n", k.second, k.first.c_str());
}

} // namespace

/* ---- the device side ---- */

void __syncthreads(void) {
    fiber &me = B.f[(size_t)B.cur];
    me.state = AT_BLOCK;
    B.block_waiting++;
    yield_to_scheduler(false);
}

void __syncwarp(unsigned) { (void)vp_emu::warp_exchange(0); }

void __threadfence(void) {}

namespace vp_emu {

uint64_t *warp_exchange(uint64_t value) {
    fiber &me = B.f[(size_t)B.cur];
    int t = B.cur, w = t / 32, round = B.warp_round[(size_t)w] & 1;
    B.slots[round][(size_t)t] = value;
    me.state = AT_WARP;
    B.warp_waiting[(size_t)w]++;
    yield_to_scheduler(false);
    /* a lane cannot start the next round before every lane has left this one: the
     * other buffer is safe to write while this one is read */
    return &B.slots[round][(size_t)(w * 32)];
}

void *dynamic_shared(void) { return dyn_shared.data(); }

void run(const char *name, const config &c, void (*body)(void *), void *arg) {
    vp_emu_stream_drain(c.stream); /* what the stream queued runs first */
    launches++;
    static bool init = false;
    if (!init) {
        const char *o = getenv("VP_CUDA_EMU_ORDER");
        order_forward = o && !strcmp(o, "forward");
        const char *st = getenv("VP_CUDA_EMU_STATS");
        if (st && *st && strcmp(st, "0")) atexit(print_stats);
        init = true;
    }
    kernel_launches[name]++;
    uint64_t threads = (uint64_t)c.block.x * c.block.y * c.block.z;
    uint64_t blocks = (uint64_t)c.grid.x * c.grid.y * c.grid.z;
    if (!threads || !blocks || threads > 1024 || c.block.z > 64 || c.grid.y > 65535 || c.grid.z > 65535 ||
        c.grid.x > 2147483647u) {
        fprintf(stderr, "cuda emulation: %s: invalid launch configuration grid (%u,%u,%u) block (%u,%u,%u)\n", name,
                c.grid.x, c.grid.y, c.grid.z, c.block.x, c.block.y, c.block.z);
        set_error(cudaErrorInvalidConfiguration);
        return;
    }
    if (c.shmem > 48 * 1024) {
        fprintf(stderr, "cuda emulation: %s: %zu bytes of dynamic shared memory (48 KiB without an opt-in)\n", name,
                c.shmem);
        set_error(cudaErrorInvalidValue);
        return;
    }
    if (last_error != cudaSuccess) return; /* as a GPU after a fault: nothing more runs */
    int n = (int)threads, warps = (n + 31) / 32;
    B.f.assign((size_t)n, fiber());
    for (int t = 0; t < n; t++)
        B.f[(size_t)t].idx = uint3{(unsigned)t % c.block.x, (unsigned)t / c.block.x % c.block.y,
                                   (unsigned)t / (c.block.x * c.block.y)};
    B.warp_waiting.assign((size_t)warps, 0);
    B.warp_round.assign((size_t)warps, 0);
    B.warp_lanes.assign((size_t)warps, 32);
    if (n % 32) B.warp_lanes[(size_t)warps - 1] = n % 32;
    B.slots[0].assign((size_t)warps * 32, 0);
    B.slots[1].assign((size_t)warps * 32, 0);
    B.body = body;
    B.arg = arg;
    B.name = name;
    B.failed = false;
    permutation(B.order, n);
    dyn_shared.assign(c.shmem ? c.shmem : 16, 0xcd); /* garbage, as uninitialised shared memory */
    blockDim = c.block;
    gridDim = c.grid;
    std::vector<int> block_order;
    /* grids past a million blocks run in order (the permutation's table would be large) */
    if (blocks <= (1u << 20)) permutation(block_order, (int)blocks);
    for (uint64_t k = 0; k < blocks && !B.failed; k++) {
        uint64_t b = blocks <= (1u << 20) ? (uint64_t)block_order[(size_t)k] : k;
        blockIdx = uint3{(unsigned)(b % c.grid.x), (unsigned)(b / c.grid.x % c.grid.y),
                         (unsigned)(b / ((uint64_t)c.grid.x * c.grid.y))};
        run_block(n);
    }
    if (B.failed) set_error(cudaErrorLaunchFailure);
}

} // namespace vp_emu

/* ---- the runtime API ---- */

extern "C" {

long long vp_emu_launch_count(void) { return launches; }

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
