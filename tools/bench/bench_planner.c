/* Planner speed and the transformer activation check.
 *
 * 1. GPT-style training steps (hidden 768, 12 heads, sequence 1024, batch 8, AdamW) of
 *    12, 24, 48 and 96 layers planned end to end, each depth twice: the plain graph
 *    (constant Reshape shapes) and the same graph as torch.onnx exports it with dynamic
 *    axes (about 94 more forward nodes a layer of shape arithmetic, all folded), since
 *    a planner fast only on pre-folded graphs would be fast on graphs nobody exports.
 *    Stages: build the forward graph, infer and fold it, build the training step, plan
 *    keeping everything, then plan with dp under a budget of the keep-all arena less a
 *    third of its activations; the time of each on one core.
 * 2. Saved activations per layer against Korthikanti et al. 2022: sbh(34 + 5as/h) bytes
 *    in 16-bit with dropout masks; our models have no dropout and run in float32.
 *
 * usage: bench_planner [--layers L]...  */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu_host.h"
#include "remat/cost.h"
#include "gpt_graph.h"
#include "ir/infer.h"
#include "memory/plan.h"
#include "pipeline/pipeline.h"
#include "remat/remat.h"
#include "train/training.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static vp_status build_step_as(const gpt_config *c, vp_attention_form attention, vp_graph **g, vp_training *t,
                               vp_error *err) {
    vp_train_spec spec;
    memset(&spec, 0, sizeof spec);
    spec.attention = attention;
    vp_loss_parse("ce:logits", &spec.loss, err);
    vp_opt_parse("adamw", &spec.opt, err);
    vp_pipeline_opts po = {.inferred = 1, .spec = &spec, .until = VP_PIPELINE_TRAIN};
    vp_pipeline_result r = {0};
    vp_status s = gpt_graph_build(c, &po.graph, err);
    if (!s) s = vp_pipeline_run(&po, &r, err);
    *g = r.g;
    *t = r.t;
    return s;
}


/* One row of the speed table: a training step planned end to end from the forward
 * graph as a loader leaves it. */
typedef struct speed_row {
    int ok;
    int fwd_nodes, folded, step_nodes, step_live; /* live: the nodes a plan schedules */
    double t_build, t_infer, t_train, t_plan, t_dp;
    int64_t arena_full, arena_dp;
} speed_row;

static void speed(int layers, gpt_style style, speed_row *row) {
    gpt_config c = {layers, 768, 12, 1024, 8, 50257};
    vp_error err;
    vp_graph *g = NULL, *planned = NULL;
    vp_training t;
    memset(&t, 0, sizeof t);
    vp_plan p, full;
    memset(&p, 0, sizeof p);
    memset(&full, 0, sizeof full);
    vp_remat_result r;
    memset(&r, 0, sizeof r);
    vp_infer_result inf;
    memset(&inf, 0, sizeof inf);
    memset(row, 0, sizeof *row);
    vp_train_spec spec;
    memset(&spec, 0, sizeof spec);
    vp_loss_parse("ce:logits", &spec.loss, &err);
    vp_opt_parse("adamw", &spec.opt, &err);
    double t0 = now();
    vp_status s = gpt_graph_build_raw(&c, style, &g, &err);
    double t1 = now();
    if (!s) {
        row->fwd_nodes = g->n_nodes;
        s = vp_infer(g, NULL, &inf, &err);
        row->folded = inf.n_folded;
        free(inf.unsupported);
    }
    double t2 = now();
    if (!s) s = vp_training_build(g, &spec, &t, &err);
    double t3 = now();
    /* the budget: what keeping everything takes, less a third of the activations */
    if (!s) s = vp_plan_build(&full, g, &t, vp_device_find("h100"), 1, &err);
    double t4 = now();
    int64_t budget = full.arena_bytes - full.category_bytes[VP_CAT_ACTIVATIONS] / 3;
    if (!s) s = vp_plan_with_remat(g, &t, vp_device_find("h100"), 1, budget, VP_REMAT_DP, &planned, &p, &r, &err);
    double t5 = now();
    const char *style_name = style == GPT_STYLE_EXPORTER ? "exporter" : "plain";
    if (s) {
        printf("| %d | %s | error: %s |\n", layers, style_name, err.msg);
    } else {
        row->ok = 1;
        row->step_nodes = g->n_nodes;
        for (int i = 0; i < g->n_nodes; i++) row->step_live += !g->nodes[i].folded;
        row->t_build = t1 - t0;
        row->t_infer = t2 - t1;
        row->t_train = t3 - t2;
        row->t_plan = t4 - t3;
        row->t_dp = t5 - t4;
        row->arena_full = full.arena_bytes;
        row->arena_dp = p.arena_bytes;
        double extra = r.step_seconds > r.recompute_seconds ? 100 * r.recompute_seconds / (r.step_seconds - r.recompute_seconds) : 0;
        printf("| %d | %s | %d | %d | %d (%d) | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.2f GiB | %.2f GiB | %s | +%.1f%% |\n",
               layers, style_name, row->fwd_nodes, row->folded, row->step_nodes, row->step_live, row->t_build, row->t_infer,
               row->t_train, row->t_plan, row->t_dp, t5 - t0, (double)full.arena_bytes / 1073741824.0,
               (double)p.arena_bytes / 1073741824.0, r.fits ? "yes" : "no", extra);
    }
    fflush(stdout);
    vp_plan_free(&full);
    vp_plan_free(&p);
    if (planned && planned != g) vp_graph_free(planned);
    vp_training_free(&t);
    vp_graph_free(g);
}

