/* vplan.Attention and AttentionGrad on the GPU, in float32, float16 and bfloat16 (Q, K,
 * V, the mask, Y and the gradients of one type T, read as float; LSE float32, as
 * planner/ops/attention.c declares it; planner/ops/attention.c says
 * what they compute; runtime/cpu/k_attention.c is the reference).
 *
 * One thread block per row, CU_THREADS threads, no [S, T] matrix anywhere:
 *   forward   block per query row i: pass 1, each thread scores its columns j
 *             (a dot over D) keeping a running max and sum of exp; the block combines
 *             them into LSE_i; pass 2, chunk by chunk of CU_THREADS columns, each thread
 *             puts p_ij = exp(s_ij - LSE_i) in shared memory and the threads, split over
 *             Dv, add p V into their outputs.
 *   dQ        block per query row i: D_i = dY_i . Y_i (block sum), then chunks of
 *             columns: ds_ij = p_ij (dY_i . v_j - D_i) in shared memory, dQ_i += scale
 *             ds K, threads split over D.  Under softcap c the scores are c tanh(A / c)
 *             before the mask, and ds_ij is multiplied by 1 - tanh^2 before it reaches
 *             dQ and dK (not dMask: the mask is added after the capping).
 *   dK, dV    block per key row j: chunks of query rows i (i >= j under causal):
 *             ds_ij and p_ij in shared memory, dK_j += scale ds^T Q, dV_j += p^T dY,
 *             threads split over D and Dv.
 *   dMask     thread per element of the (trained) mask: the sum of ds_ij over the
 *             batch entries, heads, rows and columns it broadcasts to, in that order.
 * Under dropout p_ij is multiplied by M_ij / (1 - r) before P V and dV, and so is
 * dY_i . v_j before ds: M drawn again where it is read (dropped), never stored, its key
 * made from the step count on the device.
 * Y and dY are [B, H, S, Dv], or [B, S, H, Dv] under y_bshd (y_row() says where a row is).
 * K and V have Hk heads (grouped-query attention): query head h reads key/value head
 * h / (H / Hk), and a dK, dV block sums over its group's query heads in head order.
 * Q, dQ may be [B, S, H, D] (q_bshd) and K, V, dK, dV [B, T, Hk, D] (kv_bshd): q_row,
 * k_base and v_base give where rows are, qld, kld and vld their strides.
 * Every sum runs in a fixed order (no atomics), so a run repeats bit for bit; each
 * block's accumulators live in dynamic shared memory (D + Dv floats). */
#include <math.h>

#include "cu_attention.h"
#include "cu_common.cuh"
#include "cu_lowp.cuh"
#include "dropout_rng.h"

struct att_geom {
    int64_t H, S, T, D, Dv;
    int64_t Hk, rep; /* key/value heads, query heads per key/value head */
    int qbshd, kvbshd;
    int64_t qld, kld, vld; /* row strides of Q, K, V */
    float scale;
    float softcap; /* c > 0: scores c tanh(A / c) before the mask */
    int causal;
    int zero_rows; /* a row masked everywhere (-inf) gives 0s */
    int bshd; /* Y and dY [B, S, H, Dv] */
    const void *mask; /* of T */
    int64_t ms0, ms1, ms2, ms3;
    int64_t md0, md1, md2, md3; /* the mask's own extents */
    int drop;                   /* dropout > 0 */
    uint32_t drop_seed, drop_thr;
    const int64_t *drop_step;   /* on the device; NULL: step 0 */
    float drop_scale;           /* 1 / (1 - dropout) */
    int drop_ranks, drop_rank;
};

/* The masks' key of this step (runtime/dropout_rng.h), made on the device. */
__device__ static inline uint64_t drop_key(const att_geom &g) {
    return g.drop ? vp_dropout_key(g.drop_seed, g.drop_step ? *g.drop_step : 0) : 0;
}

