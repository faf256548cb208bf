#!/usr/bin/env python3
"""The joint search at LLM scale (issue 39): `plan --auto` on torch 2.x exports of a
12-layer Llama and a 48-layer GPT-2, wall time on this machine.

In:  models built from configs (random weights, seed 0) and exported by torch 2.x's
     torch.onnx.export (optimize=False) into BUILD/search_scale, once (kept for reruns);
     BUILD/onnx-vplan.  Run with PyPI's torch 2.x (tools/scripts/torch2_venv.sh's venv).
Out: on stdout, the markdown section tools/bench/run.sh records in RESULTS.md: per model
     the un-checkpointed arena and its planning time, then `--auto` under the budget (the
     Llama also with `--max-tp 2`): the wall time of the whole command, the search's own
     time, the candidates checkpointed and pruned, and the plan chosen; then dp's smallest
     peak in fp32 and bf16 on the kit's exports (tests/data/torch2); then the GPU profiles'
     figures (`plan --json`'s device_profile) beside the vendor's peaks and public
     measurements, sources named.
Keeps: times are wall seconds of one run on a shared machine (noisy); the table says
     what the search chose, which does not depend on the machine.
"""
import argparse
import contextlib
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))


def export(path, name):
    import torch
    import transformers

    sys.path.insert(0, os.path.join(ROOT, "tools", "scripts"))
    import export_torch2_models as kit

    torch.manual_seed(0)
    if name == "llama12":
        cfg = transformers.LlamaConfig(num_hidden_layers=12, hidden_size=1024, num_attention_heads=16,
                                       num_key_value_heads=4, intermediate_size=2816, vocab_size=32000,
                                       max_position_embeddings=512, tie_word_embeddings=False)
        model, x = transformers.LlamaForCausalLM(cfg), torch.randint(0, 32000, (4, 512))
    else:
        cfg = transformers.GPT2Config(n_layer=48, n_head=8, n_embd=512, vocab_size=8192, n_positions=256,
                                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        model, x = transformers.GPT2LMHeadModel(cfg), torch.randint(0, 8192, (8, 256))
    with contextlib.redirect_stdout(sys.stderr):
        torch.onnx.export(kit.Logits(model, "lm").eval(), (x,), path, input_names=["x"], output_names=["logits"],
                          optimize=False)


def run(cmd):
    t0 = time.perf_counter()
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return r.returncode, r.stdout, time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    a = ap.parse_args()
    print("## The joint search at LLM scale (`plan --auto`, torch 2.x exports)")
    print()
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        print(f"Skipped: {e} for {sys.executable} (make the venv with tools/scripts/torch2_venv.sh).")
        return
    vplan = os.path.join(a.build, "onnx-vplan")
    work = os.path.join(a.build, "search_scale")
    os.makedirs(work, exist_ok=True)
    models = [("llama12", "Llama, 12 layers, d 1024, GQA 16/4, 200M parameters (4 x 512)", "4GiB", []),
              ("llama12", "the same Llama, `--max-tp 2`", "4GiB", ["--max-tp", "2"]),
              ("gpt48", "GPT-2, 48 layers, d 512, 8 heads (8 x 256)", None, [])]
    print("AdamW, h100 profile; wall seconds of one run each on this machine, with the processors online (N) planning "
          "candidates side by side and with one (VP_SEARCH_THREADS=1); the two must choose the same.")
    print()
    print("| model | unchecked arena (planned in) | budget | `--auto` wall on N threads (on 1) | search | "
          "checkpointed / pruned of | chosen |")
    print("|---|---|---|---|---|---|---|")
    for name, desc, budget, extra in models:
        path = os.path.join(work, name + ".onnx")
        if not os.path.exists(path):
            export(path, name)
        base = [vplan, "plan", path, "--loss", "ce:logits", "--optimizer", "adamw", "--device", "h100"]
        rc, out, wall0 = run(base)
        m = re.search(r"^arena: .*\((\d+) bytes\)", out, re.M)
        if rc or not m:
            print(f"| {desc} | failed: {out.strip().splitlines()[-1] if out.strip() else rc} | | | | | |")
            continue
        arena = int(m.group(1))
        b = budget or str(arena // 2)
        os.environ["VP_SEARCH_THREADS"] = "1"
        rc1, out1, wall1 = run(base + ["--budget", b, "--auto"] + extra)
        del os.environ["VP_SEARCH_THREADS"]
        rc, out, wall = run(base + ["--budget", b, "--auto"] + extra)
        s = re.search(r"searched in ([0-9.]+) s on (\d+) threads?: (\d+) candidates planned as they are, (\d+) of them "
                      r"checkpointed by dp, (\d+) not", out)
        same = not rc1 and [l for l in out1.splitlines() if "<- chosen" in l or l.startswith("arena:")] == \
            [l for l in out.splitlines() if "<- chosen" in l or l.startswith("arena:")]
        w = re.search(r"^(.*) won:", out, re.M)
        if rc or not s:
            print(f"| {desc} | {arena / 2**30:.2f} GiB ({wall0:.2f} s) | {b} | failed (exit {rc}) | | | |")
            continue
        print(f"| {desc} | {arena / 2**30:.2f} GiB ({wall0:.2f} s) | {b if budget else 'half: ' + b + ' B'} | "
              f"{wall:.2f} s on {s.group(2)} ({wall1:.2f} s on 1{'' if same else ', ANOTHER RESULT'}) | "
              f"{float(s.group(1)):.2f} s | {s.group(4)} / {s.group(5)} of {s.group(3)} | {w.group(1) if w else '-'} |")
        sys.stdout.flush()
    floors(vplan)


def floors(vplan):
    """dp's smallest peak in bf16 against fp32 (`--budget 1`: as little as checkpointing
    keeps) on the torch 2.x kit's exports: checkpointing that works in fp32 should work at
    least as well in bf16."""
    kit = os.path.join(ROOT, "tests", "data", "torch2")
    print()
    print("dp's smallest peak (`plan --budget 1`, AdamW, h100) in fp32 and bf16 on the kit's optimize=False exports:")
    print()
    print("| model | fp32 | bf16 | bf16 / fp32 |")
    print("|---|---|---|---|")
    for name in sorted(os.listdir(kit)):
        path = os.path.join(kit, name, "eval_opt0.onnx")
        if not os.path.exists(path):
            continue
        got = []
        for prec in ("fp32", "bf16"):
            rc, out, _ = run([vplan, "plan", path, "--loss", "ce:logits", "--optimizer", "adamw", "--device", "h100",
                              "--budget", "1", "--precision", prec])
            m = re.search(r"^arena: .*\((\d+) bytes\)", out, re.M)
            got.append(int(m.group(1)) if m else None)
        if None in got:
            print(f"| {name} | failed | | |")
            continue
        print(f"| {name} | {got[0]} B | {got[1]} B | {got[1] / got[0]:.3f} |")
    profiles(vplan)


# Published figures for the GPU profiles (tools/bench/RESULTS.md, "GPU cost profiles against
# published figures"): the vendor's peak and, where one is public, a measured figure, each
# with its source.  None: nothing public found.  FLOP/s are dense (no 2:4 sparsity); fp32 is
# CUDA-core FP32 (PyTorch does not use TF32 for float32 matmuls unless asked, since 1.12).
SOURCES = {
    "A100 datasheet": "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
                      "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf",
    "H100 datasheet": "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet",
    "H200 product page": "https://www.nvidia.com/en-us/data-center/h200/",
    "MAMF": "https://github.com/mag-/gpu_benchmark (maximum achievable matmul FLOPS, stas00's mamf-finder)",
    "torch matmul H100": "https://github.com/zzc0721/torch-performance-test-data/issues/79 (torch 2.7, 8192^2)",
    "nccl-tests #149": "https://github.com/NVIDIA/nccl-tests/issues/149 (8 x A100 80GB SXM, all_reduce busbw)",
    "nccl-tests #212": "https://github.com/NVIDIA/nccl-tests/issues/212 (NCCL's maintainer: 8 x H100 busbw)",
}
PUBLISHED = {  # device: key: (peak, peak source, measured, measured source)
    "a100": {"flops_fp32": (19.5e12, "A100 datasheet", None, None),
             "flops_low_precision": (312e12, "A100 datasheet", 267.9e12, "MAMF"),
             "memory_bytes_per_s": (2.039e12, "A100 datasheet", None, None),
             "link_bytes_per_s": (300e9, "A100 datasheet", 200e9, "nccl-tests #149"),
             "host_link_bytes_per_s": (32e9, "A100 datasheet", None, None)},
    "h100": {"flops_fp32": (67e12, "H100 datasheet", 51.9e12, "torch matmul H100"),
             "flops_low_precision": (989.4e12, "H100 datasheet", 792.1e12, "MAMF"),
             "memory_bytes_per_s": (3.35e12, "H100 datasheet", None, None),
             "link_bytes_per_s": (450e9, "H100 datasheet", 370e9, "nccl-tests #212"),
             "host_link_bytes_per_s": (64e9, "H100 datasheet", None, None)},
    "h200": {"flops_fp32": (67e12, "H200 product page", None, None),
             "flops_low_precision": (989.4e12, "H200 product page", None, None),
             "memory_bytes_per_s": (4.8e12, "H200 product page", None, None),
             "link_bytes_per_s": (450e9, "H200 product page", None, None),
             "host_link_bytes_per_s": (64e9, "H200 product page", None, None)},
}
FIGURES = [("flops_fp32", "fp32 GEMM", 1e12, "TFLOP/s"), ("flops_low_precision", "bf16/fp16 GEMM (Tensor Cores)", 1e12, "TFLOP/s"),
           ("memory_bytes_per_s", "HBM bandwidth", 1e12, "TB/s"),
           ("link_bytes_per_s", "NVLink per direction / all-reduce bus bandwidth", 1e9, "GB/s"),
           ("host_link_bytes_per_s", "PCIe per direction (offload)", 1e9, "GB/s")]


def profiles(vplan):
    """The cost model's figures for each GPU profile (read from the plan's JSON report)
    beside the vendor's peak and a public measurement: ours over the measured figure says
    how optimistic the estimated step times are."""
    import json
    import tempfile
    print()
    print("## GPU cost profiles against published figures")
    print()
    print("Ours: the figures the cost model prices a step with (`plan --json`'s device_profile, from "
          "planner/memory/plan_build.c); peak: the vendor's (dense, no sparsity); measured: a public "
          "measurement where one exists. Link: one direction of NVLink, which the cost model charges ring "
          "all-reduce traffic (2(n-1)/n of the bytes) against, as nccl-tests' bus bandwidth does.")
    print()
    print("| device | figure | ours | peak (source) | measured (source) | ours / measured |")
    print("|---|---|---|---|---|---|")
    model = os.path.join(ROOT, "tests", "data", "torch2", "gpt2", "eval_opt0.onnx")
    worst = 0.0
    for dev, table in PUBLISHED.items():
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "p.json")
            rc, text, _ = run([vplan, "plan", model, "--loss", "ce:logits", "--device", dev, "--json", out])
            if rc or not os.path.exists(out):
                print(f"| {dev} | failed: {text.strip().splitlines()[-1:]} | | | | |")
                continue
            with open(out) as f:
                ours = json.load(f).get("device_profile", {})
        for key, what, unit, uname in FIGURES:
            peak, psrc, meas, msrc = table[key]
            o = ours.get(key)
            ratio = o / meas if o and meas else None
            if ratio:
                worst = max(worst, ratio, 1 / ratio)
            print(f"| {dev} | {what} | {o / unit:.4g} {uname} | {peak / unit:.4g} ({psrc}) | "
                  f"{f'{meas / unit:.4g} ({msrc})' if meas else '-'} | {f'{ratio:.2f}' if ratio else '-'} |")
    print()
    print(f"Every figure is within {worst:.2f}x of its measurement (the rule: a profile more than 2x from what is "
          "achievable gets fixed). Sources:")
    print()
    for name, url in SOURCES.items():
        print(f"- {name}: {url}")


if __name__ == "__main__":
    main()
