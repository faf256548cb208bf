/* onnx-vplan run: execute a plan file inside one allocation of exactly its arena. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cli.h"
#include "cli_data.h"
#include "cli_tp.h"
#include "comm.h"
#include "cpu_util.h"
#include "ir/atomic_file.h"
#include "json_writer.h"
#include "memory/workspace.h"
#include "onnx_save.h"
#include "plan_exec.h"
#include "plan/plan_load.h"
#include "report.h"
#include "train/training.h"
#include "weights_file.h"
#ifdef VP_HAVE_CUDA
#include "cuda_backend.h"
#endif
#ifdef VP_HAVE_NCCL
#include "comm_nccl.h"
#endif

/* Class count of a cross-entropy loss in the plan, to keep synthetic labels in range. */
static int64_t label_classes(const vp_graph *g) {
    for (int i = 0; i < g->n_nodes; i++) {
        const vp_node *n = &g->nodes[i];
        if (!strcmp(n->op_type, "SoftmaxCrossEntropyLoss") && n->n_inputs > 0 && n->inputs[0] >= 0) {
            const vp_value *v = &g->values[n->inputs[0]];
            return v->rank >= 2 ? v->dims[1] : 0;
        }
    }
    return 0;
}

/* Device memory seen by cudaMemGetInfo: free bytes once the backend exists (context,
 * the loss scalars), once the arena is allocated, and the lowest after any step. */
typedef struct cuda_memory {
    size_t free_at_start, free_after_arena, lowest_free, total;
    int64_t workspace_bytes, peak_bytes;
    const char *device;
    const char *conv_path; /* what runs convolutions: cuDNN or our kernels */
} cuda_memory;

#ifdef VP_HAVE_CUDA
/* Refuses before anything runs: a step without a CUDA kernel (all of them listed), or
 * an arena larger than the free device memory. */
static vp_status cuda_start(const vp_plan *p, int device, int tf32, vp_backend **out, cuda_memory *mem, vp_error *err) {
    char missing[1024] = "";
    size_t used = 0;
    int n_missing = 0;
    for (int i = 0; i < p->n_steps; i++) {
        const vp_node *n = &p->g->nodes[p->steps[i]];
        if (vp_backend_cuda_supports(n->domain, n->op_type)) continue;
        n_missing++;
        char item[160];
        snprintf(item, sizeof item, "%s%s%s", n->domain && n->domain[0] ? n->domain : "", n->domain && n->domain[0] ? "." : "",
                 n->op_type);
        if (strstr(missing, item)) continue;
        used += (size_t)snprintf(missing + used, used < sizeof missing ? sizeof missing - used : 0, "%s%s",
                                 used ? ", " : "", item);
        if (used >= sizeof missing) used = sizeof missing - 1;
    }
    if (n_missing)
        return vp_fail(err, VP_ERR_UNSUPPORTED, "the CUDA backend has no kernel for %d step%s of this plan: %s", n_missing,
                       n_missing == 1 ? "" : "s", missing);
    vp_backend *b = vp_backend_cuda_new(device, tf32, err);
    if (!b) return VP_ERR_RUNTIME;
    vp_backend_cuda_set_graph(b, p->g);
    vp_status s = vp_backend_cuda_mem_info(b, &mem->free_at_start, &mem->total, err);
    mem->lowest_free = mem->free_at_start;
    mem->workspace_bytes = (int64_t)vp_backend_cuda_workspace_bytes(b);
    mem->device = vp_backend_cuda_device_name(b);
    mem->conv_path = vp_backend_cuda_conv_path(b);
    if (!s && (size_t)p->arena_bytes > mem->free_at_start)
        s = vp_fail(err, VP_ERR_NOMEM,
                    "the plan needs a %lld-byte arena but the device (%s) has %zu bytes free of %zu: refusing to start",
                    (long long)p->arena_bytes, mem->device, mem->free_at_start, mem->total);
    if (s) {
        vp_backend_free(b);
        return s;
    }
    *out = b;
    return VP_OK;
}

