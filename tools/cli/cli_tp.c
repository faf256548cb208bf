/* A split weight made whole after the steps: the ranks' slices all-gathered, then put
 * back in place (vp_tp_unslice_tensor). */
#include <stdlib.h>

#include "cli_tp.h"
#include "parallel/parallel.h"

vp_status cli_tp_gather(vp_comm *comm, int axis, int blocks, vp_tensor *v, vp_error *err) {
    size_t bytes = vp_tensor_nbytes(v);
    char *parts = malloc(bytes * (size_t)comm->size + 1);
    if (!parts) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    vp_tensor full = {0};
    vp_status s = vp_comm_allgather(comm, v->data, parts, (int64_t)bytes, err);
    if (!s) s = vp_tp_unslice_tensor(v, parts, axis, blocks, comm->size, &full, err);
    free(parts);
    if (s) return s;
    free(v->data);
    *v = full;
    return VP_OK;
}
