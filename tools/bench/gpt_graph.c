#include "gpt_graph.h"
#include "memory/plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/graph_build.h"
#include "ir/infer.h"

typedef struct gb {
    vp_graph *g;
    vp_status s;
    vp_error *err;
    gpt_style style;
    char scope[64];
    int k; /* numbers the exporter's nodes within a layer, so their names stay unique */
} gb;

static void nomem(gb *b) {
    if (!b->s) b->s = vp_fail(b->err, VP_ERR_NOMEM, "out of memory");
}

static int param(gb *b, const char *name, int rank, const int64_t *dims) {
    char full[160];
    snprintf(full, sizeof full, "%s%s", b->scope, name);
    int id = vp_graph_add_value(b->g, full);
    if (id < 0) {
        nomem(b);
        return -1;
    }
    vp_value *v = &b->g->values[id];
    v->dtype = VP_F32;
    v->rank = rank;
    memcpy(v->dims, dims, (size_t)rank * sizeof *dims);
    v->flags |= VP_VAL_INITIALIZER;
    return id;
}

/* One node, built as a loader would leave it: inputs and outputs wired, outputs not yet
 * inferred.  Returns its first output (n_out outputs written to outs when given). */
static int node(gb *b, const char *op, const char *name, int n_in, const int *in, int n_out, int *outs,
                const char *attr, int64_t attr_v, const int64_t *ints_attr, int n_ints) {
    if (b->s) return -1;
    for (int k = 0; k < n_in; k++)
        if (in[k] < 0) {
            b->s = vp_fail(b->err, VP_ERR_INVALID, "gpt builder: input %d of %s%s is missing", k, b->scope, name);
            return -1;
        }
    char full[200];
    snprintf(full, sizeof full, "%s%s", b->scope, name);
    int id = vp_build_node(b->g, op, "", full, n_in, in, n_out, VP_PHASE_FORWARD, 17);
    if (id < 0) {
        nomem(b);
        return -1;
    }
    vp_status s = VP_OK;
    if (attr && ints_attr) s = vp_node_add_attr_ints(b->g, id, attr, ints_attr, n_ints);
    else if (attr) s = vp_node_add_attr_int(b->g, id, attr, attr_v);
    if (s) {
        nomem(b);
        return -1;
    }
    const vp_node *n = &b->g->nodes[id];
    for (int k = 0; outs && k < n_out; k++) outs[k] = n->outputs[k];
    return n->outputs[0];
}

static int op1(gb *b, const char *op, const char *name, int x) {
    return node(b, op, name, 1, &x, 1, NULL, NULL, 0, NULL, 0);
}

static int op2(gb *b, const char *op, const char *name, int x, int y) {
    int in[2] = {x, y};
    return node(b, op, name, 2, in, 1, NULL, NULL, 0, NULL, 0);
}

/* ---- the exporter's nodes ---- */

/* The name of the next exporter node of a layer: "<where>/<Op>_<k>".  Always numbered,
 * so it never takes a name the plain nodes use ("attn/Mul", "Add_1"). */
static const char *xname(gb *b, const char *where, const char *op, char *buf, size_t len) {
    snprintf(buf, len, "%s%s%s_%d", where, where[0] ? "/" : "", op, ++b->k);
    return buf;
}

static int xop1(gb *b, const char *where, const char *op, int x) {
    char n[96];
    return op1(b, op, xname(b, where, op, n, sizeof n), x);
}

static int xop2(gb *b, const char *where, const char *op, int x, int y) {
    char n[96];
    return op2(b, op, xname(b, where, op, n, sizeof n), x, y);
}

/* A Constant node, as torch writes every literal: value_int (an int64 scalar),
 * value_ints (a 1-D int64 list) or value_float (a float32 scalar). */
static int constant(gb *b, const char *where, const char *attr, const int64_t *v, int n, float f) {
    char name[96];
    int out = node(b, "Constant", xname(b, where, "Constant", name, sizeof name), 0, NULL, 1, NULL, NULL, 0, NULL, 0);
    if (out < 0) return -1;
    int id = b->g->n_nodes - 1;
    vp_status s;
    if (!strcmp(attr, "value_float")) s = vp_node_add_attr_float(b->g, id, attr, f);
    else if (!strcmp(attr, "value_int")) s = vp_node_add_attr_int(b->g, id, attr, v[0]);
    else s = vp_node_add_attr_ints(b->g, id, attr, v, n);
    if (s) {
        nomem(b);
        return -1;
    }
    return out;
}

