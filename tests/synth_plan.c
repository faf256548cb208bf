/* The synthetic training plan of synth_plan.h: graph, buffers, lifetimes, first-fit
 * offsets and the summary a real plan carries, built without the planner so that tests
 * of the artifacts do not depend on it. */
#include "synth_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int add_value(vp_graph *g, const char *name, vp_dtype dt, int64_t d0, int64_t d1, int64_t d2, unsigned flags) {
    int v = vp_graph_add_value(g, name);
    if (v < 0) return -1;
    vp_value *val = &g->values[v];
    val->dtype = dt;
    val->rank = d2 ? 3 : d1 ? 2 : 1;
    val->dims[0] = d0;
    val->dims[1] = d1;
    val->dims[2] = d2;
    val->flags = flags;
    return v;
}

static int add_node(vp_graph *g, const char *op, const char *name, vp_phase ph, int n_in, const int *in, int n_out,
                    const int *out) {
    int id = vp_graph_add_node(g, op, "", name, n_in, in, n_out, out);
    if (id >= 0) g->nodes[id].phase = ph;
    return id;
}

typedef struct layer_op {
    const char *module, *op;
    int width;   /* output features: 64 or 256 */
    int param;   /* has a weight */
} layer_op;

/* One GPT block; "oddname" carries a quote, a backslash and XML specials to test escaping. */
static const layer_op block_ops[] = {
    {"ln_1", "LayerNormalization", 64, 1}, {"attn", "MatMul", 64, 1},    {"attn", "Softmax", 64, 0},
    {"attn", "MatMul", 64, 1},             {"", "Add", 64, 0},           {"ln_2", "LayerNormalization", 64, 1},
    {"mlp", "MatMul", 256, 1},             {"mlp", "Gelu", 256, 0},      {"mlp", "MatMul", 64, 1},
    {"", "Add", 64, 0},
};
#define N_BLOCK_OPS ((int)(sizeof block_ops / sizeof block_ops[0]))

typedef struct fwd_rec {
    int node, in, out, param;
} fwd_rec;

/* Forward: embedding, blocks, loss.  Records each node for the backward pass. */
static int build_forward(test_synth *s, int n_blocks, fwd_rec *rec, int *n_rec, int *labels) {
    vp_graph *g = s->g;
    char name[256];
    int tokens = add_value(g, "tokens", VP_I64, 4, 16, 0, VP_VAL_INPUT);
    *labels = add_value(g, "labels", VP_I64, 4, 16, 0, VP_VAL_INPUT);
    int wte = add_value(g, "wte.weight", VP_F32, 512, 64, 0, VP_VAL_INITIALIZER | VP_VAL_PARAM);
    int x = add_value(g, "/wte/Gather_output_0", VP_F32, 4, 16, 64, 0);
    int in[2] = {wte, tokens};
    rec[(*n_rec)++] = (fwd_rec){add_node(g, "Gather", "/wte/Gather", VP_PHASE_FORWARD, 2, in, 1, &x), tokens, x, wte};
    s->params[s->n_params++] = wte;
    for (int b = 0; b < n_blocks; b++) {
        for (int k = 0; k < N_BLOCK_OPS; k++) {
            const layer_op *o = &block_ops[k];
            int w = -1, odd = b == 0 && k == 3;
            if (o->param) {
                snprintf(name, sizeof name, "blocks.%d.%s.w%d", b, o->module, k);
                w = add_value(g, name, VP_F32, 64, o->width, 0, VP_VAL_INITIALIZER | VP_VAL_PARAM);
                s->params[s->n_params++] = w;
            }
            if (o->module[0]) snprintf(name, sizeof name, "/blocks.%d/%s/%s%s_%d", b, o->module, o->op, odd ? "\"odd\\&<x>" : "", k);
            else snprintf(name, sizeof name, "/blocks.%d/%s_%d", b, o->op, k);
            char vname[300];
            snprintf(vname, sizeof vname, "%s_output_0", name);
            int y = add_value(g, vname, VP_F32, 4, 16, o->width, 0);
            int ins[2] = {x, w};
            int id = add_node(g, o->op, name, VP_PHASE_FORWARD, o->param ? 2 : 1, ins, 1, &y);
            rec[(*n_rec)++] = (fwd_rec){id, x, y, w};
            x = y;
        }
    }
    int loss = add_value(g, "loss", VP_F32, 1, 0, 0, VP_VAL_OUTPUT);
    int lin[2] = {x, *labels};
    rec[(*n_rec)++] = (fwd_rec){add_node(g, "SoftmaxCrossEntropyLoss", "loss/softmax_cross_entropy", VP_PHASE_LOSS, 2,
                                         lin, 1, &loss), x, loss, -1};
    return loss;
}

