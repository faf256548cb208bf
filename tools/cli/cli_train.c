#include "cli_train.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cli_train_init(cli_train_opts *o) {
    memset(o, 0, sizeof *o);
    o->lr = o->momentum = o->eps = o->weight_decay = o->loss_scale = NAN;
    o->tp = o->qat_freeze_after = -1; /* not given: a 0 given is refused, not taken for "off" */
    const cli_opt t[] = {
        {"--loss", CLI_STR, &o->loss, "ce:LOGITS|mse:OUTPUT|output:NAME",
         "ce: softmax cross-entropy over the last axis of LOGITS, mean\n"
         "over every leading position (adds an int64 input 'labels');\n"
         "mse: mean squared error (adds an input 'target');\n"
         "output: the model's own scalar loss"},
        {"--optimizer", CLI_ENUM, &o->optimizer, "sgd|momentum|adam|adamw", "PyTorch semantics (default sgd)"},
        {"--lr", CLI_NUM, &o->lr, "X", "learning rate (sgd, momentum 0.01; adam, adamw 0.001)"},
        {"--momentum", CLI_NUM, &o->momentum, "X", "momentum factor (default 0.9)"},
        {"--betas", CLI_STR, &o->betas, "B1,B2", "Adam betas (default 0.9,0.999)"},
        {"--eps", CLI_NUM, &o->eps, "X", "Adam epsilon (default 1e-8)"},
        {"--weight-decay", CLI_NUM, &o->weight_decay, "X", "L2 penalty; decoupled for adamw (default 0; adamw 0.01)"},
        {"--trainable", CLI_STR, &o->spec.trainable, "REGEX",
         "train exactly the float initializers whose names match (before\n"
         "--freeze); by default the exporter's signature decides (torch 2.x:\n"
         "its parameters, but those onnx_vplan.export marks requires_grad=False),\n"
         "else every float initializer but scalars"},
        {"--freeze", CLI_STR, &o->spec.freeze, "REGEX",
         "parameters whose names match get no gradient and no state; name here\n"
         "the parameters torch does not train (requires_grad=False, as Marian's\n"
         "position tables): torch.onnx.export does not record it"},
        {"--attention", CLI_ENUM, &o->attention, "fused|plain",
         "attention cores (MatMul, scale, mask, Softmax, MatMul) as one op whose\n"
         "backward recomputes the probabilities from the row log-sum-exp, so the\n"
         "batch x heads x seq x seq matrix is never kept (fused, default), or as\n"
         "the exporter wrote them (plain); masks fuse as constants, inputs (a\n"
         "padding mask, its rows that keep no key zeroed as torch's guard does) or\n"
         "trained biases (T5's position bias, its gradient from the fused backward)"},
        {"--precision", CLI_ENUM, &o->precision, "fp32|bf16|fp16",
         "mixed precision as PyTorch autocast places it: MatMul, Gemm, Conv and\n"
         "attention (and their gradients) in bf16 or fp16, softmax, normalisation,\n"
         "reductions, exp/log and the loss in fp32, the rest as its widest input;\n"
         "fp32 master weights and optimizer state (default fp32)"},
        {"--fp32-ops", CLI_STR, &o->spec.fp32_ops, "OP,OP", "ops kept in fp32 under --precision bf16|fp16 (op types, such as Gelu)"},
        {"--low-ops", CLI_STR, &o->spec.low_ops, "OP,OP", "ops run in bf16|fp16 under --precision (op types, such as Softmax)"},
        {"--no-cast-fusion", CLI_SET, &o->spec.no_cast_fusion, NULL,
         "under --precision bf16|fp16, keep every Cast a node of its own\n"
         "(default: a Cast whose input nothing else reads is done by that\n"
         "input's producer as it stores its result, bit for bit the same,\n"
         "where that does not raise the step's peak on --device)"},
        {"--keep-weight-copies", CLI_SET, &o->spec.keep_weight_copies, NULL,
         "under --precision bf16|fp16, hold each weight's low-precision copy\n"
         "from the forward to the backward, as PyTorch's autocast does (default:\n"
         "cast the weight again where the backward reads it, so no copy is held\n"
         "across; the same bits, a Cast per weight more)"},
        {"--keep-norm-outputs", CLI_SET, &o->spec.keep_norm_outputs, NULL,
         "hold each LayerNormalization's and RMSNorm's output from the forward\n"
         "to the backward, as PyTorch does (default: where the backward keeps\n"
         "the norm's input for its gradient, run the norm again there for the\n"
         "products that read its output, so one activation per norm is not held\n"
         "across; the same bits, one norm per layer more)"},
        {"--loss-scale", CLI_NUM, &o->loss_scale, "S",
         "fp16: the dynamic loss scale at the first step, a power of two\n"
         "(default 65536, GradScaler's, or the scale a model written by\n"
         "train --save carries)"},
        {"--tp", CLI_INT, &o->tp, "N",
         "tensor parallelism over N ranks: Megatron column/row splits found\n"
         "in the graph (MLP pairs, attention by whole heads), each rank's\n"
         "slice of the weights, all-reduces where the splits meet; the token\n"
         "embedding and LM head split by vocabulary, the cross-entropy across\n"
         "ranks (default 1)"},
        {"--sp", CLI_SET, &o->spec.tp.sp, NULL,
         "sequence parallelism with --tp: between the regions (LayerNorms,\n"
         "residuals) each rank holds 1/N of the sequence; reduce-scatter and\n"
         "all-gather instead of all-reduce"},
        {"--qat", CLI_STR, &o->qat, "int8[:per-channel|per-tensor][:asym|sym][:lsq]",
         "quantisation-aware training: fake int8 quantisation of every input\n"
         "of Conv, ConvTranspose, Gemm, MatMul (weights symmetric, per output\n"
         "channel or per tensor; activations per tensor, uint8 affine or int8\n"
         "symmetric) and of the residual input of skip-connection Adds, with\n"
         "moving-average min/max observers, or learned scales (lsq)"},
        {"--qat-exclude", CLI_STR, &o->spec.qat.exclude, "REGEX", "nodes whose names match stay float under --qat (default: none)"},
        {"--qat-freeze-after", CLI_INT, &o->qat_freeze_after, "N", "observers keep their range after N steps (default: never)"},
        {"--lora", CLI_STR, &o->lora, "r=R[,alpha=X][:REGEX]",
         "low-rank adapters (LoRA): beside each float weight of a MatMul,\n"
         "FusedMatMul, Gemm or ungrouped Conv whose name matches REGEX\n"
         "(default: all), A and B of rank R, B zero at the start, added as\n"
         "(X A^T) B^T * alpha/R (a Conv: A a convolution to R channels, B\n"
         "1x1 back; alpha default R); only the adapters train, the model is\n"
         "frozen; with --tp, adapters of split weights are refused"},
        {"--lora-load", CLI_STR, &o->spec.lora.load, "ADAPTERS.onnx",
         "with --lora: start the adapters from a file written by train --save"},
        {"--offload", CLI_SET, &o->spec.offload, NULL,
         "optimizer-state offload (ZeRO-Offload): Adam's moments, float32\n"
         "master weights and update on the host, each gradient copied out when\n"
         "final and each updated weight copied back; the CPU backend emulates it"},
        {"--no-fuse", CLI_SET, &o->spec.no_fuse, NULL,
         "differentiate GELU and LayerNorm piece by piece as the exporter\n"
         "decomposed them (default: one op each, as ONNX Runtime fuses them),\n"
         "and MaxPool of a ReLU output through the ReLU output kept for the\n"
         "backward (default: a one-byte argmax per window, so it is not kept)"},
        {"--dump-after", CLI_STR, &o->dump_after, "PASS",
         "print the IR after PASS on stdout: its nodes in order with dtypes,\n"
         "shapes and attributes (--passes lists the passes)"},
        {"--passes", CLI_ACTION, (void *)cli_print_passes, NULL, "list the pipeline's passes in order and exit"},
        {0}};
    _Static_assert(sizeof t <= sizeof o->table, "cli_train_opts.table too small");
    memcpy(o->table, t, sizeof t);
}

