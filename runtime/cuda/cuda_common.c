/* What every op of the CUDA backend shares: checked CUDA and cuBLAS calls, host copies
 * of the small inputs an op needs on the host (axes, starts, Clip bounds), and
 * device-to-device copies. */
#include "cuda_internal.h"
#include "ir/dtype_conv.h"

vp_status vp_cuda_check(cudaError_t e, const vp_node *n, const char *what, vp_error *err) {
    if (e == cudaSuccess) return VP_OK;
    if (n) return vp_node_fail(err, VP_ERR_RUNTIME, n, "%s: CUDA error %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
    return vp_fail(err, VP_ERR_RUNTIME, "%s: CUDA error %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

static const char *blas_status_name(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "cuBLAS error";
    }
}

vp_status vp_cuda_blas_check(cublasStatus_t s, const vp_node *n, const char *what, vp_error *err) {
    if (s == CUBLAS_STATUS_SUCCESS) return VP_OK;
#ifndef VP_CUDA_EMU
    const char *why = s == CUBLAS_STATUS_NOT_INITIALIZED ? vp_cublas_lazy_error() : NULL;
    if (why) return vp_fail(err, VP_ERR_RUNTIME, "%s: %s (%s)", what, blas_status_name(s), why);
#endif
    if (n) return vp_node_fail(err, VP_ERR_RUNTIME, n, "%s: %s", what, blas_status_name(s));
    return vp_fail(err, VP_ERR_RUNTIME, "%s: %s", what, blas_status_name(s));
}

vp_status vp_cuda_need_f32(const vp_node *n, const vp_tensor *t, int k, vp_error *err) {
    if (!t) return vp_node_fail(err, VP_ERR_INVALID, n, "input %d is missing", k);
    if (t->dtype != VP_F32)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "the CUDA backend computes this op in float32 only (input %d is %s)",
                            k, vp_dtype_name(t->dtype));
    return VP_OK;
}

vp_status vp_cuda_need_float(const vp_node *n, const vp_tensor *t, int k, vp_error *err) {
    if (!t) return vp_node_fail(err, VP_ERR_INVALID, n, "input %d is missing", k);
    if (t->dtype != VP_F32 && t->dtype != VP_F16 && t->dtype != VP_BF16)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n,
                            "the CUDA backend computes this op in float32, float16 and bfloat16 only (input %d is %s)", k,
                            vp_dtype_name(t->dtype));
    return VP_OK;
}

/* ---- host copies of small integer inputs ---- */

vp_status vp_cuda_read_ints(cuda_ctx *c, const vp_node *n, const vp_tensor *t, int input, int64_t *out, int max,
                            int *count, vp_error *err) {
    int64_t k = vp_tensor_numel(t);
    if (t->dtype != VP_I64 && t->dtype != VP_I32)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "input %d is %s, expected int64 or int32", input, vp_dtype_name(t->dtype));
    if (k > max) return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "input %d has %lld entries, at most %d", input, (long long)k, max);
    *count = (int)k;
    const void *host = NULL;
    if (c->g && n >= c->g->nodes && n < c->g->nodes + c->g->n_nodes && input < n->n_inputs && n->inputs[input] >= 0) {
        const vp_value *v = &c->g->values[n->inputs[input]];
        if (v->data && !(v->flags & (VP_VAL_PARAM | VP_VAL_STATE | VP_VAL_INPUT))) host = v->data;
    }
    int64_t buf[64];
    if (!host) {
        /* computed on the device: wait for it */
        vp_status s = LAUNCH(cudaMemcpyAsync(buf, t->data, (size_t)k * vp_dtype_size(t->dtype), cudaMemcpyDeviceToHost, c->stream));
        if (!s) s = LAUNCH(cudaStreamSynchronize(c->stream));
        if (s) return s;
        host = buf;
    }
    for (int i = 0; i < k; i++) out[i] = t->dtype == VP_I64 ? ((const int64_t *)host)[i] : ((const int32_t *)host)[i];
    return VP_OK;
}

vp_status vp_cuda_read_float_scalar(cuda_ctx *c, const vp_node *n, const vp_tensor *t, int input, double *out,
                                    vp_error *err) {
    const void *host = NULL;
    if (c->g && n >= c->g->nodes && n < c->g->nodes + c->g->n_nodes && n->inputs[input] >= 0) {
        const vp_value *v = &c->g->values[n->inputs[input]];
        if (v->data && !(v->flags & (VP_VAL_PARAM | VP_VAL_STATE | VP_VAL_INPUT))) host = v->data;
    }
    double buf[1];
    if (!host) {
        vp_status s = LAUNCH(cudaMemcpyAsync(buf, t->data, vp_dtype_size(t->dtype), cudaMemcpyDeviceToHost, c->stream));
        if (!s) s = LAUNCH(cudaStreamSynchronize(c->stream));
        if (s) return s;
        host = buf;
    }
    if (t->dtype == VP_F32) *out = *(const float *)host;
    else if (t->dtype == VP_F64) *out = *(const double *)host;
    else if (t->dtype == VP_BOOL) *out = *(const uint8_t *)host != 0;
    else if (t->dtype == VP_I64) *out = (double)*(const int64_t *)host; /* a Dropout's step count */
    else if (t->dtype == VP_F16 || t->dtype == VP_BF16) *out = vp_load(host, t->dtype, 0); /* a bf16 plan's Clip bounds */
    else return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "input %d is %s, expected float", input, vp_dtype_name(t->dtype));
    return VP_OK;
}

vp_status vp_cuda_copy_d2d(cuda_ctx *c, const vp_node *n, void *dst, const void *src, size_t bytes, vp_error *err) {
    if (dst == src || !bytes) return VP_OK;
    return LAUNCH(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream));
}
