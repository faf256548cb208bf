#!/usr/bin/env python3
"""ONNX Runtime training artifacts of models/mlp, for tests/test_ort_artifacts.c.

Runs onnxruntime.training.artifacts.generate_artifacts on models/mlp/model.onnx with
every parameter trainable, CrossEntropyLoss and AdamW, and writes to
models/mlp/ort_artifacts/:

  training_model.onnx    forward, loss, backward; parameters are graph inputs, and each
                         gradient goes into its accumulation buffer through
                         com.microsoft.InPlaceAccumulatorV2
  eval_model.onnx        forward and loss
  optimizer_model.onnx   ONNX Runtime's AdamW step
  checkpoint             the parameters, in ONNX Runtime's flatbuffer format
  ort_loss.pb, ort_grads/<param>.pb
                         the loss and the gradients ONNX Runtime itself computes with
                         training_model.onnx on fixtures/x.pb and labels.pb (the
                         gradient values made graph outputs and run in an
                         InferenceSession): a second reference beside our own autodiff

The package is onnxruntime-training (PyPI; 1.19.2 has a wheel for CPython 3.11 on
x86_64 Linux).  Install it in a venv that sees Debian's torch and onnx:

  /usr/bin/python3 -m venv /tmp/ortvenv --system-site-packages
  /tmp/ortvenv/bin/pip install onnxruntime-training
  /tmp/ortvenv/bin/python tools/scripts/make_ort_artifacts.py        # from the repository root

Rerunning rewrites the same files (md5sum-stable with the same package version).

The other direction, ours loading there:

  /tmp/ortvenv/bin/python tools/scripts/make_ort_artifacts.py --check-ours build/onnx-vplan

writes each model's training graph with `onnx-vplan train-graph --no-optimizer` (standard
ONNX plus com.microsoft gradient ops), runs it in an onnxruntime InferenceSession on the
model's fixtures and compares the loss and the gradients (found by the file's
vplan.gradients metadata) with torch's; it writes nothing into the repository.  (With an
optimizer the graph has our vplan-domain update nodes, which ONNX Runtime does not know.)
"""
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import numpy_helper

try:
    import onnxruntime

    onnxruntime.set_default_logger_severity(3)  # the graph transformers log every pass at info
    from onnxruntime.training import artifacts
except ImportError as e:  # pragma: no cover - depends on the machine
    sys.exit(f"make_ort_artifacts.py: onnxruntime-training is not installed ({e}); see the docstring")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "models", "mlp")
OUT = os.path.join(MODEL, "ort_artifacts")


def main():
    model = onnx.load(os.path.join(MODEL, "model.onnx"))
    params = [t.name for t in model.graph.initializer]  # the mlp has no buffers
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    # the graph builder logs every transformer pass at info level from C++, whatever the
    # Python logger says: its stderr is silenced for the call (exceptions still surface)
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        artifacts.generate_artifacts(
            model,
            requires_grad=params,
            frozen_params=[],
            loss=artifacts.LossType.CrossEntropyLoss,
            optimizer=artifacts.OptimType.AdamW,
            artifact_directory=OUT,
        )
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)

    # ONNX Runtime's own loss and gradients on the fixtures: the gradient values (the
    # accumulators' second input) become graph outputs of a copy, run for inference.
    train = onnx.load(os.path.join(OUT, "training_model.onnx"))
    g = train.graph
    grads = {}
    for n in g.node:
        if n.op_type == "InPlaceAccumulatorV2":
            param = n.input[0][: -len("_grad.accumulation.buffer")]
            grads[param] = n.input[1]
    assert sorted(grads) == sorted(params), (sorted(grads), sorted(params))
    loss_name = g.output[0].name
    for p in params:
        g.output.append(onnx.helper.make_empty_tensor_value_info(grads[p]))
    sess = onnxruntime.InferenceSession(train.SerializeToString(), providers=["CPUExecutionProvider"])
    feed = {
        "x": numpy_helper.to_array(onnx.load_tensor(os.path.join(MODEL, "fixtures", "x.pb"))),
        "labels": numpy_helper.to_array(onnx.load_tensor(os.path.join(MODEL, "fixtures", "labels.pb"))),
        "lazy_reset_grad": np.array([True]),
    }
    for t in model.graph.initializer:
        w = numpy_helper.to_array(t)
        feed[t.name] = w
        feed[t.name + "_grad.accumulation.buffer"] = np.zeros_like(w)
    names = [loss_name] + [grads[p] for p in params]
    res = dict(zip(names, sess.run(names, feed)))
    onnx.save_tensor(numpy_helper.from_array(np.asarray(res[loss_name], np.float32), "loss"), os.path.join(OUT, "ort_loss.pb"))
    os.makedirs(os.path.join(OUT, "ort_grads"))
    for p in params:
        onnx.save_tensor(numpy_helper.from_array(res[grads[p]], p), os.path.join(OUT, "ort_grads", p + ".pb"))

    # against torch's fixtures, for orientation
    torch_loss = numpy_helper.to_array(onnx.load_tensor(os.path.join(MODEL, "fixtures", "loss.pb")))
    worst = 0.0
    for p in params:
        ref = numpy_helper.to_array(onnx.load_tensor(os.path.join(MODEL, "fixtures", "grads", p + ".pb")))
        worst = max(worst, float(np.max(np.abs(res[grads[p]] - ref)) / (np.max(np.abs(ref)) + 1e-30)))
    print(f"onnxruntime-training {onnxruntime.__version__}: wrote {OUT}")
    print(f"  loss {float(res[loss_name]):.7f} (torch {float(torch_loss):.7f}); worst gradient difference from torch {worst:.2g}")
    for f in sorted(os.listdir(OUT)):
        print(f"  {f}")


