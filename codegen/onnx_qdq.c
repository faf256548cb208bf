/* QDQ export: see onnx_qdq.h.  Everything added to the unpacked message is malloc'd,
 * so protobuf-c's free_unpacked frees it with the rest. */
#include "onnx_qdq.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx.pb-c.h"
#include "ir/atomic_file.h"
#include "onnx/tensor_proto.h"

typedef struct rw {
    Onnx__ModelProto *mp;
    Onnx__NodeProto **nodes; /* the new node order */
    size_t n_nodes, cap_nodes;
    int oom;
} rw;

static char *cat(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    char *s = malloc(la + lb + 1);
    if (s) memcpy(s, a, la), memcpy(s + la, b, lb + 1);
    return s;
}

static void push_node(rw *w, Onnx__NodeProto *np) {
    if (!np) {
        w->oom = 1;
        return;
    }
    if (w->n_nodes == w->cap_nodes) {
        size_t cap = w->cap_nodes ? 2 * w->cap_nodes : 64;
        Onnx__NodeProto **n = realloc(w->nodes, cap * sizeof *n);
        if (!n) {
            w->oom = 1;
            onnx__node_proto__free_unpacked(np, NULL);
            return;
        }
        w->nodes = n;
        w->cap_nodes = cap;
    }
    w->nodes[w->n_nodes++] = np;
}

static void add_initializer(rw *w, const char *name, int32_t dtype, int64_t n, int per_axis, const void *data, size_t esize) {
    Onnx__GraphProto *gp = w->mp->graph;
    Onnx__TensorProto *tp = calloc(1, sizeof *tp), **grown = realloc(gp->initializer, (gp->n_initializer + 1) * sizeof *grown);
    if (grown) gp->initializer = grown;
    if (!tp || !grown) {
        free(tp);
        w->oom = 1;
        return;
    }
    onnx__tensor_proto__init(tp);
    tp->name = strdup(name);
    tp->has_data_type = 1;
    tp->data_type = dtype;
    if (per_axis) {
        tp->dims = malloc(sizeof *tp->dims);
        if (tp->dims) tp->dims[0] = n, tp->n_dims = 1;
    }
    tp->has_raw_data = 1;
    tp->raw_data.len = (size_t)n * esize;
    tp->raw_data.data = malloc(tp->raw_data.len ? tp->raw_data.len : 1);
    if (tp->raw_data.data) memcpy(tp->raw_data.data, data, tp->raw_data.len);
    gp->initializer[gp->n_initializer++] = tp;
    w->oom |= !tp->name || !tp->raw_data.data || (per_axis && !tp->dims);
}

/* QuantizeLinear or DequantizeLinear(x, scale, zero_point) -> y, axis when per channel. */
static Onnx__NodeProto *qdq_node(const char *op, const char *x, const char *scale, const char *zp, const char *y, int axis) {
    Onnx__NodeProto *np = calloc(1, sizeof *np);
    if (!np) return NULL;
    onnx__node_proto__init(np);
    np->op_type = strdup(op);
    np->name = cat(y, "/node");
    np->domain = strdup("");
    np->input = calloc(3, sizeof *np->input);
    np->output = calloc(1, sizeof *np->output);
    if (np->input) np->n_input = 3, np->input[0] = strdup(x), np->input[1] = strdup(scale), np->input[2] = strdup(zp);
    if (np->output) np->n_output = 1, np->output[0] = strdup(y);
    if (axis >= 0) {
        np->attribute = calloc(1, sizeof *np->attribute);
        Onnx__AttributeProto *a = calloc(1, sizeof *a);
        if (np->attribute && a) {
            onnx__attribute_proto__init(a);
            a->name = strdup("axis");
            a->has_type = 1;
            a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
            a->has_i = 1;
            a->i = axis;
            np->attribute[np->n_attribute++] = a;
        } else
            free(a);
    }
    return np;
}

/* The names a point's nodes and tensors use. */
typedef struct names {
    char *q, *dq, *scale, *zp;
} names;

static void names_free(names *nm) { free(nm->q), free(nm->dq), free(nm->scale), free(nm->zp); }

static int names_init(names *nm, const char *v) {
    nm->q = cat(v, "_quantized");
    nm->dq = cat(v, "_dequantized");
    nm->scale = cat(v, "_scale");
    nm->zp = cat(v, "_zero_point");
    return nm->q && nm->dq && nm->scale && nm->zp;
}

