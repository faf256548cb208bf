/* GRU and its gradient on the CPU (k_recurrent.h).
 *
 * As LSTM (k_recurrent.c): forward per direction and step over every batch row, the
 * gate products through BLAS; the training form saves z, r, h~ and, under
 * linear_before_reset, the pre-reset term R_h H_prev + Rb_h, so the backward steps
 * from the last step down without recomputing a gate.  Without linear_before_reset the
 * h~ gate reads (r * H_prev) R_h: the backward takes d(r * H_prev) = dA_h R_h through
 * one more product, to r's gate and to H_prev. */
#include "k_recurrent_util.h"

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
                        double rg = sigm(vp_load_wide(ax, dt, b * GH + H + j) + vp_load_wide(ah, dt, b * GH + H + j) + bias(bt, &g, d, H + j, 3));
                        vp_store_wide(rh, dt, b * H + j, rg * vp_load_wide(h, dt, b * H + j));
                    }
                s = vp_lin_gemm(n, dt, 0, 1, N, H, H, 1.0, rh, H, el(rd, &g, 2 * H * H), H, 0.0, el(ah, &g, 2 * H), GH, err);
            }
            for (int64_t b = 0; b < N && !s; b++) {
                int64_t t = time_of(&g, d, st_, b);
                if (t < 0) continue;
                for (int64_t j = 0; j < H; j++) {
                    int64_t o = b * GH + j;
                    double z = sigm(vp_load_wide(ax, dt, o) + vp_load_wide(ah, dt, o) + bias(bt, &g, d, j, 3));
                    double rg = sigm(vp_load_wide(ax, dt, o + H) + vp_load_wide(ah, dt, o + H) + bias(bt, &g, d, H + j, 3));
                    double wbh = bt ? vp_load_wide(bt->data, dt, d * 2 * GH + 2 * H + j) : 0.0;
                    double rbh = bt ? vp_load_wide(bt->data, dt, d * 2 * GH + GH + 2 * H + j) : 0.0;
                    double rhh = vp_load_wide(ah, dt, o + 2 * H) + rbh;
                    double hh = tanh(vp_load_wide(ax, dt, o + 2 * H) + wbh + (g.lbr ? rg * rhh : rhh));
                    double hp = vp_load_wide(h, dt, b * H + j), hn = (1 - z) * hh + z * hp;
                    vp_store_wide(h, dt, b * H + j, hn);
                    if (y) vp_store_wide(y->data, dt, y_at(&g, t, d, b) + j, hn);
                    if (gs) {
                        int64_t q = sv_at(&g, st_, d, b, W) + j;
                        vp_store_wide(gs->data, dt, q, z), vp_store_wide(gs->data, dt, q + H, rg), vp_store_wide(gs->data, dt, q + 2 * H, hh);
                        if (g.lbr) vp_store_wide(gs->data, dt, q + 3 * H, rhh);
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
                    double z = vp_load_wide(gs->data, dt, q), rg = vp_load_wide(gs->data, dt, q + H), hh = vp_load_wide(gs->data, dt, q + 2 * H);
                    double hpv = vp_load_wide(hp, dt, b * H + j);
                    double dhv = vp_load_wide(dh, dt, b * H + j) + (dy ? vp_load_wide(dy->data, dt, y_at(&g, t, d, b) + j) : 0.0);
                    double a_h = dhv * (1 - z) * (1 - hh * hh), a_z = dhv * (hpv - hh) * z * (1 - z);
                    vp_store_wide(dax, dt, o, a_z), vp_store_wide(dax, dt, o + 2 * H, a_h), vp_store_wide(dah, dt, o, a_z);
                    vp_store_wide(dhd, dt, b * H + j, dhv * z);
                    if (g.lbr) {
                        double rhh = vp_load_wide(gs->data, dt, q + 3 * H), a_r = a_h * rhh * rg * (1 - rg);
                        vp_store_wide(dax, dt, o + H, a_r), vp_store_wide(dah, dt, o + H, a_r), vp_store_wide(dah, dt, o + 2 * H, a_h * rg);
                    } else {
                        vp_store_wide(rhp, dt, b * H + j, rg * hpv);
                        vp_store_wide(dah, dt, o + 2 * H, a_h);
                    }
                }
            }
            if (!g.lbr) { /* d(r * H_prev) = dA_h R_h: to r's gate and to H_prev */
                s = vp_lin_gemm(n, dt, 0, 0, N, H, H, 1.0, el(dax, &g, 2 * H), GH, el(rd, &g, 2 * H * H), H, 0.0, drhp, H, err);
                for (int64_t b = 0; b < N && !s; b++) {
                    if (time_of(&g, d, st_, b) < 0) continue;
                    for (int64_t j = 0; j < H; j++) {
                        int64_t q = sv_at(&g, st_, d, b, W) + j, o = b * GH + j;
                        double rg = vp_load_wide(gs->data, dt, q + H), g_ = vp_load_wide(drhp, dt, b * H + j);
                        double a_r = g_ * vp_load_wide(hp, dt, b * H + j) * rg * (1 - rg);
                        vp_store_wide(dax, dt, o + H, a_r), vp_store_wide(dah, dt, o + H, a_r);
                        vp_store_wide(dhd, dt, b * H + j, vp_load_wide(dhd, dt, b * H + j) + g_ * rg);
                    }
                }
            }
            for (int64_t b = 0; b < N; b++)
                for (int64_t k = 0; k < GH; k++) {
                    acc_w[k] += vp_load_wide(dax, dt, b * GH + k);
                    acc_r[k] += vp_load_wide(dah, dt, b * GH + k);
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
                        vp_store_wide(dh, dt, b * H + j, vp_load_wide(dhn, dt, b * H + j) + vp_load_wide(dhd, dt, b * H + j));
        }
        store_bias_grad(&g, db, d, acc_w, acc_r, GH);
        for (int64_t b = 0; b < N && dh0; b++) row_copy(&g, el(dh0->data, &g, h_at(&g, d, b)), el(dh, &g, b * H), H);
    }
    free(sc.mem);
    return s;
}
