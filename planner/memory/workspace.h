/* Planned workspaces: the scratch memory a device library wants during one step
 * (cuBLAS for a matrix product, cuDNN for a convolution and its gradients), given to
 * that step as a buffer of the arena instead of an allocation of the runtime's own.
 *
 * In: a plan after liveness and its device profile.  Out: one buffer per step that
 * wants one (category workspace, live during that step only, a uint8 value flagged
 * VP_VAL_WORKSPACE that no node reads or writes), p->workspace[step] naming it.
 * Keeps true: a profile whose caps are 0 (the CPU) gets none, so its plans are what
 * they were; the sizes depend only on the step's shapes and the profile, so planning
 * the same graph twice gives the same buffers.
 *
 * The rule, per step:
 *   convolution (Conv, ConvGrad): min(conv_workspace, im2col bytes), im2col being
 *     the column matrix of the whole batch, N * prod(output spatial) * C * prod(kernel)
 *     elements of the input's dtype: what a GEMM-based algorithm lays out, the
 *     largest of cuDNN's usual needs (the implicit-GEMM algorithms need none);
 *   matrix product (MatMul, Gemm, FusedMatMul, GeluMatMul and its gradient):
 *     min(blas_workspace, 4 float32 copies of the largest output), room for a split-K
 *     reduction of four partial products, the use cuBLAS's heuristics make of it.
 * At run time the CUDA backend hands cuBLAS this buffer (cublasSetWorkspace) and picks
 * the fastest cuDNN algorithm whose workspace fits it (runtime/cuda/cudnn_select.h).
 *
 * On the CPU profile (host_dnn), a convolution oneDNN takes (Conv, ConvGrad in float32)
 * gets what oneDNN's primitives for it use beside its tensors on the planning machine:
 * the copies reordered to oneDNN's blocked layouts and the scratchpad (runtime/cpu/dn.h
 * asks the library, at OpenMP's thread count, once per distinct primitive in a process:
 * a memo keyed by everything the answer depends on, so checkpointing's many candidate
 * plans ask it nothing new); the CPU backend runs them there.  A plan run where oneDNN
 * wants more (more threads, another ISA) still runs, in a buffer of the backend's own,
 * with the same bits. */
#ifndef VP_WORKSPACE_H
#define VP_WORKSPACE_H

#include "memory/plan.h"

typedef enum vp_workspace_kind {
    VP_WORKSPACE_NONE = 0,
    VP_WORKSPACE_BLAS, /* a cuBLAS product */
    VP_WORKSPACE_CONV, /* a cuDNN convolution or its gradients */
} vp_workspace_kind;

/* Which library the node's CUDA kernel calls, by op. */
vp_workspace_kind vp_workspace_kind_of(const vp_node *n);

/* The node's planned workspace bytes on dev (before alignment), 0 for none. */
int64_t vp_workspace_bytes(const vp_graph *g, const vp_node *n, const vp_device_profile *dev);

/* What a plan's workspaces add up to: how many steps have one, the largest (each is
 * live during its own step only, so the arena holds at most the largest at once) and
 * their summed sizes. */
typedef struct vp_workspace_summary {
    int steps, blas_steps, conv_steps;
    int64_t largest, total;
} vp_workspace_summary;
vp_workspace_summary vp_plan_workspace_summary(const vp_plan *p);

#endif
