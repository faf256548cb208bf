/* onnx-vplan export: a weights file (from a generated step's NAME_save or from
 * `run --save-weights`) merged into the plan's model, written as ONNX. */
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "onnx_save.h"
#include "plan/plan_load.h"
#include "weights_file.h"

static int run_export(int argc, char **argv) {
    const char *path = NULL, *weights = NULL, *out = NULL, *model = NULL;
    const cli_opt table[] = {
        {"PLAN", CLI_POS, &path, NULL, NULL},
        {"--weights", CLI_STR, &weights, "FILE", "the weights file (NAME_save's or run --save-weights')"},
        {"-o|--output", CLI_STR, &out, "OUT.onnx", "the trained model"},
        {"--model", CLI_STR, &model, "MODEL", "the model to copy (default: the one the plan was made from)"},
        {0}};
    int rc = cli_parse(&cli_cmd_export, table, argc, argv);
    if (rc != CLI_CONTINUE) return rc;
    vp_error err;
    if (!out || !weights)
        return cli_report(vp_fail(&err, VP_ERR_USAGE, "export: --weights FILE and -o OUT.onnx are required"), &err);
    vp_loaded_plan lp;
    vp_status s = vp_plan_read_sound(path, &lp, &err);
    if (s) return cli_report(s, &err);
    const vp_plan *p = &lp.plan;
    uint8_t *blob = NULL;
    const void **data = calloc((size_t)p->n_buffers + 1, sizeof *data);
    const char **names = calloc((size_t)p->n_buffers + 1, sizeof *names);
    vp_tensor *t = calloc((size_t)p->n_buffers + 1, sizeof *t);
    if (!data || !names || !t) s = vp_fail(&err, VP_ERR_NOMEM, "out of memory");
    if (!s) s = vp_weights_read(p, lp.checksum, weights, &blob, data, &err);
    int n = 0;
    for (int b = 0; !s && b < p->n_buffers; b++) {
        const vp_value *v = &lp.g->values[p->buffers[b].value];
        /* parameters and running statistics are the model's; optimizer state is not */
        if (!data[b] || !(v->flags & VP_VAL_INITIALIZER)) continue;
        t[n] = vp_value_tensor(v);
        t[n].data = (void *)data[b];
        names[n++] = v->name;
    }
    const char *src = model ? model : lp.model;
    if (!s) s = vp_onnx_save_initializers(src, out, n, names, t, &err);
    if (!s) printf("wrote %s: %s with %d initializers from %s\n", out, src, n, weights);
    free(blob);
    free(data);
    free(names);
    free(t);
    vp_loaded_plan_free(&lp);
    return cli_report(s, &err);
}

const cli_cmd cli_cmd_export = {
    "export", run_export, "PLAN --weights FILE -o OUT.onnx [--model MODEL]",
    "write trained weights (a weights file) into the plan's model as ONNX",
    "Copies the model the plan was made from (or --model) to OUT.onnx with its\n"
    "initializers replaced by the trained values of a weights file (--weights) written by a\n"
    "generated step's NAME_save or by `run --save-weights` for this plan (a file of\n"
    "another plan is refused).  Optimizer state stays out of the model.\n",
    NULL};