/* Backward in reverse order; returns the gradient value of each parameter in grads.
 * With plain_names 1 the nodes do not say which forward node they differentiate (as in
 * graphs from other tools), so the DOT writer must place them by the activations they
 * read; with 2 they read none either, which takes it off its ladder layout. */
static void build_backward(test_synth *s, const fwd_rec *rec, int n_rec, int *grads, int plain_names) {
    vp_graph *g = s->g;
    char name[512];
    int dy = add_value(g, "loss_grad", VP_F32, 1, 0, 0, 0);
    int seed = add_node(g, "ConstantOfShape", "loss_grad/ConstantOfShape_0", VP_PHASE_BACKWARD, 0, NULL, 1, &dy);
    (void)seed;
    int pi = s->n_params;
    for (int i = n_rec - 1, k = 1; i >= 0; i--, k++) {
        const vp_node *fn = &g->nodes[rec[i].node];
        const vp_value *xin = &g->values[rec[i].in];
        if (plain_names) snprintf(name, sizeof name, "/autograd/%sGrad_%d", fn->op_type, k);
        else snprintf(name, sizeof name, "%s_grad/%sGrad_%d", fn->name, fn->op_type, k);
        char vname[600];
        snprintf(vname, sizeof vname, "%s_dx", name);
        int dx = add_value(g, vname, VP_F32, xin->dims[0], xin->dims[1], xin->dims[2], 0);
        int outs[2] = {dx, -1}, n_out = 1;
        if (rec[i].param >= 0) {
            const vp_value *w = &g->values[rec[i].param];
            snprintf(vname, sizeof vname, "%s.grad", w->name);
            outs[1] = grads[--pi] = add_value(g, vname, VP_F32, w->dims[0], w->dims[1], 0, 0);
            n_out = 2;
        }
        int ins[3] = {dy, plain_names == 2 ? dy : rec[i].in, rec[i].param};
        char op[64];
        snprintf(op, sizeof op, "%sGrad", g->nodes[rec[i].node].op_type);
        add_node(g, op, name, VP_PHASE_BACKWARD, rec[i].param >= 0 ? 3 : 2, ins, n_out, outs);
        dy = dx;
    }
}

/* AdamW per parameter: reads the weight, its gradient and two moments, writes all three. */
static void build_optimizer(test_synth *s, const int *grads) {
    vp_graph *g = s->g;
    char name[300];
    for (int i = 0; i < s->n_params; i++) {
        int w = s->params[i];
        const vp_value *wv = &g->values[w];
        int64_t d0 = wv->dims[0], d1 = wv->dims[1];
        char pname[200];
        snprintf(pname, sizeof pname, "%s", wv->name);
        snprintf(name, sizeof name, "%s.exp_avg", pname);
        int m = add_value(g, name, VP_F32, d0, d1, 0, VP_VAL_STATE);
        snprintf(name, sizeof name, "%s.exp_avg_sq", pname);
        int v = add_value(g, name, VP_F32, d0, d1, 0, VP_VAL_STATE);
        int outs[3];
        const char *suffix[3] = {"new", "exp_avg_new", "exp_avg_sq_new"};
        for (int k = 0; k < 3; k++) {
            snprintf(name, sizeof name, "%s.%s", pname, suffix[k]);
            outs[k] = add_value(g, name, VP_F32, d0, d1, 0, 0);
        }
        int ins[4] = {w, grads[i], m, v};
        snprintf(name, sizeof name, "%s_update/AdamW", pname);
        add_node(g, "AdamW", name, VP_PHASE_OPTIMIZER, 4, ins, 3, outs);
    }
}