int cli_print_passes(void) {
    printf("The pipeline, in order (--dump-after NAME prints the IR after one; the memory\n"
           "passes after `remat` run in `plan` only, `schedule` dumps the step order):\n");
    for (int i = 0; i < vp_pipeline_pass_count(); i++) {
        vp_pipeline_pass p = vp_pipeline_pass_at(i);
        printf("%3d  %-17s %s\n", i + 1, p.name, p.what);
    }
    return 0;
}

static vp_status parse_betas(const char *v, vp_opt_spec *opt, vp_error *err) {
    char *end;
    errno = 0;
    opt->beta1 = strtod(v, &end);
    if (*end != ',') return vp_fail(err, VP_ERR_USAGE, "--betas expects B1,B2 (for example 0.9,0.999), got '%s'", v);
    opt->beta2 = strtod(end + 1, &end);
    if (*end || errno || opt->beta1 < 0 || opt->beta1 >= 1 || opt->beta2 < 0 || opt->beta2 >= 1)
        return vp_fail(err, VP_ERR_USAGE, "--betas expects two numbers in [0, 1), got '%s'", v);
    return VP_OK;
}

vp_status cli_train_finish(cli_train_opts *o, vp_error *err) {
    if (o->dump_after) {
        vp_status ds = vp_pipeline_check_dump(o->dump_after, o->planning ? VP_PIPELINE_PLAN : VP_PIPELINE_TRAIN, err);
        if (ds) return ds;
    }
    if (!o->loss) return vp_fail(err, VP_ERR_USAGE, "--loss is required (for example --loss ce:logits)");
    vp_status s = vp_loss_parse(o->loss, &o->spec.loss, err);
    if (!s) s = vp_opt_parse(o->optimizer ? o->optimizer : "sgd", &o->spec.opt, err);
    if (!s && o->betas) s = parse_betas(o->betas, &o->spec.opt, err);
    o->spec.attention = o->attention && !strcmp(o->attention, "plain") ? VP_ATTENTION_PLAIN : VP_ATTENTION_FUSED;
    o->spec.precision = !o->precision || !strcmp(o->precision, "fp32") ? VP_PRECISION_FP32
                        : !strcmp(o->precision, "bf16")                ? VP_PRECISION_BF16
                                                                       : VP_PRECISION_FP16;
    if (s) return s;
    if ((o->spec.fp32_ops || o->spec.low_ops) && o->spec.precision == VP_PRECISION_FP32)
        return vp_fail(err, VP_ERR_USAGE, "--%s applies to --precision bf16 or fp16 only",
                       o->spec.fp32_ops ? "fp32-ops" : "low-ops");
    vp_precision_opts po = {o->spec.precision, o->spec.fp32_ops, o->spec.low_ops};
    if ((s = vp_precision_check_ops(&po, err))) return s;
    if (!isnan(o->loss_scale)) {
        if (o->spec.precision != VP_PRECISION_FP16)
            return vp_fail(err, VP_ERR_USAGE, "--loss-scale applies to --precision fp16 only");
        char buf[32], unused[32];
        vp_loss_scale_format(o->loss_scale, 0, buf, unused);
        vp_loss_scale_opts ls = {0};
        if (vp_loss_scale_resume(buf, NULL, &ls, err))
            return vp_fail(err, VP_ERR_USAGE, "--loss-scale expects a power of two (such as 65536 or 1099511627776), got %g",
                           o->loss_scale);
        o->spec.loss_scale.init = o->loss_scale;
    }
    if (o->tp == 0 || o->tp > 4096) return vp_fail(err, VP_ERR_USAGE, "--tp must be between 1 and 4096");
    o->spec.tp.n = o->tp > 0 ? (int)o->tp : 1;
    if (o->spec.tp.sp && o->spec.tp.n < 2) return vp_fail(err, VP_ERR_USAGE, "--sp needs --tp 2 or more");
    if (o->qat && (s = vp_qat_parse(o->qat, &o->spec.qat, err))) return s;
    if (!o->qat && (o->spec.qat.exclude || o->qat_freeze_after >= 0))
        return vp_fail(err, VP_ERR_USAGE, "--%s applies to --qat only", o->spec.qat.exclude ? "qat-exclude" : "qat-freeze-after");
    if (o->qat_freeze_after == 0)
        return vp_fail(err, VP_ERR_USAGE, "--qat-freeze-after must be at least 1 step (leave it out for never)");
    o->spec.qat.freeze_after = o->qat_freeze_after > 0 ? o->qat_freeze_after : 0;
    if (o->spec.offload && o->spec.opt.kind != VP_OPT_ADAM && o->spec.opt.kind != VP_OPT_ADAMW)
        return vp_fail(err, VP_ERR_USAGE, "--offload applies to --optimizer adam or adamw only");
    if (o->lora) {
        const char *load = o->spec.lora.load;
        if ((s = vp_lora_parse(o->lora, &o->spec.lora, err))) return s;
        o->spec.lora.load = load;
    } else if (o->spec.lora.load) {
        return vp_fail(err, VP_ERR_USAGE, "--lora-load applies to --lora only");
    }
    vp_opt_spec *opt = &o->spec.opt;
    if (!isnan(o->lr)) opt->lr = o->lr;
    if (!isnan(o->momentum)) opt->momentum = o->momentum;
    if (!isnan(o->eps)) opt->eps = o->eps;
    if (!isnan(o->weight_decay)) opt->weight_decay = o->weight_decay;
    if (!(opt->lr > 0) || opt->lr > 1e30) return vp_fail(err, VP_ERR_USAGE, "--lr must be more than 0 and at most 1e30");
    if (!isnan(o->eps) && opt->kind != VP_OPT_ADAM && opt->kind != VP_OPT_ADAMW)
        return vp_fail(err, VP_ERR_USAGE, "--eps applies to --optimizer adam or adamw only");
    /* with eps 0 a parameter whose gradient is 0 is moved by 0/0: NaN from the first step */
    if (!isnan(o->eps) && !(o->eps > 0)) return vp_fail(err, VP_ERR_USAGE, "--eps must be more than 0");
    if (!isnan(o->momentum) && opt->kind != VP_OPT_MOMENTUM)
        return vp_fail(err, VP_ERR_USAGE, "--momentum applies to --optimizer momentum only");
    if (o->betas && opt->kind != VP_OPT_ADAM && opt->kind != VP_OPT_ADAMW)
        return vp_fail(err, VP_ERR_USAGE, "--betas applies to --optimizer adam or adamw only");
    return VP_OK;
}

