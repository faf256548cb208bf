/* A kernel launch on the host (cuda_emu.h says what is modelled): each block's threads
 * are fibers that the scheduler runs in a shuffled order until each exits or waits at a
 * barrier (__syncthreads) or a warp collective, which releases when every thread that
 * must arrive has; blocks run one after another, in a shuffled order too.
 *
 * In: the launch configuration, the kernel's body and argument.  Out: the body run once
 * per thread, or a sticky launch failure (a barrier nothing can release, a stack that
 * cannot be mapped, a configuration a GPU refuses) said on stderr.  Keeps true: one
 * launch at a time on the calling thread; the stream's late work runs before it. */
#include "cuda_emu.h"

#include <sys/mman.h>
#include <ucontext.h>

#include <map>
#include <string>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

long long launches = 0;

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
        vp_emu_set_error(cudaErrorInvalidConfiguration);
        return;
    }
    if (c.shmem > 48 * 1024) {
        fprintf(stderr, "cuda emulation: %s: %zu bytes of dynamic shared memory (48 KiB without an opt-in)\n", name,
                c.shmem);
        vp_emu_set_error(cudaErrorInvalidValue);
        return;
    }
    if (vp_emu_peek_error() != cudaSuccess) return; /* as a GPU after a fault: nothing more runs */
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
    if (B.failed) vp_emu_set_error(cudaErrorLaunchFailure);
}

} // namespace vp_emu

extern "C" long long vp_emu_launch_count(void) { return launches; }
