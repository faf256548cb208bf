/* The CUDA kernels' launchers: plain C entry points over device pointers.
 *
 * cuda_ops_*.c (C) read a node's attributes and shapes and call these; the .cu
 * files hold the kernels.  Every launcher enqueues on the given stream and returns
 * cudaGetLastError(), so each launch is checked by its caller.  Dtype codes are
 * vp_dtype's (ONNX TensorProto numbering): 1 float32, 11 float64, 6 int32, 7 int64,
 * 9 bool, 10 float16, 16 bfloat16.  Element strides are in elements, 0 where an input is broadcast. */
#ifndef VP_CU_KERNELS_H
#define VP_CU_KERNELS_H

#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CU_MAX_RANK 8

/* An output index space of `rank` dims (row-major, contiguous output) and, for up to
 * three inputs, the element stride of each dim in that input. */
typedef struct cu_nd {
    int rank;
    int64_t dims[CU_MAX_RANK];
    int64_t s0[CU_MAX_RANK], s1[CU_MAX_RANK], s2[CU_MAX_RANK];
} cu_nd;

enum cu_binary_op {
    CU_ADD, CU_SUB, CU_MUL, CU_DIV, CU_POW, CU_MAX, CU_MIN, CU_MOD, CU_FMOD, CU_PRELU,
    CU_RELU_GRAD,    /* a = dY, b = X: dY * (X > 0) */
    CU_SIGMOID_GRAD, /* a = dY, b = Y: dY * Y * (1 - Y) */
    CU_TANH_GRAD,    /* a = dY, b = Y: dY * (1 - Y * Y) */
    CU_GELU_GRAD,    /* a = dY, b = X: exact GELU derivative */
    CU_FAST_GELU_GRAD, /* a = dY, b = X: derivative of GELU's tanh form */
    /* comparisons and logic write bool (uint8) */
    CU_EQUAL, CU_LESS, CU_LESS_EQUAL, CU_GREATER, CU_GREATER_EQUAL, CU_AND, CU_OR, CU_XOR,
};

enum cu_unary_op {
    CU_RELU, CU_NEG, CU_SQRT, CU_ERF, CU_EXP, CU_LOG, CU_ABS, CU_SIGMOID, CU_TANH, CU_RECIPROCAL,
    CU_IDENTITY, CU_LEAKY_RELU, CU_ELU, CU_FLOOR, CU_CEIL, CU_SIN, CU_COS, CU_SOFTPLUS, CU_GELU,
    CU_SIGN, CU_ROUND, CU_SELU, CU_HARD_SIGMOID, CU_SOFTSIGN, CU_CLIP, CU_TAN, CU_NOT,
    CU_FAST_GELU, /* GELU's tanh form, com.microsoft.FastGelu */
    CU_SWISH,     /* x sigmoid(alpha x): SiLU at alpha 1 (planner/train/fuse.c) */
};

enum cu_reduce_op { CU_RSUM, CU_RMEAN, CU_RMAX, CU_RMIN, CU_RPROD, CU_RSUMSQ, CU_RL1, CU_RL2, CU_RLOGSUMEXP, CU_RLOGSUM };

/* y[i] = op(a[..], b[..]) over nd (s0 for a, s1 for b); dtype 1, 11, 10, 16, 6, 7 (9 for logic). */
cudaError_t cu_binary(int dtype, int op, const cu_nd *nd, const void *a, const void *b, void *y, cudaStream_t st);
/* y = op(x) elementwise, float32, float64, float16 or bfloat16; alpha, beta are the op's attributes. */
cudaError_t cu_unary(int dtype, int op, int64_t n, const void *x, void *y, float alpha, float beta, cudaStream_t st);
/* The gated MLP (vplan.SwiGluMatMul): backward 0, a = act(g) u; backward 1, from dA in
 * a, du = dA act(g) (du may be NULL) and a = dA u act'(g); act swish (gate 0), GELU (1),
 * GELU's tanh form (2); float32, float16, bfloat16. */
cudaError_t cu_swiglu(int dtype, int backward, int gate, int64_t n, const void *g, const void *u, void *a, void *du,
                      cudaStream_t st);
/* LeakyReluGrad: dx = y > 0 ? dy : alpha dy, float32 or float64. */
cudaError_t cu_leaky_relu_grad(int dtype, int64_t n, const void *dy, const void *y, void *dx, double alpha,
                               cudaStream_t st);
/* y = cond ? a : b over nd (s0 cond, s1 a, s2 b); elements of esize bytes. */
cudaError_t cu_where(int esize, const cu_nd *nd, const uint8_t *cond, const void *a, const void *b, void *y,
                     cudaStream_t st);
/* Copies an n-d block: dst[sum i_d * dst_str[d]] = src[sum i_d * src_str[d]]. */
cudaError_t cu_copy_nd(int esize, int rank, const int64_t *dims, const void *src, const int64_t *src_str, void *dst,
                       const int64_t *dst_str, cudaStream_t st);
