/* The joint search (planner/search, `plan --auto`) on three models, and LoRA's memory
 * against full fine-tuning (issue #19).
 *
 * For mlp (batch 256), cnn (batch 64), both from models/, and a GPT built in the IR
 * (4 layers, hidden 512, 8 heads, sequence 256, batch 8, vocabulary 8192), all with
 * Adam on the h100 profile: every candidate the search weighs under a budget of 60% of
 * the un-checkpointed float32 step's arena (80% for the mlp, whose weights and state
 * leave checkpointing little to save) (tensor-parallel degree up to 2, the
 * profile's precisions, fused or separate updates, Adam's state on the device or the
 * host; dp checkpointing where a candidate is over), and the reason the winner won.  Then that GPT's plan with full fine-tuning
 * and with LoRA adapters of rank 8 (every product weight; the attention's only).
 * Prints markdown tables for tools/bench/RESULTS.md. */
#include <stdio.h>
#include <string.h>

#include "cpu_host.h"
#include "gpt_graph.h"
#include "ir/infer.h"
#include "memory/plan.h"
#include "onnx/onnx_load.h"
#include "remat/remat.h"
#include "report.h"
#include "search/search.h"

static const gpt_config GPT = {4, 512, 8, 256, 8, 8192};

typedef struct model {
    const char *name; /* models/<name>, or NULL: the IR-built GPT */
    int64_t batch;
    const char *freeze;
} model;

static vp_status make_gpt(void *ctx, vp_graph **g, vp_error *err) {
    (void)ctx;
    return gpt_graph_build(&GPT, g, err); /* inferred as it is built */
}

/* The pipeline through the plan of m with spec (its freeze set to m's): models/<name> at
 * its batch (path and d hold the file's name and the binding), or the IR-built GPT. */
static vp_pipeline_opts pipeline_of(const model *m, vp_train_spec *spec, const vp_device_profile *dev, char *path, size_t len,
                                    vp_dim_binding *d) {
    spec->freeze = m->freeze;
    vp_pipeline_opts o = {.spec = spec, .device = dev, .fused_update = 1, .until = VP_PIPELINE_PLAN};
    if (m->name) {
        snprintf(path, len, "%s/models/%s/model.onnx", VP_SOURCE_DIR, m->name);
        *d = (vp_dim_binding){"batch", m->batch};
        o.model = path, o.dims = d, o.n_dims = 1;
    } else {
        o.source = make_gpt, o.inferred = 1;
    }
    return o;
}

static vp_train_spec adam(void) {
    vp_train_spec spec;
    memset(&spec, 0, sizeof spec);
    vp_error err;
    vp_loss_parse("ce:logits", &spec.loss, &err);
    vp_opt_parse("adam", &spec.opt, &err);
    return spec;
}

/* The arena and categories of spec's step planned without checkpointing. */
static vp_status plan_plain(const model *m, const vp_train_spec *spec0, const vp_device_profile *dev, vp_plan *out_p,
                            int64_t *trainable, vp_error *err) {
    vp_train_spec spec = *spec0;
    char path[512];
    vp_dim_binding d;
    vp_pipeline_opts o = pipeline_of(m, &spec, dev, path, sizeof path, &d);
    vp_pipeline_result r;
    vp_status s = vp_pipeline_run(&o, &r, err);
    if (!s) {
        *out_p = r.p;
        out_p->g = NULL;
        out_p->steps = NULL, out_p->buffers = NULL, out_p->buffer_of = NULL, out_p->workspace = NULL;
        *trainable = 0;
        for (int i = 0; i < r.t.n_params; i++) *trainable += vp_value_numel(&r.g->values[r.t.params[i]]);
    }
    vp_pipeline_result_free(&r);
    return s;
}

