"""Makes tests/data/tp: GPT-style models exported by torch.onnx for the tensor-parallel
tests (tests/test_tp.c): 4 heads (so --tp 2 and --tp 4 both split whole heads),
separate Q, K and V projections as nanoGPT-style code writes them when not fused,
tanh GELU, an additive causal mask buffer, logits flattened to [batch * seq, vocab].
  gpt_qkv   exported in eval mode, with torch's gradients and losses as fixtures
  gpt_drop  the same with nn.Dropout(0.1) on the embedding sum and on each sublayer's
            output before the residual Add (where Megatron-LM's sequence parallelism
            drops) and on the attention probabilities (split by heads under --tp),
            exported in training mode: its Dropouts are in the graph.  Only the
            batch is written (x, labels): torch's masks are not ours, the test compares
            our --tp --sp step with our one-rank step.
Run from the repository root with Debian's python3 (torch 1.13):
    python3 tools/scripts/make_tp_models.py
"""
import json
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
from fixture_export import export_with_fixtures, write_tensor  # noqa: E402

VOCAB, SEQ, HIDDEN, HEADS, LAYERS, BATCH = 48, 8, 32, 4, 2, 2


class Attention(nn.Module):
    def __init__(self, p=0.0):
        super().__init__()
        self.drop = nn.Dropout(p) if p else nn.Identity()
        self.q = nn.Linear(HIDDEN, HIDDEN)
        self.k = nn.Linear(HIDDEN, HIDDEN)
        self.v = nn.Linear(HIDDEN, HIDDEN)
        self.o = nn.Linear(HIDDEN, HIDDEN)

    def forward(self, x, mask):
        B, T, C = x.size()
        q = self.q(x).view(B, T, HEADS, C // HEADS).transpose(1, 2)
        k = self.k(x).view(B, T, HEADS, C // HEADS).transpose(1, 2)
        v = self.v(x).view(B, T, HEADS, C // HEADS).transpose(1, 2)
        att = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(C // HEADS) + mask
        y = torch.matmul(self.drop(F.softmax(att, dim=-1)), v)
        return self.o(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self, p=0.0):
        super().__init__()
        self.drop = nn.Dropout(p) if p else nn.Identity()
        self.ln1 = nn.LayerNorm(HIDDEN)
        self.attn = Attention(p)
        self.ln2 = nn.LayerNorm(HIDDEN)
        self.fc = nn.Linear(HIDDEN, 4 * HIDDEN)
        self.proj = nn.Linear(4 * HIDDEN, HIDDEN)

    def forward(self, x, mask):
        x = x + self.drop(self.attn(self.ln1(x), mask))
        return x + self.drop(self.proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh")))


class GPT(nn.Module):
    def __init__(self, p=0.0):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, HIDDEN)
        self.pos = nn.Embedding(SEQ, HIDDEN)
        self.drop = nn.Dropout(p) if p else nn.Identity()
        self.blocks = nn.ModuleList([Block(p) for _ in range(LAYERS)])
        self.ln_f = nn.LayerNorm(HIDDEN)
        self.head = nn.Linear(HIDDEN, VOCAB, bias=False)
        self.register_buffer("mask", torch.triu(torch.full((SEQ, SEQ), -1e4), diagonal=1))
        for name, p in self.named_parameters():  # distinct values: torch 1.x ties equal initializers
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.3 if ".attn." in name else 0.05)
            else:
                nn.init.normal_(p, 1.0 if "ln" in name and name.endswith("weight") else 0.0, 0.05)

    def forward(self, tokens):
        x = self.drop(self.tok(tokens) + self.pos.weight)
        for b in self.blocks:
            x = b(x, self.mask)
        return self.head(self.ln_f(x)).view(-1, VOCAB)


def main():
    torch.manual_seed(15)
    m = GPT()
    x = torch.randint(0, VOCAB, (BATCH, SEQ))
    labels = torch.randint(0, VOCAB, (BATCH * SEQ,))
    d = os.path.join("tests", "data", "tp", "gpt_qkv")
    export_with_fixtures(d, m, x, labels, opset=17, lr=0.05, steps=5, batch=BATCH,
                         extra_meta={"buffers": ["mask"], "heads": HEADS, "layers": LAYERS})
    print("wrote", d)

    torch.manual_seed(15)
    m = GPT(p=0.1).train()
    d = os.path.join("tests", "data", "tp", "gpt_drop")
    os.makedirs(os.path.join(d, "fixtures"), exist_ok=True)
    torch.onnx.export(m, (x,), os.path.join(d, "model.onnx"), export_params=True, do_constant_folding=False,
                      opset_version=17, training=torch.onnx.TrainingMode.TRAINING, input_names=["x"],
                      output_names=["logits"], dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}})
    write_tensor(os.path.join(d, "fixtures", "x.pb"), x.numpy(), "x")
    write_tensor(os.path.join(d, "fixtures", "labels.pb"), labels.numpy(), "labels")
    meta = {"input": "x", "dims": {"batch": BATCH}, "opset": 17, "dropout": 0.1,
            "params": [k for k, _ in m.named_parameters()], "buffers": ["mask"], "heads": HEADS, "layers": LAYERS,
            "torch": torch.__version__}
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    print("wrote", d)


if __name__ == "__main__":
    main()
