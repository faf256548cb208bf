/* The training step: what the user asks for (loss, optimizer, frozen parameters) and
 * what the builder made of the forward graph (the loss value, each parameter's gradient
 * and update, the state carried from one step to the next).
 *
 * The graph stays in SSA form: an update produces a new value (w -> w'), and
 * `carry` pairs tell the runtime (and the planner, which aliases them in place) that
 * after a step the old value takes the new one's contents. */
#ifndef VP_TRAINING_H
#define VP_TRAINING_H

#include "ir/ir.h"
#include "parallel/parallel.h"
#include "precision/cast_fuse.h"
#include "precision/loss_scale.h"
#include "precision/precision.h"
#include "quant/qat.h"
#include "train/fuse.h"
#include "train/lora.h"

typedef enum vp_loss_kind {
    VP_LOSS_CE = 1, /* softmax cross-entropy over the last axis, mean over leading positions */
    VP_LOSS_MSE,    /* mean squared error against an input named "target" */
    VP_LOSS_OUTPUT, /* the model computes a scalar loss itself */
} vp_loss_kind;

typedef struct vp_loss_spec {
    vp_loss_kind kind;
    char value[256]; /* the logits, output or loss value name */
} vp_loss_spec;

/* Parses "ce:LOGITS", "mse:OUTPUT" or "output:NAME". */
vp_status vp_loss_parse(const char *arg, vp_loss_spec *out, vp_error *err);

typedef enum vp_opt_kind { VP_OPT_SGD = 1, VP_OPT_MOMENTUM, VP_OPT_ADAM, VP_OPT_ADAMW } vp_opt_kind;

/* PyTorch's semantics: torch.optim.SGD (with and without momentum), Adam, AdamW. */
typedef struct vp_opt_spec {
    vp_opt_kind kind;
    double lr;
    double momentum;     /* momentum only */
    double beta1, beta2; /* adam, adamw */
    double eps;
    double weight_decay; /* L2 added to the gradient (sgd, momentum, adam); decoupled for adamw */
} vp_opt_spec;

/* Parses "sgd|momentum|adam|adamw" with PyTorch's defaults for the rest. */
vp_status vp_opt_parse(const char *arg, vp_opt_spec *out, vp_error *err);
const char *vp_opt_name(vp_opt_kind k);

/* How the exporters' attention core (MatMul, scale, mask, Softmax, MatMul) is trained. */
typedef enum vp_attention_form {
    VP_ATTENTION_FUSED = 0, /* one vplan.Attention whose backward recomputes the probabilities
                               from the row log-sum-exp (train/fuse_attention.h) */
    VP_ATTENTION_PLAIN,     /* the ops as exported: the probabilities are saved for the backward */
} vp_attention_form;

typedef struct vp_train_spec {
    vp_loss_spec loss;
    vp_opt_spec opt;
    const char *freeze;  /* POSIX extended regex of parameter names to freeze, or NULL */
    const char *trainable; /* POSIX extended regex: exactly the float initializers whose names match
                              are trained (before --freeze), whatever the signature or the rule
                              says (train/signature.h); NULL: they decide */
    int no_optimizer;    /* build forward, loss and backward only (gradient checks) */
    int no_fuse;         /* differentiate the exporter's patterns piece by piece (train/fuse.h) */
    vp_attention_form attention; /* fused (memory-efficient, default) or plain attention cores */
    vp_precision precision; /* fp32 (default), or bf16 / fp16 mixed precision (precision/precision.h) */
    const char *fp32_ops, *low_ops; /* op names moved over the placement lists (precision/precision.h) */
    int no_loss_scaling;    /* fp16 without dynamic loss scaling (precision/loss_scale.h) */
    int no_cast_fusion;     /* keep every Cast apart from its producer (precision/cast_fuse.h) */
    int keep_weight_copies; /* hold each weight's low copy from the forward to the backward (precision/recast.h) */
    int keep_norm_outputs;  /* hold each norm's output from the forward to the backward (remat/recompute_norms.h) */
    vp_loss_scale_opts loss_scale; /* GradScaler's defaults where 0 */
    vp_tp_opts tp;          /* tensor parallelism: n ranks (0 or 1: none), this graph's rank */
    vp_qat_opts qat;        /* fake quantisation for QAT (quant/qat.h); off unless qat.enabled */
    vp_lora_opts lora;      /* low-rank adapters (train/lora.h); off unless lora.rank */
    int offload;            /* Adam's state and update on the host (train/offload.h) */
    /* where the step will be planned, when known (the pipeline's plan): cast fusion
     * weighs its peak there (precision/cast_fuse.h); NULL: not known */
    const struct vp_device_profile *plan_device;
    int plan_fused_update;
} vp_train_spec;

/* One pass of the training build: its name (`--dump-after NAME`) and what it does. */
typedef struct vp_pass_info {
    const char *name;
    const char *what;
} vp_pass_info;

/* The training build's passes, in the order vp_training_build runs them (the pipeline,
 * pipeline/pipeline.h, lists them between inference and planning). */
int vp_training_pass_count(void);
const vp_pass_info *vp_training_pass(int i);

typedef struct vp_carry {
    int from; /* the value read at the start of a step */
    int to;   /* its value at the end of the step */
} vp_carry;

