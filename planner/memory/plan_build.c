/* Plan assembly: schedule, liveness, offsets; the summary figures; device profiles. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "memory/plan.h"

static const vp_device_profile profiles[] = {
    /* name, alignment, fp32 FLOP/s, fp16 FLOP/s, bytes/s, launch s, link bytes/s, link s:
     * the link is shared memory between processes on the CPU, NVLink one way on the GPUs
     * (A100 NVLink 3: 300 GB/s; H100, H200 NVLink 4: 450 GB/s); the precisions the
     * device computes natively (x86 CPUs: bf16 by AVX512-BF16 and AMX, not fp16); the
     * host link (PCIe 4 x16 on A100 boards, PCIe 5 on H100/H200; the CPU's own memory on
     * the CPU) and the host memory's bandwidth, for optimizer-state offload; the caps of
     * the planned workspaces (workspace.c): cuBLAS's per product, the size NVIDIA's
     * cublasSetWorkspace documentation recommends (32 MiB on Hopper, 4 MiB on earlier
     * GPUs), and cuDNN's per convolution; on the CPU, oneDNN's reorders and scratchpad
     * per convolution, as the library sizes them on the planning machine */
    {"cpu", 64, 1.0e11, 1.0e11, 2.0e10, 1e-7, 5.0e9, 2e-6, "fp32,bf16", 2.0e10, 2.0e10, 0, 0, 1},
    {"a100", 256, 19.5e12, 312e12, 2.0e12, 5e-6, 300e9, 8e-6, "fp32,bf16,fp16", 25e9, 1.0e11, 4 << 20, 64 << 20, 0},
    {"h100", 256, 67e12, 989e12, 3.35e12, 4e-6, 450e9, 6e-6, "fp32,bf16,fp16", 50e9, 2.0e11, 32 << 20, 64 << 20, 0},
    {"h200", 256, 67e12, 989e12, 4.8e12, 4e-6, 450e9, 6e-6, "fp32,bf16,fp16", 50e9, 2.0e11, 32 << 20, 64 << 20, 0},
};

const vp_device_profile *vp_device_find(const char *name) {
    for (size_t i = 0; i < sizeof profiles / sizeof profiles[0]; i++)
        if (!strcmp(profiles[i].name, name)) return &profiles[i];
    return NULL;
}

vp_status vp_assign_offsets(vp_plan *p, const vp_arena_opts *opts, vp_error *err) {
    vp_arena_item *items = malloc(((size_t)p->n_buffers + 1) * sizeof *items);
    int *item_of = malloc(((size_t)p->n_buffers + 1) * sizeof *item_of);
    if (!items || !item_of) {
        free(items);
        free(item_of);
        return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    }
    int n = 0;
    p->host_bytes = 0;
    for (int b = 0; b < p->n_buffers; b++) {
        item_of[b] = -1;
        vp_buffer *buf = &p->buffers[b];
        if (buf->alias_of >= 0) continue;
        if (buf->cat == VP_CAT_HOST) { /* the host block: each its own bytes, allocated once */
            buf->offset = p->host_bytes;
            p->host_bytes += buf->size;
            continue;
        }
        items[n] = (vp_arena_item){buf->size, buf->first, (int64_t)buf->last + 1, 0};
        item_of[b] = n++;
    }
    if (opts && opts->stop_above > 0) {
        int64_t bound = vp_arena_lower_bound(items, n);
        if (bound > opts->stop_above) {
            memset(&p->arena, 0, sizeof p->arena);
            p->arena.arena = p->arena.lower_bound = p->arena_bytes = p->lower_bound_bytes = bound;
            p->unplaced = 1;
            free(items);
            free(item_of);
            return VP_OK;
        }
    }
    vp_status s = vp_arena_solve(items, n, opts, &p->arena, err);
    if (!s) {
        memset(p->category_bytes, 0, sizeof p->category_bytes);
        for (int b = 0; b < p->n_buffers; b++) {
            vp_buffer *buf = &p->buffers[b];
            int root = b;
            while (p->buffers[root].alias_of >= 0) root = p->buffers[root].alias_of;
            buf->offset = item_of[root] >= 0 ? items[item_of[root]].offset : p->buffers[root].offset;
            if (buf->alias_of < 0) p->category_bytes[buf->cat] += buf->size;
        }
        p->arena_bytes = p->arena.arena;
        p->lower_bound_bytes = p->arena.lower_bound;
        p->unplaced = 0;
        /* the step where live bytes peak */
        int64_t *live = calloc((size_t)p->n_steps + 2, sizeof *live);
        if (live) {
            for (int i = 0; i < n; i++) {
                live[items[i].start] += items[i].size;
                live[items[i].end] -= items[i].size;
            }
            int64_t cur = 0, best = -1;
            for (int st = 0; st < p->n_steps; st++) {
                cur += live[st];
                if (cur > best) {
                    best = cur;
                    p->peak_step = st;
                }
            }
            free(live);
        }
    }
    free(items);
    free(item_of);
    return s;
}

vp_status vp_plan_build(vp_plan *p, vp_graph *g, const vp_training *t, const vp_device_profile *dev, int fused_update,
                        vp_error *err) {
    return vp_plan_build_opts(p, g, t, dev, fused_update, NULL, err);
}

vp_status vp_plan_build_opts(vp_plan *p, vp_graph *g, const vp_training *t, const vp_device_profile *dev,
                             int fused_update, const vp_arena_opts *opts, vp_error *err) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    memset(p, 0, sizeof *p);
    p->g = g;
    p->device = *dev;
    p->fused_update = fused_update;
    p->loss_buffer = -1;
    vp_status s = vp_schedule(p, t, err);
    if (!s) s = vp_liveness(p, t, err);
    if (!s) s = vp_plan_workspaces(p, err);
    if (!s) s = vp_assign_offsets(p, opts, err);
    if (!s && t && t->loss >= 0) p->loss_buffer = p->buffer_of[t->loss];
    clock_gettime(CLOCK_MONOTONIC, &t1);
    p->planning_seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    return s;
}

void vp_plan_free(vp_plan *p) {
    free(p->steps);
    free(p->buffers);
    free(p->buffer_of);
    free(p->workspace);
    memset(p, 0, sizeof *p);
}
