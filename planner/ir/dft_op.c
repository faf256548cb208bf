/* ONNX's DFT expanded in place (dft_op.h says what comes in and goes out), through
 * vp_build_replace_node as group_norm_op.c. */
#include "ir/dft_op.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/dtype_conv.h"
#include "ir/graph_build.h"
#include "ir/infer.h"

int vp_dft_op_is(const vp_node *n) {
    return (!n->domain[0] || !strcmp(n->domain, "ai.onnx")) && !strcmp(n->op_type, "DFT");
}

/* Input k, when present, a constant integer of one element, into *v (*given says). */
static vp_status int_input(const vp_graph *g, const vp_node *n, int k, const char *what, int64_t *v, int *given,
                           vp_error *err) {
    *given = 0;
    if (k >= n->n_inputs || n->inputs[k] < 0) return VP_OK;
    const vp_value *x = &g->values[n->inputs[k]];
    if (!x->data || (x->dtype != VP_I64 && x->dtype != VP_I32) || vp_value_numel(x) != 1)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "has %s '%s' that is not a constant integer: only a transform "
                            "of a shape known ahead of time is supported", what, x->name);
    *v = (int64_t)vp_load(x->data, x->dtype, 0);
    *given = 1;
    return VP_OK;
}

static int i64s(vp_graph *g, const char *stem, int n, const int64_t *v) {
    return vp_build_const(g, stem, VP_I64, 1, (const int64_t[]){n}, v);
}

/* The transform's four [rows, cols] matrices, Y_re = X_re A_rr + X_im A_ir and
 * Y_im = X_re A_ri + X_im A_ii, in double.  th = 2 pi ((j k) mod N) / N keeps the angle
 * exact for any j k; where 2 j k is a multiple of N its sine is 0 exactly. */
static void dft_matrices(int64_t rows, int64_t cols, int64_t len, int inverse, int irfft, double *rr, double *ir,
                         double *ri, double *ii) {
    const double pi = 3.14159265358979323846;
    for (int64_t j = 0; j < rows; j++)
        for (int64_t k = 0; k < cols; k++) {
            int64_t jk = (j * k) % len, at = j * cols + k;
            double th = 2.0 * pi * (double)jk / (double)len, c = cos(th), sn = (2 * jk) % len ? sin(th) : 0.0;
            if (irfft) { /* the Hermitian spectrum rebuilt from its first half: DC and Nyquist once, the rest twice */
                double w = j == 0 || (len % 2 == 0 && j == len / 2) ? 1.0 : 2.0;
                rr[at] = w * c / (double)len;
                ir[at] = -w * sn / (double)len;
                ri[at] = ii[at] = 0;
            } else if (inverse) { /* exp(+i th) / N */
                rr[at] = ii[at] = c / (double)len;
                ir[at] = -sn / (double)len;
                ri[at] = sn / (double)len;
            } else { /* exp(-i th) */
                rr[at] = ii[at] = c;
                ir[at] = sn;
                ri[at] = -sn;
            }
        }
}

/* x [..., rows] times the constant m [rows, cols] (dtype dt).  The constant is named by
 * what fixes its values (which matrix, the transform, N, its extent and dtype), and a
 * constant of that name made for an earlier DFT is read again: every layer of FNet-base
 * transforms the same 512 and 768 wide axes, 100 MB of copies otherwise. */
