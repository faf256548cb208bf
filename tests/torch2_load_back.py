#!/usr/bin/env python3
"""The weights `onnx-vplan train --save` writes load back into the torch model by name.

For every model of the torch 2.x kit (tests/data/torch2): train its optimize=False export
3 steps as torch did (SGD, momentum 0.9, lr 0.01), save, then build the same torch model
from its config (tools/scripts/export_torch2_models.py, seed 0), load every initializer of
the saved model whose name is a key of the model's state_dict (the exporter names
initializers by module path, torch.export's signature targets), and require
  - every parameter and buffer torch has to be loaded, or tied to one that was;
  - torch's logits of the loaded model (eval mode: BatchNorm reads the carried running
    statistics) within 1e-4 of torch's own after its own 3 steps (logits_after.bin).
Needs PyPI's torch 2.x and transformers (tools/scripts/torch2_venv.sh); exits 77 (skip)
without them.
usage: torch2_load_back.py ONNX_VPLAN SOURCE_DIR"""
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import onnx
    import torch
    from onnx import numpy_helper
except ImportError as e:
    print(f"skip: {e} (run with the venv of tools/scripts/torch2_venv.sh)")
    sys.exit(77)


def main(tool, src):
    sys.path.insert(0, os.path.join(src, "tools", "scripts"))
    import export_torch2_models as kit
    kit.torchvision_models()
    root = os.path.join(src, "tests", "data", "torch2")
    fails = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in sorted(os.listdir(root)):
            d = os.path.join(root, name)
            if name not in kit.MODELS or not os.path.exists(os.path.join(d, "eval_opt0.onnx")):
                continue
            saved = os.path.join(tmp, name + ".onnx")
            r = subprocess.run([tool, "train", os.path.join(d, "eval_opt0.onnx"), "--loss", "ce:logits", "--optimizer",
                                "momentum", "--lr", "0.01", "--steps", str(kit.STEPS), "--data", d, "--save", saved],
                               capture_output=True, text=True)
            if r.returncode:
                print(f"FAIL {name}: train exit {r.returncode}: {r.stderr.strip()[-300:]}")
                fails += 1
                continue
            torch.manual_seed(0)
            model, inputs, _ = kit.MODELS[name]()
            state = model.state_dict()
            weights = {i.name: numpy_helper.to_array(i) for i in onnx.load(saved).graph.initializer}
            loaded = {k: torch.from_numpy(np.array(weights[k])).reshape(state[k].shape) for k in state if k in weights}
            model.load_state_dict(loaded, strict=False)
            # a key not saved must share its storage with one that was (tied embeddings)
            ptrs = {state[k].data_ptr() for k in loaded}
            missing = [k for k in state if k not in loaded and state[k].data_ptr() not in ptrs]
            missing = [k for k in missing if state[k].dtype.is_floating_point]
            model.eval()
            with torch.no_grad():
                ours = model(*inputs.values()).float().numpy().ravel()
            ref = np.fromfile(os.path.join(d, "logits_after.bin"), dtype=np.float32)
            err = float(np.abs(ours - ref).max())
            bound = 1e-4 * max(1.0, float(np.abs(ref).max()))
            if missing or not err <= bound:
                print(f"FAIL {name}: {len(loaded)} tensors loaded by name, not loaded {missing[:3]}, logits {err:.3g} "
                      f"off torch's (bound {bound:.3g})")
                fails += 1
            else:
                print(f"ok {name}: {len(loaded)} tensors loaded by name, logits within {err:.3g} of torch's")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