/* x at P_ij of pair (b, h) under dropout: x / (1 - r) where M keeps it, else 0 (a select,
 * as the CPU's, so a non-finite x dropped is 0); x without dropout.  M is drawn at P's
 * index in [B, H, S, T] (the whole tensor's under a split of the heads). */
__device__ static inline float dropped(const att_geom &g, uint64_t key, int64_t b, int64_t h, int64_t i, int64_t j,
                                       float x) {
    if (!g.drop) return x;
    uint64_t idx = (uint64_t)(((b * g.H + h) * g.S + i) * g.T + j);
    idx = vp_dropout_global_index(idx, (uint64_t)(g.H * g.S * g.T), g.drop_ranks, g.drop_rank);
    return vp_dropout_keeps(key, idx, g.drop_thr) ? x * g.drop_scale : 0.0f;
}

/* The score s_ij; under softcap, *dcap (when not NULL) gets the capping's derivative
 * 1 - tanh^2 (1 without it). */
template <typename T>
__device__ static inline float score(const att_geom &g, const T *q, const T *k, int64_t b, int64_t h, int64_t i,
                                     int64_t j, float *dcap = NULL) {
    float s = 0;
    for (int64_t d = 0; d < g.D; d++) s += cu_ld(q, d) * cu_ld(k, j * g.kld + d);
    s *= g.scale;
    if (g.softcap > 0) {
        float t = tanhf(s / g.softcap);
        s = g.softcap * t;
        if (dcap) *dcap = 1.0f - t * t;
    } else if (dcap) {
        *dcap = 1.0f;
    }
    if (g.mask) s += cu_ld((const T *)g.mask, b * g.ms0 + h * g.ms1 + i * g.ms2 + j * g.ms3);
    return s;
}

template <typename T> __device__ static inline float dotf(const T *a, const T *b, int64_t n) {
    float s = 0;
    for (int64_t c = 0; c < n; c++) s += cu_ld(a, c) * cu_ld(b, c);
    return s;
}

/* p_ij from the row's LSE; a row whose every score its mask filled with a finite lowest
 * (torch.finfo.min) has the fill for its LSE, its log-sum lost to rounding: its p_ij from
 * the row's own max and sum, as Softmax computes them (k_attention.c's FILLED_EVERYWHERE). */
template <typename T>
__device__ static float prob(const att_geom &g, const T *qi, const T *kb, int64_t b, int64_t h, int64_t i, int64_t j,
                             float lse, float *dcap = NULL) {
    double s = score(g, qi, kb, b, h, i, j, dcap);
    if (!(lse <= -1e30f) || lse == -INFINITY) return (float)exp(s - lse);
    int64_t cols = g.causal && i + 1 < g.T ? i + 1 : g.T;
    double m = -INFINITY, l = 0;
    for (int64_t c = 0; c < cols; c++) m = fmax(m, (double)score(g, qi, kb, b, h, i, c));
    for (int64_t c = 0; c < cols; c++) l += exp((double)score(g, qi, kb, b, h, i, c) - m);
    return (float)(exp(s - m) / l);
}

/* Block max; every thread gets it. */
__device__ static inline double block_max(double v) {
    __shared__ double part[32];
    __shared__ double total;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = cu_warp_max(v);
    __syncthreads();
    if (lane == 0) part[warp] = v;
    __syncthreads();
    if (warp == 0) {
        double s = lane < warps ? part[lane] : -INFINITY;
        s = cu_warp_max(s);
        if (lane == 0) total = s;
    }
    __syncthreads();
    return total;
}

/* Element offset of row i of pair (b, h) in Y and dY. */
__device__ static inline int64_t y_row(const att_geom &g, int64_t b, int64_t h, int64_t i) {
    return g.bshd ? ((b * g.S + i) * g.H + h) * g.Dv : ((b * g.H + h) * g.S + i) * g.Dv;
}

/* Element offsets of row i of query pair (b, h) in Q and dQ, and of row 0 of key/value
 * pair (b, kh) in K, dK and V, dV. */
