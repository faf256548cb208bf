/* train --save --qdq: collects each forward FakeQuant's value, scale, zero point and
 * quantised readers from the trained step and hands them to the QDQ rewrite. */
#include "cli_qdq.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_qdq.h"
#include "quant/qat.h"

typedef struct collected {
    vp_qdq_point *pts;
    vp_tensor *scale, *zp;
    const char ***readers;
    int n;
} collected;

static void collected_free(collected *c) {
    for (int i = 0; i < c->n; i++) {
        free(c->scale[i].data);
        free(c->zp[i].data);
        free(c->pts[i].data.data);
        free(c->readers[i]);
    }
    free(c->pts), free(c->scale), free(c->zp), free(c->readers);
}

static vp_status collect_one(vp_exec *x, const vp_graph *g, const vp_node *n, collected *c, vp_error *err) {
    int i = c->n;
    vp_qdq_point *p = &c->pts[i];
    const vp_value *v = &g->values[n->inputs[0]];
    vp_status s = vp_exec_get(x, n->inputs[1], &c->scale[i], err);
    if (!s) s = vp_exec_get(x, n->inputs[2], &c->zp[i], err);
    c->n++; /* owns what it got from here on */
    if (s) return s;
    p->value = v->name;
    p->weight = (v->flags & (VP_VAL_INITIALIZER | VP_VAL_PARAM)) != 0;
    p->n = vp_tensor_numel(&c->scale[i]);
    p->axis = p->n > 1 ? (int)vp_attr_int(n, "axis", 0) : -1;
    p->scale = c->scale[i].data;
    p->zero_point = c->zp[i].data;
    p->qmin = (int)vp_attr_int(n, "quant_min", -128);
    p->qmax = (int)vp_attr_int(n, "quant_max", 127);
    if (p->weight && (s = vp_exec_get(x, n->inputs[0], &p->data, err))) return s;
    if (p->weight && p->data.dtype != VP_F32)
        return vp_fail(err, VP_ERR_UNSUPPORTED, "--qdq: weight '%s' is %s, not float32", v->name, vp_dtype_name(p->data.dtype));
    const vp_value *out = &g->values[n->outputs[0]];
    c->readers[i] = calloc((size_t)out->n_consumers + 1, sizeof **c->readers);
    if (!c->readers[i]) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    for (int k = 0; k < out->n_consumers; k++) {
        const vp_node *r = &g->nodes[out->consumers[k]];
        if (r->phase == VP_PHASE_FORWARD && r->n_outputs > 0 && r->outputs[0] >= 0)
            c->readers[i][p->n_readers++] = g->values[r->outputs[0]].name;
    }
    p->readers = c->readers[i];
    return VP_OK;
}

vp_status cli_qdq_save(const char *dst, vp_exec *x, const vp_graph *g, int ref_value, vp_tensor *ref, vp_error *err) {
    vp_status s = vp_exec_run(x, err);
    if (!s && ref) s = vp_exec_get(x, ref_value, ref, err);
    int max = 0;
    for (int i = 0; i < g->n_nodes; i++) max += vp_qat_is_fake_quant(&g->nodes[i]);
    collected c = {calloc((size_t)max + 1, sizeof *c.pts), calloc((size_t)max + 1, sizeof *c.scale),
                   calloc((size_t)max + 1, sizeof *c.zp), calloc((size_t)max + 1, sizeof *c.readers), 0};
    if (!s && (!c.pts || !c.scale || !c.zp || !c.readers)) s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
    for (int i = 0; !s && i < g->n_nodes; i++) {
        const vp_node *n = &g->nodes[i];
        if (vp_qat_is_fake_quant(n) && n->phase == VP_PHASE_FORWARD) s = collect_one(x, g, n, &c, err);
    }
    if (!s && !c.n) s = vp_fail(err, VP_ERR_USAGE, "--qdq: the step has no fake quantisation (train with --qat)");
    vp_qdq_counts counts;
    if (!s) s = vp_onnx_qdq_rewrite(dst, c.pts, c.n, &counts, err);
    if (!s)
        printf("QDQ: %d weights int8, %d activations quantised, %d biases int32, %d inputs rewired\n", counts.weights,
               counts.activations, counts.biases, counts.rewired);
    collected_free(&c);
    return s;
}
