#!/usr/bin/env python3
"""ONNX Runtime's training step beside ours on today's exports (issue 37).

In:  the torch 2.x exports torch2_peak.py writes into BUILD/torch2_peak (NAME.onnx, its
     external data, and our plan's NAME.onnx.fused.fp32.json); BUILD/onnx-vplan.  Run with
     a Python that has onnxruntime-training (PyPI; 1.19.2 has a wheel for CPython 3.11),
     onnx and numpy: tools/scripts/ort_venv.sh makes one (VP_ORT_PYTHON in run.sh).
Out: on stdout, the markdown section RESULTS.md records: per model ONNX Runtime's peak
     memory over one AdamW training step and its step time, against our arena and our
     CPU step time (`onnx-vplan run --steps`, the same plan as torch2_peak.py's).
Keeps: ONNX Runtime's own path, as its users train: onnxruntime.training.artifacts
     builds the training, eval and optimizer models (AdamW, lr 1e-3, weight decay 0.01,
     PyTorch's defaults; mean cross-entropy over every position, the logits flattened to
     [positions, classes] first, as torch2_peak.py's step takes it), with the exporter's
     parameters (its graph signature) trainable, after two rewrites a user of its
     training would have to make (each computes the same): CastLike as Cast, and
     LayerNormalization's optional Mean and InvStdDev outputs named; onnxruntime.training.api runs them on
     the CPU.  ONNX Runtime keeps its memory in its allocator's arena, which no event
     reports, so its peak is the process's: the high-water mark of resident memory
     (VmHWM, reset through /proc/self/clear_refs before the measured step) less the
     resident memory before the checkpoint was loaded, in a process that has loaded
     nothing else (the artifacts are made in another, whose freed memory would be
     reused unseen): weights, gradients, AdamW's state, activations, the arena's slack,
     and the session's own structures and threads, which the step needs too; an upper
     bound on what its tensors alone would take.  Steps: one warm-up,
     then the peak over the second; time, the median of 5 more.  Where ONNX Runtime
     cannot build or run a model the row says why; it never fails the bench.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
MiB = float(1 << 20)
MODELS = ["llama", "gpt2", "bert", "vit", "resnet18", "qwen2", "gemma", "roberta", "t5", "wav2vec2", "bloom", "opt",
          "deberta_v2"]


def status_kib(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def reset_hwm():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def parameters(model):
    """The exporter's PARAMETER targets that are initializers of the graph."""
    inits = {i.name for i in model.graph.initializer}
    for p in model.graph.metadata_props:
        if p.key.endswith("graph_signature"):
            names = re.findall(r"PARAMETER target='([^']+)'", p.value)
            return [n for n in names if n in inits]
    return []


def layer_norm_outputs(model):
    """Each LayerNormalization with its Mean and InvStdDev outputs named: ONNX Runtime's
    training builds LayerNormalization's gradient from them, and the dynamo exporter
    writes Y alone (opset 17's optional outputs; the values are the same)."""
    for n in model.graph.node:
        if n.op_type == "LayerNormalization" and n.domain in ("", "ai.onnx"):
            while len(n.output) < 3:
                n.output.append(f"{n.name or n.output[0]}_vp_{'mean' if len(n.output) == 1 else 'inv_std'}")
            for k in (1, 2):
                if not n.output[k]:
                    n.output[k] = f"{n.name or n.output[0]}_vp_{'mean' if k == 1 else 'inv_std'}"
    return model


