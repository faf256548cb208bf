/* Copies and conversions: Cast (and CastLike), Identity, Dropout.
 *
 * Cast converts in chunks through a buffer: every element is loaded into float64 (or
 * int64 when both sides are integers, so 64-bit values stay exact), then stored into the
 * target dtype.  Each load and store loop is specialised for one dtype, so no loop
 * switches on the dtype per element. */
#include "k_elementwise.h"

#include <stdlib.h>
#include <string.h>

#include "cpu_par.h"
#include "dropout_rng.h"
#include "k_elementwise_rows.h"

enum { EW_CHUNK = 512 }; /* elements converted per pass through the buffer */

#define EW_STORED_DTYPES(X) \
    X(VP_F32) X(VP_F64) X(VP_F16) X(VP_BF16) X(VP_I8) X(VP_I16) X(VP_I32) X(VP_I64) \
    X(VP_U8) X(VP_U16) X(VP_U32) X(VP_U64) X(VP_BOOL)

/* vp_load and vp_store inline to one conversion when their dtype is a constant. */
static void ew_load_f64(const void *src, vp_dtype t, int64_t n, double *buf) {
    switch (t) {
#define EW_LOAD_CASE(DT) \
    case DT: for (int64_t i = 0; i < n; i++) buf[i] = vp_load(src, DT, i); break;
        EW_STORED_DTYPES(EW_LOAD_CASE)
#undef EW_LOAD_CASE
    default: break;
    }
}

/* Floats to integers saturate and NaN becomes 0; to bool, anything but 0 is true. */
static void ew_store_f64(const double *buf, vp_dtype t, int64_t n, void *dst) {
    switch (t) {
#define EW_STORE_CASE(DT) \
    case DT: for (int64_t i = 0; i < n; i++) vp_store(dst, DT, i, buf[i]); break;
        EW_STORED_DTYPES(EW_STORE_CASE)
#undef EW_STORE_CASE
    default: break;
    }
}

#define EW_INT_DTYPES(X) \
    X(VP_I8, int8_t) X(VP_I16, int16_t) X(VP_I32, int32_t) X(VP_I64, int64_t) \
    X(VP_U8, uint8_t) X(VP_U16, uint16_t) X(VP_U32, uint32_t) X(VP_U64, uint64_t)

static void ew_load_i64(const void *src, vp_dtype t, int64_t n, int64_t *buf) {
    switch (t) {
#define EW_LOAD_CASE(DT, T) \
    case DT: for (int64_t i = 0; i < n; i++) buf[i] = (int64_t)((const T *)src)[i]; break;
        EW_INT_DTYPES(EW_LOAD_CASE)
#undef EW_LOAD_CASE
    case VP_BOOL: for (int64_t i = 0; i < n; i++) buf[i] = ((const uint8_t *)src)[i] != 0; break;
    default: break;
    }
}

/* Integers narrow by wrapping, as numpy's astype does. */
static void ew_store_i64(const int64_t *buf, vp_dtype t, int64_t n, void *dst) {
    switch (t) {
#define EW_STORE_CASE(DT, T) \
    case DT: for (int64_t i = 0; i < n; i++) ((T *)dst)[i] = (T)buf[i]; break;
        EW_INT_DTYPES(EW_STORE_CASE)
#undef EW_STORE_CASE
    case VP_BOOL: for (int64_t i = 0; i < n; i++) ((uint8_t *)dst)[i] = buf[i] != 0; break;
    default: break;
    }
}

static int ew_is_integral(vp_dtype t) { return vp_dtype_is_int(t) || t == VP_BOOL; }

/* The conversions mixed precision runs on every step go direct, without the buffer. */
typedef void (*ew_cast_row)(const void *x, void *y, int64_t n);

#define EW_CAST_ROW(fname, TI, TO, CONVERT)                                                 \
    static void fname(const void *px, void *py, int64_t n) {                                \
        const TI *x = px;                                                                   \
        TO *y = py;                                                                         \
        for (int64_t i = 0; i < n; i++) y[i] = CONVERT(x[i]);                               \
    }

#define EW_TO_F32(v) ((float)(v))
EW_CAST_ROW(cast_f32_f16, float, uint16_t, vp_f32_to_f16)
EW_CAST_ROW(cast_f16_f32, uint16_t, float, vp_f16_to_f32)
EW_CAST_ROW(cast_f32_bf16, float, uint16_t, vp_f32_to_bf16)
EW_CAST_ROW(cast_bf16_f32, uint16_t, float, vp_bf16_to_f32)
EW_CAST_ROW(cast_f32_f64, float, double, EW_SAME)
EW_CAST_ROW(cast_f64_f32, double, float, EW_TO_F32)

