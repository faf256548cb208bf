/* Optimizer-state offload on the CUDA backend (runtime/cuda/cuda_offload.c): the
 * offloaded Adam steps of models/mlp and models/gpt run on the CUDA backend (the host
 * emulation where no GPU is) with the host block in page-locked memory, gradients copied
 * out and weights back on the copy stream, the update on the CPU kernels, and give the
 * CPU backend's losses over STEPS steps (1e-5 relative, as cli_cuda_emu: the device's
 * kernels sum in another order); the weights after them are those of the same device's
 * step without offload, bit for bit; the same plan read back from its file gives the
 * same losses bit for bit.  The emulation runs blocks in index order here
 * (VP_CUDA_EMU_ORDER=forward), so that two runs of one kernel give the same bits (a
 * float atomicAdd's sum depends on the block order; test_cuda_ops shuffles them).
 *
 * What makes this a test of the ordering and not only of the arithmetic: under the
 * emulation, copies to and from page-locked memory and host functions run as late as a
 * GPU may run them (cuda_emu.h, "late work"), so a copy the compute stream does not wait
 * for reads a gradient after a later kernel overwrote its storage, or a kernel reads a
 * weight before its copy back, and the losses go wrong. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "check.h"
#include "cpu_host.h"
#include "model_util.h"
#include "plan_exec.h"
#include "plan/plan_file.h"
#include "plan/plan_load.h"
#ifdef VP_HAVE_CUDA
#include "cuda_backend.h"
#endif

#define STEPS 3

#ifdef VP_HAVE_CUDA
static int close_to(double a, double b) {
    double scale = fabs(a) > 1 ? fabs(a) : 1;
    return fabs(a - b) <= 1e-5 * scale;
}

/* Runs STEPS steps of pl's plan on b and leaves the executor in *x. */
static vp_status run_steps(test_planned *pl, vp_backend *b, vp_plan_exec **x, vp_error *err) {
    vp_tensor in = {0}, labels = {0};
    const mj *name = mj_get(pl->m.meta, "input");
    vp_backend_cuda_set_graph(b, pl->p.g);
    vp_status s = test_model_fixture(&pl->m, "x.pb", &in, err);
    if (!s) s = test_model_fixture(&pl->m, "labels.pb", &labels, err);
    if (!s) s = vp_plan_exec_new(&pl->p, b, x, err);
    for (int k = 0; k < STEPS && !s; k++) {
        s = vp_plan_exec_set_input(*x, name ? name->str : "x", &in, err);
        if (!s) s = vp_plan_exec_set_input(*x, "labels", &labels, err);
        if (!s) s = vp_plan_exec_run(*x, err);
    }
    free(in.data);
    free(labels.data);
    return s;
}

/* The largest relative difference between the parameters of two plans' executors (the
 * same model with and without offload), matched by name. */
static double weights_gap(const test_planned *a, vp_plan_exec *xa, const test_planned *b, vp_plan_exec *xb, int *n, char *worst, size_t len) {
    double gap = 0;
    *n = 0;
    for (int i = 0; i < a->m.t.n_params; i++) {
        const vp_value *v = &a->p.g->values[a->m.t.params[i]];
        int other = vp_graph_find_value(b->p.g, v->name);
        if (other < 0) return INFINITY;
        vp_tensor ta = {0}, tb = {0};
        vp_error err;
        if (vp_plan_exec_get(xa, a->m.t.params[i], &ta, &err) || vp_plan_exec_get(xb, other, &tb, &err)) gap = INFINITY;
        else {
            double g = test_rel_error(&ta, &tb);
            ++*n;
            if (g > gap) snprintf(worst, len, "%s", v->name);
            if (g > gap) gap = g;
        }
        free(ta.data);
        free(tb.data);
    }
    return gap;
}

