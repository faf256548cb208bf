/* Fake-quantisation placement: see qat.h and README.md.
 *
 * Placement follows PyTorch's prepare_qat and TensorRT's Q/DQ rules: the inputs of the
 * matrix units are quantised (weights per output channel, activations per tensor), not
 * their outputs, and a skip-connection Add has its residual input quantised, so an
 * int8 engine can fuse the Add into the convolution or GEMM before it. */
#include "quant/qat.h"

#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/graph_build.h"
#include "ir/infer.h"
#include "ir/vp_regex.h"
#include "train/training.h"

enum { W_QMIN = -128, W_QMAX = 127 };

vp_status vp_qat_parse(const char *arg, vp_qat_opts *o, vp_error *err) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", arg);
    char *save = NULL, *tok = strtok_r(buf, ":", &save);
    if (!tok || strcmp(tok, "int8"))
        return vp_fail(err, VP_ERR_USAGE, "--qat: unknown scheme '%s' (expected int8[:per-channel|per-tensor][:asym|sym][:lsq])",
                       tok ? tok : arg);
    o->enabled = 1;
    while ((tok = strtok_r(NULL, ":", &save))) {
        if (!strcmp(tok, "per-channel")) o->per_tensor_weights = 0;
        else if (!strcmp(tok, "per-tensor")) o->per_tensor_weights = 1;
        else if (!strcmp(tok, "asym")) o->symmetric_activations = 0;
        else if (!strcmp(tok, "sym")) o->symmetric_activations = 1;
        else if (!strcmp(tok, "lsq")) o->lsq = 1;
        else
            return vp_fail(err, VP_ERR_USAGE, "--qat: unknown variant '%s' (expected per-channel, per-tensor, asym, sym or lsq)",
                           tok);
    }
    if (o->lsq) o->symmetric_activations = 1; /* LSQ's signed quantiser: the zero point stays 0 */
    return VP_OK;
}

void vp_qat_name(const vp_qat_opts *o, char *buf, size_t len) {
    snprintf(buf, len, "int8:%s:%s%s", o->per_tensor_weights ? "per-tensor" : "per-channel",
             o->symmetric_activations ? "sym" : "asym", o->lsq ? ":lsq" : "");
}

int vp_qat_is_fake_quant(const vp_node *n) { return !strcmp(n->domain, "vplan") && !strcmp(n->op_type, "FakeQuant"); }

/* v is read as a FakeQuant's scale, directly or through the first-step Where. */
static int read_as_scale(const vp_graph *g, int v, int depth) {
    const vp_value *val = &g->values[v];
    for (int k = 0; k < val->n_consumers; k++) {
        const vp_node *n = &g->nodes[val->consumers[k]];
        if (n->phase != VP_PHASE_FORWARD) continue;
        if (vp_qat_is_fake_quant(n) && n->n_inputs > 1 && n->inputs[1] == v) return 1;
        if (depth == 0 && !n->domain[0] && !strcmp(n->op_type, "Where") && n->n_inputs == 3 && n->inputs[2] == v &&
            read_as_scale(g, n->outputs[0], 1))
            return 1;
    }
    return 0;
}

int vp_qat_is_learned_scale(const vp_graph *g, int v) {
    return (g->values[v].flags & VP_VAL_PARAM) && read_as_scale(g, v, 0);
}

typedef struct pass {
    vp_graph *g;
    const vp_qat_opts *o;
    vp_training *t;
    vp_qat_counts *counts;
    int n_values0;
    int *quantised; /* original value id -> its FakeQuant output, -1 */
    int *order, n_order, cap_order;
} pass;

static vp_status nomem(vp_error *err) { return vp_fail(err, VP_ERR_NOMEM, "out of memory placing fake quantisation"); }

static vp_status push(pass *ps, int id, vp_error *err) {
    if (ps->n_order == ps->cap_order) {
        int *o = realloc(ps->order, (size_t)(ps->cap_order *= 2) * sizeof *o);
        if (!o) return nomem(err);
        ps->order = o;
    }
    ps->order[ps->n_order++] = id;
    return VP_OK;
}

/* A forward node of the pass (domain vplan, or the default one for the ops ONNX has),
 * built, inferred and appended to the order. */