static void search_table(const char *title, const model *m, int pct) {
    const vp_device_profile *dev = vp_device_find("h100");
    vp_train_spec spec = adam();
    vp_plan p;
    vp_error err;
    int64_t n;
    if (plan_plain(m, &spec, dev, &p, &n, &err)) {
        printf("%s: %s\n\n", title, err.msg);
        return;
    }
    int64_t budget = p.arena_bytes * pct / 100;
    static vp_search_result r;
    vp_search_space sp = {2, 0, 0, 0, 1, 1, 0, 0};
    char b[32];
    printf("### %s\n\nun-checkpointed fp32 arena %s; budget (%d%%) %lld bytes\n\n", title,
           vp_human_bytes(p.arena_bytes, b, sizeof b), pct, (long long)budget);
    char path[512];
    vp_dim_binding d;
    vp_pipeline_opts base = pipeline_of(m, &spec, dev, path, sizeof path, &d);
    if (vp_search_run(&sp, &base, budget, &r, &err)) {
        printf("search failed: %s\n\n", err.msg);
        return;
    }
    printf("| # | tp | precision | update | offload | remat | arena | host | est. step (ms) | recompute (ms) | comm (ms) | casts (ms) | "
           "host (ms) | fits |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < r.n; i++) {
        const vp_candidate *c = &r.c[i];
        printf("| %d%s | %d | %s | %s | %s | ", i, i == r.best ? " (chosen)" : "", c->tp, vp_precision_name(c->precision),
               c->fused ? "fused" : "separate", c->offload ? "host" : "no");
        if (c->status) {
            printf("not built: %s | | | | | | | | |\n", c->note);
            continue;
        }
        char h[32];
        printf("%s | %s | %s | %.4f | %.4f | %.4f | %.4f | %.4f | %s |\n", c->remat == VP_REMAT_NONE ? "none" : "dp",
               vp_human_bytes(c->arena_bytes, b, sizeof b), c->host_bytes ? vp_human_bytes(c->host_bytes, h, sizeof h) : "-",
               1e3 * c->step_seconds, 1e3 * c->recompute_seconds, 1e3 * c->comm_seconds, 1e3 * c->cast_seconds,
               1e3 * c->host_seconds, c->fits ? "yes" : "no");
    }
    printf("\n%s\n\n", r.why);
}

static void lora_table(void) {
    const vp_device_profile *dev = vp_device_find("h100");
    model m = {NULL, 0, NULL};
    struct {
        const char *what;
        int r;
        const char *regex;
    } rows[] = {{"full fine-tuning", 0, NULL}, {"LoRA r=8, every product weight", 8, NULL}, {"LoRA r=8, attention only", 8, "attn"}};
    printf("### LoRA against full fine-tuning\n\nGPT %d layers, hidden %d, %d heads, sequence %d, batch %d, vocabulary %d; "
           "Adam, fp32, h100 profile, no checkpointing\n\n",
           GPT.layers, GPT.hidden, GPT.heads, GPT.seq, GPT.batch, GPT.vocab);
    printf("| setup | trainable | parameters | gradients | optimizer state | activations | temporaries | arena |\n");
    printf("|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < 3; i++) {
        vp_train_spec spec = adam();
        spec.lora = (vp_lora_opts){rows[i].r, 0, rows[i].regex, NULL};
        vp_plan p;
        vp_error err;
        int64_t n;
        if (plan_plain(&m, &spec, dev, &p, &n, &err)) {
            printf("| %s | %s | | | | | | |\n", rows[i].what, err.msg);
            continue;
        }
        char b[6][32];
        printf("| %s | %lld | %s | %s | %s | %s | %s | %s |\n", rows[i].what, (long long)n,
               vp_human_bytes(p.category_bytes[VP_CAT_PARAMETERS], b[0], 32),
               vp_human_bytes(p.category_bytes[VP_CAT_GRADIENTS], b[1], 32),
               vp_human_bytes(p.category_bytes[VP_CAT_OPTIMIZER_STATE], b[2], 32),
               vp_human_bytes(p.category_bytes[VP_CAT_ACTIVATIONS], b[3], 32),
               vp_human_bytes(p.category_bytes[VP_CAT_TEMPORARIES], b[4], 32), vp_human_bytes(p.arena_bytes, b[5], 32));
    }
    printf("\n");
}

int main(void) {
    vp_cpu_host_install();
    model mlp = {"mlp", 256, NULL}, cnn = {"cnn", 64, "(running_mean|running_var)$"}, gpt = {NULL, 0, NULL};
    search_table("mlp, batch 256", &mlp, 80);
    search_table("cnn, batch 64", &cnn, 60);
    char title[128];
    snprintf(title, sizeof title, "GPT %d layers, hidden %d, %d heads, sequence %d, batch %d", GPT.layers, GPT.hidden,
             GPT.heads, GPT.seq, GPT.batch);
    search_table(title, &gpt, 60);
    lora_table();
    return 0;
}
