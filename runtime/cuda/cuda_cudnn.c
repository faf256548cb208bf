/* Convolutions and their gradients through cuDNN (its convolution API, float32,
 * float16 and bfloat16 computing in float32, 1-D as 2-D, 2-D and 3-D, groups), with the
 * step's planned workspace: of the algorithms cuDNN's heuristics rank, the first whose
 * workspace fits it runs (cudnn_select.c decides; the gradients' only among the
 * deterministic ones, so a step repeats bit for bit).  Whatever cuDNN declines (no
 * algorithm fits, padding cuDNN cannot express, cuDNN off) says so by *ran = 0 and the
 * caller runs our kernels (cu_conv.cu).
 *
 * Built only where CMake found cudnn.h and libcudnn (VP_HAVE_CUDNN); elsewhere, and on
 * the host emulation, every entry reports that it did not run. */
#include <stdio.h>
#include <string.h>

#include "cu_kernels.h"
#include "cuda_internal.h"

#ifdef VP_HAVE_CUDNN
#include <cudnn.h>

const char *vp_cuda_cudnn_version(void) {
    static char v[32];
    size_t n = cudnnGetVersion(); /* 9.19.0 is 91900 */
    snprintf(v, sizeof v, "%zu.%zu.%zu", n / 10000, n / 100 % 100, n % 100);
    return v;
}

void vp_cuda_cudnn_init(cuda_ctx *c, char *why, size_t why_len) {
    cudnnHandle_t h = NULL;
    cudnnStatus_t st = cudnnCreate(&h);
    if (st == CUDNN_STATUS_SUCCESS) st = cudnnSetStream(h, c->stream);
    if (st != CUDNN_STATUS_SUCCESS) {
        snprintf(why, why_len, "%s", cudnnGetErrorString(st));
        if (h) cudnnDestroy(h);
        c->dnn = NULL;
        return;
    }
    c->dnn = h;
}

void vp_cuda_cudnn_destroy(cuda_ctx *c) {
    if (c->dnn) cudnnDestroy((cudnnHandle_t)c->dnn);
    c->dnn = NULL;
}

static vp_status dnn_check(cudnnStatus_t st, const vp_node *n, const char *what, vp_error *err) {
    if (st == CUDNN_STATUS_SUCCESS) return VP_OK;
    return vp_node_fail(err, VP_ERR_RUNTIME, n, "%s: %s", what, cudnnGetErrorString(st));
}

/* The descriptors of one convolution, made and freed together. */
typedef struct descs {
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
} descs;

static void descs_free(descs *d) {
    if (d->x) cudnnDestroyTensorDescriptor(d->x);
    if (d->y) cudnnDestroyTensorDescriptor(d->y);
    if (d->w) cudnnDestroyFilterDescriptor(d->w);
    if (d->conv) cudnnDestroyConvolutionDescriptor(d->conv);
}

/* float32 data computes in float32 (TF32 tensor cores only with allow_tf32: cuDNN's
 * default math would allow them); float16 and bfloat16 data compute in float32 on tensor
 * cores, as the CPU widens them. */
static vp_status descs_make(cuda_ctx *c, const vp_node *n, const vp_cudnn_desc *dd, vp_dtype dt, descs *d, vp_error *err) {
    cudnnDataType_t t = dt == VP_F16 ? CUDNN_DATA_HALF : dt == VP_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
    cudnnMathType_t math = dt != VP_F32 ? CUDNN_TENSOR_OP_MATH : c->allow_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
    memset(d, 0, sizeof *d);
    int conv = dd->nb_dims - 2;
    vp_status s = dnn_check(cudnnCreateTensorDescriptor(&d->x), n, "cudnnCreateTensorDescriptor", err);
    if (!s) s = dnn_check(cudnnCreateTensorDescriptor(&d->y), n, "cudnnCreateTensorDescriptor", err);
    if (!s) s = dnn_check(cudnnCreateFilterDescriptor(&d->w), n, "cudnnCreateFilterDescriptor", err);
    if (!s) s = dnn_check(cudnnCreateConvolutionDescriptor(&d->conv), n, "cudnnCreateConvolutionDescriptor", err);
    if (!s) s = dnn_check(cudnnSetTensorNdDescriptor(d->x, t, dd->nb_dims, dd->x, dd->x_stride), n, "x descriptor", err);
    if (!s) s = dnn_check(cudnnSetTensorNdDescriptor(d->y, t, dd->nb_dims, dd->y, dd->y_stride), n, "y descriptor", err);
    if (!s) s = dnn_check(cudnnSetFilterNdDescriptor(d->w, t, CUDNN_TENSOR_NCHW, dd->nb_dims, dd->w), n, "w descriptor", err);
    if (!s)
        s = dnn_check(cudnnSetConvolutionNdDescriptor(d->conv, conv, dd->pad, dd->stride, dd->dil, CUDNN_CROSS_CORRELATION,
                                                      CUDNN_DATA_FLOAT),
                      n, "convolution descriptor", err);
    if (!s) s = dnn_check(cudnnSetConvolutionGroupCount(d->conv, dd->groups), n, "cudnnSetConvolutionGroupCount", err);
    if (!s) s = dnn_check(cudnnSetConvolutionMathType(d->conv, math), n, "cudnnSetConvolutionMathType", err);
    if (s) {
        descs_free(d);
        memset(d, 0, sizeof *d);
    }
    return s;
}

