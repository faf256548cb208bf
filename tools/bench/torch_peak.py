#!/usr/bin/python3
"""Our arena against PyTorch eager's peak for the same training step (issue #12).

In:  the torch.onnx exports of tools/scripts/export_torch_models.py (written here into
     BUILD/torch_models at opset 17) and the bundled models/ (modules rebuilt from
     models/make_models.py), all at batch 8; BUILD/onnx-vplan.
Out: on stdout, the markdown section that tools/bench/run.sh records in RESULTS.md: per
     model PyTorch's peak, our arena without checkpointing, their ratio, our lower
     bound and our bytes by category; then the check of the measuring method.
Keeps: both sides run one step: forward, softmax cross-entropy (mean over every
     position), backward, Adam (torch.optim.Adam, lr 1e-3, PyTorch 1.13's default
     single-tensor update; ours: `plan --optimizer adam`). Without torch (or
     torchvision, for its three models) the section says what was skipped; it never
     fails the bench.

How PyTorch's peak is measured (CPU, eager): two steps; the second is the one measured,
so Adam's state exists. Its first statement, opt.zero_grad(set_to_none=True) (PyTorch
2's default), runs before the profiler starts, because the profiler cannot see the
frees of blocks allocated before it started. The bytes alive then (parameters,
buffers, Adam's exp_avg, exp_avg_sq and step, the batch) are counted from the tensors
(each storage once); torch.profiler(profile_memory=True) records every allocation and
free of the rest of the step, and their running sum in time order, on top of that
base, gives the live bytes at every moment; the peak is its maximum, and never less
than the bytes alive before zero_grad (the same as after the step: the gradients are
kept). The sum over the step must come out at exactly the gradients' bytes, which the
report checks. Dropout is replaced by Identity in the eager module: the eval-mode
exports have none, so the step we plan has none.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
MiB = float(1 << 20)
EXPORTS = ("mlp", "resnet18", "mobilenet_v2", "squeezenet1_1", "gpt")
BUNDLED = ("mlp", "cnn", "gpt", "gpt_ln_decomposed")
BATCH = 8
BACKWARD = "## backward ##"
CATEGORIES = ("parameters", "gradients", "optimizer_state", "activations", "temporaries")


def import_path(name, path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def import_make_models():
    """models/make_models.py imports onnx at the top; only its module classes are
    needed here, so a stub stands in where onnx is not installed."""
    try:
        import onnx  # noqa: F401
    except ImportError:
        stub = types.ModuleType("onnx")
        stub.numpy_helper = types.ModuleType("onnx.numpy_helper")
        sys.modules["onnx"] = stub
        sys.modules["onnx.numpy_helper"] = stub.numpy_helper
    import torch

    threads = torch.get_num_threads()
    mm = import_path("make_models", os.path.join(ROOT, "models", "make_models.py"))
    # make_models pins one thread and deterministic algorithms for its fixtures;
    # the benchmark measures the default eager configuration
    torch.use_deterministic_algorithms(False)
    torch.set_num_threads(threads)
    return mm


def bundled_model(mm, name, batch):
    import torch

    torch.manual_seed(0)
    if name in ("gpt", "gpt_ln_decomposed"):
        return mm.GPT(), torch.randint(0, mm.GPT_VOCAB, (batch, mm.GPT_SEQ)), \
            torch.randint(0, mm.GPT_VOCAB, (batch, mm.GPT_SEQ))
    if name == "cnn":
        return mm.CNN(), torch.randn(batch, 3, 16, 16), torch.randint(0, 10, (batch,))
    return mm.MLP(), torch.randn(batch, 32), torch.randint(0, 10, (batch,))


def without_dropout(model):
    import torch.nn as nn

    for mname, m in list(model.named_modules()):
        for cname, c in list(m.named_children()):
            if isinstance(c, nn.modules.dropout._DropoutNd):
                setattr(m, cname, nn.Identity())
    return model


def storage_bytes(tensors):
    seen, total = set(), 0
    for t in tensors:
        if t is None:
            continue
        s = t.storage()
        key = s.data_ptr()
        if key in seen or s.nbytes() == 0:
            continue
        seen.add(key)
        total += s.nbytes()
    return total


class Step:
    """One training step of a module, as the planner builds it."""

    def __init__(self, model, x, labels, set_to_none=True):
        import torch

        self.model, self.x, self.labels = model.train(), x, labels
        self.set_to_none = set_to_none
        self.opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def alive(self):
        """Bytes of the tensors alive between steps, each storage once."""
        ts = list(self.model.parameters()) + list(self.model.buffers()) + [self.x, self.labels]
        ts += [p.grad for p in self.model.parameters()]
        for st in self.opt.state.values():
            ts += [v for v in st.values() if hasattr(v, "storage")]
        return storage_bytes(ts)

    def run(self, zero_grad=True):
        import torch.nn.functional as F
        from torch.profiler import record_function

        if zero_grad:
            self.opt.zero_grad(set_to_none=self.set_to_none)
        logits = self.model(self.x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), self.labels.reshape(-1))
        with record_function(BACKWARD):  # a mark on the profiler's clock
            loss.backward()
        self.opt.step()
        return float(loss)

    def grad_bytes(self):
        return storage_bytes([p.grad for p in self.model.parameters()])


def memory_events(prof):
    """(time_us, bytes) of every allocation (+) and free (-) the profiler saw, in time
    order, and the time backward started. FunctionEvent '[memory]' rows are only the
    events outside every op, so the raw kineto events are read."""
    raw = prof.profiler.kineto_results.events()

    def start(e):  # torch 1.13 has start_us, torch 2.x start_ns
        return e.start_us() if hasattr(e, "start_us") else e.start_ns() / 1e3

    evs = [(start(e), e.nbytes()) for e in raw
           if e.name() == "[memory]" and e.device_type().name == "CPU"]
    evs.sort(key=lambda e: e[0])  # stable: ties keep the recorded order
    marks = [start(e) for e in raw if e.name() == BACKWARD]
    return evs, (marks[0] if marks else None)


def measure(step):
    """PyTorch's peak over the second step, and what the method checks itself against."""
    from torch.profiler import ProfilerActivity, profile

    step.run()  # first step: Adam's state and the gradients come to exist
    before = step.alive()
    step.opt.zero_grad(set_to_none=step.set_to_none)
    base = step.alive()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step.run(zero_grad=False)
    evs, t_backward = memory_events(prof)
    live, peak, at_backward = 0, 0, None
    for t, nb in evs:
        if at_backward is None and t_backward is not None and t >= t_backward:
            at_backward = live
        live += nb
        peak = max(peak, live)
    return {
        "peak": max(before, base + peak),
        "base": base,
        "end": live,
        # what the step leaves alive that was not alive when the profiler started
        "grads": step.grad_bytes() if step.set_to_none else 0,
        "at_backward": None if at_backward is None else base + at_backward,
        "events": len(evs),
    }


