/* The tests' verdicts: one line per check (PASS/FAIL and what), and the closing line
 * "N passed, N failed" that CI reads. */
#ifndef VP_TEST_CHECK_H
#define VP_TEST_CHECK_H

/* Records a verdict and prints "PASS ..." or "FAIL ...". */
void check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Records a verdict, printing only failures (for tests of thousands of cases). */
void check_quiet(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints the closing line; returns the exit code (1 when any failed, or none ran). */
int check_summary(void);

#endif