/* Scale and zero point of p as initializers. */
static void add_params(rw *w, const vp_qdq_point *p, const names *nm) {
    int8_t *z8 = malloc((size_t)p->n + 1);
    if (!z8) {
        w->oom = 1;
        return;
    }
    for (int64_t c = 0; c < p->n; c++) {
        int z = (int)p->zero_point[c];
        z8[c] = (int8_t)(p->qmin < 0 ? z : (int)(uint8_t)z);
    }
    add_initializer(w, nm->scale, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, p->n, p->axis >= 0, p->scale, 4);
    add_initializer(w, nm->zp, p->qmin < 0 ? ONNX__TENSOR_PROTO__DATA_TYPE__INT8 : ONNX__TENSOR_PROTO__DATA_TYPE__UINT8, p->n,
                    p->axis >= 0, z8, 1);
    free(z8);
}

/* A weight quantised as FakeQuant computes it, per channel of p->axis. */
static void add_weight(rw *w, const vp_qdq_point *p, const names *nm) {
    const vp_tensor *t = &p->data;
    int64_t count = vp_tensor_numel(t), outer = 1, inner = 1, channels = p->axis >= 0 ? p->n : 1;
    for (int d = 0; p->axis >= 0 && d < t->rank; d++) {
        if (d < p->axis) outer *= t->dims[d];
        else if (d > p->axis) inner *= t->dims[d];
    }
    if (p->axis < 0) inner = count;
    int8_t *q = malloc((size_t)count + 1);
    if (!q) {
        w->oom = 1;
        return;
    }
    const float *x = t->data;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t c = 0; c < channels; c++) {
            float inv = 1.0f / p->scale[c], z = p->zero_point[c];
            for (int64_t i = 0; i < inner; i++) {
                int64_t k = (o * channels + c) * inner + i;
                float v = nearbyintf(x[k] * inv) + z;
                q[k] = (int8_t)(v < p->qmin ? p->qmin : v > p->qmax ? p->qmax : v);
            }
        }
    Onnx__GraphProto *gp = w->mp->graph;
    add_initializer(w, nm->q, ONNX__TENSOR_PROTO__DATA_TYPE__INT8, count, 0, q, 1);
    free(q);
    if (!w->oom) { /* the int8 tensor has the weight's shape */
        Onnx__TensorProto *tp = gp->initializer[gp->n_initializer - 1];
        free(tp->dims);
        tp->dims = malloc(((size_t)t->rank + 1) * sizeof *tp->dims);
        if (!tp->dims) w->oom = 1;
        else {
            tp->n_dims = (size_t)t->rank;
            for (int d = 0; d < t->rank; d++) tp->dims[d] = t->dims[d];
        }
    }
}

static const vp_qdq_point *point_of(const vp_qdq_point *pts, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(pts[i].value, name)) return &pts[i];
    return NULL;
}

static int reads_quantised(const vp_qdq_point *p, const char *out0) {
    for (int r = 0; out0 && r < p->n_readers; r++)
        if (!strcmp(p->readers[r], out0)) return 1;
    return 0;
}

static const char *out0(const Onnx__NodeProto *np) { return np->n_output ? np->output[0] : NULL; }

/* Whether node i's input k reads p quantised: the node is one of p's readers, or a
 * Transpose whose output a reader takes (FusedMatMul(transB) read W through it). */
static int rewire(const Onnx__GraphProto *gp, size_t i, const vp_qdq_point *p) {
    const Onnx__NodeProto *np = gp->node[i];
    if (reads_quantised(p, out0(np))) return 1;
    if (strcmp(np->op_type, "Transpose") || !out0(np)) return 0;
    for (size_t j = 0; j < gp->n_node; j++)
        for (size_t k = 0; k < gp->node[j]->n_input; k++)
            if (!strcmp(gp->node[j]->input[k], out0(np)) && reads_quantised(p, out0(gp->node[j]))) return 1;
    return 0;
}

/* The int32 bias of Conv or Gemm node np whose inputs 0 and 1 are quantised: b / (s_in * s_w),
 * zero point 0, per output channel. */
