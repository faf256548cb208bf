/* Private to the elementwise kernels (k_elementwise*.c): the row types every kernel
 * table holds, and the macros that stamp out one row loop per (op, dtype).
 *
 * A "row" is the innermost loop of an elementwise op over n elements.  Each op keeps a
 * table of rows indexed by dtype, so the dtype is switched on once per call (or once per
 * broadcast row), never per element.  float16 and bfloat16 rows load into float, compute
 * there and round back; integer arithmetic goes through uint64_t so that overflow wraps
 * (as numpy and ONNX Runtime do) instead of being undefined behaviour. */
#ifndef VP_K_ELEMENTWISE_ROWS_H
#define VP_K_ELEMENTWISE_ROWS_H

#include <stdint.h>
#include <string.h>
#include <tgmath.h> /* exp(x) is expf for a float x: one expression serves float and double */

#include "cpu_util.h"
#include "ir/ir.h"

/* Attribute values a unary op reads, copied out of the node once per call. */
typedef struct ew_params {
    float alpha, beta, gamma;
    int flags;
} ew_params;

/* Room for one element of any stored dtype, typed so every access is well defined. */
typedef union ew_scalar {
    float f32;
    double f64;
    uint16_t f16;
    int8_t i8;
    int16_t i16;
    int32_t i32;
    int64_t i64;
    uint8_t u8;
    uint32_t u32;
    uint64_t u64;
} ew_scalar;

/* y[i] = f(x[i]) for i < n; y may be x (in place). */
typedef void (*ew_unary_row)(const void *x, void *y, int64_t n, const ew_params *p);
/* o[i] = f(a[i * sa], b[i * sb]) for i < n, with sa and sb each 0 (broadcast) or 1. */
typedef void (*ew_binary_row)(const void *a, int64_t sa, const void *b, int64_t sb, void *o, int64_t n);

typedef struct ew_unary_table {
    ew_unary_row row[VP_DTYPE_COUNT_];
} ew_unary_table;

typedef struct ew_binary_table {
    ew_binary_row row[VP_DTYPE_COUNT_];
} ew_binary_table;

/* Copies a tensor's bytes; nothing to do in place or when empty (data may be NULL). */
static inline void ew_copy(void *dst, const void *src, size_t bytes) {
    if (bytes && dst != src) memmove(dst, src, bytes);
}

/* Conversions between a storage type and the type a row computes in. */
#define EW_SAME(v) (v)
#define EW_BOOL(v) ((uint8_t)((v) != 0))

/* Scalar float functions: one expression, defined for float (name_f) and double (name_d).
 * Inside expr, C is the compute type, so constants are written (C)0.5 and keep double
 * precision in the double version. */
#define EW_FLOAT_UNARY_FN(name, expr)                                                       \
    static inline float name##_f(float x, const ew_params *p) {                             \
        typedef float C;                                                                    \
        (void)(C)0;                                                                         \
        (void)p;                                                                            \
        return (C)(expr);                                                                   \
    }                                                                                       \
    static inline double name##_d(double x, const ew_params *p) {                           \
        typedef double C;                                                                   \
        (void)(C)0;                                                                         \
        (void)p;                                                                            \
        return (C)(expr);                                                                   \
    }

#define EW_FLOAT_BINARY_FN(name, expr)                                                      \
    static inline float name##_f(float x, float y) {                                        \
        typedef float C;                                                                    \
        (void)(C)0;                                                                         \
        return (C)(expr);                                                                   \
    }                                                                                       \
    static inline double name##_d(double x, double y) {                                     \
        typedef double C;                                                                   \
        (void)(C)0;                                                                         \
        return (C)(expr);                                                                   \
    }

/* o[i] = expr for i < n, with expr an expression in i.  Whole blocks are computed into a
 * local array and then copied out: the compiler vectorises a block without having to
 * prove that o does not overlap the inputs (in place, it is the same array). */
enum { EW_BLOCK = 16 };
#define EW_FOR_BLOCKS(TO, o, n, expr)                                                       \
    do {                                                                                    \
        int64_t i0_ = 0;                                                                    \
        for (; i0_ + EW_BLOCK <= (n); i0_ += EW_BLOCK) {                                    \
            TO block_[EW_BLOCK];                                                            \
            for (int j_ = 0; j_ < EW_BLOCK; j_++) {                                         \
                const int64_t i = i0_ + j_;                                                 \
                block_[j_] = (expr);                                                        \
            }                                                                               \
            memcpy(&(o)[i0_], block_, sizeof block_);                                       \
        }                                                                                   \
        for (int64_t i = i0_; i < (n); i++) (o)[i] = (expr);                                \
    } while (0)

/* A unary row.  The parameters are copied to a local so the compiler knows stores to y
 * cannot change them and keeps them in registers. */
#define EW_UNARY_ROW(fname, TI, TO, C, LOAD, STORE, F)                                      \
    static void fname(const void *px, void *py, int64_t n, const ew_params *p) {           \
        const TI *x = px;                                                                   \
        TO *y = py;                                                                         \
        const ew_params prm = *p;                                                           \
        (void)prm;                                                                          \
        EW_FOR_BLOCKS(TO, y, n, STORE(F((C)LOAD(x[i]), &prm)));                             \
    }

/* A binary row.  The stride patterns that occur (both contiguous, one operand a broadcast
 * scalar) each get a loop with constant strides. */
