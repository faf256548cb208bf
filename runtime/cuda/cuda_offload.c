/* Optimizer-state offload on the CUDA backend (planner/train/offload.h; backend.h's
 * alloc_host, free_host, run_host_step).
 *
 * In:  an offloaded plan's host steps in plan order (runtime/plan_exec.c tells them
 *      apart by where their buffers live): device tensors in the arena, host tensors in
 *      the host block, which is page-locked memory (cudaHostAlloc) so that copies to and
 *      from it are asynchronous DMA.
 * Out: every host step queued on a second stream, the copy stream:
 *        TO_HOST    a gradient copied out (device to host), after an event on the compute
 *                   stream says the kernels queued before it are done;
 *        ON_HOST    the update itself, a host function running the CPU backend's kernel
 *                   on the host block;
 *        TO_DEVICE  the updated weight copied back (host to device), likewise after the
 *                   compute stream's work queued before it.
 *      The calling thread never waits for the host update and the compute stream never
 *      waits for the copy stream except where one of its kernels would touch device
 *      memory a queued copy still reads (a gradient on its way out: its storage reused)
 *      or writes (a weight on its way in): run_op asks vp_cuda_offload_order before every
 *      kernel, which makes the compute stream wait for that copy's event alone.
 * Keeps true: a copy starts after everything the compute stream queued before it (its
 *      source is final; the weight it overwrites is read no more: the plan orders that);
 *      a kernel that reuses or reads a copy's device memory starts after the copy; an
 *      update runs after its gradient arrives and before its weight leaves (one stream,
 *      in order); synchronize waits for both streams and reports a failed update.
 *      Events and argument records are made on the first step and reused after every
 *      synchronize: nothing is allocated on the device while a step runs. */
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

enum { TASK_MAX_IO = 16 };

/* One host update's arguments, alive until the next synchronize (the host function
 * runs after run_host_step has returned). */
typedef struct host_task {
    vp_backend *cpu;
    const vp_node *n;
    vp_tensor tin[TASK_MAX_IO], tout[TASK_MAX_IO];
    const vp_tensor *in[TASK_MAX_IO];
    vp_tensor *out[TASK_MAX_IO];
    vp_status s;
    vp_error err;
} host_task;

/* A queued copy's device range, until the compute stream has waited for it. */
typedef struct pending_copy {
    const char *lo, *hi;
    cudaEvent_t done;
    int writes; /* host to device: the compute stream may neither read nor write the range */
} pending_copy;

struct cuda_offload {
    vp_backend *cpu; /* the host update's kernels */
    host_task **tasks;
    int n_tasks, used_tasks;
    cudaEvent_t *events;
    int n_events, used_events;
    pending_copy *pending;
    int n_pending, cap_pending;
};

static cuda_ctx *ctx_of(vp_backend *b) { return b->ctx; }

vp_status vp_cuda_offload_alloc_host(vp_backend *b, size_t bytes, void **ptr, vp_error *err) {
    (void)b;
    *ptr = NULL;
    vp_status s = vp_cuda_check(cudaHostAlloc(ptr, bytes ? bytes : 1, cudaHostAllocDefault), NULL, "cudaHostAlloc (the host block)", err);
    if (!s) memset(*ptr, 0, bytes); /* as every allocation of the backends: zeroed */
    return s;
}

void vp_cuda_offload_free_host(vp_backend *b, void *ptr) {
    cuda_ctx *c = ctx_of(b);
    if (!ptr) return;
    if (c->copy_stream) cudaStreamSynchronize(c->copy_stream);
    cudaFreeHost(ptr);
}

static vp_status start(cuda_ctx *c, vp_error *err) {
    if (c->off) return VP_OK;
    c->off = calloc(1, sizeof *c->off);
    if (!c->off) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    c->off->cpu = vp_backend_cpu_new();
    if (!c->off->cpu) return vp_fail(err, VP_ERR_NOMEM, "out of memory (the host update's CPU backend)");
    return vp_cuda_check(cudaStreamCreateWithFlags(&c->copy_stream, cudaStreamNonBlocking), NULL, "cudaStreamCreate (copies)", err);
}

static vp_status next_event(struct cuda_offload *o, cudaEvent_t *ev, vp_error *err) {
    if (o->used_events == o->n_events) {
        cudaEvent_t *e = realloc(o->events, (size_t)(o->n_events + 1) * sizeof *e);
        if (!e) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
        o->events = e;
        vp_status s = vp_cuda_check(cudaEventCreateWithFlags(&e[o->n_events], cudaEventDisableTiming), NULL, "cudaEventCreate", err);
        if (s) return s;
        o->n_events++;
    }
    *ev = o->events[o->used_events++];
    return VP_OK;
}

static vp_status next_task(struct cuda_offload *o, host_task **t, vp_error *err) {
    if (o->used_tasks == o->n_tasks) {
        host_task **a = realloc(o->tasks, (size_t)(o->n_tasks + 1) * sizeof *a);
        if (!a) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
        o->tasks = a;
        if (!(a[o->n_tasks] = calloc(1, sizeof **a))) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
        o->n_tasks++;
    }
    *t = o->tasks[o->used_tasks++];
    return VP_OK;
}

static void run_task(void *arg) { /* on a CUDA thread: no CUDA calls here */
    host_task *t = arg;
    t->s = t->cpu->iface->run_node(t->cpu, t->n, t->in, t->out, &t->err);
}