/* The layer's saved bytes against Korthikanti et al. 2022, with the attention core as
 * the exporter writes it (plain) and fused into vplan.Attention, whose backward
 * recomputes the probabilities from the row log-sum-exp (the 5as/h term gone). */
static void korthikanti(int batch, int seq, int hidden, int heads) {
    gpt_config c = {3, hidden, heads, seq, batch, 1024};
    double sbh4 = 4.0 * seq * batch * hidden, s_ = seq, b_ = batch, h_ = hidden, a_ = heads;
    double paper16 = s_ * b_ * h_ * (34 + 5 * a_ * s_ / h_);
    /* without dropout the paper's count loses the masks (sbh per dropout: 2 of them,
     * and as^2b for attention dropout) and the dropout output (2as^2b) */
    double nodrop16 = s_ * b_ * h_ * (32 + 2 * a_ * s_ / h_), noattn16 = s_ * b_ * h_ * 32;
    int64_t saved[2] = {0, 0};
    for (int form = 0; form < 2; form++) { /* 0 plain, 1 fused */
        vp_error err;
        vp_train_spec spec;
        memset(&spec, 0, sizeof spec);
        vp_loss_parse("ce:logits", &spec.loss, &err);
        vp_opt_parse("adamw", &spec.opt, &err);
        spec.attention = form ? VP_ATTENTION_FUSED : VP_ATTENTION_PLAIN;
        vp_pipeline_opts po = {.inferred = 1, .spec = &spec, .until = VP_PIPELINE_PLAN, .device = vp_device_find("h100"),
                               .fused_update = 1};
        vp_pipeline_result r = {0};
        vp_status s = gpt_graph_build(&c, &po.graph, &err);
        if (!s) s = vp_pipeline_run(&po, &r, &err);
        if (s) {
            printf("error: %s\n", err.msg);
        } else {
            printf("\nsaved activations of /blocks.1/ (s=%d, b=%d, h=%d, a=%d), float32, attention %s (%d cores fused):\n\n"
                   "| value | bytes | in units of sbh*4 |\n|---|---|---|\n",
                   seq, batch, hidden, heads, form ? "fused" : "plain", r.t.n_attention);
            saved[form] = gpt_saved_of_layer(&r.p, r.g, 1, sbh4);
        }
        vp_pipeline_result_free(&r);
    }
    printf("\n| per layer | bytes | ours plain / it | ours fused / it |\n|---|---|---|---|\n");
    printf("| ours, float32, attention plain | %lld | 1.000 | |\n", (long long)saved[0]);
    printf("| ours, float32, attention fused | %lld | | 1.000 |\n", (long long)saved[1]);
    printf("| Korthikanti, 16-bit with dropout: sbh(34 + 5as/h) | %.0f | %.3f | %.3f |\n", paper16,
           (double)saved[0] / paper16, (double)saved[1] / paper16);
    printf("| without dropout, in float32: 2 sbh(32 + 2as/h) | %.0f | %.3f | %.3f |\n", 2 * nodrop16,
           (double)saved[0] / (2 * nodrop16), (double)saved[1] / (2 * nodrop16));
    printf("| without dropout and without the as/h terms, in float32: 2 sbh 32 | %.0f | %.3f | %.3f |\n", 2 * noattn16,
           (double)saved[0] / (2 * noattn16), (double)saved[1] / (2 * noattn16));
    printf("\nGELU and LayerNorm are fused before autodiff (one saved input each; LayerNorm adds its mean and\n"
           "1/std, s*b*4 bytes each). Fused attention keeps Q, K, V, its output and the row log-sum-exp (a*s*b*4\n"
           "bytes) instead of the a*s*s*b probabilities.\n");
}

