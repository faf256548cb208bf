/* CPU kernels for the layout ops of the tensor family (Reshape, Transpose, Concat,
 * Split, Slice, Expand, Tile) and the ops that make tensors from attributes or shapes
 * (Shape, Size, Constant, ConstantOfShape, Range).  Everything moves bytes; see
 * k_tensor.h. */
#include "k_tensor.h"

#include <stdio.h>
#include <string.h>

#include "cpu_util.h"

enum { MAX_COPY_RANK = 2 * VP_MAX_RANK }; /* Tile views each axis as (repeat, dim) */

/* n elements from s to d, strides in bytes.  Sizes are constants inside each case so
 * the memcpy calls compile to plain moves. */
static void copy_run(char *d, int64_t ds, const char *s, int64_t ss, int64_t n, size_t esize) {
    if (ds == (int64_t)esize && ss == (int64_t)esize) {
        memcpy(d, s, (size_t)n * esize);
        return;
    }
    switch (esize) {
    case 1:
        for (int64_t i = 0; i < n; i++) d[i * ds] = s[i * ss];
        break;
    case 2:
        for (int64_t i = 0; i < n; i++) memcpy(d + i * ds, s + i * ss, 2);
        break;
    case 4:
        for (int64_t i = 0; i < n; i++) memcpy(d + i * ds, s + i * ss, 4);
        break;
    case 8:
        for (int64_t i = 0; i < n; i++) memcpy(d + i * ds, s + i * ss, 8);
        break;
    default:
        for (int64_t i = 0; i < n; i++) memcpy(d + i * ds, s + i * ss, esize);
        break;
    }
}

/* A box to copy: per axis the count and the byte strides on both sides. */
typedef struct copy_box {
    int rank;
    int64_t n[MAX_COPY_RANK], ds[MAX_COPY_RANK], ss[MAX_COPY_RANK];
} copy_box;

/* Drops unit axes and merges an axis into the one inside it whenever both layouts step
 * over the pair as one run, so a contiguous box becomes one memcpy.  Returns 0 for an
 * empty box. */
static int copy_box_init(copy_box *b, const int64_t *dst_strides, const int64_t *src_strides, int rank,
                         const int64_t *dims) {
    int r = 0;
    for (int a = 0; a < rank; a++) {
        if (dims[a] == 0) return 0;
        if (dims[a] == 1) continue;
        if (r > 0 && b->ds[r - 1] == dst_strides[a] * dims[a] && b->ss[r - 1] == src_strides[a] * dims[a]) {
            b->n[r - 1] *= dims[a];
        } else {
            b->n[r] = dims[a];
            r++;
        }
        b->ds[r - 1] = dst_strides[a];
        b->ss[r - 1] = src_strides[a];
    }
    b->rank = r;
    return 1;
}

enum { TILE = 32 }; /* 32 x 32 elements: a tile of both layouts fits in L1 */

typedef struct tile_axis {
    int64_t n, ds, ss; /* an axis copied in tiles with the innermost; n == 0: none */
} tile_axis;

/* A transpose writes rows whose source is strided; when another axis reads the source
 * contiguously, that axis and the innermost are copied in tiles so both sides stay in
 * cache.  Takes that axis out of the box. */
static tile_axis copy_box_take_tile_axis(copy_box *b, size_t esize) {
    tile_axis t = {0, 0, 0};
    int inner = b->rank - 1;
    int64_t e = (int64_t)esize;
    if (inner < 1 || b->ds[inner] != e || b->ss[inner] == e || b->n[inner] < TILE) return t;
    for (int a = 0; a < inner; a++) {
        if (b->ss[a] != e || b->n[a] < TILE) continue;
        t = (tile_axis){b->n[a], b->ds[a], b->ss[a]};
        for (int k = a; k < inner; k++) {
            b->n[k] = b->n[k + 1];
            b->ds[k] = b->ds[k + 1];
            b->ss[k] = b->ss[k + 1];
        }
        b->rank--;
        break;
    }
    return t;
}

/* Copies the box (t->n by n) in TILE x TILE tiles. */
static void copy_tiled(char *d, int64_t ds, const char *s, int64_t ss, int64_t n, const tile_axis *t, size_t esize) {
    for (int64_t i0 = 0; i0 < t->n; i0 += TILE) {
        int64_t i1 = i0 + TILE < t->n ? i0 + TILE : t->n;
        for (int64_t j0 = 0; j0 < n; j0 += TILE) {
            int64_t len = j0 + TILE < n ? TILE : n - j0;
            for (int64_t i = i0; i < i1; i++)
                copy_run(d + i * t->ds + j0 * ds, ds, s + i * t->ss + j0 * ss, ss, len, esize);
        }
    }
}

