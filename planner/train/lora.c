/* LoRA adapters beside the matching product weights (train/lora.h says what and why).
 * Each adapted product gains four nodes right after it, in its phase:
 *     H = X op(A);  U = H op(B);  S = U * scale;  Y = Y0 + S
 * (op a convolution for a Conv: A with the Conv's own kernel and attributes, B 1x1)
 * where Y0 is the product's output renamed and Y the value its readers already read. */
#include "train/lora.h"

#include <errno.h>
#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/graph_build.h"
#include "ir/vp_regex.h"
#include "onnx/onnx_load.h"
#include "parallel/parallel.h"

vp_status vp_lora_parse(const char *arg, vp_lora_opts *out, vp_error *err) {
    memset(out, 0, sizeof *out);
    const char *colon = strchr(arg, ':');
    char head[64];
    size_t n = colon ? (size_t)(colon - arg) : strlen(arg);
    if (n >= sizeof head) n = sizeof head - 1;
    memcpy(head, arg, n);
    head[n] = 0;
    char *end;
    errno = 0;
    long r = strncmp(head, "r=", 2) ? -1 : strtol(head + 2, &end, 10);
    if (r < 1 || r > 65536 || errno) return vp_fail(err, VP_ERR_USAGE, "--lora expects r=RANK[,alpha=X][:REGEX] with RANK in 1..65536, got '%s'", arg);
    out->rank = (int)r;
    if (*end == ',') {
        if (strncmp(end, ",alpha=", 7)) return vp_fail(err, VP_ERR_USAGE, "--lora '%s': after the rank only ',alpha=X' may come", arg);
        out->alpha = strtod(end + 7, &end);
        if (!(out->alpha > 0) || !isfinite(out->alpha))
            return vp_fail(err, VP_ERR_USAGE, "--lora '%s': alpha must be a positive number", arg);
    }
    if (*end) return vp_fail(err, VP_ERR_USAGE, "--lora expects r=RANK[,alpha=X][:REGEX], got '%s'", arg);
    if (colon && colon[1]) out->regex = colon + 1;
    return VP_OK;
}

