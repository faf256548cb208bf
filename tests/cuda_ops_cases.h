/* The CUDA-against-CPU test's one-node cases (test_cuda_ops.c runs them): one table,
 * apart from the harness, as the gradient checks keep theirs. */
#ifndef VP_CUDA_OPS_CASES_H
#define VP_CUDA_OPS_CASES_H

/* ---- the random one-node cases ----
 *
 * inputs: "f32:2,3,4" uniform in [-1, 1), "pos:2,3" in [0.5, 1.5), "f64:..",
 *         "i64:4,16:64" random integers in [0, 64) of shape [4, 16], "bool:2,3",
 *         "c64:0,2" a constant int64 vector (shape [count]) with those values,
 *         "c64s:5" a constant int64 scalar, "-" an omitted input;
 *         "zero:3" a float32 zero tensor (optimizer state), "step:1" the scalar 0;
 *         "f16:2,3" and "bf16:2,3" uniform in [-1, 1) rounded, "bf16pos:2,3" in [0.5, 1.5);
 *         "fnan:4" / "f16nan:4" with a NaN in the middle, "finf:4" with -inf last;
 *         "cbool:1" a constant bool scalar.
 * attrs:  "axis=i:1;perm=is:0,2,1;epsilon=f:1e-5;reduction=s:sum". */
typedef struct op_case {
    const char *name, *op, *domain;
    int opset;
    const char *inputs[8];
    int n_out;
    const char *attrs;
} op_case;

extern const op_case vp_cuda_op_cases[];
extern const int vp_cuda_op_n_cases;

/* ---- the coverage check (cuda_ops_coverage.c) ---- */

#include <stdio.h>

typedef struct cuda_op_seen {
    char op[96];     /* "domain.op_type", or the op type in ai.onnx */
    char first[200]; /* the first training step that has it */
} cuda_op_seen;

/* Every op of the training steps listed in cuda_ops_coverage.c; returns how many steps
 * were built, notes on log what was not. */
int vp_cuda_coverage_collect(cuda_op_seen *ops, int max_ops, int *n_ops, FILE *log);

/* ---- the models group (cuda_ops_models.c) ---- */

/* One result line, counted: result > 0 passed, 0 failed, < 0 skipped. */
void cuda_ops_report(const char *group, const char *name, int result, const char *detail);

#ifdef VP_HAVE_CUDA
#include "backend.h"
#include "precision/precision.h"
/* One step of model `name` with the fixture's optimizer on both backends: every value. */
void cuda_ops_check_model_values(const char *name, const char *fixture, vp_precision prec, vp_backend *cpu,
                                 vp_backend *cuda);
/* The fixture's loss curve on cuda against torch's. */
void cuda_ops_check_model_curve(const char *name, const char *fixture, vp_backend *cuda);
#endif

#endif