void cli_pipeline_train(vp_pipeline_opts *po, const char *model, const cli_pairs *dims, const cli_train_opts *o) {
    cli_pipeline_init(po, model, dims);
    po->until = VP_PIPELINE_TRAIN;
    po->spec = &o->spec;
    po->dump_after = o->dump_after;
}

vp_status cli_build_step(const char *model, const cli_pairs *dims, const cli_train_opts *o, vp_graph **g, vp_training *t,
                         int *n_fwd, vp_error *err) {
    vp_pipeline_opts po;
    cli_pipeline_train(&po, model, dims, o);
    vp_pipeline_result r;
    vp_status s = vp_pipeline_run(&po, &r, err);
    /* the caller frees the graph and the step either way, as it would a half-built one */
    *g = r.g;
    *t = r.t;
    if (n_fwd) *n_fwd = r.n_forward;
    return s;
}

void cli_fusion_summary(const vp_training *t, int n_renorm, char *buf, size_t len) {
    const struct {
        int n;
        const char *what;
    } parts[] = {{t->n_attention, "attention"},
                 {t->n_gqa, "of them grouped-query with K and V unrepeated"},
                 {t->n_attention_bshd, "Q, K, V read in place of their head transposes"},
                 {t->fused.layer_norm, "LayerNormalization"},
                 {t->fused.rms_norm, "RMSNorm"},
                 {t->fused.gelu, "Gelu"},
                 {t->fused.fast_gelu, "FastGelu"},
                 {t->fused.matmul_t, "MatMul of a transposed weight"},
                 {t->fused.swish, "SiLU (Swish)"},
                 {t->fused.gather_rows, "GatherElements over repeating indices as a Gather"},
                 {t->n_gelu_matmul, "Gelu into its MatMul"},
                 {t->n_swiglu_matmul - t->n_geglu_matmul, "SwiGLU into its MatMul"},
                 {t->n_geglu_matmul, "GeGLU into its MatMul"},
                 {t->n_pool_grad, "MaxPool(Relu) gradient"}};
    size_t used = 0;
    buf[0] = 0;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0] && used < len; i++)
        if (parts[i].n)
            used += (size_t)snprintf(buf + used, len - used, "%s%d %s", used ? ", " : "fused ", parts[i].n, parts[i].what);
    if (n_renorm && used < len)
        snprintf(buf + used, len - used, "%s%d norms run again for the backward", used ? "; " : "", n_renorm);
}

