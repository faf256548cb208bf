/* The oneDNN fast path of the CPU backend (float32 convolutions and their gradients).
 *
 * In: a node about to run and its tensors.  Out: the node's outputs computed by oneDNN
 * primitives, or "not handled" so that the reference kernel runs (float64, narrow
 * types, shapes or attributes oneDNN does not cover).  Keeps true: a node's primitives
 * are created once, on its first run, and reused while its shapes and window stay the
 * same (the cache is keyed by node and checked against a signature, so a backend reused
 * for another graph rebuilds rather than misreads); the same primitive on the same
 * shapes gives the same bits, so naive and planned execution agree.
 *
 * oneDNN picks its own (blocked) layouts; our tensors stay plain NCHW, so reorders run
 * around each primitive.  The reordered copies and the primitives' scratchpads
 * (user-mode scratchpad) of a node go in the workspace its caller hands it: a planned
 * step's buffer in the arena (memory/workspace.h sizes it with vp_dn_workspace_bytes_memo
 * on the planning machine); without one that holds them (naive execution, a plan made
 * for fewer threads or another machine), in one host buffer owned by the context,
 * grown to the largest any node needs. */
#ifndef VP_DN_H
#define VP_DN_H

#include "ir/ir.h"

typedef struct vp_dn vp_dn;

/* NULL when oneDNN cannot start (no engine): the backend then runs the reference. */
vp_dn *vp_dn_new(void);
void vp_dn_free(vp_dn *d);

/* Whether n's op is one oneDNN may take (it still may refuse its shapes or attributes
 * at run time, and the reference then runs): codegen routes these through vp_dn_run. */
int vp_dn_may_cover(const vp_node *n);

/* Runs n on oneDNN when covered (*handled = 1); else *handled = 0 and nothing ran.  ws
 * (64-byte aligned, ws_bytes long; NULL for none) holds the node's reorders and
 * scratchpad when large enough. */
vp_status vp_dn_run(vp_dn *d, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, void *ws,
                    size_t ws_bytes, int *handled, vp_error *err);

/* The bytes of workspace n's primitives use on this machine at this thread count
 * (reordered copies and scratchpad), building them as vp_dn_prepare does; 0 when
 * oneDNN does not take n.  Tensors need shapes, not data. */
vp_status vp_dn_workspace_bytes(vp_dn *d, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                int64_t *bytes, vp_error *err);

/* vp_dn_workspace_bytes through the process's memo of sizes (dn_memo.c): each distinct
 * primitive is built once per process, keyed by everything that changes oneDNN's answer
 * (op, dtypes, every shape, strides, pads, dilations, groups, which gradients, bias, the
 * threads it is built for, the ISA oneDNN dispatches to and its hints, its default
 * floating-point math mode).  *d is the context that builds on a miss, created then when
 * NULL (the caller frees it): a plan whose every convolution is known creates none.
 * Thread-safe; the memo is freed at exit. */
vp_status vp_dn_workspace_bytes_memo(vp_dn **d, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                     int64_t *bytes, vp_error *err);

/* The memo's counters since the last clear: lookups answered, lookups that built, and
 * sizes held (for tests and benchmarks). */
typedef struct vp_dn_memo_counts {
    int64_t hits, misses, sizes;
} vp_dn_memo_counts;
vp_dn_memo_counts vp_dn_memo_count(void);
/* Forgets every size and zeroes the counters (tests). */
void vp_dn_memo_clear(void);

/* Builds n's primitives now (as its first vp_dn_run would), so that a later run only
 * executes them: for generated steps, whose init prepares every node of the plan.
 * Nothing runs and no tensor's data is read; an uncovered node is left to the reference. */
vp_status vp_dn_prepare(vp_dn *d, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);

/* Which float32 matrix product the kernels' vp_lin_gemm calls on this thread: oneDNN's
 * sgemm (on) or OpenBLAS (off, the reference).  The backend selects it before each node:
 * one OpenMP thread pool for the whole fast path, rather than OpenBLAS's threads
 * spinning beside OpenMP's on the same cores. */
void vp_dn_gemm_select(int on);
int vp_dn_gemm_selected(void);

/* Bytes of the context's own reorder/scratchpad buffer (for reports and tests: 0 while
 * every node ran in a planned workspace). */
size_t vp_dn_scratch_bytes(const vp_dn *d);

#endif
