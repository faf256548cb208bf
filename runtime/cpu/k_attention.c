/* Attention and AttentionGrad on the CPU (k_attention.h).
 *
 * For each (batch, head) and each block of up to ROWS query rows i0..i0+r:
 *   forward   A = scale * Q_blk K^T (+ mask, causal), per row m = max, LSE = m + log sum
 *             exp(A - m), P = exp(A - LSE) in the scratch, Y_blk = P V;
 *   backward  P again from A and the saved LSE, dP = dY_blk V^T, D_i = sum dY_i * Y_i,
 *             dS = P * (dP - D), dQ_blk = scale dS K, dK += scale dS^T Q_blk,
 *             dV += P^T dY_blk.
 * Y and dY are [B, H, S, Dv], or [B, S, H, Dv] under y_bshd: the same rows at another
 * stride, so the two layouts give the same bits.
 * Under causal, a block only looks at the columns j < i0 + r (the rest are masked for
 * every row of it), so the causal forward and backward do about half the work.
 *
 * The results depend only on the inputs and the block size, never on timing: the
 * planned and the naive executor agree bit for bit. */
#include "k_attention.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_util.h"
#include "k_linalg.h"

enum { ROWS = 64 };

typedef struct geom {
    vp_dtype dt;
    size_t es;               /* bytes per element of dt */
    int64_t B, H, S, T, D, Dv;
    double scale;
    int causal;
    int bshd;                /* Y and dY [B, S, H, Dv] (attribute y_bshd) */
    int64_t yld;             /* their row stride: Dv, or H * Dv under bshd */
    const void *mask;        /* NULL when none */
    int64_t mstr[4];         /* mask strides against [B, H, S, T], 0 where broadcast */
} geom;

static const void *at(const void *base, const geom *g, int64_t elems) {
    return (const char *)base + (size_t)elems * g->es;
}

static void geom_of(const vp_node *n, const vp_tensor *q, const vp_tensor *k, const vp_tensor *v, const vp_tensor *mask,
                    geom *g) {
    g->dt = q->dtype;
    g->es = vp_dtype_size(q->dtype);
    g->B = q->dims[0];
    g->H = q->dims[1];
    g->S = q->dims[2];
    g->D = q->dims[3];
    g->T = k->dims[2];
    g->Dv = v->dims[3];
    g->scale = vp_attr_float(n, "scale", g->D ? (float)(1.0 / sqrt((double)g->D)) : 1.0f);
    g->causal = vp_attr_int(n, "causal", 0) != 0;
    g->bshd = vp_attr_int(n, "y_bshd", 0) != 0;
    g->yld = g->bshd ? g->H * g->Dv : g->Dv;
    g->mask = mask ? mask->data : NULL;
    if (mask) vp_broadcast_strides(mask, 4, g->mstr);
}

/* Element offset of row i of pair (b, h) in Y and dY. */
static int64_t y_row(const geom *g, int64_t b, int64_t h, int64_t i) {
    return g->bshd ? ((b * g->S + i) * g->H + h) * g->Dv : ((b * g->H + h) * g->S + i) * g->Dv;
}

/* Columns a block starting at row i0 with r rows can see. */
static int64_t block_cols(const geom *g, int64_t i0, int64_t r) {
    return g->causal && i0 + r < g->T ? i0 + r : g->T;
}

/* Scores of rows i0..i0+r of pair (b, h) into sc ([r, T], row stride T), turned into
 * probabilities.  With lse_in (the pair's S entries) the row log-sum-exp is read from
 * it; otherwise it is computed and stored into lse_out (the same).  Masked entries get
 * probability 0. */
static vp_status block_probs(const vp_node *n, const geom *g, int64_t b, int64_t h, int64_t i0, int64_t r, int64_t cols,
                             const void *q, const void *k, void *sc, const void *lse_in, void *lse_out, vp_error *err) {
    int64_t bh = b * g->H + h;
    vp_status s = vp_lin_gemm(n, g->dt, 0, 1, r, cols, g->D, g->scale, at(q, g, (bh * g->S + i0) * g->D), g->D,
                              at(k, g, bh * g->T * g->D), g->D, 0.0, sc, g->T, err);
    if (s) return s;
    vp_dtype lt = g->dt == VP_F64 ? VP_F64 : VP_F32;
    for (int64_t ii = 0; ii < r; ii++) {
        int64_t i = i0 + ii, seen = g->causal ? (i + 1 < cols ? i + 1 : cols) : cols;
        int64_t row = ii * g->T, moff = b * g->mstr[0] + h * g->mstr[1] + i * g->mstr[2];
        double m = -INFINITY;
        for (int64_t j = 0; j < seen; j++) {
            double a = vp_load_wide(sc, g->dt, row + j);
            if (g->mask) a += vp_load_wide(g->mask, g->dt, moff + j * g->mstr[3]);
            vp_store_wide(sc, g->dt, row + j, a);
            if (a > m) m = a;
        }
        double lse;
        if (lse_in) {
            lse = vp_load_wide(lse_in, lt, i);
        } else {
            double sum = 0;
            for (int64_t j = 0; j < seen; j++) sum += exp(vp_load_wide(sc, g->dt, row + j) - m);
            lse = m + log(sum); /* -inf for a row masked everywhere, NaN below: as Softmax */
            vp_store_wide(lse_out, lt, i, lse);
        }
        for (int64_t j = 0; j < seen; j++) vp_store_wide(sc, g->dt, row + j, exp(vp_load_wide(sc, g->dt, row + j) - lse));
        for (int64_t j = seen; j < cols; j++) vp_store_wide(sc, g->dt, row + j, 0.0);
    }
    return VP_OK;
}

