/* Runs ONNX backend test directories (model.onnx + test_data_set_N/{input,output}_K.pb)
 * through the loader, shape inference and the naive CPU executor. */
#ifndef VP_TEST_CONFORMANCE_H
#define VP_TEST_CONFORMANCE_H

#include <stddef.h>

typedef enum { CASE_PASS, CASE_FAIL, CASE_UNSUPPORTED } case_result;

typedef struct conf_opts {
    int shapes_only;  /* compare dtypes and shapes, do not execute */
    int verbose;
    double tol;       /* float32 tolerance, relative or absolute */
} conf_opts;

/* Runs one test directory; fills why (for failures and unsupported). */
case_result conf_run_case(const char *dir, const conf_opts *o_in, char *why, size_t why_len);

/* Runs every test_* directory under suite whose name contains filter (NULL: all).
 * Prints failures and a summary; returns the number of failures. */
int conf_run_suite(const char *suite, const char *filter, const conf_opts *o, int *passed, int *failed,
                   int *unsupported);

#endif
