/* Pattern-matching queries the fusion passes share: see pattern.h. */
#include "train/pattern.h"

#include "ir/dtype_conv.h"

int vp_pattern_sole_reader(const vp_graph *g, int v) {
    const vp_value *val = &g->values[v];
    return val->n_consumers == 1 && !(val->flags & VP_VAL_OUTPUT) ? val->consumers[0] : -1;
}

int vp_pattern_fixed_data(const vp_value *v) {
    return v->data && (v->flags & (VP_VAL_CONST | VP_VAL_INITIALIZER)) && !(v->flags & (VP_VAL_PARAM | VP_VAL_INPUT));
}

int vp_pattern_fixed_scalar(const vp_graph *g, int v, double *out) {
    if (v < 0) return 0;
    const vp_value *x = &g->values[v];
    if (!vp_pattern_fixed_data(x) || !vp_dtype_is_float(x->dtype) || vp_value_numel(x) != 1) return 0;
    if (out) *out = vp_load(x->data, x->dtype, 0);
    return 1;
}
