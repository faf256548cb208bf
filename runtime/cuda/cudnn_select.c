/* cuDNN's convolution decisions as plain C (cudnn_select.h). */
#include "cudnn_select.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

vp_status vp_conv_shape_of(const vp_node *n, const vp_tensor *x, const vp_tensor *w, const vp_tensor *y,
                           vp_conv_shape *s, vp_error *err) {
    int sp = x->rank - 2;
    if (sp < 1 || sp > 3 || w->rank != x->rank || y->rank != x->rank)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "convolutions have 1, 2 or 3 spatial axes (input of rank %d)", x->rank);
    const int64_t *strides = NULL, *pads = NULL, *dil = NULL;
    int ns = vp_attr_ints(n, "strides", &strides), np = vp_attr_ints(n, "pads", &pads), nd = vp_attr_ints(n, "dilations", &dil);
    memset(s, 0, sizeof *s);
    s->spatial = sp;
    s->n = x->dims[0];
    s->c = x->dims[1];
    s->m = w->dims[0];
    s->group = vp_attr_int(n, "group", 1);
    const char *ap = vp_attr_string(n, "auto_pad", "NOTSET");
    for (int d = 0; d < sp; d++) {
        s->in[d] = x->dims[2 + d];
        s->out[d] = y->dims[2 + d];
        s->k[d] = w->dims[2 + d];
        s->stride[d] = ns == sp ? strides[d] : 1;
        s->dil[d] = nd == sp ? dil[d] : 1;
        s->pad[d] = np == 2 * sp ? pads[d] : 0;
        s->pad_end[d] = np == 2 * sp ? pads[sp + d] : 0;
        if (!strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER")) {
            int64_t total = (s->out[d] - 1) * s->stride[d] + (s->k[d] - 1) * s->dil[d] + 1 - s->in[d];
            if (total < 0) total = 0;
            s->pad[d] = !strcmp(ap, "SAME_UPPER") ? total / 2 : (total + 1) / 2;
            s->pad_end[d] = total - s->pad[d];
        } else if (!strcmp(ap, "VALID")) {
            s->pad[d] = s->pad_end[d] = 0;
        }
    }
    if (s->group < 1 || s->c % s->group || s->m % s->group)
        return vp_node_fail(err, VP_ERR_INVALID, n, "group %lld does not divide the channels", (long long)s->group);
    return VP_OK;
}

static int fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

static void packed(int nb, const int *dims, int *stride) {
    int64_t st = 1;
    for (int d = nb - 1; d >= 0; d--) {
        stride[d] = (int)st;
        st *= dims[d];
    }
}

const char *vp_cudnn_desc_of(const vp_conv_shape *s, vp_cudnn_desc *d) {
    memset(d, 0, sizeof *d);
    /* a 1-D convolution is a 2-D one of height 1, as cuDNN wants 4 dimensions or more */
    int conv = s->spatial == 1 ? 2 : s->spatial, off = conv - s->spatial;
    d->nb_dims = conv + 2;
    int64_t x[5] = {s->n, s->c, 1, 1, 1}, w[5] = {s->m, s->group ? s->c / s->group : 0, 1, 1, 1}, y[5] = {s->n, s->m, 1, 1, 1};
    for (int a = 0; a < conv; a++) {
        d->pad[a] = 0, d->stride[a] = 1, d->dil[a] = 1;
    }
    for (int a = 0; a < s->spatial; a++) {
        int e = a + off;
        x[2 + e] = s->in[a];
        w[2 + e] = s->k[a];
        y[2 + e] = s->out[a];
        /* cuDNN pads both ends by pad[a]: the same output only when the end's padding
         * does not reach another output position */
        int64_t span = s->in[a] + 2 * s->pad[a] - s->dil[a] * (s->k[a] - 1) - 1;
        if (s->stride[a] < 1 || span < 0 || span / s->stride[a] + 1 != s->out[a]) return "padding differs at the two ends";
        if (!fits_int(s->pad[a]) || !fits_int(s->stride[a]) || !fits_int(s->dil[a])) return "a stride, pad or dilation over INT_MAX";
        d->pad[e] = (int)s->pad[a];
        d->stride[e] = (int)s->stride[a];
        d->dil[e] = (int)s->dil[a];
    }
    int64_t xn = 1, yn = 1;
    for (int k = 0; k < d->nb_dims; k++) {
        if (!fits_int(x[k]) || !fits_int(w[k]) || !fits_int(y[k])) return "a dimension over INT_MAX";
        d->x[k] = (int)x[k];
        d->w[k] = (int)w[k];
        d->y[k] = (int)y[k];
        xn *= x[k];
        yn *= y[k];
    }
    if (!fits_int(xn) || !fits_int(yn)) return "a tensor of over INT_MAX elements";
    if (!fits_int(s->group) || s->group < 1) return "a group count over INT_MAX";
    d->groups = (int)s->group;
    packed(d->nb_dims, d->x, d->x_stride);
    packed(d->nb_dims, d->y, d->y_stride);
    return NULL;
}

int vp_cudnn_pick(const vp_cudnn_perf *perf, int count, size_t limit, int need_deterministic) {
    for (int i = 0; i < count; i++)
        if (perf[i].ok && perf[i].memory <= limit && (perf[i].deterministic || !need_deterministic)) return i;
    return -1;
}

int vp_cudnn_env_off(void) {
    const char *e = getenv("VP_CUDA_NO_CUDNN");
    return e && e[0] && strcmp(e, "0") != 0;
}
