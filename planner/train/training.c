/* Builds the training step from an inferred forward graph:
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

#include "train/fold_frozen.h"
#include "train/fuse_attention.h"
#include "train/fuse_gelu_matmul.h"
#include "train/fuse_pool_grad.h"
#include "train/offload.h"
#include "ir/vp_regex.h"

#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static vp_status select_params(vp_graph *g, const char *freeze, vp_training *t, vp_error *err) {
    /* with adapters, the base model is frozen whole (train/lora.h) */
    int lora = t->lora.n > 0;
    regex_t re;
    if (freeze) {
        vp_status rs = vp_regex_compile(&re, freeze, "--freeze", err);
        if (rs) return rs;
    }
    t->params = malloc(((size_t)g->n_values + 1) * sizeof *t->params);
    if (!t->params) {
        if (freeze) regfree(&re);
        return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    }
    for (int v = 0; v < g->n_values; v++) {
        vp_value *val = &g->values[v];
        if (!(val->flags & VP_VAL_INITIALIZER) || (val->flags & (VP_VAL_STATE | VP_VAL_CONST))) continue;
        if (!vp_dtype_is_float(val->dtype)) continue;
        if ((lora && !vp_lora_is_adapter(&t->lora, v)) || (freeze && regexec(&re, val->name, 0, NULL, 0) == 0)) {
            t->n_frozen++;
            continue;
        }
        val->flags |= VP_VAL_PARAM;
        t->params[t->n_params++] = v;
    }
    if (freeze) {
        regfree(&re);
        if (!t->n_frozen && !lora)
            snprintf(t->warning, sizeof t->warning, "--freeze '%s' matches no parameter", freeze);
    }
    if (!t->n_params)
        return vp_fail(err, VP_ERR_INVALID, "%s: no trainable parameter (the model has no float initializers%s)", g->path,
                       freeze ? ", or --freeze matched them all" : "");
    return VP_OK;
}

vp_status vp_training_build(vp_graph *g, const vp_train_spec *spec, vp_training *t, vp_error *err) {
    memset(t, 0, sizeof *t);
    t->loss = -1;
    vp_status s = spec->no_fuse ? VP_OK : vp_fuse(g, &t->fused, err);
    /* after fusion, so a Linear's product reads its weight directly (FusedMatMul) */
    if (!s && spec->lora.rank > 0) s = vp_lora_apply(g, &spec->lora, &t->lora, err);
    /* under QAT the GELU stays apart: its output is the product's input, fake-quantised */
    if (!s && !spec->no_fuse && !spec->qat.enabled) s = vp_fuse_gelu_matmul(g, &t->n_gelu_matmul, err);
    if (!s) s = vp_train_mode_apply(g, t, err);
    if (!s) s = select_params(g, spec->freeze, t, err);
    /* once the trainable set is known: a frozen buffer's arithmetic (a causal mask made
     * from a registered buffer) is a constant the attention fusion can read */
    if (!s) s = vp_fold_frozen(g, t, &t->n_frozen_folded, err);
    /* after the trainable set: a mask that depends on a parameter is not fused */
    if (!s && spec->attention == VP_ATTENTION_FUSED) {
        vp_fuse_attention_opts fo = {.detect_causal = 1};
        s = vp_fuse_attention(g, &fo, &t->n_attention, err);
    }
    /* on the forward graph, so that autodiff makes the conjugate all-reduces */
    if (!s && spec->tp.n > 1) {
        vp_tp_opts tp = spec->tp; /* an LM head may split by vocabulary into the cross-entropy */
        if (spec->loss.kind == VP_LOSS_CE) tp.logits = spec->loss.value;
        s = vp_tp_split(g, &tp, &t->tp, err);
        if (!s && t->lora.n) s = vp_lora_check_split(g, &t->lora, &t->tp, err);
    }
    /* QAT on the forward graph: autodiff then builds the straight-through gradients,
     * and precision keeps the fake quantisation in float32 */
    char qat_warning[512] = "";
    if (!s) s = vp_qat_apply(g, &spec->qat, t, &t->qat, qat_warning, err);
    if (!s && qat_warning[0] && !t->warning[0]) snprintf(t->warning, sizeof t->warning, "%s", qat_warning);
    if (!s) s = vp_loss_build(g, &spec->loss, t, err);
    vp_precision_opts po = {spec->precision, spec->fp32_ops, spec->low_ops};
    if (!s) s = vp_precision_apply(g, &po, &t->first_loss_node, &t->precision, err);
    t->loss_scaled = !s && spec->precision == VP_PRECISION_FP16 && !spec->no_loss_scaling;
    int loss = t->loss;
    if (t->loss_scaled) { /* autodiff differentiates loss * scale; the loss reported stays unscaled */
        s = vp_loss_scale_begin(g, &spec->loss_scale, t, &t->scaling, err);
        if (!s) t->loss = t->scaling.scaled_loss;
    }
    if (!s) s = vp_autodiff(g, t, err);
    if (!s && spec->tp.n > 1 && spec->tp.sp) s = vp_tp_regather(g, t, &t->tp.n_regather, err);
    if (!s) s = vp_qat_masks(g, &spec->qat, &t->qat, err);
    t->loss = loss;
    if (!s && t->loss_scaled) s = vp_loss_scale_unscale(g, t, &t->scaling, err);
    if (!s && !spec->no_fuse) s = vp_fuse_pool_grad(g, &t->n_pool_grad, err);
    if (!s) {
        for (int i = 0; i < t->n_params; i++) t->n_unused += t->grads[i] < 0;
        if (!spec->no_optimizer) {
            s = vp_optimizer_build(g, &spec->opt, t, err);
            if (!s && t->loss_scaled) s = vp_loss_scale_finish(g, &spec->loss_scale, t, &t->scaling, err);
            if (!s) s = vp_qat_finish(g, &spec->qat, t, err);
            if (!s && spec->offload) s = vp_offload_apply(g, t, &t->n_offloaded, &t->offloaded_state_bytes, err);
        } else { /* gradients are the step's results: the caller reads them */
            for (int i = 0; i < t->n_params; i++)
                if (t->grads[i] >= 0) g->values[t->grads[i]].flags |= VP_VAL_OUTPUT;
        }
    }
    /* last: a value's readers, the backward's and the optimizer's included, are all known */
    if (!s && spec->precision != VP_PRECISION_FP32 && !spec->no_cast_fusion) s = vp_cast_fuse(g, t, &t->cast_fusion, err);
    if (!s) s = vp_graph_link(g, err);
    return s;
}

void vp_training_free(vp_training *t) {
    free(t->params);
    free(t->grads);
    free(t->carry);
    vp_tp_result_free(&t->tp);
    vp_lora_result_free(&t->lora);
    memset(t, 0, sizeof *t);
}
