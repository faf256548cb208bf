/* CumSum and TopK on the CPU: ops that walk one axis in order.
 *
 * Both view the input as [outer, len, inner] around their axis.  CumSum keeps a row
 * of running sums (double for floats, wrapping int64 for integers) and steps along the
 * axis a row at a time, so memory is read in order.  TopK sorts each fiber along the
 * axis with its indices; ties keep the lower index first, as ONNX specifies. */
#include <math.h>
#include <stdlib.h>

#include "cpu_util.h"
#include "k_reduce.h"

enum { ROW_CHUNK = 256 };

/* ---- CumSum ---- */

typedef struct cumsum_args {
    const vp_tensor *x;
    vp_tensor *y;
    int64_t outer, len, inner;
    int exclusive, reverse;
} cumsum_args;

/* One step along the axis for inner elements [c, c + m) of row `row`. */
static void cumsum_row_f64(const cumsum_args *a, int64_t row, int64_t c, int64_t m, double *acc) {
    double x[ROW_CHUNK], y[ROW_CHUNK];
    vp_red_load_f64(a->x->data, a->x->dtype, row * a->inner + c, 1, m, x);
    for (int64_t i = 0; i < m; i++) {
        double before = acc[c + i];
        acc[c + i] += x[i];
        y[i] = a->exclusive ? before : acc[c + i];
    }
    vp_red_store_f64(a->y->data, a->y->dtype, row * a->inner + c, 1, m, y);
}

static void cumsum_row_i64(const cumsum_args *a, int64_t row, int64_t c, int64_t m, int64_t *acc) {
    int64_t x[ROW_CHUNK], y[ROW_CHUNK];
    vp_red_load_i64(a->x->data, a->x->dtype, row * a->inner + c, 1, m, x);
    for (int64_t i = 0; i < m; i++) {
        int64_t before = acc[c + i];
        acc[c + i] = (int64_t)((uint64_t)before + (uint64_t)x[i]); /* wraps, never overflows */
        y[i] = a->exclusive ? before : acc[c + i];
    }
    vp_red_store_i64(a->y->data, a->y->dtype, row * a->inner + c, 1, m, y);
}

static void cumsum_walk(const cumsum_args *a, void *acc) {
    int is_float = vp_dtype_is_float(a->x->dtype);
    for (int64_t o = 0; o < a->outer; o++) {
        for (int64_t i = 0; i < a->inner; i++) {
            if (is_float) ((double *)acc)[i] = 0;
            else ((int64_t *)acc)[i] = 0;
        }
        for (int64_t r = 0; r < a->len; r++) {
            int64_t row = o * a->len + (a->reverse ? a->len - 1 - r : r);
            for (int64_t c = 0; c < a->inner; c += ROW_CHUNK) {
                int64_t m = a->inner - c < ROW_CHUNK ? a->inner - c : ROW_CHUNK;
                if (is_float) cumsum_row_f64(a, row, c, m, acc);
                else cumsum_row_i64(a, row, c, m, acc);
            }
        }
    }
}

vp_status vp_cpu_cumsum(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    const vp_tensor *x = in[0], *axis_t = in[1];
    if (vp_tensor_numel(axis_t) != 1 || axis_t->rank > 1)
        return vp_node_fail(err, VP_ERR_RUNTIME, n, "axis input must hold a single value");
    int64_t axis;
    vp_red_load_i64(axis_t->data, axis_t->dtype, 0, 1, 1, &axis);
    if (axis < -x->rank || axis >= x->rank)
        return vp_node_fail(err, VP_ERR_RUNTIME, n, "axis %lld is out of range for rank %d", (long long)axis,
                            x->rank);
    cumsum_args a = {.x = x, .y = out[0], .exclusive = vp_attr_int(n, "exclusive", 0) != 0,
                     .reverse = vp_attr_int(n, "reverse", 0) != 0};
    vp_red_split(x->rank, x->dims, (int)(axis < 0 ? axis + x->rank : axis), &a.outer, &a.len, &a.inner);
    if (!out[0] || !vp_tensor_numel(x)) return VP_OK;
    void *acc = malloc((size_t)a.inner * 8); /* a double or an int64 per inner position */
    if (!acc) return vp_node_fail(err, VP_ERR_NOMEM, n, "out of memory");
    cumsum_walk(&a, acc);
    free(acc);
    return VP_OK;
}