static void quantise_bias(rw *w, Onnx__NodeProto *np, const vp_qdq_point *pa, const vp_qdq_point *pw, vp_qdq_counts *counts) {
    Onnx__GraphProto *gp = w->mp->graph;
    Onnx__TensorProto *b = NULL;
    for (size_t i = 0; i < gp->n_initializer && !b; i++)
        if (!strcmp(gp->initializer[i]->name, np->input[2])) b = gp->initializer[i];
    if (!b || b->data_type != ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT || b->n_dims != 1 || !b->has_raw_data ||
        pa->axis >= 0 || (pw->axis >= 0 && pw->n != b->dims[0]))
        return;
    int64_t c_out = b->dims[0];
    float *scale = malloc((size_t)c_out * sizeof *scale);
    int32_t *q = malloc((size_t)c_out * sizeof *q), *zero = calloc((size_t)c_out, sizeof *zero);
    names nm;
    int ok = scale && q && zero && names_init(&nm, np->input[2]);
    for (int64_t c = 0; ok && c < c_out; c++) {
        float bv;
        memcpy(&bv, b->raw_data.data + 4 * c, 4);
        scale[c] = pa->scale[0] * pw->scale[pw->axis >= 0 ? c : 0];
        double v = nearbyint((double)bv / scale[c]);
        q[c] = (int32_t)(v > 2147483647.0 ? 2147483647.0 : v < -2147483648.0 ? -2147483648.0 : v);
    }
    if (ok) {
        add_initializer(w, nm.q, ONNX__TENSOR_PROTO__DATA_TYPE__INT32, c_out, 1, q, 4);
        add_initializer(w, nm.scale, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, c_out, 1, scale, 4);
        add_initializer(w, nm.zp, ONNX__TENSOR_PROTO__DATA_TYPE__INT32, c_out, 1, zero, 4);
        push_node(w, qdq_node("DequantizeLinear", nm.q, nm.scale, nm.zp, nm.dq, 0));
        free(np->input[2]);
        np->input[2] = strdup(nm.dq);
        w->oom |= !np->input[2];
        counts->biases++;
        names_free(&nm);
    } else
        w->oom = 1;
    free(scale), free(q), free(zero);
}

/* Drops initializers no node reads any more (a weight replaced by its int8 copy). */
static void drop_unread(Onnx__GraphProto *gp) {
    size_t kept = 0;
    for (size_t i = 0; i < gp->n_initializer; i++) {
        Onnx__TensorProto *tp = gp->initializer[i];
        int read = 0;
        for (size_t j = 0; j < gp->n_node && !read; j++)
            for (size_t k = 0; k < gp->node[j]->n_input && !read; k++) read = !strcmp(gp->node[j]->input[k], tp->name);
        for (size_t o = 0; o < gp->n_output && !read; o++) read = !strcmp(gp->output[o]->name, tp->name);
        if (read) gp->initializer[kept++] = tp;
        else onnx__tensor_proto__free_unpacked(tp, NULL);
    }
    gp->n_initializer = kept;
}

static vp_status write_model(const char *path, Onnx__ModelProto *mp, vp_error *err) {
    size_t size = onnx__model_proto__get_packed_size(mp);
    uint8_t *out = malloc(size ? size : 1);
    if (!out) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    onnx__model_proto__pack(mp, out);
    vp_atomic_file af;
    vp_status s = vp_atomic_file_open(&af, path, err);
    if (!s) {
        fwrite(out, 1, size, af.f);
        s = vp_atomic_file_commit(&af, err);
    }
    free(out);
    return s;
}

static vp_status check_opset(const Onnx__ModelProto *mp, const char *path, vp_error *err) {
    for (size_t i = 0; i < mp->n_opset_import; i++) {
        const char *d = mp->opset_import[i]->domain;
        if ((!d || !d[0] || !strcmp(d, "ai.onnx")) && mp->opset_import[i]->version >= 13) return VP_OK;
    }
    return vp_fail(err, VP_ERR_UNSUPPORTED, "%s: --qdq needs opset 13 or later (per-axis QuantizeLinear); re-export the model",
                   path);
}

