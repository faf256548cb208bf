#!/usr/bin/python3
"""torch.onnx exports of small recurrent classifiers, and PyTorch's training fixtures.

Models (tests/data/rnn/<name>/), sequence 5, batch 3, input 6, hidden 8, 5 classes:
  lstm_op<N>   nn.LSTM(2 layers, bidirectional, batch_first=True: the exporter's
               Transposes), no initial state; both directions' last hidden states of
               the top layer -> Linear -> logits
  gru_op<N>    nn.GRU(2 layers, one direction, sequence first) from a trained initial
               state (a parameter expanded over the batch: initial_h on the gradient
               path); the top layer's last hidden state -> Linear -> logits
at opsets 13 and 17.  Each folder holds:
  model.onnx          exported in eval mode, constant folding off
  meta.json           input, dims, lr, steps, params (torch names, in order)
  fixtures/x.pb, labels.pb   one batch, used at every step
  fixtures/logits.pb  the output at the initial parameters
  fixtures/losses.pb  float32 [steps]: cross-entropy before each SGD step
  fixtures/grads/<param>.pb  d(loss)/d(param) at the initial parameters

Run: /usr/bin/python3 tools/scripts/make_rnn_models.py   (torch 1.13, onnx 1.12)
Seeded and single-threaded: a rerun writes the same bytes.
"""
import os

import torch
import torch.nn as nn

from fixture_export import export_with_fixtures

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "data", "rnn")
STEPS, LR, SEQ, BATCH, INPUT, HIDDEN, CLASSES = 3, 0.5, 5, 3, 6, 8, 5
torch.set_num_threads(1)


class LSTMClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(INPUT, HIDDEN, num_layers=2, bidirectional=True, batch_first=True)
        self.head = nn.Linear(2 * HIDDEN, CLASSES)

    def forward(self, x):  # x [batch, seq, input]
        _, (h, _) = self.rnn(x)
        return self.head(torch.cat([h[-2], h[-1]], 1))


class GRUClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(INPUT, HIDDEN, num_layers=2)
        self.h0 = nn.Parameter(0.1 * torch.randn(2, 1, HIDDEN))
        self.head = nn.Linear(HIDDEN, CLASSES)

    def forward(self, x):  # x [seq, batch, input]
        _, h = self.rnn(x, self.h0.expand(2, x.shape[1], HIDDEN).contiguous())
        return self.head(h[-1])


def export(name, model, x, labels, opset, want_op, batch_axis):
    om, losses = export_with_fixtures(os.path.join(OUT, name), model, x, labels, opset, LR, STEPS, BATCH, batch_axis,
                                      extra_meta={"op": want_op})
    counts = {op: sum(n.op_type == op for n in om.graph.node) for op in (want_op, "Transpose")}
    assert counts[want_op] == 2, f"{name}: expected 2 {want_op} nodes, got {counts}"
    print(f"{name}: {counts}, losses {losses}")


def main():
    for opset in (13, 17):
        torch.manual_seed(opset)
        model = LSTMClassifier()
        x = torch.randn(BATCH, SEQ, INPUT)
        labels = torch.randint(0, CLASSES, (BATCH,))
        export(f"lstm_op{opset}", model, x, labels, opset, "LSTM", 0)
        torch.manual_seed(opset + 100)
        model = GRUClassifier()
        x = torch.randn(SEQ, BATCH, INPUT)
        labels = torch.randint(0, CLASSES, (BATCH,))
        export(f"gru_op{opset}", model, x, labels, opset, "GRU", 1)


if __name__ == "__main__":
    main()
