#!/usr/bin/python3
"""A small ResNet-style block exported by torch.onnx in training mode, for
tests/cli_train_graph.sh: opset 14 BatchNormalization with training_mode=1 and its
running-statistics outputs, as torch.onnx.export(..., training=TrainingMode.TRAINING)
writes it for torchvision models.  The training step must turn each into
BatchNormInternal with one BatchNormalizationGrad in the backward.

usage: /usr/bin/python3 tools/scripts/make_bn_training_model.py   (torch 1.13, onnx)
writes tests/data/bn_training_mode/model.onnx
"""
import os

import torch
import torch.nn as nn

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data", "bn_training_mode")


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = torch.relu(self.bn2(self.conv2(y)) + y)
        return self.fc(y.mean((2, 3)))


def main():
    torch.manual_seed(0)
    os.makedirs(OUT, exist_ok=True)
    model = Block().train()
    torch.onnx.export(model, torch.randn(4, 3, 8, 8), os.path.join(OUT, "model.onnx"), opset_version=14,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False, input_names=["x"],
                      output_names=["logits"])


if __name__ == "__main__":
    main()
