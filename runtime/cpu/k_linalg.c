/* MatMul and Gemm on the CPU through OpenBLAS (oneDNN's sgemm on the fast path, dn.h), and the helpers every linalg kernel
 * shares: overflow-checked scratch, widening of narrow dtypes to float32, and one
 * gemm entry for float32 and float64.
 *
 * On the fast path the float32 product is oneDNN's sgemm except for large products
 * with A transposed (the weight gradients X^T dY): there oneDNN's sgemm runs at about
 * half the speed of OpenBLAS's on the AVX2 machines we measured (tools/bench/bench_gemm.c),
 * so they go to OpenBLAS, split into one slab of C per OpenMP thread with OpenBLAS on
 * one thread inside each (its own threads would spin beside OpenMP's).  The choice
 * depends only on the shapes and the thread count, so equal calls give equal bits. */
#include "k_linalg.h"
#include "dn.h"

#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_par.h"
#include "cpu_util.h"

/* OpenBLAS's, declared here in case cblas.h is another BLAS's header */
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);

void *vp_lin_alloc(int64_t count, size_t esize) {
    if (count < 0 || esize == 0) return NULL;
    if (count > 0 && (uint64_t)count > SIZE_MAX / esize) return NULL;
    size_t bytes = (size_t)count * esize;
    return malloc(bytes ? bytes : 1);
}

int vp_lin_is_narrow(vp_dtype t) { return t == VP_F16 || t == VP_BF16 || t == VP_I8 || t == VP_U8; }

static void widen(const vp_tensor *src, float *dst) {
    int64_t n = vp_tensor_numel(src);
    for (int64_t i = 0; i < n; i++) dst[i] = (float)vp_load(src->data, src->dtype, i);
}

static void narrow(const float *src, vp_tensor *dst) {
    int64_t n = vp_tensor_numel(dst);
    for (int64_t i = 0; i < n; i++) vp_store(dst->data, dst->dtype, i, src[i]);
}

vp_status vp_lin_run_widened(vp_cpu_fn kernel, const vp_node *n, const vp_tensor *const *in,
                             vp_tensor *const *out, vp_error *err) {
    enum { MAX_IO = 16 }; /* LSTMGrad has 13 inputs */
    if (n->n_inputs > MAX_IO || n->n_outputs > MAX_IO)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "more than %d inputs or outputs", MAX_IO);
    vp_tensor win[MAX_IO], wout[MAX_IO];
    const vp_tensor *pin[MAX_IO];
    vp_tensor *pout[MAX_IO];
    vp_status s = VP_OK;
    for (int i = 0; i < n->n_inputs; i++) {
        pin[i] = in[i];
        if (!in[i] || !vp_lin_is_narrow(in[i]->dtype)) continue;
        win[i] = *in[i];
        win[i].dtype = VP_F32;
        win[i].data = vp_lin_alloc(vp_tensor_numel(in[i]), sizeof(float));
        pin[i] = &win[i];
        if (!win[i].data) s = vp_node_fail(err, VP_ERR_NOMEM, n, "out of memory widening input %d", i);
        else widen(in[i], win[i].data);
    }
    for (int i = 0; i < n->n_outputs; i++) {
        pout[i] = out[i];
        if (!out[i] || !vp_lin_is_narrow(out[i]->dtype)) continue;
        wout[i] = *out[i];
        wout[i].dtype = VP_F32;
        wout[i].data = vp_lin_alloc(vp_tensor_numel(out[i]), sizeof(float));
        pout[i] = &wout[i];
        if (!wout[i].data) s = vp_node_fail(err, VP_ERR_NOMEM, n, "out of memory widening output %d", i);
    }
    if (!s) s = kernel(n, pin, pout, err);
    for (int i = 0; i < n->n_outputs; i++) {
        if (pout[i] == out[i]) continue;
        if (!s) narrow(wout[i].data, out[i]);
        free(wout[i].data);
    }
    for (int i = 0; i < n->n_inputs; i++)
        if (pin[i] != in[i]) free(win[i].data);
    return s;
}

static void scale_matrix(vp_dtype t, void *c, int64_t m, int64_t nn, int64_t ldc, double beta) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < nn; j++) {
            if (t == VP_F32) {
                float *p = (float *)c + i * ldc + j;
                *p = beta == 0 ? 0.0f : (float)(beta * *p);
            } else {
                double *p = (double *)c + i * ldc + j;
                *p = beta == 0 ? 0.0 : beta * *p;
            }
        }
}