static vp_status cuda_sample(vp_backend *b, cuda_memory *mem, size_t *keep, vp_error *err) {
    size_t fr = 0, total = 0;
    vp_status s = vp_backend_cuda_mem_info(b, &fr, &total, err);
    if (s) return s;
    if (keep) *keep = fr;
    if (fr < mem->lowest_free) mem->lowest_free = fr;
    mem->peak_bytes = (int64_t)(mem->free_at_start - mem->lowest_free) + mem->workspace_bytes;
    return VP_OK;
}

static void cuda_report(const cuda_memory *m, const vp_plan *p) {
    char b1[32], b2[32], b3[32], b4[32], b5[32];
    int64_t planned = p->arena_bytes, arena = (int64_t)(m->free_at_start - m->free_after_arena);
    vp_workspace_summary ws = vp_plan_workspace_summary(p);
    printf("device %s: planned arena %s (%lld B; cuBLAS and cuDNN workspaces in it, %d steps, the largest %s);\n"
           "  measured by cudaMemGetInfo: arena %s, peak %s (%lld B, with the backend's %s of loss scalars);\n"
           "  %lld B grew during the steps; convolutions: %s\n",
           m->device, vp_human_bytes(planned, b1, sizeof b1), (long long)planned, ws.steps,
           vp_human_bytes(ws.largest, b5, sizeof b5), vp_human_bytes(arena, b2, sizeof b2),
           vp_human_bytes(m->peak_bytes, b3, sizeof b3), (long long)m->peak_bytes,
           vp_human_bytes(m->workspace_bytes, b4, sizeof b4), (long long)(m->free_after_arena - m->lowest_free),
           m->conv_path);
}
#else
static vp_status cuda_start(const vp_plan *p, int device, int tf32, vp_backend **out, cuda_memory *mem, vp_error *err) {
    (void)p, (void)device, (void)tf32, (void)out, (void)mem;
    return vp_fail(err, VP_ERR_USAGE, "built without CUDA");
}
static vp_status cuda_sample(vp_backend *b, cuda_memory *mem, size_t *keep, vp_error *err) {
    (void)b, (void)mem, (void)keep, (void)err;
    return VP_OK;
}
static void cuda_report(const cuda_memory *m, const vp_plan *p) { (void)m, (void)p; }
#endif

static const char *knob(const vp_loaded_plan *lp, const char *name) {
    for (int i = 0; i < lp->n_knobs; i++)
        if (!strcmp(lp->knob_names[i], name)) return lp->knob_values[i];
    return NULL;
}

/* Under mpirun: this process's rank opens PLAN.<rank> of a tensor-parallel plan, which
 * must be of as many ranks as mpirun started. */
static vp_status open_rank_plan(const char *path, vp_comm *comm, vp_loaded_plan *lp, char *used, size_t len, vp_error *err) {
    snprintf(used, len, comm && comm->size > 1 ? "%s.%d" : "%s", path, comm ? comm->rank : 0);
    /* `plan --tp N -o PLAN` writes PLAN.0 .. PLAN.N-1 and no PLAN: say so, not "cannot open" */
    struct stat st;
    char rank0[4200];
    snprintf(rank0, sizeof rank0, "%s.0", path);
    if ((!comm || comm->size <= 1) && stat(path, &st) != 0 && errno == ENOENT && stat(rank0, &st) == 0)
        return vp_fail(err, VP_ERR_USAGE,
                       "%s: no such file, but %s is there: a tensor-parallel plan is written as one file per rank "
                       "(PLAN.0 .. PLAN.N-1); run it under mpirun -np N: mpirun -np N onnx-vplan run %s",
                       path, rank0, path);
    vp_status s = vp_plan_read_sound(used, lp, err);
    if (s) return s;
    const char *tp = knob(lp, "tp"), *rank = knob(lp, "tp_rank");
    int n = tp ? atoi(tp) : 1, r = rank ? atoi(rank) : 0, size = comm ? comm->size : 1, me = comm ? comm->rank : 0;
    if (n != size || r != me) {
        vp_loaded_plan_free(lp);
        return vp_fail(err, VP_ERR_USAGE, "%s is rank %d of a %d-rank tensor-parallel plan, but this is rank %d of %d%s", used, r,
                       n, me, size, n > 1 && size != n ? " (run it with mpirun -np N as planned)" : "");
    }
    return VP_OK;
}

