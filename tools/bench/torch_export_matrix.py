#!/usr/bin/python3
"""Does the tool take torch.onnx exports as torch writes them, at every opset we claim?

In:  the models of tools/scripts/export_torch_models.py, exported here into
     BUILD/torch_matrix at opsets 13, 15 and 17, each from eval() (TrainingMode.PRESERVE)
     and from train() (TrainingMode.TRAINING: BatchNormalization in training mode with
     its running-statistics outputs, Dropout nodes); BUILD/onnx-vplan.
Out: on stdout, the markdown section that tools/bench/run.sh records in RESULTS.md: per
     export its node count, whether `inspect --dim batch=8` loads it (and the ops it
     reports unsupported), and whether `plan --loss ce:logits --optimizer adam` plans
     it (the arena) or the last line of its error.
Keeps: nothing fails the bench: without torch, onnx or torchvision the section says
     what was skipped.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
OPSETS = (13, 15, 17)


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = [l.strip() for l in r.stdout.splitlines() if l.strip()]
    return r.returncode, r.stdout, (lines[-1] if lines else "")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--models", help="comma list (default: every model of the export script)")
    a = ap.parse_args()
    print("## torch.onnx exports: load and plan by opset")
    print()
    try:
        import torch
        import onnx  # noqa: F401
    except ImportError as e:
        print(f"Skipped: {e} ({sys.executable}).")
        return 0
    import importlib.util
    import warnings

    warnings.filterwarnings("ignore")
    spec = importlib.util.spec_from_file_location(
        "export_torch_models", os.path.join(ROOT, "tools", "scripts", "export_torch_models.py"))
    ep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ep)
    models = a.models.split(",") if a.models else list(ep.MODELS)
    skipped = []
    try:
        import torchvision  # noqa: F401
    except ImportError:
        skipped = [m for m in models if m not in ("mlp", "gpt")]
        models = [m for m in models if m in ("mlp", "gpt")]
    vplan = os.path.join(a.build, "onnx-vplan")
    out = os.path.join(a.build, "torch_matrix")
    os.makedirs(out, exist_ok=True)

    print(f"torch {torch.__version__}; batch 8; eval: `model.eval()`, TrainingMode.PRESERVE; train:")
    print("`model.train()`, TrainingMode.TRAINING. *plan*: `plan --dim batch=8 --loss ce:logits --optimizer adam`")
    print("(with `--freeze` for the causal-mask buffers), the arena in MiB or the error.")
    print()
    print("| model | opset | mode | nodes | inspect | unsupported | plan |")
    print("|---|---|---|---|---|---|---|")
    for name in models:
        for opset in OPSETS:
            for training in (False, True):
                mode = "train" if training else "eval"
                try:
                    path = ep.export(name, out, opset, training, log=sys.stderr)
                except Exception as e:  # an exporter failure is a row, not a crash
                    print(f"| {name} | {opset} | {mode} | torch.onnx.export fails: "
                          f"`{type(e).__name__}: {str(e).splitlines()[0][:160]}` | | | |")
                    continue
                with open(path[:-len(".onnx")] + ".json") as f:
                    meta = json.load(f)
                nodes = len(onnx.load(path, load_external_data=False).graph.node)
                rc, text, last = run([vplan, "inspect", path, "--dim", "batch=8", "--json"])
                if rc == 0:
                    info = json.loads(text)
                    unsupported = info.get("unsupported") or []
                    uns = ", ".join(u["op"] if isinstance(u, dict) and "op" in u else str(u)
                                    for u in unsupported) or "none"
                    insp = "loads"
                else:
                    insp, uns = f"fails ({rc}): `{last}`", ""
                cmd = [vplan, "plan", path, "--dim", "batch=8", "--loss", "ce:logits",
                       "--optimizer", "adam", "--json", path[:-len(".onnx")] + ".plan.json"]
                if meta["freeze"]:
                    cmd += ["--freeze", meta["freeze"]]
                rc, _, last = run(cmd)
                if rc == 0:
                    with open(path[:-len(".onnx")] + ".plan.json") as f:
                        pl = f"plans, arena {json.load(f)['arena_bytes'] / 2**20:.2f}"
                else:
                    pl = f"fails ({rc}): `{last}`"
                print(f"| {name} | {opset} | {mode} | {nodes} | {insp} | {uns} | {pl} |")
                sys.stdout.flush()
                os.remove(path)  # tens of MiB each; the table is what is kept
    if skipped:
        print()
        print("Skipped (torchvision is not installed): " + ", ".join(skipped) + ".")
    return 0


if __name__ == "__main__":
    sys.exit(main())
