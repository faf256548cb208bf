/* vplan.Attention's gradients (planner/ops/attention.c) against five-point finite
 * differences in float64, then float32, float16 and bfloat16 against float64 twins
 * (tests/gradcheck_harness.c): causal, additive masks of several broadcast shapes,
 * S != T both ways, Dv != D, the LSE output omitted, Y in the heads-merged layout
 * [B, S, H, Dv] (y_bshd), Q, K, V as the projections write them (q_bshd, kv_bshd),
 * grouped- and multi-query K, V, soft-capped scores (Gemma 2's softcap, before the
 * mask, the trained one too), dropped probabilities (dropout, a fixed seed).  A trained mask (T5's position bias) of several
 * broadcast shapes: its gradient too.  The pass that fuses attention, the kernel's mask
 * path and the models are test_attention's.
 *
 * usage: test_attention_grad [SUBSTR]   (only the cases whose label contains SUBSTR) */
#include <stdint.h>

#include "cpu_host.h"
#include "gradcheck_harness.h"

/* ---- finite differences ---- */

typedef struct att_case {
    const char *what;
    int64_t b, h, s, t, d, dv;
    int causal;
    int mask_rank; /* 0: none */
    int64_t mask[4];
    int lse_out;   /* the node declares output 1 */
    int bshd;      /* attribute y_bshd: Y laid out [B, S, H, Dv] */
    int64_t hk;    /* key/value heads (grouped-query attention); 0: h */
    int in_bshd;   /* bit 0: Q [B, S, H, D] (q_bshd); bit 1: K, V [B, T, Hk, D] (kv_bshd) */
    int trained;   /* the mask is a parameter: its gradient checked too */
    double softcap; /* attribute softcap; 0: none */
    double dropout; /* attribute dropout (seed 7): the same mask at every evaluation; 0: none */
} att_case;

static void case_attention(const att_case *a) {
    gc_case k;
    int64_t hk = a->hk ? a->hk : a->h;
    int qb = a->in_bshd & 1, kvb = (a->in_bshd & 2) != 0;
    if (!gc_begin(&k, 17, "Attention %s B%lld H%lld Hk%lld S%lld T%lld D%lld Dv%lld%s%s%s%s%s%s%s", a->what, (long long)a->b,
                  (long long)a->h, (long long)hk, (long long)a->s, (long long)a->t, (long long)a->d, (long long)a->dv,
                  a->causal ? " causal" : "", a->bshd ? " y_bshd" : "", qb ? " q_bshd" : "", kvb ? " kv_bshd" : "",
                  a->trained ? " mask trained" : "", a->softcap > 0 ? " softcap" : "", a->dropout > 0 ? " dropout" : ""))
        return;
    int in[4];
    in[0] = qb ? gc_param(&k, UNI, DIMS(a->b, a->s, a->h, a->d)) : gc_param(&k, UNI, DIMS(a->b, a->h, a->s, a->d));
    in[1] = kvb ? gc_param(&k, UNI, DIMS(a->b, a->t, hk, a->d)) : gc_param(&k, UNI, DIMS(a->b, hk, a->t, a->d));
    in[2] = kvb ? gc_param(&k, UNI, DIMS(a->b, a->t, hk, a->dv)) : gc_param(&k, UNI, DIMS(a->b, hk, a->t, a->dv));
    if (a->mask_rank) in[3] = a->trained ? gc_param(&k, UNI, a->mask_rank, a->mask) : gc_const(&k, UNI, a->mask_rank, a->mask);
    int out[2];
    int n = gc_node(&k, "Attention", "vplan", a->mask_rank ? 4 : 3, in, a->lse_out ? 2 : 1, out);
    gc_loss_on(&k, out[0]);
    attr_f(&k, n, "scale", 0.7);
    if (a->causal) attr_i(&k, n, "causal", 1);
    if (a->bshd) attr_i(&k, n, "y_bshd", 1);
    if (qb) attr_i(&k, n, "q_bshd", 1);
    if (kvb) attr_i(&k, n, "kv_bshd", 1);
    if (a->softcap > 0) attr_f(&k, n, "softcap", a->softcap);
    if (a->dropout > 0) {
        attr_f(&k, n, "dropout", a->dropout);
        attr_i(&k, n, "seed", 7);
    }
    gc_run(&k);
}

