/* Attention and AttentionGrad on the CPU (k_attention.h).
 *
 * For each (batch, head) and each block of up to ROWS query rows i0..i0+r:
 *   forward   A = scale * Q_blk K^T, under softcap c A = c tanh(A / c), then (+ mask,
 *             causal), per row m = max, LSE = m + log sum exp(A - m), P = exp(A - LSE)
 *             in the scratch, Y_blk = P V;
 *   backward  P again from A and the saved LSE, dP = dY_blk V^T, D_i = sum dY_i * Y_i,
 *             dS = P * (dP - D), where the mask is trained dMask += dS at the mask's
 *             own (broadcast) positions, under softcap dS *= 1 - tanh^2 (the tanh kept
 *             from recomputing A, in a third scratch block), dQ_blk = scale dS K,
 *             dK += scale dS^T Q_blk, dV += P^T dY_blk.
 * Y and dY are [B, H, S, Dv], or [B, S, H, Dv] under y_bshd: the same rows at another
 * stride, so the two layouts give the same bits.  K and V have Hk heads (grouped-query
 * attention: Hk divides H, head h reads key/value head h / (H / Hk)); Q (and dQ) may be
 * [B, S, H, D] (q_bshd) and K, V (dK, dV) [B, T, Hk, D] (kv_bshd): rows at another
 * stride again, the products reading them in place; the backward's
 * unit of work is a key/value head with its group of query heads, in head order, so
 * dK and dV sum over the group on one thread in a fixed order.
 * Under causal, a block only looks at the columns j < i0 + r (the rest are masked for
 * every row of it), so the causal forward and backward do about half the work.
 * Under dropout the forward multiplies the block's P by M / (1 - r) before P V, and the
 * backward dP' = dY V^T by it before dS, and P by it before dV: M drawn again, never
 * kept (runtime/dropout_rng.h, at P's index, as the decomposed Dropout draws it).
 *
 * The results depend only on the inputs and the block size, never on timing: the
 * planned and the naive executor agree bit for bit.  On the fast path (oneDNN's sgemm
 * selected) the (batch, head) pairs are split among the threads: each pair writes only
 * its own rows of Y, LSE, dQ, dK and dV, so no sum crosses pairs, and every product of
 * a pair runs on the thread that owns it (oneDNN's sgemm inside a parallel region is
 * sequential).  The reference path keeps one pair at a time, OpenBLAS's threads inside.
 * A trained mask that broadcasts along the batch (or the heads) sums the pairs of every
 * batch entry (or head) into one element: the unit of work then holds them all, in
 * order, so the mask's gradient too has one summation order whatever the threads. */
#include "k_attention.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_par.h"
#include "cpu_util.h"
#include "dn.h"
#include "dropout_rng.h"
#include "k_elementwise.h"
#include "k_linalg.h"
#include "k_vmath.h"

enum { ROWS = 64 };

typedef struct geom {
    vp_dtype dt;
    size_t es;               /* bytes per element of dt */
    int64_t B, H, S, T, D, Dv;
    int64_t Hk, rep;         /* key/value heads, query heads per key/value head */
    double scale;
    double softcap;          /* c > 0: scores c tanh(A / c) before the mask; 0: none */
    int causal;
    int zero_rows;           /* a row masked everywhere (-inf) gives 0s (zero_masked_rows) */
    int bshd;                /* Y and dY [B, S, H, Dv] (attribute y_bshd) */
    int64_t yld;             /* their row stride: Dv, or H * Dv under bshd */
    int qbshd, kvbshd;       /* Q and dQ [B, S, H, D]; K, V, dK, dV [B, T, Hk, D] */
    int64_t qld, kld, vld;   /* row strides of Q, K, V: D, D, Dv, or times the heads */
    const void *mask;        /* NULL when none */
    int64_t mstr[4];         /* mask strides against [B, H, S, T], 0 where broadcast */
    int64_t ub, uh;          /* units of work: batch entries x key/value heads of their own */
    int drop;                /* attribute dropout > 0: P dropped by M (runtime/dropout_rng.h) */
    uint64_t drop_key;
    uint32_t drop_thr;
    double drop_scale;       /* 1 / (1 - dropout), on the elements kept */
    int drop_ranks, drop_rank; /* this rank's heads of the whole tensor's (vplan_ranks, vplan_rank) */
} geom;