/* splitmix64: a small generator whose stream is fixed by its seed. */
static uint64_t next_u64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t name_seed(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* How product n reads its weight (input 1): LAYOUT_NONE when it is no product we adapt. */
enum { LAYOUT_NONE = -1, LAYOUT_IN_OUT = 0, LAYOUT_OUT_IN = 1, LAYOUT_CONV = 2 };

static int product_layout(const vp_graph *g, const vp_node *n) {
    if (n->folded || n->n_inputs < 2 || n->n_outputs < 1 || n->outputs[0] < 0 || n->inputs[0] < 0 || n->inputs[1] < 0)
        return LAYOUT_NONE;
    int rank = g->values[n->inputs[1]].rank;
    if (!strcmp(n->domain, "") && !strcmp(n->op_type, "Conv")) /* grouped: the factorisation would mix groups */
        return rank >= 3 && vp_attr_int(n, "group", 1) == 1 ? LAYOUT_CONV : LAYOUT_NONE;
    if (rank != 2) return LAYOUT_NONE;
    if (!strcmp(n->domain, "") && !strcmp(n->op_type, "MatMul")) return LAYOUT_IN_OUT;
    if (!strcmp(n->domain, "") && !strcmp(n->op_type, "Gemm")) {
        if (vp_attr_int(n, "transA", 0) || vp_attr_float(n, "alpha", 1.0f) != 1.0f) return LAYOUT_NONE;
        return vp_attr_int(n, "transB", 0) ? LAYOUT_OUT_IN : LAYOUT_IN_OUT;
    }
    if (!strcmp(n->domain, "com.microsoft") && !strcmp(n->op_type, "FusedMatMul")) {
        if (vp_attr_int(n, "transA", 0) || vp_attr_float(n, "alpha", 1.0f) != 1.0f || vp_attr_int(n, "transBatchA", 0) ||
            vp_attr_int(n, "transBatchB", 0))
            return LAYOUT_NONE;
        return vp_attr_int(n, "transB", 0) ? LAYOUT_OUT_IN : LAYOUT_IN_OUT;
    }
    return LAYOUT_NONE;
}

static int new_initializer(vp_graph *g, const char *name, int rank, const int64_t *dims, float *data) {
    int id = vp_graph_add_value(g, name);
    if (id < 0) return -1;
    vp_value *v = &g->values[id];
    v->dtype = VP_F32;
    v->rank = rank;
    memcpy(v->dims, dims, (size_t)rank * sizeof *dims);
    v->flags |= VP_VAL_INITIALIZER;
    vp_value_set_data(g, id, data, VP_DATA_HEAP);
    return id;
}

static int64_t numel_of(int rank, const int64_t *dims) {
    int64_t n = 1;
    for (int d = 0; d < rank; d++) n *= dims[d];
    return n;
}

/* The adapter's start: from the loaded file when it has it (shape checked), else A uniform
 * in +-1/sqrt(in) and B zero. */
static vp_status init_values(const vp_graph *from, const char *name, int rank, const int64_t *dims, int is_a, int64_t in,
                             float *data, vp_error *err) {
    int64_t n = numel_of(rank, dims);
    if (from) {
        int v = vp_graph_find_value(from, name);
        if (v < 0) return vp_fail(err, VP_ERR_INVALID, "%s: no adapter named '%s'", from->path, name);
        const vp_value *val = &from->values[v];
        int same = val->dtype == VP_F32 && val->rank == rank && val->data;
        for (int d = 0; same && d < rank; d++) same = val->dims[d] == dims[d];
        if (!same) {
            char want[256];
            return vp_fail(err, VP_ERR_INVALID, "%s: adapter '%s' is not float32 %s (another rank or model?)", from->path, name,
                           vp_shape_str(rank, dims, want, sizeof want));
        }
        memcpy(data, val->data, (size_t)n * sizeof *data);
        return VP_OK;
    }
    if (!is_a) {
        memset(data, 0, (size_t)n * sizeof *data);
        return VP_OK;
    }
    uint64_t s = name_seed(name);
    double bound = 1.0 / sqrt((double)in);
    for (int64_t i = 0; i < n; i++) data[i] = (float)(bound * (2.0 * (double)(next_u64(&s) >> 11) * 0x1.0p-53 - 1.0));
    return VP_OK;
}

/* The adapters' shapes (in W's layout, so that merging is one product) and W's in and out.
 * Conv: W [O, C, k...]; A [r, C, k...] a convolution like W's (its kernel, strides,
 * pads, dilations) to r channels, B [O, r, 1...] a 1x1 convolution back: B*A is the
 * rank-r factorisation of W seen as the [O, C k...] matrix of im2col, in C k... and
 * out O, merged W + scale B A with A and B read flat. */
static void adapter_shapes(const vp_value *w, int layout, int64_t r, int64_t *a_dims, int64_t *b_dims, int64_t *in,
                           int64_t *out) {
    if (layout == LAYOUT_CONV) {
        *out = w->dims[0];
        *in = numel_of(w->rank, w->dims) / w->dims[0];
        memcpy(a_dims, w->dims, (size_t)w->rank * sizeof *a_dims);
        a_dims[0] = r;
        b_dims[0] = w->dims[0];
        b_dims[1] = r;
        for (int d = 2; d < w->rank; d++) b_dims[d] = 1;
        return;
    }
    int tr = layout == LAYOUT_OUT_IN;
    *in = w->dims[tr ? 1 : 0];
    *out = w->dims[tr ? 0 : 1];
    a_dims[0] = tr ? r : *in, a_dims[1] = tr ? *in : r;
    b_dims[0] = tr ? *out : r, b_dims[1] = tr ? r : *out;
}

/* One adapter product: reads `from` and weight `w` as the base product p does (conv: A
 * with p's attributes, B 1x1 with none); its output's id in *y. */
static vp_status adapter_node(vp_graph *g, int p, int layout, int is_a, const char *name, int from, int w, int *y, vp_error *err) {
    const char *op = layout == LAYOUT_CONV ? "Conv" : layout == LAYOUT_OUT_IN ? "FusedMatMul" : "MatMul";
    const char *dom = layout == LAYOUT_OUT_IN ? "com.microsoft" : "";
    int id = vp_build_node(g, op, dom, name, 2, (int[]){from, w}, 1, g->nodes[p].phase, 0);
    if (id >= 0 && layout == LAYOUT_OUT_IN && vp_node_add_attr_int(g, id, "transB", 1)) id = -1;
    if (id >= 0 && layout == LAYOUT_CONV && is_a && vp_node_copy_attrs(g, id, p)) id = -1;
    if (id < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory adding LoRA adapters");
    return vp_build_finish(g, id, y, err);
}

/* Builds the four adapter nodes after product p (appended; the caller orders them). */
static vp_status adapt(vp_graph *g, int p, int layout, const vp_lora_opts *o, double scale, const vp_graph *from,
                       vp_lora_adapter *ad, vp_error *err) {
    int w = g->nodes[p].inputs[1], x = g->nodes[p].inputs[0], y = g->nodes[p].outputs[0];
    int rank = g->values[w].rank;
    int64_t a_dims[VP_MAX_RANK], b_dims[VP_MAX_RANK], in, out;
    adapter_shapes(&g->values[w], layout, o->rank, a_dims, b_dims, &in, &out);
    char name[600], pname[520];
    snprintf(pname, sizeof pname, "%s", g->nodes[p].name);
    float *adata = malloc((size_t)numel_of(rank, a_dims) * sizeof *adata), *bdata = malloc((size_t)numel_of(rank, b_dims) * sizeof *bdata);
    if (!adata || !bdata) {
        free(adata);
        free(bdata);
        return vp_fail(err, VP_ERR_NOMEM, "out of memory adding LoRA adapters");
    }
    snprintf(name, sizeof name, "%s.lora_A", g->values[w].name);
    vp_status s = init_values(from, name, rank, a_dims, 1, in, adata, err);
    int a = s ? -1 : new_initializer(g, name, rank, a_dims, adata);
    snprintf(name, sizeof name, "%s.lora_B", g->values[w].name);
    if (!s) s = init_values(from, name, rank, b_dims, 0, in, bdata, err);
    int b = s ? -1 : new_initializer(g, name, rank, b_dims, bdata);
    if (a < 0) free(adata);
    if (b < 0) free(bdata);
    if (s) return s;
    if (a < 0 || b < 0) return vp_fail(err, VP_ERR_INVALID, "%s: cannot add adapters for '%s' (name taken?)", g->path, g->values[w].name);
    *ad = (vp_lora_adapter){w, a, b, layout != LAYOUT_IN_OUT, in, out};
    vp_phase ph = g->nodes[p].phase;
    int ids[2], v[2];
    float sc = (float)scale;
    int64_t none[1] = {0};
    int k = vp_build_const(g, "lora_scale", VP_F32, 0, none, &sc);
    if (k < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory adding LoRA adapters");
    snprintf(name, sizeof name, "%s/lora_A", pname);
    if ((s = adapter_node(g, p, layout, 1, name, x, a, v, err))) return s;
    snprintf(name, sizeof name, "%s/lora_B", pname);
    if ((s = adapter_node(g, p, layout, 0, name, v[0], b, v, err))) return s;
    snprintf(name, sizeof name, "%s/lora_scale", pname);
    ids[0] = vp_build_node(g, "Mul", "", name, 2, (int[]){v[0], k}, 1, ph, 0);
    if (ids[0] < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory adding LoRA adapters");
    if ((s = vp_build_finish(g, ids[0], v, err))) return s;
    snprintf(name, sizeof name, "%s/lora_add", pname);
    ids[1] = vp_build_node(g, "Add", "", name, 2, (int[]){y, v[0]}, 1, ph, 0);
    if (ids[1] < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory adding LoRA adapters");
    if ((s = vp_build_finish(g, ids[1], v, err))) return s;
    /* the product now writes the new value and the sum takes Y's id: readers, graph
     * outputs and the loss's name stay as they were */
    g->nodes[p].outputs[0] = v[0];
    g->nodes[ids[1]].inputs[0] = v[0];
    g->nodes[ids[1]].outputs[0] = y;
    return VP_OK;
}

vp_status vp_lora_apply(vp_graph *g, const vp_lora_opts *o, vp_lora_result *r, vp_error *err) {
    memset(r, 0, sizeof *r);
    if (o->rank <= 0) return VP_OK;
    r->scale = (o->alpha > 0 ? o->alpha : o->rank) / (double)o->rank;
    regex_t re;
    if (o->regex) {
        vp_status rs = vp_regex_compile(&re, o->regex, "--lora regex", err);
        if (rs) return rs;
    }
    vp_graph *from = NULL;
    vp_status s = o->load ? vp_onnx_load(o->load, &from, err) : VP_OK;
    if (!s) s = vp_graph_link(g, err);
    int n0 = g->n_nodes, nv0 = g->n_values;
    int *order = malloc(((size_t)n0 * 5 + 1) * sizeof *order), n = 0;
    int *done = calloc((size_t)nv0 + 1, sizeof *done); /* a weight shared by products gets one pair */
    r->adapters = malloc(((size_t)n0 + 1) * sizeof *r->adapters);
    if (!s && (!order || !done || !r->adapters)) s = vp_fail(err, VP_ERR_NOMEM, "out of memory adding LoRA adapters");
    for (int i = 0; i < n0 && !s; i++) {
        order[n++] = i;
        int layout = product_layout(g, &g->nodes[i]);
        if (layout == LAYOUT_NONE) continue;
        int w = g->nodes[i].inputs[1];
        const vp_value *wv = &g->values[w];
        if (!(wv->flags & VP_VAL_INITIALIZER) || (wv->flags & VP_VAL_CONST) || wv->dtype != VP_F32 || w >= nv0 || done[w])
            continue;
        if (o->regex && regexec(&re, wv->name, 0, NULL, 0)) continue;
        done[w] = 1;
        int first = g->n_nodes;
        s = adapt(g, i, layout, o, r->scale, from, &r->adapters[r->n], err);
        if (s) break;
        for (int k = first; k < g->n_nodes; k++) order[n++] = k;
        const vp_lora_adapter *ad = &r->adapters[r->n++];
        r->params += (int64_t)o->rank * (ad->in + ad->out);
    }
    if (!s && !r->n)
        s = vp_fail(err, VP_ERR_INVALID, "%s: --lora%s%s matches no float32 weight of a MatMul, FusedMatMul, Gemm or ungrouped Conv", g->path,
                    o->regex ? " " : "", o->regex ? o->regex : "");
    if (!s) s = vp_graph_keep_nodes(g, order, n, err);
    if (o->regex) regfree(&re);
    free(order);
    free(done);
    vp_graph_free(from);
    return s;
}

/* The node that reads w as its weight (input 1), else any reader. */
static const vp_node *reader_of(const vp_graph *g, int w) {
    const vp_node *any = NULL;
    for (int i = 0; i < g->n_nodes; i++) {
        const vp_node *n = &g->nodes[i];
        if (n->n_inputs > 1 && n->inputs[1] == w) return n;
        for (int k = 0; k < n->n_inputs && !any; k++)
            if (n->inputs[k] == w) any = n;
    }
    return any;
}

/* The axis of an adapter along r: A [r, in] or a Conv's [r, C, k...] and B [r, out] hold
 * it first, A [in, r] and B [out, r] second. */
static int r_axis(const vp_lora_adapter *ad, int is_a) {
    return is_a ? !ad->transposed : ad->transposed;
}

static const vp_tp_sliced *slice_of(const vp_tp_result *tp, int value) {
    for (int j = 0; j < tp->n_sliced; j++)
        if (tp->sliced[j].value == value) return &tp->sliced[j];
    return NULL;
}

vp_status vp_lora_check_split(const vp_graph *g, const vp_lora_result *r, const vp_tp_result *tp, vp_error *err) {
    for (int i = 0; i < r->n; i++) {
        const vp_lora_adapter *ad = &r->adapters[i];
        const vp_tp_sliced *w = slice_of(tp, ad->weight), *a = slice_of(tp, ad->a), *b = slice_of(tp, ad->b);
        /* the pair split as a region of its own (A by columns, B by rows, an all-reduce
         * after B): each rank holds r/n of the rank, which is LoRA of rank r/n a rank,
         * summed: exact, as any column/row pair */
        int pair = a && b && a->axis == r_axis(ad, 1) && b->axis == r_axis(ad, 0) && a->blocks == 1 && b->blocks == 1;
        if (!w && (pair || (!a && !b))) continue;
        int bad = w ? ad->weight : a ? ad->a : ad->b;
        const vp_tp_sliced *sl = w ? w : a ? a : b;
        const vp_node *n = reader_of(g, bad);
        const char *what = w ? "its weight" : "one adapter of the pair but not the other along the rank:";
        if (!n)
            return vp_fail(err, VP_ERR_UNSUPPORTED, "--lora with --tp %d: tensor parallelism splits %s '%s', which LoRA does not follow",
                           tp->n, what, g->values[bad].name);
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n,
                            "--lora with --tp %d: tensor parallelism splits %s '%s' (axis %d), and the adapters of a split "
                            "weight are not split with it; leave the weight out of --lora's regex or plan without --tp",
                            tp->n, what, g->values[bad].name, sl->axis);
    }
    return VP_OK;
}

int vp_lora_is_adapter(const vp_lora_result *r, int value) {
    for (int i = 0; i < r->n; i++)
        if (r->adapters[i].a == value || r->adapters[i].b == value) return 1;
    return 0;
}

void vp_lora_result_free(vp_lora_result *r) {
    free(r->adapters);
    memset(r, 0, sizeof *r);
}

void vp_lora_merge(const vp_lora_adapter *ad, int rank, double scale, const float *w, const float *a, const float *b,
                   float *merged) {
    /* transposed: W [out, in] += s B[out, r] A[r, in]; else W [in, out] += s A[in, r] B[r, out] */
    int64_t rows = ad->transposed ? ad->out : ad->in, cols = ad->transposed ? ad->in : ad->out;
    const float *left = ad->transposed ? b : a, *right = ad->transposed ? a : b;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) {
            double acc = 0;
            for (int k = 0; k < rank; k++) acc += (double)left[i * rank + k] * right[(int64_t)k * cols + j];
            merged[i * cols + j] = (float)((double)w[i * cols + j] + scale * acc);
        }
}
