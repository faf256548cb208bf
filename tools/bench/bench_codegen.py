#!/usr/bin/env python3
"""The generated C step against `onnx-vplan run` on the same plan and PyTorch eager on
the CPU (torch_step.py: the same modules, cross-entropy, AdamW lr 1e-3 weight decay
0.01), time per training step, in one run, for every bundled model.

For each model: `plan` (adamw, weight decay 0.01, as torch_step.py), `run --steps N`
(its per-step times: inputs fed, the step, the loss read back) with the batch saved
by --save-inputs, `codegen`, the step compiled by the system cc at -O2 (and
-fno-math-errno, as vplan.mk compiles it) against the
build's libvplanrt with codegen_timer.c, timed on that batch; then torch_step.py.
Both kernel sets: the default (oneDNN convolutions and sgemm: `run` and codegen) and
the reference (`run --reference` and `codegen --reference`).
One thread everywhere (OpenMP, OpenBLAS and torch): the machine is shared, and small
steps are what the comparison is about.  Medians of N steps after warmup; R rounds of
the five interleaved, the lowest median kept (load from elsewhere only slows a round).

usage: bench_codegen.py --build BUILD_DIR [--steps N] [--batch B] [--rounds R] [--models m,...]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.normpath(os.path.join(HERE, "..", ".."))
PLAN_ARGS = {
    "mlp": [],
    "cnn": [],
    "gpt": ["--freeze", "^causal_mask$"],
    "gpt_ln_decomposed": ["--freeze", "^causal_mask$"],
}


def sh(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode:
        raise RuntimeError("%s failed (%d): %s" % (" ".join(cmd), r.returncode, (r.stderr or r.stdout)[-800:]))
    return r.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--models", default="mlp,cnn,gpt,gpt_ln_decomposed")
    ap.add_argument("--no-torch", action="store_true", help="leave PyTorch out (no torch here, or a quick look)")
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    tool = os.path.join(build, "onnx-vplan")
    lib = os.path.join(build, "libvplanrt.a")
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", VP_CPU_REFERENCE="0")
    cc = os.environ.get("CC", "cc")
    libs = ["-lopenblas", "-ldnnl", "-fopenmp"]  # what libvplanrt needs (vplanrt.pc)
    tmp = tempfile.mkdtemp(prefix="bench_codegen")
    rows = []
    try:
        for m in a.models.split(","):
            d = os.path.join(tmp, m)
            os.makedirs(os.path.join(d, "data"))
            plan = os.path.join(d, m + ".vplan")
            sh([tool, "plan", os.path.join(SRC, "models", m, "model.onnx"), "--dim", "batch=%d" % a.batch, "--loss",
                "ce:logits", "--optimizer", "adamw", "--weight-decay", "0.01", *PLAN_ARGS[m], "-o", plan])
            timers = {}
            for kind, extra in (("fast", []), ("ref", ["--reference"])):
                kd = os.path.join(d, kind)
                sh([tool, "codegen", plan, "-o", kd, "--prefix", m, *extra])
                timers[kind] = (os.path.join(kd, "timer"), os.path.join(kd, m + ".weights"))
                sh([cc, "-std=c17", "-O2", "-fno-math-errno", "-I" + os.path.join(SRC, "runtime"), "-I" + os.path.join(SRC, "planner"),
                    "-DPREFIX=" + m, "-DUPREFIX=" + m.upper(), "-include", os.path.join(kd, m + "_step.h"),
                    os.path.join(HERE, "codegen_timer.c"), os.path.join(kd, m + "_step.c"), lib, *libs, "-lm", "-o",
                    timers[kind][0]])
            # rounds of the five, interleaved, so that load from elsewhere hits them alike;
            # the lowest median of the rounds
            c_ms, run_ms, cref_ms, runref_ms, torch_ms = [], [], [], [], []
            for r in range(a.rounds):
                for kind, extra, rl, cl in (("fast", [], run_ms, c_ms), ("ref", ["--reference"], runref_ms, cref_ms)):
                    rj = os.path.join(d, "run.json")
                    sh([tool, "run", plan, *extra, "--steps", str(a.warmup + a.steps), "--save-inputs",
                        os.path.join(d, "data"), "--json", rj], env=env)
                    with open(rj) as f:
                        rl.append(statistics.median(json.load(f)["step_seconds"][a.warmup:]) * 1e3)
                    out = sh([timers[kind][0], timers[kind][1], os.path.join(d, "data"), str(a.warmup), str(a.steps)],
                             env=env)
                    cl.append(statistics.median(float(x) for x in out.split()))
                tj = os.path.join(d, "torch.json")
                if a.no_torch:
                    continue
                try:
                    sh([sys.executable, os.path.join(HERE, "torch_step.py"), "--model", m, "--batch", str(a.batch),
                        "--steps", str(a.steps), "--warmup", str(a.warmup), "--device", "cpu", "--threads", "1",
                        "--json", tj], env=env)
                    with open(tj) as f:
                        torch_ms.append(json.load(f)["step_ms_median"])
                except RuntimeError as e:
                    print("torch step of %s skipped: %s" % (m, e), file=sys.stderr)
            torch_ms = min(torch_ms) if torch_ms else None
            rows.append((m, min(c_ms), min(run_ms), torch_ms, min(cref_ms), min(runref_ms)))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("## Generated C step against `run` and PyTorch eager (CPU)")
    print()
    print("Batch %d, AdamW, one thread (OpenMP, OpenBLAS and torch); median step time of %d steps after %d warmup,"
          % (a.batch, a.steps, a.warmup))
    print("the lowest of %d interleaved rounds; inputs in and the loss out included in every column." % a.rounds)
    print("C: the generated step (`codegen`, bit-identical to `run`); C ref: `codegen --reference` against")
    print("`run --reference` (bit-identical to each other). Ratios > 1: the generated step is faster.")
    print()
    print("| model | generated C (ms) | run (ms) | PyTorch eager (ms) | run / C | torch / C | C ref (ms) | run --reference (ms) | run ref / C ref |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for m, c, r, t, cr, rr in rows:
        print("| %s | %.4f | %.4f | %s | %.2f | %s | %.4f | %.4f | %.2f |" % (
            m, c, r, "%.4f" % t if t else "n/a", r / c, "%.2f" % (t / c) if t else "n/a", cr, rr, rr / cr))
    return 0


if __name__ == "__main__":
    sys.exit(main())
