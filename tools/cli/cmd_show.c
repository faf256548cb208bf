/* onnx-vplan show and verify: reading plan files. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "plan/plan_load.h"
#include "report.h"
#include "memory/verify.h"

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
                /* host@: in the host block of an offloaded plan, not the arena */
                printf("        %s %-40s %s@%-10lld %lld B\n", io ? "->" : "<-", p->g->values[v].name,
                       b->cat == VP_CAT_HOST ? "host" : "", (long long)b->offset, (long long)b->bytes);
            }
    }
}

static int run_show(int argc, char **argv) {
    const char *path = NULL;
    int json = 0, steps = 0;
    const cli_opt table[] = {
        {"PLAN", CLI_POS, &path, NULL, NULL},
        {"--json", CLI_SET, &json, NULL, "the report as JSON"},
        {"--steps", CLI_SET, &steps, NULL, "also list every step: phase, op, name, and its buffers with offsets"},
        {0}};
    int rc = cli_parse(&cli_cmd_show, table, argc, argv);
    if (rc != CLI_CONTINUE) return rc;
    vp_error err;
    vp_loaded_plan lp;
    vp_status s = vp_plan_read(path, &lp, &err);
    if (s) return cli_report(s, &err);
    char knobs[1024] = "";
    size_t used = 0;
    for (int k = 0; k < lp.n_knobs && used < sizeof knobs; k++)
        used += (size_t)snprintf(knobs + used, sizeof knobs - used, "%s%s %s", k ? ", " : "", lp.knob_names[k], lp.knob_values[k]);
    vp_report_ctx ctx = {.model = lp.model, .knobs = knobs, .top_live = 8};
    if (json) vp_report_json(stdout, &lp.plan, &ctx);
    else vp_report_text(stdout, &lp.plan, &ctx);
    if (steps && !json) list_steps(&lp.plan);
    vp_loaded_plan_free(&lp);
    return 0;
}

static int run_verify(int argc, char **argv) {
    const char *path = NULL;
    const cli_opt table[] = {{"PLAN", CLI_POS, &path, NULL, NULL}, {0}};
    int rc = cli_parse(&cli_cmd_verify, table, argc, argv);
    if (rc != CLI_CONTINUE) return rc;
    vp_error err;
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

const cli_cmd cli_cmd_show = {"show", run_show, "PLAN [--json] [--steps]", "print a plan file",
                              "Prints a plan file's memory report and the knobs it was made with.\n", NULL};

const cli_cmd cli_cmd_verify = {
    "verify", run_verify, "PLAN", "prove a plan sound, independently of the planner",
    "Re-derives every buffer's lifetime from the plan's steps alone (independently of\n"
    "the planner) and proves that no two live buffers overlap, that everything fits in\n"
    "the arena, and that nothing is read before it is written.  Exit 0 when the plan is\n"
    "sound, 2 (with the two buffers and the step named) when it is not.\n",
    NULL};
