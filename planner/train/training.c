/* Builds the training step from an inferred forward graph, as one named list of passes
 * (`passes` below; the pipeline driver, pipeline/pipeline.c, runs them one by one between
 * inference and planning, `onnx-vplan plan --passes` prints them, `--dump-after NAME`
 * shows the IR after one):
 *   fusion -> training mode -> trainable set -> folding over frozen initializers
 *   -> attention fusion -> tensor-parallel split
 *   -> fake quantisation
 *   -> loss -> precision -> autodiff -> optimizer -> optimizer-state offload -> cast fusion.
 * Each stage is its own file; this one chooses the parameters and keeps the order.
 * Precision comes after the loss (which it keeps in float32, casting the logits up) and
 * before autodiff, which then differentiates through its Casts: each gradient op runs in
 * its forward op's dtype, and a weight copy's gradient is cast back to float32 before the
 * optimizer reads it, as autograd does through autocast's casts. */
#include "train/training.h"

#include "precision/recast.h"
#include "remat/recompute_norms.h"

#include "train/fold_frozen.h"
#include "train/attention_rank3.h"
#include "train/fuse_attention.h"
#include "train/fuse_act_matmul.h"
#include "train/fuse_attention_inputs.h"
#include "train/fuse_pool_grad.h"
#include "train/gather_rows.h"
#include "train/offload.h"
#include "train/signature.h"
#include "onnx/onnx_load.h"
#include "ir/vp_regex.h"

#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Where torch 2.x's exporter wrote its signature: the parameters it lists that the graph
 * no longer holds under their names.  With initializers of the exporter's own beside
 * them (folded, transposed or merged copies), or with their module's buffers gone too (a
 * BatchNorm folded into its Conv), the export lost its training structure: refused,
 * naming the fix.  Otherwise (a tied weight read through the other name, a parameter
 * the forward never reads), a warning. */
static vp_status check_signature(const vp_graph *g, const vp_signature *sig, vp_training *t, vp_error *err) {
    vp_signature_facts f;
    char *ours = calloc((size_t)g->n_values + 1, 1); /* LoRA's adapters: neither torch's nor the exporter's */
    if (!ours) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    for (int i = 0; i < t->lora.n; i++) ours[t->lora.adapters[i].a] = ours[t->lora.adapters[i].b] = 1;
    vp_status s = vp_signature_facts_of(g, sig, ours, &f, err);
    free(ours);
    if (s) return s;
    if (f.n_missing && f.n_own)
        return vp_fail(err, VP_ERR_UNSUPPORTED,
                       "%s: torch.onnx.export's optimizer folded or merged %d of the %d parameters torch.export listed "
                       "('%s' is not in the graph) into %d initializers of its own ('%s', ...): trained as it is, this "
                       "export would train constants and tie what torch keeps apart. Export with "
                       "torch.onnx.export(..., optimize=False)",
                       g->path, f.n_missing, f.n_params, f.first_missing, f.n_own, f.first_own);
    if (f.n_folded)
        return vp_fail(err, VP_ERR_UNSUPPORTED,
                       "%s: torch.onnx.export's optimizer folded %d of the %d parameters torch.export listed into the "
                       "ops around them: neither '%s' nor its module's buffer '%s' is in the graph (a BatchNormalization "
                       "folded into the Conv before it, as for inference): trained as it is, this export would train "
                       "another model than torch's. Export with torch.onnx.export(..., optimize=False)",
                       g->path, f.n_folded, f.n_params, f.first_folded, f.folded_buffer);
    if (f.n_missing && !t->warning[0])
        snprintf(t->warning, sizeof t->warning,
                 "%d of the exporter's %d parameters are not in the graph under their names (first: '%.200s'): tied to "
                 "another parameter and trained through it, or not read by the forward",
                 f.n_missing, f.n_params, f.first_missing);
    return VP_OK;
}

