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
import json
import os

import numpy as np
import onnx
from onnx import numpy_helper
import torch
import torch.nn as nn
import torch.nn.functional as F

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


def write_tensor(path, arr, name):
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(np.ascontiguousarray(arr), name=name).SerializeToString())


def export(name, model, x, labels, opset, want_op, batch_axis):
    d = os.path.join(OUT, name)
    os.makedirs(os.path.join(d, "fixtures", "grads"), exist_ok=True)
    model.eval()
    path = os.path.join(d, "model.onnx")
    torch.onnx.export(model, (x,), path, export_params=True, do_constant_folding=False, opset_version=opset,
                      input_names=["x"], output_names=["logits"],
                      dynamic_axes={"x": {batch_axis: "batch"}, "logits": {0: "batch"}})
    om = onnx.load(path)
    counts = {op: sum(n.op_type == op for n in om.graph.node) for op in (want_op, "Transpose")}
    assert counts[want_op] == 2, f"{name}: expected 2 {want_op} nodes, got {counts}"
    inits = {t.name for t in om.graph.initializer}
    params = [k for k, _ in model.named_parameters()]
    assert all(p in inits for p in params), f"{name}: parameters {params} not all initializers {sorted(inits)}"
    logits = model(x)
    loss = F.cross_entropy(logits, labels)
    loss.backward()
    for k, p in model.named_parameters():
        write_tensor(os.path.join(d, "fixtures", "grads", k + ".pb"), p.grad.numpy(), k)
    write_tensor(os.path.join(d, "fixtures", "logits.pb"), logits.detach().numpy(), "logits")
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), labels)
        losses.append(loss.item())
        loss.backward()
        opt.step()
    write_tensor(os.path.join(d, "fixtures", "x.pb"), x.numpy(), "x")
    write_tensor(os.path.join(d, "fixtures", "labels.pb"), labels.numpy(), "labels")
    write_tensor(os.path.join(d, "fixtures", "losses.pb"), np.array(losses, dtype=np.float32), "losses")
    meta = {"input": "x", "dims": {"batch": BATCH}, "lr": LR, "steps": STEPS, "opset": opset, "params": params,
            "op": want_op, "torch": torch.__version__}
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
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