/* The persistent buffers after the steps, as a weights file (codegen/weights_file.h);
 * under mpirun each rank's as PATH.<rank>, of its plan PLAN.<rank>. */
static vp_status save_weights(const vp_loaded_plan *lp, vp_plan_exec *x, const vp_comm *comm, const char *path_,
                              vp_error *err) {
    const vp_plan *p = &lp->plan;
    char path[4200];
    snprintf(path, sizeof path, comm && comm->size > 1 ? "%s.%d" : "%s", path_, comm ? comm->rank : 0);
    vp_tensor *t = calloc((size_t)p->n_buffers + 1, sizeof *t);
    const void **data = calloc((size_t)p->n_buffers + 1, sizeof *data);
    vp_status s = t && data ? VP_OK : vp_fail(err, VP_ERR_NOMEM, "out of memory");
    for (int b = 0; b < p->n_buffers && !s; b++)
        if (vp_weights_persistent(p, b)) {
            s = vp_plan_exec_get(x, p->buffers[b].value, &t[b], err);
            data[b] = t[b].data;
        }
    if (!s) s = vp_weights_write(p, lp->checksum, data, path, err);
    for (int b = 0; t && b < p->n_buffers; b++) free(t[b].data);
    free(t);
    free(data);
    return s;
}

/* The trained model: the plan's model with the parameters and running statistics after
 * the steps (optimizer state stays out, as `export` does); under mpirun every rank
 * gathers the split weights (in plan order, the same on every rank) and rank 0 writes. */
static vp_status save_model(const vp_loaded_plan *lp, vp_plan_exec *x, vp_comm *comm, const char *path, vp_error *err) {
    const vp_plan *p = &lp->plan;
    vp_tensor *t = calloc((size_t)p->n_buffers + 1, sizeof *t);
    const char **names = calloc((size_t)p->n_buffers + 1, sizeof *names);
    vp_status s = t && names ? VP_OK : vp_fail(err, VP_ERR_NOMEM, "out of memory");
    int n = 0;
    for (int b = 0; b < p->n_buffers && !s; b++) {
        const vp_value *v = &lp->g->values[p->buffers[b].value];
        if (!vp_weights_persistent(p, b) || !(v->flags & VP_VAL_INITIALIZER)) continue;
        s = vp_plan_exec_get(x, p->buffers[b].value, &t[n], err);
        if (!s && p->buffers[b].tp_blocks > 0 && comm && comm->size > 1)
            s = cli_tp_gather(comm, p->buffers[b].tp_axis, p->buffers[b].tp_blocks, &t[n], err);
        names[n++] = v->name;
    }
    /* the Dropouts' step count, so that training the saved model draws new masks (as
     * train --save records it) */
    char steps[32] = "";
    const char *key = VP_DROPOUT_STEP_KEY, *val = steps;
    int sv = vp_graph_find_value(lp->g, VP_DROPOUT_STEP_KEY), n_meta = 0;
    if (!s && sv >= 0 && p->buffer_of[sv] >= 0 && lp->g->values[sv].dtype == VP_I64) {
        vp_tensor st = {0};
        s = vp_plan_exec_get(x, sv, &st, err);
        if (!s) snprintf(steps, sizeof steps, "%lld", (long long)((const int64_t *)st.data)[0]), n_meta = 1;
        free(st.data);
    }
    if (!s && (!comm || comm->rank == 0)) s = vp_onnx_save_model(lp->model, path, n, names, t, n_meta, &key, &val, err);
    if (!s && (!comm || comm->rank == 0)) printf("wrote %s: %s with %d trained initializers\n", path, lp->model, n);
    for (int i = 0; t && i < n; i++) free(t[i].data);
    free(t);
    free(names);
    return s;
}

