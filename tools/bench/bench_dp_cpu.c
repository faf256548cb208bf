/* dp checkpointing on the cpu profile, where each convolution's planned workspace is
 * what oneDNN says its primitives use (planner/memory/workspace.h): the light/ conv
 * models as training steps (light_step.h), the keep-all plan's time, then dp under 95%,
 * 90% and 85% of its arena, seconds per run, and what the process's memo of oneDNN's
 * sizes (runtime/cpu/dn.h) answered against what it had to build.
 *
 * usage: bench_dp_cpu [NAME...]   (only the models whose name contains a NAME) */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cpu_host.h"
#include "dn.h"
#include "light_step.h"
#include "memory/plan.h"
#include "remat/remat.h"
#include "model_util.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int selected(const char *name, int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (strstr(name, argv[i])) return 1;
    return argc < 2;
}

int main(int argc, char **argv) {
    vp_cpu_host_install();
    const char *light[] = {"light_squeezenet", "light_resnet50", "light_inception_v1", "light_densenet121", "light_vgg19"};
    const vp_device_profile *dev = vp_device_find("cpu");
    printf("| model | keep-all plan s | dp at 95%% MiB (plans) | s | at 90%% | s | at 85%% | s | oneDNN sizes asked | built |\n"
           "|---|---|---|---|---|---|---|---|---|---|\n");
    for (size_t i = 0; i < sizeof light / sizeof light[0]; i++) {
        if (!selected(light[i], argc, argv)) continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/light/%s.onnx", VP_ONNX_TESTS, light[i]);
        vp_graph *g = NULL;
        vp_training t;
        memset(&t, 0, sizeof t);
        vp_error err;
        int mse;
        if (light_step_build(path, &g, &t, &mse, &err)) {
            fprintf(stderr, "%s: %s\n", path, err.msg);
            continue;
        }
        vp_dn_memo_clear();
        vp_plan p;
        double t0 = now();
        vp_status s = test_plan_step(g, &t, dev, 1, &p, &err);
        double keep = now() - t0;
        int64_t arena = s ? 0 : p.arena_bytes;
        if (!s) vp_plan_free(&p);
        printf("| %s | %.3f |", light[i] + 6, keep);
        for (int k = 0; k < 3 && !s; k++) {
            vp_graph *planned = NULL;
            vp_remat_result r;
            t0 = now();
            vp_status sd = test_plan_step_remat(g, &t, dev, 1, arena * (95 - 5 * k) / 100, VP_REMAT_DP, NULL, &planned, &p, &r, &err);
            double sec = now() - t0;
            if (sd) printf(" failed | - |");
            else printf(" %.2f (%d) | %.3f |", (double)p.arena_bytes / 1048576.0, r.iterations, sec);
            if (!sd) vp_plan_free(&p);
            if (planned && planned != g) vp_graph_free(planned);
        }
        vp_dn_memo_counts c = vp_dn_memo_count();
        printf(" %lld | %lld |\n", (long long)(c.hits + c.misses), (long long)c.misses);
        fflush(stdout);
        vp_training_free(&t);
        vp_graph_free(g);
    }
    return 0;
}