static vp_status product(vp_graph *g, const char *stem, int x, const double *m, const char *which, int64_t len, int64_t rows,
                         int64_t cols, vp_dtype dt, int *out, vp_error *err) {
    char name[160];
    snprintf(name, sizeof name, "dft_%s_N%lld_%lldx%lld_%s", which, (long long)len, (long long)rows, (long long)cols,
             vp_dtype_name(dt));
    int c = vp_graph_find_value(g, name);
    const vp_value *cv = c >= 0 ? &g->values[c] : NULL;
    if (!cv || !(cv->flags & VP_VAL_CONST) || cv->dtype != dt || cv->rank != 2 || cv->dims[0] != rows ||
        cv->dims[1] != cols) {
        void *d = malloc((size_t)(rows * cols) * vp_dtype_size(dt) + 1);
        if (!d) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
        for (int64_t i = 0; i < rows * cols; i++) vp_store(d, dt, i, m[i]);
        c = vp_build_const(g, name, dt, 2, (const int64_t[]){rows, cols}, d);
        free(d);
        if (c < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    }
    *out = -1;
    return vp_build_op(g, stem, "MatMul", 2, (const int[]){x, c}, NULL, 0, out, err);
}

/* a m + b n, the second term only where b is (b >= 0); which names m and mb. */
static vp_status combine(vp_graph *g, const char *stem, int a, const double *m, int b, const double *mb, const char *const *which,
                         int64_t len, int64_t rows, int64_t cols, vp_dtype dt, int *out, vp_error *err) {
    int p = -1, q = -1;
    vp_status s = product(g, stem, a, m, which[0], len, rows, cols, dt, &p, err);
    if (s || b < 0) {
        *out = p;
        return s;
    }
    if ((s = product(g, stem, b, mb, which[1], len, rows, cols, dt, &q, err))) return s;
    *out = -1;
    return vp_build_op(g, stem, "Add", 2, (const int[]){p, q}, NULL, 0, out, err);
}

static vp_status expand(vp_graph *g, int node, int y, void *ctx, vp_error *err) {
    (void)ctx;
    const vp_node *n = &g->nodes[node];
    if (n->n_inputs < 1 || n->inputs[0] < 0) return vp_node_fail(err, VP_ERR_INVALID, n, "needs input X");
    int x = n->inputs[0];
    const vp_value *xv = &g->values[x];
    int rank = xv->rank;
    if (rank < 2 || !vp_dtype_is_float(xv->dtype) || (xv->dims[rank - 1] != 1 && xv->dims[rank - 1] != 2))
        return vp_node_fail(err, VP_ERR_INVALID, n, "has X '%s' of rank %d and dtype %s: [..., signal, 1 or 2] of a float "
                            "type expected (the last axis: the real part, or the real and imaginary parts)",
                            xv->name, rank, vp_dtype_name(xv->dtype));
    int64_t axis = -2, len = 0;
    int given = 0;
    vp_status s = VP_OK;
    if (n->opset >= 20) s = int_input(g, n, 2, "axis", &axis, &given, err);
    else axis = vp_attr_int(n, "axis", 1);
    if (s) return s;
    if (axis < 0) axis += rank;
    if (axis < 0 || axis >= rank - 1)
        return vp_node_fail(err, VP_ERR_INVALID, n, "has axis %lld: the signal axis must be one of the first %d of X's %d",
                            (long long)axis, rank - 1, rank);
    if ((s = int_input(g, n, 1, "dft_length", &len, &given, err))) return s;
    int inverse = vp_attr_int(n, "inverse", 0) != 0, onesided = vp_attr_int(n, "onesided", 0) != 0, irfft = inverse && onesided;
    int64_t sig = xv->dims[axis];
    if (!given) len = irfft ? 2 * (sig - 1) : sig;
    if (len < 1)
        return vp_node_fail(err, VP_ERR_INVALID, n, "has a transform length of %lld (at least 1)", (long long)len);
    int complex_in = xv->dims[rank - 1] == 2;
    int64_t rows = irfft ? len / 2 + 1 : len, cols = irfft ? len : onesided ? len / 2 + 1 : len;
    if (rows > sig) rows = sig; /* zero-padding to N adds nothing to the sums */
    vp_dtype dt = xv->dtype;
    if (y < 0) return VP_OK;
    char stem[512];
    snprintf(stem, sizeof stem, "%s", n->name[0] ? n->name : "DFT");
    /* (n and xv are not read past here: emitting moves nodes and values) */
    int64_t zero = 0, one = 1, last = rank - 2, perm[VP_MAX_RANK], inv[VP_MAX_RANK];
    int moved = axis != last, parts[2] = {-1, -1};
    for (int d = 0, at = 0; d < rank - 1; d++)
        if (d != axis) perm[at++] = d;
    perm[rank - 2] = axis;
    for (int d = 0; d < rank - 1; d++) inv[perm[d]] = d;
    for (int p = 0; p < 1 + complex_in && !s; p++) {
        int idx = vp_build_const(g, "part", VP_I64, 0, NULL, p ? &one : &zero);
        if (idx < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
        s = vp_build_op(g, stem, "Gather", 2, (const int[]){x, idx}, "axis", rank - 1, &parts[p], err);
        int t = -1;
        if (!s && moved) s = vp_build_transpose(g, stem, parts[p], perm, rank - 1, &t, err);
        if (!s && moved) parts[p] = t;
        if (!s && rows < sig) {
            int st = i64s(g, "starts", 1, &zero), en = i64s(g, "ends", 1, &rows), ax = i64s(g, "axes", 1, (int64_t[]){-1});
            if (st < 0 || en < 0 || ax < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
            t = -1;
            s = vp_build_op(g, stem, "Slice", 4, (const int[]){parts[p], st, en, ax}, NULL, 0, &t, err);
            parts[p] = t;
        }
    }
    if (s) return s;
    double *m = malloc((size_t)(4 * rows * cols) * sizeof *m + 1);
    if (!m) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    double *rr = m, *ir = m + rows * cols, *ri = ir + rows * cols, *ii = ri + rows * cols;
    dft_matrices(rows, cols, len, inverse, irfft, rr, ir, ri, ii);
    int out[2] = {-1, -1}, n_out = irfft ? 1 : 2;
    /* each matrix named by its values: the forward's A_ii is its A_rr, the inverse's too */
    static const char *const names[3][4] = {{"cos", "sin", "negsin", "cos"},
                                            {"icos", "inegsin", "isin", "icos"},
                                            {"hcos", "hnegsin", "", ""}};
    const char *const *nm = names[irfft ? 2 : inverse ? 1 : 0];
    s = combine(g, stem, parts[0], rr, parts[1], ir, nm, len, rows, cols, dt, &out[0], err);
    if (!s && n_out == 2) s = combine(g, stem, parts[0], ri, parts[1], ii, nm + 2, len, rows, cols, dt, &out[1], err);
    free(m);
    int axes = i64s(g, "axes", 1, (int64_t[]){-1}), stacked[2] = {-1, -1};
    if (axes < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    for (int p = 0; p < n_out && !s; p++) {
        int t = -1;
        if (moved && (s = vp_build_transpose(g, stem, out[p], inv, rank - 1, &t, err))) break;
        if (moved) out[p] = t;
        if (n_out == 1) stacked[p] = y; /* a real output: Y is [..., N, 1] */
        s = vp_build_op(g, stem, "Unsqueeze", 2, (const int[]){out[p], axes}, NULL, 0, &stacked[p], err);
    }
    if (!s && n_out == 2) s = vp_build_op(g, stem, "Concat", 2, stacked, "axis", -1, &y, err);
    return s;
}

vp_status vp_dft_op_expand(vp_graph *g, int node, int *n_new, vp_error *err) {
    return vp_build_replace_node(g, node, expand, NULL, n_new, err);
}
