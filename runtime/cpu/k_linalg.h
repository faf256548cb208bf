/* CPU kernels of the linalg family: MatMul, Gemm, Conv, ConvTranspose, pooling,
 * normalisation and LRN, plus the sliding-window geometry that the shape functions
 * and the kernels share, so both derive output sizes and pads the same way.
 *
 * Kernels compute float32 and float64 natively (MatMul, Gemm and Conv through
 * OpenBLAS); float16, bfloat16 and 8-bit integer tensors are widened to float32
 * scratch by vp_lin_run_widened() and rounded back.  Files:
 *   k_linalg.c  MatMul, Gemm, widening, scratch helpers
 *   k_conv.c    window geometry, Conv, ConvTranspose (im2col / col2im + gemm)
 *   k_pool.c    MaxPool, AveragePool, global pooling, LRN
 *   k_norm.c    BatchNormalization, LayerNormalization, InstanceNormalization */
#ifndef VP_K_LINALG_H
#define VP_K_LINALG_H

#include <stddef.h>
#include <stdint.h>

#include "ir/op_registry.h"

#define VP_MAX_SPATIAL (VP_MAX_RANK - 2)

/* Which op a window belongs to: the attributes and output-size rules differ. */
typedef enum vp_window_kind {
    VP_WINDOW_CONV,
    VP_WINDOW_CONV_TRANSPOSE,
    VP_WINDOW_MAXPOOL,
    VP_WINDOW_AVGPOOL,
} vp_window_kind;

/* A window sliding over the spatial axes of an N x C x D1 x ... tensor.  For Conv and
 * pooling, output position o on axis d reads input coordinate
 *     o * stride[d] - pad_begin[d] + k * dilation[d]        (k < kernel[d]);
 * for ConvTranspose the roles swap: input position i writes output coordinate
 *     i * stride[d] - pad_begin[d] + k * dilation[d]. */
typedef struct vp_window {
    int n_sp;                          /* number of spatial axes */
    int64_t in[VP_MAX_SPATIAL];        /* input extent per spatial axis */
    int64_t out[VP_MAX_SPATIAL];       /* output extent per spatial axis */
    int64_t kernel[VP_MAX_SPATIAL];
    int64_t stride[VP_MAX_SPATIAL];
    int64_t dilation[VP_MAX_SPATIAL];
    int64_t pad_begin[VP_MAX_SPATIAL];
    int64_t pad_end[VP_MAX_SPATIAL];   /* explicit or derived from auto_pad */
} vp_window;

/* Reads kernel_shape, strides, dilations, pads, auto_pad (and ceil_mode, output_padding,
 * output_shape where the op has them) and derives pads and the output extent.
 * x_dims: the input's spatial extents (n_sp of them); kernel: the kernel extents taken
 * from the weight (NULL for pooling, which reads kernel_shape).  Fails naming the node
 * on bad attributes (INVALID) or a variant not implemented (UNSUPPORTED). */
vp_status vp_window_resolve(const vp_node *n, vp_window_kind kind, int n_sp, const int64_t *x_dims,
                            const int64_t *kernel, vp_window *w, vp_error *err);

int64_t vp_window_in_volume(const vp_window *w);
int64_t vp_window_out_volume(const vp_window *w);
int64_t vp_window_kernel_volume(const vp_window *w);

/* ---- scratch and dtype helpers shared by the kernel files ---- */

/* malloc of count elements of esize bytes; NULL when the size overflows or memory is out. */
void *vp_lin_alloc(int64_t count, size_t esize);

/* float16, bfloat16, int8 and uint8 tensors are computed in float32 scratch. */
int vp_lin_is_narrow(vp_dtype t);

/* Runs kernel with every narrow tensor of the node widened to float32 and every narrow
 * output rounded back after; other tensors (int64 indices, float32) pass through. */
vp_status vp_lin_run_widened(vp_cpu_fn kernel, const vp_node *n, const vp_tensor *const *in,
                             vp_tensor *const *out, vp_error *err);

/* C = alpha * op(A) op(B) + beta * C in float32 (sgemm) or float64 (dgemm), row-major.
 * Fails when a dimension exceeds what the BLAS integer holds. */
vp_status vp_lin_gemm(const vp_node *n, vp_dtype t, int trans_a, int trans_b, int64_t m, int64_t nn,
                      int64_t k, double alpha, const void *a, int64_t lda, const void *b, int64_t ldb,
                      double beta, void *c, int64_t ldc, vp_error *err);

/* ---- kernels ---- */

vp_status vp_cpu_matmul(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
vp_status vp_cpu_fused_matmul(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                              vp_error *err);
vp_status vp_cpu_gemm(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
vp_status vp_cpu_conv(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
vp_status vp_cpu_conv_transpose(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                vp_error *err);
vp_status vp_cpu_maxpool(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
vp_status vp_cpu_avgpool(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
vp_status vp_cpu_global_avgpool(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                vp_error *err);
vp_status vp_cpu_global_maxpool(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                vp_error *err);
vp_status vp_cpu_lrn(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
vp_status vp_cpu_batchnorm(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
vp_status vp_cpu_layernorm(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);
vp_status vp_cpu_instancenorm(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                              vp_error *err);

/* True when a BatchNormalization node computes batch statistics (training_mode=1 from
 * opset 14, or the extra statistics outputs of older opsets). */
int vp_batchnorm_is_training(const vp_node *n);
/* True when a BatchNormalization node before opset 9 has spatial=0: statistics per
 * channel and spatial position, parameters shaped [C, D1, ...]. */
int vp_batchnorm_is_per_activation(const vp_node *n);

#endif
