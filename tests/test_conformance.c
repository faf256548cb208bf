/* ONNX backend conformance on the CPU reference: every node test whose ops we support
 * must match every expected output (float32 within 1e-5 relative or absolute, integers
 * exactly).  Tests we cannot handle must be refused as unsupported, not fail.
 *
 * usage: test_conformance [--shapes] [--verbose] [--filter SUBSTR] [SUITE...]
 * SUITE defaults to node, simple, pytorch-converted and pytorch-operator. */
#include <stdio.h>
#include <string.h>

#include "conformance.h"
#include "cpu_host.h"

int main(int argc, char **argv) {
    vp_cpu_host_install();
    conf_opts o = {0, 0, 1e-5};
    const char *filter = NULL;
    const char *suites[16];
    int n_suites = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--shapes")) o.shapes_only = 1;
        else if (!strcmp(argv[i], "--verbose")) o.verbose = 1;
        else if (!strcmp(argv[i], "--filter") && i + 1 < argc) filter = argv[++i];
        else if (n_suites < 16) suites[n_suites++] = argv[i];
    }
    if (!n_suites) {
        static const char *dflt[] = {"node", "simple", "pytorch-converted", "pytorch-operator"};
        for (int i = 0; i < 4; i++) suites[n_suites++] = dflt[i];
    }
    int tp = 0, tf = 0, tu = 0;
    for (int i = 0; i < n_suites; i++) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/%s", VP_ONNX_TESTS, suites[i]);
        int p, f, u;
        conf_run_suite(dir, filter, &o, &p, &f, &u);
        printf("%s %s: %d passed, %d failed, %d unsupported\n", o.shapes_only ? "shapes" : "values", suites[i], p, f, u);
        tp += p;
        tf += f;
        tu += u;
    }
    printf("%d passed, %d failed, %d skipped\n", tp, tf, tu);
    return tf ? 1 : 0;
}
