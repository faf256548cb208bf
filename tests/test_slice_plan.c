/* runtime/cpu/k_tensor.c's vp_slice_resolve on the steps a file may carry: ONNX allows any
 * non-zero int64 step, and the kernel multiplies a step by a stride, so a step whose axis
 * yields at most one element must come back as +-1 (the fuzzer found INT64_MAX-sized steps
 * overflowing that product under UBSan), while every other step and each axis's first
 * index and count stay what ONNX's clamping rules give. */
#include <stdint.h>
#include <stdio.h>

#include "check.h"
#include "cpu_host.h"
#include "k_tensor.h"

static void one(const char *label, int64_t dim, int64_t start, int64_t end, int64_t step, int64_t want_start,
                int64_t want_step, int64_t want_count) {
    vp_slice_plan p;
    char why[256] = "";
    int64_t dims[1] = {dim}, axes[1] = {0};
    vp_status s = vp_slice_resolve(1, dims, 1, &start, &end, axes, &step, &p, why, sizeof why);
    int ok = !s && p.count[0] == want_count && (!want_count || (p.start[0] == want_start && p.step[0] == want_step));
    check(ok, "%s: start %lld step %lld count %lld (want %lld %lld %lld)%s%s", label, (long long)p.start[0],
          (long long)p.step[0], (long long)p.count[0], (long long)want_start, (long long)want_step,
          (long long)want_count, s ? ": " : "", why);
}

int main(void) {
    vp_cpu_host_install();
    one("huge positive step", 10, 3, INT64_MAX, INT64_MAX, 3, 1, 1);
    one("huge negative step", 10, -1, INT64_MIN, INT64_MIN, 9, -1, 1);
    one("step past the extent", 10, 0, 10, 1000, 0, 1, 1);
    one("ordinary step kept", 10, 1, 10, 3, 1, 3, 3);
    one("reverse step kept", 10, 9, -11, -2, 9, -2, 5);
    one("empty slice", 10, 5, 5, 7, 0, 0, 0);
    vp_slice_plan p;
    char why[256] = "";
    int64_t dims[1] = {4}, start = 0, end = 4, axis = 0, zero = 0;
    check(vp_slice_resolve(1, dims, 1, &start, &end, &axis, &zero, &p, why, sizeof why) == VP_ERR_INVALID,
          "a zero step is refused: %s", why);
    return check_summary();
}
