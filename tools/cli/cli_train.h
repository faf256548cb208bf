/* The training options shared by train, train-graph and plan. */
#ifndef VP_CLI_TRAIN_H
#define VP_CLI_TRAIN_H

#include "cli.h"
#include "train/training.h"

typedef struct cli_train_opts {
    vp_train_spec spec;
    int have_loss, have_opt;
    /* overrides, applied after --optimizer sets the defaults */
    double lr, momentum, beta1, beta2, eps, weight_decay;
    int set_lr, set_momentum, set_betas, set_eps, set_wd;
} cli_train_opts;

#define CLI_TRAIN_HELP                                                                          \
    "  --loss ce:LOGITS|mse:OUTPUT|output:NAME\n"                                               \
    "                        ce: softmax cross-entropy over the last axis of LOGITS, mean\n"    \
    "                        over every leading position (adds an int64 input 'labels');\n"     \
    "                        mse: mean squared error (adds an input 'target');\n"               \
    "                        output: the model's own scalar loss\n"                             \
    "  --optimizer sgd|momentum|adam|adamw   PyTorch semantics (default sgd)\n"                 \
    "  --lr X                learning rate (sgd, momentum 0.01; adam, adamw 0.001)\n"           \
    "  --momentum X          momentum factor (default 0.9)\n"                                   \
    "  --betas B1,B2         Adam betas (default 0.9,0.999)\n"                                  \
    "  --eps X               Adam epsilon (default 1e-8)\n"                                     \
    "  --weight-decay X      L2 penalty; decoupled for adamw (default 0; adamw 0.01)\n"         \
    "  --freeze REGEX        parameters whose names match get no gradient and no state\n"

/* Consumes argv[*i] (and its value) when it is a training option: returns 1 when
 * consumed, 0 when not one of ours; *s is set on a bad value. */
int cli_train_parse(cli_train_opts *o, int argc, char **argv, int *i, vp_status *s, vp_error *err);
/* Applies defaults and overrides; fails when --loss is missing. */
vp_status cli_train_finish(cli_train_opts *o, vp_error *err);

/* Loads the model, binds its dims, infers shapes and builds its training step; *n_fwd
 * (may be NULL) gets the forward graph's node count.  Warnings go to stderr. */
vp_status cli_build_step(const char *model, const cli_dims *dims, const vp_train_spec *spec, vp_graph **g, vp_training *t,
                         int *n_fwd, vp_error *err);

#endif
