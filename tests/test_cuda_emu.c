/* The CUDA host emulation (runtime/cuda/emu) on its own: kernels that need barriers and
 * warp collectives compute what a GPU computes (tests/cu_emu_checks.cu), and what a GPU
 * refuses it refuses: a shuffle a lane has left, a bad launch configuration, a copy in
 * the wrong direction or outside an allocation, a cuBLAS call with a bad leading
 * dimension.  cuBLAS's column-major transposes against a plain triple loop, and TF32
 * rounding.  Skips where the emulation is not built. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;
#define CHECK(cond, ...)                                                                                              \
    do {                                                                                                              \
        if (!(cond)) {                                                                                                \
            failures++;                                                                                               \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                                               \
            printf(__VA_ARGS__);                                                                                      \
            printf("\n");                                                                                             \
        }                                                                                                             \
    } while (0)

#ifdef VP_CUDA_EMU
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

cudaError_t emu_reverse(const int *x, int *y, int blocks, int threads);
cudaError_t emu_warp_sums(const int *x, int *y, int *z, int n);
cudaError_t emu_ids(int *ids, int *count);
cudaError_t emu_shuffle_after_exit(int *y);
cudaError_t emu_barrier_after_exit(int *y);
cudaError_t emu_bad_config(int *y, int threads, size_t shmem);

static void *dev(size_t bytes) {
    void *p = NULL;
    CHECK(cudaMalloc(&p, bytes) == cudaSuccess, "cudaMalloc %zu", bytes);
    return p;
}

static void check_kernels(void) {
    enum { N = 4 * 256 };
    int h[N], r[N], *x = dev(sizeof h), *y = dev(sizeof h), *z = dev(sizeof h);
    for (int i = 0; i < N; i++) h[i] = i * 7 % 13 - 6;
    cudaMemcpy(x, h, sizeof h, cudaMemcpyHostToDevice);
    CHECK(emu_reverse(x, y, 4, 256) == cudaSuccess, "reverse launch");
    cudaMemcpy(r, y, sizeof r, cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int i = 0; i < N; i++) bad += r[i] != h[(i / 256) * 256 + 255 - i % 256];
    CHECK(!bad, "reverse through shared memory: %d wrong", bad);

    int sums[N / 32];
    CHECK(emu_warp_sums(x, y, z, N) == cudaSuccess, "warp sums launch");
    cudaMemcpy(r, y, sizeof r, cudaMemcpyDeviceToHost);
    cudaMemcpy(sums, z, sizeof sums, cudaMemcpyDeviceToHost);
    bad = 0;
    for (int w = 0; w < N / 32; w++) {
        int s = 0;
        for (int l = 0; l < 32; l++) s += h[w * 32 + l];
        for (int l = 0; l < 32; l++) bad += r[w * 32 + l] != s;
        bad += sums[w] != s;
    }
    CHECK(!bad, "warp sums: %d wrong", bad);

    int count = 0;
    cudaMemset(z, 0, sizeof(int));
    CHECK(emu_ids(y, z) == cudaSuccess, "3-D launch");
    cudaMemcpy(r, y, 6 * 24 * sizeof(int), cudaMemcpyDeviceToHost);
    cudaMemcpy(&count, z, sizeof count, cudaMemcpyDeviceToHost);
    bad = 0;
    for (int i = 0; i < 6 * 24; i++) bad += r[i] != i;
    CHECK(!bad && count == 6 * 24, "3-D ids: %d wrong, count %d", bad, count);

    CHECK(emu_barrier_after_exit(y) == cudaSuccess, "a barrier after some threads exited");
    cudaMemcpy(r, y, 40 * sizeof(int), cudaMemcpyDeviceToHost);
    CHECK(r[0] == 7 && r[39] == 7, "barrier after exit: %d %d", r[0], r[39]);

    printf("(the emulator is expected to report the next three)\n");
    fflush(stdout);
    CHECK(emu_shuffle_after_exit(y) == cudaErrorLaunchFailure, "a shuffle after half the warp left is refused");
    CHECK(emu_bad_config(y, 2048, 0) == cudaErrorInvalidConfiguration, "2048 threads a block are refused");
    CHECK(emu_bad_config(y, 64, 64 << 10) == cudaErrorInvalidValue, "64 KiB of dynamic shared memory is refused");
    CHECK(cudaGetLastError() == cudaSuccess, "the error was cleared");
    cudaFree(x);
    cudaFree(y);
    cudaFree(z);
}

static void check_memory(void) {
    size_t free0, total, free1;
    cudaMemGetInfo(&free0, &total);
    char host[64] = {0};
    char *d = dev(64);
    cudaMemGetInfo(&free1, &total);
    CHECK(free0 - free1 == 64, "cudaMemGetInfo sees the allocation: %zu", free0 - free1);
    CHECK(cudaMemcpy(d, host, 64, cudaMemcpyHostToDevice) == cudaSuccess, "host to device");
    CHECK(cudaMemcpy(d, host, 64, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue, "a copy in the wrong direction");
    CHECK(cudaMemcpy(d + 32, host, 64, cudaMemcpyHostToDevice) == cudaErrorInvalidValue, "a copy past the allocation");
    CHECK(cudaMemset(host, 0, 8) == cudaErrorInvalidValue, "a memset of host memory");
    CHECK(cudaFree(d + 8) == cudaErrorInvalidValue, "freeing inside an allocation");
    cudaGetLastError();
    cudaFree(d);
}

/* C (m x n, column-major) = alpha op(A) op(B) + beta C, the plain way */
static void ref_gemm(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda, const float *b,
                     int ldb, float beta, float *c, int ldc) {
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double s = 0;
            for (int p = 0; p < k; p++)
                s += (double)(ta ? a[i * lda + p] : a[p * lda + i]) * (tb ? b[p * ldb + j] : b[j * ldb + p]);
            c[j * ldc + i] = (float)(alpha * s + beta * c[j * ldc + i]);
        }
}

