/* torch.onnx exports with Resize and ScatterND train as PyTorch does.
 *
 * Data: tests/data/resample/<model>, made by tools/scripts/make_resample_models.py: a
 * tiny U-Net (nn.Upsample(scale_factor=2) and F.interpolate(size=...), nearest,
 * bilinear, bilinear with align_corners) and an x[:, idx] = f(x) module with a
 * Swin-style constant mask, each at opsets 11, 13 and 17.  Checks per model:
 * - the training step builds, trains exactly torch's parameters, warns of nothing;
 * - ScatterND nodes on constants are folded away, only the trainable one is left;
 * - the output, the loss and every parameter gradient at the initial parameters match
 *   torch within 1e-5 of the tensor's largest magnitude, and the second SGD step's loss
 *   within 1e-5;
 * - the plan verifies and runs the steps bit-identically to naive execution. */
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
#include "train/training.h"

#define DATA VP_SOURCE_DIR "/tests/data/resample"

static void check_structure(test_model *m) {
    test_model_check_params(m);
    int live = 0, folded = 0, resize = 0;
    for (int i = 0; i < m->g->n_nodes; i++) {
        const vp_node *n = &m->g->nodes[i];
        if (!strcmp(n->op_type, "ScatterND") && n->phase == VP_PHASE_FORWARD) n->folded ? folded++ : live++;
        if (!strcmp(n->op_type, "Resize") && n->phase == VP_PHASE_FORWARD) resize++;
    }
    if (!strncmp(m->name, "scatter", 7))
        check(live == 1 && folded >= 3, "%s: %d constant ScatterND folded, %d left in the forward pass (the trainable one)", m->name,
              folded, live);
    else check(resize == 2, "%s: %d Resize nodes trained through", m->name, resize);
}

static void check_model(test_model *m) {
    check_structure(m);
    test_model_check_torch(m, 1e-5);
    test_model_check_planned(m, 2);
}

int main(void) {
    vp_cpu_host_install();
    return test_model_each_fixture(DATA, 12, check_model);
}