static int const_int(gb *b, const char *where, int64_t v) { return constant(b, where, "value_int", &v, 1, 0); }

/* x.size(i): torch writes one Shape per size taken, then a Gather of a Constant index. */
static int dim_of(gb *b, const char *where, int x, int64_t i) {
    int shape = xop1(b, where, "Shape", x);
    return xop2(b, where, "Gather", shape, const_int(b, where, i));
}

/* An int64 scalar as one entry of a shape list: Unsqueeze with a Constant axes input. */
static int unsqueeze0(gb *b, const char *where, int scalar) {
    static const int64_t axis0[1] = {0};
    return xop2(b, where, "Unsqueeze", scalar, constant(b, where, "value_ints", axis0, 1, 0));
}

/* a // d on int64 scalars the way torch.onnx's floor_divide symbolic writes it: Div
 * truncates, so it subtracts one where the operands' signs differ and the division
 * leaves a remainder. */
static int floor_div(gb *b, const char *where, int a, int d) {
    int q = xop2(b, where, "Div", a, d), zero = const_int(b, where, 0);
    int neg = xop2(b, where, "Xor", xop2(b, where, "Less", a, zero), xop2(b, where, "Less", d, zero));
    int rem = xop2(b, where, "Sub", a, xop2(b, where, "Mul", q, d));
    int fix = xop2(b, where, "And", neg, xop1(b, where, "Not", xop2(b, where, "Equal", rem, zero)));
    int down = xop2(b, where, "Sub", q, const_int(b, where, 1));
    int in[3] = {fix, down, q};
    char n[96];
    return node(b, "Where", xname(b, where, "Where", n, sizeof n), 3, in, 1, NULL, NULL, 0, NULL, 0);
}

/* Concat of n int64 scalars, each unsqueezed: the shape list of a view(...) call. */
static int shape_list(gb *b, const char *where, int n, const int *scalars) {
    int in[8];
    for (int i = 0; i < n; i++) in[i] = unsqueeze0(b, where, scalars[i]);
    char name[96];
    return node(b, "Concat", xname(b, where, "Concat", name, sizeof name), n, in, 1, NULL, "axis", 0, NULL, 0);
}

/* ---- literals: constant values (plain) or Constant nodes (exporter) ---- */

static int ints(gb *b, const int64_t *v, int n) {
    if (b->style == GPT_STYLE_EXPORTER) return constant(b, "", "value_ints", v, n, 0);
    int64_t d[1] = {n};
    int id = vp_build_const(b->g, "shape", VP_I64, 1, d, v);
    if (id < 0) nomem(b);
    return id;
}

static int scalar(gb *b, float x) {
    if (b->style == GPT_STYLE_EXPORTER) return constant(b, "", "value_float", NULL, 0, x);
    int id = vp_build_const(b->g, "scalar", VP_F32, 0, NULL, &x);
    if (id < 0) nomem(b);
    return id;
}

/* The sizes a layer reads of its input, B, T, C = x.size() in nanoGPT (exporter style). */
typedef struct sizes {
    int batch, seq, hidden, heads; /* int64 scalar values */
} sizes;

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

/* view(B, T, n_head, C // n_head): constant in the plain style; in the exporter's, a
 * shape list of the layer's sizes with head_dim divided out at run time. */
static int heads_shape(gb *b, const gpt_config *c, const sizes *z) {
    if (b->style != GPT_STYLE_EXPORTER) {
        int64_t shape[4] = {c->batch, c->seq, c->heads, c->hidden / c->heads};
        return ints(b, shape, 4);
    }
    int dims[4] = {z->batch, z->seq, z->heads, floor_div(b, "attn", z->hidden, z->heads)};
    return shape_list(b, "attn", 4, dims);
}

