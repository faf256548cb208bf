/* bench_tp: tensor parallelism, per rank.
 *
 * 1. Memory by category of one rank's plan for t = 1, 2, 3, 4 on a GPT built in the IR
 *    (tools/bench/gpt_graph.c: 3 layers, s = 1024, b = 8, h = 768, a = 12, AdamW),
 *    against the formulas: parameters P_replicated + P_split / t, the token embedding and
 *    the LM head among the split (vocabulary-parallel, where t divides the vocabulary;
 *    gradients and AdamW's two moments follow), and the saved activations of a middle layer against Korthikanti
 *    et al. 2022's sbh(10 + 24/t + 5as/(ht)) with tensor parallelism, in float32 without
 *    dropout 2sbh(8 + 24/t + 2as/(ht)) (attention plain), and 2sbh(8 + 24/t) when the
 *    attention core is fused (its probabilities are never kept); with --sp, whose
 *    LayerNorm regions are split along the sequence and whose all-gathered LayerNorm
 *    outputs are gathered again in the backward (planner/parallel/tp_regather.c),
 *    Korthikanti's sbh(34/t + 5as/(ht)), fused and without dropout 2sbh(32/t).
 * 2. Bytes each rank sends a step, planned (plan --tp) against counted by the runtime
 *    (mpirun -np t onnx-vplan run) on models/gpt and the torch.onnx export
 *    tests/data/tp/gpt_qkv, beside Megatron's count: 4 all-reduces of s*b*h values per
 *    layer, 2 more for the vocabulary-parallel embedding (forward) and LM head (its
 *    input's gradient), 3 of s*b for the cross-entropy across ranks (maximum, sum of
 *    exponentials, label logit), 2(t-1)/t of them sent by each rank in a ring. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_host.h"
#include "gpt_graph.h"
#include "memory/plan.h"
#include "pipeline/pipeline.h"
#include "train/training.h"

enum { LAYERS = 3, SEQ = 1024, BATCH = 8, HIDDEN = 768, HEADS = 12, VOCAB = 1024 };

typedef struct rank_plan {
    int64_t params, saved, arena, sent;
    int64_t cat[VP_CAT_COUNT];
} rank_plan;

static vp_status plan_one(int t, vp_attention_form form, int sp, rank_plan *out, vp_error *err) {
    gpt_config c = {LAYERS, HIDDEN, HEADS, SEQ, BATCH, VOCAB};
    vp_train_spec spec;
    memset(&spec, 0, sizeof spec);
    vp_loss_parse("ce:logits", &spec.loss, err);
    vp_opt_parse("adamw", &spec.opt, err);
    spec.attention = form;
    spec.tp = (vp_tp_opts){t, 0, NULL, sp && t > 1};
    vp_pipeline_opts po = {.spec = &spec, .device = vp_device_find("h100"), .fused_update = 1, .until = VP_PIPELINE_PLAN,
                           .inferred = 1};
    vp_pipeline_result r = {0};
    vp_status s = gpt_graph_build(&c, &po.graph, err);
    if (!s) s = vp_pipeline_run(&po, &r, err);
    if (!s) {
        const vp_graph *g = r.g;
        const vp_plan *p = &r.p;
        memset(out, 0, sizeof *out);
        for (int i = 0; i < r.t.n_params; i++) out->params += vp_value_numel(&g->values[r.t.params[i]]);
        out->saved = gpt_saved_of_layer(p, g, 0, 1);
        out->arena = p->arena_bytes;
        out->sent = vp_tp_step_bytes(g, p->steps, p->n_steps, t);
        memcpy(out->cat, p->category_bytes, sizeof out->cat);
    }
    vp_pipeline_result_free(&r);
    return s;
}

static void memory_table(void) {
    double s = SEQ, b = BATCH, h = HIDDEN, a = HEADS, sbh = s * b * h;
    /* per layer: QKV 3h^2 + 3h, attention output h^2, MLP 4h^2 + 4h and 4h^2 split; two
     * LayerNorms (4h) and the two row products' biases (2h) replicated; the token
     * embedding and the LM head split by vocabulary; the position embedding and the
     * final LayerNorm replicated */
    double p_split = LAYERS * (12 * h * h + 7 * h) + 2 * VOCAB * h, p_rep = LAYERS * 6 * h + s * h + 2 * h;
    printf("GPT built in the IR: %d layers, s=%d, b=%d, h=%d, a=%d, vocab %d, float32, AdamW, device h100; one rank's plan.\n"
           "Formulas: parameters P_rep + P_split/t (%.0f + %.0f/t elements; the token embedding and the LM head, 2 V h,\n"
           "among P_split where t divides the vocabulary, else replicated); activations of /blocks.1/ in float32 without\n"
           "dropout, Korthikanti et al.'s sbh(10 + 24/t + 5as/(ht)) less the dropout terms: 2sbh(8 + 24/t + 2as/(ht)) with\n"
           "the attention core plain, 2sbh(8 + 24/t) fused; with --sp (sequence-parallel LayerNorm regions, their\n"
           "all-gathered outputs gathered again in the backward) sbh(34/t + 5as/(ht)) less the dropout terms, fused:\n"
           "2sbh(32/t), every term divided by t.\n\n",
           LAYERS, SEQ, BATCH, HIDDEN, HEADS, VOCAB, p_rep, p_split);
    printf("| t | parameters (elements) | formula | ratio | parameters | gradients | optimizer state | activations, plain | "
           "formula | ratio | activations, fused | formula | ratio | activations, fused, --sp | formula | ratio | "
           "communication | arena, fused | arena, fused, --sp | sent a step | sent, --sp |\n"
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int t = 1; t <= 4; t++) {
        rank_plan pl, fu, sq;
        vp_error err;
        vp_status st = plan_one(t, VP_ATTENTION_PLAIN, 0, &pl, &err);
        if (!st) st = plan_one(t, VP_ATTENTION_FUSED, 0, &fu, &err);
        /* --sp needs t to divide the sequence (1024: not 3) */
        int sp = SEQ % t == 0;
        if (!st) st = sp ? plan_one(t, VP_ATTENTION_FUSED, 1, &sq, &err) : VP_OK;
        if (!sp) memset(&sq, 0, sizeof sq);
        if (st) {
            printf("| %d | error: %s |\n", t, err.msg);
            continue;
        }
        /* 3 does not divide the vocabulary (1024): the embedding and the LM head stay whole */
        double pv = 2.0 * VOCAB * h, fp = VOCAB % t ? p_rep + pv + (p_split - pv) / t : p_rep + p_split / t;
        double fa = 2 * sbh * (8 + 24.0 / t + 2 * a * s / (h * t)), ff = 2 * sbh * (8 + 24.0 / t), fs = 2 * sbh * 32.0 / t;
        double mib = 1024.0 * 1024.0;
        printf("| %d | %lld | %.0f | %.4f | %.1f MiB | %.1f MiB | %.1f MiB | %.1f MiB | %.1f MiB | %.3f | %.1f MiB | %.1f MiB | "
               "%.3f | %.1f MiB | %.1f MiB | %.3f | %.1f MiB | %.1f MiB | %.1f MiB | %.2f MiB | %.2f MiB |\n",
               t, (long long)pl.params, fp, pl.params / fp, pl.cat[VP_CAT_PARAMETERS] / mib, pl.cat[VP_CAT_GRADIENTS] / mib,
               pl.cat[VP_CAT_OPTIMIZER_STATE] / mib, pl.saved / mib, fa / mib, pl.saved / fa, fu.saved / mib, ff / mib,
               fu.saved / ff, sq.saved / mib, fs / mib, sq.saved / fs, fu.cat[VP_CAT_COMM] / mib, fu.arena / mib,
               sq.arena / mib, fu.sent / mib, sq.sent / mib);
    }
    printf("\nCategories are summed buffer sizes (each buffer once): gradients one per parameter, AdamW's two\n"
           "moments twice the parameters. The replicated 8 of 8 + 24/t are the two LayerNorm inputs and outputs (the\n"
           "outputs are the column products' shared input); fused attention keeps its row log-sum-exp (4asb/t bytes)\n"
           "and LayerNorm its statistics beyond the formula. Communication buffers (the row products' partial sums,\n"
           "all-reduced in place, and the embedding's) are full s*b*h activations whatever t; each rank sends\n"
           "((4 L + 2) sbh + 3 sb) * 4 * 2(t-1)/t bytes a step. With --sp the LayerNorm inputs and outputs are split\n"
           "and kept split: the column products' weight gradients read a second all-gather of the LayerNorm output\n"
           "run in the backward, the forward's gathered copy dying after the forward products: the --sp activations\n"
           "are the t = 1 figure divided by t. The ratio is below 1 as fused: the GELU output is never kept\n"
           "(vplan.GeluMatMul takes the GELU input), 8 of the 32. On the wire the same bytes as without --sp, plus\n"
           "the all-reduces of the LayerNorm and bias gradients and one more all-gather a region a step\n"
           "((2L + 1) sbh * 4 * (t-1)/t bytes).\n");
}