__device__ static inline int64_t q_row(const att_geom &g, int64_t b, int64_t h, int64_t i) {
    return g.qbshd ? ((b * g.S + i) * g.H + h) * g.D : ((b * g.H + h) * g.S + i) * g.D;
}
__device__ static inline int64_t k_base(const att_geom &g, int64_t b, int64_t kh) {
    return g.kvbshd ? b * g.T * g.Hk * g.D + kh * g.D : (b * g.Hk + kh) * g.T * g.D;
}
__device__ static inline int64_t v_base(const att_geom &g, int64_t b, int64_t kh) {
    return g.kvbshd ? b * g.T * g.Hk * g.Dv + kh * g.Dv : (b * g.Hk + kh) * g.T * g.Dv;
}

/* Columns row i sees. */
__device__ static inline int64_t seen_cols(const att_geom &g, int64_t i) {
    return g.causal && i + 1 < g.T ? i + 1 : g.T;
}

template <typename T>
__global__ void k_attention(att_geom g, int64_t rows, const T *q, const T *k, const T *v, T *y, float *lse) {
    extern __shared__ float acc[]; /* Dv accumulators */
    __shared__ float p[CU_THREADS];
    uint64_t key = drop_key(g);
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        int64_t bh = r / g.S, i = r % g.S, b = bh / g.H, h = bh % g.H, cols = seen_cols(g, i);
        const T *qi = q + q_row(g, b, h, i), *kb = k + k_base(g, b, h / g.rep), *vb = v + v_base(g, b, h / g.rep);
        double m = -INFINITY;
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) m = fmax(m, (double)score(g, qi, kb, b, h, i, j));
        m = block_max(m);
        double l = 0;
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) l += exp((double)score(g, qi, kb, b, h, i, j) - m);
        l = cu_block_sum(l);
        /* zero_masked_rows: LSE +inf, so every exp(s - LSE) here and in the backward is 0 */
        double ls = g.zero_rows && m == -INFINITY ? INFINITY : m + log(l);
        for (int64_t c = threadIdx.x; c < g.Dv; c += blockDim.x) acc[c] = 0;
        for (int64_t j0 = 0; j0 < cols; j0 += blockDim.x) {
            int64_t j = j0 + threadIdx.x;
            __syncthreads();
            bool filled = ls <= -1e30 && ls > -INFINITY; /* as prob(): the row's own max and sum */
            p[threadIdx.x] = j >= cols ? 0.0f
                             : dropped(g, key, b, h, i, j,
                                       filled ? (float)(exp((double)score(g, qi, kb, b, h, i, j) - m) / l)
                                              : (float)exp((double)score(g, qi, kb, b, h, i, j) - ls));
            __syncthreads();
            int64_t n = cols - j0 < blockDim.x ? cols - j0 : blockDim.x;
            for (int64_t c = threadIdx.x; c < g.Dv; c += blockDim.x) {
                float s = acc[c];
                for (int64_t t = 0; t < n; t++) s += p[t] * cu_ld(vb, (j0 + t) * g.vld + c);
                acc[c] = s;
            }
        }
        for (int64_t c = threadIdx.x; c < g.Dv; c += blockDim.x) cu_st(y, y_row(g, b, h, i) + c, acc[c]);
        if (threadIdx.x == 0 && lse) lse[r] = (float)ls;
        __syncthreads();
    }
}