static vp_status select_params(vp_graph *g, const vp_train_spec *spec, vp_training *t, vp_error *err) {
    /* with adapters, the base model is frozen whole (train/lora.h) */
    int lora = t->lora.n > 0;
    /* torch 2.x: the exporter's signature says what is a parameter */
    vp_signature sig = {0};
    char *text = vp_onnx_graph_metadata(g, VP_SIGNATURE_KEY);
    vp_status s = text ? vp_signature_parse(text, &sig, err) : VP_OK;
    free(text);
    if (!s && sig.n_params) s = check_signature(g, &sig, t, err);
    t->from_signature = sig.n_params > 0;
    regex_t re_freeze, re_train;
    int have_freeze = 0, have_train = 0;
    if (!s && spec->freeze) have_freeze = !(s = vp_regex_compile(&re_freeze, spec->freeze, "--freeze", err));
    if (!s && spec->trainable) have_train = !(s = vp_regex_compile(&re_train, spec->trainable, "--trainable", err));
    if (!s && !(t->params = malloc(((size_t)g->n_values + 1) * sizeof *t->params)))
        s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
    for (int v = 0; !s && v < g->n_values; v++) {
        vp_value *val = &g->values[v];
        if (!(val->flags & VP_VAL_INITIALIZER) || (val->flags & (VP_VAL_STATE | VP_VAL_CONST))) continue;
        if (!vp_dtype_is_float(val->dtype)) continue;
        int adapter = lora && vp_lora_is_adapter(&t->lora, v);
        if (adapter) {
            /* LoRA's own: trained whatever the signature says of the model's */
        } else if (have_train) {
            if (regexec(&re_train, val->name, 0, NULL, 0) != 0) {
                t->n_not_matched++;
                continue;
            }
        } else {
            vp_train_reason r = vp_train_reason_of(val, &sig);
            t->n_not_parameters += r == VP_TRAIN_NOT_PARAMETER;
            t->n_scalars += r == VP_TRAIN_SCALAR;
            t->n_requires_grad_false += r == VP_TRAIN_FROZEN;
            if (!vp_train_reason_trains(r)) continue;
        }
        if ((lora && !adapter) || (have_freeze && regexec(&re_freeze, val->name, 0, NULL, 0) == 0)) {
            t->n_frozen++;
            continue;
        }
        val->flags |= VP_VAL_PARAM;
        t->params[t->n_params++] = v;
    }
    vp_signature_free(&sig);
    if (have_freeze) regfree(&re_freeze);
    if (have_train) regfree(&re_train);
    if (s) return s;
    if (have_freeze && !t->n_frozen && !lora)
        snprintf(t->warning, sizeof t->warning, "--freeze '%s' matches no parameter", spec->freeze);
    if (!t->n_params)
        return vp_fail(err, VP_ERR_INVALID, "%s: no trainable parameter (%s)", g->path,
                       have_train    ? "--trainable matches no float initializer, or --freeze matched them all"
                       : spec->freeze ? "--freeze matched every parameter"
                                      : "the model has no float initializer that is a parameter");
    return VP_OK;
}

/* ---- the passes, in order ----
 * Each reads and writes the one graph; what a later pass needs of an earlier one is in
 * the vp_training it fills (or, for the loss scaling around autodiff, in the context). */

typedef vp_training_run build_ctx;

static vp_status pass_fuse(build_ctx *c, vp_error *err) {
    return c->spec->no_fuse ? VP_OK : vp_fuse(c->g, &c->t->fused, err);
}

/* after fusion, so a Linear's product reads its weight directly (FusedMatMul) */
static vp_status pass_lora(build_ctx *c, vp_error *err) {
    return c->spec->lora.rank > 0 ? vp_lora_apply(c->g, &c->spec->lora, &c->t->lora, err) : VP_OK;
}

/* under QAT the GELU stays apart: its output is the product's input, fake-quantised */
static vp_status pass_fuse_act_matmul(build_ctx *c, vp_error *err) {
    if (c->spec->no_fuse || c->spec->qat.enabled) return VP_OK;
    return vp_fuse_act_matmul(c->g, &c->t->n_gelu_matmul, &c->t->n_swiglu_matmul, &c->t->n_geglu_matmul, err);
}

static vp_status pass_train_mode(build_ctx *c, vp_error *err) { return vp_train_mode_apply(c->g, c->t, err); }

static vp_status pass_trainable(build_ctx *c, vp_error *err) { return select_params(c->g, c->spec, c->t, err); }

/* once the trainable set is known: a frozen buffer's arithmetic (a causal mask made from
 * a registered buffer) is a constant the attention fusion can read */
static vp_status pass_fold_frozen(build_ctx *c, vp_error *err) {
    return vp_fold_frozen(c->g, c->t, &c->t->n_frozen_folded, err);
}

/* after the trainable set: a mask that depends on a parameter is not fused */
/* after fold-frozen: the indices are often computed from scalars the trainable choice
 * only then says are constants (DeBERTa's log-bucket positions) */
static vp_status pass_gather_rows(build_ctx *c, vp_error *err) {
    return c->spec->no_fuse ? VP_OK : vp_gather_rows(c->g, &c->t->fused.gather_rows, err);
}

