/* CPU kernels for the tensor-family ops that pick elements by index or position:
 * Gather, GatherElements, Trilu and Pad.  Indices come from data, so they are checked
 * here, at run time, and a bad one fails naming the node, never reads out of bounds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_par.h"
#include "cpu_util.h"
#include "k_tensor.h"

static int normalized_axis(int64_t axis, int rank) { return (int)(axis < 0 ? axis + rank : axis); }

/* ---- Gather ---- */

vp_status vp_cpu_axis_indices(const vp_node *n, const vp_tensor *idx, int axis, int64_t dim, int64_t **ix,
                              vp_error *err) {
    int64_t k = vp_tensor_numel(idx);
    int64_t *v = *ix = malloc((size_t)(k ? k : 1) * sizeof *v);
    if (!v) return vp_node_fail(err, VP_ERR_NOMEM, n, "out of memory for %lld indices", (long long)k);
    for (int64_t j = 0; j < k; j++) {
        int64_t i = vp_tensor_int_at(idx, j);
        if (i < -dim || i >= dim) {
            free(v);
            *ix = NULL;
            return vp_node_fail(err, VP_ERR_RUNTIME, n,
                                "index %lld (element %lld of the indices) is out of range for axis %d of size %lld",
                                (long long)i, (long long)j, axis, (long long)dim);
        }
        v[j] = i < 0 ? i + dim : i;
    }
    return VP_OK;
}

vp_nd_iter vp_cpu_elements_walk(int rank, const int64_t *data_dims, const int64_t *idx_dims, int axis,
                                int64_t *axis_stride) {
    vp_nd_iter it = {.rank = rank, .n_ops = 1};
    int64_t stride = 1;
    for (int a = rank - 1; a >= 0; a--) {
        it.dims[a] = idx_dims[a];
        it.strides[0][a] = a == axis ? 0 : stride;
        if (a == axis) *axis_stride = stride;
        stride *= data_dims[a];
    }
    return it;
}

typedef struct gather_job {
    const int64_t *ix; /* the indices, counted from 0 */
    int64_t dim, count;
    size_t inner; /* bytes a row */
    const char *src;
    char *dst;
} gather_job;

static void gather_rows(int64_t lo, int64_t hi, void *ctx) {
    const gather_job *g = ctx;
    for (int64_t o = lo; o < hi; o++) {
        const char *src = g->src + (size_t)(o * g->dim) * g->inner;
        char *dst = g->dst + (size_t)(o * g->count) * g->inner;
        if (g->inner == 4) { /* one float32 a row: Gather along the last axis */
            for (int64_t j = 0; j < g->count; j++) memcpy(dst + j * 4, src + g->ix[j] * 4, 4);
            continue;
        }
        for (int64_t j = 0; j < g->count; j++) memcpy(dst + (size_t)j * g->inner, src + (size_t)g->ix[j] * g->inner, g->inner);
    }
}

vp_status vp_cpu_gather(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    const vp_tensor *x = in[0], *idx = in[1];
    int axis = normalized_axis(vp_attr_int(n, "axis", 0), x->rank);
    int64_t dim = x->dims[axis], k = vp_tensor_numel(idx), outer = 1, *ix;
    vp_status s = vp_cpu_axis_indices(n, idx, axis, dim, &ix, err);
    if (s) return s;
    size_t inner = vp_dtype_size(x->dtype);
    for (int a = 0; a < axis; a++) outer *= x->dims[a];
    for (int a = axis + 1; a < x->rank; a++) inner *= (size_t)x->dims[a];
    gather_job g = {ix, dim, k, inner, x->data, out[0]->data};
    vp_par_for(outer, k * (int64_t)(inner / 4 + 1), gather_rows, &g);
    free(ix);
    return VP_OK;
}

/* ---- GatherElements ---- */

vp_status vp_cpu_gather_elements(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    const vp_tensor *x = in[0], *idx = in[1];
    int axis = normalized_axis(vp_attr_int(n, "axis", 0), x->rank);
    int64_t k = vp_tensor_numel(idx), axis_stride = 1, *ix;
    vp_status s = vp_cpu_axis_indices(n, idx, axis, x->dims[axis], &ix, err);
    if (s) return s;
    size_t esize = vp_dtype_size(x->dtype);
    vp_nd_iter it = vp_cpu_elements_walk(x->rank, x->dims, idx->dims, axis, &axis_stride);
    const char *src = x->data;
    char *dst = out[0]->data;
    for (int64_t j = 0; j < k; j++, vp_nd_iter_next(&it))
        memcpy(dst + (size_t)j * esize, src + (size_t)(it.off[0] + ix[j] * axis_stride) * esize, esize);
    free(ix);
    return VP_OK;
}

