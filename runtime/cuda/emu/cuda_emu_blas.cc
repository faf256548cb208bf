/* The emulator's cuBLAS (cuda_emu.h says what it models): handles, streams, math modes
 * and workspaces checked as cuBLAS checks them, and the products (SGEMM, GemmEx, their
 * strided batches; TF32 by rounding the operands) computed by cblas in float32 after the
 * late work queued on the handle's stream has run.  Operands must lie in device memory. */
#include "cuda_emu.h"
#include "cuda_emu_internal.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <vector>

extern "C" {

/* ---- cuBLAS ---- */

struct vp_emu_blas {
    cudaStream_t stream;
    cublasMath_t math;
};

cublasStatus_t cublasCreate(cublasHandle_t *h) {
    *h = new vp_emu_blas{nullptr, CUBLAS_DEFAULT_MATH};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t h) {
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t st) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->stream = st;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *ws, size_t bytes) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (bytes && !vp_emu_on_device(ws, bytes)) return CUBLAS_STATUS_INVALID_VALUE;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->math = mode;
    return CUBLAS_STATUS_SUCCESS;
}

} // extern "C"

namespace {

/* TF32 keeps 10 of float32's 23 mantissa bits (round to nearest even). */
float to_tf32(float f) {
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7f800000u) == 0x7f800000u) return f;
    u += 0xfffu + ((u >> 13) & 1);
    return __uint_as_float(u & ~0x1fffu);
}

/* A column-major rows x cols matrix with leading dimension ld, rounded to TF32. */
std::vector<float> tf32_copy(const float *a, int rows, int cols, int ld) {
    std::vector<float> r((size_t)ld * (size_t)(cols ? cols - 1 : 0) + (size_t)rows);
    for (int j = 0; j < cols; j++)
        for (int i = 0; i < rows; i++) r[(size_t)j * ld + i] = to_tf32(a[(size_t)j * ld + i]);
    return r;
}

cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float *alpha,
                    const float *a, int lda, long long sa, const float *b, int ldb, long long sb, const float *beta,
                    float *c, int ldc, long long sc, int batch) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    vp_emu_stream_drain(h->stream);
    /* cuBLAS's own argument checks */
    int ar = ta == CUBLAS_OP_N ? m : k, br = tb == CUBLAS_OP_N ? k : n;
    if (m < 0 || n < 0 || k < 0 || batch < 0 || (ta != CUBLAS_OP_N && ta != CUBLAS_OP_T) ||
        (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T) || lda < (ar > 1 ? ar : 1) || ldb < (br > 1 ? br : 1) ||
        ldc < (m > 1 ? m : 1)) {
        fprintf(stderr, "cuda emulation: cublasSgemm: invalid value (m %d n %d k %d lda %d ldb %d ldc %d)\n", m, n, k, lda,
                ldb, ldc);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (!m || !n || !batch) return CUBLAS_STATUS_SUCCESS;
    int ac = ta == CUBLAS_OP_N ? k : m, bc = tb == CUBLAS_OP_N ? n : k;
    for (int i = 0; i < batch; i++) {
        const float *ai = a + sa * i, *bi = b + sb * i;
        float *ci = c + sc * i;
        /* every operand must be device memory, as on a GPU (an illegal address there) */
        size_t a_extent = k ? ((size_t)lda * (size_t)(ac - 1) + (size_t)ar) * 4 : 0;
        size_t b_extent = k ? ((size_t)ldb * (size_t)(bc - 1) + (size_t)br) * 4 : 0;
        size_t c_extent = ((size_t)ldc * (size_t)(n - 1) + (size_t)m) * 4;
        if ((a_extent && !vp_emu_on_device(ai, a_extent)) || (b_extent && !vp_emu_on_device(bi, b_extent)) || !vp_emu_on_device(ci, c_extent)) {
            fprintf(stderr, "cuda emulation: cublasSgemm batch %d: an operand reaches outside device memory\n", i);
            vp_emu_set_error(cudaErrorIllegalAddress);
            return CUBLAS_STATUS_EXECUTION_FAILED;
        }
        if (!k) {
            for (int j = 0; j < n; j++)
                for (int r = 0; r < m; r++) ci[(size_t)j * ldc + r] = *beta == 0 ? 0.0f : *beta * ci[(size_t)j * ldc + r];
            continue;
        }
        CBLAS_TRANSPOSE oa = ta == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, ob = tb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans;
        if (h->math == CUBLAS_TF32_TENSOR_OP_MATH) {
            std::vector<float> ra = tf32_copy(ai, ar, ac, lda), rb = tf32_copy(bi, br, bc, ldb);
            cblas_sgemm(CblasColMajor, oa, ob, m, n, k, *alpha, ra.data(), lda, rb.data(), ldb, *beta, ci, ldc);
        } else {
            cblas_sgemm(CblasColMajor, oa, ob, m, n, k, *alpha, ai, lda, bi, ldb, *beta, ci, ldc);
        }
    }
    return CUBLAS_STATUS_SUCCESS;
}

