#!/usr/bin/env python3
"""PyTorch eager side of the GPU benchmark (tools/gpu-check.sh).

Times the training step that `onnx-vplan plan MODEL --loss ce:logits --optimizer adamw`
builds, in PyTorch eager on the same GPU: forward, cross-entropy (mean over every
position), backward, torch.optim.AdamW(lr=1e-3, weight_decay=0.01).  The modules are
the ones models/make_models.py exports (imported from there), in train() mode, with
random weights and a random batch (timing and memory do not depend on the values).

usage: torch_step.py --model gpt|cnn|mlp|gpt_ln_decomposed --batch B [--steps N]
                     [--warmup W] [--json FILE] [--device cuda|cpu] [--threads N]
Prints one line and, with --json, writes {"model", "batch", "step_ms_median",
"step_ms": [...], "max_memory_reserved", "max_memory_allocated", "device", "torch"}.
Memory is torch.cuda.max_memory_reserved / max_memory_allocated over the timed steps,
after reset_peak_memory_stats (weights, gradients, AdamW state, activations, cuBLAS
workspace: everything the caching allocator holds for the step).
"""
import argparse
import json
import os
import statistics
import sys
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.normpath(os.path.join(HERE, "..", "..", "models"))


def import_models():
    """models/make_models.py imports onnx at the top; the benchmark needs only the
    module classes, so a stub stands in where onnx is not installed."""
    try:
        import onnx  # noqa: F401
    except ImportError:
        stub = types.ModuleType("onnx")
        stub.numpy_helper = types.ModuleType("onnx.numpy_helper")
        sys.modules["onnx"] = stub
        sys.modules["onnx.numpy_helper"] = stub.numpy_helper
    sys.path.insert(0, MODELS)
    import make_models  # noqa: E402
    import torch

    # make_models pins one thread and deterministic algorithms for its fixtures;
    # the benchmark measures the default eager configuration
    torch.use_deterministic_algorithms(False)
    torch.set_num_threads(os.cpu_count() or 1)
    return make_models


def build(mm, name, batch, device):
    import torch

    if name in ("gpt", "gpt_ln_decomposed"):
        model = mm.GPT()
        x = torch.randint(0, mm.GPT_VOCAB, (batch, mm.GPT_SEQ), device=device)
        labels = torch.randint(0, mm.GPT_VOCAB, (batch, mm.GPT_SEQ), device=device)
    elif name == "cnn":
        model = mm.CNN()
        x = torch.randn(batch, 3, 16, 16, device=device)
        labels = torch.randint(0, 10, (batch,), device=device)
    elif name == "mlp":
        model = mm.MLP()
        x = torch.randn(batch, 32, device=device)
        labels = torch.randint(0, 10, (batch,), device=device)
    else:
        raise SystemExit("unknown model " + name)
    return model.to(device).train(), x, labels


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--json")
    ap.add_argument("--device", default="cuda", help="cpu: a dry run of this script (no memory figures)")
    ap.add_argument("--threads", type=int, default=0, help="torch's CPU threads (default: every core)")
    a = ap.parse_args()

    import torch
    import torch.nn.functional as F

    cuda = a.device == "cuda"
    if cuda and not torch.cuda.is_available():
        print("torch_step: torch has no CUDA device", file=sys.stderr)
        return 3
    mm = import_models()
    if a.threads:
        torch.set_num_threads(a.threads)
    device = torch.device(a.device)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    torch.manual_seed(0)
    model, x, labels = build(mm, a.model, a.batch, device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)

    def step():
        opt.zero_grad(set_to_none=True)
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
        loss.backward()
        opt.step()
        return loss

    for _ in range(a.warmup):
        step()
    sync()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        loss = step()
        loss.item()  # the loss on the host, as onnx-vplan run reads it each step
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
    res = {
        "model": a.model,
        "batch": a.batch,
        "step_ms_median": statistics.median(times),
        "step_ms": times,
        "max_memory_reserved": torch.cuda.max_memory_reserved() if cuda else 0,
        "max_memory_allocated": torch.cuda.max_memory_allocated() if cuda else 0,
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "torch": torch.__version__,
    }
    print("torch %s %s batch %d: step %.3f ms (median of %d), max_memory_reserved %d B, allocated %d B"
          % (res["torch"], a.model, a.batch, res["step_ms_median"], a.steps, res["max_memory_reserved"],
             res["max_memory_allocated"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
