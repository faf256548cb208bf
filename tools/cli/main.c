/* onnx-vplan: the command line.  Each subcommand lives in tools/cmd_<name>.c. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const char usage[] =
    "onnx-vplan: offline memory planner for training ONNX models\n"
    "\n"
    "usage: onnx-vplan COMMAND [options]\n"
    "\n"
    "commands:\n"
    "  inspect MODEL [--dim NAME=VALUE]... [--json]\n"
    "      inputs and outputs with shapes, op histogram, parameter count and bytes,\n"
    "      and the ops this tool cannot handle, with the nodes that use them\n"
    "  eval MODEL [--dim NAME=VALUE]... [--input NAME=FILE.pb]... [--output-dir DIR]\n"
    "      run the model on the CPU reference backend and write its outputs as\n"
    "      TensorProto files (inputs not given are drawn at random, seeded)\n"
    "  train MODEL --loss ce:LOGITS [--optimizer sgd|momentum|adam|adamw] [--steps N]\n"
    "        [--data synthetic|DIR] [--json FILE] [--save OUT.onnx]\n"
    "      build the training step (loss, backward, optimizer) and run it on the CPU\n"
    "  train-graph MODEL --loss SPEC [--optimizer NAME | --no-optimizer] -o OUT.onnx\n"
    "      write the training step (forward, loss, backward, update) as an ONNX model\n"
    "  plan MODEL --loss SPEC [--optimizer NAME] [--budget SIZE] [-o PLAN] [--json FILE]\n"
    "      order the step, derive every buffer's lifetime, give each an offset in one\n"
    "      arena, and report the memory by category, the peak and the budget\n"
    "  show PLAN [--json] [--steps]     print a plan file\n"
    "  verify PLAN                      prove a plan sound, independently of the planner\n"
    "  run PLAN [--steps N] [--data synthetic|DIR]\n"
    "      execute a plan inside one allocation of exactly its arena\n"
    "  arena FILE.csv [-o OUT.csv]      the offset assignment alone on id,lower,upper,size\n"
    "\n"
    "a typical session:\n"
    "  onnx-vplan inspect model.onnx --dim batch=32\n"
    "  onnx-vplan plan model.onnx --dim batch=32 --loss ce:logits --optimizer adamw \\\n"
    "      --budget 16GiB -o model.vplan          (--max-batch batch finds the largest)\n"
    "  onnx-vplan verify model.vplan && onnx-vplan run model.vplan --steps 10\n"
    "\n"
    "Run 'onnx-vplan COMMAND --help' for a command's options.\n"
    "Symbolic dims (a batch size, a sequence length) are bound with --dim, e.g.\n"
    "  onnx-vplan inspect models/gpt/model.onnx --dim batch=8\n"
    "\n"
    "exit codes: 0 success, 1 failure while running, 2 bad input or usage,\n"
    "            3 (plan) planned but over the budget\n";

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        fputs(usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("onnx-vplan 0.1.0\n");
        return 0;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "inspect")) return cmd_inspect(argc - 1, argv + 1);
    if (!strcmp(cmd, "eval")) return cmd_eval(argc - 1, argv + 1);
    if (!strcmp(cmd, "train")) return cmd_train(argc - 1, argv + 1);
    if (!strcmp(cmd, "train-graph")) return cmd_train_graph(argc - 1, argv + 1);
    if (!strcmp(cmd, "plan")) return cmd_plan(argc - 1, argv + 1);
    if (!strcmp(cmd, "show")) return cmd_show(argc - 1, argv + 1);
    if (!strcmp(cmd, "verify")) return cmd_verify(argc - 1, argv + 1);
    if (!strcmp(cmd, "run")) return cmd_run(argc - 1, argv + 1);
    if (!strcmp(cmd, "arena")) return cmd_arena(argc - 1, argv + 1);
    fprintf(stderr, "onnx-vplan: unknown command '%s'\n\n%s", cmd, usage);
    return 2;
}