static const void *at(const void *base, const geom *g, int64_t elems) {
    return (const char *)base + (size_t)elems * g->es;
}

static void geom_of(const vp_node *n, const vp_tensor *q, const vp_tensor *k, const vp_tensor *v, const vp_tensor *mask,
                    int64_t step, geom *g) {
    g->dt = q->dtype;
    g->es = vp_dtype_size(q->dtype);
    g->qbshd = vp_attr_int(n, "q_bshd", 0) != 0;
    g->kvbshd = vp_attr_int(n, "kv_bshd", 0) != 0;
    g->B = q->dims[0];
    g->H = q->dims[g->qbshd ? 2 : 1]; /* the logical [B, H, S, D] of either layout */
    g->S = q->dims[g->qbshd ? 1 : 2];
    g->D = q->dims[3];
    g->T = k->dims[g->kvbshd ? 1 : 2];
    g->Hk = k->dims[g->kvbshd ? 2 : 1] ? k->dims[g->kvbshd ? 2 : 1] : 1;
    g->rep = g->H / g->Hk ? g->H / g->Hk : 1;
    g->Dv = v->dims[3];
    g->scale = vp_attr_float(n, "scale", g->D ? (float)(1.0 / sqrt((double)g->D)) : 1.0f);
    g->softcap = vp_attr_float(n, "softcap", 0.0f);
    if (!(g->softcap > 0)) g->softcap = 0;
    g->causal = vp_attr_int(n, "causal", 0) != 0;
    g->zero_rows = vp_attr_int(n, "zero_masked_rows", 0) != 0;
    g->bshd = vp_attr_int(n, "y_bshd", 0) != 0;
    g->yld = g->bshd ? g->H * g->Dv : g->Dv;
    g->qld = g->qbshd ? g->H * g->D : g->D;
    g->kld = g->kvbshd ? g->Hk * g->D : g->D;
    g->vld = g->kvbshd ? g->Hk * g->Dv : g->Dv;
    g->mask = mask ? mask->data : NULL;
    if (mask) vp_broadcast_strides(mask, 4, g->mstr);
    else memset(g->mstr, 0, sizeof g->mstr);
    g->ub = g->B;
    g->uh = g->Hk;
    double r = vp_attr_float(n, "dropout", 0.0f);
    g->drop = r > 0;
    g->drop_thr = vp_dropout_threshold(r);
    g->drop_scale = g->drop ? 1.0 / (1.0 - r) : 1.0;
    g->drop_key = g->drop ? vp_dropout_node_key(n, step) : 0;
    g->drop_ranks = (int)vp_attr_int(n, "vplan_ranks", 1);
    g->drop_rank = (int)vp_attr_int(n, "vplan_rank", 0);
}

/* Rows [r, cols] of pair (b, h)'s block from row i0 (stride T) times M / (1 - dropout):
 * P into the dropped P' (the forward's, and dV's operand), or dP' into dP.  M is drawn at
 * P's index in [B, H, S, T], the whole tensor's under a split of the heads. */
static void drop_block(const geom *g, int64_t b, int64_t h, int64_t i0, int64_t r, int64_t cols, void *buf) {
    uint64_t chunk = (uint64_t)(g->H * g->S * g->T);
    float scale_f = (float)g->drop_scale;
    for (int64_t ii = 0; ii < r; ii++) {
        uint64_t row = (uint64_t)(((b * g->H + h) * g->S + i0 + ii) * g->T);
        for (int64_t jj = 0; jj < cols; jj++) {
            int keep = vp_dropout_keeps(g->drop_key, vp_dropout_global_index(row + (uint64_t)jj, chunk, g->drop_ranks,
                                                                              g->drop_rank), g->drop_thr);
            int64_t el = ii * g->T + jj;
            if (g->dt == VP_F32) ((float *)buf)[el] = keep ? ((float *)buf)[el] * scale_f : 0.0f;
            else vp_store_wide(buf, g->dt, el, keep ? vp_load_wide(buf, g->dt, el) * g->drop_scale : 0.0);
        }
    }
}

