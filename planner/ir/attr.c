/* Node attributes: typed lookups with defaults (what shape functions and kernels read),
 * additions (what passes that build nodes write), copies and frees.  An attribute owns
 * every array, string, tensor and subgraph it points at; a copy is deep, so a cloned
 * graph and its original share nothing. */
#include "ir/ir.h"

#include <stdlib.h>
#include <string.h>

static char *dup_str(const char *s) { return strdup(s ? s : ""); }
static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

void vp_attr_clear(vp_attr *a) {
    free(a->name);
    free(a->s);
    free(a->floats);
    free(a->ints);
    for (int i = 0; a->strings && i < a->n; i++) free(a->strings[i]);
    free(a->strings);
    if (a->t) {
        free(a->t->data);
        free(a->t);
    }
    vp_graph_free(a->graph);
}

const vp_attr *vp_node_attr(const vp_node *n, const char *name) {
    for (int i = 0; i < n->n_attrs; i++)
        if (strcmp(n->attrs[i].name, name) == 0) return &n->attrs[i];
    return NULL;
}

int64_t vp_attr_int(const vp_node *n, const char *name, int64_t dflt) {
    const vp_attr *a = vp_node_attr(n, name);
    return a && a->type == VP_ATTR_INT ? a->i : dflt;
}

float vp_attr_float(const vp_node *n, const char *name, float dflt) {
    const vp_attr *a = vp_node_attr(n, name);
    if (a && a->type == VP_ATTR_FLOAT) return a->f;
    if (a && a->type == VP_ATTR_INT) return (float)a->i;
    return dflt;
}

const char *vp_attr_string(const vp_node *n, const char *name, const char *dflt) {
    const vp_attr *a = vp_node_attr(n, name);
    return a && a->type == VP_ATTR_STRING ? a->s : dflt;
}

int vp_attr_ints(const vp_node *n, const char *name, const int64_t **out) {
    const vp_attr *a = vp_node_attr(n, name);
    if (!a || a->type != VP_ATTR_INTS) return -1;
    *out = a->ints;
    return a->n;
}

vp_status vp_attr_ints_checked(const vp_node *n, const char *name, int want, int64_t dflt, int64_t min, int64_t *out,
                               int *given, vp_error *err) {
    const int64_t *v;
    int count = vp_attr_ints(n, name, &v);
    if (given) *given = count >= 0;
    for (int i = 0; i < want; i++) out[i] = count < 0 ? dflt : 0;
    if (count < 0) return VP_OK;
    if (count != want)
        return vp_node_fail(err, VP_ERR_INVALID, n, "attribute %s has %d values, expected %d", name, count, want);
    for (int i = 0; i < want; i++) {
        if (v[i] < min)
            return vp_node_fail(err, VP_ERR_INVALID, n, "attribute %s[%d] = %lld, must be at least %lld", name, i,
                                (long long)v[i], (long long)min);
        out[i] = v[i];
    }
    return VP_OK;
}

int vp_node_cast_output(const vp_node *n, int k, vp_dtype *from, vp_dtype *to) {
    const int64_t *t;
    int m = n->n_attrs ? vp_attr_ints(n, VP_CAST_ATTR, &t) : -1;
    for (int i = 0; i + 3 <= m; i += 3)
        if (t[i] == k) {
            if (from) *from = (vp_dtype)t[i + 1];
            if (to) *to = (vp_dtype)t[i + 2];
            return 1;
        }
    return 0;
}

int vp_attr_floats(const vp_node *n, const char *name, const float **out) {
    const vp_attr *a = vp_node_attr(n, name);
    if (!a || a->type != VP_ATTR_FLOATS) return -1;
    *out = a->floats;
    return a->n;
}

static vp_attr *add_attr(vp_graph *g, int node, const char *name, vp_attr_type type) {
    vp_node *n = &g->nodes[node];
    vp_attr *a = realloc(n->attrs, (size_t)(n->n_attrs + 1) * sizeof *a);
    if (!a) return NULL;
    n->attrs = a;
    a = &n->attrs[n->n_attrs];
    memset(a, 0, sizeof *a);
    a->name = dup_str(name);
    if (!a->name) return NULL;
    a->type = type;
    n->n_attrs++;
    return a;
}

vp_status vp_node_add_attr_int(vp_graph *g, int node, const char *name, int64_t v) {
    vp_attr *a = add_attr(g, node, name, VP_ATTR_INT);
    if (!a) return VP_ERR_NOMEM;
    a->i = v;
    return VP_OK;
}