vp_status vp_cpu_attention(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    const vp_tensor *q = in[0], *k = in[1], *v = in[2], *mask = n->n_inputs > 3 ? in[3] : NULL;
    if (vp_lin_is_narrow(q->dtype)) return vp_lin_run_widened(vp_cpu_attention, n, in, out, err);
    geom g;
    geom_of(n, q, k, v, mask, &g);
    vp_tensor *y = out[0], *lse = n->n_outputs > 1 ? out[1] : NULL;
    void *sc = vp_lin_alloc(ROWS * (g.T ? g.T : 1), g.es), *own_lse = NULL;
    if (!lse) own_lse = vp_lin_alloc(g.S ? g.S : 1, sizeof(double)); /* one pair's rows at a time */
    if (!sc || (!lse && !own_lse)) {
        free(sc);
        free(own_lse);
        return vp_node_fail(err, VP_ERR_NOMEM, n, "out of memory for attention scratch");
    }
    vp_status s = VP_OK;
    for (int64_t b = 0; b < g.B && !s; b++)
        for (int64_t h = 0; h < g.H && !s; h++) {
            int64_t bh = b * g.H + h;
            size_t lsz = g.dt == VP_F64 ? 8 : 4;
            void *lse_out = lse ? (char *)lse->data + (size_t)(bh * g.S) * lsz : own_lse;
            for (int64_t i0 = 0; i0 < g.S && !s; i0 += ROWS) {
                int64_t r = g.S - i0 < ROWS ? g.S - i0 : ROWS, cols = block_cols(&g, i0, r);
                s = block_probs(n, &g, b, h, i0, r, cols, q->data, k->data, sc, NULL, lse_out, err);
                if (!s)
                    s = vp_lin_gemm(n, g.dt, 0, 0, r, g.Dv, cols, 1.0, sc, g.T, at(v->data, &g, bh * g.T * g.Dv), g.Dv, 0.0,
                                    (char *)y->data + (size_t)y_row(&g, b, h, i0) * g.es, g.yld, err);
            }
        }
    free(sc);
    free(own_lse);
    return s;
}

vp_status vp_cpu_attention_grad(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    const vp_tensor *dy = in[0], *q = in[1], *k = in[2], *v = in[3], *y = in[4], *lse = in[5];
    const vp_tensor *mask = n->n_inputs > 6 ? in[6] : NULL;
    if (vp_lin_is_narrow(q->dtype)) return vp_lin_run_widened(vp_cpu_attention_grad, n, in, out, err);
    geom g;
    geom_of(n, q, k, v, mask, &g);
    vp_tensor *dq = out[0], *dk = n->n_outputs > 1 ? out[1] : NULL, *dv = n->n_outputs > 2 ? out[2] : NULL;
    if (dk) memset(dk->data, 0, vp_tensor_nbytes(dk));
    if (dv) memset(dv->data, 0, vp_tensor_nbytes(dv));
    int64_t cells = ROWS * (g.T ? g.T : 1);
    char *p = vp_lin_alloc(2 * cells, g.es);
    if (!p) return vp_node_fail(err, VP_ERR_NOMEM, n, "out of memory for attention scratch");
    char *ds = p + (size_t)cells * g.es;
    vp_status s = VP_OK;
    for (int64_t b = 0; b < g.B && !s; b++)
        for (int64_t h = 0; h < g.H && !s; h++) {
            int64_t bh = b * g.H + h;
            const void *kb = at(k->data, &g, bh * g.T * g.D), *vb = at(v->data, &g, bh * g.T * g.Dv);
            const void *lse_in = (const char *)lse->data + (size_t)(bh * g.S) * vp_dtype_size(lse->dtype);
            for (int64_t i0 = 0; i0 < g.S && !s; i0 += ROWS) {
                int64_t r = g.S - i0 < ROWS ? g.S - i0 : ROWS, cols = block_cols(&g, i0, r);
                int64_t qo = (bh * g.S + i0) * g.D, yo = y_row(&g, b, h, i0);
                s = block_probs(n, &g, b, h, i0, r, cols, q->data, k->data, p, lse_in, NULL, err);
                if (!s) s = vp_lin_gemm(n, g.dt, 0, 1, r, cols, g.Dv, 1.0, at(dy->data, &g, yo), g.yld, vb, g.Dv, 0.0, ds, g.T, err);
                for (int64_t ii = 0; ii < r && !s; ii++) {
                    double d = 0;
                    for (int64_t c = 0; c < g.Dv; c++)
                        d += vp_load_wide(dy->data, g.dt, yo + ii * g.yld + c) * vp_load_wide(y->data, g.dt, yo + ii * g.yld + c);
                    for (int64_t j = 0; j < cols; j++) {
                        int64_t e = ii * g.T + j;
                        vp_store_wide(ds, g.dt, e, vp_load_wide(p, g.dt, e) * (vp_load_wide(ds, g.dt, e) - d));
                    }
                }
                if (!s && dq)
                    s = vp_lin_gemm(n, g.dt, 0, 0, r, g.D, cols, g.scale, ds, g.T, kb, g.D, 0.0,
                                    (char *)dq->data + (size_t)qo * g.es, g.D, err);
                if (!s && dk)
                    s = vp_lin_gemm(n, g.dt, 1, 0, cols, g.D, r, g.scale, ds, g.T, at(q->data, &g, qo), g.D, 1.0,
                                    (char *)dk->data + (size_t)(bh * g.T * g.D) * g.es, g.D, err);
                if (!s && dv)
                    s = vp_lin_gemm(n, g.dt, 1, 0, cols, g.Dv, r, 1.0, p, g.T, at(dy->data, &g, yo), g.yld, 1.0,
                                    (char *)dv->data + (size_t)(bh * g.T * g.Dv) * g.es, g.Dv, err);
            }
        }
    free(p);
    return s;
}
