/* The CPU kernel table (runtime/cpu/cpu_kernels.c) and the op registry
 * (planner/ir/op_registry.h) agree: every registered op has a kernel, every row of the
 * table names a registered op once, and the lookup by op definition gives the row's
 * kernel, the first time and from the cache after. */
#include <string.h>

#include "check.h"
#include "cpu_host.h"
#include "cpu_kernels.h"
#include "ir/op_registry.h"

static int n_ops, n_rows;

static void op_has_kernel(const vp_op_def *op, void *ctx) {
    (void)ctx;
    n_ops++;
    const char *domain = op->domain ? op->domain : "";
    vp_cpu_fn k = vp_cpu_kernel_of(op);
    check_quiet(k != NULL, "%s.%s has a CPU kernel", domain, op->name);
    check_quiet(k == vp_cpu_kernel_find(op->domain, op->name), "%s.%s: the lookup by definition gives its row", domain,
                op->name);
    check_quiet(vp_cpu_kernel_of(op) == k, "%s.%s: the cached lookup gives the same kernel", domain, op->name);
}

typedef struct seen {
    const char *domain, *op_type;
} seen;

static void row_is_registered(const char *domain, const char *op_type, vp_cpu_fn kernel, void *ctx) {
    seen *rows = ctx;
    for (int i = 0; i < n_rows; i++)
        check_quiet(strcmp(rows[i].domain, domain) || strcmp(rows[i].op_type, op_type), "row %s.%s appears once",
                    domain, op_type);
    if (n_rows < 1024) rows[n_rows++] = (seen){domain, op_type};
    const vp_op_def *op = vp_op_find(domain, op_type);
    check_quiet(op != NULL, "row %s.%s names a registered op", domain, op_type);
    check_quiet(kernel != NULL, "row %s.%s has a kernel", domain, op_type);
}

int main(void) {
    vp_cpu_host_install();
    vp_op_foreach(op_has_kernel, NULL);
    static seen rows[1024];
    vp_cpu_kernels_foreach(row_is_registered, rows);
    check(n_ops > 0 && n_ops == n_rows, "%d registered ops, %d kernel rows", n_ops, n_rows);
    check(vp_cpu_kernel_of(NULL) == NULL, "no op, no kernel");
    return check_summary();
}