static vp_status node(pass *ps, const char *op, const char *name, int n_in, const int *in, int n_out, int *out,
                      const char *const *anames, const double *avals, int n_attrs, vp_error *err) {
    vp_graph *g = ps->g;
    int std = !strcmp(op, "Equal") || !strcmp(op, "Where");
    int id = vp_build_node(g, op, std ? "" : "vplan", name, n_in, in, n_out, VP_PHASE_FORWARD, 0);
    if (id < 0) return nomem(err);
    for (int a = 0; a < n_attrs; a++) {
        int is_float = !strcmp(anames[a], "averaging_constant") || !strcmp(anames[a], "grad_factor");
        vp_status s = is_float ? vp_node_add_attr_float(g, id, anames[a], (float)avals[a])
                               : vp_node_add_attr_int(g, id, anames[a], (int64_t)avals[a]);
        if (s) return nomem(err);
    }
    vp_status s = vp_build_finish(g, id, out, err);
    return s ? s : push(ps, id, err);
}

/* A float32 initializer of n elements named after v: a learned scale (trainable) or a
 * zero point (a constant). */
static int new_tensor(pass *ps, const char *name, int64_t n, float *data, int trainable) {
    vp_graph *g = ps->g;
    int id = vp_graph_add_unique_value(g, name);
    if (id < 0) return free(data), -1;
    vp_value *v = &g->values[id];
    v->dtype = VP_F32;
    v->rank = 1;
    v->dims[0] = n;
    v->flags |= trainable ? VP_VAL_INITIALIZER | VP_VAL_PARAM : VP_VAL_CONST;
    vp_value_set_data(g, id, data, VP_DATA_HEAP);
    if (trainable) {
        int *p = realloc(ps->t->params, (size_t)(ps->t->n_params + 1) * sizeof *p);
        if (!p) return -1;
        ps->t->params = p;
        p[ps->t->n_params++] = id;
    }
    return id;
}

/* The observer of v: range state carried between steps, QuantParams after it.
 * *steps gets the updated step count (1 at the first step: LSQ's test).  Nothing reads
 * the old state after the observer: the planner writes the new state over it. */
static vp_status observe(pass *ps, int v, int64_t channels, int axis, int weight, int qmin, int qmax, int symmetric,
                         int *scale, int *zp, int *steps, vp_error *err) {
    vp_graph *g = ps->g;
    char name[600];
    int64_t dims[1] = {channels};
    int rank = channels > 1 ? 1 : 0, st[3];
    static const char *suffix[3] = {"qat_min", "qat_max", "qat_steps"};
    for (int k = 0; k < 3; k++) {
        snprintf(name, sizeof name, "%s/%s", g->values[v].name, suffix[k]);
        st[k] = vp_build_state(g, name, VP_F32, k < 2 ? rank : 0, dims);
        if (st[k] < 0) return nomem(err);
        ps->counts->state_bytes += (k < 2 ? channels : 1) * 4;
    }
    int in[4] = {v, st[0], st[1], st[2]}, out[3] = {-1, -1, -1}, qp[2] = {-1, -1};
    static const char *obs_attrs[] = {"axis", "averaging_constant", "freeze_after"};
    double obs_vals[] = {axis, weight ? 1.0 : 0.01, (double)ps->o->freeze_after};
    snprintf(name, sizeof name, "%s/qat_observer", g->values[v].name);
    vp_status s = node(ps, "QuantObserver", name, 4, in, 3, out, obs_attrs, obs_vals, 3, err);
    for (int k = 0; k < 3 && !s; k++) s = vp_training_add_carry(ps->t, st[k], out[k], err);
    static const char *qp_attrs[] = {"quant_min", "quant_max", "symmetric"};
    double qp_vals[] = {qmin, qmax, symmetric};
    snprintf(name, sizeof name, "%s/qat_params", g->values[v].name);
    if (!s) s = node(ps, "QuantParams", name, 2, out, 2, qp, qp_attrs, qp_vals, 3, err);
    *scale = qp[0];
    *zp = qp[1];
    *steps = out[2];
    return s;
}

