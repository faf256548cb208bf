/* onnx-vplan show and verify: reading plan files. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "plan_load.h"
#include "report.h"
#include "memory/verify.h"

static const char show_usage[] =
    "usage: onnx-vplan show PLAN [--json] [--steps]\n"
    "\n"
    "Prints a plan file's memory report and the knobs it was made with.\n"
    "  --json    the report as JSON\n"
    "  --steps   also list every step: phase, op, name, and its buffers with offsets\n";

static const char verify_usage[] =
    "usage: onnx-vplan verify PLAN\n"
    "\n"
    "Re-derives every buffer's lifetime from the plan's steps alone (independently of\n"
    "the planner) and proves that no two live buffers overlap, that everything fits in\n"
    "the arena, and that nothing is read before it is written.  Exit 0 when the plan is\n"
    "sound, 2 (with the two buffers and the step named) when it is not.\n";

static void list_steps(const vp_plan *p) {
    static const char *phases[] = {"fwd", "loss", "bwd", "recomp", "opt", "comm"};
    for (int s = 0; s < p->n_steps; s++) {
        const vp_node *n = &p->g->nodes[p->steps[s]];
        printf("%5d %-6s %-28s %s\n", s, phases[n->phase], n->op_type, n->name);
        for (int io = 0; io < 2; io++)
            for (int k = 0; k < (io ? n->n_outputs : n->n_inputs); k++) {
                int v = io ? n->outputs[k] : n->inputs[k];
                if (v < 0) continue;
                const vp_buffer *b = &p->buffers[p->buffer_of[v]];
                printf("        %s %-40s @%-10lld %lld B\n", io ? "->" : "<-", p->g->values[v].name, (long long)b->offset,
                       (long long)b->bytes);
            }
    }
}

int cmd_show(int argc, char **argv) {
    const char *path = NULL;
    int json = 0, steps = 0;
    vp_error err;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(show_usage, stdout);
            return 0;
        } else if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--steps")) steps = 1;
        else if (argv[i][0] == '-') return cli_report(vp_fail(&err, VP_ERR_USAGE, "show: unknown option '%s'", argv[i]), &err);
        else path = argv[i];
    }
    if (!path) {
        fputs(show_usage, stderr);
        return 2;
    }
    vp_loaded_plan lp;
    vp_status s = vp_plan_read(path, &lp, &err);
    if (s) return cli_report(s, &err);
    char knobs[1024] = "";
    size_t used = 0;
    for (int k = 0; k < lp.n_knobs && used < sizeof knobs; k++)
        used += (size_t)snprintf(knobs + used, sizeof knobs - used, "%s%s %s", k ? ", " : "", lp.knob_names[k], lp.knob_values[k]);
    vp_report_ctx rc = {lp.model, knobs, 8, NULL};
    if (json) vp_report_json(stdout, &lp.plan, &rc);
    else vp_report_text(stdout, &lp.plan, &rc);
    if (steps && !json) list_steps(&lp.plan);
    vp_loaded_plan_free(&lp);
    return 0;
}

int cmd_verify(int argc, char **argv) {
    const char *path = NULL;
    vp_error err;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(verify_usage, stdout);
            return 0;
        } else if (argv[i][0] == '-') return cli_report(vp_fail(&err, VP_ERR_USAGE, "verify: unknown option '%s'", argv[i]), &err);
        else path = argv[i];
    }
    if (!path) {
        fputs(verify_usage, stderr);
        return 2;
    }
    vp_loaded_plan lp;
    vp_status s = vp_plan_read(path, &lp, &err);
    if (s) return cli_report(s, &err);
    vp_verify_report rep;
    s = vp_plan_verify(&lp.plan, &rep, &err);
    if (!s)
        printf("%s: sound: %d steps, %d buffers in %d storage groups, no overlap; max live %lld bytes, arena %lld bytes\n",
               path, rep.n_steps, rep.n_buffers, rep.n_groups, (long long)rep.max_live_bytes, (long long)lp.plan.arena_bytes);
    else
        vp_error_prefix(&err, "%s: unsound plan: ", path);
    vp_loaded_plan_free(&lp);
    return cli_report(s, &err);
}
