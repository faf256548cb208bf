/* QuantizeLinear and DequantizeLinear on the CPU: per-tensor and per-axis, between
 * float32 / float16 / bfloat16 and 8- or 16-bit integers (and int32 for dequantising).
 *
 *   quantize:   y = saturate(round_half_even(x / scale) + zero_point)
 *   dequantize: y = (x - zero_point) * scale
 *
 * The division and the multiplication are done in the precision ONNX names (the scale's
 * type, or the precision / output_dtype attribute), not in double: a value that is a
 * tie in float32 must round as it does in float32.  A float16 or bfloat16 precision is
 * emulated exactly by rounding the float32 operands and result, since float32 holds the
 * exact product and a correctly rounded quotient of two such values. */
#include <math.h>

#include "cpu_util.h"
#include "k_reduce.h"

enum { QUANT_CHUNK = 256 };

/* x as [outer, channels, inner]: channel c uses scale[c] and zero_point[c]. */
typedef struct quant_layout {
    int64_t outer, channels, inner;
} quant_layout;

static void quant_layout_init(const vp_node *n, const vp_tensor *x, const vp_tensor *scale, quant_layout *q) {
    if (vp_tensor_numel(scale) <= 1) { /* per tensor */
        *q = (quant_layout){1, 1, vp_tensor_numel(x)};
        return;
    }
    int axis = (int)vp_attr_int(n, "axis", 1);
    if (axis < 0) axis += x->rank;
    vp_red_split(x->rank, x->dims, axis, &q->outer, &q->channels, &q->inner);
}

static float round_to(vp_dtype precision, float v) {
    if (precision == VP_F16) return vp_f16_to_f32(vp_f32_to_f16(v));
    if (precision == VP_BF16) return vp_bf16_to_f32(vp_f32_to_bf16(v));
    return v;
}

static void quant_range(vp_dtype t, double *lo, double *hi) {
    switch (t) {
    case VP_I8: *lo = -128, *hi = 127; break;
    case VP_U16: *lo = 0, *hi = 65535; break;
    case VP_I16: *lo = -32768, *hi = 32767; break;
    default: *lo = 0, *hi = 255; break;
    }
}

/* The precision of the division: the precision attribute, else the scale's type. */
static vp_dtype quantize_precision(const vp_node *n, const vp_tensor *scale) {
    int64_t p = vp_attr_int(n, "precision", 0);
    return p ? (vp_dtype)p : scale->dtype;
}

/* One chunk of one channel: x[0..m) (as loaded) into q[0..m). */
static void quantize_chunk(const double *x, int64_t m, float scale, double zero_point, vp_dtype precision,
                           double lo, double hi, int64_t *q) {
    float quotient[QUANT_CHUNK];
    if (precision == VP_F32)
        for (int64_t i = 0; i < m; i++) quotient[i] = (float)x[i] / scale;
    else
        for (int64_t i = 0; i < m; i++) quotient[i] = round_to(precision, round_to(precision, (float)x[i]) / scale);
    for (int64_t i = 0; i < m; i++) {
        double v = (double)nearbyintf(quotient[i]) + zero_point; /* nearbyint: half to even */
        if (v != v) v = zero_point; /* NaN quantises to the real value 0 */
        q[i] = (int64_t)(v < lo ? lo : v > hi ? hi : v);
    }
}

vp_status vp_cpu_quantize_linear(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                 vp_error *err) {
    (void)err;
    const vp_tensor *x = in[0], *scale = in[1], *zp = n->n_inputs > 2 ? in[2] : NULL;
    vp_tensor *y = out[0];
    if (!y || !vp_tensor_numel(x)) return VP_OK; /* and scale may be empty too */
    quant_layout L;
    quant_layout_init(n, x, scale, &L);
    vp_dtype precision = quantize_precision(n, scale);
    double lo, hi, buf[QUANT_CHUNK];
    int64_t q[QUANT_CHUNK];
    quant_range(y->dtype, &lo, &hi);
    for (int64_t o = 0; o < L.outer; o++) {
        for (int64_t c = 0; c < L.channels; c++) {
            float s = round_to(precision, (float)vp_load(scale->data, scale->dtype, c));
            double z = zp ? vp_load(zp->data, zp->dtype, c) : 0;
            for (int64_t i = 0; i < L.inner; i += QUANT_CHUNK) {
                int64_t m = L.inner - i < QUANT_CHUNK ? L.inner - i : QUANT_CHUNK;
                int64_t off = (o * L.channels + c) * L.inner + i;
                vp_red_load_f64(x->data, x->dtype, off, 1, m, buf);
                quantize_chunk(buf, m, s, z, precision, lo, hi, q);
                vp_red_store_i64(y->data, y->dtype, off, 1, m, q);
            }
        }
    }
    return VP_OK;
}