/* The units of work when the mask's gradient is written: a batch entry (a key/value
 * head) is a unit of its own only where the mask has one of its own, else all of them
 * sum into the same elements and go together. */
static void units_for_dmask(geom *g) {
    if (g->B > 1 && g->mstr[0] == 0) g->ub = 1;
    if (g->H > 1 && g->mstr[1] == 0) g->uh = 1;
}

/* A unit's (batch, query head) pairs, in order: unit_pairs() of them in every unit, the
 * k-th of unit u being unit_pair(g, u, k), as b * H + h. */
static int64_t unit_pairs(const geom *g) { return (g->B / g->ub) * (g->Hk / g->uh) * g->rep; }
static int64_t unit_pair(const geom *g, int64_t u, int64_t k) {
    int64_t per_b = (g->Hk / g->uh) * g->rep; /* query heads of the unit per batch entry */
    int64_t b = (g->ub == 1 ? 0 : u / g->uh) + k / per_b;
    int64_t h = (g->uh == 1 ? 0 : (u % g->uh) * g->rep) + k % per_b;
    return b * g->H + h;
}

/* Element offsets of row i of query pair (b, h) in Q and dQ, and of row 0 of the
 * key/value pair query head h reads (h / rep) in K, dK and V, dV. */
static int64_t q_row(const geom *g, int64_t b, int64_t h, int64_t i) {
    return g->qbshd ? ((b * g->S + i) * g->H + h) * g->D : ((b * g->H + h) * g->S + i) * g->D;
}
static int64_t k_base(const geom *g, int64_t b, int64_t h) {
    int64_t kh = h / g->rep;
    return g->kvbshd ? b * g->T * g->Hk * g->D + kh * g->D : (b * g->Hk + kh) * g->T * g->D;
}
static int64_t v_base(const geom *g, int64_t b, int64_t h) {
    int64_t kh = h / g->rep;
    return g->kvbshd ? b * g->T * g->Hk * g->Dv + kh * g->Dv : (b * g->Hk + kh) * g->T * g->Dv;
}

/* Element offset of row i of pair (b, h) in Y and dY. */
static int64_t y_row(const geom *g, int64_t b, int64_t h, int64_t i) {
    return g->bshd ? ((b * g->S + i) * g->H + h) * g->Dv : ((b * g->H + h) * g->S + i) * g->Dv;
}

/* Columns a block starting at row i0 with r rows can see. */
static int64_t block_cols(const geom *g, int64_t i0, int64_t r) {
    return g->causal && i0 + r < g->T ? i0 + r : g->T;
}

/* A row whose every score its mask filled with a finite lowest (torch.finfo.min): its
 * LSE is that fill, the row's log-sum lost to rounding (3.4e38 + log 8 is 3.4e38), so
 * exp(A - LSE) would be 1 everywhere.  Such a row's probabilities are computed from its
 * own max and sum, as Softmax computes them (uniform over the filled entries). */
#define FILLED_EVERYWHERE(lse) ((lse) <= -1e30 && (lse) > -INFINITY)

/* Soft-capping of rows [r, cols] of float32 scores (stride T): A = c tanh(A / c), as
 * Div, Tanh and Mul compute it in float32; tanh(A / c) into t (the same layout) when the
 * backward wants it for the derivative 1 - tanh^2. */
static void f32_softcap(const geom *g, int64_t r, int64_t cols, float *sc, float *t) {
    float c = (float)g->softcap;
    for (int64_t ii = 0; ii < r; ii++)
        for (int64_t j = 0; j < cols; j++) {
            float x = tanhf(sc[ii * g->T + j] / c);
            if (t) t[ii * g->T + j] = x;
            sc[ii * g->T + j] = c * x;
        }
}

/* block_probs' rows in float32, exp vectorised (k_vmath.h): the row log-sum-exp is
 * rounded to float32 before it scales the row, so that the forward's probabilities are
 * the ones the backward recomputes from the saved LSE. */
