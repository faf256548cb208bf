/* onnx-vplan run: execute a plan file inside one allocation of exactly its arena. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "cli_data.h"
#include "cpu_util.h"
#include "json_writer.h"
#include "plan_exec.h"
#include "plan_load.h"
#include "report.h"

static const char run_usage[] =
    "usage: onnx-vplan run PLAN [--backend cpu] [--steps N] [--data synthetic|DIR] [--json FILE] [--seed N]\n"
    "\n"
    "Executes the plan's training step N times inside one allocation of exactly the\n"
    "planned arena, printing the loss per step.\n"
    "  --backend cpu          the CPU reference backend (cuda where built and a GPU is present)\n"
    "  --steps N              training steps (default 1)\n"
    "  --data synthetic|DIR   as for train: DIR/<input>.pb, or seeded random data (default)\n"
    "  --json FILE            write {\"losses\": [...], \"arena_bytes\": ..., ...}\n";

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

int cmd_run(int argc, char **argv) {
    const char *path = NULL, *data = "synthetic", *json = NULL, *backend = "cpu";
    int64_t steps = 1, seed = 0;
    vp_error err;
    vp_status s = VP_OK;
    for (int i = 1; i < argc && !s; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(run_usage, stdout);
            return 0;
        }
        if (!strcmp(a, "--backend") || !strcmp(a, "--steps") || !strcmp(a, "--data") || !strcmp(a, "--json") ||
            !strcmp(a, "--seed")) {
            if (i + 1 >= argc) {
                s = vp_fail(&err, VP_ERR_USAGE, "%s needs a value (see run --help)", a);
                break;
            }
            const char *v = argv[++i];
            if (!strcmp(a, "--backend")) backend = v;
            else if (!strcmp(a, "--steps")) s = cli_parse_int("--steps", v, &steps, &err);
            else if (!strcmp(a, "--seed")) s = cli_parse_int("--seed", v, &seed, &err);
            else if (!strcmp(a, "--data")) data = v;
            else json = v;
        } else if (a[0] == '-') s = vp_fail(&err, VP_ERR_USAGE, "run: unknown option '%s' (see --help)", a);
        else path = a;
    }
    if (!s && !path) {
        fputs(run_usage, stderr);
        return 2;
    }
    if (!s && strcmp(backend, "cpu"))
        s = vp_fail(&err, VP_ERR_USAGE, "--backend '%s' is not available in this build (cpu)", backend);
    if (!s && (steps < 1 || steps > 10000000)) s = vp_fail(&err, VP_ERR_USAGE, "--steps must be between 1 and 10000000");
    if (s) return cli_report(s, &err);

    vp_loaded_plan lp;
    s = vp_plan_read(path, &lp, &err);
    if (s) return cli_report(s, &err);
    vp_backend *b = vp_backend_cpu_new();
    vp_plan_exec *x = NULL;
    cli_batch batch = {0};
    double *losses = calloc((size_t)steps, sizeof *losses);
    if (!b || !losses) s = vp_fail(&err, VP_ERR_NOMEM, "out of memory");
    if (!s) s = vp_plan_exec_new(&lp.plan, b, &x, &err);
    if (!s) s = cli_batch_load(lp.g, data, (uint64_t)seed, label_classes(lp.g), &batch, &err);
    char b1[32];
    if (!s) printf("running %s: %d steps per iteration in one %s arena on %s\n", path, lp.plan.n_steps,
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
        free(loss.data);
        if (!s)
            printf("step %lld  loss %.6f  (%.3f s)\n", (long long)it + 1, losses[it],
                   (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    }
    if (!s) printf("device memory: %lld bytes allocated, planned arena %lld bytes\n", (long long)vp_plan_exec_device_bytes(x),
                   (long long)lp.plan.arena_bytes);
    if (!s && json) {
        FILE *f = fopen(json, "w");
        if (!f) s = vp_fail(&err, VP_ERR_IO, "%s: cannot create: %s", json, strerror(errno));
        else {
            vp_json j;
            vp_json_init(&j, f, 1);
            vp_json_begin_object(&j);
            vp_json_key(&j, "plan");
            vp_json_string(&j, path);
            vp_json_key(&j, "backend");
            vp_json_string(&j, backend);
            vp_json_key(&j, "arena_bytes");
            vp_json_int(&j, lp.plan.arena_bytes);
            vp_json_key(&j, "device_bytes");
            vp_json_int(&j, vp_plan_exec_device_bytes(x));
            vp_json_key(&j, "losses");
            vp_json_begin_array(&j);
            for (int64_t i = 0; i < steps; i++) vp_json_double(&j, losses[i]);
            vp_json_end_array(&j);
            vp_json_end_object(&j);
            vp_json_finish(&j);
            if (fclose(f)) s = vp_fail(&err, VP_ERR_IO, "%s: write failed", json);
        }
    }
    cli_batch_free(&batch);
    vp_plan_exec_free(x);
    vp_backend_free(b);
    vp_loaded_plan_free(&lp);
    free(losses);
    return cli_report(s, &err);
}
