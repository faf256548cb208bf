#!/usr/bin/env python3
"""First-step gradients against torch's, from one plain SGD step of lr 1.

`onnx-vplan train --optimizer sgd --lr 1 --steps 1 --save OUT` leaves each parameter at
w - g: g is the export's initial weight minus the saved one.  Every parameter torch
lists with a gradient (tools/scripts/export_torch2_models.py's torch.json,
grad_norms_step0, by module path) must be in both files under that name, or tied to one
that is (torch lists a tied parameter once), and |g| must be torch's within 1e-4 of it
(plus 1e-6 absolute: the subtraction's rounding in float32).
usage: torch2_grads.py EXPORT.onnx SAVED.onnx TORCH.json"""
import json
import sys

import numpy as np
import onnx
from onnx import numpy_helper


def weights(path):
    return {i.name: numpy_helper.to_array(i).astype(np.float64) for i in onnx.load(path).graph.initializer}


def main(export, saved, torch_json):
    w0, w1 = weights(export), weights(saved)
    want = json.load(open(torch_json))["grad_norms_step0"]
    bad, checked = [], 0
    for name, norm in want.items():
        if name not in w0 or name not in w1:
            continue  # tied: trained through the name the graph holds, checked there
        g = float(np.linalg.norm(w0[name] - w1[name]))
        checked += 1
        if not abs(g - norm) <= 1e-4 * norm + 1e-6:
            bad.append(f"{name}: |g| {g:.6g}, torch {norm:.6g}")
    if checked < len(want) - 2:
        bad.append(f"only {checked} of torch's {len(want)} parameters found by name")
    if bad:
        sys.exit("; ".join(bad[:4]))
    print(f"{checked} gradients within 1e-4 of torch's")


if __name__ == "__main__":
    main(*sys.argv[1:4])
