/* LSTM, GRU and their gradients on the CPU (k_recurrent.h).
 *
 * Forward, per direction and step s (row b at time t_b: s, or len_b - 1 - s when the
 * direction is reverse; rows whose sequence has ended keep their state and leave Y 0):
 *   A = X_s W^T + H R^T (+ biases), gates in double, new state written in the dtype.
 * The training forms also write, per step s (not time), C and the activated gates, so
 * the backward, stepping s from the last down, needs no recompute:
 *   dA = gate derivatives, dX_s = dA W, dW += dA^T X_s, dR += dA^T H_prev,
 *   dB += column sums, dH_prev = dA R (+ the direct paths).
 * Every sum runs in a fixed order, so planned and naive executions agree bit for bit. */
#include "k_recurrent.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "k_linalg.h"

typedef struct rnn {
    vp_dtype dt;
    size_t es;
    int64_t S, N, I, H, D;
    int layout, lbr, reverse[2];
    const int32_t *len; /* NULL: every row runs S steps */
} rnn;

static inline double ld(const void *p, vp_dtype t, int64_t i) {
    return t == VP_F32 ? (double)((const float *)p)[i] : ((const double *)p)[i];
}

static inline void st(void *p, vp_dtype t, int64_t i, double v) {
    if (t == VP_F32) ((float *)p)[i] = (float)v;
    else ((double *)p)[i] = v;
}

static inline double sigm(double x) { return 1.0 / (1.0 + exp(-x)); }

static const vp_tensor *opt_in(const vp_node *n, const vp_tensor *const *in, int k) {
    return k < n->n_inputs ? in[k] : NULL;
}

static vp_tensor *opt_out(const vp_node *n, vp_tensor *const *out, int k) { return k < n->n_outputs ? out[k] : NULL; }