template <typename T>
__global__ void k_attention_dq(att_geom g, int64_t rows, const T *dy, const T *q, const T *k, const T *v, const T *y,
                               const float *lse, T *dq) {
    extern __shared__ float acc[]; /* D accumulators */
    __shared__ float ds[CU_THREADS];
    uint64_t key = drop_key(g);
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        int64_t bh = r / g.S, i = r % g.S, b = bh / g.H, h = bh % g.H, cols = seen_cols(g, i);
        const T *qi = q + q_row(g, b, h, i), *kb = k + k_base(g, b, h / g.rep), *vb = v + v_base(g, b, h / g.rep);
        const T *dyi = dy + y_row(g, b, h, i), *yi = y + y_row(g, b, h, i);
        double di = 0;
        for (int64_t c = threadIdx.x; c < g.Dv; c += blockDim.x) di += (double)cu_ld(dyi, c) * cu_ld(yi, c);
        di = cu_block_sum(di);
        for (int64_t d = threadIdx.x; d < g.D; d += blockDim.x) acc[d] = 0;
        for (int64_t j0 = 0; j0 < cols; j0 += blockDim.x) {
            int64_t j = j0 + threadIdx.x;
            __syncthreads();
            if (j < cols) {
                float dcap;
                float pj = prob(g, qi, kb, b, h, i, j, lse[r], &dcap);
                ds[threadIdx.x] = pj * (dropped(g, key, b, h, i, j, dotf(dyi, vb + j * g.vld, g.Dv)) - (float)di) * dcap;
            } else {
                ds[threadIdx.x] = 0;
            }
            __syncthreads();
            int64_t n = cols - j0 < blockDim.x ? cols - j0 : blockDim.x;
            for (int64_t d = threadIdx.x; d < g.D; d += blockDim.x) {
                float s = acc[d];
                for (int64_t t = 0; t < n; t++) s += ds[t] * cu_ld(kb, (j0 + t) * g.kld + d);
                acc[d] = s;
            }
        }
        for (int64_t d = threadIdx.x; d < g.D; d += blockDim.x) cu_st(dq, q_row(g, b, h, i) + d, g.scale * acc[d]);
        __syncthreads();
    }
}

template <typename T>
__global__ void k_attention_dkv(att_geom g, int64_t keys, const T *dy, const T *q, const T *k, const T *v, const T *y,
                                const float *lse, T *dk, T *dv) {
    extern __shared__ float acc[]; /* D accumulators of dK, then Dv of dV */
    __shared__ float ds[CU_THREADS], p[CU_THREADS];
    uint64_t key = drop_key(g);
    for (int64_t r = blockIdx.x; r < keys; r += gridDim.x) {
        int64_t kv = r / g.T, j = r % g.T, b = kv / g.Hk, kh = kv % g.Hk;
        int64_t kbo = k_base(g, b, kh), vjo = v_base(g, b, kh) + j * g.vld;
        const T *kb = k + kbo, *vj = v + vjo;
        int64_t i_first = g.causal ? j : 0; /* rows i < j do not see column j */
        for (int64_t d = threadIdx.x; d < g.D + g.Dv; d += blockDim.x) acc[d] = 0;
        for (int64_t h = (kv % g.Hk) * g.rep; h < (kv % g.Hk + 1) * g.rep; h++) /* the group's query heads */
        for (int64_t i0 = i_first; i0 < g.S; i0 += blockDim.x) {
            const T *qb = q + q_row(g, b, h, 0);
            const float *lb = lse + (b * g.H + h) * g.S;
            int64_t i = i0 + threadIdx.x;
            __syncthreads();
            if (i < g.S) {
                const T *dyi = dy + y_row(g, b, h, i);
                float dcap;
                float pij = prob(g, qb + i * g.qld, kb, b, h, i, j, lb[i], &dcap);
                p[threadIdx.x] = dropped(g, key, b, h, i, j, pij); /* dV reads the dropped P' */
                ds[threadIdx.x] =
                    pij * (dropped(g, key, b, h, i, j, dotf(dyi, vj, g.Dv)) - dotf(dyi, y + y_row(g, b, h, i), g.Dv)) * dcap;
            } else {
                p[threadIdx.x] = ds[threadIdx.x] = 0;
            }
            __syncthreads();
            int64_t n = g.S - i0 < blockDim.x ? g.S - i0 : blockDim.x;
            for (int64_t d = threadIdx.x; d < g.D + g.Dv; d += blockDim.x) {
                float s = acc[d];
                if (d < g.D)
                    for (int64_t t = 0; t < n; t++) s += ds[t] * cu_ld(qb, (i0 + t) * g.qld + d);
                else
                    for (int64_t t = 0; t < n; t++) s += p[t] * cu_ld(dy, y_row(g, b, h, i0 + t) + (d - g.D));
                acc[d] = s;
            }
        }
        /* each thread writes the accumulators it summed: acc[D + c] is not thread c's */
        for (int64_t d = threadIdx.x; d < g.D + g.Dv; d += blockDim.x) {
            if (d < g.D && dk) cu_st(dk, kbo + j * g.kld + d, g.scale * acc[d]);
            if (d >= g.D && dv) cu_st(dv, vjo + (d - g.D), acc[d]);
        }
        __syncthreads();
    }
}