static void check_blas(void) {
    cublasHandle_t h;
    cublasCreate(&h);
    enum { M = 5, N = 4, K = 3, LD = 7, BATCH = 2, S = 64 };
    float a[BATCH * S], b[BATCH * S], c[BATCH * S], want[BATCH * S], got[BATCH * S];
    for (int i = 0; i < BATCH * S; i++) {
        a[i] = (float)((i * 37 % 19) - 9) / 8;
        b[i] = (float)((i * 53 % 23) - 11) / 8;
        c[i] = (float)((i * 11 % 7) - 3);
    }
    float *da = dev(sizeof a), *db = dev(sizeof b), *dc = dev(sizeof c);
    cudaMemcpy(da, a, sizeof a, cudaMemcpyHostToDevice);
    cudaMemcpy(db, b, sizeof b, cudaMemcpyHostToDevice);
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            float alpha = 0.5f, beta = 2.0f;
            memcpy(want, c, sizeof c);
            cudaMemcpy(dc, c, sizeof c, cudaMemcpyHostToDevice);
            for (int q = 0; q < BATCH; q++)
                ref_gemm(ta, tb, M, N, K, alpha, a + q * S, LD, b + q * S, LD, beta, want + q * S, LD);
            cublasStatus_t st = cublasSgemmStridedBatched(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                                          M, N, K, &alpha, da, LD, S, db, LD, S, &beta, dc, LD, S, BATCH);
            cudaMemcpy(got, dc, sizeof got, cudaMemcpyDeviceToHost);
            double worst = 0;
            for (int i = 0; i < BATCH * S; i++) worst = fmax(worst, fabs(got[i] - want[i]));
            CHECK(st == CUBLAS_STATUS_SUCCESS && worst < 1e-5, "strided batched gemm ta %d tb %d: status %d, error %g", ta,
                  tb, (int)st, worst);
        }
    float one = 1, zero = 0;
    CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, da, M - 1, db, LD, &zero, dc, LD) ==
              CUBLAS_STATUS_INVALID_VALUE,
          "lda < m is refused");
    CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, a, LD, db, LD, &zero, dc, LD) ==
              CUBLAS_STATUS_EXECUTION_FAILED,
          "a host operand fails");
    cudaGetLastError();
    /* TF32: 1 + 2^-12 keeps its low bit in float32, not in TF32 */
    float x = 1.0f + 1.0f / 4096, r32, rtf;
    cudaMemcpy(da, &x, 4, cudaMemcpyHostToDevice);
    cudaMemcpy(db, &one, 4, cudaMemcpyHostToDevice);
    cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, da, 1, db, 1, &zero, dc, 1);
    cudaMemcpy(&r32, dc, 4, cudaMemcpyDeviceToHost);
    cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH);
    cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, da, 1, db, 1, &zero, dc, 1);
    cudaMemcpy(&rtf, dc, 4, cudaMemcpyDeviceToHost);
    CHECK(r32 == x && rtf == 1.0f, "TF32 rounding: float32 %.9g, tf32 %.9g", r32, rtf);
    cudaFree(da);
    cudaFree(db);
    cudaFree(dc);
    cublasDestroy(h);
}

/* cuDNN's convolutions add no bias: cu_conv_bias does, per output channel. */
cudaError_t cu_conv_bias(int dtype, int64_t n, int64_t m, int64_t plane, const void *b, void *y, cudaStream_t st);

static void check_conv_bias(void) {
    enum { N = 2, M = 3, PLANE = 5, TOTAL = N * M * PLANE };
    float y[TOTAL], b[M] = {0.5f, -2.0f, 8.0f}, got[TOTAL];
    for (int i = 0; i < TOTAL; i++) y[i] = (float)i * 0.25f;
    float *dy = dev(sizeof y), *db = dev(sizeof b);
    cudaMemcpy(dy, y, sizeof y, cudaMemcpyHostToDevice);
    cudaMemcpy(db, b, sizeof b, cudaMemcpyHostToDevice);
    CHECK(cu_conv_bias(1, N, M, PLANE, db, dy, 0) == cudaSuccess, "cu_conv_bias launch");
    cudaMemcpy(got, dy, sizeof got, cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int i = 0; i < TOTAL; i++) bad += got[i] != y[i] + b[(i / PLANE) % M];
    CHECK(!bad, "cu_conv_bias: %d of %d elements wrong", bad, TOTAL);
    cudaFree(dy);
    cudaFree(db);
}

int main(void) {
    check_kernels();
    check_memory();
    check_blas();
    check_conv_bias();
    printf("%s: %d failures\n", failures ? "FAIL" : "ok", failures);
    return failures ? 1 : 0;
}
#else
int main(void) {
    (void)failures;
    printf("SKIP: the CUDA emulation is not built (VP_CUDA_EMU)\n");
    return 0;
}
#endif
