/* What the LSTM and GRU kernels share (k_recurrent.c, k_recurrent_gru.c; k_recurrent.h
 * says what they compute): the geometry of a node, each row's time at a step, element
 * offsets into X, Y, the states and the step-major saved tensors, scratch, and the
 * input side of a backward step. */
#ifndef VP_K_RECURRENT_UTIL_H
#define VP_K_RECURRENT_UTIL_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_util.h"
#include "k_linalg.h"
#include "k_recurrent.h"

typedef struct rnn {
    vp_dtype dt;
    size_t es;
    int64_t S, N, I, H, D;
    int layout, lbr, reverse[2];
    const int32_t *len; /* NULL: every row runs S steps */
} rnn;

static inline double sigm(double x) { return 1.0 / (1.0 + exp(-x)); }

static inline const vp_tensor *opt_in(const vp_node *n, const vp_tensor *const *in, int k) {
    return k < n->n_inputs ? in[k] : NULL;
}

static inline vp_tensor *opt_out(const vp_node *n, vp_tensor *const *out, int k) { return k < n->n_outputs ? out[k] : NULL; }

static inline vp_status rnn_of(const vp_node *n, const vp_tensor *x, const vp_tensor *r, const vp_tensor *sl, rnn *g,
                        vp_error *err) {
    g->dt = x->dtype;
    g->es = vp_dtype_size(x->dtype);
    g->layout = (int)vp_attr_int(n, "layout", 0);
    g->S = x->dims[g->layout ? 1 : 0];
    g->N = x->dims[g->layout ? 0 : 1];
    g->I = x->dims[2];
    g->D = r->dims[0];
    g->H = r->dims[2];
    g->lbr = (int)vp_attr_int(n, "linear_before_reset", 0);
    g->reverse[0] = !strcmp(vp_attr_string(n, "direction", "forward"), "reverse");
    g->reverse[1] = 1;
    g->len = sl ? (const int32_t *)sl->data : NULL;
    for (int64_t b = 0; g->len && b < g->N; b++)
        if (g->len[b] < 0 || g->len[b] > g->S)
            return vp_node_fail(err, VP_ERR_INVALID, n, "sequence_lens[%lld] = %d is outside [0, %lld]", (long long)b,
                                (int)g->len[b], (long long)g->S);
    return VP_OK;
}

/* The time row b reads at step s of direction d, or -1 when its sequence has ended. */
static inline int64_t time_of(const rnn *g, int d, int64_t s, int64_t b) {
    int64_t len = g->len ? g->len[b] : g->S;
    if (s >= len) return -1;
    return g->reverse[d] ? len - 1 - s : s;
}

/* Element offsets of a row in X, Y, the [D, N, H] states and the step-major saved tensors. */
static inline int64_t x_at(const rnn *g, int64_t t, int64_t b) { return (g->layout ? b * g->S + t : t * g->N + b) * g->I; }
static inline int64_t y_at(const rnn *g, int64_t t, int d, int64_t b) {
    return (g->layout ? (b * g->S + t) * g->D + d : (t * g->D + d) * g->N + b) * g->H;
}
static inline int64_t h_at(const rnn *g, int d, int64_t b) { return (g->layout ? b * g->D + d : d * g->N + b) * g->H; }
static inline int64_t sv_at(const rnn *g, int64_t s, int d, int64_t b, int64_t w) { return ((s * g->D + d) * g->N + b) * w; }

static inline void *el(const void *base, const rnn *g, int64_t elems) { return (char *)base + (size_t)elems * g->es; }

/* Copies n elements of row src (NULL: zeros) into dst. */
static inline void row_copy(const rnn *g, void *dst, const void *src, int64_t n) {
    if (src) memcpy(dst, src, (size_t)n * g->es);
    else memset(dst, 0, (size_t)n * g->es);
}

static inline void zero_out(vp_tensor *t) {
    if (t) memset(t->data, 0, vp_tensor_nbytes(t));
}

/* Scratch: k blocks of the given element counts, one allocation. */
typedef struct scratch {
    void *mem;
    void *p[12];
} scratch;

