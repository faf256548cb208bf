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
     peak in fp32 and bf16 on the kit's exports (tests/data/torch2).
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
    print("AdamW, h100 profile; wall seconds of one run each on this machine.")
    print()
    print("| model | unchecked arena (planned in) | budget | `--auto` wall | search | checkpointed / pruned of | chosen |")
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
        rc, out, wall = run(base + ["--budget", b, "--auto"] + extra)
        s = re.search(r"searched in ([0-9.]+) s: (\d+) candidates planned as they are, (\d+) of them checkpointed by dp, "
                      r"(\d+) not", out)
        w = re.search(r"^(.*) won:", out, re.M)
        if rc or not s:
            print(f"| {desc} | {arena / 2**30:.2f} GiB ({wall0:.2f} s) | {b} | failed (exit {rc}) | | | |")
            continue
        print(f"| {desc} | {arena / 2**30:.2f} GiB ({wall0:.2f} s) | {b if budget else 'half: ' + b + ' B'} | "
              f"{wall:.2f} s | {float(s.group(1)):.2f} s | {s.group(3)} / {s.group(4)} of {s.group(2)} | "
              f"{w.group(1) if w else '-'} |")
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


if __name__ == "__main__":
    main()
