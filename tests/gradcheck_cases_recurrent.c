/* Gradient checks of the recurrent family: LSTM and GRU forward, reverse and
 * bidirectional, with and without biases and initial states, sequence lengths, layout
 * 1, GRU in both linear_before_reset forms, every output in the loss; and the peephole
 * refusal.  Each checks dX, dW, dR, dB, d_initial_h (and d_initial_c). */
#include "gradcheck_cases.h"

#include <stdint.h>
#include <string.h>

#include "gradcheck_harness.h"
#include "ir/graph_build.h"

enum { S = 4, N = 3, I = 2, H = 3 };

typedef struct rnn_case {
    const char *direction;
    int bias, states, seq_lens, layout, lbr, all_outputs;
} rnn_case;

/* gates = 4: LSTM, 3: GRU. */
static void case_rnn(int gates, rnn_case rc) {
    int D = strcmp(rc.direction, "bidirectional") ? 1 : 2, lstm = gates == 4;
    gc_case k;
    if (!gc_begin(&k, 14, "%s %s%s%s%s%s%s", lstm ? "LSTM" : "GRU", rc.direction, rc.bias ? " B" : "",
                  rc.states ? " initial states" : "", rc.seq_lens ? " sequence_lens" : "", rc.layout ? " layout=1" : "",
                  !lstm && rc.lbr ? " linear_before_reset" : ""))
        return;
    int in[7] = {rc.layout ? gc_param(&k, UNI, DIMS(N, S, I)) : gc_param(&k, UNI, DIMS(S, N, I)),
                 gc_param(&k, UNI, DIMS(D, gates * H, I)), gc_param(&k, UNI, DIMS(D, gates * H, H)), -1, -1, -1, -1};
    if (rc.bias) in[3] = gc_param(&k, UNI, DIMS(D, 2 * gates * H));
    if (rc.seq_lens) {
        static const int32_t lens[N] = {4, 2, 3};
        in[4] = vp_build_const(k.g, "seq_lens", VP_I32, 1, (int64_t[]){N}, lens);
    }
    if (rc.states) {
        in[5] = rc.layout ? gc_param(&k, UNI, DIMS(N, D, H)) : gc_param(&k, UNI, DIMS(D, N, H));
        if (lstm) in[6] = rc.layout ? gc_param(&k, UNI, DIMS(N, D, H)) : gc_param(&k, UNI, DIMS(D, N, H));
    }
    int n_in = lstm ? (rc.states ? 7 : 5) : (rc.states ? 6 : 5), out[3];
    if (!rc.seq_lens && !rc.states) n_in = rc.bias ? 4 : 3;
    int n_out = rc.all_outputs ? (lstm ? 3 : 2) : 1;
    int node = gc_node(&k, lstm ? "LSTM" : "GRU", "", n_in, in, n_out, out);
    for (int o = 0; o < n_out; o++) gc_loss_on(&k, out[o]);
    attr_i(&k, node, "hidden_size", H);
    attr_s(&k, node, "direction", rc.direction);
    if (rc.layout) attr_i(&k, node, "layout", 1);
    if (!lstm) attr_i(&k, node, "linear_before_reset", rc.lbr);
    gc_run(&k);
}

void gc_cases_recurrent(void) {
    static const rnn_case cases[] = {
        {"forward", 1, 1, 0, 0, 1, 1},       {"bidirectional", 1, 1, 0, 0, 1, 1}, {"reverse", 0, 0, 0, 0, 1, 0},
        {"bidirectional", 1, 0, 1, 0, 1, 1}, {"forward", 1, 1, 1, 1, 0, 1},      {"bidirectional", 1, 1, 0, 1, 0, 1},
        {"reverse", 1, 1, 0, 0, 0, 1},       {"bidirectional", 1, 1, 1, 0, 0, 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        case_rnn(4, cases[c]);
        case_rnn(3, cases[c]);
    }
    gc_case k;
    if (gc_begin(&k, 14, "refused: LSTM peepholes")) {
        int in[8] = {gc_param(&k, UNI, DIMS(S, N, I)), gc_param(&k, UNI, DIMS(1, 4 * H, I)),
                     gc_param(&k, UNI, DIMS(1, 4 * H, H)), -1, -1, -1, -1, gc_param(&k, UNI, DIMS(1, 3 * H))};
        attr_i(&k, gc_op(&k, "LSTM", 8, in), "hidden_size", H);
        k.refusal = "peepholes";
        gc_run(&k);
    }
    if (gc_begin(&k, 14, "refused: LSTM clip")) {
        int in[3] = {gc_param(&k, UNI, DIMS(S, N, I)), gc_param(&k, UNI, DIMS(1, 4 * H, I)), gc_param(&k, UNI, DIMS(1, 4 * H, H))};
        int node = gc_op(&k, "LSTM", 3, in);
        attr_i(&k, node, "hidden_size", H);
        attr_f(&k, node, "clip", 3);
        k.refusal = "unsupported: the clip attribute";
        gc_run(&k);
    }
}
