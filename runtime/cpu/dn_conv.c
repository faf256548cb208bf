/* Conv and ConvGrad on oneDNN: the signature that keys a node's cached primitives, and
 * building them.  In: float32 tensors with 1 to 3 spatial axes, the window as
 * vp_window_resolve reads it (auto_pad resolved to explicit pads), any group count
 * (depthwise included: oneDNN's grouped weights [G, M/G, C/G, k...] are our
 * [M, C/G, k...] bytes).  Out: Y = Conv(X, W) + B; ConvGrad's dX, dW, dB, each
 * overwritten, as the reference kernel leaves them. */
#include <string.h>

#include "dn_impl.h"
#include "k_linalg.h"

/* Resolves the window of a float32 Conv over x and w; 0 when oneDNN cannot run it. */
static int conv_window(const vp_node *n, const vp_tensor *x, const vp_tensor *w, vp_window *win, int64_t *group) {
    if (!x || !w || x->dtype != VP_F32 || w->dtype != VP_F32 || x->rank < 3 || x->rank > 5 || w->rank != x->rank)
        return 0;
    vp_error scratch;
    if (vp_window_resolve(n, VP_WINDOW_CONV, x->rank - 2, x->dims + 2, w->dims + 2, win, &scratch)) return 0;
    *group = vp_attr_int(n, "group", 1);
    return *group >= 1 && x->dims[1] % *group == 0 && w->dims[0] % *group == 0 && x->dims[1] / *group == w->dims[1];
}

/* Appends x's rank and dims, and the window, to sig from position at. */
static int put_dims(int64_t *sig, int at, const vp_tensor *t) {
    sig[at++] = t ? t->rank : -1;
    for (int d = 0; t && d < t->rank; d++) sig[at++] = t->dims[d];
    return at;
}

static int put_window(int64_t *sig, int at, const vp_window *w, int64_t group) {
    sig[at++] = group;
    for (int d = 0; d < w->n_sp; d++) {
        sig[at++] = w->stride[d];
        sig[at++] = w->dilation[d];
        sig[at++] = w->pad_begin[d];
        sig[at++] = w->pad_end[d];
        sig[at++] = w->out[d];
    }
    return at;
}

/* Multiply-adds of a Conv producing y from w, times two. */
static int64_t conv_work(const vp_tensor *y, const vp_tensor *w) {
    int64_t per = 2;
    for (int d = 1; d < w->rank; d++) per *= w->dims[d];
    return vp_tensor_numel(y) * per;
}

int vp_dn_conv_sig(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, int64_t *sig,
                   int64_t *work) {
    vp_window w;
    int64_t group;
    const vp_tensor *bias = n->n_inputs > 2 ? in[2] : NULL;
    if (!conv_window(n, in[0], in[1], &w, &group) || !out[0] || out[0]->dtype != VP_F32) return 0;
    if (bias && bias->dtype != VP_F32) return 0;
    *work = conv_work(out[0], in[1]);
    int at = 0;
    sig[at++] = 1;
    at = put_dims(sig, at, in[0]);
    at = put_dims(sig, at, in[1]);
    at = put_dims(sig, at, out[0]);
    sig[at++] = bias != NULL;
    return put_window(sig, at, &w, group);
}

int vp_dn_conv_grad_sig(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, int64_t *sig,
                        int64_t *work) {
    vp_window w;
    int64_t group;
    vp_tensor *dx = out[0], *dw = n->n_outputs > 1 ? out[1] : NULL, *db = n->n_outputs > 2 ? out[2] : NULL;
    if (!conv_window(n, in[1], in[2], &w, &group) || !in[0] || in[0]->dtype != VP_F32) return 0;
    if (db && !dw) return 0; /* oneDNN computes dB only beside dW */
    if (!dx && !dw) return 0;
    *work = conv_work(in[0], in[2]) * ((dx != NULL) + (dw != NULL));
    int at = 0;
    sig[at++] = 2;
    at = put_dims(sig, at, in[0]);
    at = put_dims(sig, at, in[1]);
    at = put_dims(sig, at, in[2]);
    sig[at++] = dx != NULL;
    sig[at++] = dw != NULL;
    sig[at++] = db != NULL;
    return put_window(sig, at, &w, group);
}

/* The descriptors every conv primitive shares. */
typedef struct conv_mds {
    dnnl_memory_desc_t x, w, y, b;            /* our plain layouts */
    dnnl_memory_desc_t x_any, w_any, y_any;
    dnnl_dims_t strides, dilates, pad_l, pad_r;
} conv_mds;

static int conv_mds_init(conv_mds *m, const vp_tensor *x, const vp_tensor *w, const int64_t *y_dims,
                         const vp_window *win, int64_t group) {
    int r = x->rank;
    int64_t wd[6];
    int wr = r;
    if (group > 1) { /* [G, M/G, C/G, k...] */
        wd[0] = group;
        wd[1] = w->dims[0] / group;
        for (int i = 1; i < r; i++) wd[i + 1] = w->dims[i];
        wr = r + 1;
    } else {
        memcpy(wd, w->dims, (size_t)r * sizeof *wd);
    }
    int64_t bd = y_dims[1];
    if (vp_dn_plain_md(&m->x, r, x->dims) || vp_dn_plain_md(&m->w, wr, wd) || vp_dn_plain_md(&m->y, r, y_dims) ||
        vp_dn_plain_md(&m->b, 1, &bd))
        return 1;
    dnnl_dims_t dx, dw, dy;
    for (int i = 0; i < r; i++) dx[i] = x->dims[i], dy[i] = y_dims[i];
    for (int i = 0; i < wr; i++) dw[i] = wd[i];
    if (dnnl_memory_desc_init_by_tag(&m->x_any, r, dx, dnnl_f32, dnnl_format_tag_any) ||
        dnnl_memory_desc_init_by_tag(&m->w_any, wr, dw, dnnl_f32, dnnl_format_tag_any) ||
        dnnl_memory_desc_init_by_tag(&m->y_any, r, dy, dnnl_f32, dnnl_format_tag_any))
        return 1;
    for (int d = 0; d < win->n_sp; d++) {
        m->strides[d] = win->stride[d];
        m->dilates[d] = win->dilation[d] - 1;
        m->pad_l[d] = win->pad_begin[d];
        m->pad_r[d] = win->pad_end[d];
    }
    return 0;
}

