/* Graph storage: values and nodes in growable arrays, names in a hash table; whole-graph
 * edits (clone, reorder, keep).  Node attributes are attr.c's. */
#include "ir/ir.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

size_t vp_dtype_size(vp_dtype t) {
    switch (t) {
    case VP_F32: case VP_I32: case VP_U32: return 4;
    case VP_U8: case VP_I8: case VP_BOOL: return 1;
    case VP_U16: case VP_I16: case VP_F16: case VP_BF16: return 2;
    case VP_I64: case VP_U64: case VP_F64: case VP_C64: return 8;
    case VP_C128: return 16;
    default: return 0;
    }
}

const char *vp_dtype_name(vp_dtype t) {
    static const char *names[] = {"undefined", "float32", "uint8", "int8", "uint16", "int16",
                                  "int32", "int64", "string", "bool", "float16", "float64",
                                  "uint32", "uint64", "complex64", "complex128", "bfloat16"};
    if ((int)t >= 0 && (size_t)t < sizeof names / sizeof names[0]) return names[t];
    return "unknown-dtype";
}

int vp_dtype_is_float(vp_dtype t) { return t == VP_F32 || t == VP_F64 || t == VP_F16 || t == VP_BF16; }

int vp_dtype_is_int(vp_dtype t) {
    return t == VP_U8 || t == VP_I8 || t == VP_U16 || t == VP_I16 || t == VP_I32 || t == VP_I64 ||
           t == VP_U32 || t == VP_U64;
}

int64_t vp_tensor_numel(const vp_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++) n *= t->dims[i];
    return n;
}

size_t vp_tensor_nbytes(const vp_tensor *t) { return (size_t)vp_tensor_numel(t) * vp_dtype_size(t->dtype); }