/* ---- Trilu ---- */

vp_status vp_cpu_trilu(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    (void)err;
    const vp_tensor *x = in[0];
    int64_t rows = x->dims[x->rank - 2], cols = x->dims[x->rank - 1];
    if (!rows || !cols) return VP_OK;
    int64_t k = n->n_inputs > 1 && in[1] && vp_tensor_numel(in[1]) ? vp_tensor_int_at(in[1], 0) : 0;
    /* beyond +-(rows + cols) every k keeps or zeroes all; clamping keeps i + k from overflowing */
    int64_t far = rows + cols;
    k = k < -far ? -far : k > far ? far : k;
    int upper = vp_attr_int(n, "upper", 1) != 0;
    size_t esize = vp_dtype_size(x->dtype), row_bytes = (size_t)cols * esize;
    int64_t n_rows = vp_tensor_numel(x) / cols;
    for (int64_t r = 0; r < n_rows; r++) {
        const char *s = (const char *)x->data + (size_t)r * row_bytes;
        char *d = (char *)out[0]->data + (size_t)r * row_bytes;
        int64_t i = r % rows;
        /* upper keeps columns j >= i + k; lower keeps j <= i + k */
        int64_t cut = upper ? i + k : i + k + 1;
        size_t split = (size_t)(cut < 0 ? 0 : cut > cols ? cols : cut) * esize;
        if (upper) {
            memset(d, 0, split);
            memcpy(d + split, s + split, row_bytes - split);
        } else {
            memcpy(d, s, split);
            memset(d + split, 0, row_bytes - split);
        }
    }
    return VP_OK;
}

/* ---- Pad ---- */

/* Fill with the value, then copy the part of the input that stays (negative pads crop). */
static void pad_constant(const vp_tensor *x, vp_tensor *y, const int64_t *begin, const int64_t *end,
                         const unsigned char *value) {
    size_t esize = vp_dtype_size(x->dtype);
    int64_t count = vp_tensor_numel(y);
    static const unsigned char zero[16];
    if (!memcmp(value, zero, esize))
        memset(y->data, 0, (size_t)count * esize);
    else
        for (int64_t i = 0; i < count; i++) memcpy((char *)y->data + (size_t)i * esize, value, esize);
    int64_t in_strides[VP_MAX_RANK], out_strides[VP_MAX_RANK], box[VP_MAX_RANK], src_off = 0, dst_off = 0;
    vp_tensor_strides(x, in_strides);
    vp_tensor_strides(y, out_strides);
    for (int a = 0; a < x->rank; a++) {
        int64_t crop_begin = begin[a] < 0 ? -begin[a] : 0, crop_end = end[a] < 0 ? -end[a] : 0;
        box[a] = x->dims[a] - crop_begin - crop_end;
        if (box[a] <= 0) return;
        src_off += crop_begin * in_strides[a];
        dst_off += (begin[a] > 0 ? begin[a] : 0) * out_strides[a];
    }
    vp_copy_strided((char *)y->data + dst_off, out_strides, (const char *)x->data + src_off, in_strides, x->rank, box,
                    esize);
}

/* Where output position o along an axis of size dim reads from (i = o - begin). */
static int64_t pad_source(vp_pad_mode mode, int64_t i, int64_t dim) {
    if (i >= 0 && i < dim) return i;
    if (mode == VP_PAD_EDGE) return i < 0 ? 0 : dim - 1;
    if (mode == VP_PAD_WRAP) {
        int64_t m = i % dim;
        return m < 0 ? m + dim : m;
    }
    if (dim == 1) return 0; /* reflect: period 2 * (dim - 1), as numpy repeats it */
    int64_t period = 2 * (dim - 1), m = i % period;
    if (m < 0) m += period;
    return m >= dim ? period - m : m;
}

