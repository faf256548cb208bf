/* The installed host (ir/host.h).
 *
 * In: the host a program installs once at its start (runtime/cpu_host.c's).  Out: that
 * host, to the planner's constant folding and workspace sizing.  Keeps true: asking
 * without one never falls back to planning without it (a plan would change): it
 * aborts, naming the node and the call the program lacks. */
#include "ir/host.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

static _Atomic(const vp_host *) installed;

void vp_host_install(const vp_host *host) { atomic_store(&installed, host); }

const vp_host *vp_host_get(const vp_node *n, const char *what) {
    const vp_host *h = atomic_load(&installed);
    if (h) return h;
    char node[600] = "";
    if (n) snprintf(node, sizeof node, "node '%s' (%s): ", n->name ? n->name : "", n->op_type ? n->op_type : "?");
    fprintf(stderr,
            "onnx-vplan: internal error: %s%s needs the runtime's host (its CPU kernels, oneDNN), and this program "
            "installed none: it must call vp_cpu_host_install() (runtime/cpu_host.h) at its start\n",
            node, what);
    abort();
}
