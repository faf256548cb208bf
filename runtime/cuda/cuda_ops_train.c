/* CUDA ops of training steps that are neither arithmetic nor movement: Dropout (either
 * mode), com.microsoft.DropoutGrad and IsAllFinite (cu_train.cu), and ONNX Runtime's
 * gradient accumulation, InPlaceAccumulatorV2 and ZeroGradient.
 *
 * A training-mode Dropout keeps the elements the CPU keeps.  Ours (vplan_step: the
 * training steps' own) draw runtime/dropout_rng.h's counter-based mask on the device,
 * the step count read there.  ONNX's own draw theirs on the host by the CPU kernel's
 * generator (vp_dropout_keep_mask: MT19937 from the seed, a serial sequence), copied
 * into the mask output, then applied on the
 * device; one without a mask output in training mode (no gradient wants one) runs the
 * CPU kernel on host copies instead: it has no device memory for the mask. */
#include <stdlib.h>
#include <string.h>

#include "cpu_util.h"
#include "cu_kernels.h"
#include "cuda_internal.h"
#include "k_elementwise.h"

static int is_float(vp_dtype t) { return t == VP_F32 || t == VP_F16 || t == VP_BF16 || t == VP_F64; }

/* The CPU kernel on host copies of x and y (the mask-less training case). */
static vp_status dropout_on_host(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *y, double ratio,
                                 vp_error *err) {
    size_t bytes = vp_tensor_nbytes(y);
    vp_tensor hx = *in[0], hy = *y, hr = {0};
    float r = (float)ratio;
    uint8_t mode = 1;
    hx.data = malloc(bytes ? bytes : 1);
    hy.data = malloc(bytes ? bytes : 1);
    vp_status s = hx.data && hy.data ? VP_OK : vp_node_fail(err, VP_ERR_NOMEM, n, "out of memory for a host copy");
    if (!s) s = LAUNCH(cudaMemcpyAsync(hx.data, in[0]->data, bytes, cudaMemcpyDeviceToHost, c->stream));
    if (!s) s = LAUNCH(cudaStreamSynchronize(c->stream));
    hr.dtype = VP_F32;
    hr.data = &r;
    vp_tensor hm = {.dtype = VP_BOOL, .data = &mode};
    const vp_tensor *hin[3] = {&hx, &hr, &hm};
    vp_tensor *hout[1] = {&hy};
    vp_node one = *n;
    one.n_inputs = 3;
    one.n_outputs = 1;
    if (one.opset < 13) one.opset = 13;
    if (!s) s = vp_cpu_dropout(&one, hin, hout, err);
    if (!s) s = LAUNCH(cudaMemcpyAsync(y->data, hy.data, bytes, cudaMemcpyHostToDevice, c->stream));
    if (!s) s = LAUNCH(cudaStreamSynchronize(c->stream));
    free(hx.data);
    free(hy.data);
    return s;
}

static vp_status op_dropout(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                            vp_error *err) {
    const vp_tensor *x = in[0], *ratio_in = opt_in(n, in, 1), *mode_in = opt_in(n, in, 2), *step_in = opt_in(n, in, 3);
    vp_tensor *y = out[0], *mask = opt_out(n, out, 1);
    double ratio = 0.5, training = 0;
    vp_status s = VP_OK;
    /* the CPU kernel's reading: an attribute before opset 12, inputs since */
    if (n->opset < 12) ratio = vp_attr_float(n, "ratio", 0.5f);
    else if (ratio_in) s = vp_cuda_read_float_scalar(c, n, ratio_in, 1, &ratio, err);
    if (!s && n->opset >= 12 && mode_in) s = vp_cuda_read_float_scalar(c, n, mode_in, 2, &training, err);
    if (s) return s;
    if (!training || ratio == 0) { /* the identity, every element kept */
        s = vp_cuda_copy_d2d(c, n, y->data, x->data, vp_tensor_nbytes(x), err);
        if (!s && mask && mask->dtype != VP_BOOL) return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "a non-bool mask");
        if (!s && mask) s = LAUNCH(cudaMemsetAsync(mask->data, 1, vp_tensor_nbytes(mask), c->stream));
        return s;
    }
    if (!(ratio > 0 && ratio < 1)) return vp_node_fail(err, VP_ERR_RUNTIME, n, "ratio %g is outside [0, 1)", ratio);
    if (!is_float(x->dtype)) return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "Dropout of %s", vp_dtype_name(x->dtype));
    if (mask && mask->dtype != VP_BOOL) return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "a non-bool mask");
    if (vp_attr_int(n, "vplan_step", 0) == 1) { /* ours: the counter-based mask, drawn on the device */
        int ranks, rank;
        int64_t outer, chunk;
        if (vp_dropout_node_split(n, x, &outer, &chunk, &ranks, &rank))
            return vp_node_fail(err, VP_ERR_INVALID, n, "vplan_axis/vplan_rank do not fit the input");
        if (step_in && step_in->dtype != VP_I64)
            return vp_node_fail(err, VP_ERR_INVALID, n, "input 3 (the step count) must be int64");
        return LAUNCH(cu_dropout_counter((int)x->dtype, vp_tensor_numel(x), x->data, (uint32_t)vp_attr_int(n, "seed", 0),
                                         step_in ? (const int64_t *)step_in->data : NULL, ratio, (uint64_t)chunk,
                                         ranks, rank, y->data, mask ? (uint8_t *)mask->data : NULL,
                                         c->stream));
    }
    if (!mask) return dropout_on_host(c, n, in, y, ratio, err);
    int64_t count = vp_tensor_numel(x);
    uint8_t *keep = malloc(count ? (size_t)count : 1);
    if (!keep) return vp_node_fail(err, VP_ERR_NOMEM, n, "out of memory for the mask");
    if (vp_dropout_node_mask(n, x, ratio, 0, keep)) { /* a sequence-parallel rank's slice draws the whole */
        free(keep);
        return vp_node_fail(err, VP_ERR_INVALID, n, "vplan_axis/vplan_rank do not fit the input");
    }
    /* synchronous: keep is freed below */
    s = LAUNCH(cudaMemcpyAsync(mask->data, keep, (size_t)count, cudaMemcpyHostToDevice, c->stream));
    if (!s) s = LAUNCH(cudaStreamSynchronize(c->stream));
    free(keep);
    if (!s) s = LAUNCH(cu_dropout((int)x->dtype, count, x->data, mask->data, 1.0 / (1.0 - ratio), y->data, c->stream));
    return s;
}