static void f32_probs(const geom *g, int64_t b, int64_t h, int64_t i0, int64_t r, int64_t cols, void *sc,
                      const void *lse_in, void *lse_out) {
    for (int64_t ii = 0; ii < r; ii++) {
        int64_t i = i0 + ii, seen = g->causal ? (i + 1 < cols ? i + 1 : cols) : cols;
        int64_t moff = b * g->mstr[0] + h * g->mstr[1] + i * g->mstr[2];
        float *row = (float *)sc + ii * g->T, m = -INFINITY;
        for (int64_t j = 0; j < seen; j++) {
            float a = row[j];
            if (g->mask) row[j] = a = a + ((const float *)g->mask)[moff + j * g->mstr[3]];
            if (a > m) m = a;
        }
        float lse;
        double sum = -1;
        if (lse_in) {
            lse = ((const float *)lse_in)[i];
        } else if (g->zero_rows && m == -INFINITY) {
            lse = INFINITY;
            ((float *)lse_out)[i] = lse;
        } else {
            vp_vm_exp_sum_f32(row, m, seen, &sum);
            lse = (float)(m + log(sum)); /* -inf for a row masked everywhere, NaN below: as Softmax */
            ((float *)lse_out)[i] = lse;
        }
        if (lse == INFINITY) { /* zero_masked_rows: a row masked everywhere has probabilities 0 */
            memset(row, 0, (size_t)seen * sizeof *row);
        } else if (FILLED_EVERYWHERE(lse)) {
            if (sum < 0) vp_vm_exp_sum_f32(row, m, seen, &sum);
            vp_vm_exp_shift_f32(row, m, row, seen);
            for (int64_t j = 0; j < seen; j++) row[j] = (float)(row[j] / sum);
        } else {
            vp_vm_exp_shift_f32(row, lse, row, seen);
        }
        memset(row + seen, 0, (size_t)(cols - seen) * sizeof *row);
    }
}

/* Scores of rows i0..i0+r of pair (b, h) into sc ([r, T], row stride T), turned into
 * probabilities.  With lse_in (the pair's S entries) the row log-sum-exp is read from
 * it; otherwise it is computed and stored into lse_out (the same).  Masked entries get
 * probability 0.  Under softcap, tanh(A / c) goes into t (sc's layout) where t is not
 * NULL. */
static vp_status block_probs(const vp_node *n, const geom *g, int64_t b, int64_t h, int64_t i0, int64_t r, int64_t cols,
                             const void *q, const void *k, void *sc, void *t, const void *lse_in, void *lse_out,
                             vp_error *err) {
    vp_status s = vp_lin_gemm(n, g->dt, 0, 1, r, cols, g->D, g->scale, at(q, g, q_row(g, b, h, i0)), g->qld,
                              at(k, g, k_base(g, b, h)), g->kld, 0.0, sc, g->T, err);
    if (s) return s;
    vp_dtype lt = g->dt == VP_F64 ? VP_F64 : VP_F32;
    if (g->dt == VP_F32) {
        if (g->softcap) f32_softcap(g, r, cols, sc, t);
        f32_probs(g, b, h, i0, r, cols, sc, lse_in, lse_out);
        return VP_OK;
    }
    for (int64_t el = 0; g->softcap && el < r * g->T; el++) {
        if (el % g->T >= cols) continue;
        double x = tanh(vp_load_wide(sc, g->dt, el) / g->softcap);
        if (t) vp_store_wide(t, g->dt, el, x);
        vp_store_wide(sc, g->dt, el, g->softcap * x);
    }
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
        } else if (g->zero_rows && m == -INFINITY) {
            lse = INFINITY; /* exp(a - lse) is 0 for every a, -inf too */
            vp_store_wide(lse_out, lt, i, lse);
        } else {
            double sum = 0;
            for (int64_t j = 0; j < seen; j++) sum += exp(vp_load_wide(sc, g->dt, row + j) - m);
            lse = m + log(sum); /* -inf for a row masked everywhere, NaN below: as Softmax */
            vp_store_wide(lse_out, lt, i, lse);
        }
        double sum = 0;
        if (FILLED_EVERYWHERE(lse))
            for (int64_t j = 0; j < seen; j++) sum += exp(vp_load_wide(sc, g->dt, row + j) - m);
        for (int64_t j = 0; j < seen; j++) {
            double a = vp_load_wide(sc, g->dt, row + j);
            vp_store_wide(sc, g->dt, row + j, lse == INFINITY ? 0.0 : FILLED_EVERYWHERE(lse) ? exp(a - m) / sum : exp(a - lse));
        }
        for (int64_t j = seen; j < cols; j++) vp_store_wide(sc, g->dt, row + j, 0.0);
    }
    return VP_OK;
}