vp_status vp_onnx_qdq_rewrite(const char *path, const vp_qdq_point *pts, int n, vp_qdq_counts *counts, vp_error *err) {
    memset(counts, 0, sizeof *counts);
    uint8_t *buf;
    size_t len;
    vp_status s = vp_read_file(path, &buf, &len, err);
    if (s) return s;
    rw w = {onnx__model_proto__unpack(NULL, len, buf), NULL, 0, 0, 0};
    free(buf);
    if (!w.mp || !w.mp->graph) {
        if (w.mp) onnx__model_proto__free_unpacked(w.mp, NULL);
        return vp_fail(err, VP_ERR_PARSE, "%s: not an ONNX model", path);
    }
    s = check_opset(w.mp, path, err);
    Onnx__GraphProto *gp = w.mp->graph;
    names *nm = calloc((size_t)n + 1, sizeof *nm);
    if (!s && !nm) s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
    for (int i = 0; !s && i < n; i++)
        if (!names_init(&nm[i], pts[i].value)) s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
    /* weights and graph-input activations first, then each activation after its producer */
    for (int i = 0; !s && i < n; i++) {
        add_params(&w, &pts[i], &nm[i]);
        int produced = 0;
        for (size_t j = 0; j < gp->n_node && !produced; j++)
            for (size_t k = 0; k < gp->node[j]->n_output; k++) produced |= !strcmp(gp->node[j]->output[k], pts[i].value);
        if (pts[i].weight) {
            add_weight(&w, &pts[i], &nm[i]);
            push_node(&w, qdq_node("DequantizeLinear", nm[i].q, nm[i].scale, nm[i].zp, nm[i].dq, pts[i].axis));
            counts->weights++;
        } else if (!produced) {
            push_node(&w, qdq_node("QuantizeLinear", pts[i].value, nm[i].scale, nm[i].zp, nm[i].q, pts[i].axis));
            push_node(&w, qdq_node("DequantizeLinear", nm[i].q, nm[i].scale, nm[i].zp, nm[i].dq, pts[i].axis));
            counts->activations++;
        }
    }
    for (size_t j = 0; !s && j < gp->n_node; j++) {
        Onnx__NodeProto *np = gp->node[j];
        for (size_t k = 0; k < np->n_input; k++) {
            const vp_qdq_point *p = point_of(pts, n, np->input[k]);
            if (!p || !rewire(gp, j, p)) continue;
            char *dq = cat(p->value, "_dequantized");
            if (!dq) w.oom = 1;
            else free(np->input[k]), np->input[k] = dq, counts->rewired++;
        }
        int unit = !strcmp(np->op_type, "Conv") || !strcmp(np->op_type, "Gemm");
        const vp_qdq_point *pa = NULL, *pw = NULL;
        if (unit && np->n_input >= 3 && np->input[2][0]) {
            for (int i = 0; i < n; i++) {
                pa = !strcmp(np->input[0], nm[i].dq) ? &pts[i] : pa;
                pw = !strcmp(np->input[1], nm[i].dq) && pts[i].weight ? &pts[i] : pw;
            }
            if (pa && pw) quantise_bias(&w, np, pa, pw, counts);
        }
        push_node(&w, np);
        for (size_t o = 0; o < np->n_output; o++) {
            const vp_qdq_point *p = point_of(pts, n, np->output[o]);
            if (!p || p->weight) continue;
            const names *pn = &nm[p - pts];
            push_node(&w, qdq_node("QuantizeLinear", p->value, pn->scale, pn->zp, pn->q, p->axis));
            push_node(&w, qdq_node("DequantizeLinear", pn->q, pn->scale, pn->zp, pn->dq, p->axis));
            counts->activations++;
        }
    }
    if (!s && w.oom) s = vp_fail(err, VP_ERR_NOMEM, "out of memory writing the QDQ model");
    if (!s) {
        free(gp->node);
        gp->node = w.nodes;
        gp->n_node = w.n_nodes;
        w.nodes = NULL;
        drop_unread(gp);
        s = write_model(path, w.mp, err);
    } else {
        /* nodes of the original graph are in both arrays: free only those we made */
        for (size_t i = 0; i < w.n_nodes; i++) {
            int ours = 1;
            for (size_t j = 0; j < gp->n_node && ours; j++) ours = w.nodes[i] != gp->node[j];
            if (ours) onnx__node_proto__free_unpacked(w.nodes[i], NULL);
        }
        free(w.nodes);
    }
    for (int i = 0; nm && i < n; i++) names_free(&nm[i]);
    free(nm);
    onnx__model_proto__free_unpacked(w.mp, NULL);
    return s;
}
