/* LSTM and its gradient on the CPU (k_recurrent.h; GRU in k_recurrent_gru.c).
 *
 * Forward, per direction and step s (row b at time t_b: s, or len_b - 1 - s when the
 * direction is reverse; rows whose sequence has ended keep their state and leave Y 0):
 *   A = X_s W^T + H R^T (+ biases), gates in double, new state written in the dtype.
 * The training forms also write, per step s (not time), C and the activated gates, so
 * the backward, stepping s from the last down, needs no recompute:
 *   dA = gate derivatives, dX_s = dA W, dW += dA^T X_s, dR += dA^T H_prev,
 *   dB += column sums, dH_prev = dA R (+ the direct paths).
 * Every sum runs in a fixed order, so planned and naive executions agree bit for bit. */
#include "k_recurrent_util.h"

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
                    double ai = vp_load_wide(a, dt, o) + bias(bt, &g, d, j, 4), ao = vp_load_wide(a, dt, o + H) + bias(bt, &g, d, H + j, 4),
                           af = vp_load_wide(a, dt, o + 2 * H) + bias(bt, &g, d, 2 * H + j, 4),
                           ac = vp_load_wide(a, dt, o + 3 * H) + bias(bt, &g, d, 3 * H + j, 4);
                    double cp = vp_load_wide(c, dt, b * H + j);
                    if (p) {
                        ai += vp_load_wide(p->data, dt, d * 3 * H + j) * cp;
                        af += vp_load_wide(p->data, dt, d * 3 * H + 2 * H + j) * cp;
                    }
                    double i = sigm(ai), f = sigm(af), cc = tanh(ac), cn = f * cp + i * cc;
                    if (p) ao += vp_load_wide(p->data, dt, d * 3 * H + H + j) * cn;
                    double og = sigm(ao), hn = og * tanh(cn);
                    vp_store_wide(c, dt, b * H + j, cn);
                    vp_store_wide(h, dt, b * H + j, hn);
                    if (y) vp_store_wide(y->data, dt, y_at(&g, t, d, b) + j, hn);
                    if (cs) vp_store_wide(cs->data, dt, sv_at(&g, st_, d, b, H) + j, cn);
                    if (gs) {
                        int64_t q = sv_at(&g, st_, d, b, GH) + j;
                        vp_store_wide(gs->data, dt, q, i), vp_store_wide(gs->data, dt, q + H, og);
                        vp_store_wide(gs->data, dt, q + 2 * H, f), vp_store_wide(gs->data, dt, q + 3 * H, cc);
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
                    double i = vp_load_wide(gs->data, dt, q), og = vp_load_wide(gs->data, dt, q + H), f = vp_load_wide(gs->data, dt, q + 2 * H),
                           cc = vp_load_wide(gs->data, dt, q + 3 * H);
                    double cn = vp_load_wide(cs->data, dt, sv_at(&g, st_, d, b, H) + j);
                    double cp = st_ ? vp_load_wide(cs->data, dt, sv_at(&g, st_ - 1, d, b, H) + j)
                                    : c0 ? vp_load_wide(c0->data, dt, h_at(&g, d, b) + j) : 0.0;
                    double dhv = vp_load_wide(dh, dt, b * H + j) + (dy ? vp_load_wide(dy->data, dt, y_at(&g, t, d, b) + j) : 0.0);
                    double tc = tanh(cn), dcv = vp_load_wide(dc, dt, b * H + j) + dhv * og * (1 - tc * tc);
                    double a_i = dcv * cc * i * (1 - i), a_o = dhv * tc * og * (1 - og), a_f = dcv * cp * f * (1 - f),
                           a_c = dcv * i * (1 - cc * cc);
                    vp_store_wide(da, dt, o, a_i), vp_store_wide(da, dt, o + H, a_o), vp_store_wide(da, dt, o + 2 * H, a_f), vp_store_wide(da, dt, o + 3 * H, a_c);
                    vp_store_wide(dc, dt, b * H + j, dcv * f);
                }
            }
            for (int64_t b = 0; b < N; b++) /* column sums in row order: fixed */
                for (int64_t k = 0; k < GH; k++) acc[k] += vp_load_wide(da, dt, b * GH + k);
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