static dnnl_primitive_attr_t user_scratchpad(void) {
    dnnl_primitive_attr_t attr = NULL;
    if (dnnl_primitive_attr_create(&attr)) return NULL;
    if (dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user)) {
        dnnl_primitive_attr_destroy(attr);
        return NULL;
    }
    return attr;
}

int vp_dn_conv_build(vp_dn *d, dn_entry *e, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out) {
    vp_window win;
    int64_t group;
    const vp_tensor *bias = n->n_inputs > 2 ? in[2] : NULL;
    conv_mds m;
    if (!conv_window(n, in[0], in[1], &win, &group) || conv_mds_init(&m, in[0], in[1], out[0]->dims, &win, group))
        return 1;
    dnnl_convolution_desc_t cd;
    if (dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_inference, dnnl_convolution_direct, &m.x_any,
                                                   &m.w_any, bias ? &m.b : NULL, &m.y_any, m.strides, m.dilates,
                                                   m.pad_l, m.pad_r))
        return 1;
    dnnl_primitive_attr_t attr = user_scratchpad();
    dnnl_primitive_desc_t pd = NULL;
    int bad = !attr || dnnl_primitive_desc_create(&pd, &cd, attr, vp_dn_engine(d), NULL);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (bad) return 1;
    dn_spec specs[4] = {
        {DNNL_ARG_SRC, dnnl_query_src_md, 0, &m.x, DN_IN(0)},
        {DNNL_ARG_WEIGHTS, dnnl_query_weights_md, 0, &m.w, DN_IN(1)},
        {DNNL_ARG_DST, dnnl_query_dst_md, 0, &m.y, DN_OUT(0)},
        {DNNL_ARG_BIAS, dnnl_query_weights_md, 1, &m.b, DN_IN(2)},
    };
    return vp_dn_op_init(d, e, pd, bias ? 4 : 3, specs);
}

int vp_dn_conv_grad_build(vp_dn *d, dn_entry *e, const vp_node *n, const vp_tensor *const *in,
                          vp_tensor *const *out) {
    const vp_tensor *dy = in[0], *x = in[1], *w = in[2];
    vp_tensor *dx = out[0], *dw = n->n_outputs > 1 ? out[1] : NULL, *db = n->n_outputs > 2 ? out[2] : NULL;
    vp_window win;
    int64_t group;
    conv_mds m;
    if (!conv_window(n, x, w, &win, &group) || conv_mds_init(&m, x, w, dy->dims, &win, group)) return 1;
    dnnl_convolution_desc_t fd, bd, wd;
    dnnl_primitive_desc_t hint = NULL, pd = NULL;
    dnnl_primitive_attr_t attr = user_scratchpad();
    int bad = !attr || dnnl_dilated_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct,
                                                                  &m.x_any, &m.w_any, db ? &m.b : NULL, &m.y_any,
                                                                  m.strides, m.dilates, m.pad_l, m.pad_r) ||
              dnnl_primitive_desc_create(&hint, &fd, NULL, vp_dn_engine(d), NULL);
    if (!bad && dx) {
        bad = dnnl_dilated_convolution_backward_data_desc_init(&bd, dnnl_convolution_direct, &m.x_any, &m.w_any,
                                                               &m.y_any, m.strides, m.dilates, m.pad_l, m.pad_r) ||
              dnnl_primitive_desc_create(&pd, &bd, attr, vp_dn_engine(d), hint);
        dn_spec specs[3] = {
            {DNNL_ARG_DIFF_DST, dnnl_query_diff_dst_md, 0, &m.y, DN_IN(0)},
            {DNNL_ARG_WEIGHTS, dnnl_query_weights_md, 0, &m.w, DN_IN(2)},
            {DNNL_ARG_DIFF_SRC, dnnl_query_diff_src_md, 0, &m.x, DN_OUT(0)},
        };
        if (!bad) bad = vp_dn_op_init(d, e, pd, 3, specs);
    }
    if (!bad && dw) {
        bad = dnnl_dilated_convolution_backward_weights_desc_init(&wd, dnnl_convolution_direct, &m.x_any, &m.w_any,
                                                                  db ? &m.b : NULL, &m.y_any, m.strides, m.dilates,
                                                                  m.pad_l, m.pad_r) ||
              dnnl_primitive_desc_create(&pd, &wd, attr, vp_dn_engine(d), hint);
        dn_spec specs[4] = {
            {DNNL_ARG_SRC, dnnl_query_src_md, 0, &m.x, DN_IN(1)},
            {DNNL_ARG_DIFF_DST, dnnl_query_diff_dst_md, 0, &m.y, DN_IN(0)},
            {DNNL_ARG_DIFF_WEIGHTS, dnnl_query_diff_weights_md, 0, &m.w, DN_OUT(1)},
            {DNNL_ARG_DIFF_BIAS, dnnl_query_diff_weights_md, 1, &m.b, DN_OUT(2)},
        };
        if (!bad) bad = vp_dn_op_init(d, e, pd, db ? 4 : 3, specs);
    }
    if (hint) dnnl_primitive_desc_destroy(hint);
    if (attr) dnnl_primitive_attr_destroy(attr);
    return bad;
}