static inline vp_status scratch_get(const vp_node *n, const rnn *g, scratch *sc, int k, const int64_t *count, vp_error *err) {
    int64_t total = 0;
    for (int i = 0; i < k; i++) total += count[i] ? count[i] : 1;
    sc->mem = calloc((size_t)total, g->es > sizeof(double) ? g->es : sizeof(double));
    if (!sc->mem) return vp_node_fail(err, VP_ERR_NOMEM, n, "out of memory for recurrent scratch");
    int64_t off = 0;
    for (int i = 0; i < k; i++) {
        sc->p[i] = (char *)sc->mem + (size_t)off * sizeof(double);
        off += count[i] ? count[i] : 1;
    }
    return VP_OK;
}

/* Rows of X at step s into xs (zeros for ended rows); returns the active-row count. */
static inline int64_t gather_x(const rnn *g, const vp_tensor *x, int d, int64_t s, void *xs) {
    int64_t active = 0;
    for (int64_t b = 0; b < g->N; b++) {
        int64_t t = time_of(g, d, s, b);
        row_copy(g, el(xs, g, b * g->I), t < 0 ? NULL : el(x->data, g, x_at(g, t, b)), g->I);
        active += t >= 0;
    }
    return active;
}

static inline double bias(const vp_tensor *b, const rnn *g, int d, int64_t k, int64_t G) {
    if (!b) return 0;
    int64_t o = d * 2 * G * g->H;
    return vp_load_wide(b->data, g->dt, o + k) + vp_load_wide(b->data, g->dt, o + G * g->H + k);
}

/* Rows of H_prev at step s: the previous step's Y, or the initial state (NULL: 0). */
static inline void gather_hprev(const rnn *g, const vp_tensor *y, const vp_tensor *h0, int d, int64_t s, void *hp) {
    for (int64_t b = 0; b < g->N; b++) {
        int64_t t = time_of(g, d, s, b);
        const void *src = NULL;
        if (t >= 0) src = s ? el(y->data, g, y_at(g, time_of(g, d, s - 1, b), d, b)) : h0 ? el(h0->data, g, h_at(g, d, b)) : NULL;
        row_copy(g, el(hp, g, b * g->H), src, g->H);
    }
}

/* The input side of a backward step, shared by LSTM and GRU: dX rows += dA W (scattered
 * to each row's time) and dW += dA^T X_s, dA being [N, GH]. */
static inline vp_status step_dx_dw(const vp_node *n, const rnn *g, int d, int64_t s, const void *dax, int64_t GH, const void *wd,
                            const void *xs, vp_tensor *dx, vp_tensor *dw, void *dxs, vp_error *err) {
    vp_status st_ = VP_OK;
    if (dx) {
        st_ = vp_lin_gemm(n, g->dt, 0, 0, g->N, g->I, GH, 1.0, dax, GH, wd, g->I, 0.0, dxs, g->I, err);
        for (int64_t b = 0; b < g->N && !st_; b++) {
            int64_t t = time_of(g, d, s, b);
            if (t < 0) continue;
            for (int64_t j = 0; j < g->I; j++) {
                int64_t q = x_at(g, t, b) + j;
                vp_store_wide(dx->data, g->dt, q, vp_load_wide(dx->data, g->dt, q) + vp_load_wide(dxs, g->dt, b * g->I + j));
            }
        }
    }
    if (dw && !st_)
        st_ = vp_lin_gemm(n, g->dt, 1, 0, GH, g->I, g->N, 1.0, dax, GH, xs, g->I, 1.0, el(dw->data, g, d * GH * g->I), g->I,
                          err);
    return st_;
}

static inline void store_bias_grad(const rnn *g, vp_tensor *db, int d, const double *acc_w, const double *acc_r, int64_t GH) {
    if (!db) return;
    for (int64_t k = 0; k < GH; k++) {
        vp_store_wide(db->data, g->dt, d * 2 * GH + k, acc_w[k]);
        vp_store_wide(db->data, g->dt, d * 2 * GH + GH + k, acc_r[k]);
    }
}

#endif