/* One element of the mask's gradient per thread: ds_ij = p_ij (dY_i . v_j - dY_i . Y_i)
 * summed over every (b, h, i, j) the element is broadcast to, in a fixed order. */
template <typename T>
__global__ void k_attention_dmask(att_geom g, int64_t B, int64_t elems, const T *dy, const T *q, const T *k,
                                  const T *v, const T *y, const float *lse, T *dmask) {
    uint64_t key = drop_key(g);
    CU_FOR(e, elems) {
        int64_t x = e, mj = x % g.md3;
        x /= g.md3;
        int64_t mi = x % g.md2;
        x /= g.md2;
        int64_t mh = x % g.md1, mb = x / g.md1;
        float sum = 0;
        for (int64_t b = g.md0 == 1 ? 0 : mb; b < (g.md0 == 1 ? B : mb + 1); b++)
            for (int64_t h = g.md1 == 1 ? 0 : mh; h < (g.md1 == 1 ? g.H : mh + 1); h++)
                for (int64_t i = g.md2 == 1 ? 0 : mi; i < (g.md2 == 1 ? g.S : mi + 1); i++) {
                    const T *qi = q + q_row(g, b, h, i), *kb = k + k_base(g, b, h / g.rep);
                    const T *vb = v + v_base(g, b, h / g.rep), *dyi = dy + y_row(g, b, h, i);
                    float di = dotf(dyi, y + y_row(g, b, h, i), g.Dv), li = lse[(b * g.H + h) * g.S + i];
                    for (int64_t j = g.md3 == 1 ? 0 : mj; j < (g.md3 == 1 ? g.T : mj + 1); j++) {
                        if (j >= seen_cols(g, i)) continue;
                        float pij = prob(g, qi, kb, b, h, i, j, li);
                        sum += pij * (dropped(g, key, b, h, i, j, dotf(dyi, vb + j * g.vld, g.Dv)) - di);
                    }
                }
        cu_st(dmask, mb * g.ms0 + mh * g.ms1 + mi * g.ms2 + mj * g.ms3, sum);
    }
}

static att_geom geom_of(const cu_attention_shape *s) {
    att_geom g;
    g.H = s->H;
    g.S = s->S;
    g.T = s->T;
    g.D = s->D;
    g.Dv = s->Dv;
    g.Hk = s->Hk > 0 ? s->Hk : s->H;
    g.rep = g.Hk > 0 && s->H / g.Hk > 0 ? s->H / g.Hk : 1;
    g.qbshd = s->q_bshd;
    g.kvbshd = s->kv_bshd;
    g.qld = s->q_bshd ? s->H * s->D : s->D;
    g.kld = s->kv_bshd ? g.Hk * s->D : s->D;
    g.vld = s->kv_bshd ? g.Hk * s->Dv : s->Dv;
    g.scale = s->scale;
    g.softcap = s->softcap;
    g.causal = s->causal;
    g.zero_rows = s->zero_rows;
    g.bshd = s->y_bshd;
    g.mask = s->mask;
    g.ms0 = s->mask_strides[0];
    g.ms1 = s->mask_strides[1];
    g.ms2 = s->mask_strides[2];
    g.ms3 = s->mask_strides[3];
    g.md0 = s->mask_dims[0] > 0 ? s->mask_dims[0] : 1;
    g.md1 = s->mask_dims[1] > 0 ? s->mask_dims[1] : 1;
    g.md2 = s->mask_dims[2] > 0 ? s->mask_dims[2] : 1;
    g.md3 = s->mask_dims[3] > 0 ? s->mask_dims[3] : 1;
    g.drop = s->dropout > 0;
    g.drop_seed = s->drop_seed;
    g.drop_step = s->drop_step;
    g.drop_thr = vp_dropout_threshold(s->dropout);
    g.drop_scale = g.drop ? (float)(1.0 / (1.0 - (double)s->dropout)) : 1.0f;
    g.drop_ranks = s->drop_ranks > 1 ? s->drop_ranks : 1;
    g.drop_rank = s->drop_rank;
    return g;
}