static ew_cast_row ew_cast_direct(vp_dtype from, vp_dtype to) {
    static const struct {
        vp_dtype from, to;
        ew_cast_row row;
    } direct[] = {
        {VP_F32, VP_F16, cast_f32_f16},   {VP_F16, VP_F32, cast_f16_f32}, {VP_F32, VP_BF16, cast_f32_bf16},
        {VP_BF16, VP_F32, cast_bf16_f32}, {VP_F32, VP_F64, cast_f32_f64}, {VP_F64, VP_F32, cast_f64_f32},
    };
    for (size_t i = 0; i < sizeof direct / sizeof direct[0]; i++)
        if (direct[i].from == from && direct[i].to == to) return direct[i].row;
    return NULL;
}

/* Cast and CastLike: the output's dtype is the target. */
VP_EW_KERNEL(vp_cpu_cast) {
    const vp_tensor *x = in[0];
    vp_tensor *y = out[0];
    if (x->dtype == y->dtype) {
        ew_copy(y->data, x->data, vp_tensor_nbytes(y));
        return VP_OK;
    }
    if (!vp_dtype_size(x->dtype) || x->dtype == VP_STRING || !vp_dtype_size(y->dtype) || y->dtype == VP_STRING)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "cannot cast %s to %s", vp_dtype_name(x->dtype),
                            vp_dtype_name(y->dtype));
    ew_cast_row direct = ew_cast_direct(x->dtype, y->dtype);
    if (direct) {
        direct(x->data, y->data, vp_tensor_numel(x));
        return VP_OK;
    }
    size_t in_size = vp_dtype_size(x->dtype), out_size = vp_dtype_size(y->dtype);
    const char *src = x->data;
    char *dst = y->data;
    int exact_ints = ew_is_integral(x->dtype) && ew_is_integral(y->dtype);
    union {
        double f64[EW_CHUNK];
        int64_t i64[EW_CHUNK];
    } buf;
    for (int64_t at = 0, count = vp_tensor_numel(x); at < count; at += EW_CHUNK) {
        int64_t k = count - at < EW_CHUNK ? count - at : EW_CHUNK;
        const char *s = src + at * (int64_t)in_size;
        char *d = dst + at * (int64_t)out_size;
        if (exact_ints) {
            ew_load_i64(s, x->dtype, k, buf.i64);
            ew_store_i64(buf.i64, y->dtype, k, d);
        } else {
            ew_load_f64(s, x->dtype, k, buf.f64);
            ew_store_f64(buf.f64, y->dtype, k, d);
        }
    }
    return VP_OK;
}

VP_EW_KERNEL(vp_cpu_identity) {
    (void)n;
    (void)err;
    ew_copy(out[0]->data, in[0]->data, vp_tensor_nbytes(out[0]));
    return VP_OK;
}

/* ---- Dropout ---- */

/* MT19937 as numpy's legacy RandomState seeds and draws it, so a training-mode Dropout
 * keeps exactly the elements the ONNX reference implementation keeps for a seed. */
enum { EW_MT_N = 624, EW_MT_M = 397 };

typedef struct ew_mt {
    uint32_t state[EW_MT_N];
    int next;
} ew_mt;

static void ew_mt_seed(ew_mt *mt, uint32_t seed) {
    mt->state[0] = seed;
    for (uint32_t i = 1; i < EW_MT_N; i++)
        mt->state[i] = 1812433253u * (mt->state[i - 1] ^ (mt->state[i - 1] >> 30)) + i;
    mt->next = EW_MT_N;
}

static void ew_mt_twist(ew_mt *mt) {
    for (int k = 0; k < EW_MT_N; k++) {
        uint32_t y = (mt->state[k] & 0x80000000u) | (mt->state[(k + 1) % EW_MT_N] & 0x7fffffffu);
        mt->state[k] = mt->state[(k + EW_MT_M) % EW_MT_N] ^ (y >> 1) ^ ((y & 1) ? 0x9908b0dfu : 0);
    }
    mt->next = 0;
}