/* ---- TopK ---- */

/* An element of a fiber: floats compare by f, integers by i (exact for int64). */
typedef struct topk_item {
    double f;
    int64_t i;
    int64_t index;
} topk_item;

/* Ascending key order in which NaN is above everything, so the sort sees a total order. */
static int topk_key_cmp(const topk_item *a, const topk_item *b) {
    int an = a->f != a->f, bn = b->f != b->f;
    if (an || bn) return an - bn;
    if (a->f != b->f) return a->f < b->f ? -1 : 1;
    return (a->i > b->i) - (a->i < b->i);
}

static int topk_index_cmp(const topk_item *a, const topk_item *b) { return (a->index > b->index) - (a->index < b->index); }

static int topk_cmp_largest(const void *pa, const void *pb) {
    int c = topk_key_cmp(pb, pa);
    return c ? c : topk_index_cmp(pa, pb);
}

static int topk_cmp_smallest(const void *pa, const void *pb) {
    int c = topk_key_cmp(pa, pb);
    return c ? c : topk_index_cmp(pa, pb);
}

/* Loads fiber (stride inner from off) into items, sorted best first. */
static void topk_sort_fiber(const vp_tensor *x, int64_t off, int64_t inner, int64_t len, int largest,
                            topk_item *items, void *line) {
    if (vp_dtype_is_float(x->dtype)) {
        vp_red_load_f64(x->data, x->dtype, off, inner, len, line);
        for (int64_t r = 0; r < len; r++) items[r] = (topk_item){((double *)line)[r], 0, r};
    } else {
        vp_red_load_i64(x->data, x->dtype, off, inner, len, line);
        for (int64_t r = 0; r < len; r++) items[r] = (topk_item){0, ((int64_t *)line)[r], r};
    }
    qsort(items, (size_t)len, sizeof *items, largest ? topk_cmp_largest : topk_cmp_smallest);
}

/* Writes the first k items to the fibers of values and indices (either may be omitted) at off. */
static void topk_store(const topk_item *items, int64_t k, vp_tensor *values, vp_tensor *indices, int64_t off,
                       int64_t inner, void *line) {
    if (indices)
        for (int64_t r = 0; r < k; r++) ((int64_t *)indices->data)[off + r * inner] = items[r].index;
    if (!values) return;
    if (vp_dtype_is_float(values->dtype)) {
        for (int64_t r = 0; r < k; r++) ((double *)line)[r] = items[r].f;
        vp_red_store_f64(values->data, values->dtype, off, inner, k, line);
    } else {
        for (int64_t r = 0; r < k; r++) ((int64_t *)line)[r] = items[r].i;
        vp_red_store_i64(values->data, values->dtype, off, inner, k, line);
    }
}

vp_status vp_cpu_topk(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    const vp_tensor *x = in[0];
    int axis = (int)vp_attr_int(n, "axis", -1);
    if (axis < 0) axis += x->rank;
    int largest = vp_attr_int(n, "largest", 1) != 0;
    const vp_tensor *shape = out[0] ? out[0] : out[1];
    if (!shape) return VP_OK;
    int64_t k = shape->dims[axis]; /* the shape function checked K against the axis */
    int64_t outer, len, inner;
    vp_red_split(x->rank, x->dims, axis, &outer, &len, &inner);
    if (!k || !outer || !inner) return VP_OK;
    topk_item *items = malloc((size_t)len * sizeof *items);
    void *line = malloc((size_t)len * 8);
    if (!items || !line) {
        free(items);
        free(line);
        return vp_node_fail(err, VP_ERR_NOMEM, n, "out of memory");
    }
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t i = 0; i < inner; i++) {
            topk_sort_fiber(x, o * len * inner + i, inner, len, largest, items, line);
            topk_store(items, k, out[0], out[1], o * k * inner + i, inner, line);
        }
    }
    free(items);
    free(line);
    return VP_OK;
}