static void gradient_cases(void) {
    static const att_case cases[] = {
        {"plain", 1, 1, 4, 4, 3, 3, 0, 0, {0}, 1, 0, 0, 0, 0, 0, 0},
        {"causal", 2, 2, 5, 5, 3, 2, 1, 0, {0}, 1, 0, 0, 0, 0, 0, 0},
        {"causal S<T", 1, 2, 3, 5, 4, 3, 1, 0, {0}, 1, 0, 0, 0, 0, 0, 0},
        {"causal S>T", 1, 2, 5, 3, 2, 4, 1, 0, {0}, 0, 0, 0, 0, 0, 0, 0},
        {"mask [S,T]", 2, 1, 3, 4, 3, 2, 0, 2, {3, 4}, 1, 0, 0, 0, 0, 0, 0},
        {"mask [1,1,S,T] S>T", 1, 2, 6, 4, 3, 3, 0, 4, {1, 1, 6, 4}, 1, 0, 0, 0, 0, 0, 0},
        {"mask [B,1,1,T]", 2, 3, 4, 5, 2, 3, 0, 4, {2, 1, 1, 5}, 0, 0, 0, 0, 0, 0, 0},
        {"mask [B,H,S,T] causal", 2, 2, 4, 4, 3, 3, 1, 4, {2, 2, 4, 4}, 1, 0, 0, 0, 0, 0, 0},
        {"mask [T] causal S<T", 1, 1, 3, 6, 2, 2, 1, 1, {6}, 1, 0, 0, 0, 0, 0, 0},
        {"rows past one block", 1, 1, 70, 9, 2, 2, 1, 2, {70, 9}, 1, 0, 0, 0, 0, 0, 0},
        {"heads merged", 2, 3, 4, 4, 3, 2, 1, 0, {0}, 1, 1, 0, 0, 0, 0, 0},
        {"heads merged, mask [B,1,1,T] S<T", 2, 2, 3, 5, 2, 3, 0, 4, {2, 1, 1, 5}, 0, 1, 0, 0, 0, 0, 0},
        {"heads merged, rows past one block", 1, 2, 70, 9, 2, 2, 1, 0, {0}, 1, 1, 0, 0, 0, 0, 0},
        {"grouped-query", 2, 4, 5, 5, 3, 2, 0, 0, {0}, 1, 0, 2, 0, 0, 0, 0},
        {"grouped-query causal, heads merged, mask [B,H,S,T]", 2, 6, 4, 4, 3, 3, 1, 4, {2, 6, 4, 4}, 1, 1, 2, 0, 0, 0, 0},
        {"multi-query, rows past one block", 1, 3, 70, 9, 2, 2, 1, 0, {0}, 0, 0, 1, 0, 0, 0, 0},
        {"inputs as projected", 2, 3, 4, 5, 3, 2, 0, 4, {2, 1, 1, 5}, 1, 1, 0, 3, 0, 0, 0},
        {"Q as projected, grouped-query causal", 2, 4, 5, 5, 3, 3, 1, 0, {0}, 1, 0, 2, 1, 0, 0, 0},
        {"K, V as projected, rows past one block", 1, 2, 70, 9, 2, 3, 1, 0, {0}, 0, 1, 1, 2, 0, 0, 0},
        /* a trained mask: its gradient summed over the axes it broadcasts along (T5's
         * relative position bias is [1, H, S, T]) */
        {"bias [1,H,S,T]", 2, 3, 4, 5, 3, 2, 0, 4, {1, 3, 4, 5}, 1, 0, 0, 0, 1, 0, 0},
        {"bias [1,H,S,T] causal, heads merged", 3, 2, 5, 5, 3, 3, 1, 4, {1, 2, 5, 5}, 1, 1, 0, 0, 1, 0, 0},
        {"bias [S,T]", 2, 2, 3, 4, 2, 2, 0, 2, {3, 4}, 0, 0, 0, 0, 1, 0, 0},
        {"bias [B,1,1,T]", 2, 3, 4, 5, 2, 3, 0, 4, {2, 1, 1, 5}, 1, 0, 0, 0, 1, 0, 0},
        {"bias [B,H,S,T] grouped-query causal", 2, 4, 4, 4, 3, 3, 1, 4, {2, 4, 4, 4}, 1, 0, 2, 0, 1, 0, 0},
        {"bias [1,H,1,T] as projected", 2, 2, 4, 5, 3, 2, 0, 4, {1, 2, 1, 5}, 1, 1, 0, 3, 1, 0, 0},
        {"bias [1,H,S,T], rows past one block", 2, 2, 70, 9, 2, 2, 1, 4, {1, 2, 70, 9}, 1, 0, 0, 0, 1, 0, 0},
        /* soft-capped scores c tanh(A / c), c small enough that the tanh bends (|A| up
         * to 0.7 D here) */
        {"softcap", 2, 2, 4, 5, 4, 3, 0, 0, {0}, 1, 0, 0, 0, 0, 0.8, 0},
        {"softcap causal, grouped-query, mask [B,1,S,T]", 2, 4, 5, 5, 3, 2, 1, 4, {2, 1, 5, 5}, 1, 1, 2, 0, 0, 1.5, 0},
        {"softcap, bias [1,H,S,T] causal, rows past one block", 1, 2, 70, 9, 3, 2, 1, 4, {1, 2, 70, 9}, 0, 0, 0, 3, 1, 0.6, 0},
        /* dropout of the probabilities (scaled_dot_product_attention's dropout_p in
         * train()): P times M / (1 - r), M a function of the index, the same each time */
        {"dropout", 2, 2, 4, 5, 3, 2, 0, 0, {0}, 1, 0, 0, 0, 0, 0, 0.3},
        {"dropout causal, grouped-query, heads merged, mask [B,1,S,T]", 2, 4, 5, 5, 3, 2, 1, 4, {2, 1, 5, 5}, 1, 1, 2, 0, 0,
         0, 0.5},
        {"dropout, bias [1,H,S,T] causal, as projected, rows past one block", 1, 2, 70, 9, 3, 2, 1, 4, {1, 2, 70, 9}, 0, 0,
         0, 3, 1, 0, 0.2},
        {"dropout, softcap", 2, 2, 4, 5, 4, 3, 0, 0, {0}, 1, 0, 0, 0, 0, 0.8, 0.4},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) case_attention(&cases[i]);
}

int main(int argc, char **argv) {
    vp_cpu_host_install();
    return gc_check_all(argc > 1 ? argv[1] : NULL, gradient_cases);
}
