/* The collective interface's shared part: launch detection, counting, and the
 * stand-in for builds without MPI. */
#include "comm.h"

#include <stdlib.h>

int vp_comm_launched(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", NULL};
    for (int i = 0; vars[i]; i++)
        if (getenv(vars[i])) return 1;
    return 0;
}

vp_status vp_comm_broadcast(vp_comm *c, void *buf, int64_t bytes, int root, vp_error *err) {
    return c->iface->broadcast(c, buf, bytes, root, err);
}

vp_status vp_comm_allgather(vp_comm *c, const void *send, void *recv, int64_t bytes, vp_error *err) {
    return c->iface->allgather(c, send, recv, bytes, err);
}

void vp_comm_free(vp_comm *c) {
    if (c) c->iface->destroy(c);
}

#ifndef VP_HAVE_MPI
vp_status vp_comm_mpi_new(vp_comm **out, vp_error *err) {
    *out = NULL;
    return vp_fail(err, VP_ERR_UNSUPPORTED, "this onnx-vplan was built without MPI (install libopenmpi-dev and rebuild)");
}
#endif