/* DropoutGrad(dY, mask, ratio?, training_mode?) -> dX. */
static vp_status op_dropout_grad(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                 vp_error *err) {
    if (!out[0]) return VP_OK;
    const vp_tensor *dy = in[0], *mask = opt_in(n, in, 1), *ratio_in = opt_in(n, in, 2), *mode_in = opt_in(n, in, 3);
    double ratio = 0.5, training = 1;
    vp_status s = VP_OK;
    if (!mask || mask->dtype != VP_BOOL) return vp_node_fail(err, VP_ERR_INVALID, n, "input 1 must be the bool mask");
    if (!is_float(dy->dtype)) return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "DropoutGrad of %s", vp_dtype_name(dy->dtype));
    if (ratio_in) s = vp_cuda_read_float_scalar(c, n, ratio_in, 2, &ratio, err);
    if (!s && mode_in) s = vp_cuda_read_float_scalar(c, n, mode_in, 3, &training, err);
    if (s) return s;
    if (!(ratio >= 0 && ratio < 1)) return vp_node_fail(err, VP_ERR_RUNTIME, n, "ratio %g is outside [0, 1)", ratio);
    return LAUNCH(cu_dropout_grad((int)dy->dtype, vp_tensor_numel(out[0]), dy->data, mask->data, training ? 1 - ratio : 1,
                                  out[0]->data, c->stream));
}

/* IsAllFinite(x...) -> bool scalar: every input checked into the one output byte. */
static vp_status op_is_all_finite(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                  vp_error *err) {
    int mode = vp_attr_int(n, "isinf_only", 0) ? 1 : vp_attr_int(n, "isnan_only", 0) ? 2 : 0;
    vp_status s = LAUNCH(cudaMemsetAsync(out[0]->data, 1, 1, c->stream));
    for (int k = 0; k < n->n_inputs && !s; k++) {
        if (!in[k]) continue;
        if (!is_float(in[k]->dtype))
            return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "input %d is %s", k, vp_dtype_name(in[k]->dtype));
        s = LAUNCH(cu_all_finite((int)in[k]->dtype, vp_tensor_numel(in[k]), in[k]->data, mode, out[0]->data, c->stream));
    }
    return s;
}

/* InPlaceAccumulatorV2(buffer, value, overwrite?) -> flag, buffer_out?: as the CPU
 * kernel, buffer_out = overwrite ? value : buffer + value and the flag always set. */
static vp_status op_inplace_accumulator(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in,
                                        vp_tensor *const *out, vp_error *err) {
    const vp_tensor *buf = in[0], *val = in[1], *flag_in = opt_in(n, in, 2);
    vp_tensor *done = out[0], *res = opt_out(n, out, 1);
    vp_status s = VP_OK;
    if (done) s = LAUNCH(cudaMemsetAsync(done->data, 1, 1, c->stream));
    if (s || !res) return s;
    if (!is_float(buf->dtype) || buf->dtype != val->dtype || res->dtype != buf->dtype)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "buffer and value of one float dtype only (%s, %s)",
                            vp_dtype_name(buf->dtype), vp_dtype_name(val->dtype));
    double overwrite = 0;
    if (flag_in) s = vp_cuda_read_float_scalar(c, n, flag_in, 2, &overwrite, err);
    if (s) return s;
    if (overwrite) return vp_cuda_copy_d2d(c, n, res->data, val->data, vp_tensor_nbytes(res), err);
    cu_nd nd;
    memset(&nd, 0, sizeof nd);
    nd.rank = res->rank;
    memcpy(nd.dims, res->dims, sizeof nd.dims);
    contiguous_strides(res->rank, res->dims, nd.s0);
    contiguous_strides(res->rank, res->dims, nd.s1);
    return LAUNCH(cu_binary((int)buf->dtype, CU_ADD, &nd, buf->data, val->data, res->data, c->stream));
}

static vp_status op_zero_gradient(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                  vp_error *err) {
    (void)in;
    return out[0] ? LAUNCH(cudaMemsetAsync(out[0]->data, 0, vp_tensor_nbytes(out[0]), c->stream)) : VP_OK;
}

const cuda_op vp_cuda_ops_train[] = {
    {"InPlaceAccumulatorV2", "com.microsoft", op_inplace_accumulator},
    {"ZeroGradient", "com.microsoft", op_zero_gradient},
    {"Dropout", "", op_dropout},
    {"DropoutGrad", "com.microsoft", op_dropout_grad},
    {"IsAllFinite", "com.microsoft", op_is_all_finite},
    {NULL, NULL, NULL},
};