/* One kernel call: its tensors, and the first failure of any thread. */
typedef struct job {
    const vp_node *n;
    geom g;
    const vp_tensor *q, *k, *v, *dy, *y, *lse;
    vp_tensor *out0, *dk, *dv, *lse_out; /* forward: out0 is Y; backward: dQ */
    vp_tensor *dmask;                    /* backward: the mask's gradient, or NULL */
    int fast;                            /* oneDNN's sgemm, selected on this thread by the caller */
    atomic_int failed;
    vp_error *err;
} job;

static void job_fail(job *j, vp_status s, const vp_error *e) {
    int none = 0;
    if (atomic_compare_exchange_strong(&j->failed, &none, (int)s) && j->err) *j->err = *e;
}

/* Runs units [0, ub*uh) (a key/value pair and its group of query heads, or more:
 * units_for_dmask) through body: split among the threads on the fast path, in order on
 * this thread on the reference path.  Returns the first failure. */
static vp_status job_run(job *j, vp_par_body body) {
    int64_t units = j->g.ub * j->g.uh;
    int64_t cost = (j->g.S * j->g.T + 1) * (j->g.D + j->g.Dv + 1) * unit_pairs(&j->g);
    if (j->fast) vp_par_for(units, cost, body, j);
    else body(0, units, j);
    return (vp_status)atomic_load(&j->failed);
}

static void forward_pairs(int64_t lo, int64_t hi, void *ctx) {
    job *j = ctx;
    const geom *g = &j->g;
    vp_dn_gemm_select(j->fast); /* the selection is per thread */
    vp_error e;
    void *sc = vp_lin_alloc(ROWS * (g->T ? g->T : 1), g->es), *own_lse = NULL;
    if (!j->lse_out) own_lse = vp_lin_alloc(g->S ? g->S : 1, sizeof(double)); /* one pair's rows at a time */
    vp_status s = !sc || (!j->lse_out && !own_lse) ? vp_node_fail(&e, VP_ERR_NOMEM, j->n, "out of memory for attention scratch")
                                                   : VP_OK;
    for (int64_t bh = lo * g->rep; bh < hi * g->rep && !s && !atomic_load(&j->failed); bh++) {
        int64_t b = bh / g->H, h = bh % g->H; /* the forward's units are always pairs */
        size_t lsz = g->dt == VP_F64 ? 8 : 4;
        void *lse_out = j->lse_out ? (char *)j->lse_out->data + (size_t)(bh * g->S) * lsz : own_lse;
        for (int64_t i0 = 0; i0 < g->S && !s; i0 += ROWS) {
            int64_t r = g->S - i0 < ROWS ? g->S - i0 : ROWS, cols = block_cols(g, i0, r);
            s = block_probs(j->n, g, b, h, i0, r, cols, j->q->data, j->k->data, sc, NULL, NULL, lse_out, &e);
            if (!s && g->drop) drop_block(g, b, h, i0, r, cols, sc);
            if (!s)
                s = vp_lin_gemm(j->n, g->dt, 0, 0, r, g->Dv, cols, 1.0, sc, g->T, at(j->v->data, g, v_base(g, b, h)), g->vld,
                                0.0, (char *)j->out0->data + (size_t)y_row(g, b, h, i0) * g->es, g->yld, &e);
        }
    }
    if (s) job_fail(j, s, &e);
    free(sc);
    free(own_lse);
}

vp_status vp_cpu_attention(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    const vp_tensor *q = in[0], *k = in[1], *v = in[2], *mask = n->n_inputs > 3 ? in[3] : NULL;
    if (vp_lin_is_narrow(q->dtype)) return vp_lin_run_widened(vp_cpu_attention, n, in, out, err);
    job j = {.n = n, .q = q, .k = k, .v = v, .out0 = out[0], .lse_out = n->n_outputs > 1 ? out[1] : NULL, .err = err};
    geom_of(n, q, k, v, mask, vp_dropout_step(n, in, 4), &j.g);
    j.fast = vp_dn_gemm_selected();
    atomic_init(&j.failed, 0);
    return job_run(&j, forward_pairs);
}

