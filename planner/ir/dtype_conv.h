/* The dtypes' conversions, part of the base every layer stands on: half precision to
 * and from float32 (round to nearest even, as IEEE and PyTorch do) and element access by
 * dtype.  In: raw element bytes and a vp_dtype.  Out: a float or double, or a stored
 * element.  Keeps true: every conversion is the same bits on every machine, so the
 * planner's folding, the CPU kernels, generated code and the tests agree. */
#ifndef VP_DTYPE_CONV_H
#define VP_DTYPE_CONV_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ir/ir.h"

static inline float vp_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0) {
        if (!man) bits = sign;
        else { /* subnormal: renormalise */
            exp = 127 - 15 + 1;
            while (!(man & 0x400)) { man <<= 1; exp--; }
            man &= 0x3ff;
            bits = sign | (exp << 23) | (man << 13);
        }
    } else if (exp == 31) bits = sign | 0x7f800000u | (man << 13);
    else bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Round to nearest even, as IEEE and PyTorch do. */
static inline uint16_t vp_f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    int32_t exp = (int32_t)((x >> 23) & 0xff) - 127 + 15;
    uint32_t man = x & 0x7fffff;
    if (((x >> 23) & 0xff) == 0xff) return (uint16_t)(sign | 0x7c00 | (man ? 0x200 : 0));
    if (exp >= 31) return (uint16_t)(sign | 0x7c00);
    if (exp <= 0) {
        if (exp < -10) return (uint16_t)sign;
        man |= 0x800000;
        uint32_t shift = (uint32_t)(14 - exp);
        uint32_t half = man >> shift, rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t h = sign | ((uint32_t)exp << 10) | (man >> 13);
    uint32_t rem = man & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++; /* may carry into the exponent: correct */
    return (uint16_t)h;
}

static inline float vp_bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline uint16_t vp_f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7f800000u) == 0x7f800000u && (x & 0x7fffff)) return (uint16_t)((x >> 16) | 0x40);
    x += 0x7fff + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

/* Element i of data as a double (every dtype we store). */
static inline double vp_load(const void *data, vp_dtype t, int64_t i) {
    switch (t) {
    case VP_F32: return ((const float *)data)[i];
    case VP_F64: return ((const double *)data)[i];
    case VP_F16: return vp_f16_to_f32(((const uint16_t *)data)[i]);
    case VP_BF16: return vp_bf16_to_f32(((const uint16_t *)data)[i]);
    case VP_I64: return (double)((const int64_t *)data)[i];
    case VP_I32: return ((const int32_t *)data)[i];
    case VP_I16: return ((const int16_t *)data)[i];
    case VP_I8: return ((const int8_t *)data)[i];
    case VP_U8: case VP_BOOL: return ((const uint8_t *)data)[i];
    case VP_U16: return ((const uint16_t *)data)[i];
    case VP_U32: return ((const uint32_t *)data)[i];
    case VP_U64: return (double)((const uint64_t *)data)[i];
    default: return 0;
    }
}

/* Integers are saturated so a float-to-int conversion never hits undefined behaviour. */
static inline int64_t vp_sat_i64(double v, double lo, double hi) {
    if (v != v) return 0;
    if (v <= lo) return (int64_t)lo;
    if (v >= hi) return (int64_t)hi;
    return (int64_t)v;
}

static inline void vp_store(void *data, vp_dtype t, int64_t i, double v) {
    switch (t) {
    case VP_F32: ((float *)data)[i] = (float)v; break;
    case VP_F64: ((double *)data)[i] = v; break;
    case VP_F16: ((uint16_t *)data)[i] = vp_f32_to_f16((float)v); break;
    case VP_BF16: ((uint16_t *)data)[i] = vp_f32_to_bf16((float)v); break;
    case VP_I64: ((int64_t *)data)[i] = v != v ? 0 : v >= 9.2233720368547758e18 ? INT64_MAX : v <= -9.2233720368547758e18 ? INT64_MIN : (int64_t)v; break;
    case VP_I32: ((int32_t *)data)[i] = (int32_t)vp_sat_i64(v, -2147483648.0, 2147483647.0); break;
    case VP_I16: ((int16_t *)data)[i] = (int16_t)vp_sat_i64(v, -32768.0, 32767.0); break;
    case VP_I8: ((int8_t *)data)[i] = (int8_t)vp_sat_i64(v, -128.0, 127.0); break;
    case VP_U8: ((uint8_t *)data)[i] = (uint8_t)vp_sat_i64(v, 0.0, 255.0); break;
    case VP_BOOL: ((uint8_t *)data)[i] = v != 0; break;
    case VP_U16: ((uint16_t *)data)[i] = (uint16_t)vp_sat_i64(v, 0.0, 65535.0); break;
    case VP_U32: ((uint32_t *)data)[i] = (uint32_t)vp_sat_i64(v, 0.0, 4294967295.0); break;
    case VP_U64: ((uint64_t *)data)[i] = v <= 0 || v != v ? 0 : v >= 1.8446744073709552e19 ? UINT64_MAX : (uint64_t)v; break;
    default: break;
    }
}

#endif
