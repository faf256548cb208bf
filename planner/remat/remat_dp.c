/* The chain dynamic programs of checkpointing.  See remat_chain.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "remat/remat_chain.h"

static int64_t opt_kept(const block *b, int o) { return b->kept[o]; }
static double opt_time(const block *b, int o) { return b->time[o]; }

/* The memory the chain model predicts for a partition into segments: backward runs the
 * blocks last to first, and while block k's gradient is computed the kept activations
 * and cuts of blocks before k are live beside k's own peak under its option (kept and
 * recomputed values, each live while read) and its cut, and the cut of block k-1 when
 * that block recomputes it (it is back for k's backward); a recomputed segment [j..e]
 * has all of its blocks' live at once when its last block's backward starts.  At the
 * forward's end all that is kept is live.  Rotor (Beaumont et al. 2019) models the
 * chain the same way. */
static int64_t seg_peak(const block *b, int j, int e) {
    int64_t w = 0;
    for (int i = j; i <= e; i++) w += b[i].all_bytes + b[i].cut_bytes;
    return w;
}

/* The model's peak for one option per block (OPT_DROPPED: inside a recomputed segment
 * that ends at the next block with another option). */
int64_t vp_chain_peak(const block *b, int nb, const int *choice) {
    int64_t prefix = 0, peak = 0, back = 0; /* back: the previous block's recomputed cut */
    for (int j = 0; j < nb;) {
        int e = j;
        while (choice[e] == OPT_DROPPED && e + 1 < nb) e++;
        int seg = e > j || choice[j] == OPT_DROPPED;
        int64_t at = prefix + back + (seg ? seg_peak(b, j, e) : b[j].peak[choice[j]] + vp_chain_cut(&b[j], choice[j]));
        if (at > peak) peak = at;
        prefix += seg ? b[e].cut_bytes : opt_kept(&b[j], choice[j]) + vp_chain_cut(&b[j], choice[j]);
        back = seg ? 0 : b[j].cut_bytes - vp_chain_cut(&b[j], choice[j]);
        j = e + 1;
    }
    return prefix > peak ? prefix : peak;
}

/* Minimises recompute time over partitions of the chain into segments subject to the
 * model's peak <= room: a one-block segment takes any option of its menu; a longer one
 * keeps only its last cut and recomputes all of it from the previous cut.  A knapsack
 * over the chain with the prefix of kept bytes, in Q units, and whether the previous
 * block recomputes its cut, as state. */
typedef struct prefix_pick {
    int from;  /* segment start block */
    int m;     /* prefix units before it */
    int back;  /* the previous block recomputes its cut */
    int opt;   /* option of a one-block segment; OPT_DROPPED for longer ones */
} prefix_pick;

