#!/usr/bin/python3
"""Real torch.onnx exports of the patterns planner/train/fuse.c recognises, with
PyTorch-computed fixtures, for tests/test_fusion.c.

Modules (a few features each, input [2, 3, 8]):
  gelu         Linear -> nn.GELU() -> Linear            (erf form)
  gelu_tanh    Linear -> nn.GELU(approximate='tanh') -> Linear
  ln           Linear -> nn.LayerNorm(8) -> Linear      (affine)
  ln_plain     Linear -> nn.LayerNorm(8, elementwise_affine=False) -> Linear
  block        a pre-LN transformer block: LN, causal single-head attention, residual,
               LN, MLP with GELU, residual

Each is exported at opsets 13..17 (torch 1.13's range), twice: eval export
(TrainingMode.EVAL, constant folding on: torch's defaults) and training export
(TrainingMode.TRAINING, do_constant_folding=False).  Below opset 17 torch writes
LayerNorm decomposed; at 17 it writes LayerNormalization.

tests/data/fusion/<module>/
  x.pb, target.pb      the input and the regression target
  y.pb                 torch's forward output
  loss.pb              mean((y - target)^2), the mse loss the test builds
  grads/x.pb           d loss / d x
  op<N>_<eval|train>/model.onnx
  op<N>_<eval|train>/grads/<initializer>.pb
                       d loss / d that initializer, for every float initializer that is
                       a parameter of the module; constant folding may have stored a
                       weight transposed under an onnx:: name, and its gradient is then
                       the parameter's gradient transposed the same way (in file names
                       every character but [A-Za-z0-9._-] is written '_')
  expect.txt           "op<N>_<mode> <gelu> <fast_gelu> <layer_norm>": the fusions the
                       pass must make in each export: the module's GELUs and LayerNorms
                       (none of the LayerNorms at opset 17, where torch writes the op)

usage: /usr/bin/python3 tools/scripts/make_fusion_models.py   (torch 1.13, onnx 1.12)
"""
import math
import os
import re
import shutil

import numpy as np
import onnx
import torch
import torch.nn as nn
from onnx import numpy_helper

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data", "fusion")
OPSETS = (13, 14, 15, 16, 17)
# torch 1.13 cannot export LayerNorm(elementwise_affine=False) at opset 17: it writes
# LayerNormalization with an empty scale, which its own checker refuses
SKIP = {("ln_plain", 17)}
D = 8


class Mlp(nn.Module):
    def __init__(self, mid):
        super().__init__()
        self.fc1 = nn.Linear(D, 16)
        self.mid = mid
        self.fc2 = nn.Linear(16 if not isinstance(mid, nn.LayerNorm) else D, 4)
        if isinstance(mid, nn.LayerNorm):
            self.fc1 = nn.Linear(D, D)

    def forward(self, x):
        return self.fc2(self.mid(self.fc1(x)))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.ln2 = nn.LayerNorm(D)
        self.fc1 = nn.Linear(D, 2 * D)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(2 * D, D)
        # a bool buffer (no parameter): triu has no export before opset 14
        self.register_buffer("causal", torch.triu(torch.ones(3, 3, dtype=torch.bool), diagonal=1))

    def forward(self, x):
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=-1)
        att = q @ k.transpose(-2, -1) / math.sqrt(D)
        att = att.masked_fill(self.causal, float("-inf")).softmax(-1)
        x = x + self.proj(att @ v)
        return x + self.fc2(self.act(self.fc1(self.ln2(x))))


# module: (constructor, its GELUs (erf), GELUs (tanh), LayerNorms)
MODULES = {
    "gelu": (lambda: Mlp(nn.GELU()), (1, 0, 0)),
    "gelu_tanh": (lambda: Mlp(nn.GELU(approximate="tanh")), (0, 1, 0)),
    "ln": (lambda: Mlp(nn.LayerNorm(D)), (0, 0, 1)),
    "ln_plain": (lambda: Mlp(nn.LayerNorm(D, elementwise_affine=False)), (0, 0, 1)),
    "block": (Block, (1, 0, 2)),
}


def write_tensor(path, arr, name):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(np.ascontiguousarray(arr), name).SerializeToString())


def grads_by_initializer(om, model):
    """d loss / d initializer for the initializers that hold a parameter (as is or
    transposed by constant folding)."""
    out = {}
    params = [(n, p.detach().numpy(), p.grad.numpy()) for n, p in model.named_parameters()]
    by_name = {n: g for n, _, g in params}
    for t in om.graph.initializer:
        arr = numpy_helper.to_array(t)
        if arr.dtype != np.float32:  # the block's causal mask
            continue
        if t.name in by_name:
            out[t.name] = by_name[t.name]
            continue
        for n, p, g in params:
            if arr.shape == p.shape and np.array_equal(arr, p):
                out[t.name] = g
                break
            if p.ndim == 2 and arr.shape == p.T.shape and np.array_equal(arr, p.T):
                out[t.name] = g.T
                break
        else:
            raise SystemExit("initializer %r holds no parameter" % t.name)
    return out


def build(name, make, counts):
    torch.manual_seed(7)
    model = make()
    with torch.no_grad():  # LayerNorm's ones and zeros would hide a swapped scale and bias
        for m in model.modules():
            if isinstance(m, nn.LayerNorm) and m.elementwise_affine:
                m.weight.add_(0.3 * torch.randn_like(m.weight))
                m.bias.add_(0.3 * torch.randn_like(m.bias))
    x = torch.randn(2, 3, D)
    target = torch.randn(2, 3, model(x).shape[-1])
    d = os.path.join(ROOT, name)
    shutil.rmtree(d, ignore_errors=True)
    xr = x.clone().requires_grad_(True)
    y = model(xr)
    loss = ((y - target) ** 2).mean()
    loss.backward()
    write_tensor(os.path.join(d, "x.pb"), x.numpy(), "x")
    write_tensor(os.path.join(d, "target.pb"), target.numpy(), "target")
    write_tensor(os.path.join(d, "y.pb"), y.detach().numpy(), "y")
    write_tensor(os.path.join(d, "loss.pb"), np.array(loss.item(), dtype=np.float32), "loss")
    write_tensor(os.path.join(d, "grads", "x.pb"), xr.grad.numpy(), "x")
    expect = []
    for opset in OPSETS:
        if (name, opset) in SKIP:
            continue
        for mode in ("eval", "train"):
            sub = os.path.join(d, "op%d_%s" % (opset, mode))
            os.makedirs(sub)
            path = os.path.join(sub, "model.onnx")
            kw = dict(training=torch.onnx.TrainingMode.EVAL)
            if mode == "train":
                kw = dict(training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
            torch.onnx.export(model, (x,), path, opset_version=opset, input_names=["x"], output_names=["y"], **kw)
            om = onnx.load(path)
            onnx.checker.check_model(om)
            for n, g in grads_by_initializer(om, model).items():
                write_tensor(os.path.join(sub, "grads", re.sub(r"[^A-Za-z0-9._-]", "_", n) + ".pb"), g, n)
            ln = counts[2] if opset < 17 else 0
            expect.append("op%d_%s %d %d %d" % (opset, mode, counts[0], counts[1], ln))
    with open(os.path.join(d, "expect.txt"), "w") as f:
        f.write("\n".join(expect) + "\n")


def main():
    for name, (make, counts) in MODULES.items():
        build(name, make, counts)
        print("wrote", os.path.relpath(os.path.join(ROOT, name)))


if __name__ == "__main__":
    main()