/* out[o, j, i] = data[o, idx[j], i]; negative indices count from the end, others out
 * of range give zeros. */
cudaError_t cu_gather(int esize, int64_t outer, int64_t dim, int64_t count, int64_t inner, const void *data,
                      const void *idx, int idx64, void *out, cudaStream_t st);
/* dx = 0; dx[o, idx[j], i] += dy[o, j, i] (float32). */
cudaError_t cu_gather_grad(int64_t outer, int64_t dim, int64_t count, int64_t inner, const void *idx, int idx64,
                           const float *dy, float *dx, cudaStream_t st);
/* The same for float16 (dtype 10) or bfloat16 (16) dY and dX: float32 sums in index
 * order, rounded once (a dX row of dim floats must fit 48 KiB of shared memory). */
cudaError_t cu_gather_grad_lowp(int dtype, int64_t outer, int64_t dim, int64_t count, int64_t inner, const void *idx,
                                int idx64, const void *dy, void *dx, cudaStream_t st);
/* Elementwise conversion between float32, float64, float16, bfloat16, int8..int64, uint8, bool. */
cudaError_t cu_cast(int64_t n, int from, const void *x, int to, void *y, cudaStream_t st);
/* A fused Cast's widening (runtime/cuda/cuda_backend.c): buf holds n float32 slots whose
 * second half holds the n float16 (from 10) or bfloat16 (16) values a kernel wrote;
 * each becomes its float32, in place, in passes that never overwrite a value unread. */
cudaError_t cu_widen_in_place(int from, int64_t n, void *buf, cudaStream_t st);

/* Reduction: output index over kept dims (strides ks in x), reduced dims (strides rs). */
typedef struct cu_reduce_geom {
    int nk, nr;
    int64_t kdims[CU_MAX_RANK], ks[CU_MAX_RANK];
    int64_t rdims[CU_MAX_RANK], rs[CU_MAX_RANK];
    int64_t n_out, n_red;
} cu_reduce_geom;
/* dtype 1, 11, 10 or 16 (the 16-bit types summed in double, rounded on store). */
cudaError_t cu_reduce(int dtype, int op, const cu_reduce_geom *g, const void *x, void *y, cudaStream_t st);

/* Softmax over rows of len elements, inner apart; kind 0 softmax, 1 log-softmax. */
cudaError_t cu_softmax(int kind, int64_t outer, int64_t len, int64_t inner, const float *x, float *y, cudaStream_t st);
/* kind 0: dx = y (dy - sum dy y); kind 1: dx = dy - exp(y) sum dy. */
cudaError_t cu_softmax_grad(int kind, int64_t outer, int64_t len, int64_t inner, const float *dy, const float *y,
                            float *dx, cudaStream_t st);
/* LayerNormalization over rows of len, or with rms RMSNorm (SimplifiedLayerNormalization:
 * the mean taken as 0); scale and bias [len] (bias may be NULL); mean and inv_std [rows]
 * may be NULL.  y of dtype 1, or 10 or 16 rounded on store (a fused Cast). */
cudaError_t cu_layernorm(int64_t rows, int64_t len, float eps, int rms, const float *x, const float *scale,
                         const float *bias, int ydtype, void *y, float *mean, float *inv_std, cudaStream_t st);
/* Its gradient; mean NULL: RMSNorm's (no centering term). */
cudaError_t cu_layernorm_grad(int64_t rows, int64_t len, const float *dy, const float *x, const float *scale,
                              const float *mean, const float *inv_std, float *dx, float *dscale, float *dbias,
                              cudaStream_t st);
/* Batch normalisation of x [n, c, plane]; training uses the batch statistics and
 * writes the running statistics and saved mean / inverse std (any output may be NULL).
 * x, y, dy, dx of dtype 1, 10 or 16; scale, bias and the statistics float32. */
cudaError_t cu_batchnorm(int dtype, int64_t n, int64_t c, int64_t plane, int training, double eps, double momentum,
                         const void *x, const float *scale, const float *bias, const float *rmean, const float *rvar,
                         void *y, float *out_mean, float *out_var, float *saved_mean, float *saved_inv, cudaStream_t st);
cudaError_t cu_batchnorm_grad(int dtype, int64_t n, int64_t c, int64_t plane, const void *dy, const void *x,
                              const float *scale, const float *mean, const float *inv, void *dx, float *dscale,
                              float *dbias, cudaStream_t st);

/* 3-D convolution geometry (2-D convolutions have d = kd = od = sd = dd = 1, pd = 0;
 * 1-D ones h = kh = oh = 1 as well). */
