/* onnx-vplan: the command line.  Each subcommand lives in tools/cli/cmd_<name>.c and
 * declares its options in a table that cli_parse (tools/cli/cli.c) reads. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "cpu_host.h"

static const cli_cmd *const commands[] = {&cli_cmd_inspect, &cli_cmd_eval, &cli_cmd_train, &cli_cmd_train_graph,
                                          &cli_cmd_plan,    &cli_cmd_show, &cli_cmd_verify, &cli_cmd_run,
                                          &cli_cmd_codegen, &cli_cmd_export, &cli_cmd_compare, &cli_cmd_arena};
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

/* The CPU kernels and oneDNN run on OpenMP threads.  libgomp's default has an idle
 * thread spin for its next job; on a machine shared with other work (CI, two tests at
 * a time, a laptop) a spinning thread takes the core a descheduled one needs, and a
 * training step measured 3 to 10 times slower than with threads that sleep.  libgomp
 * reads OMP_WAIT_POLICY once, as it loads, before main: so when the user has not
 * chosen, run and train choose passive and start again (once; on failure they carry
 * on as they are). */
static void passive_threads(int argc, char **argv) {
    if (argc < 2 || (strcmp(argv[1], "run") && strcmp(argv[1], "train") && strcmp(argv[1], "eval")) ||
        getenv("OMP_WAIT_POLICY"))
        return;
    if (setenv("OMP_WAIT_POLICY", "passive", 1)) return;
    execv("/proc/self/exe", argv);
}

int main(int argc, char **argv) {
    vp_cpu_host_install(); /* the planner folds and sizes on the runtime's CPU kernels (planner/ir/host.h) */
    passive_threads(argc, argv);
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
