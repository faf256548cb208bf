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
  pool         Conv -> ReLU -> MaxPool(3, 2, pad 1) -> Conv -> ReLU -> MaxPool(2, ceil)
               -> Flatten -> Linear, input [2, 3, 9, 9]: the gradients of MaxPool of a
               ReLU output (planner/train/fuse_pool_grad.c, after autodiff)

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
  expect.txt           "op<N>_<mode> <gelu> <fast_gelu> <layer_norm> <pool>": the fusions
                       the passes must make in each export: the module's GELUs and
                       LayerNorms (none of the LayerNorms at opset 17, where torch writes
                       the op) and its MaxPools of a ReLU output

usage: /usr/bin/python3 tools/scripts/make_fusion_models.py [MODULE ...]
       (torch 1.13, onnx 1.12; every module when none is named)
"""
import math
import os
import re
import shutil
import sys

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


class Pool(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 3, padding=1)
        self.conv2 = nn.Conv2d(4, 4, 3)
        self.fc = nn.Linear(4 * 2 * 2, 5)

    def forward(self, x):
        x = nn.functional.max_pool2d(torch.relu(self.conv1(x)), 3, 2, padding=1)
        x = nn.functional.max_pool2d(torch.relu(self.conv2(x)), 2, ceil_mode=True)
        return self.fc(x.flatten(1))


# module: (constructor, its GELUs (erf), GELUs (tanh), LayerNorms, MaxPools of a ReLU;
# its input's shape)
MODULES = {
    "gelu": (lambda: Mlp(nn.GELU()), (1, 0, 0, 0), (2, 3, D)),
    "gelu_tanh": (lambda: Mlp(nn.GELU(approximate="tanh")), (0, 1, 0, 0), (2, 3, D)),
    "ln": (lambda: Mlp(nn.LayerNorm(D)), (0, 0, 1, 0), (2, 3, D)),
    "ln_plain": (lambda: Mlp(nn.LayerNorm(D, elementwise_affine=False)), (0, 0, 1, 0), (2, 3, D)),
    "block": (Block, (1, 0, 2, 0), (2, 3, D)),
    "pool": (Pool, (0, 0, 0, 2), (2, 3, 9, 9)),
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


def build(name, make, counts, shape):
    torch.manual_seed(7)
    model = make()
    with torch.no_grad():  # LayerNorm's ones and zeros would hide a swapped scale and bias
        for m in model.modules():
            if isinstance(m, nn.LayerNorm) and m.elementwise_affine:
                m.weight.add_(0.3 * torch.randn_like(m.weight))
                m.bias.add_(0.3 * torch.randn_like(m.bias))
    x = torch.randn(*shape)
    target = torch.randn(*model(x).shape)
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
            expect.append("op%d_%s %d %d %d %d" % (opset, mode, counts[0], counts[1], ln, counts[3]))
    with open(os.path.join(d, "expect.txt"), "w") as f:
        f.write("\n".join(expect) + "\n")


def main():
    names = sys.argv[1:] or list(MODULES)
    for name in names:
        if name not in MODULES:
            raise SystemExit("unknown module %r (modules: %s)" % (name, ", ".join(MODULES)))
        make, counts, shape = MODULES[name]
        build(name, make, counts, shape)
        print("wrote", os.path.relpath(os.path.join(ROOT, name)))


if __name__ == "__main__":
    main()
