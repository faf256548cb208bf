#!/usr/bin/python3
"""Our CPU step time against PyTorch eager's for the same training step (issue #21).

In:  the torch.onnx exports of tools/scripts/export_torch_models.py (BUILD/torch_models,
     opset 17, made when missing) and the bundled models/, at batch 8; BUILD/onnx-vplan.
Out: on stdout, the markdown section tools/bench/run.sh records in RESULTS.md: per model
     our step time (`onnx-vplan run` of `plan --optimizer adam`, OpenMP's default
     threads, and 1 thread), PyTorch eager's at 1 and at the machine's threads, and
     ours / PyTorch's best, for each repeat and their median.
Keeps: both sides run one step: forward, softmax cross-entropy (mean over every
     position), backward, Adam (lr 1e-3) -- torch_peak.py's Step, Dropout off as in
     the eval-mode exports.  Step time is the median over --steps steps after one
     warm-up step (ours: the first step creates the oneDNN primitives).  Each repeat
     measures every side back to back, so the machine's load is shared; the ratio is
     taken within a repeat.  Both sides wait for work the same way: OMP_WAIT_POLICY
     (passive unless set, as `onnx-vplan run` chooses) is set before torch loads libgomp.
     Never fails the bench: a side that cannot run says so.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
EXPORTS = ("mlp", "resnet18", "mobilenet_v2", "gpt")
BUNDLED = ("mlp", "cnn", "gpt", "gpt_ln_decomposed")
BATCH = 8


def import_path(name, path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def plan_file(vplan, onnx_path, freeze, out):
    cmd = [vplan, "plan", onnx_path, "--dim", f"batch={BATCH}", "--loss", "ce:logits", "--optimizer", "adam",
           "-o", out]
    if freeze:
        cmd += ["--freeze", freeze]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        lines = [l for l in r.stdout.splitlines() if l.strip()]
        return lines[-1] if lines else f"exit {r.returncode}"
    return None


def ours_ms(vplan, plan, steps, threads, extra=()):
    """Median step time in ms of `onnx-vplan run` (first step left out), or an error."""
    env = dict(os.environ)
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
        env["OPENBLAS_NUM_THREADS"] = str(threads)
    with tempfile.NamedTemporaryFile(suffix=".json") as j:
        r = subprocess.run([vplan, "run", plan, "--steps", str(steps + 1), "--json", j.name, *extra],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        if r.returncode != 0:
            return None, (r.stdout.strip().splitlines() or ["exit %d" % r.returncode])[-1]
        with open(j.name) as f:
            secs = json.load(f)["step_seconds"][1:]
    return statistics.median(secs) * 1e3, None


def torch_ms(step, steps, threads):
    import torch

    torch.set_num_threads(threads)
    step.run()
    ts = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step.run()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


def cases(a, ep, tp, out_dir):
    """(label, module, x, labels, onnx path, freeze) of every model asked for."""
    import warnings

    warnings.filterwarnings("ignore")
    want = set(a.models.split(",")) if a.models else None
    try:
        import torchvision  # noqa: F401
        exports = list(EXPORTS)
    except ImportError:
        exports = [m for m in EXPORTS if m in ("mlp", "gpt")]
    for name in exports:
        if want and "export/" + name not in want:
            continue
        path = os.path.join(out_dir, f"{name}-op17.onnx")
        meta_path = path[:-len(".onnx")] + ".json"
        if not (os.path.exists(path) and os.path.exists(meta_path)):
            path = ep.export(name, out_dir, 17, False, log=sys.stderr)
        with open(meta_path) as f:
            meta = json.load(f)
        model, x, labels, _ = ep.build_model(name)
        yield f"{name} (torch.onnx)", model, x, labels, path, meta["freeze"]
    mm = tp.import_make_models()
    for name in BUNDLED:
        if want and "models/" + name not in want:
            continue
        model, x, labels = tp.bundled_model(mm, name, BATCH)
        with open(os.path.join(ROOT, "models", name, "meta.json")) as f:
            buffers = json.load(f)["buffers"]
        frozen = [b for b in ep.frozen_buffers(model) if b in buffers]
        freeze = "|".join(f"^{b.replace('.', '[.]')}$" for b in frozen) or None
        yield f"models/{name}", model, x, labels, os.path.join(ROOT, "models", name, "model.onnx"), freeze


def section(a):
    print("## CPU step time against PyTorch eager")
    print()
    try:
        import torch
    except ImportError:
        print("Skipped: torch is not installed for %s." % sys.executable)
        return
    ep = import_path("export_torch_models", os.path.join(ROOT, "tools", "scripts", "export_torch_models.py"))
    tp = import_path("torch_peak", os.path.join(HERE, "torch_peak.py"))
    vplan = os.path.join(a.build, "onnx-vplan")
    out_dir = os.path.join(a.build, "torch_models")
    os.makedirs(out_dir, exist_ok=True)
    cores = os.cpu_count() or 1
    tthreads = sorted({1, cores})
    print(f"Batch 8, Adam, softmax cross-entropy, one training step; median of {a.steps} steps after a warm-up,")
    print(f"{a.repeats} repeats, every side back to back within a repeat. *ours*: `onnx-vplan run` of")
    print("`plan --optimizer adam` (oneDNN convolutions, OpenMP threads), at OpenMP's default threads")
    print(f"({cores}) and at 1; *PyTorch*: torch {torch.__version__} eager, "
          + " and ".join(map(str, tthreads)) + " threads, its best taken.")
    print("OMP_WAIT_POLICY=%s on both sides. *ratio*: ours (default threads) / PyTorch's best, per repeat;"
          % os.environ.get("OMP_WAIT_POLICY"))
    print("goal (issue #21): at most 1.0.")
    print()
    print("| model | ours ms | ours 1 thread ms | PyTorch ms (" + " / ".join(f"{t}t" for t in tthreads)
          + ") | **ours / PyTorch** (median) | per repeat |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for label, model, x, labels, path, freeze in cases(a, ep, tp, out_dir):
            plan = os.path.join(tmp, "step.vplan")
            err = plan_file(vplan, path, freeze, plan)
            step = tp.Step(tp.without_dropout(model), x, labels)
            rows = []
            for _ in range(a.repeats):
                o, oerr = (None, err) if err else ours_ms(vplan, plan, a.steps, None, a.ours_args)
                o1, _ = (None, err) if err else ours_ms(vplan, plan, a.steps, 1, a.ours_args)
                t = [torch_ms(step, a.steps, n) for n in tthreads]
                rows.append((o, o1, t, oerr))
            torch.set_num_threads(cores)
            if rows[0][0] is None:
                print(f"| {label} | fails: `{rows[0][3]}` | | | | |")
                continue
            ratios = [o / min(t) for o, _, t, _ in rows]
            med = lambda v: statistics.median(v)  # noqa: E731
            tcols = " / ".join(f"{med([r[2][k] for r in rows]):.1f}" for k in range(len(tthreads)))
            print(f"| {label} | {med([r[0] for r in rows]):.1f} | {med([r[1] for r in rows]):.1f} | {tcols} | "
                  f"**{med(ratios):.2f}** | {' '.join(f'{q:.2f}' for q in ratios)} |")
            sys.stdout.flush()
            del step, model


def main():
    # before torch loads libgomp, which reads it once: the policy `onnx-vplan run` picks
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="the folder holding onnx-vplan")
    ap.add_argument("--steps", type=int, default=3, help="timed steps per measurement (median)")
    ap.add_argument("--repeats", type=int, default=3, help="measurements of each side per model")
    ap.add_argument("--models", help="comma list: export/mlp,export/resnet18,... or models/gpt,...")
    ap.add_argument("--ours-args", default="", help="extra `onnx-vplan run` options (e.g. --reference)")
    a = ap.parse_args()
    a.ours_args = a.ours_args.split()
    section(a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