/* ---- the plan: buffers, lifetimes, offsets, summary ---- */

static vp_category category_of(const vp_graph *g, int v, const char *is_grad) {
    const vp_value *val = &g->values[v];
    if (val->flags & VP_VAL_INPUT) return VP_CAT_INPUTS;
    if (val->flags & VP_VAL_PARAM) return VP_CAT_PARAMETERS;
    if (val->flags & VP_VAL_STATE) return VP_CAT_OPTIMIZER_STATE;
    if (is_grad[v]) return VP_CAT_GRADIENTS;
    for (int c = 0; c < val->n_consumers; c++)
        if (g->nodes[val->consumers[c]].phase == VP_PHASE_BACKWARD && val->producer >= 0 &&
            g->nodes[val->producer].phase == VP_PHASE_FORWARD)
            return VP_CAT_ACTIVATIONS;
    return VP_CAT_TEMPORARIES;
}

/* One buffer per value; persistent ones live through the step; update outputs alias
 * their inputs (weight and moments), as planner/liveness.c does. */
static int build_buffers(test_synth *s, const int *grads) {
    vp_graph *g = s->g;
    vp_plan *p = &s->p;
    char *is_grad = calloc((size_t)g->n_values + 1, 1);
    p->buffers = calloc((size_t)g->n_values + 1, sizeof *p->buffers);
    p->buffer_of = malloc(((size_t)g->n_values + 1) * sizeof *p->buffer_of);
    if (!is_grad || !p->buffers || !p->buffer_of) return free(is_grad), 0;
    for (int i = 0; i < s->n_params; i++) is_grad[grads[i]] = 1;
    for (int v = 0; v < g->n_values; v++) {
        vp_buffer *b = &p->buffers[p->n_buffers];
        const vp_value *val = &g->values[v];
        b->value = v;
        b->cat = category_of(g, v, is_grad);
        b->bytes = vp_value_numel(val) * (int64_t)vp_dtype_size(val->dtype);
        b->size = (b->bytes + 255) / 256 * 256;
        b->alias_of = -1;
        b->first = val->producer >= 0 ? val->producer : 0; /* node id == step here */
        b->last = b->first;
        for (int c = 0; c < val->n_consumers; c++)
            if (val->consumers[c] > b->last) b->last = val->consumers[c];
        if (b->cat == VP_CAT_PARAMETERS || b->cat == VP_CAT_OPTIMIZER_STATE) b->first = 0, b->last = p->n_steps - 1;
        p->buffer_of[v] = p->n_buffers++;
    }
    for (int i = 0; i < g->n_nodes; i++) {
        const vp_node *n = &g->nodes[i];
        for (int k = 0; n->phase == VP_PHASE_OPTIMIZER && k < 3; k++) {
            vp_buffer *out = &p->buffers[p->buffer_of[n->outputs[k]]];
            out->alias_of = p->buffer_of[n->inputs[k == 0 ? 0 : k + 1]];
            out->cat = p->buffers[out->alias_of].cat;
        }
    }
    free(is_grad);
    return 1;
}

typedef struct placed {
    int64_t offset, end;
    int last;
} placed;

static int by_first(const void *a, const void *b) {
    const int *x = a, *y = b;
    return x[0] != y[0] ? (x[0] < y[0] ? -1 : 1) : x[1] - y[1];
}

/* First fit in order of first step against the live buffers kept sorted by offset: not
 * optimal, but a layout with reuse and gaps like a real one. */
