#!/usr/bin/env python3
"""A torch 2.x export whose optimizer folded BatchNorm into the Conv before it, for
tests/cli_torch2.sh: a Conv-BatchNorm-ReLU-pool-Linear module in train() mode, exported by
torch.onnx.export's default (dynamo) with optimize=True (bn_opt1.onnx) and optimize=False
(bn_opt0.onnx).  The exporter writes BatchNorm in inference form, and its optimizer folds
it away: bn_opt1 computes another function than the module torch trains, holds no
initializer of the exporter's own, and must be refused naming optimize=False; bn_opt0
trains.  Kept apart from tests/data/torch2 (the kit), whose sweeps train every export.

Run with the venv of tools/scripts/torch2_venv.sh:
    build/venv-torch2/bin/python tools/scripts/make_folded_bn_export.py [OUT]
(OUT defaults to tests/data/torch2_folded.)"""
import os
import sys

import torch


class ConvBn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, bias=False)
        self.bn = torch.nn.BatchNorm2d(4)
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        return self.fc(y.mean((2, 3)))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/data/torch2_folded"
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    model = ConvBn().train()
    x = torch.randn(2, 3, 6, 6)
    for optimize in (False, True):
        torch.onnx.export(model, (x,), os.path.join(out, f"bn_opt{int(optimize)}.onnx"), input_names=["x"],
                          output_names=["logits"], optimize=optimize, external_data=False)


if __name__ == "__main__":
    main()
