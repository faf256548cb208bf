#!/usr/bin/env python3
"""Attention with a padding mask as an input (stop 49): the bench's BERT (8 x 64) and Llama
(4 x 64) of torch2_peak.py exported by torch 2.x's dynamo exporter (optimize=False) with
`attention_mask` as a second input, the first row's last 16 positions padded; our AdamW
step's arena with the attention fused against `--attention plain`.

Until stop 49 no attention fused there (torch's guard of the rows a runtime mask keeps no
key of); this is the measurement of that change.  PyTorch's side is torch2_peak.py's.
usage: build/venv-torch2/bin/python tools/bench/mask_arena.py [--build BUILD] [--opset N]
"""
import argparse
import contextlib
import os
import re
import subprocess
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--opset", type=int, help="export at this opset (23: ONNX Attention)")
    a = ap.parse_args()
    try:
        import torch
        import transformers
    except ImportError as e:
        print(f"Skipped: {e} for {sys.executable} (make the venv with tools/scripts/torch2_venv.sh).")
        return

    class WithMask(torch.nn.Module):
        def __init__(self, m, kind):
            super().__init__()
            self.m, self.kind = m, kind

        def forward(self, ids, mask):
            if self.kind == "lm":
                return self.m(input_ids=ids, attention_mask=mask, use_cache=False).logits
            return self.m(input_ids=ids, attention_mask=mask).logits

    models = {
        "bert": (lambda: transformers.BertForSequenceClassification(transformers.BertConfig(
            num_hidden_layers=4, hidden_size=256, num_attention_heads=4, intermediate_size=1024, vocab_size=1000,
            max_position_embeddings=64, num_labels=3, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)),
            "cls", 8, 64),
        "llama": (lambda: transformers.LlamaForCausalLM(transformers.LlamaConfig(
            num_hidden_layers=4, hidden_size=256, num_attention_heads=8, num_key_value_heads=2,
            intermediate_size=688, vocab_size=1000, max_position_embeddings=64)), "lm", 4, 64),
    }
    vplan = os.path.join(a.build, "onnx-vplan")
    work = os.path.join(a.build, "mask_arena")
    os.makedirs(work, exist_ok=True)
    print("| model (padding mask as an input) | ours, attention fused | ours, plain attention |")
    print("|---|---|---|")
    for name, (make, kind, b, t) in models.items():
        torch.manual_seed(0)
        model = WithMask(make(), kind).eval()
        ids = torch.randint(0, 1000, (b, t))
        mask = torch.ones(b, t, dtype=torch.int64)
        mask[0, t - 16:] = 0
        path = os.path.join(work, f"{name}{'.op' + str(a.opset) if a.opset else ''}.onnx")
        with contextlib.redirect_stdout(sys.stderr):
            torch.onnx.export(model, (ids, mask), path, input_names=["x", "mask"], output_names=["logits"],
                              optimize=False, external_data=False, **({"opset_version": a.opset} if a.opset else {}))
        arena = {}
        for att in ("fused", "plain"):
            r = subprocess.run([vplan, "plan", path, "--loss", "ce:logits", "--optimizer", "adamw", "--attention", att],
                               capture_output=True, text=True)
            m = re.search(r"^arena: .*\((\d+) bytes\)", r.stdout, re.M)
            arena[att] = f"{int(m.group(1)) / 2**20:.1f} MiB" if m else f"failed (exit {r.returncode})"
        print(f"| {name} ({b} x {t}) | {arena['fused']} | {arena['plain']} |")


if __name__ == "__main__":
    main()
