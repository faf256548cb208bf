/* The plan: one step order, one buffer per runtime value with its lifetime, category
 * and offset in one arena.  Built by the passes schedule -> liveness -> arena over a
 * training graph; written by planner/plan/plan_file.c, executed by runtime/plan_exec.c.
 *
 * Buffers that share storage (an update writing its parameter in place, carried
 * state, a view of its input, an op writing over a dead input) form alias groups: the
 * group's root holds the offset and the union lifetime. */
#ifndef VP_PLAN_H
#define VP_PLAN_H

#include "memory/arena/arena.h"
#include "ir/ir.h"
#include "train/training.h"

typedef enum vp_category {
    VP_CAT_PARAMETERS = 0,
    VP_CAT_GRADIENTS,
    VP_CAT_OPTIMIZER_STATE,
    VP_CAT_ACTIVATIONS, /* forward values still live when the backward pass starts, whoever
                           reads them (backward, recompute, the caller), directly or through a view */
    VP_CAT_TEMPORARIES,
    VP_CAT_WORKSPACE,
    VP_CAT_INPUTS,      /* data fed each step */
    VP_CAT_CONSTANTS,   /* folded values, frozen non-float initializers */
    VP_CAT_WEIGHT_COPIES, /* a parameter's low-precision copy (planner/precision): a Cast of the
                             parameter, made once a step and read by forward and backward;
                             or its fake-quantised copy (planner/quant), a FakeQuant of it */
    VP_CAT_COMM,        /* communication buffers: what a tensor-parallel all-reduce reads or
                           writes (planner/parallel), unless it is an activation or a gradient */
    VP_CAT_HOST,        /* host memory (optimizer-state offload): Adam's state, its host master
                           weights and the update's buffers; in the host block, not the arena */
    VP_CAT_COUNT,
} vp_category;

const char *vp_category_name(vp_category c);

typedef struct vp_buffer {
    int value;          /* value id in the graph */
    vp_category cat;
    int64_t bytes;      /* element count times dtype size */
    int64_t size;       /* bytes rounded up to the alignment */
    int first, last;    /* steps during which it is live, inclusive */
    int alias_of;       /* -1, or the buffer whose storage this one shares */
    int64_t offset;     /* in the arena */
    int tp_axis;        /* a tensor-parallel rank's slice of a split weight: along tp_axis, */
    int tp_blocks;      /* of each of tp_blocks equal blocks, its chunk (0: whole) */
} vp_buffer;

typedef struct vp_device_profile {
    const char *name;
    int64_t alignment;       /* bytes */
    double peak_flops_fp32;  /* FLOP/s */
    double peak_flops_fp16;
    double mem_bandwidth;    /* bytes/s */
    double launch_overhead;  /* seconds per kernel */
    double link_bandwidth;   /* bytes/s one rank sends to the next (tensor-parallel all-reduces) */
    double link_latency;     /* seconds per all-reduce step */
    const char *precisions;  /* "fp32,bf16,fp16": what its kernels run fast (the joint search's choices) */
    double host_link_bandwidth; /* bytes/s between device and host memory (PCIe; offload's transfers) */
    double host_bandwidth;      /* bytes/s of host memory (offload's update, bandwidth-bound, runs there) */
    int64_t blas_workspace;     /* bytes: the most a matrix product's planned workspace holds (cuBLAS;
                                   NVIDIA recommends 32 MiB on Hopper, 4 MiB before); 0: none planned */
    int64_t conv_workspace;     /* bytes: the most a convolution's planned workspace holds (cuDNN's
                                   algorithms); 0: none planned */
    int host_dnn;               /* convolutions run on oneDNN on this machine's CPU: each one's
                                   workspace is what oneDNN says its primitives use */
} vp_device_profile;

/* "cpu", "a100", "h100", "h200"; NULL when unknown. */
const vp_device_profile *vp_device_find(const char *name);

typedef struct vp_plan {
    vp_graph *g;             /* the training graph the plan is of (not owned) */
    vp_device_profile device;
    int fused_update;
    int n_steps;
    int *steps;              /* node ids in execution order */
    int n_buffers;
    vp_buffer *buffers;
    int *buffer_of;          /* value id -> buffer index, -1 when the value needs none */
    int64_t arena_bytes;
    int64_t host_bytes;      /* the host block (VP_CAT_HOST buffers, offsets in it): 0 without offload */
    int64_t lower_bound_bytes;
    int unplaced;            /* no offsets: the lower bound alone exceeded vp_arena_opts.stop_above
                                (arena_bytes is the bound); such a plan is weighed, never kept */
    int peak_step;           /* a step where live bytes reach the lower bound */
    int64_t category_bytes[VP_CAT_COUNT]; /* summed sizes of alias groups, each by its root's category */
    int64_t budget_bytes;    /* 0: none */
    vp_arena_result arena;
    double planning_seconds;
    int loss_buffer;
    int *workspace;          /* per step: the buffer of its planned workspace (memory/workspace.h), -1 none;
                                NULL when no step has one */
} vp_plan;

/* Whether node n is a view: output 0 holds input 0's bytes under another shape
 * (Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout when not training), so the
 * two may share storage and the step then does no work. */
int vp_node_is_view(const vp_graph *g, const vp_node *n);

/* Orders the nodes: forward, loss, backward, and with fused_update each optimizer
 * update right after the last node that reads its parameter or writes its gradient. */
vp_status vp_schedule(vp_plan *p, const vp_training *t, vp_error *err);
/* One buffer per value the steps read or write, categories, lifetimes, alias groups. */
vp_status vp_liveness(vp_plan *p, const vp_training *t, vp_error *err);
/* Workspace buffers for the steps whose device kernels want scratch memory (workspace.c). */
vp_status vp_plan_workspaces(vp_plan *p, vp_error *err);
/* Offsets from the arena solver; fills the summary figures. */
vp_status vp_assign_offsets(vp_plan *p, const vp_arena_opts *opts, vp_error *err);

/* The passes in order (schedule, liveness, workspaces, offsets), timed. */
vp_status vp_plan_build(vp_plan *p, vp_graph *g, const vp_training *t, const vp_device_profile *dev, int fused_update,
                        vp_error *err);
/* The same with arena options (NULL: the defaults); checkpointing weighs candidates
 * without the arena's improving search and polishes only the plan it keeps. */
vp_status vp_plan_build_opts(vp_plan *p, vp_graph *g, const vp_training *t, const vp_device_profile *dev,
                             int fused_update, const vp_arena_opts *opts, vp_error *err);
void vp_plan_free(vp_plan *p);

#endif
