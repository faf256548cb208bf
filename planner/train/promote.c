/* Constant weights made parameters: see promote.h. */
#include "train/promote.h"

#include <stdlib.h>
#include <string.h>

/* Whether input k of node n is a weight the optimizer would train (or a running
 * statistic of a BatchNormalization). */
static int weight_input(const vp_node *n, int k) {
    if (n->domain[0]) return 0;
    if (!strcmp(n->op_type, "Conv") || !strcmp(n->op_type, "Gemm")) return k == 1 || k == 2;
    if (!strcmp(n->op_type, "MatMul")) return k == 1;
    if (!strcmp(n->op_type, "BatchNormalization")) return k >= 1 && k <= 4;
    return 0;
}

static int feeds_weight(const vp_graph *g, int v) {
    const vp_value *val = &g->values[v];
    for (int c = 0; c < val->n_consumers; c++) {
        const vp_node *n = &g->nodes[val->consumers[c]];
        for (int k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] == v && weight_input(n, k)) return 1;
    }
    return 0;
}

/* Fills data (numel elements of dtype) with the node's value attribute (ONNX's default
 * is a float32 zero). */
static vp_status fill_value(const vp_node *n, vp_dtype dtype, int64_t numel, void *data, vp_error *err) {
    size_t es = vp_dtype_size(dtype);
    const vp_attr *a = vp_node_attr(n, "value");
    unsigned char one[16] = {0};
    if (a && a->type == VP_ATTR_TENSOR && a->t) {
        if (a->t->dtype != dtype || vp_tensor_numel(a->t) != 1 || !a->t->data)
            return vp_node_fail(err, VP_ERR_INVALID, n, "value must be one %s element", vp_dtype_name(dtype));
        memcpy(one, a->t->data, es);
    } else if (a) {
        return vp_node_fail(err, VP_ERR_INVALID, n, "value attribute must be a tensor");
    } else if (dtype != VP_F32) {
        return vp_node_fail(err, VP_ERR_INVALID, n, "no value attribute: the output is float32 zeros, not %s",
                            vp_dtype_name(dtype));
    }
    int zero = 1;
    for (size_t b = 0; b < es; b++) zero &= one[b] == 0;
    if (zero) memset(data, 0, (size_t)numel * es);
    else
        for (int64_t i = 0; i < numel; i++) memcpy((unsigned char *)data + (size_t)i * es, one, es);
    return VP_OK;
}

vp_status vp_promote_constant_weights(vp_graph *g, vp_error *err) {
    int changed = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        vp_node *n = &g->nodes[i];
        if (n->domain[0] || strcmp(n->op_type, "ConstantOfShape") || n->n_outputs != 1 || n->outputs[0] < 0) continue;
        int v = n->outputs[0];
        vp_value *val = &g->values[v];
        if (!vp_value_known(val))
            return vp_node_fail(err, VP_ERR_INVALID, n, "output shape unknown: infer the graph before promoting weights");
        if (!vp_dtype_is_float(val->dtype) || !feeds_weight(g, v)) continue;
        int64_t numel = vp_value_numel(val);
        size_t bytes = (size_t)numel * vp_dtype_size(val->dtype);
        void *data = malloc(bytes ? bytes : 1);
        if (!data) return vp_fail(err, VP_ERR_NOMEM, "out of memory promoting '%s' (%zu bytes)", val->name, bytes);
        vp_status s = fill_value(n, val->dtype, numel, data, err);
        if (s) {
            free(data);
            return s;
        }
        vp_value_set_data(g, v, data, VP_DATA_HEAP);
        val->flags = (val->flags & ~(unsigned)VP_VAL_CONST) | VP_VAL_INITIALIZER;
        n->outputs[0] = -1;
        n->folded = 1;
        changed++;
    }
    return changed ? vp_graph_link(g, err) : VP_OK;
}