/* LSQ's initial scale of a weight, per channel: 2 mean|w| / sqrt(qmax) (Esser et al.). */
static float *lsq_init(const vp_value *w, int64_t channels, int axis, int qmax) {
    float *s = calloc((size_t)channels, sizeof *s);
    if (!s) return NULL;
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < w->rank; d++) {
        if (channels > 1 && d < axis) outer *= w->dims[d];
        else if (channels == 1 || d > axis) inner *= w->dims[d];
    }
    const float *x = w->data;
    for (int64_t c = 0; c < channels; c++) {
        double sum = 0;
        for (int64_t o = 0; o < outer; o++)
            for (int64_t i = 0; i < inner; i++) sum += fabs(x[(o * channels + c) * inner + i]);
        double mean = sum / (double)(outer * inner);
        s[c] = (float)(mean > 0 ? 2.0 * mean / sqrt((double)qmax) : 1.0 / qmax);
    }
    return s;
}

/* FakeQuant of value v (once per value; every reader shares it).  weight: v holds data
 * (a parameter or a frozen weight), quantised symmetric int8 per channel of axis (or
 * per tensor when axis < 0 or per-tensor weights were asked for). */
static vp_status quantise_value(pass *ps, int v, int weight, int axis, int *out, vp_error *err) {
    if (v < ps->n_values0 && ps->quantised[v] >= 0) {
        *out = ps->quantised[v];
        return VP_OK;
    }
    vp_graph *g = ps->g;
    const vp_value *val = &g->values[v];
    if (!weight || ps->o->per_tensor_weights || axis < 0) axis = 0;
    int64_t channels = weight && !ps->o->per_tensor_weights && val->rank > axis ? val->dims[axis] : 1;
    int sym = weight || ps->o->symmetric_activations;
    int qmin = sym ? W_QMIN : 0, qmax = sym ? W_QMAX : 255;
    int scale = -1, zp = -1, count = -1;
    double grad_factor = 0;
    char name[600];
    vp_status s = VP_OK;
    if (ps->o->lsq) {
        grad_factor = 1.0 / sqrt((double)vp_value_numel(val) * qmax);
        float *z = calloc((size_t)channels, sizeof *z);
        snprintf(name, sizeof name, "%s/qat_zero_point", val->name);
        zp = z ? new_tensor(ps, name, channels, z, 0) : -1;
        if (zp < 0) return nomem(err);
        val = &g->values[v];
        snprintf(name, sizeof name, "%s/lsq_scale", val->name);
        if (weight) {
            if (val->dtype != VP_F32 || !val->data)
                return vp_fail(err, VP_ERR_UNSUPPORTED, "--qat lsq: weight '%s' has no float32 data to start its scale from",
                               val->name);
            float *init = lsq_init(val, channels, axis, qmax);
            scale = init ? new_tensor(ps, name, channels, init, 1) : -1;
            if (scale < 0) return nomem(err);
        } else { /* the observer's scale at the first step, the learned one after */
            int obs_scale, obs_zp, one_c, first;
            float *one = malloc(sizeof *one), f_one = 1;
            if (one) *one = 1.0f;
            int learned = one ? new_tensor(ps, name, 1, one, 1) : -1;
            if (learned < 0) return nomem(err);
            s = observe(ps, v, 1, 0, 0, qmin, qmax, 1, &obs_scale, &obs_zp, &count, err);
            one_c = s ? -1 : vp_build_const(g, "qat_one", VP_F32, 0, NULL, &f_one);
            if (!s && one_c < 0) s = nomem(err);
            snprintf(name, sizeof name, "%s/lsq_first_step", g->values[v].name);
            if (!s) s = node(ps, "Equal", name, 2, (int[]){count, one_c}, 1, &first, NULL, NULL, 0, err);
            snprintf(name, sizeof name, "%s/lsq_scale_used", g->values[v].name);
            if (!s) s = node(ps, "Where", name, 3, (int[]){first, obs_scale, learned}, 1, &scale, NULL, NULL, 0, err);
            if (s) return s;
        }
        ps->counts->learned++;
    } else {
        s = observe(ps, v, channels, axis, weight, qmin, qmax, sym, &scale, &zp, &count, err);
    }
    static const char *fq_attrs[] = {"quant_min", "quant_max", "axis", "grad_factor"};
    double fq_vals[] = {qmin, qmax, axis, grad_factor};
    snprintf(name, sizeof name, "%s/fake_quant", g->values[v].name);
    int fq;
    if (!s) s = node(ps, "FakeQuant", name, 3, (int[]){v, scale, zp}, 1, &fq, fq_attrs, fq_vals, ps->o->lsq ? 4 : 3, err);
    if (s) return s;
    if (v < ps->n_values0) ps->quantised[v] = fq;
    ps->counts->weights += weight;
    ps->counts->activations += !weight;
    *out = fq;
    return VP_OK;
}

