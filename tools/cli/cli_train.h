/* The training options shared by train, train-graph and plan: a table each of them
 * includes (CLI_TABLE), and the training step they build. */
#ifndef VP_CLI_TRAIN_H
#define VP_CLI_TRAIN_H

#include "cli.h"
#include "train/training.h"

typedef struct cli_train_opts {
    vp_train_spec spec;                     /* complete after cli_train_finish */
    const char *loss, *optimizer, *betas;   /* as given, or NULL */
    const char *attention;                  /* "fused", "plain", or NULL (fused) */
    const char *precision;                  /* "fp32", "bf16", "fp16", or NULL (fp32) */
    const char *qat;                        /* "int8[:variant...]", or NULL (no QAT) */
    int64_t qat_freeze_after;               /* --qat-freeze-after, -1 when not given */
    double lr, momentum, eps, weight_decay; /* NAN when not given; override the optimizer's defaults */
    double loss_scale;                      /* --loss-scale, NAN when not given */
    int64_t tp;                             /* --tp, -1 when not given */
    const char *lora;                       /* "r=8[,alpha=16][:REGEX]", or NULL (no adapters) */
    const char *dump_after;                 /* --dump-after PASS, or NULL */
    int planning;                           /* set by `plan`: the memory passes may be dumped too */
    cli_opt table[29];                      /* points into this struct: do not copy it */
} cli_train_opts;

void cli_train_init(cli_train_opts *o);
/* Parses the loss, applies the optimizer's defaults and the overrides; fails when
 * --loss is missing or an override does not apply to the optimizer. */
vp_status cli_train_finish(cli_train_opts *o, vp_error *err);

/* Prints the pipeline's passes in order, `--passes` (returns the exit code 0). */
int cli_print_passes(void);

/* The pipeline's options to build the training step of MODEL as o says (load, infer,
 * the training passes; --dump-after): `plan` sets the planning stage on top. */
void cli_pipeline_train(vp_pipeline_opts *po, const char *model, const cli_pairs *dims, const cli_train_opts *o);

/* The pipeline through the training build: loads the model, binds its dims, infers
 * shapes and builds its training step; *n_fwd (may be NULL) gets the forward graph's
 * node count.  Warnings go to stderr.  *g and *t are the caller's to free, also on
 * failure. */
vp_status cli_build_step(const char *model, const cli_pairs *dims, const cli_train_opts *o, vp_graph **g, vp_training *t,
                         int *n_fwd, vp_error *err);

/* "fused 2 attention, 5 LayerNormalization, 2 Gelu" (what the fusion passes did), or ""
 * when they fused nothing. */
/* n_renorm: the norms the step kept runs again for the backward (remat's n_renorm) */
void cli_fusion_summary(const vp_training *t, int n_renorm, char *buf, size_t len);
/* Which initializers are trained and why: the signature, --trainable, or the rule. */
void cli_trainable_summary(const vp_train_spec *spec, const vp_training *t, char *buf, size_t len);

/* "qat int8:per-channel:asym: 7 nodes, 7 weights, 9 activations (2 residual), 144 bytes of
 * observer state", or "" without --qat. */
void cli_qat_summary(const vp_train_spec *spec, const vp_training *t, char *buf, size_t len);
/* "lora r=8 alpha 8: 6 adapters (1,536 parameters) beside 30,080 frozen", or "" without --lora. */
void cli_lora_summary(const vp_train_spec *spec, const vp_training *t, const vp_graph *g, char *buf, size_t len);
/* "offload: 6 Adam updates on the host, 55,400 bytes of optimizer state there", or "". */
void cli_offload_summary(const vp_training *t, char *buf, size_t len);
/* "precision bf16: 31 nodes low, 41 float32, 35 casts[ (N of M fused into their producers)],
 * 17 weight copies (53.1 KiB)[, dynamic loss scaling]", or "" in fp32. */
void cli_precision_summary(const vp_train_spec *spec, const vp_training *t, char *buf, size_t len);

#endif