void vp_copy_strided(void *dst, const int64_t *dst_strides, const void *src, const int64_t *src_strides, int rank,
                     const int64_t *dims, size_t esize) {
    copy_box b;
    char *d = dst;
    const char *s = src;
    if (!copy_box_init(&b, dst_strides, src_strides, rank, dims)) return;
    if (b.rank == 0) {
        memcpy(d, s, esize);
        return;
    }
    tile_axis tile = copy_box_take_tile_axis(&b, esize);
    int inner = b.rank - 1;
    int64_t idx[MAX_COPY_RANK] = {0}, doff = 0, soff = 0;
    for (;;) {
        if (tile.n)
            copy_tiled(d + doff, b.ds[inner], s + soff, b.ss[inner], b.n[inner], &tile, esize);
        else
            copy_run(d + doff, b.ds[inner], s + soff, b.ss[inner], b.n[inner], esize);
        int a = inner - 1;
        for (; a >= 0; a--) { /* odometer over the outer axes */
            doff += b.ds[a];
            soff += b.ss[a];
            if (++idx[a] < b.n[a]) break;
            doff -= b.ds[a] * b.n[a];
            soff -= b.ss[a] * b.n[a];
            idx[a] = 0;
        }
        if (a < 0) return;
    }
}

void vp_tensor_strides(const vp_tensor *t, int64_t *strides) {
    int64_t s = (int64_t)vp_dtype_size(t->dtype);
    for (int a = t->rank - 1; a >= 0; a--) {
        strides[a] = s;
        s *= t->dims[a];
    }
}

int64_t vp_tensor_int_at(const vp_tensor *t, int64_t i) {
    return t->dtype == VP_I64 ? ((const int64_t *)t->data)[i] : ((const int32_t *)t->data)[i];
}

int vp_tensor_read_ints(const vp_tensor *t, int64_t *v, int max) {
    if (!t) return 0;
    int64_t len = vp_tensor_numel(t);
    if (len > max) len = max; /* the shape function refused longer */
    for (int64_t i = 0; i < len; i++) v[i] = vp_tensor_int_at(t, i);
    return (int)len;
}

static int normalized_axis(int64_t axis, int rank) { return (int)(axis < 0 ? axis + rank : axis); }

/* ---- Reshape, Flatten, Squeeze, Unsqueeze: the bytes stay as they are ---- */

vp_status vp_cpu_reshape(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    (void)n;
    (void)err;
    if (out[0]->data != in[0]->data) memmove(out[0]->data, in[0]->data, vp_tensor_nbytes(out[0]));
    return VP_OK;
}

/* ---- Transpose ---- */

vp_status vp_cpu_transpose(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    (void)err;
    const vp_tensor *x = in[0];
    const int64_t *perm;
    int np = vp_attr_ints(n, "perm", &perm);
    int64_t in_strides[VP_MAX_RANK], src_strides[VP_MAX_RANK], dst_strides[VP_MAX_RANK];
    vp_tensor_strides(x, in_strides);
    vp_tensor_strides(out[0], dst_strides);
    for (int a = 0; a < x->rank; a++) src_strides[a] = in_strides[np >= 0 ? perm[a] : x->rank - 1 - a];
    vp_copy_strided(out[0]->data, dst_strides, x->data, src_strides, x->rank, out[0]->dims, vp_dtype_size(x->dtype));
    return VP_OK;
}

/* ---- Concat and Split: runs of bytes per outer index ---- */

static int64_t outer_count(const vp_tensor *t, int axis) {
    int64_t k = 1;
    for (int a = 0; a < axis; a++) k *= t->dims[a];
    return k;
}

/* Bytes of one outer index: the axis and everything inside it. */
static size_t block_bytes(const vp_tensor *t, int axis) {
    size_t k = vp_dtype_size(t->dtype);
    for (int a = axis; a < t->rank; a++) k *= (size_t)t->dims[a];
    return k;
}

vp_status vp_cpu_concat(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    (void)err;
    const vp_tensor *y = out[0];
    int axis = normalized_axis(vp_attr_int(n, "axis", 1), y->rank);
    int64_t outer = outer_count(y, axis);
    char *d = y->data;
    for (int64_t o = 0; o < outer; o++)
        for (int k = 0; k < n->n_inputs; k++) {
            if (!in[k]) continue;
            size_t b = block_bytes(in[k], axis);
            memcpy(d, (const char *)in[k]->data + (size_t)o * b, b);
            d += b;
        }
    return VP_OK;
}

