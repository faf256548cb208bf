#!/usr/bin/python3
"""torch.onnx exports that use Resize and ScatterND, and PyTorch's training fixtures.

Models (tests/data/resample/<name>/):
  unet_<mode>_op<N>   a tiny U-Net: conv, strided conv down, nn.Upsample(scale_factor=2)
                      up, skip Concat, conv, F.interpolate(size=(6, 6)) down, mean, linear;
                      mode nearest, bilinear (align_corners False) or bilinear_ac
                      (align_corners True), at opsets 11, 13 and 17
  scatter_op<N>       x[:, idx] = f(x) style assignment (ScatterND on the gradient path)
                      and a Swin-style constant mask built by slice assignment (ScatterND
                      on constants, which folding evaluates), at opsets 11, 13 and 17
Each folder holds:
  model.onnx          exported in eval mode, constant folding off (our folding must do it)
  meta.json           input, dims, lr, steps, params (torch names, in order)
  fixtures/x.pb, labels.pb   one batch, used at every step
  fixtures/logits.pb  the output at the initial parameters
  fixtures/losses.pb  float32 [steps]: cross-entropy before each SGD step
  fixtures/grads/<param>.pb  d(loss)/d(param) at the initial parameters

Run: /usr/bin/python3 tools/scripts/make_resample_models.py   (torch 1.13, onnx 1.12)
Seeded and single-threaded: a rerun writes the same bytes.
"""
import os

import torch
import torch.nn as nn

from fixture_export import export_with_fixtures
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "data", "resample")
STEPS, LR, BATCH = 2, 0.1, 2
torch.set_num_threads(1)


class UNet(nn.Module):
    def __init__(self, mode, align):
        super().__init__()
        self.mode, self.align = mode, align
        self.enc = nn.Conv2d(3, 4, 3, padding=1)
        self.down = nn.Conv2d(4, 6, 3, stride=2, padding=1)
        self.up = nn.Upsample(scale_factor=2, mode=mode, align_corners=align)
        self.dec = nn.Conv2d(10, 4, 3, padding=1)
        self.head = nn.Linear(4, 5)

    def forward(self, x):
        e = torch.relu(self.enc(x))
        u = self.up(torch.relu(self.down(e)))
        y = torch.relu(self.dec(torch.cat([u, e], 1)))
        y = F.interpolate(y, size=(6, 6), mode=self.mode, align_corners=self.align)
        return self.head(y.mean((2, 3)))


class Scatter(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 6)
        self.upd = nn.Linear(6, 2)
        self.register_buffer("idx", torch.tensor([1, 4]), persistent=False)

    def forward(self, x):
        h = self.lin(x).clone()
        h[:, self.idx] = self.upd(x)
        # Swin-T's shifted-window mask is made like this: slice assignments into zeros
        mask = torch.zeros(1, 6)
        cnt = 0
        for s in (slice(0, 2), slice(2, 4), slice(4, None)):
            mask[:, s] = cnt
            cnt += 1
        return h * (1 + mask)


def export(name, model, x, labels, opset, want_ops):
    om, losses = export_with_fixtures(os.path.join(OUT, name), model, x, labels, opset, LR, STEPS, BATCH,
                                      extra_meta={"ops": sorted(want_ops)})
    ops = {n.op_type for n in om.graph.node}
    assert want_ops <= ops, f"{name}: expected {want_ops} in {sorted(ops)}"
    counts = {op: sum(n.op_type == op for n in om.graph.node) for op in sorted(want_ops)}
    print(f"{name}: {counts}, losses {losses}")


def main():
    for opset in (11, 13, 17):
        for tag, mode, align in (("nearest", "nearest", None), ("bilinear", "bilinear", False),
                                 ("bilinear_ac", "bilinear", True)):
            torch.manual_seed(opset)
            model = UNet(mode, align)
            x = torch.randn(BATCH, 3, 8, 8)
            labels = torch.randint(0, 5, (BATCH,))
            export(f"unet_{tag}_op{opset}", model, x, labels, opset, {"Resize"})
        torch.manual_seed(opset)
        model = Scatter()
        x = torch.randn(BATCH, 6)
        labels = torch.randint(0, 6, (BATCH,))
        export(f"scatter_op{opset}", model, x, labels, opset, {"ScatterND"})


if __name__ == "__main__":
    main()