static vp_status rnn_of(const vp_node *n, const vp_tensor *x, const vp_tensor *r, const vp_tensor *sl, rnn *g,
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
static int64_t time_of(const rnn *g, int d, int64_t s, int64_t b) {
    int64_t len = g->len ? g->len[b] : g->S;
    if (s >= len) return -1;
    return g->reverse[d] ? len - 1 - s : s;
}

/* Element offsets of a row in X, Y, the [D, N, H] states and the step-major saved tensors. */
static int64_t x_at(const rnn *g, int64_t t, int64_t b) { return (g->layout ? b * g->S + t : t * g->N + b) * g->I; }
static int64_t y_at(const rnn *g, int64_t t, int d, int64_t b) {
    return (g->layout ? (b * g->S + t) * g->D + d : (t * g->D + d) * g->N + b) * g->H;
}
static int64_t h_at(const rnn *g, int d, int64_t b) { return (g->layout ? b * g->D + d : d * g->N + b) * g->H; }
static int64_t sv_at(const rnn *g, int64_t s, int d, int64_t b, int64_t w) { return ((s * g->D + d) * g->N + b) * w; }

static void *el(const void *base, const rnn *g, int64_t elems) { return (char *)base + (size_t)elems * g->es; }

/* Copies n elements of row src (NULL: zeros) into dst. */
static void row_copy(const rnn *g, void *dst, const void *src, int64_t n) {
    if (src) memcpy(dst, src, (size_t)n * g->es);
    else memset(dst, 0, (size_t)n * g->es);
}

static void zero_out(vp_tensor *t) {
    if (t) memset(t->data, 0, vp_tensor_nbytes(t));
}

/* Scratch: k blocks of the given element counts, one allocation. */
typedef struct scratch {
    void *mem;
    void *p[12];
} scratch;

static vp_status scratch_get(const vp_node *n, const rnn *g, scratch *sc, int k, const int64_t *count, vp_error *err) {
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
static int64_t gather_x(const rnn *g, const vp_tensor *x, int d, int64_t s, void *xs) {
    int64_t active = 0;
    for (int64_t b = 0; b < g->N; b++) {
        int64_t t = time_of(g, d, s, b);
        row_copy(g, el(xs, g, b * g->I), t < 0 ? NULL : el(x->data, g, x_at(g, t, b)), g->I);
        active += t >= 0;
    }
    return active;
}

static double bias(const vp_tensor *b, const rnn *g, int d, int64_t k, int64_t G) {
    if (!b) return 0;
    int64_t o = d * 2 * G * g->H;
    return ld(b->data, g->dt, o + k) + ld(b->data, g->dt, o + G * g->H + k);
}

/* ---- LSTM ---- */

vp_status vp_cpu_lstm(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    if (vp_lin_is_narrow(in[0]->dtype)) return vp_lin_run_widened(vp_cpu_lstm, n, in, out, err);
    const vp_tensor *x = in[0], *w = in[1], *r = in[2], *bt = opt_in(n, in, 3), *h0 = opt_in(n, in, 5),
                    *c0 = opt_in(n, in, 6), *p = opt_in(n, in, 7);
    vp_tensor *y = opt_out(n, out, 0), *yh = opt_out(n, out, 1), *yc = opt_out(n, out, 2), *cs = opt_out(n, out, 3),
              *gs = opt_out(n, out, 4);
    rnn g;
    scratch sc;
    vp_status s = rnn_of(n, x, r, opt_in(n, in, 4), &g, err);
    int64_t N = g.N, H = g.H, I = g.I, GH = 4 * H;
    if (!s) s = scratch_get(n, &g, &sc, 4, (int64_t[]){N * I, N * GH, N * H, N * H}, err);
    if (s) return s;
    void *xs = sc.p[0], *a = sc.p[1], *h = sc.p[2], *c = sc.p[3];
    zero_out(y), zero_out(cs), zero_out(gs);
    vp_dtype dt = g.dt;
    for (int d = 0; d < g.D && !s; d++) {
        for (int64_t b = 0; b < N; b++) {
            row_copy(&g, el(h, &g, b * H), h0 ? el(h0->data, &g, h_at(&g, d, b)) : NULL, H);
            row_copy(&g, el(c, &g, b * H), c0 ? el(c0->data, &g, h_at(&g, d, b)) : NULL, H);
        }
        const void *wd = el(w->data, &g, d * GH * I), *rd = el(r->data, &g, d * GH * H);
        for (int64_t st_ = 0; st_ < g.S && !s; st_++) {
            if (!gather_x(&g, x, d, st_, xs)) break;
            s = vp_lin_gemm(n, dt, 0, 1, N, GH, I, 1.0, xs, I, wd, I, 0.0, a, GH, err);
            if (!s) s = vp_lin_gemm(n, dt, 0, 1, N, GH, H, 1.0, h, H, rd, H, 1.0, a, GH, err);
            for (int64_t b = 0; b < N && !s; b++) {
                int64_t t = time_of(&g, d, st_, b);
                if (t < 0) continue;
                for (int64_t j = 0; j < H; j++) {
                    int64_t o = b * GH + j;
                    double ai = ld(a, dt, o) + bias(bt, &g, d, j, 4), ao = ld(a, dt, o + H) + bias(bt, &g, d, H + j, 4),
                           af = ld(a, dt, o + 2 * H) + bias(bt, &g, d, 2 * H + j, 4),
                           ac = ld(a, dt, o + 3 * H) + bias(bt, &g, d, 3 * H + j, 4);
                    double cp = ld(c, dt, b * H + j);
                    if (p) {
                        ai += ld(p->data, dt, d * 3 * H + j) * cp;
                        af += ld(p->data, dt, d * 3 * H + 2 * H + j) * cp;
                    }
                    double i = sigm(ai), f = sigm(af), cc = tanh(ac), cn = f * cp + i * cc;
                    if (p) ao += ld(p->data, dt, d * 3 * H + H + j) * cn;
                    double og = sigm(ao), hn = og * tanh(cn);
                    st(c, dt, b * H + j, cn);
                    st(h, dt, b * H + j, hn);
                    if (y) st(y->data, dt, y_at(&g, t, d, b) + j, hn);
                    if (cs) st(cs->data, dt, sv_at(&g, st_, d, b, H) + j, cn);
                    if (gs) {
                        int64_t q = sv_at(&g, st_, d, b, GH) + j;
                        st(gs->data, dt, q, i), st(gs->data, dt, q + H, og);
                        st(gs->data, dt, q + 2 * H, f), st(gs->data, dt, q + 3 * H, cc);
                    }
                }
            }
        }
        for (int64_t b = 0; b < N; b++) {
            if (yh) row_copy(&g, el(yh->data, &g, h_at(&g, d, b)), el(h, &g, b * H), H);
            if (yc) row_copy(&g, el(yc->data, &g, h_at(&g, d, b)), el(c, &g, b * H), H);
        }
    }
    free(sc.mem);
    return s;
}

/* Rows of H_prev at step s: the previous step's Y, or the initial state (NULL: 0). */
static void gather_hprev(const rnn *g, const vp_tensor *y, const vp_tensor *h0, int d, int64_t s, void *hp) {
    for (int64_t b = 0; b < g->N; b++) {
        int64_t t = time_of(g, d, s, b);
        const void *src = NULL;
        if (t >= 0) src = s ? el(y->data, g, y_at(g, time_of(g, d, s - 1, b), d, b)) : h0 ? el(h0->data, g, h_at(g, d, b)) : NULL;
        row_copy(g, el(hp, g, b * g->H), src, g->H);
    }
}

/* The input side of a backward step, shared by LSTM and GRU: dX rows += dA W (scattered
 * to each row's time) and dW += dA^T X_s, dA being [N, GH]. */
static vp_status step_dx_dw(const vp_node *n, const rnn *g, int d, int64_t s, const void *dax, int64_t GH, const void *wd,
                            const void *xs, vp_tensor *dx, vp_tensor *dw, void *dxs, vp_error *err) {
    vp_status st_ = VP_OK;
    if (dx) {
        st_ = vp_lin_gemm(n, g->dt, 0, 0, g->N, g->I, GH, 1.0, dax, GH, wd, g->I, 0.0, dxs, g->I, err);
        for (int64_t b = 0; b < g->N && !st_; b++) {
            int64_t t = time_of(g, d, s, b);
            if (t < 0) continue;
            for (int64_t j = 0; j < g->I; j++) {
                int64_t q = x_at(g, t, b) + j;
                st(dx->data, g->dt, q, ld(dx->data, g->dt, q) + ld(dxs, g->dt, b * g->I + j));
            }
        }
    }
    if (dw && !st_)
        st_ = vp_lin_gemm(n, g->dt, 1, 0, GH, g->I, g->N, 1.0, dax, GH, xs, g->I, 1.0, el(dw->data, g, d * GH * g->I), g->I,
                          err);
    return st_;
}

static void store_bias_grad(const rnn *g, vp_tensor *db, int d, const double *acc_w, const double *acc_r, int64_t GH) {
    if (!db) return;
    for (int64_t k = 0; k < GH; k++) {
        st(db->data, g->dt, d * 2 * GH + k, acc_w[k]);
        st(db->data, g->dt, d * 2 * GH + GH + k, acc_r[k]);
    }
}

vp_status vp_cpu_lstm_grad(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    if (vp_lin_is_narrow(in[0]->dtype)) return vp_lin_run_widened(vp_cpu_lstm_grad, n, in, out, err);
    const vp_tensor *x = in[0], *w = in[1], *r = in[2], *h0 = opt_in(n, in, 5), *c0 = opt_in(n, in, 6), *y = in[7],
                    *cs = in[8], *gs = in[9], *dy = opt_in(n, in, 10), *dyh = opt_in(n, in, 11), *dyc = opt_in(n, in, 12);
    vp_tensor *dx = opt_out(n, out, 0), *dw = opt_out(n, out, 1), *dr = opt_out(n, out, 2), *db = opt_out(n, out, 3),
              *dh0 = opt_out(n, out, 5), *dc0 = opt_out(n, out, 6);
    rnn g;
    scratch sc;
    vp_status s = rnn_of(n, x, r, opt_in(n, in, 4), &g, err);
    int64_t N = g.N, H = g.H, I = g.I, GH = 4 * H;
    if (!s) s = scratch_get(n, &g, &sc, 8, (int64_t[]){N * I, N * H, N * GH, N * H, N * H, N * H, N * I, 2 * GH}, err);
    if (s) return s;
    void *xs = sc.p[0], *hp = sc.p[1], *da = sc.p[2], *dh = sc.p[3], *dc = sc.p[4], *dhn = sc.p[5], *dxs = sc.p[6];
    double *acc = sc.p[7];
    vp_dtype dt = g.dt;
    zero_out(dx), zero_out(dw), zero_out(dr);
    for (int d = 0; d < g.D && !s; d++) {
        for (int64_t b = 0; b < N; b++) {
            row_copy(&g, el(dh, &g, b * H), dyh ? el(dyh->data, &g, h_at(&g, d, b)) : NULL, H);
            row_copy(&g, el(dc, &g, b * H), dyc ? el(dyc->data, &g, h_at(&g, d, b)) : NULL, H);
        }
        memset(acc, 0, (size_t)GH * sizeof *acc);
        const void *wd = el(w->data, &g, d * GH * I), *rd = el(r->data, &g, d * GH * H);
        for (int64_t st_ = g.S - 1; st_ >= 0 && !s; st_--) {
            if (!gather_x(&g, x, d, st_, xs)) continue;
            gather_hprev(&g, y, h0, d, st_, hp);
            for (int64_t b = 0; b < N; b++) {
                int64_t t = time_of(&g, d, st_, b);
                if (t < 0) {
                    memset(el(da, &g, b * GH), 0, (size_t)GH * g.es);
                    continue;
                }
                for (int64_t j = 0; j < H; j++) {
                    int64_t q = sv_at(&g, st_, d, b, GH) + j, o = b * GH + j;
                    double i = ld(gs->data, dt, q), og = ld(gs->data, dt, q + H), f = ld(gs->data, dt, q + 2 * H),
                           cc = ld(gs->data, dt, q + 3 * H);
                    double cn = ld(cs->data, dt, sv_at(&g, st_, d, b, H) + j);
                    double cp = st_ ? ld(cs->data, dt, sv_at(&g, st_ - 1, d, b, H) + j)
                                    : c0 ? ld(c0->data, dt, h_at(&g, d, b) + j) : 0.0;
                    double dhv = ld(dh, dt, b * H + j) + (dy ? ld(dy->data, dt, y_at(&g, t, d, b) + j) : 0.0);
                    double tc = tanh(cn), dcv = ld(dc, dt, b * H + j) + dhv * og * (1 - tc * tc);
                    double a_i = dcv * cc * i * (1 - i), a_o = dhv * tc * og * (1 - og), a_f = dcv * cp * f * (1 - f),
                           a_c = dcv * i * (1 - cc * cc);
                    st(da, dt, o, a_i), st(da, dt, o + H, a_o), st(da, dt, o + 2 * H, a_f), st(da, dt, o + 3 * H, a_c);
                    st(dc, dt, b * H + j, dcv * f);
                }
            }
            for (int64_t b = 0; b < N; b++) /* column sums in row order: fixed */
                for (int64_t k = 0; k < GH; k++) acc[k] += ld(da, dt, b * GH + k);
            s = step_dx_dw(n, &g, d, st_, da, GH, wd, xs, dx, dw, dxs, err);
            if (!s && dr)
                s = vp_lin_gemm(n, dt, 1, 0, GH, H, N, 1.0, da, GH, hp, H, 1.0, el(dr->data, &g, d * GH * H), H, err);
            if (!s) s = vp_lin_gemm(n, dt, 0, 0, N, H, GH, 1.0, da, GH, rd, H, 0.0, dhn, H, err);
            for (int64_t b = 0; b < N && !s; b++)
                if (time_of(&g, d, st_, b) >= 0) row_copy(&g, el(dh, &g, b * H), el(dhn, &g, b * H), H);
        }
        store_bias_grad(&g, db, d, acc, acc, GH);
        for (int64_t b = 0; b < N; b++) {
            if (dh0) row_copy(&g, el(dh0->data, &g, h_at(&g, d, b)), el(dh, &g, b * H), H);
            if (dc0) row_copy(&g, el(dc0->data, &g, h_at(&g, d, b)), el(dc, &g, b * H), H);
        }
    }
    free(sc.mem);
    return s;
}

/* ---- GRU ---- */

vp_status vp_cpu_gru(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    if (vp_lin_is_narrow(in[0]->dtype)) return vp_lin_run_widened(vp_cpu_gru, n, in, out, err);
    const vp_tensor *x = in[0], *w = in[1], *r = in[2], *bt = opt_in(n, in, 3), *h0 = opt_in(n, in, 5);
    vp_tensor *y = opt_out(n, out, 0), *yh = opt_out(n, out, 1), *gs = opt_out(n, out, 2);
    rnn g;
    scratch sc;
    vp_status s = rnn_of(n, x, r, opt_in(n, in, 4), &g, err);
    int64_t N = g.N, H = g.H, I = g.I, GH = 3 * H, W = g.lbr ? 4 * H : 3 * H;
    if (!s) s = scratch_get(n, &g, &sc, 5, (int64_t[]){N * I, N * GH, N * GH, N * H, N * H}, err);
    if (s) return s;
    void *xs = sc.p[0], *ax = sc.p[1], *ah = sc.p[2], *h = sc.p[3], *rh = sc.p[4];
    vp_dtype dt = g.dt;
    zero_out(y), zero_out(gs);
    for (int d = 0; d < g.D && !s; d++) {
        for (int64_t b = 0; b < N; b++) row_copy(&g, el(h, &g, b * H), h0 ? el(h0->data, &g, h_at(&g, d, b)) : NULL, H);
        const void *wd = el(w->data, &g, d * GH * I), *rd = el(r->data, &g, d * GH * H);
        for (int64_t st_ = 0; st_ < g.S && !s; st_++) {
            if (!gather_x(&g, x, d, st_, xs)) break;
            s = vp_lin_gemm(n, dt, 0, 1, N, GH, I, 1.0, xs, I, wd, I, 0.0, ax, GH, err);
            if (!s) s = vp_lin_gemm(n, dt, 0, 1, N, g.lbr ? GH : 2 * H, H, 1.0, h, H, rd, H, 0.0, ah, GH, err);
            if (!s && !g.lbr) { /* the h~ gate reads (r * H_prev) R_h */
                for (int64_t b = 0; b < N; b++)
                    for (int64_t j = 0; j < H; j++) {
                        double rg = sigm(ld(ax, dt, b * GH + H + j) + ld(ah, dt, b * GH + H + j) + bias(bt, &g, d, H + j, 3));
                        st(rh, dt, b * H + j, rg * ld(h, dt, b * H + j));
                    }
                s = vp_lin_gemm(n, dt, 0, 1, N, H, H, 1.0, rh, H, el(rd, &g, 2 * H * H), H, 0.0, el(ah, &g, 2 * H), GH, err);
            }
            for (int64_t b = 0; b < N && !s; b++) {
                int64_t t = time_of(&g, d, st_, b);
                if (t < 0) continue;
                for (int64_t j = 0; j < H; j++) {
                    int64_t o = b * GH + j;
                    double z = sigm(ld(ax, dt, o) + ld(ah, dt, o) + bias(bt, &g, d, j, 3));
                    double rg = sigm(ld(ax, dt, o + H) + ld(ah, dt, o + H) + bias(bt, &g, d, H + j, 3));
                    double wbh = bt ? ld(bt->data, dt, d * 2 * GH + 2 * H + j) : 0.0;
                    double rbh = bt ? ld(bt->data, dt, d * 2 * GH + GH + 2 * H + j) : 0.0;
                    double rhh = ld(ah, dt, o + 2 * H) + rbh;
                    double hh = tanh(ld(ax, dt, o + 2 * H) + wbh + (g.lbr ? rg * rhh : rhh));
                    double hp = ld(h, dt, b * H + j), hn = (1 - z) * hh + z * hp;
                    st(h, dt, b * H + j, hn);
                    if (y) st(y->data, dt, y_at(&g, t, d, b) + j, hn);
                    if (gs) {
                        int64_t q = sv_at(&g, st_, d, b, W) + j;
                        st(gs->data, dt, q, z), st(gs->data, dt, q + H, rg), st(gs->data, dt, q + 2 * H, hh);
                        if (g.lbr) st(gs->data, dt, q + 3 * H, rhh);
                    }
                }
            }
        }
        for (int64_t b = 0; b < N && yh; b++) row_copy(&g, el(yh->data, &g, h_at(&g, d, b)), el(h, &g, b * H), H);
    }
    free(sc.mem);
    return s;
}

vp_status vp_cpu_gru_grad(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    if (vp_lin_is_narrow(in[0]->dtype)) return vp_lin_run_widened(vp_cpu_gru_grad, n, in, out, err);
    const vp_tensor *x = in[0], *w = in[1], *r = in[2], *h0 = opt_in(n, in, 5), *y = in[6], *gs = in[7],
                    *dy = opt_in(n, in, 8), *dyh = opt_in(n, in, 9);
    vp_tensor *dx = opt_out(n, out, 0), *dw = opt_out(n, out, 1), *dr = opt_out(n, out, 2), *db = opt_out(n, out, 3),
              *dh0 = opt_out(n, out, 5);
    rnn g;
    scratch sc;
    vp_status s = rnn_of(n, x, r, opt_in(n, in, 4), &g, err);
    int64_t N = g.N, H = g.H, I = g.I, GH = 3 * H, W = g.lbr ? 4 * H : 3 * H;
    if (!s)
        s = scratch_get(n, &g, &sc, 11,
                        (int64_t[]){N * I, N * H, N * GH, N * GH, N * H, N * H, N * I, 2 * GH, N * H, N * H, N * H}, err);
    if (s) return s;
    void *xs = sc.p[0], *hp = sc.p[1], *dax = sc.p[2], *dah = sc.p[3], *dh = sc.p[4], *dhd = sc.p[5], *dxs = sc.p[6];
    double *acc_w = sc.p[7], *acc_r = acc_w + GH;
    void *rhp = sc.p[8], *drhp = sc.p[9], *dhn = sc.p[10]; /* r * H_prev and its gradient (linear_before_reset = 0) */
    vp_dtype dt = g.dt;
    zero_out(dx), zero_out(dw), zero_out(dr);
    for (int d = 0; d < g.D && !s; d++) {
        for (int64_t b = 0; b < N; b++) row_copy(&g, el(dh, &g, b * H), dyh ? el(dyh->data, &g, h_at(&g, d, b)) : NULL, H);
        memset(acc_w, 0, (size_t)2 * GH * sizeof *acc_w);
        const void *wd = el(w->data, &g, d * GH * I), *rd = el(r->data, &g, d * GH * H);
        for (int64_t st_ = g.S - 1; st_ >= 0 && !s; st_--) {
            if (!gather_x(&g, x, d, st_, xs)) continue;
            gather_hprev(&g, y, h0, d, st_, hp);
            memset(dax, 0, (size_t)(N * GH) * g.es);
            memset(dah, 0, (size_t)(N * GH) * g.es);
            memset(rhp, 0, (size_t)(N * H) * g.es);
            for (int64_t b = 0; b < N; b++) {
                int64_t t = time_of(&g, d, st_, b);
                if (t < 0) continue;
                for (int64_t j = 0; j < H; j++) {
                    int64_t q = sv_at(&g, st_, d, b, W) + j, o = b * GH + j;
                    double z = ld(gs->data, dt, q), rg = ld(gs->data, dt, q + H), hh = ld(gs->data, dt, q + 2 * H);
                    double hpv = ld(hp, dt, b * H + j);
                    double dhv = ld(dh, dt, b * H + j) + (dy ? ld(dy->data, dt, y_at(&g, t, d, b) + j) : 0.0);
                    double a_h = dhv * (1 - z) * (1 - hh * hh), a_z = dhv * (hpv - hh) * z * (1 - z);
                    st(dax, dt, o, a_z), st(dax, dt, o + 2 * H, a_h), st(dah, dt, o, a_z);
                    st(dhd, dt, b * H + j, dhv * z);
                    if (g.lbr) {
                        double rhh = ld(gs->data, dt, q + 3 * H), a_r = a_h * rhh * rg * (1 - rg);
                        st(dax, dt, o + H, a_r), st(dah, dt, o + H, a_r), st(dah, dt, o + 2 * H, a_h * rg);
                    } else {
                        st(rhp, dt, b * H + j, rg * hpv);
                        st(dah, dt, o + 2 * H, a_h);
                    }
                }
            }
            if (!g.lbr) { /* d(r * H_prev) = dA_h R_h: to r's gate and to H_prev */
                s = vp_lin_gemm(n, dt, 0, 0, N, H, H, 1.0, el(dax, &g, 2 * H), GH, el(rd, &g, 2 * H * H), H, 0.0, drhp, H, err);
                for (int64_t b = 0; b < N && !s; b++) {
                    if (time_of(&g, d, st_, b) < 0) continue;
                    for (int64_t j = 0; j < H; j++) {
                        int64_t q = sv_at(&g, st_, d, b, W) + j, o = b * GH + j;
                        double rg = ld(gs->data, dt, q + H), g_ = ld(drhp, dt, b * H + j);
                        double a_r = g_ * ld(hp, dt, b * H + j) * rg * (1 - rg);
                        st(dax, dt, o + H, a_r), st(dah, dt, o + H, a_r);
                        st(dhd, dt, b * H + j, ld(dhd, dt, b * H + j) + g_ * rg);
                    }
                }
            }
            for (int64_t b = 0; b < N; b++)
                for (int64_t k = 0; k < GH; k++) {
                    acc_w[k] += ld(dax, dt, b * GH + k);
                    acc_r[k] += ld(dah, dt, b * GH + k);
                }
            if (!s) s = step_dx_dw(n, &g, d, st_, dax, GH, wd, xs, dx, dw, dxs, err);
            void *drd = dr ? el(dr->data, &g, d * GH * H) : NULL;
            int64_t kr = g.lbr ? GH : 2 * H; /* R rows that read H_prev itself */
            if (!s && dr) s = vp_lin_gemm(n, dt, 1, 0, kr, H, N, 1.0, dah, GH, hp, H, 1.0, drd, H, err);
            if (!s && dr && !g.lbr)
                s = vp_lin_gemm(n, dt, 1, 0, H, H, N, 1.0, el(dah, &g, 2 * H), GH, rhp, H, 1.0, el(drd, &g, 2 * H * H), H, err);
            if (!s) s = vp_lin_gemm(n, dt, 0, 0, N, H, kr, 1.0, dah, GH, rd, H, 0.0, dhn, H, err);
            for (int64_t b = 0; b < N && !s; b++)
                if (time_of(&g, d, st_, b) >= 0)
                    for (int64_t j = 0; j < H; j++)
                        st(dh, dt, b * H + j, ld(dhn, dt, b * H + j) + ld(dhd, dt, b * H + j));
        }
        store_bias_grad(&g, db, d, acc_w, acc_r, GH);
        for (int64_t b = 0; b < N && dh0; b++) row_copy(&g, el(dh0->data, &g, h_at(&g, d, b)), el(dh, &g, b * H), H);
    }
    free(sc.mem);
    return s;
}