static int assign_offsets(vp_plan *p) {
    int(*order)[2] = malloc(((size_t)p->n_buffers + 1) * sizeof *order);
    placed *act = malloc(((size_t)p->n_buffers + 1) * sizeof *act);
    int n = 0, n_act = 0;
    for (int b = 0; order && act && b < p->n_buffers; b++)
        if (p->buffers[b].alias_of < 0) order[n][0] = p->buffers[b].first, order[n++][1] = b;
    if (order && act) qsort(order, (size_t)n, sizeof *order, by_first);
    for (int i = 0; order && act && i < n; i++) {
        vp_buffer *buf = &p->buffers[order[i][1]];
        int m = 0, pos;
        for (int j = 0; j < n_act; j++)
            if (act[j].last >= buf->first) act[m++] = act[j];
        n_act = m;
        int64_t off = 0;
        for (pos = 0; pos < n_act && act[pos].offset < off + buf->size; pos++)
            if (act[pos].end > off) off = act[pos].end;
        memmove(act + pos + 1, act + pos, (size_t)(n_act - pos) * sizeof *act);
        act[pos] = (placed){off, off + buf->size, buf->last};
        n_act++;
        buf->offset = off;
        if (off + buf->size > p->arena_bytes) p->arena_bytes = off + buf->size;
    }
    int ok = order && act;
    free(order);
    free(act);
    for (int b = 0; ok && b < p->n_buffers; b++)
        if (p->buffers[b].alias_of >= 0) p->buffers[b].offset = p->buffers[p->buffers[b].alias_of].offset;
    return ok;
}

static void summarize(vp_plan *p) {
    int64_t *live = calloc((size_t)p->n_steps + 1, sizeof *live);
    for (int b = 0; live && b < p->n_buffers; b++) {
        const vp_buffer *buf = &p->buffers[b];
        if (buf->alias_of >= 0) continue;
        p->category_bytes[buf->cat] += buf->size;
        live[buf->first] += buf->size;
        live[buf->last + 1] -= buf->size;
    }
    int64_t cur = 0;
    for (int s = 0; live && s < p->n_steps; s++) {
        cur += live[s];
        if (cur > p->lower_bound_bytes) p->lower_bound_bytes = cur, p->peak_step = s;
    }
    free(live);
}

int test_synth_build(test_synth *s, int n_blocks, int64_t budget, int plain_names) {
    memset(s, 0, sizeof *s);
    s->g = vp_graph_new();
    int max_rec = n_blocks * N_BLOCK_OPS + 2;
    fwd_rec *rec = malloc((size_t)max_rec * sizeof *rec);
    s->params = malloc((size_t)max_rec * sizeof *s->params);
    int *grads = malloc((size_t)max_rec * sizeof *grads);
    int n_rec = 0, labels, ok = s->g && rec && s->params && grads;
    vp_error err;
    if (ok) {
        free(s->g->path);
        s->g->path = strdup("synthetic-gpt.onnx");
        build_forward(s, n_blocks, rec, &n_rec, &labels);
        build_backward(s, rec, n_rec, grads, plain_names);
        build_optimizer(s, grads);
        ok = vp_graph_link(s->g, &err) == VP_OK;
    }
    vp_plan *p = &s->p;
    p->g = s->g;
    p->device = *vp_device_find("a100");
    p->budget_bytes = budget;
    p->loss_buffer = -1;
    p->n_steps = ok ? s->g->n_nodes : 0;
    p->steps = malloc(((size_t)p->n_steps + 1) * sizeof *p->steps);
    for (int i = 0; p->steps && i < p->n_steps; i++) p->steps[i] = i;
    ok = ok && p->steps && build_buffers(s, grads) && assign_offsets(p);
    if (ok) summarize(p);
    free(rec);
    free(grads);
    return ok;
}

void test_synth_free(test_synth *s) {
    free(s->p.steps);
    free(s->p.buffers);
    free(s->p.buffer_of);
    free(s->params);
    vp_graph_free(s->g);
}