/* Whether n is a matrix unit the pass quantises, and for each quantised input k the
 * weight's output-channel axis (axes[k]; -1 per tensor).  Bias inputs stay float: the
 * export stores them as int32 with the product of the input scales. */
static int matrix_unit(const vp_graph *g, const vp_node *n, int *quantise, int *axes) {
    const char *op = n->op_type;
    int ms = !strcmp(n->domain, "com.microsoft"), onnx = !n->domain[0];
    if (!(onnx && (!strcmp(op, "Conv") || !strcmp(op, "ConvTranspose") || !strcmp(op, "Gemm") || !strcmp(op, "MatMul"))) &&
        !(ms && !strcmp(op, "FusedMatMul")))
        return 0;
    if (n->n_inputs < 2 || n->inputs[0] < 0 || n->inputs[1] < 0) return 0;
    const vp_value *w = &g->values[n->inputs[1]];
    quantise[0] = quantise[1] = 1;
    axes[0] = -1;
    if (!strcmp(op, "Conv")) axes[1] = 0;                                            /* [O, I/g, k...] */
    else if (!strcmp(op, "ConvTranspose")) axes[1] = vp_attr_int(n, "group", 1) == 1 ? 1 : -1; /* [I, O/g, k...] */
    else if (!strcmp(op, "Gemm")) axes[1] = vp_attr_int(n, "transB", 0) ? 0 : 1;    /* B [K, N] or [N, K] */
    else if (!strcmp(op, "FusedMatMul")) axes[1] = w->rank - (vp_attr_int(n, "transB", 0) ? 2 : 1);
    else axes[1] = w->rank - 1; /* MatMul: [..., K, N] */
    if (w->rank < 2) axes[1] = -1;
    return 1;
}

/* A skip-connection Add: two activations of one shape, one of them (the residual: the
 * one read elsewhere too, the earlier-produced when both are) also feeding the block
 * whose output is the other.  Returns the residual's input index or -1. */
static int residual_input(const vp_graph *g, const vp_node *n) {
    if (n->domain[0] || strcmp(n->op_type, "Add") || n->n_inputs != 2 || n->inputs[0] < 0 || n->inputs[1] < 0) return -1;
    const vp_value *a = &g->values[n->inputs[0]], *b = &g->values[n->inputs[1]];
    if (a->data || b->data || a->dtype != VP_F32 || b->dtype != VP_F32 || a->rank != b->rank ||
        memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->rank) || n->inputs[0] == n->inputs[1])
        return -1;
    int ma = a->n_consumers > 1, mb = b->n_consumers > 1;
    if (ma && mb) return a->producer <= b->producer ? 0 : 1;
    return ma ? 0 : mb ? 1 : -1;
}

static int is_weight(const vp_value *v) { return v->data || (v->flags & (VP_VAL_PARAM | VP_VAL_INITIALIZER)); }

static vp_status place(pass *ps, int i, const regex_t *re, int *matched, vp_error *err) {
    vp_graph *g = ps->g;
    const vp_node *n = &g->nodes[i];
    int quantise[2] = {0, 0}, axes[2] = {-1, -1}, unit = matrix_unit(g, n, quantise, axes);
    int res = unit ? -1 : residual_input(g, n);
    if (!unit && res < 0) return push(ps, i, err);
    if (re && regexec(re, n->name, 0, NULL, 0) == 0) {
        ++*matched;
        ps->counts->excluded += unit;
        return push(ps, i, err);
    }
    if (res >= 0) quantise[res] = 1;
    for (int k = 0; k < 2; k++) {
        n = &g->nodes[i];
        int v = n->inputs[k];
        if (!quantise[k] || !vp_dtype_is_float(g->values[v].dtype)) continue;
        if (g->values[v].dtype != VP_F32)
            return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "--qat: input '%s' is %s; fake quantisation is float32",
                                g->values[v].name, vp_dtype_name(g->values[v].dtype));
        int w = is_weight(&g->values[v]), fq = -1;
        vp_status s = quantise_value(ps, v, w, w ? axes[k] : -1, &fq, err);
        if (s) return s;
        g->nodes[i].inputs[k] = fq;
        ps->counts->residuals += res == k;
    }
    ps->counts->nodes += unit;
    return push(ps, i, err);
}

