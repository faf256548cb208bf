/* torch 2.x's node metadata read (torch_meta.h says what comes in and what goes out). */
#include "onnx/torch_meta.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* The innermost module of a name_scopes list: "['', 'm', 'm.model', 'm.model.layers.0',
 * 'm.model.layers.0.mlp', 'mul_3']" gives "m.model.layers.0.mlp".  A module's path
 * extends its parent's by a dot; the entries after the last module are the calls inside
 * it (mul_3), not modules.  NULL when there is no module below the root or the text is
 * not such a list: the checkpointing that reads it falls back to the graph's structure. */
char *vp_torch_module_path(const char *list) {
    const char *best = NULL, *parent = NULL;
    size_t best_n = 0, parent_n = 0;
    for (const char *p = list; p && *p;) {
        if (*p != '\'' && *p != '"') {
            p++;
            continue;
        }
        char q = *p++;
        const char *e = strchr(p, q);
        if (!e) break;
        size_t n = (size_t)(e - p);
        /* the root is '': its children are modules, and each deeper module extends the last */
        int module = !parent || parent_n == 0 || (n > parent_n + 1 && !memcmp(p, parent, parent_n) && p[parent_n] == '.');
        if (!module) break;
        parent = p, parent_n = n;
        if (n) best = p, best_n = n;
        p = e + 1;
    }
    if (!best) return NULL;
    char *out = malloc(best_n + 1);
    if (out) {
        memcpy(out, best, best_n);
        out[best_n] = 0;
    }
    return out;
}

/* The i-th (0-based) top-level argument of the list "a, b, c)" at p (just after its
 * "("): its first character and length, or NULL.  Arguments are FX names (%x), numbers,
 * True/False, lists. */
static const char *nth_arg(const char *p, int i, size_t *len) {
    int depth = 0, k = 0;
    for (const char *start = p;; p++) {
        char c = *p;
        if (!c) return NULL;
        if (c == '(' || c == '[' || c == '{') {
            depth++;
            continue;
        }
        int last = c == ')' && depth == 0;
        if ((c == ')' || c == ']' || c == '}') && depth > 0) {
            depth--;
            continue;
        }
        if (!last && !(c == ',' && depth == 0)) continue;
        if (k++ == i) {
            while (start < p && isspace((unsigned char)*start)) start++;
            const char *end = p;
            while (end > start && isspace((unsigned char)end[-1])) end--;
            *len = (size_t)(end - start);
            return *len ? start : NULL;
        }
        if (last) return NULL;
        start = p + 1;
    }
}

/* "name: value" in the kwargs "{padding_idx: 1, ...}" after p: the value, or NULL. */
static const char *kwarg(const char *p, const char *name, size_t *len) {
    const char *k = strstr(p, "kwargs = {");
    if (!k) return NULL;
    k += strlen("kwargs = {");
    size_t n = strlen(name);
    for (const char *q = k; (q = strstr(q, name)); q += n)
        if ((q == k || q[-1] == ' ' || q[-1] == '{') && !strncmp(q + n, ": ", 2)) {
            const char *v = q + n + 2, *e = v;
            while (*e && *e != ',' && *e != '}') e++;
            *len = (size_t)(e - v);
            return v;
        }
    return NULL;
}

void vp_torch_embedding_of(const char *fx, vp_embedding_hint *e) {
    memset(e, 0, sizeof *e);
    e->padding_idx = -1;
    static const char call[] = "aten.embedding.default](args = (";
    const char *args = fx ? strstr(fx, call) : NULL;
    if (!args) return;
    args += strlen(call);
    e->from_embedding = 1;
    size_t n = 0;
    const char *pad = nth_arg(args, 2, &n);
    if (!pad) pad = kwarg(args, "padding_idx", &n);
    if (pad && n < 24) {
        char buf[24];
        memcpy(buf, pad, n);
        buf[n] = 0;
        char *end;
        long long v = strtoll(buf, &end, 10);
        if (end != buf && !*end && v >= 0) e->padding_idx = v;
    }
    const char *freq = nth_arg(args, 3, &n);
    if (!freq) freq = kwarg(args, "scale_grad_by_freq", &n);
    e->scale_grad_by_freq = freq && n == 4 && !memcmp(freq, "True", 4);
}
