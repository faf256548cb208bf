/* Collectives over Open MPI: MPI_COMM_WORLD, one process per rank, host memory.
 *
 * MPI is initialised on the first communicator and finalised when it is freed (one per
 * process; mpirun starts one process per rank).  MPI_Allreduce with MPI_SUM (or MPI_MAX)
 * over the float types is deterministic for a fixed rank count and message size in Open MPI's
 * tuned component, and every rank receives the same bits, which keeps the replicated
 * parts of a tensor-parallel step identical across ranks.  bfloat16 and float16 are summed
 * in float32 and rounded once. */
#include <mpi.h>
#include <stdlib.h>

#include "comm.h"
#include "cpu_util.h"

static vp_status mpi_fail(vp_error *err, int rc, const char *what) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return vp_fail(err, VP_ERR_RUNTIME, "%s: %s", what, msg);
}

/* bfloat16 and float16 (mixed precision): summed in float32 and rounded once to nearest
 * even, as the CPU kernels accumulate and store them. */
static vp_status mpi_allreduce_half(vp_comm *c, void *buf, int64_t count, vp_dtype dt, vp_comm_op op, vp_error *err);

static vp_status mpi_allreduce(vp_comm *c, void *buf, int64_t count, vp_dtype dt, vp_comm_op op, vp_error *err) {
    if (dt == VP_BF16 || dt == VP_F16) return mpi_allreduce_half(c, buf, count, dt, op, err);
    MPI_Datatype t = dt == VP_F32 ? MPI_FLOAT : dt == VP_F64 ? MPI_DOUBLE : MPI_DATATYPE_NULL;
    if (t == MPI_DATATYPE_NULL)
        return vp_fail(err, VP_ERR_UNSUPPORTED, "MPI all-reduce of %s is not supported (float types only)", vp_dtype_name(dt));
    for (int64_t at = 0; at < count;) { /* MPI counts are int */
        int part = count - at > (1 << 30) ? 1 << 30 : (int)(count - at);
        int rc = MPI_Allreduce(MPI_IN_PLACE, (char *)buf + at * (int64_t)vp_dtype_size(dt), part, t, op == VP_COMM_MAX ? MPI_MAX : MPI_SUM,
                               MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS) return mpi_fail(err, rc, "MPI_Allreduce");
        at += part;
    }
    return VP_OK;
}

static vp_status mpi_allreduce_half(vp_comm *c, void *buf, int64_t count, vp_dtype dt, vp_comm_op op, vp_error *err) {
    float *wide = malloc((size_t)count * sizeof *wide + 1);
    if (!wide) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    uint16_t *h = buf;
    for (int64_t i = 0; i < count; i++) wide[i] = dt == VP_BF16 ? vp_bf16_to_f32(h[i]) : vp_f16_to_f32(h[i]);
    vp_status s = mpi_allreduce(c, wide, count, VP_F32, op, err);
    for (int64_t i = 0; !s && i < count; i++) h[i] = dt == VP_BF16 ? vp_f32_to_bf16(wide[i]) : vp_f32_to_f16(wide[i]);
    free(wide);
    return s;
}

static vp_status mpi_broadcast(vp_comm *c, void *buf, int64_t bytes, int root, vp_error *err) {
    (void)c;
    if (bytes > (1 << 30)) return vp_fail(err, VP_ERR_UNSUPPORTED, "broadcast of %lld bytes", (long long)bytes);
    int rc = MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, MPI_COMM_WORLD);
    return rc == MPI_SUCCESS ? VP_OK : mpi_fail(err, rc, "MPI_Bcast");
}

static vp_status mpi_allgather(vp_comm *c, const void *send, void *recv, int64_t bytes, vp_error *err) {
    (void)c;
    if (bytes > (1 << 30)) return vp_fail(err, VP_ERR_UNSUPPORTED, "all-gather of %lld bytes a rank", (long long)bytes);
    int rc = MPI_Allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, MPI_COMM_WORLD);
    return rc == MPI_SUCCESS ? VP_OK : mpi_fail(err, rc, "MPI_Allgather");
}

static vp_status mpi_reduce_scatter(vp_comm *c, const void *send, void *recv, int64_t count, vp_dtype dt, vp_error *err) {
    if (count > (1 << 30)) return vp_fail(err, VP_ERR_UNSUPPORTED, "reduce-scatter of %lld elements a rank", (long long)count);
    if (dt == VP_BF16 || dt == VP_F16) { /* summed in float32, rounded once, as the all-reduce */
        int64_t all = count * c->size;
        float *wide = malloc((size_t)all * sizeof *wide + 1), *part = malloc((size_t)count * sizeof *part + 1);
        vp_status s = wide && part ? VP_OK : vp_fail(err, VP_ERR_NOMEM, "out of memory");
        const uint16_t *h = send;
        for (int64_t i = 0; !s && i < all; i++) wide[i] = dt == VP_BF16 ? vp_bf16_to_f32(h[i]) : vp_f16_to_f32(h[i]);
        if (!s) s = mpi_reduce_scatter(c, wide, part, count, VP_F32, err);
        uint16_t *o = recv;
        for (int64_t i = 0; !s && i < count; i++) o[i] = dt == VP_BF16 ? vp_f32_to_bf16(part[i]) : vp_f32_to_f16(part[i]);
        free(wide);
        free(part);
        return s;
    }
    MPI_Datatype t = dt == VP_F32 ? MPI_FLOAT : dt == VP_F64 ? MPI_DOUBLE : MPI_DATATYPE_NULL;
    if (t == MPI_DATATYPE_NULL)
        return vp_fail(err, VP_ERR_UNSUPPORTED, "MPI reduce-scatter of %s is not supported (float types only)", vp_dtype_name(dt));
    int rc = MPI_Reduce_scatter_block(send, recv, (int)count, t, MPI_SUM, MPI_COMM_WORLD);
    return rc == MPI_SUCCESS ? VP_OK : mpi_fail(err, rc, "MPI_Reduce_scatter_block");
}

static void mpi_destroy(vp_comm *c) {
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Finalize();
    free(c);
}

static const vp_comm_iface mpi_iface = {"mpi", mpi_allreduce, mpi_broadcast, mpi_allgather, mpi_reduce_scatter, NULL,
                                       mpi_destroy};

vp_status vp_comm_mpi_new(vp_comm **out, vp_error *err) {
    *out = NULL;
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        int rc = MPI_Init(NULL, NULL);
        if (rc != MPI_SUCCESS) return mpi_fail(err, rc, "MPI_Init");
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    vp_comm *c = calloc(1, sizeof *c);
    if (!c) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    c->iface = &mpi_iface;
    MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &c->size);
    *out = c;
    return VP_OK;
}