static vp_status pass_fuse_attention(build_ctx *c, vp_error *err) {
    if (c->spec->attention != VP_ATTENTION_FUSED) return VP_OK;
    vp_fuse_attention_opts fo = {.detect_causal = 1};
    int n_rank3;
    vp_status s = vp_attention_rank3(c->g, &n_rank3, err);
    return s ? s : vp_fuse_attention(c->g, &fo, &c->t->n_attention, err);
}

/* after tp-split, which splits the key/value repeat's Expand to this rank's heads */
static vp_status pass_attention_inputs(build_ctx *c, vp_error *err) {
    if (c->spec->attention != VP_ATTENTION_FUSED) return VP_OK;
    return vp_fuse_attention_inputs(c->g, &c->t->n_gqa, &c->t->n_attention_bshd, err);
}

/* on the forward graph, so that autodiff makes the conjugate all-reduces */
static vp_status pass_tp_split(build_ctx *c, vp_error *err) {
    if (c->spec->tp.n <= 1) return VP_OK;
    vp_tp_opts tp = c->spec->tp; /* an LM head may split by vocabulary into the cross-entropy */
    if (c->spec->loss.kind == VP_LOSS_CE) tp.logits = c->spec->loss.value;
    vp_status s = vp_tp_split(c->g, &tp, &c->t->tp, err);
    if (!s && c->t->lora.n) s = vp_lora_check_split(c->g, &c->t->lora, &c->t->tp, err);
    return s;
}

/* QAT on the forward graph: autodiff then builds the straight-through gradients, and
 * precision keeps the fake quantisation in float32 */
static vp_status pass_qat(build_ctx *c, vp_error *err) {
    char warning[512] = "";
    vp_status s = vp_qat_apply(c->g, &c->spec->qat, c->t, &c->t->qat, warning, err);
    if (!s && warning[0] && !c->t->warning[0]) snprintf(c->t->warning, sizeof c->t->warning, "%s", warning);
    return s;
}

static vp_status pass_loss(build_ctx *c, vp_error *err) { return vp_loss_build(c->g, &c->spec->loss, c->t, err); }

static vp_status pass_precision(build_ctx *c, vp_error *err) {
    vp_precision_opts po = {c->spec->precision, c->spec->fp32_ops, c->spec->low_ops};
    return vp_precision_apply(c->g, &po, &c->t->first_loss_node, &c->t->precision, err);
}

/* autodiff differentiates loss * scale; the loss reported stays unscaled */
static vp_status pass_loss_scale(build_ctx *c, vp_error *err) {
    c->t->loss_scaled = c->spec->precision == VP_PRECISION_FP16 && !c->spec->no_loss_scaling;
    c->loss = c->t->loss;
    if (!c->t->loss_scaled) return VP_OK;
    vp_status s = vp_loss_scale_begin(c->g, &c->spec->loss_scale, c->t, &c->t->scaling, err);
    if (!s) c->t->loss = c->t->scaling.scaled_loss;
    return s;
}

static vp_status pass_autodiff(build_ctx *c, vp_error *err) { return vp_autodiff(c->g, c->t, err); }

static vp_status pass_tp_regather(build_ctx *c, vp_error *err) {
    if (c->spec->tp.n <= 1 || !c->spec->tp.sp) return VP_OK;
    return vp_tp_regather(c->g, c->t, &c->t->tp.n_regather, err);
}

static vp_status pass_qat_masks(build_ctx *c, vp_error *err) { return vp_qat_masks(c->g, &c->spec->qat, &c->t->qat, err); }

static vp_status pass_unscale(build_ctx *c, vp_error *err) {
    c->t->loss = c->loss;
    return c->t->loss_scaled ? vp_loss_scale_unscale(c->g, c->t, &c->t->scaling, err) : VP_OK;
}

static vp_status pass_fuse_pool_grad(build_ctx *c, vp_error *err) {
    return c->spec->no_fuse ? VP_OK : vp_fuse_pool_grad(c->g, &c->t->n_pool_grad, err);
}

static vp_status pass_optimizer(build_ctx *c, vp_error *err) {
    vp_training *t = c->t;
    for (int i = 0; i < t->n_params; i++) t->n_unused += t->grads[i] < 0;
    if (c->spec->no_optimizer) { /* gradients are the step's results: the caller reads them */
        for (int i = 0; i < t->n_params; i++)
            if (t->grads[i] >= 0) c->g->values[t->grads[i]].flags |= VP_VAL_OUTPUT;
        return VP_OK;
    }
    vp_status s = vp_optimizer_build(c->g, &c->spec->opt, t, err);
    if (!s) s = vp_train_mode_step_dropouts(c->g, t, err);
    if (!s && t->loss_scaled) s = vp_loss_scale_finish(c->g, &c->spec->loss_scale, t, &t->scaling, err);
    if (!s) s = vp_qat_finish(c->g, &c->spec->qat, t, err);
    return s;
}

