/* onnx-vplan: the command line.  Each subcommand lives in tools/cli/cmd_<name>.c and
 * declares its options in a table that tools/cli/cli_opts.c reads. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const cli_cmd *const commands[] = {&cli_cmd_inspect, &cli_cmd_eval, &cli_cmd_train, &cli_cmd_train_graph,
                                          &cli_cmd_plan,    &cli_cmd_show, &cli_cmd_verify, &cli_cmd_run,
                                          &cli_cmd_codegen, &cli_cmd_export, &cli_cmd_arena};
#define N_COMMANDS (int)(sizeof commands / sizeof commands[0])

static void usage(FILE *f) {
    fputs("onnx-vplan: offline memory planner for training ONNX models\n"
          "\n"
          "usage: onnx-vplan COMMAND [options]\n"
          "\n"
          "commands:\n",
          f);
    for (int i = 0; i < N_COMMANDS; i++) fprintf(f, "  %s %s\n      %s\n", commands[i]->name, commands[i]->args, commands[i]->summary);
    fputs("\n"
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
          "            3 (plan) planned but over the budget\n",
          f);
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("onnx-vplan 0.1.0\n");
        return 0;
    }
    for (int i = 0; i < N_COMMANDS; i++)
        if (!strcmp(argv[1], commands[i]->name)) return commands[i]->run(argc - 1, argv + 1);
    fprintf(stderr, "onnx-vplan: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