/* Saved activation bytes of /blocks.1/ in a plan, and the estimated extra compute. */
static void transformer_point(const char *what, vp_graph *g, const vp_training *t, const char *keep) {
    vp_error err;
    vp_graph *c = vp_graph_clone(g);
    int nr = 0;
    vp_plan p;
    memset(&p, 0, sizeof p);
    vp_status s = c ? vp_remat_apply(c, t, keep, &nr, &err) : VP_ERR_NOMEM;
    if (!s) s = vp_plan_build(&p, c, t, vp_device_find("h100"), 1, &err);
    if (s) {
        printf("| %s | error |\n", what);
    } else {
        int64_t saved = 0;
        int n_saved = 0;
        double rec = 0, rest = 0;
        /* what the backward pass reads of the forward pass's own values */
        for (int vi = 0; vi < c->n_values; vi++) {
            const vp_value *v = &c->values[vi];
            if (v->producer < 0) continue;
            const vp_node *n = &c->nodes[v->producer];
            if (n->phase != VP_PHASE_FORWARD || strncmp(n->name, "/blocks.1/", 10)) continue;
            int read_back = 0;
            for (int k = 0; k < v->n_consumers; k++) read_back |= c->nodes[v->consumers[k]].phase == VP_PHASE_BACKWARD;
            if (!read_back) continue;
            saved += vp_value_numel(v) * (int64_t)vp_dtype_size(v->dtype);
            n_saved++;
            if (getenv("VP_DEBUG_SAVED")) fprintf(stderr, "%s: %s\n", what, v->name);
        }
        for (int i = 0; i < c->n_nodes; i++) {
            vp_node_cost k = vp_cost_node(c, &c->nodes[i]);
            double sec = vp_cost_seconds(&k, vp_device_find("h100"), 0);
            if (c->nodes[i].phase == VP_PHASE_RECOMPUTE) rec += sec;
            else rest += sec;
        }
        printf("| %s | %d | %.2f | %d | +%.1f%% | %.2f GiB |\n", what, n_saved, (double)saved / (4.0 * 1024 * 8 * 768), nr,
               100 * rec / rest, (double)p.arena_bytes / 1073741824.0);
    }
    vp_plan_free(&p);
    vp_graph_free(c);
}

/* Korthikanti et al.'s two reference points on a 12-layer GPT: full recomputation
 * (each layer keeps its input only) and selective recomputation of the attention core
 * (QK^T, scale, mask, softmax recomputed; everything else kept). */
/* With the attention core as the exporter writes it (--attention plain), so that the
 * paper's selective recomputation has its a*s*s probabilities to drop; fused attention
 * keeps none (korthikanti above). */