/* Byte offsets into the input for every output position along one axis. */
static void pad_axis_map(int64_t dim, int64_t begin, int64_t end, vp_pad_mode mode, int64_t stride, int64_t out_dim,
                         int64_t *map) {
    int64_t first = begin < 0 ? -begin : 0, pad = begin > 0 ? begin : 0, kept = vp_pad_kept(dim, begin, end);
    for (int64_t o = 0; o < out_dim; o++) map[o] = (first + pad_source(mode, o - pad, kept)) * stride;
}

/* Reflect, edge and wrap: every output element reads the input at per-axis source
 * indices, tabulated once per axis. */
static vp_status pad_by_source_maps(const vp_node *n, const vp_tensor *x, vp_tensor *y, const int64_t *begin,
                                    const int64_t *end, vp_pad_mode mode, vp_error *err) {
    size_t esize = vp_dtype_size(x->dtype);
    int64_t count = vp_tensor_numel(y);
    if (!count) return VP_OK;
    if (x->rank == 0) {
        memcpy(y->data, x->data, esize);
        return VP_OK;
    }
    int64_t total = 0, *map[VP_MAX_RANK];
    for (int a = 0; a < y->rank; a++) total += y->dims[a];
    int64_t *maps = malloc((size_t)total * sizeof *maps);
    if (!maps) return vp_node_fail(err, VP_ERR_NOMEM, n, "out of memory for pad index maps");
    int64_t in_strides[VP_MAX_RANK];
    vp_tensor_strides(x, in_strides);
    for (int a = 0, at = 0; a < y->rank; at += y->dims[a++]) {
        map[a] = maps + at;
        pad_axis_map(x->dims[a], begin[a], end[a], mode, in_strides[a], y->dims[a], map[a]);
    }
    int last = y->rank - 1;
    int64_t idx[VP_MAX_RANK] = {0}, cols = y->dims[last];
    char *d = y->data;
    for (int64_t row = 0; row < count / cols; row++) {
        const char *s = x->data;
        for (int a = 0; a < last; a++) s += map[a][idx[a]];
        for (int64_t j = 0; j < cols; j++, d += esize) memcpy(d, s + map[last][j], esize);
        for (int a = last - 1; a >= 0 && ++idx[a] == y->dims[a]; a--) idx[a] = 0;
    }
    free(maps);
    return VP_OK;
}

vp_status vp_cpu_pad(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    const vp_tensor *x = in[0];
    vp_tensor *y = out[0];
    size_t esize = vp_dtype_size(x->dtype);
    int mode = vp_pad_mode_parse(vp_attr_string(n, "mode", "constant"));
    int64_t pads[2 * VP_MAX_RANK], axes[VP_MAX_RANK];
    int n_pads;
    const int64_t *axes_or_all = NULL;
    unsigned char value[16] = {0};
    if (n->opset < 11) { /* pads and the fill value were attributes */
        const int64_t *p;
        n_pads = vp_attr_ints(n, "pads", &p);
        n_pads = n_pads < 0 ? 0 : n_pads > 2 * VP_MAX_RANK ? 2 * VP_MAX_RANK : n_pads;
        memcpy(pads, p, (size_t)n_pads * sizeof *p);
        vp_store(value, x->dtype, 0, vp_attr_float(n, "value", 0.0f));
    } else {
        n_pads = vp_tensor_read_ints(in[1], pads, 2 * VP_MAX_RANK);
        if (n->n_inputs > 2 && in[2] && vp_tensor_numel(in[2])) memcpy(value, in[2]->data, esize);
        if (n->n_inputs > 3 && in[3]) {
            vp_tensor_read_ints(in[3], axes, VP_MAX_RANK);
            axes_or_all = axes;
        }
    }
    int64_t begin[VP_MAX_RANK], end[VP_MAX_RANK];
    char why[256];
    if (mode < 0 ||
        vp_pad_resolve(x->rank, x->dims, (vp_pad_mode)mode, n_pads / 2, pads, axes_or_all, begin, end, why, sizeof why))
        return vp_node_fail(err, VP_ERR_RUNTIME, n, "%s", mode < 0 ? "unknown mode" : why);
    if (mode == VP_PAD_CONSTANT) {
        pad_constant(x, y, begin, end, value);
        return VP_OK;
    }
    return pad_by_source_maps(n, x, y, begin, end, (vp_pad_mode)mode, err);
}
