#include "gpt_graph.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_build.h"
#include "infer.h"

typedef struct gb {
    vp_graph *g;
    vp_status s;
    vp_error *err;
    char scope[64];
} gb;

static int param(gb *b, const char *name, int rank, const int64_t *dims) {
    char full[160];
    snprintf(full, sizeof full, "%s%s", b->scope, name);
    int id = vp_graph_add_value(b->g, full);
    if (id < 0) {
        b->s = vp_fail(b->err, VP_ERR_NOMEM, "out of memory");
        return -1;
    }
    vp_value *v = &b->g->values[id];
    v->dtype = VP_F32;
    v->rank = rank;
    memcpy(v->dims, dims, (size_t)rank * sizeof *dims);
    v->flags |= VP_VAL_INITIALIZER;
    return id;
}

static int ints(gb *b, const int64_t *v, int n) {
    int64_t d[1] = {n};
    return vp_build_const(b->g, "shape", VP_I64, 1, d, v);
}

static int scalar(gb *b, float x) { return vp_build_const(b->g, "scalar", VP_F32, 0, NULL, &x); }

/* One node; returns its first output (n_out outputs written to outs when given). */
static int node(gb *b, const char *op, const char *name, int n_in, const int *in, int n_out, int *outs,
                const char *attr, int64_t attr_v, const int64_t *ints_attr, int n_ints) {
    if (b->s) return -1;
    char full[200];
    snprintf(full, sizeof full, "%s%s", b->scope, name);
    int id = vp_build_node(b->g, op, "", full, n_in, in, n_out, VP_PHASE_FORWARD, 17);
    if (id < 0) {
        b->s = vp_fail(b->err, VP_ERR_NOMEM, "out of memory");
        return -1;
    }
    if (attr && ints_attr) b->s = vp_node_add_attr_ints(b->g, id, attr, ints_attr, n_ints);
    else if (attr) b->s = vp_node_add_attr_int(b->g, id, attr, attr_v);
    int o[8];
    if (!b->s) b->s = vp_build_finish(b->g, id, o, b->err);
    if (b->s) return -1;
    for (int k = 0; outs && k < n_out; k++) outs[k] = o[k];
    return o[0];
}

static int op2(gb *b, const char *op, const char *name, int x, int y) {
    int in[2] = {x, y};
    return node(b, op, name, 2, in, 1, NULL, NULL, 0, NULL, 0);
}

static int linear(gb *b, const char *name, int x, int64_t in, int64_t out) {
    char n[64];
    int64_t wd[2] = {in, out}, bd[1] = {out};
    snprintf(n, sizeof n, "%s.weight", name);
    int w = param(b, n, 2, wd);
    snprintf(n, sizeof n, "%s.bias", name);
    int bias = param(b, n, 1, bd);
    snprintf(n, sizeof n, "%s/MatMul", name);
    int y = op2(b, "MatMul", n, x, w);
    snprintf(n, sizeof n, "%s/Add", name);
    return op2(b, "Add", n, y, bias);
}

static int layer_norm(gb *b, const char *name, int x, int64_t h) {
    char n[64];
    int64_t d[1] = {h};
    snprintf(n, sizeof n, "%s.weight", name);
    int w = param(b, n, 1, d);
    snprintf(n, sizeof n, "%s.bias", name);
    int bias = param(b, n, 1, d);
    int in[3] = {x, w, bias};
    snprintf(n, sizeof n, "%s/LayerNormalization", name);
    return node(b, "LayerNormalization", n, 3, in, 1, NULL, "axis", -1, NULL, 0);
}

static int heads(gb *b, const char *name, int x, const gpt_config *c, const int64_t *perm) {
    int64_t shape[4] = {c->batch, c->seq, c->heads, c->hidden / c->heads};
    char n[64];
    snprintf(n, sizeof n, "%s/Reshape", name);
    int r = op2(b, "Reshape", n, x, ints(b, shape, 4));
    int in[1] = {r};
    snprintf(n, sizeof n, "%s/Transpose", name);
    return node(b, "Transpose", n, 1, in, 1, NULL, "perm", 0, perm, 4);
}

