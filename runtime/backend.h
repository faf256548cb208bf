/* The backend interface: what a device must offer to execute a graph or a plan.
 *
 * A small vtable (as ggml's backends): allocate and free device memory, copy to and
 * from the host, run one node on tensors that live in that memory, synchronize.
 * The CPU backend is the reference; CUDA sits behind the same table.  The planner sees
 * only the alignment. */
#ifndef VP_BACKEND_H
#define VP_BACKEND_H

#include <stddef.h>

#include "ir/ir.h"

typedef struct vp_backend vp_backend;

/* The steps of optimizer-state offload (planner/train/offload.h), as a planned executor
 * sees them by where their buffers live: a gradient copied out to the host block, the
 * update on the host block, an updated weight copied back. */
typedef enum vp_host_step {
    VP_STEP_TO_HOST,   /* a same-dtype Cast, device input, host output */
    VP_STEP_ON_HOST,   /* every input and output in the host block */
    VP_STEP_TO_DEVICE, /* a same-dtype Cast, host input, device output */
} vp_host_step;

typedef struct vp_backend_iface {
    const char *name;
    size_t alignment;   /* bytes; offsets in an arena are multiples of this */
    int host_memory;    /* device pointers are host pointers (no copies needed) */
    vp_status (*alloc)(vp_backend *b, size_t bytes, void **ptr, vp_error *err);
    void (*free)(vp_backend *b, void *ptr);
    vp_status (*copy_to_device)(vp_backend *b, void *dst, const void *src, size_t bytes, vp_error *err);
    vp_status (*copy_to_host)(vp_backend *b, void *dst, const void *src, size_t bytes, vp_error *err);
    /* Runs one node; tensors' data pointers are device memory, NULL inputs are omitted. */
    vp_status (*run_node)(vp_backend *b, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                          vp_error *err);
    vp_status (*synchronize)(vp_backend *b, vp_error *err);
    void (*destroy)(vp_backend *b);
    /* Offload on a backend whose memory is not the host's (NULL where host_memory is set,
     * or where the backend does not run it): the host block in page-locked host memory
     * (zeroed), and the steps that touch it, queued in order with the device's own; a
     * host tensor's data is a host pointer into that block.  synchronize() waits for them. */
    vp_status (*alloc_host)(vp_backend *b, size_t bytes, void **ptr, vp_error *err);
    void (*free_host)(vp_backend *b, void *ptr);
    vp_status (*run_host_step)(vp_backend *b, vp_host_step kind, const vp_node *n, const vp_tensor *const *in,
                               vp_tensor *const *out, vp_error *err);
} vp_backend_iface;

struct vp_comm;

struct vp_backend {
    const vp_backend_iface *iface;
    void *ctx;
    struct vp_comm *comm; /* NULL, or the ranks' collectives (runtime/comm.h): not owned */
    /* The running step's planned workspace (memory/workspace.h), set by the planned
     * executor around run_node: device memory in the plan's arena the step's library
     * calls may use as scratch (cuBLAS, cuDNN); NULL and 0 when it has none.  The CPU
     * backend ignores it. */
    void *workspace;
    size_t workspace_bytes;
};

/* The CPU backend: oneDNN for what it covers, the reference kernels for the rest;
 * only the reference when VP_CPU_REFERENCE is set (not "0") in the environment. */
vp_backend *vp_backend_cpu_new(void);
/* reference: nonzero runs every node on the reference kernels, whatever the environment. */
vp_backend *vp_backend_cpu_new_with(int reference);
/* Whether VP_CPU_REFERENCE asks for the reference kernels. */
int vp_backend_cpu_reference_env(void);
/* Bytes of oneDNN reorders and scratchpad the CPU backend holds outside any plan (for
 * nodes run without a planned workspace that fits them); 0 when none ran so. */
size_t vp_backend_cpu_own_scratch(const vp_backend *b);
void vp_backend_free(vp_backend *b);

/* Zeroes device memory (state that starts at zero): in place on host memory, else a
 * copy from zeroed host chunks. */
vp_status vp_backend_zero(vp_backend *b, void *ptr, size_t bytes, vp_error *err);

/* The argument arrays a runner hands run_node, sized for the widest node of g (a
 * DenseNet Concat and its gradient Split have as many as the block has layers). */
typedef struct vp_io_args {
    vp_tensor *tin, *tout;
    const vp_tensor **pin;
    vp_tensor **pout;
} vp_io_args;
vp_status vp_io_args_init(vp_io_args *a, const vp_graph *g, vp_error *err);
/* Points a's arguments at n's values as the graph describes them (shape, dtype, the
 * data a value holds ahead of time or NULL): for asking a kernel library about a node
 * without running it.  NULL for an omitted input or output. */
void vp_io_args_describe(vp_io_args *a, const vp_graph *g, const vp_node *n);
void vp_io_args_free(vp_io_args *a);

#endif