/* cuDNN takes it: on, a descriptor it can express; else *ran stays 0. */
static int usable(cuda_ctx *c, const vp_conv_shape *sh, vp_cudnn_desc *dd) {
    return c->dnn && !c->cudnn_off && vp_cudnn_desc_of(sh, dd) == NULL;
}

enum { MAX_ALGOS = 16 };

/* The three directions share the ranking and the choice; each asks cuDNN its own way. */
typedef enum { FWD, BWD_DATA, BWD_FILTER } direction;

/* The chosen algorithm of direction dir, or -1 when none fits the step's workspace. */
static vp_status choose(cuda_ctx *c, const vp_node *n, direction dir, const descs *d, int *algo, vp_error *err) {
    cudnnHandle_t h = (cudnnHandle_t)c->dnn;
    vp_cudnn_perf perf[MAX_ALGOS];
    int count = 0;
    cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
    if (dir == FWD) {
        cudnnConvolutionFwdAlgoPerf_t p[MAX_ALGOS];
        st = cudnnGetConvolutionForwardAlgorithm_v7(h, d->x, d->w, d->conv, d->y, MAX_ALGOS, &count, p);
        for (int i = 0; i < count && st == CUDNN_STATUS_SUCCESS; i++) {
            size_t need = 0;
            int ok = p[i].status == CUDNN_STATUS_SUCCESS &&
                     cudnnGetConvolutionForwardWorkspaceSize(h, d->x, d->w, d->conv, d->y, p[i].algo, &need) ==
                         CUDNN_STATUS_SUCCESS;
            perf[i] = (vp_cudnn_perf){(int)p[i].algo, ok, need, p[i].determinism == CUDNN_DETERMINISTIC};
        }
    } else if (dir == BWD_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t p[MAX_ALGOS];
        st = cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d->w, d->y, d->conv, d->x, MAX_ALGOS, &count, p);
        for (int i = 0; i < count && st == CUDNN_STATUS_SUCCESS; i++) {
            size_t need = 0;
            int ok = p[i].status == CUDNN_STATUS_SUCCESS &&
                     cudnnGetConvolutionBackwardDataWorkspaceSize(h, d->w, d->y, d->conv, d->x, p[i].algo, &need) ==
                         CUDNN_STATUS_SUCCESS;
            perf[i] = (vp_cudnn_perf){(int)p[i].algo, ok, need, p[i].determinism == CUDNN_DETERMINISTIC};
        }
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t p[MAX_ALGOS];
        st = cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d->x, d->y, d->conv, d->w, MAX_ALGOS, &count, p);
        for (int i = 0; i < count && st == CUDNN_STATUS_SUCCESS; i++) {
            size_t need = 0;
            int ok = p[i].status == CUDNN_STATUS_SUCCESS &&
                     cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d->x, d->y, d->conv, d->w, p[i].algo, &need) ==
                         CUDNN_STATUS_SUCCESS;
            perf[i] = (vp_cudnn_perf){(int)p[i].algo, ok, need, p[i].determinism == CUDNN_DETERMINISTIC};
        }
    }
    vp_status s = dnn_check(st, n, "cudnnGetConvolution*Algorithm_v7", err);
    if (s) return s;
    int pick = vp_cudnn_pick(perf, count, c->ws_bytes, dir != FWD);
    *algo = pick >= 0 ? perf[pick].algo : -1;
    return VP_OK;
}

vp_status vp_cuda_cudnn_conv(cuda_ctx *c, const vp_node *n, const vp_conv_shape *sh, const vp_tensor *x,
                             const vp_tensor *w, const vp_tensor *b, vp_tensor *y, int *ran, vp_error *err) {
    *ran = 0;
    vp_cudnn_desc dd;
    if (!usable(c, sh, &dd)) return VP_OK;
    descs d;
    vp_status s = descs_make(c, n, &dd, x->dtype, &d, err);
    if (s) return s;
    int algo = -1;
    s = choose(c, n, FWD, &d, &algo, err);
    if (!s && algo >= 0) {
        const float one = 1.0f, zero = 0.0f;
        s = dnn_check(cudnnConvolutionForward((cudnnHandle_t)c->dnn, &one, d.x, x->data, d.w, w->data, d.conv,
                                              (cudnnConvolutionFwdAlgo_t)algo, c->ws, c->ws_bytes, &zero, d.y, y->data),
                      n, "cudnnConvolutionForward", err);
        int64_t plane = 1;
        for (int a = 0; a < sh->spatial; a++) plane *= sh->out[a];
        if (!s && b) s = LAUNCH(cu_conv_bias((int)y->dtype, sh->n, sh->m, plane, b->data, y->data, c->stream));
        *ran = !s;
    }
    descs_free(&d);
    return s;
}

