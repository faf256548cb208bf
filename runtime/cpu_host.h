/* The runtime's answers to what the planner asks of the host (planner/ir/host.h): the
 * CPU kernels constant folding runs, and oneDNN's workspace sizes for the CPU profile.
 *
 * Every program that infers shapes or plans (the command, the tests, the benchmarks)
 * calls vp_cpu_host_install() once at its start, before threads of its own; the
 * planner aborts, naming the call, when asked without it.  Generated code (codegen,
 * libvplanrt) neither infers nor plans, and needs none of this. */
#ifndef VP_CPU_HOST_H
#define VP_CPU_HOST_H

/* Installs the CPU host: kernels from runtime/cpu/cpu_kernels.c, workspace sizes from
 * oneDNN through the process's memo (runtime/cpu/dn_memo.c).  Idempotent. */
void vp_cpu_host_install(void);

#endif