/* Runs cmd, returns the first line matching the sscanf pattern's prefix, parsed. */
static int run_line(const char *cmd, const char *prefix, char *line, size_t len) {
    FILE *f = popen(cmd, "r");
    if (!f) return 0;
    int found = 0;
    char buf[1024];
    while (fgets(buf, sizeof buf, f))
        if (!found && !strncmp(buf, prefix, strlen(prefix))) {
            snprintf(line, len, "%s", buf);
            found = 1;
        }
    return pclose(f) == 0 && found;
}

static void traffic_table(const char *tool) {
    static const struct {
        const char *name, *path, *opts;
        int layers, s, b, h;
    } models[] = {
        {"models/gpt", VP_SOURCE_DIR "/models/gpt/model.onnx", "--dim batch=4 --freeze '^causal_mask$'", 2, 16, 4, 32},
        {"tests/data/tp/gpt_qkv", VP_SOURCE_DIR "/tests/data/tp/gpt_qkv/model.onnx", "--dim batch=2 --freeze '^mask$'", 2, 8, 2, 32},
    };
    printf("\nBytes each rank sends a step: the plan's figure (plan --tp t), what the runtime counted on every rank\n"
           "(mpirun -np t onnx-vplan run, 2 steps, MPI_Allreduce), and Megatron's count with a vocabulary-parallel\n"
           "embedding, LM head and cross-entropy: ((4 L + 2) s b h + 3 s b) 4 bytes 2(t-1)/t; with --sp plus\n"
           "(6 L + 2) h 4 bytes 2(t-1)/t (the LayerNorm and bias gradients) and (2 L + 1) s b h 4 bytes (t-1)/t (the\n"
           "regions' inputs all-gathered again in the backward).\n\n"
           "| model | t | planned | counted (every rank) | formula |\n|---|---|---|---|---|\n");
    char dir[] = "/tmp/bench_tp_XXXXXX";
    if (!mkdtemp(dir)) return;
    for (size_t k = 0; k < sizeof models / sizeof models[0]; k++)
        for (int sp = 0; sp <= 1; sp++)
        for (int t = 2; t <= 4; t += 2) {
            char cmd[8192], line[1024];
            snprintf(cmd, sizeof cmd, "%s plan %s %s --loss ce:logits --optimizer adamw --tp %d%s -o %s/p.vplan 2>&1", tool,
                     models[k].path, models[k].opts, t, sp ? " --sp" : "", dir);
            double sb = (double)models[k].s * models[k].b, L = models[k].layers, h = models[k].h;
            double megatron = ((4 * L + 2) * sb * h + 3 * sb) * 4 * 2 * (t - 1) / t;
            /* --sp: the gradients of the (6 L + 2) h LayerNorm and bias parameters read whole
             * all-reduced, and the 2 L + 1 regions' inputs all-gathered again in the backward */
            if (sp) megatron += (6 * L + 2) * h * 4 * 2 * (t - 1) / t + (2 * L + 1) * sb * h * 4 * (t - 1) / t;
            const char *name = models[k].name, *how = sp ? " --sp" : "";
            if (!run_line(cmd, "rank 0: arena", line, sizeof line)) {
                printf("| %s%s | %d | refused (%s) | | %.0f |\n", name, how, t, "n does not divide the heads", megatron);
                continue;
            }
            long long planned = 0;
            char *at = strstr(line, "sends ");
            if (at) planned = atoll(at + 6);
            snprintf(cmd, sizeof cmd,
                     "mpirun --allow-run-as-root --oversubscribe -np %d %s run %s/p.vplan --steps 2 2>&1 | "
                     "sed -nE 's/^rank [0-9]+ of [0-9]+: sent ([0-9]+) bytes.*/\\1/p' | sort -u | tr '\\n' ' '",
                     t, tool, dir);
            char counted[256] = "";
            FILE *f = popen(cmd, "r");
            if (f) {
                if (!fgets(counted, sizeof counted, f)) counted[0] = 0;
                pclose(f);
            }
            printf("| %s%s | %d | %lld | %s| %.0f |\n", name, how, t, planned, counted[0] ? counted : "(no mpirun) ", megatron);
        }
    char rm[64];
    snprintf(rm, sizeof rm, "rm -rf %s", dir);
    if (system(rm)) fprintf(stderr, "bench_tp: could not remove %s\n", dir);
}

int main(int argc, char **argv) {
    vp_cpu_host_install();
    (void)argc;
    memory_table();
    char tool[1024];
    snprintf(tool, sizeof tool, "%s", argv[0]);
    char *slash = strrchr(tool, '/');
    snprintf(slash ? slash + 1 : tool, sizeof tool - (size_t)(slash ? slash + 1 - tool : 0), "onnx-vplan");
    traffic_table(tool);
    return 0;
}
