#include "light_step.h"

#include <stdio.h>
#include <string.h>

#include "ir/infer.h"
#include "onnx/onnx_load.h"
#include "train/promote.h"


vp_status light_step_build(const char *path, vp_graph **out, vp_training *t, int *used_mse, vp_error *err) {
    vp_graph *g = NULL;
    memset(t, 0, sizeof *t);
    *used_mse = 0;
    vp_status s = vp_onnx_load(path, &g, err);
    if (!s) s = vp_bind_all_dims(g, 1, err);
    if (!s) s = vp_infer(g, NULL, NULL, err);
    if (!s) s = vp_promote_constant_weights(g, err);
    int softmax = -1;
    for (int i = 0; !s && i < g->n_nodes; i++)
        if (!strcmp(g->nodes[i].op_type, "Softmax") && !g->nodes[i].domain[0]) softmax = i;
    if (!s && softmax < 0 && g->n_outputs < 1) s = vp_fail(err, VP_ERR_UNSUPPORTED, "no Softmax and no output");
    vp_train_spec spec;
    memset(&spec, 0, sizeof spec);
    if (!s) { /* ce on the Softmax's input; without one (densenet121 ends in a pool), mse on the output */
        char loss[300];
        if (softmax >= 0) snprintf(loss, sizeof loss, "ce:%.290s", g->values[g->nodes[softmax].inputs[0]].name);
        else snprintf(loss, sizeof loss, "mse:%.290s", g->values[g->outputs[0]].name);
        *used_mse = softmax < 0;
        s = vp_loss_parse(loss, &spec.loss, err);
    }
    if (!s) s = vp_opt_parse("adamw", &spec.opt, err);
    if (!s) s = vp_training_build(g, &spec, t, err);
    if (s) {
        vp_training_free(t);
        vp_graph_free(g);
        return s;
    }
    *out = g;
    return VP_OK;
}
