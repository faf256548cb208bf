/* onnx-vplan compare: two models' initializers side by side (the weights one training
 * run left against another's: tensor-parallel against one rank, a plan's run against
 * train's).
 *
 * In: two ONNX models.  Out: for the float initializers they share by name, the largest
 * absolute difference and the largest relative one (a tensor's largest absolute
 * difference over its largest magnitude in B), each with the tensor it is in; exit 1
 * when a tensor is over --tolerance both ways (a weight whose gradient is zero in exact
 * arithmetic, as attention's key bias, differs by rounding alone: far off relatively,
 * close absolutely), or when a name is in one model only or a shape or dtype differs
 * (named). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "ir/dtype_conv.h"

typedef struct worst {
    double abs, rel, both; /* both: the smaller of a tensor's two, the largest over tensors */
    const char *abs_at, *rel_at, *both_at;
    int compared;
    int64_t elems;
} worst;

/* a and b: the same dtype and shape. */
static void compare_tensor(const vp_value *a, const vp_value *b, worst *w) {
    double diff = 0, scale = 0;
    int64_t n = vp_value_numel(a);
    for (int64_t i = 0; i < n; i++) {
        double x = vp_load(a->data, a->dtype, i), y = vp_load(b->data, b->dtype, i);
        diff = fmax(diff, fabs(x - y));
        scale = fmax(scale, fabs(y));
    }
    double rel = !diff ? 0 : scale ? diff / scale : INFINITY;
    if (diff > w->abs || !w->abs_at) w->abs = diff, w->abs_at = a->name;
    if (rel > w->rel || !w->rel_at) w->rel = rel, w->rel_at = a->name;
    if (fmin(diff, rel) > w->both || !w->both_at) w->both = fmin(diff, rel), w->both_at = a->name;
    w->compared++;
    w->elems += n;
}

static int same_shape(const vp_value *a, const vp_value *b) {
    if (a->dtype != b->dtype || a->rank != b->rank) return 0;
    for (int d = 0; d < a->rank; d++)
        if (a->dims[d] != b->dims[d]) return 0;
    return 1;
}

static int is_weight(const vp_value *v) { return (v->flags & VP_VAL_INITIALIZER) && v->data && vp_dtype_is_float(v->dtype); }

/* The float initializers of `of` that `in` has not under that name; the first named. */
static int missing(const vp_graph *of, const vp_graph *in, const char **first) {
    int n = 0;
    for (int v = 0; v < of->n_values; v++) {
        if (!is_weight(&of->values[v])) continue;
        int u = vp_graph_find_value(in, of->values[v].name);
        if (u >= 0 && is_weight(&in->values[u])) continue;
        if (!n++) *first = of->values[v].name;
    }
    return n;
}

static int run_compare(int argc, char **argv) {
    const char *pa = NULL, *pb = NULL;
    double tolerance = INFINITY;
    const cli_opt table[] = {
        {"A", CLI_POS, &pa, NULL, NULL},
        {"B", CLI_POS, &pb, NULL, NULL},
        {"--tolerance", CLI_NUM, &tolerance, "T",
         "exit 1 when a tensor differs by more than T both absolutely and\n"
         "relatively (default: report only)"},
        {"", CLI_TABLE, cli_load_table, NULL, NULL},
        {0}};
    int rc = cli_parse(&cli_cmd_compare, table, argc, argv);
    if (rc != CLI_CONTINUE) return rc;
    vp_error err;
    cli_pairs none = {0};
    vp_graph *a = NULL, *b = NULL;
    vp_status s = cli_load(pa, &none, &a, &err);
    if (!s) s = cli_load(pb, &none, &b, &err);
    worst w = {0};
    for (int v = 0; !s && v < a->n_values; v++) {
        const vp_value *x = &a->values[v];
        int u = is_weight(x) ? vp_graph_find_value(b, x->name) : -1;
        if (u < 0 || !is_weight(&b->values[u])) continue;
        if (!same_shape(x, &b->values[u]))
            s = vp_fail(&err, VP_ERR_RUNTIME, "initializer '%s': %s in %s, another shape or dtype in %s", x->name,
                        vp_dtype_name(x->dtype), pa, pb);
        else compare_tensor(x, &b->values[u], &w);
    }
    const char *first = NULL;
    int only_a = s ? 0 : missing(a, b, &first), only_b = 0;
    if (!s && only_a)
        s = vp_fail(&err, VP_ERR_RUNTIME, "%d float initializer%s of %s not in %s (first: '%s')", only_a, only_a == 1 ? "" : "s",
                    pa, pb, first);
    if (!s && (only_b = missing(b, a, &first)))
        s = vp_fail(&err, VP_ERR_RUNTIME, "%d float initializer%s of %s not in %s (first: '%s')", only_b, only_b == 1 ? "" : "s",
                    pb, pa, first);
    if (!s)
        printf("compared %d float initializers (%lld elements): largest absolute difference %.3g ('%s'), largest relative "
               "%.3g ('%s', to its largest magnitude); every tensor within %.3g absolutely or relatively\n",
               w.compared, (long long)w.elems, w.abs, w.abs_at ? w.abs_at : "-", w.rel, w.rel_at ? w.rel_at : "-", w.both);
    if (!s && w.both > tolerance)
        s = vp_fail(&err, VP_ERR_RUNTIME, "'%s' differs by more than --tolerance %g both absolutely and relatively", w.both_at,
                    tolerance);
    vp_graph_free(a);
    vp_graph_free(b);
    return cli_report(s, &err);
}

const cli_cmd cli_cmd_compare = {
    "compare", run_compare, "A B [--tolerance T]", "compare two models' weights (their float initializers by name)",
    "Compares the float initializers two ONNX models share by name (the trained models two\n"
    "runs wrote: run --save, train --save, export): the largest absolute difference and\n"
    "the largest relative one (a tensor's largest absolute difference over its largest\n"
    "magnitude in B), each with the tensor it is in, and how close every tensor is one way\n"
    "or the other (a weight whose gradient is zero in exact arithmetic, as attention's key\n"
    "bias, differs by rounding alone: far off relatively, close absolutely).  A name in one\n"
    "model only, a shape or dtype that differs, or a tensor over --tolerance both ways exits\n"
    "1 naming it.\n",
    NULL};