static void transformer_points(void) {
    gpt_config c = {12, 768, 12, 1024, 8, 50257};
    vp_error err;
    vp_graph *g = NULL;
    vp_training t;
    if (build_step_as(&c, VP_ATTENTION_PLAIN, &g, &t, &err)) {
        printf("error: %s\n", err.msg);
        return;
    }
    char *keep = malloc((size_t)g->n_values);
    printf("\nreference points, 12 layers, attention plain (saved activations of a middle layer, in units of sbh*4 bytes):\n\n");
    printf("| plan | saved tensors per layer | saved, sbh*4 units | recompute nodes | extra compute | arena |\n|---|---|---|---|---|---|\n");
    memset(keep, 1, (size_t)g->n_values);
    transformer_point("keep everything", g, &t, keep);
    for (int v = 0; v < g->n_values; v++) {
        const vp_value *val = &g->values[v];
        if (val->producer < 0 || g->nodes[val->producer].phase != VP_PHASE_FORWARD) continue;
        const char *name = g->nodes[val->producer].name;
        /* the layer input is the previous layer's last residual Add (or the embedding sum) */
        keep[v] = strstr(name, "/Add_2") != NULL || !strcmp(name, "/Add");
    }
    transformer_point("full recompute (layer input only)", g, &t, keep);
    memset(keep, 1, (size_t)g->n_values);
    for (int v = 0; v < g->n_values; v++) {
        const vp_value *val = &g->values[v];
        if (val->producer < 0) continue;
        const char *name = g->nodes[val->producer].name;
        if (strstr(name, "/attn/MatMul") && !strstr(name, "MatMul_1")) keep[v] = 0;
        if (strstr(name, "/attn/Mul") || strstr(name, "/attn/Add") || strstr(name, "/attn/Softmax")) keep[v] = 0;
    }
    transformer_point("selective: attention core recomputed", g, &t, keep);
    free(keep);
    vp_training_free(&t);
    vp_graph_free(g);
}

int main(int argc, char **argv) {
    vp_cpu_host_install();
    int layers[8] = {12, 24, 48, 96}, n = 4;
    if (argc > 2 && !strcmp(argv[1], "--layers")) {
        n = 0;
        for (int i = 2; i < argc && n < 8; i++) layers[n++] = atoi(argv[i]);
    }
    printf("GPT-style training step (h 768, a 12, s 1024, b 8, vocab 50257, AdamW, device h100), seconds on one core.\n"
           "plain: Reshape shapes and literals are constants (the graph after folding); exporter: the same graph as\n"
           "torch.onnx writes it with a dynamic batch, every view's shape computed from Shape -> Gather -> Unsqueeze ->\n"
           "Concat, head_dim by an integer floor division, literals as Constant nodes, all of which fold.\n"
           "build: the forward graph in memory (what loading a file gives; the protobuf parse is not timed);\n"
           "infer: shapes and folding; training: autodiff, loss, AdamW; plan, keep all: the budget's reference;\n"
           "dp: checkpointing by dp under a budget of the keep-all arena less a third of its activations.\n\n");
    printf("| layers | graph | forward nodes | folded | step nodes (unfolded) | build | infer + fold | training | plan, keep all "
           "| dp under budget | total | arena, keep all | arena, dp | fits | recompute |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    int same = 1, dp_same = 1;
    for (int i = 0; i < n; i++) {
        speed_row plain, exporter;
        speed(layers[i], GPT_STYLE_PLAIN, &plain);
        speed(layers[i], GPT_STYLE_EXPORTER, &exporter);
        if (!plain.ok || !exporter.ok) continue;
        /* folding must leave the plain graph: the same nodes scheduled, the same arena */
        if (plain.step_live != exporter.step_live || plain.arena_full != exporter.arena_full) {
            printf("| %d | differ: the exporter-style graph does not fold to the plain one |\n", layers[i]);
            same = 0;
        }
        dp_same &= plain.arena_dp == exporter.arena_dp;
    }
    if (same) printf("\nafter folding both styles schedule the same nodes and keep-all plans use the same arena at every depth.\n");
    if (same && !dp_same)
        printf("dp's arenas differ at some depth: its refinement stops after as long again as planning has taken\n"
               "(planner/remat.c, refine), so what it finds depends on the machine's speed and can change from run to\n"
               "run, even for the same graph.\n");
    korthikanti(8, 1024, 768, 12);
    transformer_points();
    return 0;
}
