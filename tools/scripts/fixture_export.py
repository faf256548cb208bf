"""What the scripts that make torch.onnx exports with PyTorch fixtures share.

export_with_fixtures writes, into a folder, the layout tests/model_util.c
(test_model_load_fixture_dir, test_model_check_torch) reads:
  model.onnx                 torch.onnx export in eval mode, constant folding off
  meta.json                  input, dims, lr, steps, opset, params (torch names), extra keys, torch
  fixtures/x.pb, labels.pb   one batch, used at every step
  fixtures/logits.pb         the output at the initial parameters
  fixtures/grads/<param>.pb  d(cross-entropy)/d(param) at the initial parameters
  fixtures/losses.pb         float32 [steps]: cross-entropy before each SGD step
"""
import json
import os

import numpy as np
import onnx
from onnx import numpy_helper
import torch
import torch.nn.functional as F


def write_tensor(path, arr, name):
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(np.ascontiguousarray(arr), name=name).SerializeToString())


def export_with_fixtures(d, model, x, labels, opset, lr, steps, batch, batch_axis=0, extra_meta=None):
    """Exports model (input x, output logits) into folder d, trains it `steps` SGD steps on
    (x, labels) and writes the fixtures; returns the loaded ONNX model and the losses."""
    os.makedirs(os.path.join(d, "fixtures", "grads"), exist_ok=True)
    model.eval()
    path = os.path.join(d, "model.onnx")
    torch.onnx.export(model, (x,), path, export_params=True, do_constant_folding=False, opset_version=opset,
                      input_names=["x"], output_names=["logits"],
                      dynamic_axes={"x": {batch_axis: "batch"}, "logits": {0: "batch"}})
    om = onnx.load(path)
    inits = {t.name for t in om.graph.initializer}
    params = [k for k, _ in model.named_parameters()]
    assert all(p in inits for p in params), f"{d}: parameters {params} not all initializers {sorted(inits)}"
    logits = model(x)
    loss = F.cross_entropy(logits, labels)
    loss.backward()
    for k, p in model.named_parameters():
        write_tensor(os.path.join(d, "fixtures", "grads", k + ".pb"), p.grad.numpy(), k)
    write_tensor(os.path.join(d, "fixtures", "logits.pb"), logits.detach().numpy(), "logits")
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), labels)
        losses.append(loss.item())
        loss.backward()
        opt.step()
    write_tensor(os.path.join(d, "fixtures", "x.pb"), x.numpy(), "x")
    write_tensor(os.path.join(d, "fixtures", "labels.pb"), labels.numpy(), "labels")
    write_tensor(os.path.join(d, "fixtures", "losses.pb"), np.array(losses, dtype=np.float32), "losses")
    meta = {"input": "x", "dims": {"batch": batch}, "lr": lr, "steps": steps, "opset": opset, "params": params}
    meta.update(extra_meta or {})
    meta["torch"] = torch.__version__
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    return om, losses