static int heads(gb *b, const char *name, int x, const gpt_config *c, const sizes *z, const int64_t *perm) {
    char n[64];
    snprintf(n, sizeof n, "%s/Reshape", name);
    int r = op2(b, "Reshape", n, x, heads_shape(b, c, z));
    snprintf(n, sizeof n, "%s/Transpose", name);
    return node(b, "Transpose", n, 1, &r, 1, NULL, "perm", 0, perm, 4);
}

/* 1 / sqrt(head_dim): a literal, or 1 / sqrt(q.size(-1)) computed from q's shape. */
static int attn_scale(gb *b, const gpt_config *c, int q) {
    if (b->style != GPT_STYLE_EXPORTER) return scalar(b, 1.0f / sqrtf((float)(c->hidden / c->heads)));
    char n[96];
    int d = dim_of(b, "attn", q, -1);
    d = node(b, "Cast", xname(b, "attn", "Cast", n, sizeof n), 1, &d, 1, NULL, "to", VP_F32, NULL, 0);
    d = xop1(b, "attn", "Sqrt", d);
    return xop2(b, "attn", "Div", constant(b, "attn", "value_float", NULL, 0, 1.0f), d);
}

static int block(gb *b, int x, const gpt_config *c, int mask) {
    int64_t h = c->hidden;
    int ln1 = layer_norm(b, "ln_1", x, h);
    sizes z = {-1, -1, -1, -1};
    if (b->style == GPT_STYLE_EXPORTER) {
        z.batch = dim_of(b, "attn", ln1, 0);
        z.seq = dim_of(b, "attn", ln1, 1);
        z.hidden = dim_of(b, "attn", ln1, 2);
        z.heads = const_int(b, "attn", c->heads);
    }
    int qkv = linear(b, "attn/c_attn", ln1, h, 3 * h);
    int64_t split[3] = {h, h, h};
    int in[2] = {qkv, ints(b, split, 3)}, qkv3[3];
    node(b, "Split", "attn/Split", 2, in, 3, qkv3, "axis", 2, NULL, 0);
    static const int64_t bhsd[4] = {0, 2, 1, 3}, bhds[4] = {0, 2, 3, 1};
    int q = heads(b, "attn/q", qkv3[0], c, &z, bhsd);
    int k = heads(b, "attn/k", qkv3[1], c, &z, bhds);
    int v = heads(b, "attn/v", qkv3[2], c, &z, bhsd);
    int att = op2(b, "MatMul", "attn/MatMul", q, k);
    att = op2(b, "Mul", "attn/Mul", att, attn_scale(b, c, q));
    att = op2(b, "Add", "attn/Add", att, mask);
    int p = node(b, "Softmax", "attn/Softmax", 1, &att, 1, NULL, "axis", -1, NULL, 0);
    int y = op2(b, "MatMul", "attn/MatMul_1", p, v);
    y = node(b, "Transpose", "attn/Transpose", 1, &y, 1, NULL, "perm", 0, bhsd, 4);
    int merged;
    if (b->style == GPT_STYLE_EXPORTER) {
        int dims[3] = {z.batch, z.seq, z.hidden}; /* view(B, T, C) */
        merged = shape_list(b, "attn", 3, dims);
    } else {
        int64_t bsh[3] = {c->batch, c->seq, h};
        merged = ints(b, bsh, 3);
    }
    y = op2(b, "Reshape", "attn/Reshape", y, merged);
    y = linear(b, "attn/c_proj", y, h, h);
    x = op2(b, "Add", "Add", x, y);
    int ln2 = layer_norm(b, "ln_2", x, h);
    int f = linear(b, "mlp_fc", ln2, h, 4 * h);
    /* GELU as torch exports it: x * 0.5 * (1 + erf(x / sqrt(2))) */
    int e = op2(b, "Div", "Div", f, scalar(b, sqrtf(2.0f)));
    e = op1(b, "Erf", "Erf", e);
    e = op2(b, "Add", "Add_1", e, scalar(b, 1.0f));
    f = op2(b, "Mul", "Mul_1", f, e);
    f = op2(b, "Mul", "Mul_2", f, scalar(b, 0.5f));
    f = linear(b, "mlp_proj", f, 4 * h, h);
    return op2(b, "Add", "Add_2", x, f);
}