/* The batch as raw files, DIR/<input>.bin, which --data DIR reads back (and a
 * generated step's caller can read as they are). */
static vp_status save_inputs(const vp_graph *g, const cli_batch *batch, const char *dir, vp_error *err) {
    for (int k = 0; k < batch->n; k++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s.bin", dir, g->values[batch->ids[k]].name);
        vp_atomic_file af;
        vp_status s = vp_atomic_file_open(&af, path, err);
        if (s) return s;
        fwrite(batch->data[k].data, 1, vp_tensor_nbytes(&batch->data[k]), af.f);
        if ((s = vp_atomic_file_commit(&af, err))) return s;
    }
    return VP_OK;
}

static int run_run(int argc, char **argv) {
    const char *path = NULL, *data = "synthetic", *json = NULL, *backend = "cpu", *save_w = NULL, *save_in = NULL;
    const char *save_model_to = NULL;
    int64_t steps = 1, seed = 0, cuda_device = 0;
    int tf32 = 0, reference = 0, allow_nonfinite = 0;
    const cli_opt table[] = {
        {"PLAN", CLI_POS, &path, NULL, NULL},
        {"--backend", CLI_ENUM, &backend, "cpu|cuda",
         "the CPU backend (oneDNN, else the reference kernels), or CUDA (where built and a GPU is\n"
         "present: refuses before starting when a step has no CUDA\n"
         "kernel or the arena does not fit the free device memory, and\n"
         "reports the measured peak device memory beside the plan's)"},
        {"--allow-nonfinite", CLI_SET, &allow_nonfinite, NULL,
         "go on when the loss stops being finite (default: stop with exit 1;\n"
         "`onnx-vplan train` on the model names the first non-finite value)"},
        {"--reference", CLI_SET, &reference, NULL,
         "cpu: run every step on the reference kernels, not oneDNN\n"
         "(as VP_CPU_REFERENCE=1 does)"},
        {"--tf32", CLI_SET, &tf32, NULL, "cuda: let cuBLAS use TF32 tensor cores for float32 products"},
        {"--cuda-device", CLI_INT, &cuda_device, "N", "cuda: the device (default 0)"},
        {"--steps", CLI_INT, &steps, "N", "training steps (default 1)"},
        {"--data", CLI_STR, &data, "synthetic|DIR", "as for train: DIR/<input>.pb, or seeded random data (default)"},
        {"--seed", CLI_INT, &seed, "N", "seed for synthetic data (default 0)"},
        {"--json", CLI_STR, &json, "FILE", "write {\"losses\": [...], \"arena_bytes\": ..., ...}"},
        {"--save-weights", CLI_STR, &save_w, "FILE",
         "write the parameters and optimizer state after the last step\n"
         "as a weights file (the format codegen's NAME_init reads); under\n"
         "mpirun each rank its own, FILE.<rank>"},
        {"--save", CLI_STR, &save_model_to, "OUT.onnx",
         "write the trained model: the plan's model with its parameters\n"
         "after the last step (under mpirun the split weights gathered\n"
         "whole from every rank, written by rank 0)"},
        {"--save-inputs", CLI_STR, &save_in, "DIR", "write the batch as raw DIR/<input>.bin files (--data reads them)"},
        {0}};
    int rc = cli_parse(&cli_cmd_run, table, argc, argv);
    if (rc != CLI_CONTINUE) return rc;
    vp_error err;
    vp_status s = VP_OK;
    int use_cuda = !strcmp(backend, "cuda");
#ifndef VP_HAVE_CUDA
    if (use_cuda) s = vp_fail(&err, VP_ERR_USAGE, "--backend cuda is not available in this build (built without CUDA)");
#endif
    if (!s && (steps < 1 || steps > 10000000)) s = vp_fail(&err, VP_ERR_USAGE, "--steps must be between 1 and 10000000");
    if (s) return cli_report(s, &err);

    vp_comm *comm = NULL;
    if (vp_comm_launched() && (s = vp_comm_mpi_new(&comm, &err))) return cli_report(s, &err);
    vp_loaded_plan lp;
    char rank_path[4200];
    s = open_rank_plan(path, comm, &lp, rank_path, sizeof rank_path, &err);
    if (s) {
        vp_comm_free(comm);
        return cli_report(s, &err);
    }
    path = rank_path;
    const char *local = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    if (comm && comm->size > 1 && use_cuda && local) cuda_device += atoi(local); /* one GPU per rank on a machine */
    int quiet = comm && comm->rank != 0; /* rank 0 reports the steps, every rank its bytes */
    const char *planned_sent = knob(&lp, "tp_bytes_sent");
    vp_backend *b = NULL;
    vp_plan_exec *x = NULL;
    cli_batch batch = {0};
    cuda_memory mem = {0};
    double *losses = calloc((size_t)steps, sizeof *losses), *seconds = calloc((size_t)steps, sizeof *seconds);
    if (!losses || !seconds) s = vp_fail(&err, VP_ERR_NOMEM, "out of memory");
    if (!s && use_cuda) s = cuda_start(&lp.plan, (int)cuda_device, tf32, &b, &mem, &err);
    else if (!s && !(b = vp_backend_cpu_new_with(reference || vp_backend_cpu_reference_env()))) s = vp_fail(&err, VP_ERR_NOMEM, "out of memory");
    /* the ranks' all-reduces: MPI on host memory, NCCL between GPUs */
    vp_comm *coll = comm && comm->size > 1 ? comm : NULL, *nccl = NULL;
    if (!s && coll && use_cuda) {
#ifdef VP_HAVE_NCCL
        s = vp_comm_nccl_new(comm, (int)cuda_device, vp_backend_cuda_stream(b), &nccl, &err);
        coll = nccl;
#elif defined(VP_CUDA_EMU)
        coll = comm; /* the emulation's device memory is host memory: MPI stands in for NCCL */
#else
        s = vp_fail(&err, VP_ERR_UNSUPPORTED, "--backend cuda under mpirun needs NCCL, and this build has none");
#endif
    }
    if (!s && coll) b->comm = coll;
    if (!s) s = vp_plan_exec_new(&lp.plan, b, &x, &err);
    if (!s && use_cuda) s = cuda_sample(b, &mem, &mem.free_after_arena, &err);
    if (!s) s = cli_batch_load(lp.g, data, (uint64_t)seed, label_classes(lp.g), &batch, &err);
    if (!s && save_in) s = save_inputs(lp.g, &batch, save_in, &err);
    char b1[32];
    if (!s && !quiet) printf("running %s: %d steps per iteration in one %s arena on %s\n", path, lp.plan.n_steps,
                   vp_human_bytes(lp.plan.arena_bytes, b1, sizeof b1), backend);
    for (int64_t it = 0; it < steps && !s; it++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        s = cli_batch_feed_plan(x, lp.g, &batch, &err);
        if (!s) s = vp_plan_exec_run(x, &err);
        vp_tensor loss = {0};
        if (!s && lp.plan.loss_buffer >= 0) s = vp_plan_exec_get(x, lp.plan.buffers[lp.plan.loss_buffer].value, &loss, &err);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if (!s && loss.data) losses[it] = vp_load(loss.data, loss.dtype, 0);
        /* the steps reuse memory, so what went non-finite first is gone: the loss stops the
         * run (a parameter that did shows in the next step's loss) */
        if (!s && loss.data && !allow_nonfinite && !isfinite(losses[it]))
            s = vp_fail(&err, VP_ERR_RUNTIME,
                        "step %lld: the loss is %g, not finite; stopped (--allow-nonfinite goes on; `onnx-vplan train` "
                        "on the model with the plan's options names the first non-finite value and its node)",
                        (long long)it + 1, losses[it]);
        if (!s && use_cuda) s = cuda_sample(b, &mem, NULL, &err);
        free(loss.data);
        seconds[it] = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        if (!s && !quiet) printf("step %lld  loss %.6f  (%.6f s)\n", (long long)it + 1, losses[it], seconds[it]);
    }
    if (!s && coll)
        printf("rank %d of %d: sent %lld bytes a step in %lld collectives (counted over %lld steps, %s); planned %s\n",
               coll->rank, coll->size, (long long)(coll->bytes_sent / steps), (long long)(coll->calls / steps), (long long)steps,
               coll->iface->name, planned_sent ? planned_sent : "?");
    if (!s && !quiet) printf("device memory: %lld bytes allocated, planned arena %lld bytes\n", (long long)vp_plan_exec_device_bytes(x),
                   (long long)lp.plan.arena_bytes);
    if (!s && !quiet && !use_cuda && vp_backend_cpu_own_scratch(b))
        printf("oneDNN scratch outside the plan: %zu bytes (its workspaces were planned for another machine or thread "
               "count, or none were)\n", vp_backend_cpu_own_scratch(b));
    if (!s && use_cuda) cuda_report(&mem, &lp.plan);
    if (!s && save_w) s = save_weights(&lp, x, comm, save_w, &err);
    if (!s && save_model_to) s = save_model(&lp, x, comm, save_model_to, &err); /* host tensors: MPI */
    if (!s && json) {
        vp_atomic_file af;
        s = vp_atomic_file_open(&af, json, &err);
        if (!s) {
            vp_json j;
            vp_json_init(&j, af.f, 1);
            vp_json_begin_object(&j);
            vp_json_key(&j, "plan");
            vp_json_string(&j, path);
            vp_json_key(&j, "backend");
            vp_json_string(&j, backend);
            vp_json_key(&j, "arena_bytes");
            vp_json_int(&j, lp.plan.arena_bytes);
            vp_json_key(&j, "device_bytes");
            vp_json_int(&j, vp_plan_exec_device_bytes(x));
            if (use_cuda) {
                vp_json_key(&j, "measured_peak_bytes");
                vp_json_int(&j, mem.peak_bytes);
                vp_json_key(&j, "arena_measured_bytes");
                vp_json_int(&j, (int64_t)(mem.free_at_start - mem.free_after_arena));
                vp_json_key(&j, "workspace_bytes");
                vp_json_int(&j, mem.workspace_bytes);
                vp_json_key(&j, "planned_workspace_bytes"); /* the largest: one step's at a time */
                vp_json_int(&j, vp_plan_workspace_summary(&lp.plan).largest);
                vp_json_key(&j, "convolutions");
                vp_json_string(&j, mem.conv_path ? mem.conv_path : "");
                vp_json_key(&j, "tf32");
                vp_json_int(&j, tf32);
            }
            vp_json_key(&j, "step_seconds");
            vp_json_begin_array(&j);
            for (int64_t i = 0; i < steps; i++) vp_json_double(&j, seconds[i]);
            vp_json_end_array(&j);
            vp_json_key(&j, "losses");
            vp_json_begin_array(&j);
            for (int64_t i = 0; i < steps; i++) vp_json_double(&j, losses[i]);
            vp_json_end_array(&j);
            vp_json_end_object(&j);
            vp_json_finish(&j);
            s = vp_atomic_file_commit(&af, &err);
        }
    }
    cli_batch_free(&batch);
    vp_plan_exec_free(x);
    vp_backend_free(b);
    vp_loaded_plan_free(&lp);
    vp_comm_free(nccl);
    vp_comm_free(comm);
    free(losses);
    free(seconds);
    return cli_report(s, &err);
}

const cli_cmd cli_cmd_run = {"run", run_run, "PLAN [--backend cpu|cuda] [--steps N] [--data synthetic|DIR] [options]",
                             "execute a plan inside one allocation of exactly its arena",
                             "Executes the plan's training step N times inside one allocation of exactly the\n"
                             "planned arena, printing the loss and time per step.\n", NULL};
