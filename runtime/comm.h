/* Collectives behind a small vtable, so the executors see one interface whatever moves
 * the bytes: Open MPI between processes (runtime/comm/comm_mpi.c, MPI_Allreduce on host
 * memory) or NCCL between GPUs (runtime/cuda/nccl_comm.c, its unique id broadcast over
 * MPI).  A backend holding a communicator (vp_backend.comm) runs the ops flagged
 * VP_OP_COLLECTIVE through it; without one they are the one-rank case.
 *
 * Every all-reduce is counted here: the bytes one rank sends in a ring all-reduce,
 * 2 (n - 1) / n of the payload (vp_tp_ring_bytes), the figure the planner reports per
 * step, so a run can show planned and counted side by side. */
#ifndef VP_COMM_H
#define VP_COMM_H

#include <stdint.h>

#include "ir/ir.h"
#include "parallel/parallel.h"

typedef struct vp_comm vp_comm;

/* What an all-reduce combines: the sum (tensor-parallel partial products) or the
 * maximum (the shift of a softmax split across ranks, vocabulary-parallel). */
typedef enum vp_comm_op { VP_COMM_SUM = 0, VP_COMM_MAX } vp_comm_op;

typedef struct vp_comm_iface {
    const char *name;
    /* Combines count elements across ranks in place (memory of the backend it serves). */
    vp_status (*allreduce)(vp_comm *c, void *buf, int64_t count, vp_dtype dt, vp_comm_op op, vp_error *err);
    /* Copies bytes of host memory from root to every rank. */
    vp_status (*broadcast)(vp_comm *c, void *buf, int64_t bytes, int root, vp_error *err);
    /* Every rank's `bytes` of send, in rank order, into recv (size * bytes) on every rank. */
    vp_status (*allgather)(vp_comm *c, const void *send, void *recv, int64_t bytes, vp_error *err);
    /* send holds size blocks of count elements; rank r receives the sum over ranks of
     * block r in recv (count elements). */
    vp_status (*reduce_scatter)(vp_comm *c, const void *send, void *recv, int64_t count, vp_dtype dt, vp_error *err);
    /* Optional (NULL: each call completes alone).  begin != 0 opens a group: the calls
     * up to the closing call (begin == 0) may be launched as one, and complete when it
     * returns (NCCL's ncclGroupStart/End: one launch for all of a tensor's rows). */
    vp_status (*group)(vp_comm *c, int begin, vp_error *err);
    void (*destroy)(vp_comm *c);
} vp_comm_iface;

struct vp_comm {
    const vp_comm_iface *iface;
    void *ctx;
    int rank, size;
    int64_t bytes_sent; /* ring all-reduce bytes this rank sent since the last reset */
    int64_t calls;      /* all-reduces since the last reset */
};

/* Whether this process was started by mpirun (Open MPI's or a PMI launcher's
 * environment): only then is MPI initialised, so a plain run needs no MPI at all. */
int vp_comm_launched(void);

/* MPI_COMM_WORLD over host memory; initialises MPI (once) and finalises it on free. */
vp_status vp_comm_mpi_new(vp_comm **out, vp_error *err);

/* Counts, then all-reduces through the implementation.  Inline, so that the backends in
 * libvplanrt (which generated steps link) need nothing of the rest of this interface. */
static inline vp_status vp_comm_allreduce(vp_comm *c, void *buf, int64_t count, vp_dtype dt, vp_comm_op op,
                                          vp_error *err) {
    c->bytes_sent += vp_tp_ring_bytes(count * (int64_t)vp_dtype_size(dt), c->size);
    c->calls++;
    return c->iface->allreduce(c, buf, count, dt, op, err);
}
/* Sequence parallelism's pair, counted as a ring sends them: (n - 1)/n of the gathered
 * (or scattered) whole, the figure vp_tp_node_bytes plans. */
static inline vp_status vp_comm_gather_counted(vp_comm *c, const void *send, void *recv, int64_t bytes, vp_error *err) {
    c->bytes_sent += vp_tp_gather_bytes(bytes * c->size, c->size);
    c->calls++;
    return c->iface->allgather(c, send, recv, bytes, err);
}
static inline vp_status vp_comm_reduce_scatter(vp_comm *c, const void *send, void *recv, int64_t count, vp_dtype dt,
                                               vp_error *err) {
    c->bytes_sent += vp_tp_gather_bytes(count * c->size * (int64_t)vp_dtype_size(dt), c->size);
    c->calls++;
    return c->iface->reduce_scatter(c, send, recv, count, dt, err);
}
/* The pair along an axis of a tensor with `rows` rows before it, one collective a row:
 * each rank's chunk of a row lies whole in the gathered row ([rows][rank][chunk]), so
 * each row moves between the caller's buffers as it is, no staging nor reordering (the
 * CUDA backend's way: device memory), the rows grouped into one launch where the
 * communicator groups.  Counted once for the whole, as above. */
static inline vp_status vp_comm_gather_rows(vp_comm *c, const void *send, void *recv, int64_t rows, int64_t bytes,
                                            vp_error *err) {
    c->bytes_sent += vp_tp_gather_bytes(rows * bytes * c->size, c->size);
    c->calls++;
    vp_status s = rows > 1 && c->iface->group ? c->iface->group(c, 1, err) : VP_OK;
    if (s) return s;
    for (int64_t r = 0; r < rows && !s; r++)
        s = c->iface->allgather(c, (const char *)send + r * bytes, (char *)recv + r * bytes * c->size, bytes, err);
    vp_error end_err;
    vp_status e = rows > 1 && c->iface->group ? c->iface->group(c, 0, s ? &end_err : err) : VP_OK;
    return s ? s : e;
}
static inline vp_status vp_comm_reduce_scatter_rows(vp_comm *c, const void *send, void *recv, int64_t rows, int64_t count,
                                                    vp_dtype dt, vp_error *err) {
    int64_t bytes = count * (int64_t)vp_dtype_size(dt);
    c->bytes_sent += vp_tp_gather_bytes(rows * bytes * c->size, c->size);
    c->calls++;
    vp_status s = rows > 1 && c->iface->group ? c->iface->group(c, 1, err) : VP_OK;
    if (s) return s;
    for (int64_t r = 0; r < rows && !s; r++)
        s = c->iface->reduce_scatter(c, (const char *)send + r * bytes * c->size, (char *)recv + r * bytes, count, dt, err);
    vp_error end_err;
    vp_status e = rows > 1 && c->iface->group ? c->iface->group(c, 0, s ? &end_err : err) : VP_OK;
    return s ? s : e;
}
vp_status vp_comm_broadcast(vp_comm *c, void *buf, int64_t bytes, int root, vp_error *err);
vp_status vp_comm_allgather(vp_comm *c, const void *send, void *recv, int64_t bytes, vp_error *err);
void vp_comm_free(vp_comm *c);

#endif
