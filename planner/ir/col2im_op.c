/* ONNX's Col2Im expanded in place (col2im_op.h says what comes in and goes out), through
 * vp_build_replace_node as group_norm_op.c. */
#include "ir/col2im_op.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/dtype_conv.h"
#include "ir/graph_build.h"
#include "ir/infer.h"

enum { MAX_SP = 3 };

int vp_col2im_op_is(const vp_node *n) {
    return (!n->domain[0] || !strcmp(n->domain, "ai.onnx")) && !strcmp(n->op_type, "Col2Im");
}

/* The values of input k, a constant int64 vector of 1 to MAX_SP values, into v and their
 * count into *count. */
static vp_status shape_input(const vp_graph *g, const vp_node *n, int k, const char *what, int64_t *v, int *count,
                             vp_error *err) {
    const vp_value *x = k < n->n_inputs && n->inputs[k] >= 0 ? &g->values[n->inputs[k]] : NULL;
    if (!x || !x->data || x->dtype != VP_I64 || x->rank != 1 || x->dims[0] < 1 || x->dims[0] > MAX_SP)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "has %s '%s' that is not a constant int64 vector of 1 to %d "
                            "values: only a fold of a shape known ahead of time is supported", what,
                            x ? x->name : "(absent)", MAX_SP);
    for (int64_t i = 0; i < x->dims[0]; i++) v[i] = ((const int64_t *)x->data)[i];
    *count = (int)x->dims[0];
    return VP_OK;
}

static vp_status expand(vp_graph *g, int node, int y, void *ctx, vp_error *err) {
    (void)ctx;
    const vp_node *n = &g->nodes[node];
    if (n->n_inputs < 3 || n->inputs[0] < 0)
        return vp_node_fail(err, VP_ERR_INVALID, n, "needs inputs input, image_shape and block_shape");
    int64_t image[MAX_SP], block[MAX_SP], dil[MAX_SP], stride[MAX_SP], pads[2 * MAX_SP];
    int sp = 0, sb = 0;
    vp_status s = shape_input(g, n, 1, "image_shape", image, &sp, err);
    if (!s) s = shape_input(g, n, 2, "block_shape", block, &sb, err);
    if (!s && sb != sp)
        s = vp_node_fail(err, VP_ERR_INVALID, n, "has image_shape of %d values and block_shape of %d", sp, sb);
    if (!s) s = vp_attr_ints_checked(n, "dilations", sp, 1, 1, dil, NULL, err);
    if (!s) s = vp_attr_ints_checked(n, "strides", sp, 1, 1, stride, NULL, err);
    if (!s) s = vp_attr_ints_checked(n, "pads", 2 * sp, 0, 0, pads, NULL, err);
    if (s) return s;
    const vp_value *xv = &g->values[n->inputs[0]];
    int64_t k = 1, l = 1, grid[MAX_SP], out_pad[MAX_SP];
    for (int d = 0; d < sp; d++) {
        if (image[d] < 1 || block[d] < 1)
            return vp_node_fail(err, VP_ERR_INVALID, n, "has image_shape[%d] = %lld and block_shape[%d] = %lld (at "
                                "least 1 each)", d, (long long)image[d], d, (long long)block[d]);
        int64_t span = image[d] + pads[d] + pads[sp + d] - (block[d] - 1) * dil[d] - 1;
        if (span < 0)
            return vp_node_fail(err, VP_ERR_INVALID, n, "spatial axis %d: the padded image (%lld) is smaller than one "
                                "block (%lld)", d, (long long)(image[d] + pads[d] + pads[sp + d]),
                                (long long)((block[d] - 1) * dil[d] + 1));
        grid[d] = span / stride[d] + 1;
        out_pad[d] = span % stride[d]; /* the image's last rows no block reaches */
        k *= block[d];
        l *= grid[d];
    }
    if (!vp_dtype_is_float(xv->dtype))
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "has input '%s' of dtype %s: only float types are supported",
                            xv->name, vp_dtype_name(xv->dtype));
    if (xv->rank != 3 || xv->dims[1] % k || xv->dims[2] != l)
        return vp_node_fail(err, VP_ERR_INVALID, n, "has input '%s' of rank %d ([N, C * %lld, %lld] "
                            "expected for these shapes)", xv->name, xv->rank, (long long)k, (long long)l);
    if (y < 0) return VP_OK;
    int64_t batch = xv->dims[0], c = xv->dims[1] / k, ck = xv->dims[1];
    vp_dtype dt = xv->dtype;
    int x = n->inputs[0];
    char stem[512];
    snprintf(stem, sizeof stem, "%s", n->name[0] ? n->name : "Col2Im");
    /* X as [N, C * K, L_1 .. L_S] */
    int64_t dims[2 + MAX_SP] = {batch, ck};
    memcpy(dims + 2, grid, (size_t)sp * sizeof *grid);
    int64_t rank = 2 + sp;
    int shape = vp_build_const(g, "shape", VP_I64, 1, &rank, dims), x4 = -1;
    if (shape < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    if ((s = vp_build_op(g, stem, "Reshape", 2, (const int[]){x, shape}, NULL, 0, &x4, err))) return s;
    /* the one-hot weight [C * K, 1, block...]: channel c * K + j has 1 at block offset j */
    int64_t wdims[2 + MAX_SP] = {ck, 1};
    memcpy(wdims + 2, block, (size_t)sp * sizeof *block);
    void *w = calloc((size_t)(ck * k), vp_dtype_size(dt));
    if (!w) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    for (int64_t ch = 0; ch < ck; ch++) vp_store(w, dt, ch * k + ch % k, 1.0);
    int wv = vp_build_const(g, "col2im_weight", dt, (int)rank, wdims, w);
    free(w);
    if (wv < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    char name[600];
    snprintf(name, sizeof name, "%s/ConvTranspose", stem);
    int id = vp_graph_add_node(g, "ConvTranspose", "", name, 2, (const int[]){x4, wv}, 1, &y);
    if (id < 0 || vp_node_add_attr_int(g, id, "group", c) || vp_node_add_attr_ints(g, id, "kernel_shape", block, sp) ||
        vp_node_add_attr_ints(g, id, "strides", stride, sp) || vp_node_add_attr_ints(g, id, "dilations", dil, sp) ||
        vp_node_add_attr_ints(g, id, "pads", pads, 2 * sp) ||
        vp_node_add_attr_ints(g, id, "output_padding", out_pad, sp))
        return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    g->nodes[id].opset = g->opset_onnx;
    return vp_infer_node(g, id, 0, NULL, err);
}

vp_status vp_col2im_op_expand(vp_graph *g, int node, int *n_new, vp_error *err) {
    return vp_build_replace_node(g, node, expand, NULL, n_new, err);
}