static char *dup_str(const char *s) {
    if (!s) s = "";
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

vp_graph *vp_graph_new(void) {
    vp_graph *g = calloc(1, sizeof *g);
    return g;
}

static void free_node(vp_node *n) {
    free(n->name);
    free(n->module);
    free(n->op_type);
    free(n->domain);
    free(n->inputs);
    free(n->outputs);
    for (int a = 0; a < n->n_attrs; a++) vp_attr_clear(&n->attrs[a]);
    free(n->attrs);
}

void vp_graph_free(vp_graph *g) {
    if (!g) return;
    for (int i = 0; i < g->n_values; i++) {
        vp_value *v = &g->values[i];
        free(v->name);
        for (int d = 0; d < VP_MAX_RANK; d++) free(v->dim_param[d]);
        if (v->data_owner == VP_DATA_HEAP) free(v->data);
        free(v->consumers);
    }
    for (int i = 0; i < g->n_nodes; i++) free_node(&g->nodes[i]);
    free(g->values);
    free(g->nodes);
    free(g->inputs);
    free(g->outputs);
    free(g->name_slots);
    if (g->proto && g->proto_free && !g->proto_borrowed) g->proto_free(g->proto);
    for (int i = 0; i < g->n_mappings; i++) {
        munmap(g->mappings[i].addr, g->mappings[i].len);
        free(g->mappings[i].path);
    }
    free(g->mappings);
    free(g->path);
    free(g->graph_name);
    free(g->producer);
    free(g);
}

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static int name_table_insert(int *slots, int n_slots, const vp_value *values, int id) {
    uint64_t h = hash_str(values[id].name);
    for (int probe = 0; probe < n_slots; probe++) {
        int s = (int)((h + (uint64_t)probe) & (uint64_t)(n_slots - 1));
        if (slots[s] < 0) {
            slots[s] = id;
            return 1;
        }
    }
    return 0;
}

static int grow_name_table(vp_graph *g) {
    int n = g->n_name_slots ? g->n_name_slots * 2 : 64;
    int *slots = malloc((size_t)n * sizeof *slots);
    if (!slots) return 0;
    for (int i = 0; i < n; i++) slots[i] = -1;
    for (int i = 0; i < g->n_values; i++) name_table_insert(slots, n, g->values, i);
    free(g->name_slots);
    g->name_slots = slots;
    g->n_name_slots = n;
    return 1;
}

int vp_graph_find_value(const vp_graph *g, const char *name) {
    if (!g->n_name_slots || !name) return -1;
    uint64_t h = hash_str(name);
    for (int probe = 0; probe < g->n_name_slots; probe++) {
        int s = (int)((h + (uint64_t)probe) & (uint64_t)(g->n_name_slots - 1));
        int id = g->name_slots[s];
        if (id < 0) return -1;
        if (strcmp(g->values[id].name, name) == 0) return id;
    }
    return -1;
}

int vp_graph_add_value(vp_graph *g, const char *name) {
    if (vp_graph_find_value(g, name) >= 0) return -1;
    if (g->n_values == g->cap_values) {
        int cap = g->cap_values ? g->cap_values * 2 : 64;
        vp_value *v = realloc(g->values, (size_t)cap * sizeof *v);
        if (!v) return -1;
        g->values = v;
        g->cap_values = cap;
    }
    /* keep the table at most half full so probes stay short */
    if ((g->n_values + 1) * 2 > g->n_name_slots && !grow_name_table(g)) return -1;
    int id = g->n_values;
    vp_value *v = &g->values[id];
    memset(v, 0, sizeof *v);
    v->name = dup_str(name);
    if (!v->name) return -1;
    v->rank = -1;
    v->producer = -1;
    g->n_values++;
    name_table_insert(g->name_slots, g->n_name_slots, g->values, id);
    return id;
}

int vp_graph_add_unique_value(vp_graph *g, const char *stem) {
    if (vp_graph_find_value(g, stem) < 0) return vp_graph_add_value(g, stem);
    /* one counter for the graph keeps this O(1) when thousands share a stem */
    char buf[512];
    for (;;) {
        snprintf(buf, sizeof buf, "%s_%d", stem, ++g->unique_counter);
        if (vp_graph_find_value(g, buf) < 0) return vp_graph_add_value(g, buf);
    }
}

int vp_graph_add_node(vp_graph *g, const char *op_type, const char *domain, const char *name,
                      int n_inputs, const int *inputs, int n_outputs, const int *outputs) {
    if (g->n_nodes == g->cap_nodes) {
        int cap = g->cap_nodes ? g->cap_nodes * 2 : 64;
        vp_node *nn = realloc(g->nodes, (size_t)cap * sizeof *nn);
        if (!nn) return -1;
        g->nodes = nn;
        g->cap_nodes = cap;
    }
    vp_node *n = &g->nodes[g->n_nodes];
    memset(n, 0, sizeof *n);
    n->op_type = dup_str(op_type);
    n->domain = dup_str(domain);
    n->name = dup_str(name);
    n->inputs = malloc((size_t)(n_inputs ? n_inputs : 1) * sizeof(int));
    n->outputs = malloc((size_t)(n_outputs ? n_outputs : 1) * sizeof(int));
    if (!n->op_type || !n->domain || !n->name || !n->inputs || !n->outputs) {
        free(n->op_type); free(n->domain); free(n->name); free(n->inputs); free(n->outputs);
        return -1;
    }
    if (n_inputs) memcpy(n->inputs, inputs, (size_t)n_inputs * sizeof(int));
    if (n_outputs) memcpy(n->outputs, outputs, (size_t)n_outputs * sizeof(int));
    n->n_inputs = n_inputs;
    n->n_outputs = n_outputs;
    n->opset = strcmp(n->domain, "com.microsoft") == 0 ? g->opset_ms : g->opset_onnx;
    return g->n_nodes++;
}

vp_status vp_graph_link(vp_graph *g, vp_error *err) {
    for (int i = 0; i < g->n_values; i++) {
        g->values[i].producer = -1;
        g->values[i].n_consumers = 0;
        free(g->values[i].consumers);
        g->values[i].consumers = NULL;
    }
    int *counts = calloc((size_t)g->n_values + 1, sizeof *counts);
    if (!counts) return vp_fail(err, VP_ERR_NOMEM, "out of memory linking graph");
    for (int i = 0; i < g->n_nodes; i++) {
        vp_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] >= 0) counts[n->inputs[k]]++;
        for (int k = 0; k < n->n_outputs; k++)
            if (n->outputs[k] >= 0) g->values[n->outputs[k]].producer = i;
    }
    for (int v = 0; v < g->n_values; v++) {
        if (!counts[v]) continue;
        g->values[v].consumers = malloc((size_t)counts[v] * sizeof(int));
        if (!g->values[v].consumers) {
            free(counts);
            return vp_fail(err, VP_ERR_NOMEM, "out of memory linking graph");
        }
    }
    for (int i = 0; i < g->n_nodes; i++) {
        vp_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_inputs; k++) {
            int v = n->inputs[k];
            if (v >= 0) g->values[v].consumers[g->values[v].n_consumers++] = i;
        }
    }
    free(counts);
    return VP_OK;
}