/* dS = P * (dP - D) in place of dP, D_i = sum dY_i * Y_i in double: the general loop's
 * operations on float32 rows, without its per-element type dispatch. */
static void ds_f32(const geom *g, int64_t yo, int64_t r, int64_t cols, const float *dy, const float *y, const float *p,
                   float *ds) {
    for (int64_t ii = 0; ii < r; ii++) {
        const float *dyr = dy + yo + ii * g->yld, *yr = y + yo + ii * g->yld, *pr = p + ii * g->T;
        float *dr = ds + ii * g->T;
        double d = 0;
        for (int64_t c = 0; c < g->Dv; c++) d += (double)dyr[c] * (double)yr[c];
        for (int64_t jj = 0; jj < cols; jj++) dr[jj] = (float)((double)pr[jj] * ((double)dr[jj] - d));
    }
}

/* dMask += dS of rows i0..i0+r of pair (b, h) at the mask's own positions (its strides
 * are 0 along the axes it broadcasts, so those sum). */
static void add_dmask(const geom *g, int64_t b, int64_t h, int64_t i0, int64_t r, int64_t cols, const void *ds, void *dm) {
    for (int64_t ii = 0; ii < r; ii++) {
        int64_t moff = b * g->mstr[0] + h * g->mstr[1] + (i0 + ii) * g->mstr[2];
        if (g->dt == VP_F32) {
            const float *dr = (const float *)ds + ii * g->T;
            float *mr = (float *)dm + moff;
            for (int64_t jj = 0; jj < cols; jj++) mr[jj * g->mstr[3]] += dr[jj];
            continue;
        }
        for (int64_t jj = 0; jj < cols; jj++) {
            int64_t el = moff + jj * g->mstr[3];
            vp_store_wide(dm, g->dt, el, vp_load_wide(dm, g->dt, el) + vp_load_wide(ds, g->dt, ii * g->T + jj));
        }
    }
}

/* dS of the scores before the soft-capping: dS * (1 - tanh^2), tanh(A / c) in t. */
static void softcap_grad(const geom *g, int64_t r, int64_t cols, const void *t, void *ds) {
    for (int64_t ii = 0; ii < r; ii++) {
        if (g->dt == VP_F32) {
            const float *tr = (const float *)t + ii * g->T;
            float *dr = (float *)ds + ii * g->T;
            for (int64_t jj = 0; jj < cols; jj++) dr[jj] *= 1.0f - tr[jj] * tr[jj];
            continue;
        }
        for (int64_t jj = 0; jj < cols; jj++) {
            int64_t el = ii * g->T + jj;
            double x = vp_load_wide(t, g->dt, el);
            vp_store_wide(ds, g->dt, el, vp_load_wide(ds, g->dt, el) * (1.0 - x * x));
        }
    }
}