static int dp_prefix(const block *b, int nb, int64_t room, int *choice, int cut_drops) {
    enum { Q = 1024, W = Q + 1 };
    if (room <= 0 || nb <= 0 || nb > 100000) return 0;
    double unit = (double)room / Q;
    size_t cells = (size_t)(nb + 1) * 2 * W; /* [block][back][m] */
    double *dp = malloc(cells * sizeof *dp);
    prefix_pick *pick = malloc(cells * sizeof *pick);
    if (!dp || !pick) {
        free(dp);
        free(pick);
        return 0;
    }
    for (size_t i = 0; i < cells; i++) dp[i] = INFINITY;
    dp[0] = 0;
#define CELL(k, f, m) ((size_t)(k) * 2 * W + (size_t)(f) * W + (size_t)(m))
    for (int j = 0; j < nb; j++) { /* segments starting at block j */
        for (int f = 0; f < 1 + (j > 0); f++) { /* the first block has no previous cut */
            double back = f ? (double)b[j - 1].cut_bytes : 0;
            for (int m = 0; m <= Q; m++) {
                double base = dp[CELL(j, f, m)];
                if (base == INFINITY) continue;
                double used = m * unit + back;
                for (int o = 0; o < b[j].n_opts; o++) {
                    if (!cut_drops && b[j].drops_cut[o]) continue;
                    int64_t cut = vp_chain_cut(&b[j], o);
                    if (used + (double)(b[j].peak[o] + cut) > (double)room) continue;
                    int m2 = m + (int)((double)(opt_kept(&b[j], o) + cut) / unit + 0.5);
                    if (m2 > Q) continue;
                    size_t at = CELL(j + 1, cut == 0 && b[j].cut_bytes > 0, m2);
                    double t = base + opt_time(&b[j], o);
                    if (t < dp[at]) {
                        dp[at] = t;
                        pick[at] = (prefix_pick){j, m, f, o};
                    }
                }
                int64_t w = b[j].all_bytes + b[j].cut_bytes;
                double tseg = b[j].fwd_seconds;
                for (int e = j + 1; e < nb; e++) {
                    w += b[e].all_bytes + b[e].cut_bytes;
                    tseg += b[e].fwd_seconds;
                    if (used + (double)w > (double)room) break;
                    int m2 = m + (int)((double)b[e].cut_bytes / unit + 0.5);
                    if (m2 > Q) continue;
                    size_t at = CELL(e + 1, 0, m2);
                    if (base + tseg < dp[at]) {
                        dp[at] = base + tseg;
                        pick[at] = (prefix_pick){j, m, f, OPT_DROPPED};
                    }
                }
            }
        }
    }
    int bm = -1, bf = 0;
    for (int f = 0; f < 2; f++)
        for (int m = 0; m <= Q; m++) {
            double v = dp[CELL(nb, f, m)];
            if (v < INFINITY && (bm < 0 || v < dp[CELL(nb, bf, bm)])) bm = m, bf = f;
        }
    for (int k = nb, m = bm, f = bf; bm >= 0 && k > 0;) {
        prefix_pick sp = pick[CELL(k, f, m)];
        if (sp.opt == OPT_DROPPED) {
            for (int i = sp.from; i < k - 1; i++) choice[i] = OPT_DROPPED;
            choice[k - 1] = vp_chain_none(&b[k - 1]);
        } else {
            choice[sp.from] = sp.opt;
        }
        k = sp.from;
        m = sp.m;
        f = sp.back;
    }
#undef CELL
    free(dp);
    free(pick);
    return bm >= 0;
}

int vp_chain_dp_prefix(const block *b, int nb, int64_t room, int *choice) { return dp_prefix(b, nb, room, choice, 1); }

int vp_chain_dp_prefix_kept_cuts(const block *b, int nb, int64_t room, int *choice) {
    return dp_prefix(b, nb, room, choice, 0);
}

/* Minimises recompute time subject to  sum(kept) + max(working set) <= room  over
 * a partition of the chain into segments (Rotor-style): a one-block segment keeps its
 * cut and takes option A, S or N; a longer one keeps only its last cut and recomputes
 * all of it from the previous kept cut, its working set being all its activations.
 * For each candidate bound W on the working set, a knapsack over the chain in Q memory
 * units; the best over W wins. */
typedef struct seg_pick {
    int from;  /* segment start block */
    int opt;   /* option of a one-block segment; OPT_DROPPED for longer ones */
} seg_pick;

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