/* Element i of a float32, float16 or bfloat16 array as float, and back (rounded to
 * nearest even, as a GPU stores a float32 accumulator). */
float ex_load(const void *p, cudaDataType t, size_t i) {
    if (t == CUDA_R_32F) return ((const float *)p)[i];
    uint16_t bits = ((const uint16_t *)p)[i];
    if (t == CUDA_R_16F) return __half2float(__half{bits});
    return __uint_as_float((uint32_t)bits << 16);
}

void ex_store(void *p, cudaDataType t, size_t i, float v) {
    if (t == CUDA_R_32F) ((float *)p)[i] = v;
    else if (t == CUDA_R_16F) ((uint16_t *)p)[i] = __float2half_rn(v).bits;
    else {
        uint32_t x = __float_as_uint(v);
        if ((x & 0x7f800000u) == 0x7f800000u && (x & 0x7fffffu)) ((uint16_t *)p)[i] = (uint16_t)((x >> 16) | 0x40);
        else ((uint16_t *)p)[i] = (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
    }
}

/* The narrow types widened into float32 host copies of each operand (not emulated
 * device memory: a GPU's cuBLAS allocates none), cblas_sgemm on them, the result
 * rounded back: float32 accumulation and one rounding, as cuBLAS with
 * CUBLAS_COMPUTE_32F (the order of the sums aside). */
cublasStatus_t gemm_ex(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                       const void *alpha, const void *a, cudaDataType at, int lda, long long sa, const void *b,
                       cudaDataType bt, int ldb, long long sb, const void *beta, void *c, cudaDataType ct, int ldc,
                       long long sc, int batch, cublasComputeType_t compute) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    vp_emu_stream_drain(h->stream);
    if (at != bt || at != ct || (at != CUDA_R_32F && at != CUDA_R_16F && at != CUDA_R_16BF) || compute != CUBLAS_COMPUTE_32F) {
        fprintf(stderr, "cuda emulation: cublasGemmEx: types %d %d %d compute %d not modelled\n", at, bt, ct, compute);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (at == CUDA_R_32F)
        return gemm(h, ta, tb, m, n, k, (const float *)alpha, (const float *)a, lda, sa, (const float *)b, ldb, sb,
                    (const float *)beta, (float *)c, ldc, sc, batch);
    int ar = ta == CUBLAS_OP_N ? m : k, br = tb == CUBLAS_OP_N ? k : n;
    if (m < 0 || n < 0 || k < 0 || batch < 0 || (ta != CUBLAS_OP_N && ta != CUBLAS_OP_T) ||
        (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T) || lda < (ar > 1 ? ar : 1) || ldb < (br > 1 ? br : 1) ||
        ldc < (m > 1 ? m : 1)) {
        fprintf(stderr, "cuda emulation: cublasGemmEx: invalid value (m %d n %d k %d lda %d ldb %d ldc %d)\n", m, n, k,
                lda, ldb, ldc);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (!m || !n || !batch) return CUBLAS_STATUS_SUCCESS;
    int ac = ta == CUBLAS_OP_N ? k : m, bc = tb == CUBLAS_OP_N ? n : k;
    size_t na = k ? (size_t)lda * (size_t)(ac - 1) + (size_t)ar : 0, nb = k ? (size_t)ldb * (size_t)(bc - 1) + (size_t)br : 0;
    size_t nc = (size_t)ldc * (size_t)(n - 1) + (size_t)m;
    std::vector<float> wa(na ? na : 1), wb(nb ? nb : 1), wc(nc);
    for (int i = 0; i < batch; i++) {
        const char *ai = (const char *)a + 2 * sa * i, *bi = (const char *)b + 2 * sb * i;
        char *ci = (char *)c + 2 * sc * i;
        if ((na && !vp_emu_on_device(ai, 2 * na)) || (nb && !vp_emu_on_device(bi, 2 * nb)) || !vp_emu_on_device(ci, 2 * nc)) {
            fprintf(stderr, "cuda emulation: cublasGemmEx batch %d: an operand reaches outside device memory\n", i);
            vp_emu_set_error(cudaErrorIllegalAddress);
            return CUBLAS_STATUS_EXECUTION_FAILED;
        }
        for (size_t j = 0; j < na; j++) wa[j] = ex_load(ai, at, j);
        for (size_t j = 0; j < nb; j++) wb[j] = ex_load(bi, bt, j);
        for (size_t j = 0; j < nc; j++) wc[j] = ex_load(ci, ct, j);
        float fa = *(const float *)alpha, fb = *(const float *)beta;
        if (k) {
            CBLAS_TRANSPOSE oa = ta == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, ob = tb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans;
            cblas_sgemm(CblasColMajor, oa, ob, m, n, k, fa, wa.data(), lda, wb.data(), ldb, fb, wc.data(), ldc);
        } else {
            for (int j = 0; j < n; j++)
                for (int r = 0; r < m; r++) wc[(size_t)j * ldc + r] = fb == 0 ? 0.0f : fb * wc[(size_t)j * ldc + r];
        }
        for (int j = 0; j < n; j++)
            for (int r = 0; r < m; r++) ex_store(ci, ct, (size_t)j * ldc + r, wc[(size_t)j * ldc + r]);
    }
    return CUBLAS_STATUS_SUCCESS;
}

} // namespace

extern "C" {

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void *alpha, const void *a, cudaDataType at, int lda, const void *b, cudaDataType bt,
                            int ldb, const void *beta, void *c, cudaDataType ct, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t algo) {
    (void)algo;
    return gemm_ex(h, ta, tb, m, n, k, alpha, a, at, lda, 0, b, bt, ldb, 0, beta, c, ct, ldc, 0, 1, compute);
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                          int k, const void *alpha, const void *a, cudaDataType at, int lda,
                                          long long sa, const void *b, cudaDataType bt, int ldb, long long sb,
                                          const void *beta, void *c, cudaDataType ct, int ldc, long long sc, int batch,
                                          cublasComputeType_t compute, cublasGemmAlgo_t algo) {
    (void)algo;
    return gemm_ex(h, ta, tb, m, n, k, alpha, a, at, lda, sa, b, bt, ldb, sb, beta, c, ct, ldc, sc, batch, compute);
}

cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const float *alpha, const float *a, int lda, const float *b, int ldb, const float *beta,
                           float *c, int ldc) {
    return gemm(h, ta, tb, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c, ldc, 0, 1);
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                         int k, const float *alpha, const float *a, int lda, long long sa,
                                         const float *b, int ldb, long long sb, const float *beta, float *c, int ldc,
                                         long long sc, int batch) {
    return gemm(h, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, batch);
}

} // extern "C"
