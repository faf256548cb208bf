#!/usr/bin/env python3
"""Our CPU step time against PyTorch 2.x eager and torch.compile on today's exports
(issue 37).

In:  the models of tools/bench/torch2_peak.py (Llama, BERT, ViT from configs, seed 0),
     exported by torch 2.x's torch.onnx.export (optimize=False) into BUILD/torch2_peak
     (made when missing); BUILD/onnx-vplan.  Run with PyPI's torch 2.x
     (tools/scripts/torch2_venv.sh's venv).
Out: on stdout, the markdown section tools/bench/run.sh records in RESULTS.md: per model
     our step time (`onnx-vplan run` of `plan --optimizer adamw`, at 1 and 2 threads),
     PyTorch eager's and torch.compile's (default mode) at 1 and 2 threads, and ours /
     PyTorch's best of each, per repeat and their median.  torch.compile's side runs in a
     child process (the same model, seed 0) given --compile-limit seconds (default 600) to
     compile and step; past that, or where it fails, its column says so and the row keeps
     the eager ratio.
Keeps: the method of tools/bench/torch_speed.py, whose helpers it imports: one AdamW
     step (lr 1e-3) on both sides, the median of --steps steps after a warm-up (torch.
     compile's compilation is in its warm-up), each repeat measuring every side back to
     back so that the machine's load is shared and the ratio taken within a repeat;
     OMP_WAIT_POLICY passive on both sides.  Never fails the bench.
"""
import argparse
import contextlib
import os
import statistics
import subprocess
import sys

import torch2_peak  # the models (this folder is on the path of a script run from it)
import torch_peak
import torch_speed

HERE = os.path.dirname(os.path.abspath(__file__))


def compiled_ms(name, steps, limit):
    """torch.compile's step times at 1 and 2 threads for model `name`, measured in a child
    process (this script with --compile-child) that is killed after `limit` seconds: its
    compilation may take that long (Funnel's took over 15 minutes on 2 cores, recompiling),
    and torch catches what a signal would raise inside it.  Returns ([ms, ms] or None,
    why it gave none or None)."""
    cmd = [sys.executable, os.path.abspath(__file__), "--compile-child", name, "--steps", str(steps)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        return None, f"still compiling after {limit} s"
    last = (r.stdout.strip().splitlines() or [""])[-1].split()
    if r.returncode or len(last) != 2:
        err = [l for l in r.stderr.strip().splitlines() if l.strip()] or ["no output"]
        return None, f"failed: {err[-1][:80]}"
    return [float(v) for v in last], None


def compile_child(name, steps):
    """The child of compiled_ms: the model built as the parent builds it (seed 0), compiled,
    its step timed at 1 and 2 threads; prints the two times on one line."""
    import torch
    torch.manual_seed(0)
    model, x, labels = torch2_peak.models(False)[name][1]()
    cmodel = torch.compile(model)
    comp = torch_peak.Step(cmodel, x, labels)
    comp.opt = torch.optim.AdamW(cmodel.parameters(), lr=1e-3)
    with contextlib.redirect_stdout(sys.stderr):
        ms = [torch_speed.torch_ms(comp, steps, t) for t in (1, 2)]
    print(f"{ms[0]:.3f} {ms[1]:.3f}")


ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--only", nargs="*", help="model names (torch2_peak.py's)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--compile-limit", type=int, default=600,
                    help="seconds torch.compile's compilation and steps may take before its column says it gave up")
    ap.add_argument("--compile-child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")
    if a.compile_child:
        compile_child(a.compile_child, a.steps)
        return
    print("## CPU step time against PyTorch 2.x eager and torch.compile (torch 2.x exports)")
    print()
    try:
        import torch
    except ImportError as e:
        print(f"Skipped: {e} for {sys.executable} (make the venv with tools/scripts/torch2_venv.sh).")
        return
    peak, speed, tp = torch2_peak, torch_speed, torch_peak
    vplan = os.path.join(a.build, "onnx-vplan")
    work = os.path.join(a.build, "torch2_peak")
    os.makedirs(work, exist_ok=True)
    print(f"torch {torch.__version__}; one AdamW step; the median of {a.steps} steps after a warm-up, "
          f"{a.repeats} repeats; best of 1 and 2 threads on each side; *ratio*: ours / PyTorch's, per repeat, "
          "their median.")
    print()
    print("| model | ours ms (1t / 2t) | eager ms (1t / 2t) | compile ms (1t / 2t) | ours / eager | ours / compile |")
    print("|---|---|---|---|---|---|")
    for name, (desc, build) in peak.models(False).items():
        if a.only and name not in a.only:
            continue
        torch.manual_seed(0)
        model, x, labels = build()
        path = os.path.join(work, name + ".onnx")
        if not os.path.exists(path):
            with contextlib.redirect_stdout(sys.stderr):
                # a model that drops from train(), whose Dropout the step draws (torch2_peak.TRAIN_EXPORT)
                torch.onnx.export(model.train(name in peak.TRAIN_EXPORT), (x,), path, input_names=["x"],
                                  output_names=["logits"], optimize=False)
        plan = os.path.join(work, name + ".vplan")
        r = subprocess.run([vplan, "plan", path, "--loss", "ce:logits", "--optimizer", "adamw", "-o", plan],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if r.returncode:
            print(f"| {desc} | plan failed: {r.stdout.strip().splitlines()[-1]} | | | | |")
            continue
        eager = tp.Step(model, x, labels)
        eager.opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        rows, why = [], None
        for _ in range(a.repeats):
            ours = [speed.ours_ms(vplan, plan, a.steps, t)[0] for t in (1, 2)]
            e = [speed.torch_ms(eager, a.steps, t) for t in (1, 2)]
            c = [None, None]
            if why is None:
                c, why = compiled_ms(name, a.steps, a.compile_limit)
                c = c or [None, None]
            if None in ours:
                break
            rows.append((ours, e, c))
        if not rows:
            print(f"| {desc} | run failed | | | | |")
            continue
        med = statistics.median
        col = lambda k: " / ".join(f"{med([r[k][t] for r in rows]):.1f}" for t in range(2))
        re = med([min(r[0]) / min(r[1]) for r in rows])
        if why is None:
            rc = med([min(r[0]) / min(r[2]) for r in rows])
            print(f"| {desc} | {col(0)} | {col(1)} | {col(2)} | {re:.2f} | {rc:.2f} |")
        else:
            print(f"| {desc} | {col(0)} | {col(1)} | torch.compile {why} | {re:.2f} | - |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