int vp_chain_dp_working_set(const block *b, int nb, int64_t room, int *choice) {
    enum { Q = 512, MAX_W = 32 };
    if (room < 0 || nb <= 0 || nb > 30000) return 0;
    int64_t total = 0;
    for (int k = 0; k < nb; k++) total += b[k].all_bytes + b[k].cut_bytes;
    double unit = (double)(total > 0 ? total : 1) / Q;
    /* candidate working-set bounds: quantiles of the one-block and segment values */
    size_t n_cand = 16;
    for (int k = 0; k < nb; k++) n_cand += (size_t)b[k].n_opts + 8; /* options + one per doubling length */
    int64_t *cand = malloc(n_cand * sizeof *cand);
    if (!cand) return 0;
    int nc = 0;
    for (int k = 0; k < nb; k++) {
        cand[nc++] = b[k].all_bytes;
        for (int o = 0; o < b[k].n_opts; o++) cand[nc++] = b[k].all_bytes - b[k].kept[o];
        int64_t w = b[k].all_bytes;
        for (int e = k + 1, len = 2; e < nb && len <= 64; e++, len *= 2) {
            w = 0;
            for (int i = k; i <= e; i++) w += b[i].all_bytes + (i < e ? b[i].cut_bytes : 0);
            cand[nc++] = w;
        }
    }
    qsort(cand, (size_t)nc, sizeof *cand, cmp_i64);
    int64_t ws[MAX_W];
    int nw = 0;
    for (int q = 0; q < MAX_W && nc; q++) {
        int64_t w = cand[(size_t)((double)q / (MAX_W - 1) * (nc - 1))];
        if (!nw || ws[nw - 1] != w) ws[nw++] = w;
    }
    free(cand);
    size_t cells = (size_t)(nb + 1) * (Q + 1);
    double *dp = malloc(cells * sizeof *dp);
    seg_pick *pick = malloc(cells * sizeof *pick);
    int *tmp = malloc((size_t)nb * sizeof *tmp);
    double best = INFINITY;
    int found = 0;
    for (int wi = 0; dp && pick && tmp && wi < nw; wi++) {
        int64_t W = ws[wi];
        if (room - W < 0) continue;
        int cap = (double)(room - W) / unit > Q ? Q : (int)((double)(room - W) / unit);
        for (size_t i = 0; i < cells; i++) dp[i] = INFINITY;
        dp[0] = 0;
        for (int j = 0; j < nb; j++) { /* segments starting at block j */
            for (int m = 0; m <= cap; m++) {
                double base = dp[(size_t)j * (Q + 1) + m];
                if (base == INFINITY) continue;
                for (int o = 0; o < b[j].n_opts; o++) {
                    if (b[j].drops_cut[o]) continue; /* this model has no room for a returning cut */
                    int64_t kept = opt_kept(&b[j], o);
                    if (b[j].all_bytes - kept > W) continue;
                    int m2 = m + (int)ceil((double)(kept + b[j].cut_bytes) / unit);
                    if (m2 > cap) continue;
                    size_t at = (size_t)(j + 1) * (Q + 1) + m2;
                    double t = base + opt_time(&b[j], o);
                    if (t < dp[at]) {
                        dp[at] = t;
                        pick[at] = (seg_pick){j, o};
                    }
                }
                int64_t wseg = b[j].all_bytes;
                double tseg = b[j].fwd_seconds;
                for (int e = j + 1; e < nb; e++) {
                    wseg += b[e - 1].cut_bytes + b[e].all_bytes;
                    tseg += b[e].fwd_seconds;
                    if (wseg > W) break;
                    int m2 = m + (int)ceil((double)b[e].cut_bytes / unit);
                    if (m2 > cap) continue;
                    size_t at = (size_t)(e + 1) * (Q + 1) + m2;
                    if (base + tseg < dp[at]) {
                        dp[at] = base + tseg;
                        pick[at] = (seg_pick){j, OPT_DROPPED};
                    }
                }
            }
        }
        int bm = -1;
        for (int m = 0; m <= cap; m++) {
            double v = dp[(size_t)nb * (Q + 1) + m];
            if (v < INFINITY && (bm < 0 || v < dp[(size_t)nb * (Q + 1) + bm])) bm = m;
        }
        if (bm < 0 || dp[(size_t)nb * (Q + 1) + bm] >= best) continue;
        /* walk back through the segments, recovering each one's memory from its pick */
        int k = nb, m = bm, ok = 1;
        while (k > 0 && ok) {
            seg_pick sp = pick[(size_t)k * (Q + 1) + m];
            int j = sp.from;
            if (sp.opt == OPT_DROPPED) {
                for (int i = j; i < k - 1; i++) tmp[i] = OPT_DROPPED;
                tmp[k - 1] = vp_chain_none(&b[k - 1]);
                m -= (int)ceil((double)b[k - 1].cut_bytes / unit);
            } else {
                tmp[j] = sp.opt;
                m -= (int)ceil((double)(opt_kept(&b[j], sp.opt) + b[j].cut_bytes) / unit);
            }
            ok = m >= 0 && j < k;
            k = j;
        }
        if (!ok) continue;
        best = dp[(size_t)nb * (Q + 1) + bm];
        memcpy(choice, tmp, (size_t)nb * sizeof *choice);
        found = 1;
    }
    free(dp);
    free(pick);
    free(tmp);
    return found;
}


/* sum(kept) + max(working set), the working-set DP's own measure. */
int64_t vp_chain_peak_working_set(const block *b, int nb, const int *choice) {
    int64_t kept = 0, ws = 0;
    for (int j = 0; j < nb;) {
        int e = j;
        while (choice[e] == OPT_DROPPED && e + 1 < nb) e++;
        int64_t w = 0;
        for (int i = j; i <= e; i++) w += b[i].all_bytes + (i < e ? b[i].cut_bytes : 0);
        int seg = e > j || choice[j] == OPT_DROPPED;
        if (!seg) w = b[j].all_bytes - opt_kept(&b[j], choice[j]);
        if (w > ws) ws = w;
        kept += seg ? b[e].cut_bytes : opt_kept(&b[j], choice[j]) + vp_chain_cut(&b[j], choice[j]);
        j = e + 1;
    }
    return kept + ws;
}
