/* Comparing low-precision values computed on two backends, in units of their dtype.
 *
 * In: two tensors of one dtype and shape, `got` from the backend under test and `want`
 * from the CPU reference, each computed by the same kernel from the same inputs.
 * Out: the worst element's error as a fraction of its bound (<= 1 passes).
 *
 * Where the two sides may differ, and so the bound: every kernel here computes in
 * float32 and rounds to nearest even once, on store (DESIGN.md, mixed precision).  Two
 * float32 results that differ by d (sums taken in another order: another vector width,
 * another blocking in OpenBLAS or oneDNN, another thread split) round to values at most
 * d + 1 ulp apart, the ulp taken at the larger of the two.  So an element may be off by
 *     ulps * ulp_dtype(max(|got|, |want|)) + acc * scale
 * with ulps = 1 and acc the float32 reassociation allowance, relative to the tensor's
 * largest magnitude (cancellation makes d relative to the terms, not to the result).
 * A kernel off by two ulps on an element near the tensor's scale exceeds it: that is
 * what lowp_mutation_caught proves for every value compared. */
#ifndef VP_TEST_LOWP_COMPARE_H
#define VP_TEST_LOWP_COMPARE_H
#include <stdint.h>

#include "ir/ir.h"

/* float32's reassociation allowance for one kernel: 2^-16 of the tensor's scale, 256
 * float32 ulps there (sums of up to a few thousand terms in another order; the most seen
 * on the bundled models' steps, node by node, is listed in test_cuda_ops' output). */
#define LOWP_ACC_F32 (1.0 / 65536)

/* The spacing of dtype t's values at magnitude m: 2^(e - p + 1) for m in [2^e, 2^(e+1))
 * with p the significant bits (bfloat16 8, float16 11, float32 24, float64 53), and the
 * subnormal spacing below the smallest normal. */
double lowp_ulp(vp_dtype t, double m);

/* Worst |got - want| over its bound (above), and where; -1 on a dtype or shape
 * mismatch.  NaN must meet NaN, and an infinity the same infinity. */
double lowp_compare(const vp_tensor *got, const vp_tensor *want, double ulps, double acc, int64_t *at);

/* Whether lowp_compare would fail got with its element of largest |want| moved two ulps
 * of the dtype away from want: 1 caught, 0 not, -1 nothing to mutate (all zero or not
 * finite). */
int lowp_mutation_caught(const vp_tensor *got, const vp_tensor *want, double ulps, double acc);

#endif