def check_ours(tool):
    """ONNX Runtime runs our --no-optimizer training graphs; returns the failure count."""
    failures = 0
    freeze = {"gpt": "^causal_mask$", "gpt_ln_decomposed": "^causal_mask$"}
    with tempfile.TemporaryDirectory() as tmp:
        for name in sorted(os.listdir(os.path.join(ROOT, "models"))):
            fx = os.path.join(ROOT, "models", name, "fixtures")
            if not os.path.isfile(os.path.join(ROOT, "models", name, "meta.json")):
                continue
            out = os.path.join(tmp, name + ".onnx")
            cmd = [tool, "train-graph", os.path.join(ROOT, "models", name, "model.onnx"), "--dim", "batch=4",
                   "--loss", "ce:logits", "--no-optimizer", "-o", out]
            if name in freeze:
                cmd += ["--freeze", freeze[name]]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            model = onnx.load(out)
            onnx.checker.check_model(model, full_check=True)
            meta = {e.key: e.value for e in model.metadata_props}
            sess = onnxruntime.InferenceSession(out, providers=["CPUExecutionProvider"])
            feed = {}
            for i in sess.get_inputs():
                f = "labels.pb" if i.name == "labels" else "x.pb"
                feed[i.name] = numpy_helper.to_array(onnx.load_tensor(os.path.join(fx, f)))
            res = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feed)))
            loss = float(res[meta["vplan.loss"]])
            ref = float(numpy_helper.to_array(onnx.load_tensor(os.path.join(fx, "loss.pb"))))
            worst = 0.0
            for line in meta["vplan.gradients"].strip().split("\n"):
                param, grad = line.split("\t")
                r = numpy_helper.to_array(onnx.load_tensor(os.path.join(fx, "grads", param + ".pb")))
                worst = max(worst, float(np.max(np.abs(res[grad] - r)) / (np.max(np.abs(r)) + 1e-30)))
            ok = abs(loss - ref) <= 1e-5 * abs(ref) and worst <= 1e-4
            failures += not ok
            print(f"{'PASS' if ok else 'FAIL'} {name}: onnx.checker full_check ok; ONNX Runtime {onnxruntime.__version__} "
                  f"runs it: loss {loss:.7f} (torch {ref:.7f}), worst gradient difference from torch {worst:.2g}")
    return failures


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--check-ours":
        sys.exit(1 if check_ours(sys.argv[2]) else 0)
    if len(sys.argv) != 1:
        sys.exit("usage: make_ort_artifacts.py [--check-ours PATH/onnx-vplan]")
    main()