vp_status vp_cuda_cudnn_conv_grad(cuda_ctx *c, const vp_node *n, const vp_conv_shape *sh, const vp_tensor *dy,
                                  const vp_tensor *x, const vp_tensor *w, vp_tensor *dx, vp_tensor *dw, vp_tensor *db,
                                  int *ran, vp_error *err) {
    *ran = 0;
    vp_cudnn_desc dd;
    if (!usable(c, sh, &dd)) return VP_OK;
    descs d;
    vp_status s = descs_make(c, n, &dd, x->dtype, &d, err);
    if (s) return s;
    /* both algorithms chosen before either runs: all of cuDNN or all of ours */
    int data_algo = -1, filter_algo = -1;
    if (dx) s = choose(c, n, BWD_DATA, &d, &data_algo, err);
    if (!s && dw) s = choose(c, n, BWD_FILTER, &d, &filter_algo, err);
    if (!s && (!dx || data_algo >= 0) && (!dw || filter_algo >= 0)) {
        cudnnHandle_t h = (cudnnHandle_t)c->dnn;
        const float one = 1.0f, zero = 0.0f;
        if (dx)
            s = dnn_check(cudnnConvolutionBackwardData(h, &one, d.w, w->data, d.y, dy->data, d.conv,
                                                       (cudnnConvolutionBwdDataAlgo_t)data_algo, c->ws, c->ws_bytes, &zero,
                                                       d.x, dx->data),
                          n, "cudnnConvolutionBackwardData", err);
        if (!s && dw)
            s = dnn_check(cudnnConvolutionBackwardFilter(h, &one, d.x, x->data, d.y, dy->data, d.conv,
                                                         (cudnnConvolutionBwdFilterAlgo_t)filter_algo, c->ws, c->ws_bytes,
                                                         &zero, d.w, dw->data),
                          n, "cudnnConvolutionBackwardFilter", err);
        /* dB: our reduction over the batch and the output planes, summed in double */
        if (!s && db) {
            int64_t plane = 1;
            for (int a = 0; a < sh->spatial; a++) plane *= sh->out[a];
            cu_conv_geom g = {.n = sh->n, .c = sh->c, .d = 1, .h = 1, .w = 1, .m = sh->m, .od = 1, .oh = 1, .ow = plane,
                              .kd = 1, .kh = 1, .kw = 1, .sd = 1, .sh = 1, .sw = 1, .dd = 1, .dh = 1, .dw = 1, .group = 1};
            s = LAUNCH(cu_conv2d_grad((int)dy->dtype, &g, dy->data, NULL, NULL, NULL, NULL, db->data, c->stream));
        }
        *ran = !s;
    }
    descs_free(&d);
    return s;
}

#else /* built without cuDNN: our kernels run every convolution */

const char *vp_cuda_cudnn_version(void) { return NULL; }

void vp_cuda_cudnn_init(cuda_ctx *c, char *why, size_t why_len) {
    c->dnn = NULL;
    snprintf(why, why_len, "built without cuDNN");
}

void vp_cuda_cudnn_destroy(cuda_ctx *c) { c->dnn = NULL; }

vp_status vp_cuda_cudnn_conv(cuda_ctx *c, const vp_node *n, const vp_conv_shape *sh, const vp_tensor *x,
                             const vp_tensor *w, const vp_tensor *b, vp_tensor *y, int *ran, vp_error *err) {
    (void)c, (void)n, (void)sh, (void)x, (void)w, (void)b, (void)y, (void)err;
    *ran = 0;
    return VP_OK;
}

vp_status vp_cuda_cudnn_conv_grad(cuda_ctx *c, const vp_node *n, const vp_conv_shape *sh, const vp_tensor *dy,
                                  const vp_tensor *x, const vp_tensor *w, vp_tensor *dx, vp_tensor *dw, vp_tensor *db,
                                  int *ran, vp_error *err) {
    (void)c, (void)n, (void)sh, (void)dy, (void)x, (void)w, (void)dx, (void)dw, (void)db, (void)err;
    *ran = 0;
    return VP_OK;
}

#endif