typedef struct cu_conv_geom {
    int64_t n, c, d, h, w; /* input */
    int64_t m, od, oh, ow; /* output channels and extent */
    int64_t kd, kh, kw, sd, sh, sw, pd, ph, pw, dd, dh, dw, group;
} cu_conv_geom;
/* dtype 1, 10 or 16, every tensor of it; b may be NULL. */
cudaError_t cu_conv2d(int dtype, const cu_conv_geom *g, const void *x, const void *w, const void *b, void *y,
                      cudaStream_t st);
/* y[n, m, :] += b[m] over planes of `plane` elements (cuDNN's convolutions, which add no bias). */
cudaError_t cu_conv_bias(int dtype, int64_t n, int64_t m, int64_t plane, const void *b, void *y, cudaStream_t st);
/* Any of dx, dw, db may be NULL. */
cudaError_t cu_conv2d_grad(int dtype, const cu_conv_geom *g, const void *dy, const void *x, const void *w, void *dx,
                           void *dw, void *db, cudaStream_t st);
/* Pooling windows over planes (cu_pool.cu); 1-D pooling has h = oh = kh = 1.  pe*: the
 * padding at the end (ceil_mode windows may run past it and take nothing there). */
typedef struct cu_pool_geom {
    int64_t planes, h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw;
    int count_include_pad;
    int64_t peh, pew;
} cu_pool_geom;
/* kind 0 max, 1 average; dtype 1, 10 or 16.  idx (may be NULL): MaxPool's Indices,
 * flat over the whole input, row-major or (col_major) column-major within a plane. */
cudaError_t cu_pool2d(int kind, int dtype, const cu_pool_geom *g, const void *x, void *y, int64_t *idx, int col_major,
                      cudaStream_t st);
/* dx from dy: kind 0 MaxPoolGrad through idx, 1 vplan.MaxPoolInputGrad through x,
 * 2 AveragePoolGrad; dtype 1, 10 or 16. */
cudaError_t cu_pool2d_grad(int kind, int dtype, const cu_pool_geom *g, const void *dy, const int64_t *idx,
                           const void *x, void *dx, cudaStream_t st);
/* Global average (kind 1) or max (kind 0) over planes of len. */
cudaError_t cu_global_pool(int kind, int64_t planes, int64_t len, const float *x, float *y, cudaStream_t st);

/* SoftmaxCrossEntropyLoss over scores [batch, classes, spatial]; reduction 0 none,
 * 1 sum, 2 mean; y is [batch, spatial] for none, else a scalar; log_prob may be NULL.
 * scratch: 16 bytes of device memory. */
cudaError_t cu_sce_loss(int64_t batch, int64_t classes, int64_t spatial, const float *x, const void *labels,
                        int idx64, const float *weights, int has_ignore, int64_t ignore, int reduction, float *y,
                        float *log_prob, double *scratch, cudaStream_t st);
cudaError_t cu_sce_loss_grad(int64_t batch, int64_t classes, int64_t spatial, const float *dy, const float *log_prob,
                             const void *labels, int idx64, const float *weights, int64_t ignore, int reduction,
                             const float *bias, float *dx, double *scratch, cudaStream_t st);

/* Optimizer updates with torch.optim's operation order (planner/ops/update.c). */
typedef struct cu_opt {
    double lr, weight_decay, momentum, beta1, beta2, eps;
    int decoupled;
} cu_opt;
/* b, b_out NULL: plain SGD.  do_update (a device bool, or NULL: update): false copies
 * each input to its output (fp16 loss scaling's skipped step). */
cudaError_t cu_sgd(int64_t n, const cu_opt *h, const float *w, const float *g, const float *b, float *w_out,
                   float *b_out, const uint8_t *do_update, cudaStream_t st);
/* t: the float32 step count before this step; t_out (may alias t) gets t + 1 (t where
 * do_update is false). */
cudaError_t cu_adam(int64_t n, const cu_opt *h, const float *w, const float *g, const float *m, const float *v,
                    const float *t, float *w_out, float *m_out, float *v_out, float *t_out, const uint8_t *do_update,
                    cudaStream_t st);

/* ---- training ops (cu_train.cu); dtype 1, 10, 16 or 11 ---- */

/* Dropout: y = keep ? x * scale : 0, keep the mask (one byte an element). */
cudaError_t cu_dropout(int dtype, int64_t n, const void *x, const uint8_t *keep, double scale, void *y, cudaStream_t st);
/* y and the mask (NULL: none) of a Dropout of ours at ratio: runtime/dropout_rng.h's mask
 * of the seed and the step count (on the device; NULL: 0), element i at its index among
 * `ranks` chunks of `chunk` (1 rank: i). */
cudaError_t cu_dropout_counter(int dtype, int64_t n, const void *x, uint32_t seed, const int64_t *step, double ratio,
                               uint64_t chunk, int ranks, int rank, void *y, uint8_t *mask, cudaStream_t st);
