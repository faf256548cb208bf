#!/usr/bin/env python3
"""Hugging Face models with their default dropout, through the front door (issue 37).

In:  tiny configs of GPT-2, BERT, RoBERTa, OPT, ViT and BLOOM (random weights, seed 0),
     their dropouts as the configs default them (OPT's, ViT's and BLOOM's default 0 set
     to 0.1); BUILD/onnx-vplan.  Run with PyPI's torch 2.x (tools/scripts/torch2_venv.sh).
Out: on stdout, a markdown table: per model the Dropout nodes onnx_vplan.export's train()
     export holds, what the fused step fuses, and 3 AdamW steps' losses with the
     attention fused and plain (`--attention plain`), and their largest relative
     difference.
Keeps: each model exported once into a temporary folder; the losses come from the tool
     (`train --json`), on synthetic data (`--data synthetic`, seed 0) for both runs, so the
     two runs draw the same masks where the attention fuses its dropout.
usage: check_hf_dropout.py [--build BUILD]"""
import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
V, B, T = 64, 2, 16


def cases():
    import transformers as tf
    return {
        "GPT-2": (tf.GPT2LMHeadModel, tf.GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=V, n_positions=T), "ids"),
        "BERT": (tf.BertForSequenceClassification, tf.BertConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=2,
                 intermediate_size=64, vocab_size=V, max_position_embeddings=T, num_labels=3), "ids"),
        "RoBERTa": (tf.RobertaForSequenceClassification, tf.RobertaConfig(num_hidden_layers=2, hidden_size=32,
                    num_attention_heads=2, intermediate_size=64, vocab_size=V, max_position_embeddings=T + 2,
                    num_labels=3), "ids"),
        "OPT": (tf.OPTForCausalLM, tf.OPTConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=2, ffn_dim=64,
                word_embed_proj_dim=32, vocab_size=V, max_position_embeddings=T, dropout=0.1, attention_dropout=0.1),
                "ids"),
        "ViT": (tf.ViTForImageClassification, tf.ViTConfig(image_size=16, patch_size=4, num_channels=3, hidden_size=32,
                num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, num_labels=3, hidden_dropout_prob=0.1,
                attention_probs_dropout_prob=0.1), "pixels"),
        "BLOOM": (tf.BloomForCausalLM, tf.BloomConfig(n_layer=2, hidden_size=32, n_head=2, vocab_size=V,
                  hidden_dropout=0.1, attention_dropout=0.1), "ids"),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    a = ap.parse_args()
    import onnx
    import torch
    sys.path.insert(0, os.path.join(ROOT, "tools", "python"))
    import onnx_vplan

    class Logits(torch.nn.Module):
        def __init__(self, m, kind):
            super().__init__()
            self.m, self.kind = m, kind

        def forward(self, x):
            return (self.m(pixel_values=x) if self.kind == "pixels" else self.m(input_ids=x)).logits

    tool = os.path.join(a.build, "onnx-vplan")
    print(f"torch {torch.__version__}; `onnx_vplan.export` (from train()), 3 AdamW steps on synthetic data")
    print()
    print("| model | Dropout nodes | fused | losses, attention fused | losses, plain | largest difference |")
    print("|---|---|---|---|---|---|")
    for name, (cls, cfg, kind) in cases().items():
        torch.manual_seed(0)
        model = Logits(cls(cfg), kind)
        x = torch.randn(B, 3, 16, 16) if kind == "pixels" else torch.randint(0, V, (B, T))
        with tempfile.TemporaryDirectory(prefix="hf_dropout_") as d:
            with contextlib.redirect_stderr(open(os.devnull, "w")):
                path = onnx_vplan.export(model, (x,), os.path.join(d, "m.onnx"), input_names=["x"],
                                         output_names=["logits"], progress=False)
            drops = sum(n.op_type == "Dropout" for n in onnx.load(path).graph.node)
            losses, fused = {}, ""
            for att in ("fused", "plain"):
                out = os.path.join(d, att + ".json")
                r = subprocess.run([tool, "train", path, "--loss", "ce:logits", "--optimizer", "adamw", "--steps", "3",
                                    "--attention", att, "--json", out], capture_output=True, text=True)
                if r.returncode:
                    losses[att] = None
                    fused = (r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1]
                    continue
                losses[att] = json.load(open(out))["losses"]
                if att == "fused":
                    fused = next((l.split("fused ", 1)[1].split(",")[0] for l in r.stdout.splitlines()
                                  if l.startswith("fused ")), "")
            if None in losses.values():
                print(f"| {name} | {drops} | failed: {fused} | | | |")
                continue
            diff = max(abs(p - q) / abs(q) for p, q in zip(losses["fused"], losses["plain"]))
            fmt = lambda v: " ".join(f"{x:.6f}" for x in v)
            print(f"| {name} | {drops} | {fused} | {fmt(losses['fused'])} | {fmt(losses['plain'])} | {diff:.1e} |")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