void vp_value_set_data(vp_graph *g, int id, void *data, vp_data_owner owner) {
    vp_value *v = &g->values[id];
    if (v->data_owner == VP_DATA_HEAP && v->data != data) free(v->data);
    v->data = data;
    v->data_owner = data ? owner : VP_DATA_NONE;
}

vp_tensor vp_value_tensor(const vp_value *v) {
    vp_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = v->dtype;
    t.rank = v->rank < 0 ? 0 : v->rank;
    memcpy(t.dims, v->dims, sizeof t.dims);
    t.data = v->data;
    return t;
}

int64_t vp_value_numel(const vp_value *v) {
    int64_t n = 1;
    for (int i = 0; i < v->rank; i++) n *= v->dims[i];
    return n;
}

int vp_value_known(const vp_value *v) { return v->dtype != VP_UNDEFINED && v->rank >= 0; }

vp_status vp_node_fail(vp_error *err, vp_status code, const vp_node *n, const char *fmt, ...) {
    if (err) {
        char body[900];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(body, sizeof body, fmt, ap);
        va_end(ap);
        snprintf(err->msg, sizeof err->msg, "node '%s' (%s%s%s): %s", n->name, n->domain,
                 n->domain[0] ? "." : "", n->op_type, body);
    }
    return code;
}