static unsigned grid_of(int64_t rows) { return (unsigned)(rows < 65535 * 8 ? rows : 65535 * 8); }

template <typename T>
static cudaError_t attention(const cu_attention_shape *s, const T *q, const T *k, const T *v, T *y, float *lse,
                             cudaStream_t st) {
    int64_t rows = s->B * s->H * s->S;
    if (rows == 0) return cudaSuccess;
    k_attention<T><<<grid_of(rows), CU_THREADS, (size_t)(s->Dv ? s->Dv : 1) * sizeof(float), st>>>(geom_of(s), rows, q,
                                                                                                  k, v, y, lse);
    return cudaGetLastError();
}

template <typename T>
static cudaError_t attention_grad(const cu_attention_shape *s, const T *dy, const T *q, const T *k, const T *v,
                                  const T *y, const float *lse, T *dq, T *dk, T *dv, T *dmask, cudaStream_t st) {
    int64_t rows = s->B * s->H * s->S, keys = s->B * (s->Hk > 0 ? s->Hk : s->H) * s->T;
    att_geom g = geom_of(s);
    if (dq && rows)
        k_attention_dq<T><<<grid_of(rows), CU_THREADS, (size_t)(s->D ? s->D : 1) * sizeof(float), st>>>(g, rows, dy, q,
                                                                                                      k, v, y, lse, dq);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    if ((dk || dv) && keys)
        k_attention_dkv<T><<<grid_of(keys), CU_THREADS, (size_t)(s->D + s->Dv ? s->D + s->Dv : 1) * sizeof(float), st>>>(
            g, keys, dy, q, k, v, y, lse, dk, dv);
    e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    int64_t elems = g.md0 * g.md1 * g.md2 * g.md3;
    if (dmask && s->mask && elems)
        k_attention_dmask<T><<<cu_blocks(elems), CU_THREADS, 0, st>>>(g, s->B, elems, dy, q, k, v, y, lse, dmask);
    return cudaGetLastError();
}

extern "C" cudaError_t cu_attention(int dtype, const cu_attention_shape *s, const void *q, const void *k, const void *v,
                                    void *y, float *lse, cudaStream_t st) {
    CU_FLOAT_DISPATCH(dtype, return attention<T>(s, (const T *)q, (const T *)k, (const T *)v, (T *)y, lse, st));
    return cudaErrorInvalidValue;
}

extern "C" cudaError_t cu_attention_grad(int dtype, const cu_attention_shape *s, const void *dy, const void *q,
                                         const void *k, const void *v, const void *y, const float *lse, void *dq,
                                         void *dk, void *dv, void *dmask, cudaStream_t st) {
    CU_FLOAT_DISPATCH(dtype, return attention_grad<T>(s, (const T *)dy, (const T *)q, (const T *)k, (const T *)v,
                                                      (const T *)y, lse, (T *)dq, (T *)dk, (T *)dv, (T *)dmask, st));
    return cudaErrorInvalidValue;
}
