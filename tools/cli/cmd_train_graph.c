/* onnx-vplan train-graph: the training step written as an ONNX model. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_train.h"
#include "onnx_write.h"

static int run_train_graph(int argc, char **argv) {
    const char *model = NULL, *out = NULL;
    cli_pairs dims = {0};
    cli_train_opts o;
    cli_train_init(&o);
    const cli_opt table[] = {
        {"MODEL", CLI_POS, &model, NULL, NULL},
        {"", CLI_TABLE, o.table, NULL, NULL},
        {"", CLI_TABLE, cli_load_table, NULL, NULL},
        {"--no-optimizer", CLI_SET, &o.spec.no_optimizer, NULL, "forward, loss and backward only; the gradients are outputs"},
        {"--dim", CLI_DIM, &dims, "NAME=VALUE", "bind a symbolic dim (repeatable); the file has fixed shapes"},
        {"-o|--output", CLI_STR, &out, "OUT.onnx", "the file to write (required)"},
        {0}};
    int rc = cli_parse(&cli_cmd_train_graph, table, argc, argv);
    if (rc != CLI_CONTINUE) return rc;
    vp_error err;
    vp_status s = VP_OK;
    if (!out) s = vp_fail(&err, VP_ERR_USAGE, "train-graph: -o OUT.onnx is required (the file to write)");
    if (!s && o.spec.no_optimizer && o.optimizer)
        s = vp_fail(&err, VP_ERR_USAGE, "train-graph: --optimizer and --no-optimizer exclude each other");
    if (!s) s = cli_train_finish(&o, &err);
    if (s) return cli_report(s, &err);

    /* the command line, recorded in the file */
    size_t len = 1;
    for (int i = 0; i < argc; i++) len += strlen(argv[i]) + 1;
    char *cmdline = malloc(len + 16);
    if (cmdline) {
        size_t at = (size_t)snprintf(cmdline, len + 16, "onnx-vplan");
        for (int i = 0; i < argc; i++) at += (size_t)snprintf(cmdline + at, len + 16 - at, " %s", argv[i]);
    }

    vp_graph *g = NULL;
    vp_training t;
    memset(&t, 0, sizeof t);
    if (!cmdline) s = vp_fail(&err, VP_ERR_NOMEM, "out of memory");
    int n_fwd = 0;
    if (!s) s = cli_build_step(model, &dims, &o, &g, &t, &n_fwd, &err);
    if (!s) {
        if (t.n_unused) fprintf(stderr, "onnx-vplan: warning: the loss does not depend on %d trainable parameters\n", t.n_unused);
        vp_onnx_write_opts wo = {.training = &t, .doc_string = cmdline};
        s = vp_onnx_write_graph(g, out, &wo, &err);
    }
    if (!s) {
        int n_opt = o.spec.no_optimizer ? 0 : g->n_nodes - t.first_optimizer_node;
        int n_bwd = (o.spec.no_optimizer ? g->n_nodes : t.first_optimizer_node) - t.first_backward_node;
        printf("wrote %s: %d parameters, %d frozen; %d forward, %d loss, %d backward, %d optimizer nodes\n", out,
               t.n_params, t.n_frozen, n_fwd, t.first_backward_node - t.first_loss_node, n_bwd, n_opt);
        printf("  loss: %s\n", g->values[t.loss].name);
        printf("  inputs:");
        for (int i = 0; i < g->n_inputs; i++) {
            const vp_value *v = &g->values[g->inputs[i]];
            char sh[128];
            printf(" %s %s %s%s", v->name, vp_dtype_name(v->dtype), vp_shape_str(v->rank, v->dims, sh, sizeof sh),
                   i + 1 < g->n_inputs ? "," : "");
        }
        printf("\n");
        if (o.spec.no_optimizer) printf("  outputs: the loss and %d gradients\n", t.n_params - t.n_unused);
        else
            printf("  outputs: the loss and %d updated parameters and state values (%s); the vplan-domain\n"
                   "  update nodes are onnx-vplan's own (ONNX Runtime does not know them)\n",
                   t.n_carry, vp_opt_name(o.spec.opt.kind));
    }
    vp_training_free(&t);
    vp_graph_free(g);
    free(cmdline);
    return cli_report(s, &err);
}

const cli_cmd cli_cmd_train_graph = {
    "train-graph", run_train_graph, "MODEL --loss SPEC [--optimizer NAME | --no-optimizer] -o OUT.onnx [options]",
    "write the training step (forward, loss, backward, update) as an ONNX model",
    "Builds the model's training step (forward, loss, backward, optimizer update) and\n"
    "writes it as one ONNX model instead of running it. The file holds:\n"
    "  inputs       the model's inputs and the loss's (labels for ce, target for mse),\n"
    "               at the shapes bound with --dim\n"
    "  initializers the parameters, the optimizer state (zero: the state before the\n"
    "               first step), BatchNorm running statistics, frozen weights\n"
    "  nodes        the forward graph (BatchNorm in training form), the loss, the\n"
    "               gradients (standard ONNX ops and ONNX Runtime's com.microsoft ops:\n"
    "               ReluGrad, SoftmaxGrad_13, ConvGrad, ...), and one update node per\n"
    "               parameter in the vplan domain (SGD, Momentum, Adam: PyTorch's rules)\n"
    "  outputs      the model's outputs, the loss, and every updated parameter and state\n"
    "               value (the graph is pure: w goes in, w' comes out), or with\n"
    "               --no-optimizer each parameter's gradient\n"
    "  metadata     vplan.loss, vplan.carry (\"w<TAB>w'\" lines: after a step, feed w'\n"
    "               as the next step's w) and vplan.gradients (\"param<TAB>gradient\")\n"
    "\n"
    "The file loads back into every onnx-vplan command and runs with the same results bit\n"
    "for bit. ONNX Runtime knows every op in it except the vplan updates; write it with\n"
    "--no-optimizer for a graph ONNX Runtime can run as it is.\n",
    "examples:\n"
    "  onnx-vplan train-graph models/mlp/model.onnx --dim batch=4 --loss ce:logits \\\n"
    "      --optimizer adamw -o mlp_train.onnx\n"
    "  onnx-vplan train-graph models/cnn/model.onnx --dim batch=8 --loss ce:logits \\\n"
    "      --no-optimizer -o cnn_grads.onnx\n"
    "  onnx-vplan inspect mlp_train.onnx     # what was written\n"};