void cli_qat_summary(const vp_train_spec *spec, const vp_training *t, char *buf, size_t len) {
    buf[0] = 0;
    if (!spec->qat.enabled) return;
    char name[64];
    vp_qat_name(&spec->qat, name, sizeof name);
    const vp_qat_counts *c = &t->qat;
    snprintf(buf, len, "qat %s: %d nodes, %d weights, %d activations (%d residual), %d excluded, %d learned scales, "
             "%lld bytes of observer state, %d byte masks (%lld bytes)", name, c->nodes, c->weights, c->activations,
             c->residuals, c->excluded, c->learned, (long long)c->state_bytes, c->masks, (long long)c->mask_bytes);
}

void cli_offload_summary(const vp_training *t, char *buf, size_t len) {
    buf[0] = 0;
    if (t->n_offloaded)
        snprintf(buf, len, "offload: %d Adam updates on the host, %lld bytes of optimizer state there", t->n_offloaded,
                 (long long)t->offloaded_state_bytes);
}

void cli_lora_summary(const vp_train_spec *spec, const vp_training *t, const vp_graph *g, char *buf, size_t len) {
    buf[0] = 0;
    if (!t->lora.n) return;
    int64_t frozen = 0;
    for (int v = 0; v < g->n_values; v++) {
        const vp_value *val = &g->values[v];
        if ((val->flags & VP_VAL_INITIALIZER) && !(val->flags & (VP_VAL_PARAM | VP_VAL_STATE | VP_VAL_CONST)) &&
            vp_dtype_is_float(val->dtype))
            frozen += vp_value_numel(val);
    }
    snprintf(buf, len, "lora r=%d scale %g: %d adapted weights, %lld adapter parameters beside %lld frozen", spec->lora.rank,
             t->lora.scale, t->lora.n, (long long)t->lora.params, (long long)frozen);
}

