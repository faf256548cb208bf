/* ONNX's Einsum expanded in place (einsum_op.h says what comes in and goes out), through
 * vp_build_replace_node as rms_norm_op.c.
 *
 * The expansion runs twice over copies of the operands: a dry pass that only counts the
 * nodes it would make, then the real one, whose last node writes the Einsum's own output;
 * every decision depends on labels and dims alone, so both passes make the same ones. */
#include "ir/einsum_op.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/dtype_conv.h"
#include "ir/graph_build.h"
#include "ir/infer.h"

/* Labels: the 52 letters in ASCII order (upper case first, as numpy orders an implicit
 * output), then one per ellipsis axis, aligned on the right as broadcasting aligns them. */
enum { N_LETTERS = 52, MAX_LABELS = N_LETTERS + VP_MAX_RANK, MAX_TERMS = 32 };

int vp_einsum_op_is(const vp_node *n) {
    return (!n->domain[0] || !strcmp(n->domain, "ai.onnx")) && !strcmp(n->op_type, "Einsum");
}

static int letter_label(char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return 26 + c - 'a';
    return -1;
}

static char label_char(int l) { return l < 26 ? (char)('A' + l) : l < N_LETTERS ? (char)('a' + l - 26) : '.'; }

/* One term of the equation as written: its letters, and where "..." stands among them. */
typedef struct spec {
    int n, ell; /* ell: the index in lab the ellipsis precedes, -1 when there is none */
    int lab[VP_MAX_RANK];
} spec;

/* Parses s[0..len) (spaces ignored); NULL on success, else why not. */
static const char *parse_term(const char *s, size_t len, spec *sp) {
    sp->n = 0;
    sp->ell = -1;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == ' ') continue;
        if (s[i] == '.') {
            if (sp->ell >= 0) return "has two ellipses in one term";
            if (i + 2 >= len || s[i + 1] != '.' || s[i + 2] != '.') return "has a '.' that is not part of '...'";
            sp->ell = sp->n;
            i += 2;
            continue;
        }
        int l = letter_label(s[i]);
        if (l < 0) return "has a character that is no letter, ',', '...' or '->'";
        if (sp->n == VP_MAX_RANK) return "has a term of more than 8 labels";
        sp->lab[sp->n++] = l;
    }
    return NULL;
}

/* An operand as the expansion goes: the value holding it and a label per axis. */
typedef struct term {
    int v, rank;
    int label[VP_MAX_RANK];
    int64_t dim[VP_MAX_RANK];
} term;

typedef struct expander {
    vp_graph *g;
    char stem[512]; /* the Einsum's name: each new node is "<stem>/<op>" */
    int y;          /* the Einsum's output: the last node writes it */
    vp_dtype dt;
    int dry;          /* count the nodes only */
    int count, total; /* nodes made so far; in the real pass, how many there will be */
    const int *out;   /* the output's labels */
    int n_out;
} expander;

static int find(const int *labels, int n, int l) {
    for (int i = 0; i < n; i++)
        if (labels[i] == l) return i;
    return -1;
}

/* ord = a, b, c (label lists) one after another; returns its length. */
static int concat(int *ord, const int *a, int na, const int *b, int nb, const int *c, int nc) {
    int n = 0;
    for (int i = 0; i < na; i++) ord[n++] = a[i];
    for (int i = 0; i < nb; i++) ord[n++] = b[i];
    for (int i = 0; i < nc; i++) ord[n++] = c[i];
    return n;
}

/* Adds op reading in[0..n_in) into a new value (the Einsum's output for the last node),
 * with Transpose's perm or ReduceSum's keepdims, and infers it. */
