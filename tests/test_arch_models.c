/* Architectures that were refused train as PyTorch does (issue #20).
 *
 * Data: tests/data/arch/<model>, made by tools/scripts/make_arch_models.py: a
 * DenseNet-style dense block of 70 layers (Concats of up to 71 inputs, their gradient a
 * Split of as many outputs), two torchvision SwinTransformerBlocks (shifted windows:
 * roll, the slice-assigned mask, relative position bias) and nn.EmbeddingBag (sum,
 * mean, max), which torch exports as a Loop over the batch.  Checks per model:
 * - the training step builds, trains exactly torch's parameters, warns of nothing;
 * - DenseNet: a Concat wider than 64 inputs is on the gradient path; Swin: every
 *   ScatterND (the mask, on constants) is folded away; EmbeddingBag: no Loop is left
 *   (it is unrolled once the batch is bound);
 * - the output, the loss and every parameter gradient at the initial parameters match
 *   torch within 1e-5 of the tensor's largest magnitude, and the second SGD step's loss;
 * - the plan verifies and runs two steps bit-identically to naive execution. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "cpu_host.h"
#include "model_util.h"

#define DATA VP_SOURCE_DIR "/tests/data/arch"

static int count_forward(const test_model *m, const char *op, int folded) {
    int c = 0;
    for (int i = 0; i < m->g->n_nodes; i++) {
        const vp_node *n = &m->g->nodes[i];
        if (!strcmp(n->op_type, op) && n->phase == VP_PHASE_FORWARD && (folded < 0 || n->folded == folded)) c++;
    }
    return c;
}

static void check_structure(test_model *m) {
    test_model_check_params(m);
    if (!strncmp(m->name, "densenet", 8)) {
        int widest = 0;
        for (int i = 0; i < m->g->n_nodes; i++) {
            const vp_node *n = &m->g->nodes[i];
            if (!strcmp(n->op_type, "Concat") && n->phase == VP_PHASE_FORWARD && n->n_inputs > widest) widest = n->n_inputs;
        }
        check(widest > 64, "%s: the widest Concat trained through has %d inputs", m->name, widest);
    } else if (!strncmp(m->name, "swin", 4)) {
        int live = count_forward(m, "ScatterND", 0), folded = count_forward(m, "ScatterND", 1);
        check(live == 0 && folded > 0, "%s: %d ScatterND of the shifted-window mask folded, %d left", m->name, folded,
              live);
    } else {
        int loops = count_forward(m, "Loop", -1), gathers = count_forward(m, "Gather", 0);
        check(loops == 0 && gathers >= 2, "%s: the Loop unrolled (%d left), %d row Gathers trained through", m->name,
              loops, gathers);
    }
}

static void check_model(test_model *m) {
    check_structure(m);
    test_model_check_torch(m, 1e-5);
    test_model_check_planned(m, 2);
}

int main(void) {
    vp_cpu_host_install();
    return test_model_each_fixture(DATA, 9, check_model);
}