/* DropoutGrad: dx = mask ? dy / keep : 0. */
cudaError_t cu_dropout_grad(int dtype, int64_t n, const void *dy, const uint8_t *mask, double keep, void *dx,
                            cudaStream_t st);
/* IsAllFinite over one input: *flag = 0 if an element is non-finite (mode 0), infinite
 * (1) or NaN (2); *flag is left alone otherwise, so inputs check in turn into one flag. */
cudaError_t cu_all_finite(int dtype, int64_t n, const void *x, int mode, uint8_t *flag, cudaStream_t st);

/* ---- resample (cu_resample.cu; the index ops cu_scatter.cu) ---- */

/* Resize's plan as runtime/cpu/k_resample.h resolves it; coord and round are
 * vp_resize_coord and vp_resize_round, linear 0 for nearest. */
typedef struct cu_resize_plan {
    int rank, linear, coord, round;
    int64_t in[CU_MAX_RANK], out[CU_MAX_RANK];
    double scale[CU_MAX_RANK], length[CU_MAX_RANK], roi_start[CU_MAX_RANK], roi_end[CU_MAX_RANK];
    double extrapolation;
} cu_resize_plan;
cudaError_t cu_resize(const cu_resize_plan *p, const float *x, float *y, cudaStream_t st);
cudaError_t cu_resize_grad(const cu_resize_plan *p, const float *dy, float *dx, cudaStream_t st);

/* Index rows of k entries into a block of dims (strides in elements) after the batch
 * axes: rows per batch, elements per slice, elements per batch block. */
typedef struct cu_nd_geom {
    int k;
    int64_t dims[CU_MAX_RANK], strides[CU_MAX_RANK];
    int64_t rows, slice, block;
} cu_nd_geom;
/* out already holds the data; op 0 writes (any element size), 1 add, 2 mul, 3 max, 4 min (float32). */
cudaError_t cu_scatter_nd(int esize, const cu_nd_geom *g, int64_t rows, const void *idx, int idx64, const void *upd,
                          void *out, int op, cudaStream_t st);
cudaError_t cu_gather_nd(int esize, const cu_nd_geom *g, int64_t batches, const void *idx, int idx64, const void *x,
                         void *y, cudaStream_t st);
cudaError_t cu_gather_nd_grad(const cu_nd_geom *g, int64_t batches, const void *idx, int idx64, const float *dy,
                              float *dx, cudaStream_t st);

/* ---- Pad, CumSum (cu_tensor.cu) ---- */
/* Pad: output element i reads the input where its kept box maps it (first: the crop of
 * negative begin pads; pad: the positive ones; kept: the box's extent), outside the box
 * the fill (mode 0, its bits in value's low bytes) or the source its mode names (1
 * reflect, 2 edge, 3 wrap). */
typedef struct cu_pad_geom {
    int rank, mode;
    int64_t out_dims[CU_MAX_RANK], in_strides[CU_MAX_RANK], first[CU_MAX_RANK], pad[CU_MAX_RANK], kept[CU_MAX_RANK];
    uint64_t value;
} cu_pad_geom;
cudaError_t cu_pad(int esize, const cu_pad_geom *g, const void *x, void *y, cudaStream_t st);
/* CumSum over [outer, len, inner] along len; dtype a vp_dtype (float32, float64, int32,
 * int64). */
cudaError_t cu_cumsum(int dtype, int64_t outer, int64_t len, int64_t inner, int exclusive, int reverse, const void *x,
                      void *y, cudaStream_t st);
/* InstanceNormalization: one block per (image, channel) plane; x, y of dtype (float32,
 * float16, bfloat16), scale and bias float32 [channels]. */
cudaError_t cu_instancenorm(int dtype, int64_t n, int64_t c, int64_t plane, double eps, const void *x,
                            const float *scale, const float *bias, void *y, cudaStream_t st);

/* GatherElements and its kin: element j of the indices (shape idx_dims) addresses the
 * data (strides) at its own coordinates, the axis's replaced by its index (of dim). */
typedef struct cu_el_geom {
    int rank, axis;
    int64_t dim;
    int64_t idx_dims[CU_MAX_RANK], strides[CU_MAX_RANK];
} cu_el_geom;
cudaError_t cu_gather_elements(int esize, const cu_el_geom *g, const void *idx, int idx64, const void *x, void *y,
                               cudaStream_t st);
/* out already holds the data; op as cu_scatter_nd's. */
cudaError_t cu_scatter_elements(int esize, const cu_el_geom *g, const void *idx, int idx64, const void *upd, void *out,
                                int op, cudaStream_t st);
cudaError_t cu_gather_elements_grad(const cu_el_geom *g, int64_t dx_elems, const void *idx, int idx64, const float *dy,
                                    float *dx, cudaStream_t st);

#ifdef __cplusplus
}
#endif

#endif