vp_status vp_node_set_attr_int(vp_graph *g, int node, const char *name, int64_t v) {
    vp_node *n = &g->nodes[node];
    for (int i = 0; i < n->n_attrs; i++) {
        vp_attr *a = &n->attrs[i];
        if (strcmp(a->name, name)) continue;
        char *keep = a->name;
        a->name = NULL; /* the payload goes, the name stays */
        vp_attr_clear(a);
        memset(a, 0, sizeof *a);
        a->name = keep;
        a->type = VP_ATTR_INT;
        a->i = v;
        return VP_OK;
    }
    return vp_node_add_attr_int(g, node, name, v);
}

vp_status vp_node_add_attr_float(vp_graph *g, int node, const char *name, float v) {
    vp_attr *a = add_attr(g, node, name, VP_ATTR_FLOAT);
    if (!a) return VP_ERR_NOMEM;
    a->f = v;
    return VP_OK;
}

vp_status vp_node_add_attr_ints(vp_graph *g, int node, const char *name, const int64_t *v, int n) {
    vp_attr *a = add_attr(g, node, name, VP_ATTR_INTS);
    if (!a) return VP_ERR_NOMEM;
    a->ints = malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    if (!a->ints) return VP_ERR_NOMEM;
    if (n) memcpy(a->ints, v, (size_t)n * sizeof(int64_t));
    a->n = n;
    return VP_OK;
}

vp_status vp_node_add_attr_string(vp_graph *g, int node, const char *name, const char *s) {
    vp_attr *a = add_attr(g, node, name, VP_ATTR_STRING);
    if (!a) return VP_ERR_NOMEM;
    a->s = dup_str(s);
    return a->s ? VP_OK : VP_ERR_NOMEM;
}

int vp_attr_copy(vp_attr *dst, const vp_attr *src) {
    *dst = *src;
    dst->name = dup_str(src->name);
    dst->s = dup_or_null(src->s);
    dst->floats = NULL;
    dst->ints = NULL;
    dst->strings = NULL;
    dst->t = NULL;
    dst->graph = NULL;
    if (!dst->name || (src->s && !dst->s)) return 0;
    if (src->graph && !(dst->graph = vp_graph_clone(src->graph))) return 0;
    if (src->floats) {
        dst->floats = malloc((size_t)(src->n ? src->n : 1) * sizeof(float));
        if (!dst->floats) return 0;
        if (src->n) memcpy(dst->floats, src->floats, (size_t)src->n * sizeof(float));
    }
    if (src->ints) {
        dst->ints = malloc((size_t)(src->n ? src->n : 1) * sizeof(int64_t));
        if (!dst->ints) return 0;
        if (src->n) memcpy(dst->ints, src->ints, (size_t)src->n * sizeof(int64_t));
    }
    if (src->strings) {
        dst->strings = calloc((size_t)(src->n ? src->n : 1), sizeof(char *));
        if (!dst->strings) return 0;
        for (int i = 0; i < src->n; i++)
            if (!(dst->strings[i] = dup_str(src->strings[i]))) return 0;
    }
    if (src->t) {
        dst->t = malloc(sizeof *dst->t);
        if (!dst->t) return 0;
        *dst->t = *src->t;
        size_t n = vp_tensor_nbytes(src->t);
        dst->t->data = malloc(n ? n : 1);
        if (!dst->t->data) return 0;
        if (n) memcpy(dst->t->data, src->t->data, n);
    }
    return 1;
}

vp_status vp_node_copy_attrs(vp_graph *g, int dst, int src) { return vp_node_copy_attrs_from(g, dst, &g->nodes[src]); }

vp_status vp_node_copy_attrs_from(vp_graph *g, int dst, const vp_node *src) {
    int n = src->n_attrs;
    if (!n) return VP_OK;
    vp_attr *a = calloc((size_t)n, sizeof *a);
    if (!a) return VP_ERR_NOMEM;
    int ok = 1, done = 0;
    for (; done < n && ok; done++) ok = vp_attr_copy(&a[done], &src->attrs[done]);
    if (!ok) {
        for (int i = 0; i < done; i++) vp_attr_clear(&a[i]);
        free(a);
        return VP_ERR_NOMEM;
    }
    vp_node *d = &g->nodes[dst];
    for (int i = 0; i < d->n_attrs; i++) vp_attr_clear(&d->attrs[i]);
    free(d->attrs);
    d->attrs = a;
    d->n_attrs = n;
    return VP_OK;
}
