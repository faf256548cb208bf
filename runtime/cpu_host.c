/* The CPU host (cpu_host.h): the planner's interface to the machine it plans on
 * (planner/ir/host.h), answered by the runtime.
 *
 * In: an op definition (its kernel), a graph and its convolutions (oneDNN's workspace
 * bytes for each).  Out: the kernel of runtime/cpu/cpu_kernels.c; the bytes
 * vp_dn_workspace_bytes_memo gives, from the values' shapes alone.  Keeps true: the
 * planner sees the answers it saw when it called the runtime itself: the same kernels,
 * the same memo, a oneDNN context of the session's own made on the first size the memo
 * lacks and freed with the session. */
#include "cpu_host.h"

#include <stdlib.h>

#include "backend.h"
#include "cpu_kernels.h"
#include "dn.h"
#include "ir/host.h"

typedef struct workspace_session {
    vp_dn *dn;     /* made on the first miss of the memo; NULL until then */
    vp_io_args io; /* the tensors oneDNN is asked about, sized for the graph's widest node */
} workspace_session;

static vp_status workspace_open(const vp_graph *g, void **session, vp_error *err) {
    workspace_session *w = calloc(1, sizeof *w);
    if (!w) return vp_fail(err, VP_ERR_NOMEM, "out of memory planning workspaces");
    vp_status s = vp_io_args_init(&w->io, g, err);
    if (s) {
        free(w);
        return s;
    }
    *session = w;
    return VP_OK;
}

static vp_status workspace_bytes(void *session, const vp_graph *g, const vp_node *n, int64_t *bytes, vp_error *err) {
    workspace_session *w = session;
    *bytes = 0;
    if (!vp_dn_may_cover(n)) return VP_OK;
    vp_io_args_describe(&w->io, g, n);
    return vp_dn_workspace_bytes_memo(&w->dn, n, w->io.pin, w->io.pout, bytes, err);
}

static void workspace_close(void *session) {
    workspace_session *w = session;
    if (!w) return;
    vp_io_args_free(&w->io);
    vp_dn_free(w->dn);
    free(w);
}

static const vp_host cpu_host = {
    .kernel = vp_cpu_kernel_of,
    .workspace_open = workspace_open,
    .workspace_bytes = workspace_bytes,
    .workspace_close = workspace_close,
};

void vp_cpu_host_install(void) { vp_host_install(&cpu_host); }