def flatten_logits(model):
    """The model with one output, its logits as [positions, classes]; (positions, classes)."""
    import onnx
    from onnx import helper, TensorProto

    out = model.graph.output[0]
    dims = [d.dim_value for d in out.type.tensor_type.shape.dim]
    if len(dims) < 2 or not all(dims):
        raise ValueError(f"logits of shape {dims}: not static")
    classes = dims[-1]
    positions = 1
    for d in dims[:-1]:
        positions *= d
    shape = helper.make_tensor("vp_flat_shape", TensorProto.INT64, [2], [positions, classes])
    model.graph.initializer.append(shape)
    model.graph.node.append(helper.make_node("Reshape", [out.name, "vp_flat_shape"], ["logits_flat"]))
    flat = helper.make_tensor_value_info("logits_flat", out.type.tensor_type.elem_type, [positions, classes])
    del model.graph.output[:]
    model.graph.output.append(flat)
    onnx.checker.check_model(model)
    return model, positions, classes


def cast_like_to_cast(model):
    """Each CastLike(x, like) as Cast(x, to=like's dtype): ONNX Runtime's training has no
    gradient for CastLike (opset 15), which the dynamo exporter writes for every dtype
    match; the rewrite computes the same, and is what a user of ONNX Runtime would do."""
    import onnx
    from onnx import helper

    inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    types = {v.name: v.type.tensor_type.elem_type
             for v in list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output)}
    types.update({i.name: i.data_type for i in model.graph.initializer})
    for i, n in enumerate(model.graph.node):
        if n.op_type == "CastLike" and n.domain in ("", "ai.onnx"):
            to = types.get(n.input[1], 0)
            if not to:
                raise ValueError(f"CastLike {n.name}: no dtype known for {n.input[1]}")
            model.graph.node[i].CopyFrom(helper.make_node("Cast", [n.input[0]], list(n.output), name=n.name, to=to))
    return model


def ort_artifacts(path, work):
    """ONNX Runtime's training, eval and optimizer models of the export in work, and what
    the measuring process feeds them (work/feed.json)."""
    import onnx
    from onnxruntime.training import artifacts

    model = onnx.load(path)
    params = parameters(model)
    if not params:
        raise ValueError("no parameter in the exporter's signature")
    frozen = [i.name for i in model.graph.initializer if i.name not in params]
    model, positions, classes = flatten_logits(layer_norm_outputs(cast_like_to_cast(model)))
    artifacts.generate_artifacts(model, requires_grad=params, frozen_params=frozen,
                                 loss=artifacts.LossType.CrossEntropyLoss, optimizer=artifacts.OptimType.AdamW,
                                 artifact_directory=work)
    inp = model.graph.input[0]
    with open(os.path.join(work, "feed.json"), "w") as f:
        json.dump({"dims": [d.dim_value for d in inp.type.tensor_type.shape.dim],
                   "ids": inp.type.tensor_type.elem_type == 7, "positions": positions, "classes": classes}, f)


def ort_measure(work):
    """In a process that has loaded nothing else: ONNX Runtime's peak bytes over one step
    and its median step seconds (what the process held before, freed or not, would be
    reused unseen)."""
    import numpy as np
    from onnxruntime.training.api import CheckpointState, Module, Optimizer

    with open(os.path.join(work, "feed.json")) as f:
        feed = json.load(f)
    rng = np.random.default_rng(0)
    if feed["ids"]:
        x = rng.integers(0, feed["classes"], size=feed["dims"], dtype=np.int64)
    else:
        x = rng.standard_normal(feed["dims"]).astype(np.float32)
    labels = rng.integers(0, feed["classes"], size=[feed["positions"]], dtype=np.int64)
    base = status_kib("VmRSS")
    state = CheckpointState.load_checkpoint(os.path.join(work, "checkpoint"))
    module = Module(os.path.join(work, "training_model.onnx"), state, os.path.join(work, "eval_model.onnx"),
                    device="cpu")
    opt = Optimizer(os.path.join(work, "optimizer_model.onnx"), module)
    opt.set_learning_rate(1e-3)
    module.train()

    def step():
        loss = module(x, labels)
        opt.step()
        module.lazy_reset_grad()
        return float(loss)

    step()
    reset_hwm()
    step()
    peak = (status_kib("VmHWM") - base) * 1024
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return peak, statistics.median(times)


