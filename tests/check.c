#include "check.h"

#include <stdarg.h>
#include <stdio.h>

static int passes, failures;

static void report(int ok, int verbose, const char *fmt, va_list ap) {
    ok ? passes++ : failures++;
    if (ok && !verbose) return;
    printf("%s ", ok ? "PASS" : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
}

void check(int ok, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    report(ok, 1, fmt, ap);
    va_end(ap);
}

void check_quiet(int ok, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    report(ok, 0, fmt, ap);
    va_end(ap);
}

int check_summary(void) {
    printf("%d passed, %d failed\n", passes, failures);
    return failures || !passes ? 1 : 0;
}
