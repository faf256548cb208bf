#!/usr/bin/env python3
"""Compares a model's logits, as `onnx-vplan eval --output-dir` wrote them (a TensorProto),
with torch's (raw float32, tools/scripts/export_torch2_models.py's logits_after.bin).
Passes within float32 noise: |ours - torch| <= 1e-4 * max(1, max |torch|) everywhere.
usage: torch2_logits.py OURS.pb TORCH.bin"""
import sys

import numpy as np
import onnx
from onnx import numpy_helper


def main(ours_pb, torch_bin):
    t = onnx.TensorProto()
    with open(ours_pb, "rb") as f:
        t.ParseFromString(f.read())
    ours = numpy_helper.to_array(t).astype(np.float32).ravel()
    ref = np.fromfile(torch_bin, dtype=np.float32)
    if ours.size != ref.size:
        sys.exit(f"{ours.size} logits, torch has {ref.size}")
    if not np.isfinite(ours).all():
        sys.exit("non-finite logits")
    scale = max(1.0, float(np.abs(ref).max()))
    err = float(np.abs(ours - ref).max())
    if not err <= 1e-4 * scale:
        sys.exit(f"logits {err:.3g} off torch's (bound {1e-4 * scale:.3g})")
    print(f"logits within {err:.3g} of torch's")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
