#!/usr/bin/python3
"""Training-mode exports of models/'s CNN and PyTorch's running statistics after training.

torch.onnx.export(..., training=TrainingMode.TRAINING) writes BatchNormalization with
training_mode=1 and three outputs (Y, running_mean, running_var), the form a user gets
when exporting a module in train().  For opsets 14 and 15 this writes
tests/data/bn_train_export/opset<N>/:
  model.onnx             the export (params and running statistics as initializers)
  x.pb, labels.pb        one batch, used at every step
  losses.pb              float32 [STEPS]: cross-entropy before each SGD step
  stats/<buffer>.pb      every running_mean / running_var after STEPS steps
  meta.json              params (trainable count), buffers, steps, lr

Run: /usr/bin/python3 tools/scripts/make_bn_train_export.py   (torch 1.13, onnx 1.12)
Seeded and single-threaded: a rerun writes the same bytes.
"""
import json
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper
import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "models"))
import make_models  # noqa: E402  (the CNN the bundled model was made from)

OUT = os.path.join(ROOT, "tests", "data", "bn_train_export")
STEPS, LR, BATCH = 3, 0.1, 4
torch.set_num_threads(1)


def write_tensor(path, arr, name):
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(np.ascontiguousarray(arr), name=name).SerializeToString())


def main():
    for opset in (14, 15):
        make_models.seeded(1)
        model = make_models.make_cnn()
        x = torch.randn(BATCH, 3, 16, 16)
        labels = torch.randint(0, 10, (BATCH,))
        d = os.path.join(OUT, f"opset{opset}")
        os.makedirs(os.path.join(d, "stats"), exist_ok=True)
        model.train()
        state = {k: v.clone() for k, v in model.state_dict().items()}
        torch.onnx.export(model, (x,), os.path.join(d, "model.onnx"), export_params=True,
                          do_constant_folding=False, opset_version=opset, input_names=["x"],
                          output_names=["logits"], dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}},
                          training=torch.onnx.TrainingMode.TRAINING)
        # Tracing ran the module in train mode, so the exported running statistics are
        # one update ahead of the module's initial ones: write the initial ones back, and
        # train the module from the same state.
        model.load_state_dict(state)
        om = onnx.load(os.path.join(d, "model.onnx"))
        for t in om.graph.initializer:
            if t.name in state:
                if t.name.endswith(("running_mean", "running_var")):
                    t.CopyFrom(numpy_helper.from_array(state[t.name].numpy(), name=t.name))
                assert np.array_equal(numpy_helper.to_array(t), state[t.name].numpy()), t.name
        onnx.save(om, os.path.join(d, "model.onnx"))
        bns = [n for n in om.graph.node if n.op_type == "BatchNormalization"]
        assert bns and all(len(n.output) == 3 for n in bns), "expected training-mode BatchNormalization"
        opt = torch.optim.SGD(model.parameters(), lr=LR)
        losses = []
        for _ in range(STEPS):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), labels)
            losses.append(loss.item())
            loss.backward()
            opt.step()
        write_tensor(os.path.join(d, "x.pb"), x.numpy(), "x")
        write_tensor(os.path.join(d, "labels.pb"), labels.numpy(), "labels")
        write_tensor(os.path.join(d, "losses.pb"), np.array(losses, dtype=np.float32), "losses")
        buffers = [k for k, _ in model.named_buffers() if k.endswith(("running_mean", "running_var"))]
        for k in buffers:
            write_tensor(os.path.join(d, "stats", k + ".pb"), dict(model.named_buffers())[k].numpy(), k)
        meta = {"params": sum(p.numel() for p in model.parameters()), "buffers": buffers,
                "steps": STEPS, "lr": LR, "opset": opset, "torch": torch.__version__}
        with open(os.path.join(d, "meta.json"), "w") as f:
            json.dump(meta, f, indent=1)
            f.write("\n")
        print(f"opset {opset}: {len(bns)} BatchNormalization, losses {losses}")


if __name__ == "__main__":
    main()