static uint32_t ew_mt_u32(ew_mt *mt) {
    if (mt->next >= EW_MT_N) ew_mt_twist(mt);
    uint32_t y = mt->state[mt->next++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    return y ^ (y >> 18);
}

/* Uniform in [0, 1) from 53 bits, numpy's random_sample. */
static double ew_mt_uniform(ew_mt *mt) {
    uint32_t a = ew_mt_u32(mt) >> 5, b = ew_mt_u32(mt) >> 6;
    return (a * 67108864.0 + b) / 9007199254740992.0;
}

void vp_dropout_keep_mask(uint32_t seed, double ratio, int64_t count, uint8_t *keep) {
    ew_mt mt;
    ew_mt_seed(&mt, seed);
    for (int64_t i = 0; i < count; i++) keep[i] = (uint8_t)(ew_mt_uniform(&mt) >= ratio);
}

void vp_dropout_keep_mask_part(uint32_t seed, double ratio, int64_t outer, int64_t chunk, int ranks, int rank,
                               uint8_t *keep) {
    ew_mt mt;
    ew_mt_seed(&mt, seed);
    for (int64_t o = 0; o < outer; o++)
        for (int r = 0; r < ranks; r++)
            for (int64_t j = 0; j < chunk; j++) {
                double u = ew_mt_uniform(&mt);
                if (r == rank) keep[o * chunk + j] = (uint8_t)(u >= ratio);
            }
}

uint64_t vp_dropout_node_key(const vp_node *n, int64_t step) {
    return vp_dropout_key((uint32_t)vp_attr_int(n, "seed", 0), step);
}

int64_t vp_dropout_step(const vp_node *n, const vp_tensor *const *in, int k) {
    if (n->n_inputs <= k || !in[k] || in[k]->dtype != VP_I64) return 0;
    return ((const int64_t *)in[k]->data)[0];
}

int vp_dropout_node_split(const vp_node *n, const vp_tensor *x, int64_t *outer, int64_t *chunk, int *ranks, int *rank) {
    int axis = (int)vp_attr_int(n, "vplan_axis", 0);
    *ranks = (int)vp_attr_int(n, "vplan_ranks", 1);
    *rank = (int)vp_attr_int(n, "vplan_rank", 0);
    *outer = 1;
    *chunk = vp_tensor_numel(x);
    if (*ranks <= 1) {
        *ranks = 1;
        return 0;
    }
    if (axis < 0 || axis >= x->rank || *rank < 0 || *rank >= *ranks) return -1;
    *chunk = 1;
    for (int d = 0; d < axis; d++) *outer *= x->dims[d];
    for (int d = axis; d < x->rank; d++) *chunk *= x->dims[d];
    return 0;
}

/* The counter-based mask over [lo, hi): each element a function of its index alone, so
 * the threads split it any way and draw the same bytes. */
typedef struct drop_job {
    uint64_t key;
    uint32_t thr;
    uint64_t chunk;
    int ranks, rank;
    uint8_t *keep;
} drop_job;

static void drop_body(int64_t lo, int64_t hi, void *ctx) {
    const drop_job *j = ctx;
    for (int64_t i = lo; i < hi; i++)
        j->keep[i] = (uint8_t)vp_dropout_keeps(j->key, vp_dropout_global_index((uint64_t)i, j->chunk, j->ranks, j->rank),
                                               j->thr);
}

int vp_dropout_node_mask(const vp_node *n, const vp_tensor *x, double ratio, int64_t step, uint8_t *keep) {
    int ranks, rank;
    int64_t count = vp_tensor_numel(x), outer, chunk;
    if (vp_dropout_node_split(n, x, &outer, &chunk, &ranks, &rank)) return -1;
    uint32_t seed = (uint32_t)vp_attr_int(n, "seed", 0); /* ONNX's Dropout: numpy's MT19937 from it */
    if (vp_attr_int(n, "vplan_step", 0) == 1) { /* our training steps' counter-based masks */
        drop_job j = {vp_dropout_node_key(n, step), vp_dropout_threshold(ratio), (uint64_t)chunk, ranks, rank, keep};
        vp_par_for(count, 8, drop_body, &j);
        return 0;
    }
    if (ranks <= 1) vp_dropout_keep_mask(seed, ratio, count, keep);
    else vp_dropout_keep_mask_part(seed, ratio, outer, chunk, ranks, rank, keep);
    return 0;
}

/* The drop probability: an attribute before opset 12, an optional input since. */
static double ew_dropout_ratio(const vp_node *n, const vp_tensor *const *in) {
    if (n->opset < 12) return vp_attr_float(n, "ratio", 0.5f);
    if (n->n_inputs > 1 && in[1]) return vp_load(in[1]->data, in[1]->dtype, 0);
    return 0.5;
}

static int ew_dropout_training(const vp_node *n, const vp_tensor *const *in) {
    return n->opset >= 12 && n->n_inputs > 2 && in[2] && ((const uint8_t *)in[2]->data)[0];
}

/* Keeps each element with probability 1 - ratio and scales the kept ones by
 * 1 / (1 - ratio); the mask (may be NULL) records which were kept. */
static void ew_dropout_train(const vp_node *n, const vp_tensor *x, vp_tensor *y, vp_tensor *mask, double ratio) {
    ew_mt mt;
    ew_mt_seed(&mt, (uint32_t)vp_attr_int(n, "seed", 0));
    double scale = 1.0 / (1.0 - ratio);
    float scale_f = (float)scale;
    uint8_t *keep_out = mask ? mask->data : NULL;
    for (int64_t i = 0, count = vp_tensor_numel(x); i < count; i++) {
        int keep = ew_mt_uniform(&mt) >= ratio;
        if (x->dtype == VP_F32)
            ((float *)y->data)[i] = keep ? ((const float *)x->data)[i] * scale_f : 0.0f;
        else
            vp_store(y->data, y->dtype, i, keep ? vp_load(x->data, x->dtype, i) * scale : 0.0);
        if (keep_out) keep_out[i] = (uint8_t)keep;
    }
}

/* The mask of an inference-mode Dropout keeps everything: bool since opset 10, the
 * input's dtype before. */
static void ew_fill_ones(vp_tensor *t) {
    if (t->dtype == VP_BOOL) {
        if (vp_tensor_nbytes(t)) memset(t->data, 1, vp_tensor_nbytes(t));
        return;
    }
    for (int64_t i = 0, count = vp_tensor_numel(t); i < count; i++) vp_store(t->data, t->dtype, i, 1.0);
}

/* The mask from vp_dropout_node_mask, then applied: our training steps' Dropouts
 * (vplan_step) and one rank's slice of a split one (vplan_ranks > 1: planner/parallel/
 * tp_seq.c), the one-rank step's mask at this rank's positions, the same arithmetic. */
static vp_status ew_dropout_part(const vp_node *n, const vp_tensor *x, vp_tensor *y, vp_tensor *mask, double ratio,
                                 int64_t step, vp_error *err) {
    int64_t count = vp_tensor_numel(x);
    uint8_t *keep = mask ? mask->data : malloc(count ? (size_t)count : 1);
    if (!keep) return vp_node_fail(err, VP_ERR_NOMEM, n, "out of memory for the mask");
    if (vp_dropout_node_mask(n, x, ratio, step, keep)) {
        if (!mask) free(keep);
        return vp_node_fail(err, VP_ERR_INVALID, n, "vplan_axis/vplan_rank do not fit the input");
    }
    double scale = 1.0 / (1.0 - ratio);
    float scale_f = (float)scale;
    for (int64_t i = 0; i < count; i++) {
        if (x->dtype == VP_F32)
            ((float *)y->data)[i] = keep[i] ? ((const float *)x->data)[i] * scale_f : 0.0f;
        else
            vp_store(y->data, y->dtype, i, keep[i] ? vp_load(x->data, x->dtype, i) * scale : 0.0);
    }
    if (!mask) free(keep);
    return VP_OK;
}

VP_EW_KERNEL(vp_cpu_dropout) {
    vp_tensor *mask = n->n_outputs > 1 ? out[1] : NULL;
    double ratio = ew_dropout_ratio(n, in);
    if (ew_dropout_training(n, in) && ratio != 0) {
        if (!(ratio > 0 && ratio < 1))
            return vp_node_fail(err, VP_ERR_RUNTIME, n, "ratio %g is outside [0, 1)", ratio);
        if (vp_attr_int(n, "vplan_ranks", 1) > 1 || vp_attr_int(n, "vplan_step", 0) == 1)
            return ew_dropout_part(n, in[0], out[0], mask, ratio, vp_dropout_step(n, in, 3), err);
        ew_dropout_train(n, in[0], out[0], mask, ratio); /* ONNX's own: no step count */
        return VP_OK;
    }
    ew_copy(out[0]->data, in[0]->data, vp_tensor_nbytes(out[0]));
    if (mask) ew_fill_ones(mask);
    return VP_OK;
}