static vp_status emit(expander *e, const char *op, int n_in, const int *in, const int64_t *perm, int n_perm,
                      int keepdims, int *out, vp_error *err) {
    if (e->dry) {
        e->count++;
        *out = -2;
        return VP_OK;
    }
    vp_graph *g = e->g;
    char name[600];
    snprintf(name, sizeof name, "%s/%s", e->stem, op);
    *out = ++e->count == e->total ? e->y : vp_graph_add_unique_value(g, name);
    if (*out < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    int id = vp_graph_add_node(g, op, "", name, n_in, in, 1, out);
    if (id < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    /* ReduceSum reads its axes as an input from opset 13; Einsum exists from 12 */
    g->nodes[id].opset = !strcmp(op, "ReduceSum") && g->opset_onnx < 13 ? 13 : g->opset_onnx;
    if ((perm && vp_node_add_attr_ints(g, id, "perm", perm, n_perm)) ||
        (keepdims >= 0 && vp_node_add_attr_int(g, id, "keepdims", keepdims)))
        return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    return vp_infer_node(g, id, 0, NULL, err);
}

/* A constant of dtype dt (the dry pass makes none: -2). */
static vp_status constant(expander *e, const char *stem, vp_dtype dt, int rank, const int64_t *dims, const void *data,
                          int *id, vp_error *err) {
    *id = e->dry ? -2 : vp_build_const(e->g, stem, dt, rank, dims, data);
    return *id == -1 ? vp_fail(err, VP_ERR_NOMEM, "out of memory") : VP_OK;
}

static vp_status ints(expander *e, const char *stem, int n, const int64_t *v, int *id, vp_error *err) {
    return constant(e, stem, VP_I64, 1, (const int64_t[]){n}, v, id, err);
}

/* t's axes put in the order of labels ord[0..n) (each of t's labels once). */
static vp_status permute(expander *e, term *t, const int *ord, vp_error *err) {
    int64_t perm[VP_MAX_RANK];
    term u = *t;
    int moved = 0;
    for (int i = 0; i < t->rank; i++) {
        int a = find(t->label, t->rank, ord[i]);
        perm[i] = a;
        u.label[i] = ord[i];
        u.dim[i] = t->dim[a];
        moved |= a != i;
    }
    if (!moved) return VP_OK;
    vp_status s = emit(e, "Transpose", 1, &t->v, perm, t->rank, -1, &u.v, err);
    if (!s) *t = u;
    return s;
}

/* t's data seen with dims[0..rank) (its labels are the caller's to set). */
static vp_status reshape(expander *e, term *t, int rank, const int64_t *dims, vp_error *err) {
    int same = rank == t->rank;
    for (int i = 0; same && i < rank; i++) same = dims[i] == t->dim[i];
    if (same) return VP_OK;
    int shape, v;
    vp_status s = ints(e, "shape", rank, dims, &shape, err);
    if (!s) s = emit(e, "Reshape", 2, (const int[]){t->v, shape}, NULL, 0, -1, &v, err);
    if (s) return s;
    t->v = v;
    t->rank = rank;
    memcpy(t->dim, dims, (size_t)rank * sizeof *dims);
    return VP_OK;
}

/* t summed over the axes marked in drop[] (kept as 1 when keepdims). */
static vp_status sum_axes(expander *e, term *t, const char *drop, int keepdims, vp_error *err) {
    int64_t axes[VP_MAX_RANK];
    int n = 0, r = 0;
    for (int i = 0; i < t->rank; i++)
        if (drop[i]) axes[n++] = i;
    if (!n) return VP_OK;
    int c, v;
    vp_status s = ints(e, "axes", n, axes, &c, err);
    if (!s) s = emit(e, "ReduceSum", 2, (const int[]){t->v, c}, NULL, 0, keepdims, &v, err);
    if (s) return s;
    t->v = v;
    for (int i = 0; i < t->rank; i++) {
        if (drop[i] && !keepdims) continue;
        t->label[r] = t->label[i];
        t->dim[r++] = drop[i] ? 1 : t->dim[i];
    }
    t->rank = r;
    return VP_OK;
}

/* Each label t repeats reduced to its diagonal: t times an identity over the two axes,
 * summed over the second. */
static vp_status diagonal(expander *e, term *t, vp_error *err) {
    for (int p = 0; p < t->rank; p++)
        for (int q = p + 1; q < t->rank; q++) {
            if (t->label[p] != t->label[q]) continue;
            int64_t d = t->dim[p], dims[VP_MAX_RANK];
            for (int i = 0; i < t->rank; i++) dims[i] = i == p || i == q ? d : 1;
            size_t size = vp_dtype_size(e->dt);
            unsigned char *eye = calloc((size_t)(d * d) + 1, size);
            if (!eye) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
            for (int64_t i = 0; i < d; i++) vp_store(eye, e->dt, i * d + i, 1.0);
            int c, v;
            vp_status s = constant(e, "identity", e->dt, t->rank, dims, eye, &c, err);
            free(eye);
            if (!s) s = emit(e, "Mul", 2, (const int[]){t->v, c}, NULL, 0, -1, &v, err);
            if (s) return s;
            t->v = v;
            char drop[VP_MAX_RANK] = {0};
            drop[q] = 1;
            if ((s = sum_axes(e, t, drop, 0, err))) return s;
            q = p; /* the axes after q moved down one */
        }
    return VP_OK;
}

/* t summed over the labels that neither the output nor any of others[0..n) holds. */
static vp_status sum_unneeded(expander *e, term *t, const term *others, int n, vp_error *err) {
    char drop[VP_MAX_RANK] = {0};
    for (int i = 0; i < t->rank; i++) {
        int l = t->label[i], needed = find(e->out, e->n_out, l) >= 0;
        for (int k = 0; k < n && !needed; k++) needed = find(others[k].label, others[k].rank, l) >= 0;
        drop[i] = !needed;
    }
    return sum_axes(e, t, drop, 0, err);
}

/* t's axes put in the order ord (its nbt batch labels first), then seen as
 * [batch..., rows, cols]: a MatMul operand. */
static vp_status as_matrices(expander *e, term *t, const int *ord, int nbt, int64_t rows, int64_t cols, vp_error *err) {
    vp_status s = permute(e, t, ord, err);
    int64_t shape[VP_MAX_RANK];
    for (int i = 0; i < nbt; i++) shape[i] = t->dim[i];
    shape[nbt] = rows;
    shape[nbt + 1] = cols;
    return s ? s : reshape(e, t, nbt + 2, shape, err);
}

/* a and b combined into a: the labels both hold that later[0..n_later) or the output
 * read are batch axes, the others both hold are contracted, the rest stay; a's labels
 * come first in the result. */
static vp_status combine(expander *e, term *a, term *b, const term *later, int n_later, vp_error *err) {
    int batch[VP_MAX_RANK], contr[VP_MAX_RANK], aonly[VP_MAX_RANK], bonly[VP_MAX_RANK];
    int nbt = 0, nc = 0, na = 0, nb = 0;
    for (int i = 0; i < a->rank; i++) {
        int l = a->label[i], needed = find(e->out, e->n_out, l) >= 0;
        for (int k = 0; k < n_later && !needed; k++) needed = find(later[k].label, later[k].rank, l) >= 0;
        if (find(b->label, b->rank, l) < 0) aonly[na++] = l;
        else if (needed) batch[nbt++] = l;
        else contr[nc++] = l;
    }
    for (int i = 0; i < b->rank; i++)
        if (find(a->label, a->rank, b->label[i]) < 0) bonly[nb++] = b->label[i];
    if (nbt + na + nb > VP_MAX_RANK || nbt + na + nc > VP_MAX_RANK || nbt + nb + nc > VP_MAX_RANK)
        return vp_fail(err, VP_ERR_UNSUPPORTED, "more than %d axes at once", VP_MAX_RANK);
    /* a contracted label of size 1 on one side broadcasts: the other side summed over it */
    char da[VP_MAX_RANK] = {0}, db[VP_MAX_RANK] = {0};
    for (int k = 0; k < nc; k++) {
        int ia = find(a->label, a->rank, contr[k]), ib = find(b->label, b->rank, contr[k]);
        if (a->dim[ia] != b->dim[ib]) {
            if (a->dim[ia] == 1) db[ib] = 1;
            else da[ia] = 1;
        }
    }
    vp_status s = sum_axes(e, a, da, 1, err);
    if (!s) s = sum_axes(e, b, db, 1, err);
    int ord[VP_MAX_RANK], n = 0;
    int64_t shape[VP_MAX_RANK];
    int64_t m = 1, k = 1, cols = 1;
    term r = *a;
    r.rank = 0;
    for (int i = 0; i < nbt; i++) {
        int64_t x = a->dim[find(a->label, a->rank, batch[i])], y = b->dim[find(b->label, b->rank, batch[i])];
        r.label[r.rank] = batch[i];
        r.dim[r.rank++] = x > y ? x : y;
    }
    for (int i = 0; i < na; i++) {
        r.label[r.rank] = aonly[i];
        r.dim[r.rank++] = a->dim[find(a->label, a->rank, aonly[i])];
        m *= r.dim[r.rank - 1];
    }
    for (int i = 0; i < nb; i++) {
        r.label[r.rank] = bonly[i];
        r.dim[r.rank++] = b->dim[find(b->label, b->rank, bonly[i])];
        cols *= r.dim[r.rank - 1];
    }
    for (int i = 0; i < nc; i++) k *= a->dim[find(a->label, a->rank, contr[i])];
    if (!nc) { /* nothing to contract: a [batch, aonly, 1...] * b [batch, 1..., bonly] */
        n = concat(ord, batch, nbt, aonly, na, NULL, 0);
        if (!s) s = permute(e, a, ord, err);
        for (int i = 0; i < n; i++) shape[i] = a->dim[i];
        for (int i = 0; i < nb; i++) shape[n + i] = 1;
        if (!s) s = reshape(e, a, n + nb, shape, err);
        concat(ord, batch, nbt, bonly, nb, NULL, 0);
        if (!s) s = permute(e, b, ord, err);
        for (int i = 0; i < nbt; i++) shape[i] = b->dim[i];
        for (int i = 0; i < na; i++) shape[nbt + i] = 1;
        for (int i = 0; i < nb; i++) shape[nbt + na + i] = b->dim[nbt + i];
        if (!s) s = reshape(e, b, nbt + na + nb, shape, err);
        if (!s) s = emit(e, "Mul", 2, (const int[]){a->v, b->v}, NULL, 0, -1, &r.v, err);
    } else { /* a [batch, M, K] x b [batch, K, N] */
        concat(ord, batch, nbt, aonly, na, contr, nc);
        if (!s) s = as_matrices(e, a, ord, nbt, m, k, err);
        concat(ord, batch, nbt, contr, nc, bonly, nb);
        if (!s) s = as_matrices(e, b, ord, nbt, k, cols, err);
        term p = r;
        p.rank = nbt + 2;
        for (int i = 0; i < nbt; i++) p.dim[i] = r.dim[i];
        p.dim[nbt] = m;
        p.dim[nbt + 1] = cols;
        if (!s) s = emit(e, "MatMul", 2, (const int[]){a->v, b->v}, NULL, 0, -1, &p.v, err);
        if (!s) s = reshape(e, &p, r.rank, r.dim, err);
        r.v = p.v;
    }
    if (!s) *a = r;
    return s;
}

/* The whole expansion over copies of the operands t[0..nt). */
static vp_status lower(expander *e, const term *in, int nt, vp_error *err) {
    term t[MAX_TERMS];
    memcpy(t, in, (size_t)nt * sizeof *t);
    e->count = 0;
    vp_status s = VP_OK;
    for (int k = 0; k < nt && !s; k++) s = diagonal(e, &t[k], err);
    /* term 0 against the rest; each later one against the result so far and those after */
    if (!s) s = sum_unneeded(e, &t[0], t + 1, nt - 1, err);
    for (int k = 1; k < nt && !s; k++) {
        term others[MAX_TERMS];
        others[0] = t[0];
        memcpy(others + 1, t + k + 1, (size_t)(nt - k - 1) * sizeof *t);
        s = sum_unneeded(e, &t[k], others, nt - k, err);
        if (!s) s = combine(e, &t[0], &t[k], t + k + 1, nt - k - 1, err);
    }
    if (!s) s = sum_unneeded(e, &t[0], NULL, 0, err);
    if (!s) s = permute(e, &t[0], e->out, err);
    if (!s && !e->dry && !e->count) { /* as it came: the output its copy (a view) */
        e->total = 1;
        int v;
        s = emit(e, "Identity", 1, &t[0].v, NULL, 0, -1, &v, err);
    }
    return s;
}

static vp_status expand(vp_graph *g, int node, int y, void *ctx, vp_error *err) {
    (void)ctx;
    const vp_node *n = &g->nodes[node];
    const char *eq = vp_attr_string(n, "equation", NULL);
    if (!eq) return vp_node_fail(err, VP_ERR_INVALID, n, "has no equation");
    int nt = n->n_inputs;
    if (nt < 1 || nt > MAX_TERMS) return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "has %d inputs (1 to %d supported)", nt, MAX_TERMS);
    const char *arrow = strstr(eq, "->");
    if (arrow && strstr(arrow + 2, "->")) return vp_node_fail(err, VP_ERR_INVALID, n, "equation '%s' has two '->'", eq);
    size_t lhs = arrow ? (size_t)(arrow - eq) : strlen(eq);
    size_t terms = 1;
    for (size_t i = 0; i < lhs; i++) terms += eq[i] == ',';
    if (terms != (size_t)nt)
        return vp_node_fail(err, VP_ERR_INVALID, n, "equation '%s' has %zu terms for %d inputs", eq, terms, nt);
    spec sp[MAX_TERMS];
    for (size_t at = 0, k = 0; k < terms; k++) {
        size_t end = at;
        while (end < lhs && eq[end] != ',') end++;
        const char *why = parse_term(eq + at, end - at, &sp[k]);
        if (why) return vp_node_fail(err, VP_ERR_INVALID, n, "equation '%s' %s", eq, why);
        at = end + 1;
    }
    term t[MAX_TERMS];
    int ell_max = 0;
    vp_dtype dt = VP_UNDEFINED;
    for (int k = 0; k < nt; k++) {
        int v = n->inputs[k];
        if (v < 0) return vp_node_fail(err, VP_ERR_INVALID, n, "input %d is missing", k);
        const vp_value *x = &g->values[v];
        int ell = x->rank - sp[k].n;
        if (ell < 0 || (sp[k].ell < 0 && ell > 0))
            return vp_node_fail(err, VP_ERR_INVALID, n, "equation '%s': term %d has %d labels for input '%s' of rank %d",
                                eq, k, sp[k].n, x->name, x->rank);
        if (ell > ell_max) ell_max = ell;
        if (k && x->dtype != dt)
            return vp_node_fail(err, VP_ERR_INVALID, n, "inputs of dtypes %s and %s", vp_dtype_name(dt),
                                vp_dtype_name(x->dtype));
        dt = x->dtype;
        for (int i = 0; i < x->rank; i++)
            if (x->dims[i] < 0)
                return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "input '%s' has an unknown dim %d (bind it with --dim)",
                                    x->name, i);
    }
    if (dt != VP_F32 && dt != VP_F64 && dt != VP_F16 && dt != VP_BF16 && dt != VP_I32 && dt != VP_I64)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "has inputs of dtype %s (float, double, float16, bfloat16, "
                            "int32, int64 supported)", vp_dtype_name(dt));
    int64_t size[MAX_LABELS];
    int uses[MAX_LABELS] = {0};
    for (int l = 0; l < MAX_LABELS; l++) size[l] = -1;
    for (int k = 0; k < nt; k++) { /* labels per axis; sizes agree or broadcast from 1 */
        const vp_value *x = &g->values[n->inputs[k]];
        int ell = x->rank - sp[k].n, a = 0;
        t[k].v = n->inputs[k];
        t[k].rank = x->rank;
        for (int i = 0; i <= sp[k].n; i++) {
            if (i == sp[k].ell)
                for (int j = 0; j < ell; j++) t[k].label[a++] = N_LETTERS + ell_max - ell + j;
            if (i < sp[k].n) t[k].label[a++] = sp[k].lab[i];
        }
        for (int i = 0; i < x->rank; i++) {
            int l = t[k].label[i];
            int64_t d = x->dims[i];
            t[k].dim[i] = d;
            if (find(t[k].label, i, l) >= 0 && d != t[k].dim[find(t[k].label, i, l)])
                return vp_node_fail(err, VP_ERR_INVALID, n, "equation '%s': label '%c' repeats in term %d over sizes %lld and %lld",
                                    eq, label_char(l), k, (long long)t[k].dim[find(t[k].label, i, l)], (long long)d);
            if (size[l] < 0 || size[l] == 1) size[l] = d;
            else if (d != size[l] && d != 1)
                return vp_node_fail(err, VP_ERR_INVALID, n, "equation '%s': label '%c' is %lld in one input and %lld in input '%s'",
                                    eq, label_char(l), (long long)size[l], (long long)d, x->name);
            if (l < N_LETTERS) uses[l]++;
        }
    }
    int out[VP_MAX_RANK], n_out = 0;
    if (arrow) {
        spec o;
        const char *why;
        if ((why = parse_term(arrow + 2, strlen(arrow + 2), &o))) return vp_node_fail(err, VP_ERR_INVALID, n, "equation '%s' %s", eq, why);
        if (o.n + (o.ell >= 0 ? ell_max : 0) > VP_MAX_RANK)
            return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "equation '%s' has an output of more than 8 axes", eq);
        for (int i = 0; i <= o.n; i++) {
            if (i == o.ell)
                for (int j = 0; j < ell_max; j++) out[n_out++] = N_LETTERS + j;
            if (i == o.n) break;
            if (!uses[o.lab[i]])
                return vp_node_fail(err, VP_ERR_INVALID, n, "equation '%s': output label '%c' is in no input", eq, label_char(o.lab[i]));
            if (find(out, n_out, o.lab[i]) >= 0)
                return vp_node_fail(err, VP_ERR_INVALID, n, "equation '%s': output label '%c' is named twice", eq, label_char(o.lab[i]));
            out[n_out++] = o.lab[i];
        }
    } else { /* implicit: the broadcast axes, then each letter used once, in ASCII order */
        for (int j = 0; j < ell_max; j++) out[n_out++] = N_LETTERS + j;
        for (int l = 0; l < N_LETTERS; l++)
            if (uses[l] == 1) {
                if (n_out == VP_MAX_RANK) return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "equation '%s' has an output of more than 8 axes", eq);
                out[n_out++] = l;
            }
    }
    expander e = {.g = g, .y = y, .dt = dt, .dry = 1, .out = out, .n_out = n_out};
    snprintf(e.stem, sizeof e.stem, "%s", n->name[0] ? n->name : "Einsum");
    vp_status s = lower(&e, t, nt, err); /* the dry pass fails only on its own checks */
    if (s) {
        vp_error_prefix(err, "node '%s' (Einsum): equation '%s': ", e.stem, eq);
        return s;
    }
    e.dry = 0;
    e.total = e.count;
    return lower(&e, t, nt, err);
}

vp_status vp_einsum_op_expand(vp_graph *g, int node, int *n_new, vp_error *err) {
    return vp_build_replace_node(g, node, expand, NULL, n_new, err);
}