/* Multiply-adds from which a product with A transposed goes to OpenBLAS on the fast path. */
#define BLAS_TN_MIN_WORK ((int64_t)1 << 24)

typedef struct slab_job {
    int trans_b, along_n;
    int64_t m, nn, k, len, slabs;
    float alpha, beta;
    const float *a, *b;
    float *c;
    int64_t lda, ldb, ldc;
} slab_job;

/* Slabs [lo, hi) of C: column blocks (along_n) or row blocks, 16-aligned bounds. */
static void slab_body(int64_t lo, int64_t hi, void *ctx) {
    const slab_job *j = ctx;
    for (int64_t s = lo; s < hi; s++) {
        int64_t o = (j->len * s / j->slabs) & ~(int64_t)15, e = s + 1 == j->slabs ? j->len : (j->len * (s + 1) / j->slabs) & ~(int64_t)15;
        if (e <= o) continue;
        enum CBLAS_TRANSPOSE tb = j->trans_b ? CblasTrans : CblasNoTrans;
        if (j->along_n)
            cblas_sgemm(CblasRowMajor, CblasTrans, tb, (int)j->m, (int)(e - o), (int)j->k, j->alpha, j->a, (int)j->lda,
                        j->b + (j->trans_b ? o * j->ldb : o), (int)j->ldb, j->beta, j->c + o, (int)j->ldc);
        else
            cblas_sgemm(CblasRowMajor, CblasTrans, tb, (int)(e - o), (int)j->nn, (int)j->k, j->alpha, j->a + o,
                        (int)j->lda, j->b, (int)j->ldb, j->beta, j->c + o * j->ldc, (int)j->ldc);
    }
}

/* C = alpha A^T op(B) + beta C on OpenBLAS, one slab per thread (A stored k x m). */
static void sgemm_tn_slabs(int trans_b, int64_t m, int64_t nn, int64_t k, float alpha, const float *a, int64_t lda,
                           const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    slab_job j = {.trans_b = trans_b, .along_n = nn >= m, .m = m, .nn = nn, .k = k, .alpha = alpha, .beta = beta,
                  .a = a, .b = b, .c = c, .lda = lda, .ldb = ldb, .ldc = ldc};
    j.len = j.along_n ? nn : m;
    j.slabs = vp_par_threads();
    if (j.slabs > j.len / 16) j.slabs = j.len / 16 > 0 ? j.len / 16 : 1;
    int prev = openblas_get_num_threads();
    openblas_set_num_threads(1);
    vp_par_for(j.slabs, m * nn * k / j.slabs, slab_body, &j);
    openblas_set_num_threads(prev);
}

vp_status vp_lin_gemm(const vp_node *n, vp_dtype t, int trans_a, int trans_b, int64_t m, int64_t nn,
                      int64_t k, double alpha, const void *a, int64_t lda, const void *b, int64_t ldb,
                      double beta, void *c, int64_t ldc, vp_error *err) {
    if (m == 0 || nn == 0) return VP_OK;
    if (k == 0) { /* BLAS would leave C alone only when beta is 1; the product is empty */
        scale_matrix(t, c, m, nn, ldc, beta);
        return VP_OK;
    }
    if (m > INT_MAX || nn > INT_MAX || k > INT_MAX || lda > INT_MAX || ldb > INT_MAX || ldc > INT_MAX)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "matrix product %lldx%lldx%lld exceeds the BLAS index range",
                            (long long)m, (long long)nn, (long long)k);
    enum CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans, tb = trans_b ? CblasTrans : CblasNoTrans;
    if (t == VP_F32 && vp_dn_gemm_selected() && trans_a && m * nn * k >= BLAS_TN_MIN_WORK && !vp_par_inside())
        sgemm_tn_slabs(trans_b, m, nn, k, (float)alpha, a, lda, b, ldb, (float)beta, c, ldc);
    else if (t == VP_F32 && vp_dn_gemm_selected()) {
        if (dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, nn, k, (float)alpha, a, lda, b, ldb, (float)beta, c,
                       ldc) != dnnl_success)
            return vp_node_fail(err, VP_ERR_RUNTIME, n, "oneDNN's sgemm failed (%lldx%lldx%lld)", (long long)m,
                                (long long)nn, (long long)k);
    } else if (t == VP_F32)
        cblas_sgemm(CblasRowMajor, ta, tb, (int)m, (int)nn, (int)k, (float)alpha, a, (int)lda, b, (int)ldb,
                    (float)beta, c, (int)ldc);
    else if (t == VP_F64)
        cblas_dgemm(CblasRowMajor, ta, tb, (int)m, (int)nn, (int)k, alpha, a, (int)lda, b, (int)ldb, beta, c,
                    (int)ldc);
    else
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "no gemm for dtype %s", vp_dtype_name(t));
    return VP_OK;
}

