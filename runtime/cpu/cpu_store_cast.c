/* A fused Cast on the CPU (VP_CAST_ATTR, planner/precision/cast_fuse.h): the node's
 * kernel runs unchanged, writing each fused output in the dtype it computes into a
 * scratch tensor, and that tensor is converted into the output as the Cast kernel
 * converts (round to nearest even to float16 or bfloat16, exact to float32).
 *
 * In: a node, its kernel, tensors whose fused outputs hold the stored dtype.
 * Out: those outputs bit-identical to the kernel's output followed by the Cast.
 * Being the reference, it does the literal thing: any kernel, no kernel edited; the
 * scratch is host memory outside the arena, as the widening of narrow matrix products
 * (k_linalg.c) is. */
#include <stdlib.h>

#include "cpu_util.h"
#include "ir/op_registry.h"
#include "vplanrt.h"

static void convert(const vp_tensor *src, vp_tensor *dst) {
    int64_t count = vp_tensor_numel(dst);
    const float *f = src->data;
    const uint16_t *h = src->data;
    uint16_t *oh = dst->data;
    float *of = dst->data;
    if (src->dtype == VP_F32 && dst->dtype == VP_BF16)
        for (int64_t i = 0; i < count; i++) oh[i] = vp_f32_to_bf16(f[i]);
    else if (src->dtype == VP_F32 && dst->dtype == VP_F16)
        for (int64_t i = 0; i < count; i++) oh[i] = vp_f32_to_f16(f[i]);
    else if (src->dtype == VP_BF16 && dst->dtype == VP_F32)
        for (int64_t i = 0; i < count; i++) of[i] = vp_bf16_to_f32(h[i]);
    else if (src->dtype == VP_F16 && dst->dtype == VP_F32)
        for (int64_t i = 0; i < count; i++) of[i] = vp_f16_to_f32(h[i]);
    else
        for (int64_t i = 0; i < count; i++) vp_store(dst->data, dst->dtype, i, vp_load(src->data, src->dtype, i));
}

vp_status vp_cpu_store_cast_begin(const vp_node *n, vp_tensor *const *out, vp_tensor *scratch, vp_tensor **pout,
                                  vp_error *err) {
    if (n->n_outputs > VP_STORE_CAST_MAX_OUT)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "a fused cast on a node of over %d outputs", VP_STORE_CAST_MAX_OUT);
    vp_status s = VP_OK;
    for (int k = 0; k < n->n_outputs; k++) {
        vp_dtype from, to;
        pout[k] = out[k];
        if (s || !out[k] || !vp_node_cast_output(n, k, &from, &to)) continue;
        if (out[k]->dtype != to) {
            s = vp_node_fail(err, VP_ERR_INVALID, n, "output %d is %s, its fused cast stores %s", k,
                             vp_dtype_name(out[k]->dtype), vp_dtype_name(to));
            break;
        }
        scratch[k] = *out[k];
        scratch[k].dtype = from;
        size_t bytes = vp_tensor_nbytes(&scratch[k]);
        scratch[k].data = malloc(bytes ? bytes : 1);
        if (!scratch[k].data) s = vp_node_fail(err, VP_ERR_NOMEM, n, "out of memory for output %d before its cast", k);
        else pout[k] = &scratch[k];
    }
    if (s) vp_cpu_store_cast_end(n, 0, out, scratch, pout);
    return s;
}

void vp_cpu_store_cast_end(const vp_node *n, int ran, vp_tensor *const *out, vp_tensor *scratch, vp_tensor **pout) {
    for (int k = 0; k < n->n_outputs; k++) {
        if (pout[k] != &scratch[k]) continue;
        if (ran) convert(&scratch[k], out[k]);
        free(scratch[k].data);
        pout[k] = out[k];
    }
}

vp_status vp_cpu_store_cast(vp_cpu_fn kernel, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                            vp_error *err) {
    vp_tensor scratch[VP_STORE_CAST_MAX_OUT];
    vp_tensor *pout[VP_STORE_CAST_MAX_OUT];
    vp_status s = vp_cpu_store_cast_begin(n, out, scratch, pout, err);
    if (s) return s;
    s = kernel(n, in, pout, err);
    vp_cpu_store_cast_end(n, !s, out, scratch, pout);
    return s;
}
