/* Dynamic loss scaling for float16 training, as torch.cuda.amp.GradScaler does it.
 *
 * In: a training graph being built (vp_training_build calls the three stages: before
 * autodiff, between autodiff and the optimizer, after the optimizer).  Out: two values
 * carried across steps, the scale S (float32, starts at init, 65536 by default) and the
 * count of clean steps C (int32, starts at 0); autodiff differentiates loss * S; the
 * gradients are checked once, all together (com.microsoft.IsAllFinite), and multiplied
 * by 1/S before the optimizer reads them; every update node takes the check as its
 * do_update input (planner/ops/update.c) and, false, leaves what it carries (parameters,
 * moments, Adam's step) bit-identical, in place; then
 *   finite, C + 1 == interval:  S' = 2 S, C' = 0
 *   finite otherwise:           S' = S,   C' = C + 1
 *   not finite:                 S' = S/2, C' = 0
 * Keeps true: the loss reported (vp_training.loss) is the unscaled one; S stays a power
 * of two, so scaling and unscaling are exact; BatchNorm's running statistics, updated by
 * the forward pass, are not held back (GradScaler skips optimizer.step() only). */
#ifndef VP_LOSS_SCALE_H
#define VP_LOSS_SCALE_H

#include "ir/ir.h"

struct vp_training;

typedef struct vp_loss_scale_opts {
    double init;           /* 0: 65536 (2^16) */
    double growth, backoff; /* 0: 2 and 0.5 */
    int64_t interval;      /* clean steps before growing; 0: 2000 */
    int64_t clean_steps;   /* C at the first step: a resumed run's count (0 by default) */
} vp_loss_scale_opts;

/* Where `train --save` keeps S and C between runs: the saved model's metadata_props
 * (ONNX's key/value strings, which other runtimes ignore), S as a C99 hex float
 * ("0x1p+16": exact) and C as a decimal integer. */
#define VP_LOSS_SCALE_KEY "vplan.loss_scale"
#define VP_LOSS_SCALE_COUNT_KEY "vplan.loss_scale_clean_steps"

/* The saved S and C (either may be NULL: absent) read into o->init and o->clean_steps;
 * fails (VP_ERR_INVALID) naming the key on a scale that is not a positive finite power
 * of two or a count that is not an integer in [0, interval). */
vp_status vp_loss_scale_resume(const char *scale, const char *count, vp_loss_scale_opts *o, vp_error *err);

/* The two metadata strings for S and C (buffers of at least 32 bytes). */
void vp_loss_scale_format(double scale, int64_t count, char *scale_buf, char *count_buf);

typedef struct vp_loss_scale {
    int scale, count;        /* the carried state: S, C */
    int scaled_loss;         /* loss * S, what autodiff differentiates */
    int finite;              /* bool scalar: every gradient finite this step */
    int new_scale, new_count;
    int n_opt_carry0;        /* carries before the optimizer's */
    double init;             /* S and C at the first step */
    int64_t clean_steps0;
} vp_loss_scale;

/* Before autodiff: the state and loss * S. */
vp_status vp_loss_scale_begin(vp_graph *g, const vp_loss_scale_opts *o, const struct vp_training *t, vp_loss_scale *ls,
                              vp_error *err);
/* After autodiff: the check over t->grads and their unscaling (t->grads replaced). */
vp_status vp_loss_scale_unscale(vp_graph *g, struct vp_training *t, vp_loss_scale *ls, vp_error *err);
/* After the optimizer (whose updates read ls->finite): the scale's update, carried. */
vp_status vp_loss_scale_finish(vp_graph *g, const vp_loss_scale_opts *o, struct vp_training *t, vp_loss_scale *ls,
                               vp_error *err);

#endif
