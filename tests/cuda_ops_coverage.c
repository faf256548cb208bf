/* test_cuda_ops' coverage check: every op of every training step we build, by name,
 * found in the CUDA backend's op tables (vp_backend_cuda_supports).
 *
 * The steps: each model in models/ with adamw, momentum and sgd, at fp32, bf16 and fp16
 * (fp16 adds dynamic loss scaling's ops), and at fp32 with the exporter's patterns
 * differentiated piece by piece (--no-fuse), with plain attention and as rank 1 of a
 * --tp 2 step (the collectives, the vocabulary-parallel embedding and loss); and the torch.onnx
 * training exports in VP_TORCH_MODELS (default VP_BINARY_DIR/torch_models, where
 * tools/scripts/export_torch_models.py --training writes <name>-op<N>-train.onnx and
 * .json: ResNet-18, MobileNet-v2, SqueezeNet, ...) with adamw at each precision, batch 2.
 * Dtypes are not checked here: the model steps of test_cuda_ops and cli_cuda_emu run
 * them. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_ops_cases.h"
#include "ir/infer.h"
#include "mini_json.h"
#include "model_util.h"
#include "onnx/onnx_load.h"
#include "train/training.h"

typedef struct coverage {
    cuda_op_seen *ops;
    int n, max, steps;
} coverage;

static void add_graph(coverage *c, const vp_graph *g, const char *label) {
    c->steps++;
    for (int k = 0; k < g->n_nodes; k++) {
        const vp_node *nd = &g->nodes[k];
        if (nd->folded) continue;
        char key[96];
        snprintf(key, sizeof key, "%s%s%s", nd->domain, nd->domain[0] ? "." : "", nd->op_type);
        int seen = 0;
        for (int j = 0; j < c->n && !seen; j++) seen = !strcmp(c->ops[j].op, key);
        if (seen || c->n == c->max) continue;
        snprintf(c->ops[c->n].op, sizeof c->ops[c->n].op, "%s", key);
        snprintf(c->ops[c->n].first, sizeof c->ops[c->n].first, "%.199s", label);
        c->n++;
    }
}

static const vp_precision precisions[] = {VP_PRECISION_FP32, VP_PRECISION_BF16, VP_PRECISION_FP16};

static void bundled(coverage *c, FILE *log) {
    static const char *const opts[] = {"adamw", "momentum", "sgd"};
    char names[32][64];
    int n = test_model_list(names, 32);
    for (int i = 0; i < n; i++)
        for (size_t p = 0; p < sizeof precisions / sizeof precisions[0]; p++)
            for (size_t o = 0; o < sizeof opts / sizeof opts[0] + 3; o++) {
                if (o >= 3 && precisions[p] != VP_PRECISION_FP32) continue;
                vp_train_spec spec;
                memset(&spec, 0, sizeof spec);
                vp_error err = {{0}};
                vp_status s = vp_loss_parse("ce:logits", &spec.loss, &err);
                if (!s) s = vp_opt_parse(o < 3 ? opts[o] : "adamw", &spec.opt, &err);
                spec.precision = precisions[p];
                spec.no_fuse = o == 3;
                spec.attention = o == 4 ? VP_ATTENTION_PLAIN : VP_ATTENTION_FUSED;
                if (o == 5) spec.tp = (vp_tp_opts){2, 1, NULL, 0}; /* the collectives, the vocabulary-parallel loss */
                char label[400];
                snprintf(label, sizeof label, "%.63s %s %s%s", names[i], o < 3 ? opts[o] : "adamw",
                         vp_precision_name(precisions[p]),
                         o == 3 ? " --no-fuse" : o == 4 ? " --attention plain" : o == 5 ? " --tp 2 (rank 1)" : "");
                test_model m;
                if (!s) s = test_model_load(&m, names[i], &spec, &err);
                if (s) {
                    fprintf(log, "note coverage: %s not built: %s\n", label, err.msg);
                    continue;
                }
                add_graph(c, m.g, label);
                test_model_free(&m);
            }
}

static void torch_exports(coverage *c, FILE *log) {
    const char *dir = getenv("VP_TORCH_MODELS");
    char def[4200];
    snprintf(def, sizeof def, "%s/torch_models", VP_BINARY_DIR);
    if (!dir || !*dir) dir = def;
    DIR *d = opendir(dir);
    int found = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len < 11 || strcmp(e->d_name + len - 11, "-train.onnx")) continue;
        char path[4608], meta[4608]; /* the default dir (4200) and a file name (255) */
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        snprintf(meta, sizeof meta, "%s/%.*s.json", dir, (int)(len - 5), e->d_name);
        mj *j = mj_parse_file(meta);
        const mj *fr = j ? mj_get(j, "freeze") : NULL;
        found++;
        for (size_t p = 0; p < sizeof precisions / sizeof precisions[0]; p++) {
            vp_graph *g = NULL;
            vp_training t;
            memset(&t, 0, sizeof t);
            vp_train_spec spec;
            memset(&spec, 0, sizeof spec);
            vp_error err = {{0}};
            vp_dim_binding batch = {"batch", 2};
            vp_status s = vp_onnx_load(path, &g, &err);
            if (!s) s = vp_bind_dims(g, &batch, 1, &err);
            if (!s) s = vp_infer(g, NULL, NULL, &err);
            if (!s) s = vp_loss_parse("ce:logits", &spec.loss, &err);
            if (!s) s = vp_opt_parse("adamw", &spec.opt, &err);
            spec.precision = precisions[p];
            spec.freeze = fr && fr->str ? fr->str : NULL;
            int built = !s && !(s = vp_training_build(g, &spec, &t, &err));
            char label[400];
            snprintf(label, sizeof label, "%.255s adamw %s", e->d_name, vp_precision_name(precisions[p]));
            if (built) add_graph(c, g, label);
            else fprintf(log, "note coverage: %s not built: %s\n", label, err.msg);
            if (built) vp_training_free(&t);
            vp_graph_free(g);
        }
        mj_free(j);
    }
    if (d) closedir(d);
    if (!found)
        fprintf(log, "note coverage: no torch.onnx training exports in %s (tools/scripts/export_torch_models.py %s "
                     "--training makes them)\n", dir, dir);
}

int vp_cuda_coverage_collect(cuda_op_seen *ops, int max_ops, int *n_ops, FILE *log) {
    coverage c = {ops, 0, max_ops, 0};
    bundled(&c, log);
    torch_exports(&c, log);
    *n_ops = c.n;
    return c.steps;
}