static int block(gb *b, int x, const gpt_config *c, int mask) {
    int64_t h = c->hidden;
    int ln1 = layer_norm(b, "ln_1", x, h);
    int qkv = linear(b, "attn/c_attn", ln1, h, 3 * h);
    int64_t split[3] = {h, h, h};
    int in[2] = {qkv, ints(b, split, 3)}, qkv3[3];
    node(b, "Split", "attn/Split", 2, in, 3, qkv3, "axis", 2, NULL, 0);
    static const int64_t bhsd[4] = {0, 2, 1, 3}, bhds[4] = {0, 2, 3, 1};
    int q = heads(b, "attn/q", qkv3[0], c, bhsd);
    int k = heads(b, "attn/k", qkv3[1], c, bhds);
    int v = heads(b, "attn/v", qkv3[2], c, bhsd);
    int att = op2(b, "MatMul", "attn/MatMul", q, k);
    att = op2(b, "Mul", "attn/Mul", att, scalar(b, 1.0f / sqrtf((float)(h / c->heads))));
    att = op2(b, "Add", "attn/Add", att, mask);
    int sm_in[1] = {att};
    int p = node(b, "Softmax", "attn/Softmax", 1, sm_in, 1, NULL, "axis", -1, NULL, 0);
    int y = op2(b, "MatMul", "attn/MatMul_1", p, v);
    int t_in[1] = {y};
    y = node(b, "Transpose", "attn/Transpose", 1, t_in, 1, NULL, "perm", 0, bhsd, 4);
    int64_t bsh[3] = {c->batch, c->seq, h};
    y = op2(b, "Reshape", "attn/Reshape", y, ints(b, bsh, 3));
    y = linear(b, "attn/c_proj", y, h, h);
    x = op2(b, "Add", "Add", x, y);
    int ln2 = layer_norm(b, "ln_2", x, h);
    int f = linear(b, "mlp_fc", ln2, h, 4 * h);
    /* GELU as torch exports it: x * 0.5 * (1 + erf(x / sqrt(2))) */
    int e = op2(b, "Div", "Div", f, scalar(b, sqrtf(2.0f)));
    int e_in[1] = {e};
    e = node(b, "Erf", "Erf", 1, e_in, 1, NULL, NULL, 0, NULL, 0);
    e = op2(b, "Add", "Add_1", e, scalar(b, 1.0f));
    f = op2(b, "Mul", "Mul_1", f, e);
    f = op2(b, "Mul", "Mul_2", f, scalar(b, 0.5f));
    f = linear(b, "mlp_proj", f, 4 * h, h);
    return op2(b, "Add", "Add_2", x, f);
}

vp_status gpt_graph_build(const gpt_config *c, vp_graph **out, vp_error *err) {
    vp_graph *g = vp_graph_new();
    if (!g) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    g->path = strdup("gpt-builder");
    g->opset_onnx = 17;
    g->opset_ms = 1;
    gb b = {g, VP_OK, err, ""};
    int64_t td[2] = {c->batch, c->seq};
    int tokens;
    b.s = vp_build_input(g, "tokens", VP_I64, 2, td, &tokens, err);
    int64_t wte_d[2] = {c->vocab, c->hidden}, wpe_d[2] = {c->seq, c->hidden};
    int wte = param(&b, "wte.weight", 2, wte_d), wpe = param(&b, "wpe.weight", 2, wpe_d);
    int x = op2(&b, "Gather", "/wte/Gather", wte, tokens);
    x = op2(&b, "Add", "/Add", x, wpe);
    /* causal mask: 0 on and below the diagonal, -1e4 above */
    int64_t md[2] = {c->seq, c->seq};
    float *m = calloc((size_t)c->seq * (size_t)c->seq, sizeof *m);
    if (!m) b.s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
    for (int i = 0; m && i < c->seq; i++)
        for (int j = i + 1; j < c->seq; j++) m[(size_t)i * c->seq + j] = -1e4f;
    int mask = m ? vp_build_const(g, "causal_mask", VP_F32, 2, md, m) : -1;
    free(m);
    for (int l = 0; l < c->layers && !b.s; l++) {
        snprintf(b.scope, sizeof b.scope, "/blocks.%d/", l);
        x = block(&b, x, c, mask);
    }
    snprintf(b.scope, sizeof b.scope, "/");
    x = layer_norm(&b, "ln_f", x, c->hidden);
    int64_t lm[2] = {c->hidden, c->vocab};
    int head = param(&b, "lm_head.weight", 2, lm);
    /* the output is named "logits", as in an exported model, so --loss ce:logits finds it */
    int logits = vp_graph_add_value(g, "logits"), in[2] = {x, head};
    int id = b.s || logits < 0 ? -1 : vp_graph_add_node(g, "MatMul", "", "/lm_head/MatMul", 2, in, 1, &logits);
    if (!b.s && id < 0) b.s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
    if (!b.s) {
        g->nodes[id].opset = 17;
        b.s = vp_build_finish(g, id, NULL, err);
        g->values[logits].flags |= VP_VAL_OUTPUT;
        g->outputs = malloc(sizeof *g->outputs);
        if (g->outputs) g->outputs[g->n_outputs++] = logits;
    }
    if (b.s) {
        vp_graph_free(g);
        return b.s;
    }
    *out = g;
    return vp_graph_link(g, err);
}