static vp_status queue_update(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    if (n->n_inputs > TASK_MAX_IO || n->n_outputs > TASK_MAX_IO)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "a host update of more than %d inputs or outputs", TASK_MAX_IO);
    host_task *t = NULL;
    vp_status s = next_task(c->off, &t, err);
    if (s) return s;
    t->cpu = c->off->cpu;
    t->n = n;
    t->s = VP_OK;
    for (int k = 0; k < n->n_inputs; k++) {
        if (in[k]) t->tin[k] = *in[k];
        t->in[k] = in[k] ? &t->tin[k] : NULL;
    }
    for (int k = 0; k < n->n_outputs; k++) {
        if (out[k]) t->tout[k] = *out[k];
        t->out[k] = out[k] ? &t->tout[k] : NULL;
    }
    return vp_cuda_check(cudaLaunchHostFunc(c->copy_stream, run_task, t), n, "cudaLaunchHostFunc (the host update)", err);
}

static vp_status queue_copy(cuda_ctx *c, vp_host_step kind, const vp_node *n, const vp_tensor *const *in,
                            vp_tensor *const *out, vp_error *err) {
    const vp_tensor *x = n->n_inputs == 1 ? in[0] : NULL, *y = n->n_outputs == 1 ? out[0] : NULL;
    if (strcmp(n->op_type, "Cast") || !x || !y || x->dtype != y->dtype || vp_tensor_nbytes(x) != vp_tensor_nbytes(y))
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n,
                            "moves a tensor between the host block and the arena but is not a same-type Cast (offload's copies are)");
    size_t bytes = vp_tensor_nbytes(x);
    if (!bytes) return VP_OK;
    struct cuda_offload *o = c->off;
    cudaEvent_t ready = NULL, done = NULL;
    vp_status s = next_event(o, &ready, err);
    if (!s) s = next_event(o, &done, err);
    if (!s) s = LAUNCH(cudaEventRecord(ready, c->stream));
    if (!s) s = LAUNCH(cudaStreamWaitEvent(c->copy_stream, ready, 0));
    int out_bound = kind == VP_STEP_TO_HOST;
    if (!s) s = LAUNCH(cudaMemcpyAsync(y->data, x->data, bytes, out_bound ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice, c->copy_stream));
    if (!s) s = LAUNCH(cudaEventRecord(done, c->copy_stream));
    if (s) return s;
    if (o->n_pending == o->cap_pending) {
        int cap = o->cap_pending ? 2 * o->cap_pending : 64;
        pending_copy *p = realloc(o->pending, (size_t)cap * sizeof *p);
        if (!p) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
        o->pending = p;
        o->cap_pending = cap;
    }
    const char *dev = out_bound ? x->data : y->data;
    o->pending[o->n_pending++] = (pending_copy){dev, dev + bytes, done, !out_bound};
    return VP_OK;
}

vp_status vp_cuda_offload_step(vp_backend *b, vp_host_step kind, const vp_node *n, const vp_tensor *const *in,
                               vp_tensor *const *out, vp_error *err) {
    cuda_ctx *c = ctx_of(b);
    vp_status s = start(c, err);
    if (s) return s;
    if (kind == VP_STEP_ON_HOST) return queue_update(c, n, in, out, err);
    return queue_copy(c, kind, n, in, out, err);
}

static int overlaps(const vp_tensor *t, const pending_copy *p) {
    if (!t || !t->data) return 0;
    const char *lo = t->data, *hi = lo + vp_tensor_nbytes(t);
    return lo < p->hi && p->lo < hi;
}

vp_status vp_cuda_offload_order(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                vp_error *err) {
    struct cuda_offload *o = c->off;
    for (int i = 0; o && i < o->n_pending;) {
        const pending_copy *p = &o->pending[i];
        int hit = 0;
        for (int k = 0; k < n->n_outputs && !hit; k++) hit = overlaps(out[k], p);
        for (int k = 0; k < n->n_inputs && !hit && p->writes; k++) hit = overlaps(in[k], p);
        if (!hit) {
            i++;
            continue;
        }
        vp_status s = LAUNCH(cudaStreamWaitEvent(c->stream, p->done, 0));
        if (s) return s;
        o->pending[i] = o->pending[--o->n_pending];
    }
    return VP_OK;
}

vp_status vp_cuda_offload_sync(cuda_ctx *c, vp_error *err) {
    struct cuda_offload *o = c->off;
    if (!o) return VP_OK;
    vp_status s = vp_cuda_check(cudaStreamSynchronize(c->copy_stream), NULL, "cudaStreamSynchronize (copies)", err);
    for (int i = 0; i < o->used_tasks && !s; i++)
        if (o->tasks[i]->s) {
            *err = o->tasks[i]->err;
            s = o->tasks[i]->s;
            vp_error_prefix(err, "the host update: ");
        }
    o->used_tasks = o->used_events = o->n_pending = 0;
    return s;
}

void vp_cuda_offload_free(cuda_ctx *c) {
    struct cuda_offload *o = c->off;
    if (c->copy_stream) {
        cudaStreamSynchronize(c->copy_stream);
        cudaStreamDestroy(c->copy_stream);
    }
    if (!o) return;
    for (int i = 0; i < o->n_events; i++) cudaEventDestroy(o->events[i]);
    for (int i = 0; i < o->n_tasks; i++) free(o->tasks[i]);
    if (o->cpu) vp_backend_free(o->cpu);
    free(o->events);
    free(o->tasks);
    free(o->pending);
    free(o);
    c->off = NULL;
}
