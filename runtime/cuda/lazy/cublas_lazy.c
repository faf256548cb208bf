/* cuBLAS opened on first use, not when the program starts.
 *
 * In: the cuBLAS entry points the backend calls (cuda_backend.c, cuda_ops_linalg.c),
 * under the names cublas_v2.h gives them.  Out: those functions, defined here, each
 * forwarding to libcublas, which the first call opens (dlopen) and resolves.  Kept
 * true: what links vplan_cuda (onnx-vplan, a generated CUDA step) does not load
 * libcublas at start.  Loading it runs libcublasLt's initialisers, about 0.15 s of CPU
 * and 26k page faults in every process, so each CPU-only command (plan, --help) took
 * 0.2-0.5 s instead of 0.03 s.  When libcublas cannot be opened, or lacks one of these
 * functions, every call returns CUBLAS_STATUS_NOT_INITIALIZED and
 * vp_cublas_lazy_error says why; the backend meets it at cublasCreate.
 *
 * Only the real backend (vplan_cuda) has this file: the host emulation defines the
 * same functions itself (runtime/cuda/emu/cuda_emu_blas.cc). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#include <cublas_v2.h>

#include "cuda_internal.h"

#ifndef VP_CUBLAS_LIB
#define VP_CUBLAS_LIB "libcublas.so"
#endif

static struct {
    int ok;
    char why[512];
    cublasStatus_t (*create)(cublasHandle_t *);
    cublasStatus_t (*destroy)(cublasHandle_t);
    cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t);
    cublasStatus_t (*set_workspace)(cublasHandle_t, void *, size_t);
    cublasStatus_t (*set_math_mode)(cublasHandle_t, cublasMath_t);
    cublasStatus_t (*sgemm)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const float *,
                            const float *, int, const float *, int, const float *, float *, int);
    cublasStatus_t (*sgemm_batched)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const float *,
                                    const float *, int, long long int, const float *, int, long long int,
                                    const float *, float *, int, long long int, int);
    cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,
                              const void *, cudaDataType, int, const void *, cudaDataType, int, const void *, void *,
                              cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
    cublasStatus_t (*gemm_ex_batched)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                      const void *, const void *, cudaDataType, int, long long int, const void *,
                                      cudaDataType, int, long long int, const void *, void *, cudaDataType, int,
                                      long long int, int, cublasComputeType_t, cublasGemmAlgo_t);
} api;

static pthread_once_t api_once = PTHREAD_ONCE_INIT;

/* Opens libcublas once, where the loader finds it (LD_LIBRARY_PATH, ld.so.conf) or else in
 * the toolkit the build found; it stays open until the process exits, as a linked one would. */
static void api_load(void) {
    void *h = dlopen(VP_CUBLAS_LIB, RTLD_NOW | RTLD_LOCAL);
    if (!h) snprintf(api.why, sizeof api.why, "cannot open %.400s", dlerror());
#ifdef VP_CUBLAS_DIR
    if (!h) h = dlopen(VP_CUBLAS_DIR "/" VP_CUBLAS_LIB, RTLD_NOW | RTLD_LOCAL);
#endif
    if (!h) return;
    const char *missing = NULL;
#define VP_CUBLAS_SYM(field, name)                                       \
    do {                                                                 \
        void *p = dlsym(h, name);                                        \
        if (!p && !missing) missing = name;                              \
        *(void **)&api.field = p;                                        \
    } while (0)
    VP_CUBLAS_SYM(create, "cublasCreate_v2");
    VP_CUBLAS_SYM(destroy, "cublasDestroy_v2");
    VP_CUBLAS_SYM(set_stream, "cublasSetStream_v2");
    VP_CUBLAS_SYM(set_workspace, "cublasSetWorkspace_v2");
    VP_CUBLAS_SYM(set_math_mode, "cublasSetMathMode");
    VP_CUBLAS_SYM(sgemm, "cublasSgemm_v2");
    VP_CUBLAS_SYM(sgemm_batched, "cublasSgemmStridedBatched");
    VP_CUBLAS_SYM(gemm_ex, "cublasGemmEx");
    VP_CUBLAS_SYM(gemm_ex_batched, "cublasGemmStridedBatchedEx");
#undef VP_CUBLAS_SYM
    if (missing) {
        snprintf(api.why, sizeof api.why, "%s has no %s", VP_CUBLAS_LIB, missing);
        return;
    }
    api.ok = 1;
}

static int api_ready(void) {
    pthread_once(&api_once, api_load);
    return api.ok;
}

const char *vp_cublas_lazy_error(void) {
    return api_ready() ? NULL : api.why;
}

cublasStatus_t cublasCreate_v2(cublasHandle_t *h) {
    return api_ready() ? api.create(h) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t h) {
    return api_ready() ? api.destroy(h) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t st) {
    return api_ready() ? api.set_stream(h, st) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t h, void *ws, size_t bytes) {
    return api_ready() ? api.set_workspace(h, ws, bytes) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode) {
    return api_ready() ? api.set_math_mode(h, mode) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                              const float *alpha, const float *a, int lda, const float *b, int ldb, const float *beta,
                              float *c, int ldc) {
    if (!api_ready()) return CUBLAS_STATUS_NOT_INITIALIZED;
    return api.sgemm(h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                         int k, const float *alpha, const float *a, int lda, long long int sa,
                                         const float *b, int ldb, long long int sb, const float *beta, float *c,
                                         int ldc, long long int sc, int batch) {
    if (!api_ready()) return CUBLAS_STATUS_NOT_INITIALIZED;
    return api.sgemm_batched(h, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, batch);
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void *alpha, const void *a, cudaDataType at, int lda, const void *b, cudaDataType bt,
                            int ldb, const void *beta, void *c, cudaDataType ct, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t algo) {
    if (!api_ready()) return CUBLAS_STATUS_NOT_INITIALIZED;
    return api.gemm_ex(h, ta, tb, m, n, k, alpha, a, at, lda, b, bt, ldb, beta, c, ct, ldc, compute, algo);
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                          int k, const void *alpha, const void *a, cudaDataType at, int lda,
                                          long long int sa, const void *b, cudaDataType bt, int ldb, long long int sb,
                                          const void *beta, void *c, cudaDataType ct, int ldc, long long int sc,
                                          int batch, cublasComputeType_t compute, cublasGemmAlgo_t algo) {
    if (!api_ready()) return CUBLAS_STATUS_NOT_INITIALIZED;
    return api.gemm_ex_batched(h, ta, tb, m, n, k, alpha, a, at, lda, sa, b, bt, ldb, sb, beta, c, ct, ldc, sc, batch,
                               compute, algo);
}
