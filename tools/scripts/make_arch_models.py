#!/usr/bin/python3
"""torch.onnx exports of architectures with wide fan-in, shifted windows and Loop, and
PyTorch's training fixtures (issue #20).

Models (tests/data/arch/<name>/):
  densenet_op13    a DenseNet-style dense block of 70 layers (ReLU, 1x1 conv, growth 2),
                   each reading the Concat of every feature map before it, as
                   torchvision's DenseNet does: Concats of up to 71 inputs on the gradient
                   path, their gradient a Split of as many outputs
  swin_op<N>       a 2x2 patch embedding and two torchvision SwinTransformerBlocks (window
                   2, shift 0 then 1): torch.roll as Slice+Concat, the shifted-window mask
                   built by slice assignment (ScatterND on constants that folding evaluates),
                   relative position bias gathered from its table, LayerNorm, GELU MLP
  embbag_<mode>_op<N>  nn.EmbeddingBag(mode) over fixed-length bags, then a Linear: torch
                   exports the bag as a Loop over the batch (trip count known once the
                   batch is bound), its body a Slice, a Gather and a reduction
swin and embbag at opsets 13 and 17.  Each folder holds what fixture_export.export_with_fixtures writes.

Run: /usr/bin/python3 tools/scripts/make_arch_models.py   (torch 1.13, torchvision 0.14)
Seeded and single-threaded: a rerun writes the same bytes.
"""
import os

import torch
import torch.nn as nn
from torchvision.models.swin_transformer import SwinTransformerBlock

from fixture_export import export_with_fixtures

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "data", "arch")
STEPS, LR, BATCH = 2, 0.1, 2
torch.set_num_threads(1)


class DenseBlock(nn.Module):
    def __init__(self, layers=70, c0=4, growth=2, classes=5):
        super().__init__()
        self.stem = nn.Conv2d(3, c0, 3, padding=1)
        self.layers = nn.ModuleList(nn.Conv2d(c0 + i * growth, growth, 1) for i in range(layers))
        self.head = nn.Linear(c0 + layers * growth, classes)

    def forward(self, x):
        feats = [self.stem(x)]
        for conv in self.layers:
            feats.append(conv(torch.relu(torch.cat(feats, 1))))
        return self.head(torch.relu(torch.cat(feats, 1)).mean((2, 3)))


class Swin(nn.Module):
    def __init__(self, dim=8, heads=2, classes=5):
        super().__init__()
        self.embed = nn.Conv2d(3, dim, 2, stride=2)
        self.blocks = nn.Sequential(SwinTransformerBlock(dim, heads, [2, 2], [0, 0], mlp_ratio=2.0),
                                    SwinTransformerBlock(dim, heads, [2, 2], [1, 1], mlp_ratio=2.0))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)
        # torch.onnx writes parameters of equal value once; LayerNorms as built are all
        # ones and zeros, so each gets its own values (and the fixture tests them)
        for m in self.modules():
            if isinstance(m, nn.LayerNorm):
                nn.init.normal_(m.weight, 1.0, 0.1)
                nn.init.normal_(m.bias, 0.0, 0.1)

    def forward(self, x):
        h = self.embed(x).permute(0, 2, 3, 1)
        h = self.norm(self.blocks(h))
        return self.head(h.mean((1, 2)))


class Bag(nn.Module):
    def __init__(self, mode, vocab=20, dim=4, classes=3):
        super().__init__()
        self.bag = nn.EmbeddingBag(vocab, dim, mode=mode)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        return self.head(self.bag(x))


def export(name, model, x, labels, opset, want_ops):
    om, losses = export_with_fixtures(os.path.join(OUT, name), model, x, labels, opset, LR, STEPS, BATCH,
                                      extra_meta={"ops": sorted(want_ops)})
    ops = {n.op_type for n in om.graph.node}
    assert want_ops <= ops, f"{name}: expected {want_ops} in {sorted(ops)}"
    counts = {op: sum(n.op_type == op for n in om.graph.node) for op in sorted(want_ops)}
    print(f"{name}: {counts}, {len(om.graph.node)} nodes, losses {losses}")


def main():
    torch.manual_seed(13)
    export("densenet_op13", DenseBlock(), torch.randn(BATCH, 3, 4, 4), torch.randint(0, 5, (BATCH,)), 13, {"Concat"})
    for opset in (13, 17):
        torch.manual_seed(opset)
        export(f"swin_op{opset}", Swin(), torch.randn(BATCH, 3, 8, 8), torch.randint(0, 5, (BATCH,)), opset,
               {"ScatterND", "Softmax"})
        for mode in ("sum", "mean", "max"):
            torch.manual_seed(opset)
            export(f"embbag_{mode}_op{opset}", Bag(mode), torch.randint(0, 20, (BATCH, 5)),
                   torch.randint(0, 3, (BATCH,)), opset, {"Loop"})


if __name__ == "__main__":
    main()