#define EW_BINARY_ROW(fname, TI, TO, C, LOAD, STORE, F)                                     \
    static void fname(const void *pa, int64_t sa, const void *pb, int64_t sb, void *po,     \
                      int64_t n) {                                                          \
        const TI *a = pa, *b = pb;                                                          \
        TO *o = po;                                                                         \
        if (sa && sb) {                                                                     \
            EW_FOR_BLOCKS(TO, o, n, STORE(F((C)LOAD(a[i]), (C)LOAD(b[i]))));                \
        } else if (sa) {                                                                    \
            const C y = (C)LOAD(b[0]);                                                      \
            EW_FOR_BLOCKS(TO, o, n, STORE(F((C)LOAD(a[i]), y)));                            \
        } else if (sb) {                                                                    \
            const C x = (C)LOAD(a[0]);                                                      \
            EW_FOR_BLOCKS(TO, o, n, STORE(F(x, (C)LOAD(b[i]))));                            \
        } else {                                                                            \
            const TO v = STORE(F((C)LOAD(a[0]), (C)LOAD(b[0])));                            \
            for (int64_t i = 0; i < n; i++) o[i] = v;                                       \
        }                                                                                   \
    }

/* The four float rows of an op whose scalar functions are name_f and name_d; ROW is
 * EW_UNARY_ROW or EW_BINARY_ROW. */
#define EW_FLOAT_ROWS(ROW, name)                                                            \
    ROW(name##_f32, float, float, float, EW_SAME, EW_SAME, name##_f)                        \
    ROW(name##_f64, double, double, double, EW_SAME, EW_SAME, name##_d)                     \
    ROW(name##_f16, uint16_t, uint16_t, float, vp_f16_to_f32, vp_f32_to_f16, name##_f)      \
    ROW(name##_bf16, uint16_t, uint16_t, float, vp_bf16_to_f32, vp_f32_to_bf16, name##_f)

/* The same with a bool (uint8_t) output: predicates and comparisons. */
#define EW_FLOAT_BOOL_ROWS(ROW, name)                                                       \
    ROW(name##_f32, float, uint8_t, float, EW_SAME, EW_BOOL, name##_f)                      \
    ROW(name##_f64, double, uint8_t, double, EW_SAME, EW_BOOL, name##_d)                    \
    ROW(name##_f16, uint16_t, uint8_t, float, vp_f16_to_f32, EW_BOOL, name##_f)             \
    ROW(name##_bf16, uint16_t, uint8_t, float, vp_bf16_to_f32, EW_BOOL, name##_f)

/* Integer rows from one type-generic macro F(x, y) or F(x, p). */
#define EW_SINT_ROWS(ROW, name, F)                                                          \
    ROW(name##_i8, int8_t, int8_t, int8_t, EW_SAME, EW_SAME, F)                             \
    ROW(name##_i16, int16_t, int16_t, int16_t, EW_SAME, EW_SAME, F)                         \
    ROW(name##_i32, int32_t, int32_t, int32_t, EW_SAME, EW_SAME, F)                         \
    ROW(name##_i64, int64_t, int64_t, int64_t, EW_SAME, EW_SAME, F)

#define EW_UINT_ROWS(ROW, name, F)                                                          \
    ROW(name##_u8, uint8_t, uint8_t, uint8_t, EW_SAME, EW_SAME, F)                          \
    ROW(name##_u16, uint16_t, uint16_t, uint16_t, EW_SAME, EW_SAME, F)                      \
    ROW(name##_u32, uint32_t, uint32_t, uint32_t, EW_SAME, EW_SAME, F)                      \
    ROW(name##_u64, uint64_t, uint64_t, uint64_t, EW_SAME, EW_SAME, F)

#define EW_SINT_BOOL_ROWS(ROW, name, F)                                                     \
    ROW(name##_i8, int8_t, uint8_t, int8_t, EW_SAME, EW_BOOL, F)                            \
    ROW(name##_i16, int16_t, uint8_t, int16_t, EW_SAME, EW_BOOL, F)                         \
    ROW(name##_i32, int32_t, uint8_t, int32_t, EW_SAME, EW_BOOL, F)                         \
    ROW(name##_i64, int64_t, uint8_t, int64_t, EW_SAME, EW_BOOL, F)

#define EW_UINT_BOOL_ROWS(ROW, name, F)                                                     \
    ROW(name##_u8, uint8_t, uint8_t, uint8_t, EW_SAME, EW_BOOL, F)                          \
    ROW(name##_u16, uint16_t, uint8_t, uint16_t, EW_SAME, EW_BOOL, F)                       \
    ROW(name##_u32, uint32_t, uint8_t, uint32_t, EW_SAME, EW_BOOL, F)                       \
    ROW(name##_u64, uint64_t, uint8_t, uint64_t, EW_SAME, EW_BOOL, F)

/* Designated initialisers that put an op's rows in its table. */
#define EW_FLOAT_SLOTS(name) \
    [VP_F32] = name##_f32, [VP_F64] = name##_f64, [VP_F16] = name##_f16, [VP_BF16] = name##_bf16
#define EW_SINT_SLOTS(name) \
    [VP_I8] = name##_i8, [VP_I16] = name##_i16, [VP_I32] = name##_i32, [VP_I64] = name##_i64
#define EW_UINT_SLOTS(name) \
    [VP_U8] = name##_u8, [VP_U16] = name##_u16, [VP_U32] = name##_u32, [VP_U64] = name##_u64

/* Integer arithmetic that wraps: computed in uint64_t, narrowed when stored. */
#define EW_WRAP(v) ((uint64_t)(v))

#endif