/* One chunk of one channel: x[0..m) into y[0..m), multiplied in the output's precision. */
static void dequantize_chunk(const int64_t *x, int64_t m, float scale, int64_t zero_point, vp_dtype precision,
                             double *y) {
    for (int64_t i = 0; i < m; i++) {
        float centred = round_to(precision, (float)(x[i] - zero_point));
        y[i] = centred * scale; /* exact in float32 for 16-bit operands; the store rounds */
    }
}

vp_status vp_cpu_dequantize_linear(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                   vp_error *err) {
    (void)err;
    const vp_tensor *x = in[0], *scale = in[1], *zp = n->n_inputs > 2 ? in[2] : NULL;
    vp_tensor *y = out[0];
    if (!y || !vp_tensor_numel(x)) return VP_OK; /* and scale may be empty too */
    quant_layout L;
    quant_layout_init(n, x, scale, &L);
    int64_t xs[QUANT_CHUNK];
    double buf[QUANT_CHUNK];
    for (int64_t o = 0; o < L.outer; o++) {
        for (int64_t c = 0; c < L.channels; c++) {
            float s = round_to(y->dtype, (float)vp_load(scale->data, scale->dtype, c));
            int64_t z = 0;
            if (zp) vp_red_load_i64(zp->data, zp->dtype, c, 1, 1, &z);
            for (int64_t i = 0; i < L.inner; i += QUANT_CHUNK) {
                int64_t m = L.inner - i < QUANT_CHUNK ? L.inner - i : QUANT_CHUNK;
                int64_t off = (o * L.channels + c) * L.inner + i;
                vp_red_load_i64(x->data, x->dtype, off, 1, m, xs);
                dequantize_chunk(xs, m, s, z, y->dtype, buf);
                vp_red_store_f64(y->data, y->dtype, off, 1, m, buf);
            }
        }
    }
    return VP_OK;
}

/* The range [min(x, 0), max(x, 0)] mapped onto [0, 255], as ONNX's reference computes
 * it in float32; an all-zero x gets scale 1 rather than 0. */
static void dynamic_quant_params(const vp_tensor *x, float *scale, float *zero_point) {
    double buf[QUANT_CHUNK];
    float lo = 0, hi = 0;
    int64_t count = vp_tensor_numel(x);
    for (int64_t i = 0; i < count; i += QUANT_CHUNK) {
        int64_t m = count - i < QUANT_CHUNK ? count - i : QUANT_CHUNK;
        vp_red_load_f64(x->data, x->dtype, i, 1, m, buf);
        for (int64_t j = 0; j < m; j++) {
            float v = (float)buf[j];
            if (v < lo) lo = v;
            if (v > hi) hi = v;
        }
    }
    *scale = hi == lo ? 1.0f : (hi - lo) / 255.0f;
    float z = 0.0f - lo / *scale;
    *zero_point = nearbyintf(z < 0 ? 0 : z > 255 ? 255 : z);
}

vp_status vp_cpu_dynamic_quantize_linear(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                         vp_error *err) {
    (void)err;
    const vp_tensor *x = in[0];
    float scale, zero_point;
    dynamic_quant_params(x, &scale, &zero_point);
    double buf[QUANT_CHUNK];
    int64_t q[QUANT_CHUNK], count = vp_tensor_numel(x), zp_int = (int64_t)zero_point;
    for (int64_t i = 0; out[0] && i < count; i += QUANT_CHUNK) {
        int64_t m = count - i < QUANT_CHUNK ? count - i : QUANT_CHUNK;
        vp_red_load_f64(x->data, x->dtype, i, 1, m, buf);
        quantize_chunk(buf, m, scale, zero_point, VP_F32, 0, 255, q);
        vp_red_store_i64(out[0]->data, out[0]->dtype, i, 1, m, q);
    }
    if (n->n_outputs > 1 && out[1]) *(float *)out[1]->data = scale;
    if (n->n_outputs > 2 && out[2]) vp_red_store_i64(out[2]->data, out[2]->dtype, 0, 1, 1, &zp_int);
    return VP_OK;
}
