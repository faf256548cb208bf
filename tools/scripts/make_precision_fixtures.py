#!/usr/bin/python3
"""PyTorch CPU autocast fixtures for mixed-precision training (tests/test_precision.c).

For every model in models/ (mlp, cnn, gpt, gpt_ln_decomposed): the model rebuilt from models/make_models.py, its
weights loaded from the committed model.onnx (initializers are named as the
state_dict), fed fixtures/x.pb and fixtures/labels.pb, trained 20 steps with
torch.optim.AdamW (lr 1e-3, PyTorch's defaults otherwise) with the forward under
torch.autocast("cpu", dtype=torch.bfloat16), and, for comparison, in float32.
The loss is cross-entropy of the logits cast to float32 over the last axis, mean over
every leading position (the GPTs' [batch, 16] next tokens), as `--loss ce:logits`
builds it (the loss runs in float32, as onnx-vplan's precision pass places it).
models/gpt and models/gpt_ln_decomposed are the same module with the same weights
(only the export differs), so their fixtures are the same curves.  Writes
models/<name>/fixtures/train_adamw_bf16.json: {"losses": [...bf16...],
"losses_fp32": [...], ...}, the loss before each update.

Run with Debian's Python (torch 1.13): /usr/bin/python3 tools/scripts/make_precision_fixtures.py
Seeded, single-threaded, deterministic: a rerun writes the same bytes.
"""

import json
import os
import sys

import onnx
from onnx import numpy_helper
import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "models"))
import make_models  # noqa: E402  (the model classes; importing runs nothing)

STEPS = 20
LR = 1e-3

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)


def load_tensor(path):
    return torch.from_numpy(numpy_helper.to_array(onnx.load_tensor(path)).copy())


def load_model(name, cls):
    model = cls()
    om = onnx.load(os.path.join(ROOT, "models", name, "model.onnx"))
    state = {t.name: torch.from_numpy(numpy_helper.to_array(t).copy()) for t in om.graph.initializer}
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected, unexpected
    assert all(k.endswith("num_batches_tracked") for k in missing), missing
    return model


def curve(name, cls, dtype):
    model = load_model(name, cls)
    model.train()
    fix = os.path.join(ROOT, "models", name, "fixtures")
    x, labels = load_tensor(os.path.join(fix, "x.pb")), load_tensor(os.path.join(fix, "labels.pb"))
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype is not None):
            logits = model(x)
        logits = logits.float()
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
        losses.append(float(loss.item()))
        loss.backward()
        opt.step()
    return losses


def main():
    for name, cls in (("mlp", make_models.MLP), ("cnn", make_models.CNN), ("gpt", make_models.GPT),
                      ("gpt_ln_decomposed", make_models.GPT)):
        bf16 = curve(name, cls, torch.bfloat16)
        fp32 = curve(name, cls, None)
        out = {"optimizer": "adamw", "lr": LR, "betas": [0.9, 0.999], "eps": 1e-08, "weight_decay": 0.01,
               "autocast": "cpu bfloat16", "torch": torch.__version__, "losses": bf16, "losses_fp32": fp32}
        path = os.path.join(ROOT, "models", name, "fixtures", "train_adamw_bf16.json")
        with open(path, "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")
        gap = max(abs(a - b) for a, b in zip(bf16, fp32))
        print(f"{name}: bf16 {bf16[0]:.6f} .. {bf16[-1]:.6f}, fp32 {fp32[0]:.6f} .. {fp32[-1]:.6f}, "
              f"largest bf16-fp32 gap {gap:.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