/* ---- MatMul ---- */

/* A matrix product with numpy broadcasting over the leading (batch) axes. */
typedef struct matmul_shape {
    int64_t m, k, n;
    int batch_rank;
    int64_t batch[VP_MAX_RANK];
    int64_t a_stride[VP_MAX_RANK], b_stride[VP_MAX_RANK]; /* in elements, 0 where broadcast */
    int64_t n_batch, a_batches, b_batches;                /* output, A and B matrix counts */
} matmul_shape;

/* Strides of the batch axes of t (all but its last two) against the output's batch axes. */
static int64_t batch_strides(const vp_tensor *t, int batch_rank, const int64_t *batch, int64_t mat, int64_t *strides) {
    int tb = t->rank > 2 ? t->rank - 2 : 0;
    int64_t s = mat, count = 1;
    for (int d = batch_rank - 1; d >= 0; d--) {
        int td = d - (batch_rank - tb);
        int64_t dim = td >= 0 ? t->dims[td] : 1;
        strides[d] = dim == 1 && batch[d] != 1 ? 0 : s;
        s *= dim;
        count *= dim;
    }
    return count;
}

/* ta, tb: A's or B's last two axes swapped (FusedMatMul; ranks of 2 or more then). */
static void matmul_shape_of(const vp_tensor *a, const vp_tensor *b, const vp_tensor *y, int ta, int tb,
                            matmul_shape *ms) {
    ms->m = a->rank == 1 ? 1 : a->dims[a->rank - (ta ? 1 : 2)];
    ms->k = a->rank == 1 || !ta ? a->dims[a->rank - 1] : a->dims[a->rank - 2];
    ms->n = b->rank == 1 ? 1 : b->dims[b->rank - (tb ? 2 : 1)];
    int ra = a->rank > 2 ? a->rank - 2 : 0, rb = b->rank > 2 ? b->rank - 2 : 0;
    ms->batch_rank = ra > rb ? ra : rb;
    ms->n_batch = 1;
    for (int d = 0; d < ms->batch_rank; d++) {
        ms->batch[d] = y->dims[d];
        ms->n_batch *= y->dims[d];
    }
    ms->a_batches = batch_strides(a, ms->batch_rank, ms->batch, ms->m * ms->k, ms->a_stride);
    ms->b_batches = batch_strides(b, ms->batch_rank, ms->batch, ms->k * ms->n, ms->b_stride);
}

/* Element offsets of batch number i in A and B. */
static void batch_offsets(const matmul_shape *ms, int64_t i, int64_t *oa, int64_t *ob) {
    *oa = *ob = 0;
    for (int d = ms->batch_rank - 1; d >= 0; d--) {
        int64_t idx = i % ms->batch[d];
        i /= ms->batch[d];
        *oa += idx * ms->a_stride[d];
        *ob += idx * ms->b_stride[d];
    }
}

/* Integer products wrap around as two's complement, as ONNX runtimes do. */
static void matmul_int(const matmul_shape *ms, const vp_tensor *a, const vp_tensor *b, vp_tensor *y) {
    int is64 = a->dtype == VP_I64;
    for (int64_t bi = 0; bi < ms->n_batch; bi++) {
        int64_t oa, ob;
        batch_offsets(ms, bi, &oa, &ob);
        for (int64_t i = 0; i < ms->m; i++)
            for (int64_t j = 0; j < ms->n; j++) {
                uint64_t acc = 0;
                for (int64_t p = 0; p < ms->k; p++) {
                    int64_t ia = oa + i * ms->k + p, ib = ob + p * ms->n + j;
                    uint64_t va = is64 ? (uint64_t)((const int64_t *)a->data)[ia]
                                       : (uint64_t)(int64_t)((const int32_t *)a->data)[ia];
                    uint64_t vb = is64 ? (uint64_t)((const int64_t *)b->data)[ib]
                                       : (uint64_t)(int64_t)((const int32_t *)b->data)[ib];
                    acc += va * vb;
                }
                int64_t iy = (bi * ms->m + i) * ms->n + j;
                if (is64) ((int64_t *)y->data)[iy] = (int64_t)acc;
                else ((int32_t *)y->data)[iy] = (int32_t)(uint32_t)acc;
            }
    }
}

