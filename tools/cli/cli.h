/* Shared pieces of the onnx-vplan command: option parsing and the error contract
 * (message on stderr, exit 0 ok / 1 runtime failure / 2 bad input or usage). */
#ifndef VP_CLI_H
#define VP_CLI_H

#include "ir/infer.h"
#include "ir/ir.h"

#define CLI_MAX_DIMS 32

typedef struct cli_dims {
    int n;
    vp_dim_binding b[CLI_MAX_DIMS];
} cli_dims;

/* Parses "NAME=VALUE" into dims; fails with a usage error naming the argument. */
vp_status cli_parse_dim(cli_dims *dims, const char *arg, vp_error *err);

/* Parses a non-negative integer; fails naming the option. */
vp_status cli_parse_int(const char *opt, const char *arg, int64_t *out, vp_error *err);

/* Loads a model and binds its symbolic dims. */
vp_status cli_load(const char *path, const cli_dims *dims, vp_graph **out, vp_error *err);

/* Prints "onnx-vplan: <message>" to stderr and returns the exit code for s. */
int cli_report(vp_status s, const vp_error *err);

int cmd_inspect(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_train_graph(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_show(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_arena(int argc, char **argv);

#endif