vp_status gpt_graph_build_raw(const gpt_config *c, gpt_style style, vp_graph **out, vp_error *err) {
    vp_graph *g = vp_graph_new();
    if (!g) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    g->path = strdup("gpt-builder");
    g->opset_onnx = 17;
    g->opset_ms = 1;
    gb b = {g, VP_OK, err, style, "", 0};
    if (!g->path) nomem(&b);
    int64_t td[2] = {c->batch, c->seq};
    int tokens = -1;
    if (!b.s) b.s = vp_build_input(g, "tokens", VP_I64, 2, td, &tokens, err);
    int64_t wte_d[2] = {c->vocab, c->hidden}, wpe_d[2] = {c->seq, c->hidden};
    int wte = param(&b, "wte.weight", 2, wte_d), wpe = param(&b, "wpe.weight", 2, wpe_d);
    int x = op2(&b, "Gather", "/wte/Gather", wte, tokens);
    x = op2(&b, "Add", "/Add", x, wpe);
    /* causal mask: 0 on and below the diagonal, -1e4 above */
    int64_t md[2] = {c->seq, c->seq};
    float *m = calloc((size_t)c->seq * (size_t)c->seq, sizeof *m);
    if (!m) nomem(&b);
    for (int i = 0; m && i < c->seq; i++)
        for (int j = i + 1; j < c->seq; j++) m[(size_t)i * c->seq + j] = -1e4f;
    int mask = m ? vp_build_const(g, "causal_mask", VP_F32, 2, md, m) : -1;
    if (m && mask < 0) nomem(&b);
    free(m);
    for (int l = 0; l < c->layers && !b.s; l++) {
        snprintf(b.scope, sizeof b.scope, "/blocks.%d/", l);
        b.k = 0;
        x = block(&b, x, c, mask);
    }
    snprintf(b.scope, sizeof b.scope, "/");
    x = layer_norm(&b, "ln_f", x, c->hidden);
    int64_t lm[2] = {c->hidden, c->vocab};
    int head = param(&b, "lm_head.weight", 2, lm);
    /* the output is named "logits", as in an exported model, so --loss ce:logits finds it */
    int logits = b.s ? -1 : vp_graph_add_value(g, "logits"), in[2] = {x, head};
    int id = b.s || logits < 0 ? -1 : vp_graph_add_node(g, "MatMul", "", "/lm_head/MatMul", 2, in, 1, &logits);
    if (id < 0) nomem(&b);
    if (!b.s) {
        g->nodes[id].opset = 17;
        g->values[logits].flags |= VP_VAL_OUTPUT;
        g->outputs = malloc(sizeof *g->outputs);
        if (g->outputs) g->outputs[g->n_outputs++] = logits;
        else nomem(&b);
    }
    if (!b.s) b.s = vp_graph_link(g, err);
    if (b.s) {
        vp_graph_free(g);
        return b.s;
    }
    *out = g;
    return VP_OK;
}

vp_status gpt_graph_build(const gpt_config *c, vp_graph **out, vp_error *err) {
    vp_graph *g = NULL;
    vp_status s = gpt_graph_build_raw(c, GPT_STYLE_PLAIN, &g, err);
    if (!s) s = vp_infer(g, NULL, NULL, err);
    if (s) {
        vp_graph_free(g);
        return s;
    }
    *out = g;
    return VP_OK;
}

/* Saved activations of layer 1 (a middle layer): every forward value of /blocks.1/ the
 * plan counts as an activation (live when the backward starts), in float32. */
int64_t gpt_saved_of_layer(const vp_plan *p, const vp_graph *g, int print, double sbh4) {
    int64_t saved = 0;
    for (int i = 0; i < p->n_buffers; i++) {
        const vp_buffer *b = &p->buffers[i];
        const vp_value *v = &g->values[b->value];
        if (b->cat != VP_CAT_ACTIVATIONS || b->alias_of >= 0 || v->producer < 0) continue;
        if (strncmp(g->nodes[v->producer].name, "/blocks.1/", 10)) continue;
        saved += b->bytes;
        if (print) printf("| %s | %lld | %.2f |\n", v->name, (long long)b->bytes, (double)b->bytes / sbh4);
    }
    return saved;
}
