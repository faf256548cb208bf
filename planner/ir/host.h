/* The host: what the planner asks of the machine it plans on, answered by the runtime.
 *
 * The planner runs a node's CPU kernel to fold constants (ir/infer.c, ir/control.c,
 * train/fold_frozen.c) and, on a device profile with host_dnn, asks oneDNN how many
 * bytes a convolution's primitives use (memory/workspace.c).  Both are the runtime's,
 * which stands above the planner, so the planner declares what it needs here and the
 * runtime installs it: every program that infers or plans calls vp_cpu_host_install()
 * (runtime/cpu_host.h) once at its start, before any thread of its own.
 *
 * Without it the planner cannot give the plans it gives with it, so it never goes on
 * quietly: the first fold or oneDNN sizing asked for aborts, naming the node and the
 * missing call. */
#ifndef VP_HOST_H
#define VP_HOST_H

#include <stdint.h>

#include "ir/op_registry.h"

typedef struct vp_host {
    /* The op's CPU kernel, NULL when it has none (then nothing folds it). */
    vp_cpu_fn (*kernel)(const vp_op_def *op);
    /* oneDNN's workspace sizes for one plan: open makes a session sized for g's widest
     * node; bytes answers for a convolution or its gradient n of g (0 when oneDNN does
     * not take it); close frees what open made. */
    vp_status (*workspace_open)(const vp_graph *g, void **session, vp_error *err);
    vp_status (*workspace_bytes)(void *session, const vp_graph *g, const vp_node *n, int64_t *bytes,
                                 vp_error *err);
    void (*workspace_close)(void *session);
} vp_host;

/* Makes host the one the planner asks (NULL: none); it must outlive every use. */
void vp_host_install(const vp_host *host);
/* The installed host.  Aborts naming n (when not NULL) and what the planner was about
 * to do (`what`) when none is: a program that infers or plans must install one first. */
const vp_host *vp_host_get(const vp_node *n, const char *what);

#endif