def time_step(step, n):
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        step.run()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


def plan(vplan, onnx_path, freeze, out_json):
    cmd = [vplan, "plan", onnx_path, "--dim", f"batch={BATCH}", "--loss", "ce:logits",
           "--optimizer", "adam", "--json", out_json]
    if freeze:
        cmd += ["--freeze", freeze]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        lines = [l for l in r.stdout.splitlines() if l.strip()]
        return None, (lines[-1] if lines else f"exit {r.returncode}")
    with open(out_json) as f:
        return json.load(f), None


def validate(ep):
    """The method against bytes counted by hand, on the exported 4-layer MLP
    (784-1024-1024-1024-10, ReLU): (1) at batch 8 the activations are negligible and the
    peak is inside Adam's update of the largest weight: parameters, gradients, exp_avg,
    exp_avg_sq, the batch, and the two temporaries of a weight's size that
    `(exp_avg_sq.sqrt() / bias_correction2_sqrt)` holds for a moment; (2) at batch 2048,
    when backward starts, the bytes alive are the base plus what autograd saved: the
    three ReLU outputs (B x 1024, each also the next addmm's saved input), log_softmax's
    output (B x 10) and the logits (B x 10, held by the caller), and the loss."""
    import torch

    rows = []
    for batch in (8, 2048):
        model, x, labels, _ = ep.build_model("mlp", batch=batch)
        step = Step(model, x, labels)
        m = measure(step)
        params = [p for p in model.parameters()]
        pbytes = sum(p.numel() * 4 for p in params)
        xb = x.numel() * 4 + labels.numel() * 8
        adam_steps = 4 * len(params)  # torch 1.13 keeps Adam's step as a float32 tensor
        if batch == 8:
            largest = max(p.numel() for p in params) * 4
            hand = 4 * pbytes + adam_steps + xb + 2 * largest
            what, got = "peak (inside Adam's update)", m["peak"]
        else:
            h = ep.MLP_DIMS[1:-1]
            acts = sum(batch * d * 4 for d in h) + 2 * batch * ep.MLP_DIMS[-1] * 4 + 4
            hand = 3 * pbytes + adam_steps + xb + acts
            what, got = "live when backward starts", m["at_backward"]
        rows.append((batch, what, got, hand, m))
        del step, model
        torch.manual_seed(0)
    return rows