/* y = alpha op(A) op(B), op a swap of the last two axes where ta or tb says. */
static vp_status matmul_run(const vp_node *n, const vp_tensor *a, const vp_tensor *b, vp_tensor *y, int ta, int tb,
                            double alpha, vp_error *err) {
    matmul_shape ms;
    matmul_shape_of(a, b, y, ta, tb, &ms);
    if (a->dtype == VP_I32 || a->dtype == VP_I64) {
        matmul_int(&ms, a, b, y);
        return VP_OK;
    }
    size_t es = vp_dtype_size(a->dtype);
    int64_t lda = ta ? ms.m : ms.k, ldb = tb ? ms.k : ms.n;
    /* B shared by every batch and A's batches laid out in order: one tall product */
    if (!ta && ms.b_batches == 1 && ms.a_batches == ms.n_batch)
        return vp_lin_gemm(n, a->dtype, 0, tb, ms.n_batch * ms.m, ms.n, ms.k, alpha, a->data, lda, b->data, ldb,
                           0.0, y->data, ms.n, err);
    for (int64_t bi = 0; bi < ms.n_batch; bi++) {
        int64_t oa, ob;
        batch_offsets(&ms, bi, &oa, &ob);
        vp_status s = vp_lin_gemm(n, a->dtype, ta, tb, ms.m, ms.n, ms.k, alpha, (const char *)a->data + oa * es, lda,
                                  (const char *)b->data + ob * es, ldb, 0.0,
                                  (char *)y->data + bi * ms.m * ms.n * es, ms.n, err);
        if (s) return s;
    }
    return VP_OK;
}

vp_status vp_cpu_matmul(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    if (vp_lin_is_narrow(in[0]->dtype)) return vp_lin_run_widened(vp_cpu_matmul, n, in, out, err);
    return matmul_run(n, in[0], in[1], out[0], 0, 0, 1.0, err);
}

/* com.microsoft.FusedMatMul: alpha transA(A) transB(B), batch axes as MatMul's
 * (transBatchA and transBatchB are refused by the shape function). */
vp_status vp_cpu_fused_matmul(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    if (vp_lin_is_narrow(in[0]->dtype)) return vp_lin_run_widened(vp_cpu_fused_matmul, n, in, out, err);
    return matmul_run(n, in[0], in[1], out[0], vp_attr_int(n, "transA", 0) != 0, vp_attr_int(n, "transB", 0) != 0,
                      vp_attr_float(n, "alpha", 1.0f), err);
}

/* ---- Gemm ---- */

/* Y = beta * C broadcast to M x N (C is a scalar, [N], [1], or [M or 1, N or 1]). */
static void gemm_fill_bias(const vp_tensor *c, double beta, vp_tensor *y, int64_t m, int64_t nn) {
    int64_t cm = c->rank == 2 ? c->dims[0] : 1, cn = c->rank >= 1 ? c->dims[c->rank - 1] : 1;
    int64_t sm = cm == 1 ? 0 : cn, sn = cn == 1 ? 0 : 1;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < nn; j++) {
            int64_t ic = i * sm + j * sn, iy = i * nn + j;
            if (y->dtype == VP_F32) ((float *)y->data)[iy] = (float)(beta * ((const float *)c->data)[ic]);
            else ((double *)y->data)[iy] = beta * ((const double *)c->data)[ic];
        }
}

vp_status vp_cpu_gemm(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    const vp_tensor *a = in[0], *b = in[1], *c = n->n_inputs > 2 ? in[2] : NULL;
    vp_tensor *y = out[0];
    if (vp_lin_is_narrow(a->dtype)) return vp_lin_run_widened(vp_cpu_gemm, n, in, out, err);
    int trans_a = vp_attr_int(n, "transA", 0) != 0, trans_b = vp_attr_int(n, "transB", 0) != 0;
    double alpha = vp_attr_float(n, "alpha", 1.0f), beta = vp_attr_float(n, "beta", 1.0f);
    int64_t m = y->dims[0], nn = y->dims[1], k = trans_a ? a->dims[0] : a->dims[1];
    int with_c = c && beta != 0;
    if (with_c) gemm_fill_bias(c, beta, y, m, nn);
    return vp_lin_gemm(n, a->dtype, trans_a, trans_b, m, nn, k, alpha, a->data, a->dims[1], b->data, b->dims[1],
                       with_c ? 1.0 : 0.0, y->data, nn, err);
}
