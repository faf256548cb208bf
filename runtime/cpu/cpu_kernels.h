/* The CPU kernel of each op: the runtime's half of the op registry.
 *
 * The registry (planner/ir/op_registry.h) says what an op is: its shape function,
 * gradient rule, flags.  Which function computes it on the CPU is said here, one row
 * per registered op keyed by (domain, op type) as the registry spells them, so the
 * planner names nothing of the runtime.  The CPU backend dispatches through
 * vp_cpu_kernel_of(); constant folding reaches the same kernels through the host the
 * runtime installs (runtime/cpu_host.h); codegen names them in generated C. */
#ifndef VP_CPU_KERNELS_H
#define VP_CPU_KERNELS_H

#include "ir/op_registry.h"

/* The kernel of a registered op, NULL when it has none (or op is NULL).  A table
 * lookup the first time an op is asked about, one pointer hash after: cheap enough for
 * every node of every step. */
vp_cpu_fn vp_cpu_kernel_of(const vp_op_def *op);
/* The kernel of (domain, op type) by name: "", "ai.onnx" or NULL for the default domain. */
vp_cpu_fn vp_cpu_kernel_find(const char *domain, const char *op_type);
/* Calls fn for each row of the table (for the check that it and the registry agree). */
void vp_cpu_kernels_foreach(void (*fn)(const char *domain, const char *op_type, vp_cpu_fn kernel, void *ctx),
                            void *ctx);

#endif