static vp_status pass_offload(build_ctx *c, vp_error *err) {
    if (c->spec->no_optimizer || !c->spec->offload) return VP_OK;
    return vp_offload_apply(c->g, c->t, &c->t->n_offloaded, &c->t->offloaded_state_bytes, err);
}

static vp_status pass_recast_weights(build_ctx *c, vp_error *err);
static vp_status pass_recompute_norms(build_ctx *c, vp_error *err);

/* The build's tail from cast fusion on (the fusions of o, or none; then the passes after
 * it, themselves) on a copy of the step: its peaks where it will be planned. */
static vp_status tail_peaks(build_ctx *c, const vp_cast_fuse_opts *o, int fuse, int64_t peak[2], vp_error *err) {
    vp_graph *copy = vp_graph_clone(c->g);
    if (!copy) return vp_fail(err, VP_ERR_NOMEM, "out of memory copying the step");
    vp_training t = *c->t; /* the passes write counts and the norms' pairs: the copy's own */
    t.renorm_values = NULL;
    t.n_renorm_values = 0;
    build_ctx tail = *c;
    tail.g = copy;
    tail.t = &t;
    vp_status s = fuse ? vp_cast_fuse(copy, &t, o, &t.cast_fusion, err) : vp_graph_link(copy, err);
    if (!s) s = pass_recast_weights(&tail, err);
    if (!s) s = pass_recompute_norms(&tail, err);
    if (!s) s = vp_cast_fuse_peaks(copy, &t, o, peak, err);
    free(t.renorm_values);
    vp_graph_free(copy);
    return s;
}

/* last: a value's readers, the backward's and the optimizer's included, are all known.
 * Each fusion is weighed in the order the step has now; fused, producers store other
 * widths, the list scheduler may order the backward otherwise (GPT-2's weight-gradient
 * products all moved to the end, beside every gradient and a product's workspace) and
 * the norms run again from other inputs (ViT's peak moved).  So the whole tail is tried
 * on a copy first, and the fusions kept only where no peak grows against none: all of
 * them, else the narrowings alone, else none.  A bf16 step then never holds more than
 * it does unfused, which checkpointing's search relies on to fit wherever float32
 * does. */
static vp_status pass_cast_fusion(build_ctx *c, vp_error *err) {
    const vp_train_spec *sp = c->spec;
    if (sp->precision == VP_PRECISION_FP32 || sp->no_cast_fusion) return vp_graph_link(c->g, err);
    vp_cast_fuse_opts o = {sp->plan_device, sp->plan_fused_update, 0};
    int64_t none[2], with[2];
    vp_status s = tail_peaks(c, &o, 0, none, err);
    for (o.narrow_only = 0; !s && o.narrow_only < 2; o.narrow_only++) {
        s = tail_peaks(c, &o, 1, with, err);
        if (!s && with[0] <= none[0] && with[1] <= none[1]) {
            s = vp_cast_fuse(c->g, c->t, &o, &c->t->cast_fusion, err);
            break;
        }
    }
    return s ? s : vp_graph_link(c->g, err);
}

/* last: every reader of a weight copy is in place (cast fusion leaves weights' Casts,
 * which have no producer to fold into); with --offload the device keeps each weight in
 * float32 too (the updated one is copied back over it after its last reader) */
static vp_status pass_recast_weights(build_ctx *c, vp_error *err) {
    if (c->spec->precision == VP_PRECISION_FP32 || c->spec->keep_weight_copies) return VP_OK;
    return vp_recast_weights(c->g, c->t, &c->t->n_recast, err);
}

/* after recast-weights: a norm's low-precision output (its Cast fused into it) is run
 * again like any other */
static vp_status pass_recompute_norms(build_ctx *c, vp_error *err) {
    if (c->spec->keep_norm_outputs) return VP_OK;
    return vp_remat_norms(c->g, c->t, &c->t->n_renorm, err);
}