def our_step(vplan, path):
    """Our plan's arena (the fused fp32 plan torch2_peak.py wrote) and the CPU step's median seconds."""
    with open(path + ".fused.fp32.json") as f:
        arena = json.load(f)["arena_bytes"]
    with tempfile.TemporaryDirectory() as tmp:
        plan = os.path.join(tmp, "p.vplan")
        subprocess.run([vplan, "plan", path, "--loss", "ce:logits", "--optimizer", "adamw", "-o", plan],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        out = subprocess.run([vplan, "run", plan, "--steps", "6"], check=True, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True).stdout
    secs = [float(s) for s in re.findall(r"^step \d+ .*\(([0-9.]+) s\)", out, re.M)][1:]
    return arena, statistics.median(secs) if secs else float("nan")


def last_json(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    lines = r.stdout.strip().splitlines()
    return json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {"error": f"exit {r.returncode}"}


def child(mode, arg):
    """One model's artifacts (mode "artifacts": arg the export, then its measure in a
    fresh process) or measure (arg the artifacts' folder), as JSON on stdout."""
    try:
        if mode == "measure":
            peak, secs = ort_measure(arg)
            print(json.dumps({"peak": peak, "seconds": secs}))
            return
        with tempfile.TemporaryDirectory() as work:
            ort_artifacts(arg, work)
            print(json.dumps(last_json([sys.executable, os.path.abspath(__file__), "--measure", work])))
    except Exception as e:  # the row says why
        text = " ".join(str(e).split()).replace("|", "/")
        m = (re.search(r"The gradient builder has not been registered: \S+ for node \S+", text) or
             re.search(r"Cannot compute the partial derivative .*", text) or re.search(r"\S+ was false\.?", text))
        print(json.dumps({"error": f"{type(e).__name__}: {(m.group(0) if m else text[-160:])}"[:220]}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--only", nargs="*", help="model names")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--measure", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child or a.measure:
        return child("measure" if a.measure else "artifacts", a.measure or a.child)
    print("## Arena against ONNX Runtime's training step (torch 2.x exports)")
    print()
    try:
        import onnxruntime
        import onnxruntime.training  # noqa: F401
    except ImportError as e:
        print(f"Skipped: {e} for {sys.executable} (make a venv with tools/scripts/ort_venv.sh).")
        return
    vplan = os.path.join(a.build, "onnx-vplan")
    work = os.path.join(a.build, "torch2_peak")
    print(f"onnxruntime-training {onnxruntime.__version__}, CPU, one thread each side's default; one AdamW step "
          "(lr 1e-3, weight decay 0.01), mean cross-entropy over every position; ONNX Runtime's peak: resident "
          "memory's high-water mark over its second step less the resident memory before its checkpoint loaded; "
          "ours: the fused fp32 plan's arena (torch2_peak.py's). Times: medians of 5 steps.")
    print()
    print("| model | ONNX Runtime peak | ours | ours / ORT | ORT ms | ours ms | ours / ORT |")
    print("|---|---|---|---|---|---|---|")
    for name in a.only or MODELS:
        path = os.path.join(work, name + ".onnx")
        if not os.path.exists(path) or not os.path.exists(path + ".fused.fp32.json"):
            print(f"| {name} | no export: run torch2_peak.py first | | | | | |")
            continue
        ort = last_json([sys.executable, os.path.abspath(__file__), "--child", path])
        arena, secs = our_step(vplan, path)
        if "error" in ort:
            print(f"| {name} | {ort['error']} | {arena / MiB:.1f} MiB | | | {1e3 * secs:.1f} | |")
        else:
            print(f"| {name} | {ort['peak'] / MiB:.1f} MiB | {arena / MiB:.1f} MiB | {arena / ort['peak']:.2f} | "
                  f"{1e3 * ort['seconds']:.1f} | {1e3 * secs:.1f} | {secs / ort['seconds']:.2f} |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
