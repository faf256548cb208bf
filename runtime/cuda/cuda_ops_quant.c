/* The quant family's CUDA ops (cu_quant.cu), float32; other dtypes are refused. */
#include "cu_quant.h"
#include "cuda_internal.h"

/* X (input x_index) as [outer, channels, inner] by the scale's element count. */
static void shape_of(const vp_node *n, const vp_tensor *x, int64_t n_params, cu_quant_shape *s) {
    s->lo = (float)vp_attr_int(n, "quant_min", -128);
    s->hi = (float)vp_attr_int(n, "quant_max", 127);
    s->grad_factor = vp_attr_float(n, "grad_factor", 0);
    s->outer = 1, s->channels = 1, s->inner = 1;
    int axis = n_params > 1 ? norm_axis(vp_attr_int(n, "axis", 0), x->rank) : x->rank;
    for (int d = 0; d < x->rank; d++) {
        if (d < axis) s->outer *= x->dims[d];
        else if (d == axis) s->channels = x->dims[d];
        else s->inner *= x->dims[d];
    }
}

static vp_status need_f32(const vp_node *n, const vp_tensor *const *in, int from, int to, vp_error *err) {
    vp_status s = VP_OK;
    for (int k = from; k <= to && !s; k++) s = vp_cuda_need_f32(n, in[k], k, err);
    return s;
}

static vp_status op_fake_quant(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                               vp_error *err) {
    vp_status s = need_f32(n, in, 0, 2, err);
    if (s) return s;
    cu_quant_shape sh;
    shape_of(n, in[0], vp_tensor_numel(in[1]), &sh);
    vp_tensor *mask = opt_out(n, out, 1);
    return LAUNCH(cu_fake_quant(&sh, in[0]->data, in[1]->data, in[2]->data, fptr(out[0]), mask ? mask->data : NULL,
                                c->stream));
}

static vp_status op_fake_quant_grad(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                    vp_error *err) {
    int masked = in[1] && in[1]->dtype == VP_BOOL;
    vp_status s = vp_cuda_need_f32(n, in[0], 0, err);
    if (!s && !masked) s = vp_cuda_need_f32(n, in[1], 1, err);
    if (!s) s = need_f32(n, in, 2, 3, err);
    if (s) return s;
    cu_quant_shape sh;
    shape_of(n, in[1], vp_tensor_numel(in[2]), &sh);
    return LAUNCH(cu_fake_quant_grad(&sh, in[0]->data, masked ? NULL : in[1]->data, masked ? in[1]->data : NULL,
                                     in[2]->data, in[3]->data, fptr(out[0]), fptr(opt_out(n, out, 1)), c->stream));
}

static vp_status op_observer(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                             vp_error *err) {
    vp_status s = need_f32(n, in, 0, 3, err);
    if (s) return s;
    cu_quant_shape sh;
    shape_of(n, in[0], vp_tensor_numel(in[1]), &sh);
    return LAUNCH(cu_quant_observer(&sh, in[0]->data, in[1]->data, in[2]->data, in[3]->data, fptr(out[0]), fptr(out[1]),
                                    fptr(out[2]), vp_attr_float(n, "averaging_constant", 0.01f),
                                    vp_attr_int(n, "freeze_after", 0), c->stream));
}

static vp_status op_qparams(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                            vp_error *err) {
    vp_status s = need_f32(n, in, 0, 1, err);
    if (s) return s;
    return LAUNCH(cu_quant_params(vp_tensor_numel(in[0]), in[0]->data, in[1]->data, (int)vp_attr_int(n, "quant_min", -128),
                                  (int)vp_attr_int(n, "quant_max", 127), (int)vp_attr_int(n, "symmetric", 0), fptr(out[0]),
                                  fptr(out[1]), c->stream));
}

const cuda_op vp_cuda_ops_quant[] = {
    {"FakeQuant", "vplan", op_fake_quant},
    {"FakeQuantGrad", "vplan", op_fake_quant_grad},
    {"QuantObserver", "vplan", op_observer},
    {"QuantParams", "vplan", op_qparams},
    {NULL, NULL, NULL},
};
