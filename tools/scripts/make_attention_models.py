#!/usr/bin/python3
"""Make the attention test models in tests/data/attention/ with their PyTorch fixtures.

Run with Debian's Python (torch 1.13, onnx 1.12, numpy), from anywhere:

    /usr/bin/python3 tools/scripts/make_attention_models.py

Each model is a tiny language model, tokens -> embedding -> attention block(s) ->
lm_head -> logits, exported by torch.onnx.export in eval mode, whose attention core is
written the way a torch user writes it, so that the exporter decomposes it the way the
fusion pass (planner/train/fuse_attention.c) must recognise:

  where_bool_opsetN   q @ k.transpose(-2, -1) * scale, masked_fill(~tril_bool, -inf),
                      softmax, @ v; two blocks; opsets 13 to 17
  where_float         nanoGPT's form: a float tril(ones) buffer [1, 1, S, S] and
                      masked_fill(mask[:, :, :S, :S] == 0, -inf); the mask is arithmetic
                      (Slice, Equal, Where) over a float initializer, a constant only
                      once the buffer is frozen (planner/train/fold_frozen.h): causal=1
  additive_div        q @ k.transpose(-2, -1) / sqrt(hd) + triu(-inf) float buffer
                      (an Add of a constant causal mask: becomes causal=1)
  cross_mem           queries from the sequence, keys and values from a learned memory
                      of 5 slots (S=12 != T=5), no mask, Mul by scale, torch.softmax
  long_seq            one where_bool block with S=128, hidden 32, 4 heads: the shape
                      where the saved probabilities (a*s*s) outweigh the rest

Writes tests/data/attention/<name>/:
  model.onnx               the export (params and buffers as initializers, their names)
  meta.json                input, dims, buffers (frozen), loss, opset, patterns (the
                           number of attention cores the pass must fuse)
  fixtures/x.pb            tokens [4, S] (int64), fixtures/labels.pb the next tokens
  fixtures/loss.pb         cross-entropy (mean) at the initial weights
  fixtures/grads/<p>.pb    d loss / d p for every parameter

Seeded and single-threaded: a rerun writes the same bytes.
"""

import json
import math
import os
import shutil

import numpy as np
import onnx
from onnx import numpy_helper
import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "data", "attention")
BATCH = 4
VOCAB = 24

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)


class Attention(nn.Module):
    def __init__(self, kind, hidden, heads, seq, mem=0):
        super().__init__()
        self.kind, self.hidden, self.heads = kind, hidden, heads
        self.c_attn = nn.Linear(hidden, 3 * hidden)
        self.c_proj = nn.Linear(hidden, hidden)
        nn.init.normal_(self.c_attn.weight, 0.0, 0.3)  # attention far from uniform
        if kind == "where_bool":
            self.register_buffer("mask", torch.tril(torch.ones(seq, seq, dtype=torch.bool)).view(1, 1, seq, seq))
        elif kind == "where_float":
            self.register_buffer("mask", torch.tril(torch.ones(seq, seq)).view(1, 1, seq, seq))
        elif kind == "additive_div":
            self.register_buffer("mask", torch.triu(torch.full((seq, seq), float("-inf")), diagonal=1))
        elif kind == "cross_mem":
            self.memory = nn.Parameter(torch.randn(mem, hidden))

    def split_heads(self, t):
        B, T, _ = t.shape
        return t.view(B, T, self.heads, self.hidden // self.heads).transpose(1, 2)

    def forward(self, x):
        B, S, C = x.shape
        hd = C // self.heads
        q, k, v = self.c_attn(x).split(C, dim=2)
        if self.kind == "cross_mem":  # keys and values from the memory, the same for every batch row
            _, k, v = self.c_attn(self.memory).split(C, dim=1)
            k = k.unsqueeze(0).expand(B, -1, -1)
            v = v.unsqueeze(0).expand(B, -1, -1)
        q, k, v = self.split_heads(q), self.split_heads(k), self.split_heads(v)
        if self.kind == "where_bool":
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
            att = att.masked_fill(~self.mask[:, :, :S, :S], float("-inf"))
            att = F.softmax(att, dim=-1)
        elif self.kind == "where_float":
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
            att = att.masked_fill(self.mask[:, :, :S, :S] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
        elif self.kind == "additive_div":
            att = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(hd) + self.mask
            att = F.softmax(att, dim=-1)
        else:
            att = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * (hd ** -0.5), dim=-1)
        y = att @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, S, C))


