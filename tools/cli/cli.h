/* What the onnx-vplan subcommands share: the error contract (a message on stderr; exit
 * 0 ok, 1 runtime failure, 2 bad input or usage, 3 planned over the budget), loading a
 * model, and the option parser.
 *
 * A subcommand declares a table of its options (every spelling, the kind of value, where
 * the value goes, a help line) and calls cli_parse.  In: argv.  Out: the values in the
 * table's destinations, or an exit code.  Only cli_parse reads argv, so every command
 * answers alike: --help is generated from the table (it cannot drift from what is
 * parsed) and exits 0; an unknown option, a missing or bad value, a missing or extra
 * positional argument exits 2 with one line naming the command, the option, the value
 * and what was expected (a misspelt option gets a suggestion); --opt=value works as
 * --opt value does.  A subcommand's start:
 *
 *     const char *plan = NULL, *out = NULL;
 *     int json = 0;
 *     const cli_opt table[] = {{"PLAN", CLI_POS, &plan, NULL, NULL},
 *                              {"--json", CLI_SET, &json, NULL, "the report as JSON"},
 *                              {"-o|--output", CLI_STR, &out, "FILE", "where to write it"}, {0}};
 *     int rc = cli_parse(&cli_cmd_show, table, argc, argv);
 *     if (rc != CLI_CONTINUE) return rc; */
#ifndef VP_CLI_H
#define VP_CLI_H

#include "ir/infer.h"
#include "ir/ir.h"
#include "pipeline/pipeline.h"

#define CLI_MAX_PAIRS 64
#define CLI_CONTINUE (-1)

typedef enum cli_kind {
    CLI_END,   /* closes a table */
    CLI_POS,   /* a required positional argument: const char * */
    CLI_SET,   /* a flag: int, set to 1 */
    CLI_CLEAR, /* a flag: int, set to 0 */
    CLI_STR,   /* const char * */
    CLI_INT,   /* int64_t, >= 0 */
    CLI_NUM,   /* double, finite and >= 0 */
    CLI_SIZE,  /* int64_t bytes: 16GiB, 800MB, 1.5G or a count (vp_parse_size) */
    CLI_ENUM,  /* const char *, one of the words of meta: "sgd|adam" */
    CLI_PAIR,  /* repeatable NAME=VALUE: cli_pairs */
    CLI_DIM,   /* repeatable NAME=VALUE binding a symbolic dim to an integer: cli_pairs */
    CLI_TABLE, /* the options of another table (dest), in this place */
    CLI_ACTION, /* a flag that runs dest (int (*)(void)) once the line has parsed, and exits with its result */
} cli_kind;

typedef struct cli_opt {
    const char *names; /* "--json", or every spelling: "-o|--output"; a positional's name */
    cli_kind kind;
    void *dest;
    const char *meta; /* the value as help shows it: FILE, N; an enum's words */
    const char *help; /* lines after the first are indented under it */
} cli_opt;

typedef struct cli_pairs {
    int n;
    char name[CLI_MAX_PAIRS][64];
    const char *value[CLI_MAX_PAIRS]; /* as given */
    vp_dim_binding b[CLI_MAX_PAIRS];  /* CLI_DIM: the name bound to the value */
} cli_pairs;

typedef struct cli_cmd {
    const char *name;     /* as typed after onnx-vplan */
    int (*run)(int argc, char **argv);
    const char *args;     /* the usage line after the name */
    const char *summary;  /* for onnx-vplan --help */
    const char *intro;    /* for CMD --help, before the options */
    const char *epilogue; /* after them (examples, exit codes), or NULL */
} cli_cmd;

/* Reads argv[1..argc) into opts (closed by {0}, CLI_END).  Returns CLI_CONTINUE when the
 * command should go on, else the exit code once help (0) or an error (2) is printed. */
int cli_parse(const cli_cmd *c, const cli_opt *opts, int argc, char **argv);

/* Prints "onnx-vplan: <message>" to stderr and returns the exit code for s. */
int cli_report(vp_status s, const vp_error *err);

/* The options of every command that loads a model (inspect, eval, train, train-graph,
 * plan), included in each one's table as {"", CLI_TABLE, cli_load_table, NULL, NULL}:
 * --lenient (unknown attributes and too new an opset warned of, not refused). */
extern cli_opt cli_load_table[];

/* The pipeline's options for the model at path with the dims and load options the command
 * line gave (cli_load_table, --dim); the caller sets the stage and the rest. */
void cli_pipeline_init(vp_pipeline_opts *po, const char *path, const cli_pairs *dims);

/* Loads a model (as cli_load_table's options say) and binds its symbolic dims: the
 * pipeline's first pass. */
vp_status cli_load(const char *path, const cli_pairs *dims, vp_graph **out, vp_error *err);

/* The subcommands, in the order onnx-vplan --help lists them. */
extern const cli_cmd cli_cmd_inspect, cli_cmd_eval, cli_cmd_train, cli_cmd_train_graph, cli_cmd_plan, cli_cmd_show,
    cli_cmd_verify, cli_cmd_run, cli_cmd_codegen, cli_cmd_export, cli_cmd_compare,
    cli_cmd_arena;

#endif