vp_status vp_cpu_split(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    (void)err;
    const vp_tensor *x = in[0];
    int axis = normalized_axis(vp_attr_int(n, "axis", 0), x->rank);
    int64_t outer = outer_count(x, axis);
    const char *s = x->data;
    for (int64_t o = 0; o < outer; o++)
        for (int k = 0; k < n->n_outputs; k++) {
            if (!out[k]) continue; /* the shape function refuses omitted outputs */
            size_t b = block_bytes(out[k], axis);
            memcpy((char *)out[k]->data + (size_t)o * b, s, b);
            s += b;
        }
    return VP_OK;
}

/* ---- Slice ---- */

vp_status vp_cpu_slice(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    const vp_tensor *x = in[0];
    int64_t starts[VP_MAX_RANK], ends[VP_MAX_RANK], axes[VP_MAX_RANK], steps[VP_MAX_RANK];
    int count, has_axes, has_steps = 0;
    if (n->opset < 10) { /* starts, ends and axes were attributes */
        const int64_t *p;
        count = vp_attr_ints(n, "starts", &p);
        count = count > VP_MAX_RANK ? VP_MAX_RANK : count < 0 ? 0 : count;
        memcpy(starts, p, (size_t)count * sizeof *p);
        if (vp_attr_ints(n, "ends", &p) >= count) memcpy(ends, p, (size_t)count * sizeof *p);
        has_axes = vp_attr_ints(n, "axes", &p) >= count;
        if (has_axes) memcpy(axes, p, (size_t)count * sizeof *p);
    } else {
        const vp_tensor *axes_in = n->n_inputs > 3 ? in[3] : NULL, *steps_in = n->n_inputs > 4 ? in[4] : NULL;
        count = vp_tensor_read_ints(in[1], starts, VP_MAX_RANK);
        vp_tensor_read_ints(in[2], ends, VP_MAX_RANK);
        has_axes = vp_tensor_read_ints(axes_in, axes, VP_MAX_RANK) > 0;
        has_steps = vp_tensor_read_ints(steps_in, steps, VP_MAX_RANK) > 0;
    }
    vp_slice_plan plan;
    char why[256];
    if (vp_slice_resolve(x->rank, x->dims, count, starts, ends, has_axes ? axes : NULL, has_steps ? steps : NULL, &plan,
                         why, sizeof why))
        return vp_node_fail(err, VP_ERR_RUNTIME, n, "%s", why);
    int64_t in_strides[VP_MAX_RANK], src_strides[VP_MAX_RANK], dst_strides[VP_MAX_RANK], offset = 0;
    vp_tensor_strides(x, in_strides);
    vp_tensor_strides(out[0], dst_strides);
    for (int a = 0; a < x->rank; a++) {
        offset += plan.start[a] * in_strides[a];
        src_strides[a] = plan.step[a] * in_strides[a];
    }
    vp_copy_strided(out[0]->data, dst_strides, (const char *)x->data + offset, src_strides, x->rank, out[0]->dims,
                    vp_dtype_size(x->dtype));
    return VP_OK;
}

/* ---- Expand and Tile: repeat by stride 0 ---- */

vp_status vp_cpu_expand(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    (void)n;
    (void)err;
    const vp_tensor *x = in[0], *y = out[0];
    size_t esize = vp_dtype_size(x->dtype);
    int64_t src_strides[VP_MAX_RANK], dst_strides[VP_MAX_RANK];
    vp_broadcast_strides(x, y->rank, src_strides);
    for (int a = 0; a < y->rank; a++) src_strides[a] *= (int64_t)esize;
    vp_tensor_strides(y, dst_strides);
    vp_copy_strided(y->data, dst_strides, x->data, src_strides, y->rank, y->dims, esize);
    return VP_OK;
}

vp_status vp_cpu_tile(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    (void)n;
    (void)err;
    /* The output seen as (repeat_0, dim_0, repeat_1, dim_1, ...): the source steps 0
     * along each repeat axis. */
    const vp_tensor *x = in[0], *y = out[0];
    size_t esize = vp_dtype_size(x->dtype);
    int64_t in_strides[VP_MAX_RANK], out_strides[VP_MAX_RANK];
    int64_t dims[MAX_COPY_RANK], src[MAX_COPY_RANK], dst[MAX_COPY_RANK];
    vp_tensor_strides(x, in_strides);
    vp_tensor_strides(y, out_strides);
    for (int a = 0; a < x->rank; a++) {
        dims[2 * a] = x->dims[a] ? y->dims[a] / x->dims[a] : 0;
        dims[2 * a + 1] = x->dims[a];
        src[2 * a] = 0;
        src[2 * a + 1] = in_strides[a];
        dst[2 * a] = out_strides[a] * x->dims[a];
        dst[2 * a + 1] = out_strides[a];
    }
    vp_copy_strided(y->data, dst, x->data, src, 2 * x->rank, dims, esize);
    return VP_OK;
}