class TinyLM(nn.Module):
    def __init__(self, kind, layers, hidden, heads, seq, mem=0):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, hidden)
        self.wpe = nn.Parameter(torch.randn(seq, hidden) * 0.1)
        self.blocks = nn.ModuleList([Attention(kind, hidden, heads, seq, mem) for _ in range(layers)])
        self.lm_head = nn.Linear(hidden, VOCAB)

    def forward(self, tokens):
        x = self.wte(tokens) + self.wpe
        for b in self.blocks:
            x = x + b(x)
        return self.lm_head(x)


def write_tensor(path, arr, name):
    t = numpy_helper.from_array(np.ascontiguousarray(arr), name=name)
    with open(path, "wb") as f:
        f.write(t.SerializeToString())


def build(name, kind, opset, layers=2, hidden=16, heads=2, seq=12, mem=0, seed=0):
    torch.manual_seed(seed)
    model = TinyLM(kind, layers, hidden, heads, seq, mem).eval()
    seqs = torch.randint(0, VOCAB, (BATCH, seq + 1))
    tokens, labels = seqs[:, :-1].contiguous(), seqs[:, 1:].contiguous()
    out_dir = os.path.join(OUT, name)
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(os.path.join(out_dir, "fixtures", "grads"))
    path = os.path.join(out_dir, "model.onnx")
    torch.onnx.export(model, (tokens,), path, export_params=True, do_constant_folding=False, opset_version=opset,
                      input_names=["tokens"], output_names=["logits"],
                      training=torch.onnx.TrainingMode.PRESERVE, keep_initializers_as_inputs=False)
    om = onnx.load(path)
    onnx.checker.check_model(om)
    inits = {t.name for t in om.graph.initializer}
    params = dict(model.named_parameters())
    buffers = sorted(n for n, _ in model.named_buffers() if n in inits)
    assert set(params) <= inits, sorted(set(params) - inits)
    ops = {}
    for n in om.graph.node:
        ops[n.op_type] = ops.get(n.op_type, 0) + 1
    assert ops.get("Softmax") == layers, ops

    model.zero_grad()
    logits = model(tokens)
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1))
    loss.backward()
    fix = os.path.join(out_dir, "fixtures")
    write_tensor(os.path.join(fix, "x.pb"), tokens.numpy(), "tokens")
    write_tensor(os.path.join(fix, "labels.pb"), labels.numpy(), "labels")
    write_tensor(os.path.join(fix, "loss.pb"), np.array(loss.item(), dtype=np.float32), "loss")
    for n, p in params.items():
        write_tensor(os.path.join(fix, "grads", n + ".pb"), p.grad.numpy(), n)
    meta = {"input": "tokens", "dims": {}, "buffers": buffers, "loss": "ce:logits", "opset": opset,
            "patterns": layers, "torch": torch.__version__, "ops": ops}
    with open(os.path.join(out_dir, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    print(f"{name:<20} opset {opset}  {os.path.getsize(path):>7} bytes  loss {loss.item():.5f}  {ops}")


def main():
    for opset in range(13, 18):
        build(f"where_bool_opset{opset}", "where_bool", opset, seed=opset)
    build("where_float", "where_float", 17, seed=4)
    build("additive_div", "additive_div", 14, seed=1)
    build("cross_mem", "cross_mem", 15, layers=1, mem=5, seed=2)
    build("long_seq", "where_bool", 17, layers=1, hidden=32, heads=4, seq=128, seed=3)


if __name__ == "__main__":
    main()