typedef struct vp_training {
    int loss;            /* value id of the scalar loss */
    int n_params;
    int *params;         /* trainable parameter value ids */
    int *grads;          /* their gradients, same order */
    int n_carry;
    vp_carry *carry;     /* parameters, optimizer state, running statistics */
    int n_added_inputs;
    int added_inputs[4]; /* inputs the loss added (labels, target) */
    int64_t label_classes; /* ce: labels lie in [0, label_classes) */
    int n_frozen;        /* parameters --freeze matched */
    int from_signature;  /* the trainable set came from torch.export's signature (train/signature.h) */
    int n_not_parameters; /* float initializers the signature lists as buffers or constants, or does
                             not list (the exporter's own constants): never trained */
    int n_scalars;       /* no signature: float scalars taken for constants, not trained */
    int n_requires_grad_false; /* the signature's parameters torch does not train (requires_grad=False) */
    int n_not_matched;   /* float initializers --trainable does not match */
    int n_unused;        /* trainable parameters the loss does not depend on */
    int n_frozen_folded; /* nodes folded over frozen initializers (train/fold_frozen.h) */
    int n_dropout_train; /* Dropouts put in training mode (train/train_mode.c) */
    int dropout_step;    /* the carried step count their masks are drawn for, or -1 (vp_train_mode_step_dropouts) */
    int n_attention;     /* attention cores fused into vplan.Attention */
    int n_gqa;           /* of those, grouped-query ones reading K and V unrepeated */
    int n_attention_bshd; /* their Q, K, V inputs read through the head transpose, not copied */
    int n_pool_grad;     /* MaxPool(Relu) gradients taken without the Relu output */
    int n_gelu_matmul;   /* GELUs fused with the product reading them (vplan.GeluMatMul) */
    int n_swiglu_matmul; /* gated MLPs, act(G) U, fused with their down product (vplan.SwiGluMatMul) */
    int n_geglu_matmul;  /* of those, with a GELU gate (Gemma's GeGLU) */
    int first_loss_node, first_backward_node, first_optimizer_node;
    vp_fuse_counts fused; /* patterns replaced by one op before autodiff */
    vp_precision_counts precision; /* low-precision nodes, casts, weight copies */
    vp_cast_fuse_counts cast_fusion; /* Casts folded into their producers */
    int n_recast;        /* weight copies cast again for the backward (precision/recast.h) */
    int n_renorm;        /* norms run again for the backward (remat/recompute_norms.h) */
    int n_renorm_values; /* what they wrote: pairs (the second run's value, the norm's own) */
    int *renorm_values;
    vp_tp_result tp;     /* what the tensor-parallel split did (planner/parallel) */
    vp_qat_counts qat;   /* fake-quantised weights and activations, observers */
    vp_lora_result lora; /* the adapters, the only trainable parameters when there are any */
    int n_offloaded;     /* updates moved to the host (train/offload.h) */
    int64_t offloaded_state_bytes; /* the optimizer state they keep there */
    int loss_scaled;     /* fp16: dynamic loss scaling built, its values in scaling */
    vp_loss_scale scaling;
    char warning[512];   /* something the user should know (a --freeze matching nothing) */
} vp_training;

/* Turns an inferred forward graph into a training step in place.  Fails naming the op
 * and node when a node on the path to a parameter has no gradient rule. */
vp_status vp_training_build(vp_graph *g, const vp_train_spec *spec, vp_training *out, vp_error *err);
void vp_training_free(vp_training *t);

/* The same one pass at a time, for the pipeline driver (pipeline/pipeline.h), which shows
 * the IR between passes: vp_training_begin, then vp_training_run_pass for i = 0, 1, ...
 * vp_training_pass_count() - 1 in order.  g, spec and t must outlive the passes. */
typedef struct vp_training_run {
    vp_graph *g;
    const vp_train_spec *spec;
    vp_training *t;
    int loss; /* the unscaled loss while autodiff differentiates loss * scale */
} vp_training_run;
void vp_training_begin(vp_training_run *c, vp_graph *g, const vp_train_spec *spec, vp_training *t);
vp_status vp_training_run_pass(vp_training_run *c, int i, vp_error *err);

/* Records that value `to`, computed by the step, is value `from` at the next step (a
 * parameter's update, optimizer state, running statistics, a loss scale). */
vp_status vp_training_add_carry(vp_training *t, int from, int to, vp_error *err);

/* Pieces of the builder, one file each. */
vp_status vp_loss_build(vp_graph *g, const vp_loss_spec *spec, vp_training *t, vp_error *err);
vp_status vp_train_mode_apply(vp_graph *g, vp_training *t, vp_error *err);
/* With an optimizer: every Dropout the train-mode pass marked (attribute vplan_step)
 * reads a carried int64 step count as a fourth input, and a fused Attention with dropout
 * (and its gradient) after its mask; an update after its last reader advances it, so
 * that each step draws new masks. */
vp_status vp_train_mode_step_dropouts(vp_graph *g, vp_training *t, vp_error *err);
/* The model metadata key under which `train --save` records the step count reached, from
 * which the next training of the saved model counts on (new masks, not the first run's);
 * the carried state value's name too. */
#define VP_DROPOUT_STEP_KEY "vplan.dropout_step"
vp_status vp_autodiff(vp_graph *g, vp_training *t, vp_error *err);

/* The nodes autodiff would refuse for want of a gradient rule when every float
 * initializer trains and every graph output feeds the loss: what `inspect` warns of
 * before `train` meets it (freezing the parameters before them avoids them).  *nodes
 * (heap, caller frees) gets node ids, last first. */
vp_status vp_autodiff_blockers(const vp_graph *g, int **nodes, int *n_nodes, vp_error *err);
vp_status vp_optimizer_build(vp_graph *g, const vp_opt_spec *opt, vp_training *t, vp_error *err);

#endif