void cli_precision_summary(const vp_train_spec *spec, const vp_training *t, char *buf, size_t len) {
    buf[0] = 0;
    if (spec->precision == VP_PRECISION_FP32) return;
    const vp_precision_counts *c = &t->precision;
    const vp_cast_fuse_counts *f = &t->cast_fusion;
    char fused[96] = "";
    if (f->fused) snprintf(fused, sizeof fused, " (of the step's %d, %d fused into their producers)", f->casts_before, f->fused);
    char recast[64] = "";
    if (t->n_recast) snprintf(recast, sizeof recast, ", %d cast again for the backward", t->n_recast);
    int n = snprintf(buf, len, "precision %s: %d nodes low, %d float32, %d casts%s, %d weight copies (%lld bytes)%s%s",
                     vp_precision_name(spec->precision), c->low_nodes, c->fp32_nodes, c->casts, fused, c->weight_copies,
                     (long long)c->weight_copy_bytes, recast, t->loss_scaled ? ", dynamic loss scaling" : "");
    if (t->loss_scaled && n > 0 && (size_t)n < len) /* where the step starts: the default, --loss-scale, or a saved model's */
        snprintf(buf + n, len - (size_t)n, " from scale %.17g, %lld clean steps", t->scaling.init,
                 (long long)t->scaling.clean_steps0);
}

void cli_trainable_summary(const vp_train_spec *spec, const vp_training *t, char *buf, size_t len) {
    if (spec->trainable)
        snprintf(buf, len, "trainable set: --trainable '%s' (%d float initializers it does not match, not trained)",
                 spec->trainable, t->n_not_matched);
    else if (t->from_signature)
        snprintf(buf, len, "trainable set: the exporter's signature (torch.export's parameters; %d initializers it "
                 "lists as buffers or constants, or does not list, not trained%s)", t->n_not_parameters,
                 t->n_requires_grad_false ? "; parameters it marks requires_grad=False not trained either" : "");
    else if (t->n_scalars)
        snprintf(buf, len, "trainable set: every float initializer (no exporter signature) but %d scalars, taken for "
                 "constants (--trainable names them otherwise)", t->n_scalars);
    else
        snprintf(buf, len, "trainable set: every float initializer (no exporter signature)");
}
