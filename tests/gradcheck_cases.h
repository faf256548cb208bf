/* The gradient check's case tables, one per op family (gradcheck_cases_*.c), each
 * building and running its cases through the harness.  test_gradcheck runs them in the
 * order below; a case's place in that order is its seed, so adding one redraws the
 * values of all that follow it. */
#ifndef VP_TEST_GRADCHECK_CASES_H
#define VP_TEST_GRADCHECK_CASES_H

#include <stdint.h>

#include "gradcheck_harness.h"

void gc_cases_elementwise(void); /* arithmetic, activations, Clip, Where, Max/Min, Dropout */
void gc_cases_tensor(void);      /* reshapes, Concat/Split, Slice, Gather, TopK, CumSum, Pad */
void gc_cases_linalg(void);      /* MatMul, Gemm, Conv, ConvTranspose, pooling */
void gc_cases_reduce(void);      /* normalisations, Reduce*, Softmax, losses */
void gc_cases_resample(void);    /* Resize, Upsample, ScatterND, GatherND */
void gc_cases_recurrent(void);   /* LSTM, GRU */

/* One case of a two-parameter op, labelled op[shape a]x[shape b] (opset 13): the
 * binary arithmetic ops, and MatMul. */
void case_binary(const char *op, gen ga, int ra, const int64_t *da, gen gb, int rb, const int64_t *db);

#endif