/* ---- Shape and Size: read the input's dims, never its data ---- */

vp_status vp_cpu_shape(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    (void)err;
    int start, end;
    vp_shape_op_bounds(n, in[0]->rank, &start, &end);
    int64_t *y = out[0]->data;
    for (int a = start; a < end; a++) y[a - start] = in[0]->dims[a];
    return VP_OK;
}

vp_status vp_cpu_size(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    (void)n;
    (void)err;
    *(int64_t *)out[0]->data = vp_tensor_numel(in[0]);
    return VP_OK;
}

/* ---- Constant, ConstantOfShape, Range ---- */

vp_status vp_cpu_constant(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    (void)in;
    if (!out[0]) return vp_node_fail(err, VP_ERR_INVALID, n, "Constant has no output to write");
    const vp_attr *a = vp_constant_value_attr(n);
    size_t bytes = vp_tensor_nbytes(out[0]);
    const void *src = NULL;
    if (a && a->type == VP_ATTR_TENSOR)
        src = a->t->data;
    else if (a && a->type == VP_ATTR_FLOAT)
        src = &a->f;
    else if (a && a->type == VP_ATTR_INT)
        src = &a->i;
    else if (a && a->type == VP_ATTR_FLOATS)
        src = a->floats;
    else if (a && a->type == VP_ATTR_INTS)
        src = a->ints;
    if (!src) return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "has no value this kernel can copy");
    if (bytes) memcpy(out[0]->data, src, bytes);
    return VP_OK;
}

vp_status vp_cpu_constant_of_shape(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    (void)in;
    (void)err;
    const vp_attr *a = vp_node_attr(n, "value");
    size_t esize = vp_dtype_size(out[0]->dtype);
    int64_t count = vp_tensor_numel(out[0]);
    unsigned char zero[16] = {0};
    const unsigned char *v = a && a->type == VP_ATTR_TENSOR ? a->t->data : zero;
    if (!memcmp(v, zero, esize)) {
        memset(out[0]->data, 0, (size_t)count * esize);
        return VP_OK;
    }
    unsigned char *y = out[0]->data;
    for (int64_t i = 0; i < count; i++) memcpy(y + (size_t)i * esize, v, esize);
    return VP_OK;
}

/* Integers stay exact: an int64 range past 2^53 must not go through double. */
static int64_t scalar_int(const vp_tensor *t) {
    return t->dtype == VP_I64 ? *(const int64_t *)t->data : (int64_t)vp_load(t->data, t->dtype, 0);
}

static void range_ints(vp_tensor *y, int64_t start, int64_t delta) {
    int64_t count = vp_tensor_numel(y);
    for (int64_t i = 0; i < count; i++) {
        /* unsigned, so even a limit fed differently from the one the shape came from
         * wraps instead of overflowing */
        int64_t v = (int64_t)((uint64_t)start + (uint64_t)i * (uint64_t)delta);
        switch (y->dtype) {
        case VP_I64: ((int64_t *)y->data)[i] = v; break;
        case VP_I32: ((int32_t *)y->data)[i] = (int32_t)v; break;
        default: ((int16_t *)y->data)[i] = (int16_t)v; break;
        }
    }
}

vp_status vp_cpu_range(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    (void)n;
    (void)err;
    vp_tensor *y = out[0];
    if (vp_dtype_is_int(y->dtype)) {
        range_ints(y, scalar_int(in[0]), scalar_int(in[2]));
        return VP_OK;
    }
    int64_t count = vp_tensor_numel(y);
    double start = vp_load(in[0]->data, y->dtype, 0), delta = vp_load(in[2]->data, y->dtype, 0);
    if (y->dtype == VP_F32) {
        float *p = y->data;
        for (int64_t i = 0; i < count; i++) p[i] = (float)(start + (double)i * delta);
        return VP_OK;
    }
    for (int64_t i = 0; i < count; i++) vp_store(y->data, y->dtype, i, start + (double)i * delta);
    return VP_OK;
}