static const struct {
    vp_pass_info info;
    vp_status (*run)(build_ctx *c, vp_error *err);
} passes[] = {
    {{"fuse", "exporters' decomposed patterns (LayerNorm, RMSNorm, GELU, SiLU, MatMul of a transposed weight) as one op each"}, pass_fuse},
    {{"lora", "low-rank adapters beside the chosen weights (--lora)"}, pass_lora},
    {{"fuse-act-matmul", "a GELU or a gated MLP's swish(G) U into the product that reads it"}, pass_fuse_act_matmul},
    {{"train-mode", "Dropout and BatchNorm as in module.train()"}, pass_train_mode},
    {{"trainable", "the parameters: the exporter's signature, else float initializers but scalars (--trainable, --freeze)"}, pass_trainable},
    {{"fold-frozen", "what reads only constants and frozen initializers, folded"}, pass_fold_frozen},
    {{"gather-rows", "GatherElements over indices that repeat along leading axes as a Gather of one row"}, pass_gather_rows},
    {{"fuse-attention", "attention cores as one op (--attention fused)"}, pass_fuse_attention},
    {{"tp-split", "this rank's forward graph: column/row splits, collectives (--tp)"}, pass_tp_split},
    {{"attention-inputs", "attention reading K, V unrepeated (GQA) and Q, K, V through their head transposes"},
     pass_attention_inputs},
    {{"qat", "FakeQuant on the inputs of Conv/Gemm/MatMul, observers as state (--qat)"}, pass_qat},
    {{"loss", "the scalar float32 loss (--loss)"}, pass_loss},
    {{"precision", "bf16/fp16 placement, Casts, weight copies (--precision)"}, pass_precision},
    {{"loss-scale", "fp16: the loss times the dynamic scale, for autodiff"}, pass_loss_scale},
    {{"autodiff", "the backward: one gradient op per forward op"}, pass_autodiff},
    {{"tp-regather", "sequence parallelism's re-gathers in the backward (--sp)"}, pass_tp_regather},
    {{"qat-masks", "the straight-through gradients' masks as bytes"}, pass_qat_masks},
    {{"unscale", "fp16: gradients divided by the scale, overflow checked"}, pass_unscale},
    {{"fuse-pool-grad", "MaxPool(Relu) gradients without the Relu output"}, pass_fuse_pool_grad},
    {{"optimizer", "fused updates of every parameter (--optimizer), state carried"}, pass_optimizer},
    {{"offload", "Adam's state and update on the host (--offload)"}, pass_offload},
    {{"cast-fusion", "a Cast done by its producer as it stores (low precision)"}, pass_cast_fusion},
    {{"recast-weights", "low precision: weights cast again for the backward, no copy held across (--keep-weight-copies)"},
     pass_recast_weights},
    {{"recompute-norms", "norms run again for the backward from the input their gradient keeps; outputs not held across (--keep-norm-outputs)"},
     pass_recompute_norms},
};

int vp_training_pass_count(void) { return (int)(sizeof passes / sizeof passes[0]); }

const vp_pass_info *vp_training_pass(int i) { return i >= 0 && i < vp_training_pass_count() ? &passes[i].info : NULL; }

void vp_training_begin(vp_training_run *c, vp_graph *g, const vp_train_spec *spec, vp_training *t) {
    memset(t, 0, sizeof *t);
    t->loss = -1;
    t->dropout_step = -1;
    *c = (vp_training_run){g, spec, t, -1};
}

vp_status vp_training_run_pass(vp_training_run *c, int i, vp_error *err) {
    if (i < 0 || i >= vp_training_pass_count()) return vp_fail(err, VP_ERR_INVALID, "internal: no training pass %d", i);
    return passes[i].run(c, err);
}

vp_status vp_training_build(vp_graph *g, const vp_train_spec *spec, vp_training *t, vp_error *err) {
    vp_training_run c;
    vp_training_begin(&c, g, spec, t);
    vp_status s = VP_OK;
    for (int i = 0; i < vp_training_pass_count() && !s; i++) s = passes[i].run(&c, err);
    return s;
}

vp_status vp_training_add_carry(vp_training *t, int from, int to, vp_error *err) {
    vp_carry *c = realloc(t->carry, (size_t)(t->n_carry + 1) * sizeof *c);
    if (!c) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    t->carry = c;
    t->carry[t->n_carry++] = (vp_carry){from, to};
    return VP_OK;
}

void vp_training_free(vp_training *t) {
    free(t->params);
    free(t->grads);
    free(t->carry);
    free(t->renorm_values);
    vp_tp_result_free(&t->tp);
    vp_lora_result_free(&t->lora);
    memset(t, 0, sizeof *t);
}
