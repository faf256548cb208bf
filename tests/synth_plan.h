/* A hand-built training plan that imitates a torch-exported transformer, for tests of
 * the plan's artifacts (DOT, timeline, report) at sizes no bundled model reaches: blocks
 * of forward nodes named "/blocks.N/attn/MatMul", their backward nodes
 * "<forward>_grad/<Op>_<k>" (or plain names that tie nothing to the forward), AdamW
 * updates "<param>_update/AdamW" with two moments each, buffers with categories,
 * lifetimes and first-fit offsets. */
#ifndef VP_TEST_SYNTH_PLAN_H
#define VP_TEST_SYNTH_PLAN_H

#include "memory/plan.h"

typedef struct test_synth {
    vp_graph *g;
    vp_plan p;
    int *params, n_params;
} test_synth;

/* Builds n_blocks blocks and plans them against budget (bytes); plain_names gives the
 * backward nodes names that do not tie them to forward nodes.  Returns 1, or 0 when an
 * allocation or the graph's linking failed (s is then still freed by test_synth_free). */
int test_synth_build(test_synth *s, int n_blocks, int64_t budget, int plain_names);
void test_synth_free(test_synth *s);

#endif