vp_status vp_qat_apply(vp_graph *g, const vp_qat_opts *o, vp_training *t, vp_qat_counts *counts, char *warning,
                       vp_error *err) {
    memset(counts, 0, sizeof *counts);
    if (warning) warning[0] = 0;
    if (!o->enabled) return VP_OK;
    regex_t re;
    if (o->exclude) {
        vp_status rs = vp_regex_compile(&re, o->exclude, "--qat-exclude", err);
        if (rs) return rs;
    }
    pass ps = {.g = g, .o = o, .t = t, .counts = counts, .n_values0 = g->n_values, .cap_order = g->n_nodes * 4 + 16};
    ps.quantised = malloc(((size_t)g->n_values + 1) * sizeof *ps.quantised);
    ps.order = malloc((size_t)ps.cap_order * sizeof *ps.order);
    vp_status s = ps.quantised && ps.order ? VP_OK : nomem(err);
    for (int v = 0; !s && v < g->n_values; v++) ps.quantised[v] = -1;
    int n0 = g->n_nodes, matched = 0;
    for (int i = 0; !s && i < n0; i++)
        s = g->nodes[i].folded ? push(&ps, i, err) : place(&ps, i, o->exclude ? &re : NULL, &matched, err);
    if (!s && ps.n_order != g->n_nodes)
        s = vp_fail(err, VP_ERR_RUNTIME, "internal: QAT placement ordered %d of %d nodes", ps.n_order, g->n_nodes);
    if (!s && !counts->nodes)
        s = vp_fail(err, VP_ERR_INVALID, "%s: --qat: nothing to quantise (no Conv, ConvTranspose, Gemm, MatMul or "
                    "FusedMatMul node%s)", g->path, counts->excluded ? " left after --qat-exclude" : "");
    if (!s && o->exclude && !matched && warning)
        snprintf(warning, 512, "--qat-exclude '%s' matches no Conv, ConvTranspose, Gemm, MatMul, FusedMatMul or residual Add node",
                 o->exclude);
    if (!s) s = vp_graph_keep_nodes(g, ps.order, ps.n_order, err);
    if (o->exclude) regfree(&re);
    free(ps.quantised);
    free(ps.order);
    return s;
}

vp_status vp_qat_finish(vp_graph *g, const vp_qat_opts *o, vp_training *t, vp_error *err) {
    if (!o->enabled || !o->lsq) return VP_OK;
    int n0 = g->n_nodes;
    for (int i = 0; i < n0; i++) {
        const vp_node *n = &g->nodes[i];
        if (!vp_qat_is_fake_quant(n) || n->n_inputs < 2 || n->inputs[1] < 0) continue;
        int p = g->values[n->inputs[1]].producer;
        if (p < 0 || strcmp(g->nodes[p].op_type, "Where")) continue;
        int first = g->nodes[p].inputs[0], observed = g->nodes[p].inputs[1], learned = g->nodes[p].inputs[2];
        for (int c = 0; c < t->n_carry; c++) {
            if (t->carry[c].from != learned) continue;
            char name[600];
            snprintf(name, sizeof name, "%s/lsq_init", g->values[learned].name);
            int id = vp_build_node(g, "Where", "", name, 3, (int[]){first, observed, t->carry[c].to}, 1, VP_PHASE_OPTIMIZER, 0);
            if (id < 0) return nomem(err);
            vp_status s = vp_build_finish(g, id, &t->carry[c].to, err);
            if (s) return s;
        }
    }
    return VP_OK;
}
