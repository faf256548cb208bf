/* The layers of a model, from the module paths its exporter recorded (vp_node.module:
 * torch 2.x's name_scopes, "m.model.layers.3.mlp").
 *
 * In: the forward nodes in order.  Out: per forward position the layer it belongs to, or
 * -1, and how many layers there are.  A layer is one element of the outermost module
 * list that repeats: a path component that is a number ("layers.3") whose list
 * ("m.model.layers") has at least two elements among the forward nodes.  T5's
 * "encoder.block.0.layer.1" is in layer "encoder.block.0"; wav2vec2's single
 * "parametrizations.weight.0" is in none.  Layers are numbered in the order their first
 * node runs.  A node without a path (one the planner's passes added: a fused op, a cast)
 * is in the layer of the nodes with one on both sides of it, if they agree; else in none. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "remat/remat_chain.h"

typedef struct span {
    const char *s;
    size_t n;
} span;

typedef struct module_list {
    span prefix;   /* "m.model.layers" */
    span first;    /* the first element's index seen */
    int repeats;   /* a second, different index was seen */
} module_list;

typedef struct lists {
    module_list *l;
    int n, cap;
} lists;

static int span_eq(span a, span b) { return a.n == b.n && !memcmp(a.s, b.s, a.n); }

/* The next component of path at or after *at ending in a number: its list's prefix and
 * its index, *at moved past it.  0 when there is none. */
static int next_index(const char *path, size_t *at, span *prefix, span *index) {
    size_t i = *at;
    while (path[i]) {
        size_t start = i;
        while (path[i] && path[i] != '.') i++;
        int digits = i > start;
        for (size_t k = start; k < i && digits; k++) digits = isdigit((unsigned char)path[k]) != 0;
        size_t end = i;
        if (path[i] == '.') i++;
        if (digits) { /* a top-level Sequential's "0.mlp" is in the list "" */
            *prefix = (span){path, start ? start - 1 : 0};
            *index = (span){path + start, end - start};
            *at = i;
            return 1;
        }
    }
    *at = i;
    return 0;
}

static module_list *find_list(lists *ls, span prefix) {
    for (int k = ls->n - 1; k >= 0; k--)
        if (span_eq(ls->l[k].prefix, prefix)) return &ls->l[k];
    return NULL;
}

int vp_chain_layers(const vp_graph *g, const int *fwd, int nf, int *layer_of) {
    lists ls = {0};
    span *keys = NULL; /* each layer's path, "m.model.layers.3" */
    int n_keys = 0, ok = 1;
    for (int i = 0; i < nf; i++) layer_of[i] = -1;
    /* every module list, and whether it repeats */
    for (int i = 0; ok && i < nf; i++) {
        const char *m = g->nodes[fwd[i]].module;
        span prefix, index;
        for (size_t at = 0; m && ok && next_index(m, &at, &prefix, &index);) {
            module_list *l = find_list(&ls, prefix);
            if (l) {
                l->repeats |= !span_eq(l->first, index);
                continue;
            }
            if (ls.n == ls.cap) {
                int cap = ls.cap ? 2 * ls.cap : 16;
                module_list *nl = realloc(ls.l, (size_t)cap * sizeof *nl);
                if (!nl) {
                    ok = 0;
                    break;
                }
                ls.l = nl;
                ls.cap = cap;
            }
            ls.l[ls.n++] = (module_list){prefix, index, 0};
        }
    }
    /* each node's layer: the element of the outermost repeating list its path is in */
    keys = ok ? malloc(((size_t)nf + 1) * sizeof *keys) : NULL;
    for (int i = 0; keys && i < nf; i++) {
        const char *m = g->nodes[fwd[i]].module;
        span prefix, index;
        for (size_t at = 0; m && next_index(m, &at, &prefix, &index);) {
            const module_list *l = find_list(&ls, prefix);
            if (!l || !l->repeats) continue;
            span key = {m, (size_t)(index.s + index.n - m)};
            int id = -1;
            for (int k = n_keys - 1; k >= 0 && id < 0; k--) /* the latest first: layers run in order */
                if (span_eq(keys[k], key)) id = k;
            if (id < 0) keys[id = n_keys++] = key;
            layer_of[i] = id;
            break;
        }
    }
    if (!keys) {
        for (int i = 0; i < nf; i++) layer_of[i] = -1;
        n_keys = 0;
    }
    /* a node with no path (a fused MatMul, a cast) between two of one layer is in it */
    for (int i = 0, prev = -1; n_keys && i < nf; i++) {
        if (g->nodes[fwd[i]].module) {
            prev = layer_of[i];
            continue;
        }
        int next = i + 1;
        while (next < nf && !g->nodes[fwd[next]].module) next++;
        if (prev >= 0 && next < nf && layer_of[next] == prev) layer_of[i] = prev;
    }
    free(keys);
    free(ls.l);
    return n_keys;
}
