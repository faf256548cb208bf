/* torch.onnx exports of recurrent classifiers train as PyTorch does.
 *
 * Data: tests/data/rnn/<model>, made by tools/scripts/make_rnn_models.py: a 2-layer
 * bidirectional batch-first LSTM and a 2-layer GRU from a trained initial state, each
 * last hidden state -> Linear -> logits, at opsets 13 and 17.  Checks per model:
 * - the training step builds, trains exactly torch's parameters, warns of nothing, and
 *   both recurrent nodes run in their training form (vplan.LSTMTraining/GRUTraining),
 *   which the cost model charges for its gate products;
 * - the output and the loss at the initial parameters match torch within 1e-5 relative,
 *   every parameter gradient within 1e-4 of the tensor's largest magnitude, and the
 *   losses of all three SGD steps within 1e-5;
 * - the plan verifies and runs three steps bit-identically to naive execution, and so
 *   does a sqrtn-checkpointed plan that recomputes the recurrent nodes. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "check.h"
#include "cpu_host.h"
#include "cpu_util.h"
#include "exec.h"
#include "ir/infer.h"
#include "memory/plan.h"
#include "memory/verify.h"
#include "model_util.h"
#include "onnx/onnx_load.h"
#include "onnx/tensor_proto.h"
#include "remat/cost.h"
#include "remat/remat.h"
#include "train/training.h"

#define DATA VP_SOURCE_DIR "/tests/data/rnn"

static void check_structure(test_model *m) {
    test_model_check_params(m);
    const char *op = mj_get(m->meta, "op")->str;
    char training[32];
    snprintf(training, sizeof training, "%sTraining", op);
    int plain = 0, trained = 0, costed = 0;
    for (int i = 0; i < m->g->n_nodes; i++) {
        const vp_node *n = &m->g->nodes[i];
        plain += !strcmp(n->op_type, op);
        if (strcmp(n->op_type, training) || strcmp(n->domain, "vplan")) continue;
        trained++;
        /* the cost model charges the gate products: 2 * steps * batch * D * G*H * (I + H) */
        const vp_value *x = &m->g->values[n->inputs[0]], *r = &m->g->values[n->inputs[2]];
        double products = 2.0 * (double)(x->dims[0] * x->dims[1]) * (double)(r->dims[0] * r->dims[1]) *
                          (double)(x->dims[2] + r->dims[2]);
        costed += vp_cost_node(m->g, n).flops >= products;
    }
    check(costed == trained, "%s: the cost model charges %d of %d %s nodes their gate products", m->name, costed, trained,
          training);
    check(trained == 2 && plain == 0, "%s: %d %s nodes trained as vplan.%s (%d left plain)", m->name, trained, op, training,
          plain);
}

/* sqrtn checkpointing recomputes the recurrent nodes' training forms in the backward:
 * the plan must stay sound and bit-identical to the naive step. */
static void check_remat(test_model *m) {
    vp_error err = {{0}};
    vp_plan p;
    memset(&p, 0, sizeof p);
    vp_graph *planned = NULL;
    vp_remat_result r;
    vp_status s = test_plan_step_remat(m->g, &m->t, vp_device_find("cpu"), 1, 1, VP_REMAT_SQRTN, NULL, &planned, &p, &r, &err);
    if (s) {
        check(0, "%s sqrtn: %s", m->name, err.msg);
        return;
    }
    char training[32], why[1024];
    snprintf(training, sizeof training, "%sTraining", mj_get(m->meta, "op")->str);
    int recomputed = 0;
    for (int i = 0; i < planned->n_nodes; i++)
        recomputed += planned->nodes[i].phase == VP_PHASE_RECOMPUTE && !strcmp(planned->nodes[i].op_type, training);
    vp_verify_report rep;
    vp_status vs = vp_plan_verify(&p, &rep, &err);
    int same = vs ? 0 : test_compare_planned(m, &p, 2, m->t.params, m->t.n_params, why, sizeof why);
    check(!vs && same == 1 && recomputed > 0, "%s sqrtn: %d recompute nodes (%d of them %s), %s, %s", m->name, r.n_recompute,
          recomputed, training, vs ? err.msg : "sound", same == 1 ? "bit-identical to naive" : why);
    vp_plan_free(&p);
    if (planned != m->g) vp_graph_free(planned);
}

static void check_model(test_model *m) {
    check_structure(m);
    test_model_check_torch(m, 1e-4);
    test_model_check_planned(m, 3);
    check_remat(m);
}

int main(void) {
    vp_cpu_host_install();
    return test_model_each_fixture(DATA, 4, check_model);
}