static void check_model(const char *name, vp_backend *cpu, vp_backend *cuda) {
    test_planned on, off;
    vp_error err;
    vp_status s = test_model_plan(&on, name, "adamw", 1, "h200", &err);
    if (!s) s = test_model_plan(&off, name, "adamw", 0, "h200", &err);
    if (s) {
        check(0, "%s: plans with and without offload: %s", name, err.msg);
        test_planned_free(&on);
        test_planned_free(&off);
        return;
    }
    double on_cpu[STEPS], on_cuda[STEPS], from_file[STEPS];
    char why[512] = "";
    vp_backend_cuda_set_graph(cuda, on.p.g);
    int bad = test_plan_losses(&on.m, &on.p, cpu, STEPS, on_cpu, why, sizeof why) ||
              test_plan_losses(&on.m, &on.p, cuda, STEPS, on_cuda, why, sizeof why);
    int same = !bad;
    for (int k = 0; k < STEPS && same; k++) same = close_to(on_cpu[k], on_cuda[k]);
    check(same, "%s: offloaded on cuda (host block %lld bytes, %d updates on the host): losses %.7g %.7g %.7g, on the cpu %.7g %.7g %.7g%s%s",
          name, (long long)on.p.host_bytes, on.m.t.n_offloaded, on_cuda[0], on_cuda[1], on_cuda[2], on_cpu[0], on_cpu[1],
          on_cpu[2], why[0] ? ": " : "", why);
    /* the weights after the steps, the last copies back included, against the same
     * device's step without offload: the same gradients, and the CPU's Adam gives the
     * device kernel's bits (against the CPU backend's gradients instead, a gradient that
     * is zero but for rounding, as a key bias's, moves its weight by lr either way) */
    vp_plan_exec *xon = NULL, *xoff = NULL;
    s = run_steps(&on, cuda, &xon, &err);
    if (!s) s = run_steps(&off, cuda, &xoff, &err);
    char worst[256] = "-";
    int n = 0;
    double gap = s ? 1 : weights_gap(&on, xon, &off, xoff, &n, worst, sizeof worst);
    check(!s && n == on.m.t.n_params && gap == 0,
          "%s: %d weights after %d steps on cuda, offloaded = not offloaded bit for bit (largest gap %.2g relative, %s)%s%s", name, n, STEPS,
          gap, worst, s ? ": " : "", s ? err.msg : "");
    vp_plan_exec_free(xon);
    vp_plan_exec_free(xoff);
    /* the plan file's host block on the device */
    char path[4400];
    snprintf(path, sizeof path, "%s/tests/cuda_offload_%.100s_%d.vplan", VP_BINARY_DIR, name, (int)getpid());
    vp_loaded_plan lp;
    s = vp_plan_write(&on.p, name, NULL, 0, path, &err);
    if (!s) s = vp_plan_read(path, &lp, &err);
    if (!s) {
        vp_backend_cuda_set_graph(cuda, lp.plan.g);
        bad = test_plan_losses(&on.m, &lp.plan, cuda, STEPS, from_file, why, sizeof why);
        check(!bad && !memcmp(from_file, on_cuda, sizeof on_cuda), "%s: the plan file on cuda: the same losses bit for bit%s%s",
              name, why[0] ? ": " : "", why);
        vp_loaded_plan_free(&lp);
    } else
        check(0, "%s: plan file: %s", name, err.msg);
    unlink(path);
    test_planned_free(&on);
    test_planned_free(&off);
}
#endif

int main(void) {
    vp_cpu_host_install();
#ifdef VP_HAVE_CUDA
#ifdef VP_CUDA_EMU
    setenv("VP_CUDA_EMU_ORDER", "forward", 1);
#endif
    char why[256];
    if (vp_cuda_device_count(why, sizeof why) == 0) {
        printf("SKIP: no CUDA device (%s)\n", why);
        return 0;
    }
    vp_error err = {{0}};
    vp_backend *cpu = vp_backend_cpu_new(), *cuda = vp_backend_cuda_new(0, 0, &err);
    if (!cpu || !cuda) {
        check(0, "cannot create the backends: %s", err.msg);
    } else {
        printf("device: %s\n", vp_backend_cuda_device_name(cuda));
        check_model("mlp", cpu, cuda);
        check_model("gpt", cpu, cuda);
    }
    vp_backend_free(cuda);
    vp_backend_free(cpu);
    return check_summary();
#else
    printf("SKIP: built without CUDA\n");
    return 0;
#endif
}
