/* The decisions around cuDNN's convolutions, as plain C that runs (and is tested) on
 * any host: no CUDA or cuDNN header is included here.
 *
 *   vp_conv_shape_of      a Conv or ConvGrad node's geometry (1-, 2- or 3-D, groups,
 *                         pads at both ends, auto_pad), shared by cuDNN and our kernels
 *   vp_cudnn_desc_of      the shape as cuDNN's descriptors want it (NCHW / NCDHW packed,
 *                         1-D as 2-D with height 1, int dimensions), or why cuDNN cannot
 *                         take it (then our kernels run)
 *   vp_cudnn_pick         which of the algorithms cuDNN's heuristics ranked to run: the
 *                         first (fastest) that ran, fits the planned workspace and, for
 *                         the gradients, is deterministic
 *   vp_cudnn_env_off      whether VP_CUDA_NO_CUDNN asks for our kernels instead
 *
 * cuda_cudnn.c calls cuDNN with what these return. */
#ifndef VP_CUDNN_SELECT_H
#define VP_CUDNN_SELECT_H

#include <stddef.h>
#include <stdint.h>

#include "ir/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vp_conv_shape {
    int spatial;                      /* 1, 2 or 3 */
    int64_t n, c, m, group;           /* batch, input channels, output channels, groups */
    int64_t in[3], out[3], k[3];      /* spatial sizes of x, y and the kernel */
    int64_t stride[3], dil[3];
    int64_t pad[3], pad_end[3];       /* padding before and after, per spatial axis */
} vp_conv_shape;

/* From Conv's attributes and x [N, C, ...], w [M, C/group, ...], y [N, M, ...] (for
 * ConvGrad, y is dY).  VP_ERR_UNSUPPORTED past 3 spatial axes, VP_ERR_INVALID when the
 * group does not divide the channels. */
vp_status vp_conv_shape_of(const vp_node *n, const vp_tensor *x, const vp_tensor *w, const vp_tensor *y,
                           vp_conv_shape *s, vp_error *err);

typedef struct vp_cudnn_desc {
    int nb_dims;                      /* 4 or 5 */
    int x[5], w[5], y[5];             /* x [N, C, (D,) H, W], w [M, C/group, ...], y [N, M, ...] */
    int x_stride[5], y_stride[5];     /* packed, in elements */
    int pad[3], stride[3], dil[3];    /* nb_dims - 2 of each */
    int groups;
} vp_cudnn_desc;

/* NULL with d filled, or why cuDNN cannot run this convolution: padding that differs
 * at the two ends of an axis and changes the output size (cuDNN pads symmetrically), or
 * a size over INT_MAX. */
const char *vp_cudnn_desc_of(const vp_conv_shape *s, vp_cudnn_desc *d);

/* One of cuDNN's ranked algorithms (its *AlgoPerf_t, less what is not used). */
typedef struct vp_cudnn_perf {
    int algo;
    int ok;                           /* status was CUDNN_STATUS_SUCCESS */
    size_t memory;                    /* workspace bytes it needs */
    int deterministic;
} vp_cudnn_perf;

/* Index in perf (cuDNN's order, the fastest first) of the first algorithm that is ok,
 * needs at most limit bytes of workspace, and is deterministic when need_deterministic;
 * -1 when none is. */
int vp_cudnn_pick(const vp_cudnn_perf *perf, int count, size_t limit, int need_deterministic);

/* 1 when VP_CUDA_NO_CUDNN is set and not "0" or empty: convolutions run on our kernels. */
int vp_cudnn_env_off(void);

#ifdef __cplusplus
}
#endif

#endif