const char *vp_shape_str(int rank, const int64_t *dims, char *buf, size_t len) {
    size_t used = 0;
    if (rank < 0) {
        snprintf(buf, len, "?");
        return buf;
    }
    used += (size_t)snprintf(buf + used, len - used, "[");
    for (int i = 0; i < rank && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%lld", i ? ", " : "", (long long)dims[i]);
    if (used < len) snprintf(buf + used, len - used, "]");
    return buf;
}

static char *dup_or_null(const char *s) { return s ? dup_str(s) : NULL; }

vp_graph *vp_graph_clone(const vp_graph *g) {
    vp_graph *c = vp_graph_new();
    if (!c) return NULL;
    c->path = dup_or_null(g->path);
    c->graph_name = dup_or_null(g->graph_name);
    c->producer = dup_or_null(g->producer);
    c->ir_version = g->ir_version;
    c->opset_onnx = g->opset_onnx;
    c->opset_ms = g->opset_ms;
    c->unique_counter = g->unique_counter;
    /* the model's metadata (torch's graph signature) reads the same through a copy */
    c->proto = g->proto;
    c->proto_free = g->proto_free;
    c->proto_borrowed = g->proto != NULL;
    /* the values keep their ids, so g's name table is the copy's as it stands (not
     * rebuilt name by name: checkpointing clones the step for every candidate) */
    int ok = 1;
    c->values = malloc(((size_t)g->n_values + 1) * sizeof *c->values);
    c->name_slots = g->n_name_slots ? malloc((size_t)g->n_name_slots * sizeof *c->name_slots) : NULL;
    if (!c->values || (g->n_name_slots && !c->name_slots)) ok = 0;
    else {
        c->cap_values = g->n_values + 1;
        c->n_name_slots = g->n_name_slots;
        if (g->n_name_slots) memcpy(c->name_slots, g->name_slots, (size_t)g->n_name_slots * sizeof *c->name_slots);
    }
    for (int v = 0; v < g->n_values && ok; v++) {
        int id = c->n_values;
        vp_value *dv = &c->values[id];
        memset(dv, 0, sizeof *dv);
        dv->producer = -1;
        if (!(dv->name = dup_str(g->values[v].name))) { ok = 0; break; }
        c->n_values++;
        const vp_value *sv = &g->values[v];
        dv->dtype = sv->dtype;
        dv->rank = sv->rank;
        memcpy(dv->dims, sv->dims, sizeof dv->dims);
        for (int d = 0; d < VP_MAX_RANK; d++)
            if (sv->dim_param[d] && !(dv->dim_param[d] = dup_str(sv->dim_param[d]))) ok = 0;
        dv->flags = sv->flags;
        dv->data = sv->data;
        dv->data_owner = sv->data ? VP_DATA_BORROWED : VP_DATA_NONE;
    }
    for (int i = 0; i < g->n_nodes && ok; i++) {
        const vp_node *n = &g->nodes[i];
        int id = vp_graph_add_node(c, n->op_type, n->domain, n->name, n->n_inputs, n->inputs, n->n_outputs, n->outputs);
        if (id < 0) { ok = 0; break; }
        vp_node *d = &c->nodes[id];
        d->opset = n->opset;
        d->op = n->op;
        d->folded = n->folded;
        d->phase = n->phase;
        d->precision = n->precision;
        d->rank_id = n->rank_id;
        d->embedding = n->embedding;
        if (n->module && !(d->module = dup_str(n->module))) { ok = 0; break; }
        if (n->n_attrs) {
            d->attrs = calloc((size_t)n->n_attrs, sizeof *d->attrs);
            if (!d->attrs) { ok = 0; break; }
            for (int a = 0; a < n->n_attrs && ok; a++) {
                ok = vp_attr_copy(&d->attrs[a], &n->attrs[a]);
                d->n_attrs = a + 1;
            }
        }
    }
    c->inputs = malloc(((size_t)g->n_inputs + 1) * sizeof(int));
    c->outputs = malloc(((size_t)g->n_outputs + 1) * sizeof(int));
    if (!ok || !c->inputs || !c->outputs) {
        vp_graph_free(c);
        return NULL;
    }
    memcpy(c->inputs, g->inputs, (size_t)g->n_inputs * sizeof(int));
    memcpy(c->outputs, g->outputs, (size_t)g->n_outputs * sizeof(int));
    c->n_inputs = g->n_inputs;
    c->n_outputs = g->n_outputs;
    if (vp_graph_link(c, NULL)) {
        vp_graph_free(c);
        return NULL;
    }
    return c;
}

vp_status vp_graph_reorder(vp_graph *g, const int *order, vp_error *err) {
    vp_node *nn = malloc(((size_t)g->n_nodes + 1) * sizeof *nn);
    char *seen = calloc((size_t)g->n_nodes + 1, 1);
    if (!nn || !seen) {
        free(nn);
        free(seen);
        return vp_fail(err, VP_ERR_NOMEM, "out of memory reordering nodes");
    }
    for (int i = 0; i < g->n_nodes; i++) {
        if (order[i] < 0 || order[i] >= g->n_nodes || seen[order[i]]) {
            free(nn);
            free(seen);
            return vp_fail(err, VP_ERR_RUNTIME, "internal: node order is not a permutation");
        }
        seen[order[i]] = 1;
        nn[i] = g->nodes[order[i]];
    }
    free(seen);
    memcpy(g->nodes, nn, (size_t)g->n_nodes * sizeof *nn);
    free(nn);
    return vp_graph_link(g, err);
}

vp_status vp_graph_keep_nodes(vp_graph *g, const int *keep, int n, vp_error *err) {
    vp_node *nn = malloc(((size_t)g->n_nodes + 1) * sizeof *nn);
    char *kept = calloc((size_t)g->n_nodes + 1, 1);
    if (!nn || !kept) {
        free(nn);
        free(kept);
        return vp_fail(err, VP_ERR_NOMEM, "out of memory removing nodes");
    }
    for (int i = 0; i < n; i++) {
        if (keep[i] < 0 || keep[i] >= g->n_nodes || kept[keep[i]]) {
            free(nn);
            free(kept);
            return vp_fail(err, VP_ERR_RUNTIME, "internal: nodes kept are not distinct node ids");
        }
        kept[keep[i]] = 1;
        nn[i] = g->nodes[keep[i]];
    }
    for (int i = 0; i < g->n_nodes; i++)
        if (!kept[i]) free_node(&g->nodes[i]);
    free(kept);
    if (n) memcpy(g->nodes, nn, (size_t)n * sizeof *nn);
    free(nn);
    g->n_nodes = n;
    return vp_graph_link(g, err);
}