def section(a):
    print("## Arena against PyTorch eager's peak")
    print()
    try:
        import torch
    except ImportError:
        print("Skipped: torch is not installed for %s." % sys.executable)
        return
    ep = import_path("export_torch_models", os.path.join(ROOT, "tools", "scripts", "export_torch_models.py"))
    try:
        import torchvision  # noqa: F401
        exports = list(EXPORTS)
        skipped = []
    except ImportError:
        exports = [m for m in EXPORTS if m in ("mlp", "gpt")]
        skipped = [m for m in EXPORTS if m not in exports]
    have_onnx = True
    try:
        import onnx  # noqa: F401
    except ImportError:
        have_onnx = False
    vplan = os.path.join(a.build, "onnx-vplan")
    out_dir = os.path.join(a.build, "torch_models")
    os.makedirs(out_dir, exist_ok=True)
    if a.models:
        want = set(a.models.split(","))
        exports = [m for m in exports if m in want or "export/" + m in want]
    import warnings
    warnings.filterwarnings("ignore")

    cases = []  # (label, module, x, labels, onnx path, freeze)
    if have_onnx:
        for name in exports:
            path = os.path.join(out_dir, f"{name}-op17.onnx")
            meta_path = path[:-len(".onnx")] + ".json"
            if not (a.reuse and os.path.exists(path) and os.path.exists(meta_path)):
                path = ep.export(name, out_dir, 17, False, log=sys.stderr)
            with open(meta_path) as f:
                meta = json.load(f)
            model, x, labels, _ = ep.build_model(name)
            cases.append((f"{name} (torch.onnx, opset 17)", name, model, x, labels, path, meta["freeze"]))
    mm = import_make_models()
    for name in BUNDLED:
        if a.models and "models/" + name not in set(a.models.split(",")):
            continue
        model, x, labels = bundled_model(mm, name, BATCH)
        with open(os.path.join(ROOT, "models", name, "meta.json")) as f:
            buffers = json.load(f)["buffers"]
        frozen = [b for b in ep.frozen_buffers(model) if b in buffers]
        freeze = "|".join(f"^{b.replace('.', '[.]')}$" for b in frozen) or None
        cases.append((f"models/{name}", "models_" + name, model, x, labels,
                      os.path.join(ROOT, "models", name, "model.onnx"), freeze))

    print("Batch 8, Adam, softmax cross-entropy, no checkpointing. *PyTorch peak*: torch %s eager on"
          % torch.__version__)
    print("the CPU, the most bytes alive during the second step (torch.profiler memory events summed in")
    print("time order on top of the tensors alive at its start; zero_grad(set_to_none=%s); Dropout"
          % (not a.keep_grads))
    print("off, as in the eval-mode exports); *base*: parameters, buffers, Adam's state and the batch")
    print("alive at the start. *arena*: `onnx-vplan plan --optimizer adam` (fused update), *bound*: its")
    print("lower bound; the category columns count each of our buffers once, whenever it lives (MiB).")
    print("Goal (issue #12): arena / PyTorch peak at most 0.85 for every model.")
    print()
    print("| model | PyTorch peak MiB | base MiB | arena MiB | **arena / peak** | bound MiB | "
          "params | grads | Adam state | activations | temporaries | PyTorch step ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    checks = []
    for label, tag, model, x, labels, path, freeze in cases:
        step = Step(without_dropout(model), x, labels, set_to_none=not a.keep_grads)
        m = measure(step)
        ms = time_step(step, a.steps)
        checks.append((label, m))
        ours, err = plan(vplan, path, freeze, os.path.join(out_dir, f"{tag}.plan.json"))
        if ours is None:
            print(f"| {label} | {m['peak'] / MiB:.2f} | {m['base'] / MiB:.2f} | fails: `{err}` | | | "
                  "| | | | | %.0f |" % ms)
        else:
            c = ours["categories"]
            cats = " | ".join(f"{c[k] / MiB:.2f}" for k in CATEGORIES)
            print(f"| {label} | {m['peak'] / MiB:.2f} | {m['base'] / MiB:.2f} | "
                  f"{ours['arena_bytes'] / MiB:.2f} | **{ours['arena_bytes'] / m['peak']:.2f}** | "
                  f"{ours['lower_bound_bytes'] / MiB:.2f} | {cats} | {ms:.1f} |")
        sys.stdout.flush()
        del step, model
    if skipped:
        print()
        print("Skipped (torchvision is not installed): " + ", ".join(skipped) + ".")
    if not have_onnx:
        print()
        print("The torch.onnx exports were skipped: onnx is not installed (torch.onnx.export needs it).")

    print()
    print("Checks of the measuring method. The profiler's allocations and frees over the step sum to")
    print("the gradients' bytes (the one thing the step leaves alive that was not alive at its start):")
    print()
    print("| model | memory events | sum over the step | gradients%s | difference |"
          % (" (kept: 0)" if a.keep_grads else ""))
    print("|---|---|---|---|---|")
    for label, m in checks:
        print(f"| {label} | {m['events']} | {m['end']} | {m['grads']} | {m['end'] - m['grads']} |")
    if "mlp" in exports:
        print()
        print("And against bytes counted by hand on the 4-layer MLP (784-1024-1024-1024-10): at batch 8 the")
        print("peak is inside Adam's update of a 1024x1024 weight (4 x parameters, the batch, Adam's step")
        print("tensors, and the two weight-sized temporaries of `exp_avg_sq.sqrt() / bias_correction2_sqrt`);")
        print("at batch 2048 the bytes alive when backward starts are 3 x parameters, the batch, and what")
        print("autograd saved (three ReLU outputs, log_softmax's output, the logits, the loss):")
        print()
        print("| batch | what | profiler | by hand | profiler / hand |")
        print("|---|---|---|---|---|")
        for batch, what, got, hand, _ in validate(ep):
            got_s = "n/a" if got is None else str(got)
            ratio = "n/a" if got is None else f"{got / hand:.4f}"
            print(f"| {batch} | {what} | {got_s} | {hand} | {ratio} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="the folder holding onnx-vplan")
    ap.add_argument("--steps", type=int, default=3, help="timed steps per model (median)")
    ap.add_argument("--models", help="comma list: mlp,gpt,... (exports) or models/gpt,... (bundled)")
    ap.add_argument("--keep-grads", action="store_true",
                    help="zero_grad(set_to_none=False), PyTorch 1.x's default: the gradients stay allocated")
    ap.add_argument("--reuse", action="store_true", help="keep exports already in BUILD/torch_models")
    a = ap.parse_args()
    section(a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