static void backward_pairs(int64_t lo, int64_t hi, void *ctx) {
    job *j = ctx;
    const geom *g = &j->g;
    vp_dn_gemm_select(j->fast);
    vp_error e;
    int64_t cells = ROWS * (g->T ? g->T : 1);
    char *p = vp_lin_alloc((g->softcap ? 3 : 2) * cells, g->es);
    vp_status s = p ? VP_OK : vp_node_fail(&e, VP_ERR_NOMEM, j->n, "out of memory for attention scratch");
    char *ds = p ? p + (size_t)cells * g->es : NULL, *tcap = p && g->softcap ? ds + (size_t)cells * g->es : NULL;
    const vp_node *n = j->n;
    const void *dyd = j->dy->data, *yd = j->y->data;
    vp_tensor *dq = j->out0, *dk = j->dk, *dv = j->dv;
    int64_t per_unit = unit_pairs(g);
    for (int64_t w = lo * per_unit; w < hi * per_unit && !s && !atomic_load(&j->failed); w++) {
        int64_t bh = unit_pair(g, w / per_unit, w % per_unit);
        int64_t b = bh / g->H, h = bh % g->H, kbo = k_base(g, b, h), vbo = v_base(g, b, h);
        const void *kb = at(j->k->data, g, kbo), *vb = at(j->v->data, g, vbo);
        const void *lse_in = (const char *)j->lse->data + (size_t)(bh * g->S) * vp_dtype_size(j->lse->dtype);
        for (int64_t i0 = 0; i0 < g->S && !s; i0 += ROWS) {
            int64_t r = g->S - i0 < ROWS ? g->S - i0 : ROWS, cols = block_cols(g, i0, r);
            int64_t qo = q_row(g, b, h, i0), yo = y_row(g, b, h, i0);
            s = block_probs(n, g, b, h, i0, r, cols, j->q->data, j->k->data, p, tcap, lse_in, NULL, &e);
            if (!s) s = vp_lin_gemm(n, g->dt, 0, 1, r, cols, g->Dv, 1.0, at(dyd, g, yo), g->yld, vb, g->vld, 0.0, ds, g->T, &e);
            if (!s && g->drop) drop_block(g, b, h, i0, r, cols, ds); /* dP' = dY V^T into dP */
            if (!s && g->dt == VP_F32) ds_f32(g, yo, r, cols, dyd, yd, (const float *)(void *)p, (float *)(void *)ds);
            for (int64_t ii = 0; ii < r && !s && g->dt != VP_F32; ii++) {
                double d = 0;
                for (int64_t c = 0; c < g->Dv; c++)
                    d += vp_load_wide(dyd, g->dt, yo + ii * g->yld + c) * vp_load_wide(yd, g->dt, yo + ii * g->yld + c);
                for (int64_t jj = 0; jj < cols; jj++) {
                    int64_t el = ii * g->T + jj;
                    vp_store_wide(ds, g->dt, el, vp_load_wide(p, g->dt, el) * (vp_load_wide(ds, g->dt, el) - d));
                }
            }
            if (!s && j->dmask) add_dmask(g, b, h, i0, r, cols, ds, j->dmask->data);
            if (!s && tcap) softcap_grad(g, r, cols, tcap, ds);
            if (!s && dq)
                s = vp_lin_gemm(n, g->dt, 0, 0, r, g->D, cols, g->scale, ds, g->T, kb, g->kld, 0.0,
                                (char *)dq->data + (size_t)qo * g->es, g->qld, &e);
            if (!s && dk)
                s = vp_lin_gemm(n, g->dt, 1, 0, cols, g->D, r, g->scale, ds, g->T, at(j->q->data, g, qo), g->qld, 1.0,
                                (char *)dk->data + (size_t)kbo * g->es, g->kld, &e);
            if (!s && dv && g->drop) drop_block(g, b, h, i0, r, cols, p); /* dV reads the dropped P' */
            if (!s && dv)
                s = vp_lin_gemm(n, g->dt, 1, 0, cols, g->Dv, r, 1.0, p, g->T, at(dyd, g, yo), g->yld, 1.0,
                                (char *)dv->data + (size_t)vbo * g->es, g->vld, &e);
        }
    }
    if (s) job_fail(j, s, &e);
    free(p);
}

vp_status vp_cpu_attention_grad(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    const vp_tensor *dy = in[0], *q = in[1], *k = in[2], *v = in[3], *y = in[4], *lse = in[5];
    const vp_tensor *mask = n->n_inputs > 6 ? in[6] : NULL;
    if (vp_lin_is_narrow(q->dtype)) return vp_lin_run_widened(vp_cpu_attention_grad, n, in, out, err);
    job j = {.n = n, .q = q, .k = k, .v = v, .dy = dy, .y = y, .lse = lse, .out0 = out[0],
             .dk = n->n_outputs > 1 ? out[1] : NULL, .dv = n->n_outputs > 2 ? out[2] : NULL,
             .dmask = n->n_outputs > 3 && mask ? out[3] : NULL, .err = err};
    geom_of(n, q, k, v, mask, vp_dropout_step(n, in, 7), &j.g);
    if (j.dmask) {
        units_for_dmask(&j.g);
        memset(j.dmask->data, 0, vp_tensor_nbytes(j.dmask));
    }
    j.fast = vp_dn_gemm_selected();
    atomic_init(&j.failed, 0);
    if (j.dk) memset(j.dk->data, 0, vp_tensor_nbytes(j.dk));
    if (j.dv) memset(j.dv->data, 0, vp_tensor_nbytes(j.dv));
    return job_run(&j, backward_pairs);
}
