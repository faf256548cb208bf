#!/usr/bin/python3
"""Make the small real models in models/ and their PyTorch fixtures.

Run with Debian's Python (it has torch 1.13, onnx 1.12 and numpy):

    cd models && /usr/bin/python3 make_models.py

or from the repository root: /usr/bin/python3 models/make_models.py
(the output folder is always the folder holding this script).

For every model it writes models/<name>/:
  model.onnx                       torch.onnx.export, eval mode, params as initializers
  meta.json                        parameter counts, input, dims, loss, opset, torch version
  fixtures/x.pb                    one input batch (batch 4), named as the graph input
  fixtures/labels.pb               int64 class labels for the cross-entropy loss
  fixtures/output.pb               eval-mode torch forward of x (the graph output)
  fixtures/loss.pb                 train-mode cross-entropy (mean) at the initial weights
  fixtures/grads/<param>.pb        train-mode d loss / d param for every parameter
  fixtures/train_sgd_momentum.json 5 steps of torch.optim.SGD(momentum=0.9), losses before each update
  fixtures/train_adamw.json        5 steps of torch.optim.AdamW, losses before each update

Everything is seeded and single-threaded so that a rerun reproduces the same bytes.
"""

import collections
import copy
import json
import math
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
BATCH = 4
TRAIN_STEPS = 5

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)


# --------------------------------------------------------------------------- models


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(32, 64)
        self.fc2 = nn.Linear(64, 64)
        self.fc3 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


class BasicBlock(nn.Module):
    """ResNet basic block: conv-bn-relu-conv-bn + skip, relu."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride=stride, bias=False),
                nn.BatchNorm2d(cout),
            )
        else:
            self.downsample = None

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        skip = x if self.downsample is None else self.downsample(x)
        return F.relu(out + skip)


class CNN(nn.Module):
    """ResNet-style: stem conv-bn-relu, block(16->16), block(16->32, stride 2), GAP, fc."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.layer1 = BasicBlock(16, 16, 1)
        self.layer2 = BasicBlock(16, 32, 2)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer1(x)
        x = self.layer2(x)
        x = self.pool(x)
        x = torch.flatten(x, 1)
        return self.fc(x)


GPT_VOCAB = 64
GPT_SEQ = 16
GPT_HIDDEN = 32
GPT_HEADS = 2
GPT_LAYERS = 2


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(GPT_HIDDEN, 3 * GPT_HIDDEN)
        self.c_proj = nn.Linear(GPT_HIDDEN, GPT_HIDDEN)

    def forward(self, x, mask):
        B, T, C = x.size()
        hd = GPT_HIDDEN // GPT_HEADS
        q, k, v = self.c_attn(x).split(GPT_HIDDEN, dim=2)
        q = q.view(B, T, GPT_HEADS, hd).transpose(1, 2)  # B, nh, T, hd
        k = k.view(B, T, GPT_HEADS, hd).transpose(1, 2)
        v = v.view(B, T, GPT_HEADS, hd).transpose(1, 2)
        att = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att + mask  # additive causal mask: 0 on and below the diagonal, -1e4 above
        att = F.softmax(att, dim=-1)
        y = torch.matmul(att, v)  # B, nh, T, hd
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class GPTBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(GPT_HIDDEN)
        self.attn = CausalSelfAttention()
        self.ln_2 = nn.LayerNorm(GPT_HIDDEN)
        self.mlp_fc = nn.Linear(GPT_HIDDEN, 4 * GPT_HIDDEN)
        self.mlp_proj = nn.Linear(4 * GPT_HIDDEN, GPT_HIDDEN)

    def forward(self, x, mask):
        x = x + self.attn(self.ln_1(x), mask)
        x = x + self.mlp_proj(F.gelu(self.mlp_fc(self.ln_2(x))))  # exact (erf) GELU
        return x


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(GPT_VOCAB, GPT_HIDDEN)
        self.wpe = nn.Embedding(GPT_SEQ, GPT_HIDDEN)
        self.blocks = nn.ModuleList([GPTBlock() for _ in range(GPT_LAYERS)])
        self.ln_f = nn.LayerNorm(GPT_HIDDEN)
        self.lm_head = nn.Linear(GPT_HIDDEN, GPT_VOCAB, bias=False)
        mask = torch.triu(torch.full((GPT_SEQ, GPT_SEQ), -1e4), diagonal=1)
        self.register_buffer("causal_mask", mask)
        # GPT-2 style init: N(0, 0.02) for linears and embeddings, random LN affine so
        # that LayerNorm gradients are not trivially symmetric.
        for name, p in self.named_parameters():
            if name.endswith(".weight") and p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02 if "lm_head" not in name else 0.1)
            elif name.endswith(".bias"):
                nn.init.normal_(p, 0.0, 0.02)
        for m in self.modules():
            if isinstance(m, nn.LayerNorm):
                nn.init.uniform_(m.weight, 0.8, 1.2)
                nn.init.normal_(m.bias, 0.0, 0.05)
        for b in self.blocks:  # larger so that attention is not uniform
            nn.init.normal_(b.attn.c_attn.weight, 0.0, 0.3)

    def forward(self, tokens):
        # the sequence length is fixed at GPT_SEQ, so position embedding = whole table
        x = self.wte(tokens) + self.wpe.weight
        for block in self.blocks:
            x = block(x, self.causal_mask)
        x = self.ln_f(x)
        return self.lm_head(x)


# --------------------------------------------------------------------------- helpers


def seeded(seed):
    torch.manual_seed(seed)
    np.random.seed(seed)


def make_cnn():
    m = CNN()
    g = torch.Generator().manual_seed(1234)
    # random BatchNorm affine params and warmed-up running statistics, so that the
    # eval-mode output actually uses non-trivial running_mean / running_var
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d):
            with torch.no_grad():
                mod.weight.copy_(torch.rand(mod.weight.shape, generator=g) * 0.5 + 0.75)
                mod.bias.copy_(torch.randn(mod.bias.shape, generator=g) * 0.1)
    m.train()
    with torch.no_grad():
        for _ in range(3):
            m(torch.randn(8, 3, 16, 16, generator=g) * 1.5 + 0.3)
    return m


def write_tensor(path, arr, name):
    t = numpy_helper.from_array(np.ascontiguousarray(arr), name=name)
    with open(path, "wb") as f:
        f.write(t.SerializeToString())


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")


def ce_loss(logits, labels):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


def train_curve(model0, x, labels, make_opt):
    model = copy.deepcopy(model0)
    model.train()
    opt = make_opt(model.parameters())
    losses = []
    for _ in range(TRAIN_STEPS):
        opt.zero_grad()
        loss = ce_loss(model(x), labels)
        losses.append(float(loss.item()))
        loss.backward()
        opt.step()
    return losses


def op_histogram(model):
    return collections.Counter(n.op_type for n in model.graph.node)


# --------------------------------------------------------------------------- export


def build(name, model, x, labels, opset, input_name):
    out_dir = os.path.join(HERE, name)
    fix_dir = os.path.join(out_dir, "fixtures")
    grad_dir = os.path.join(fix_dir, "grads")
    os.makedirs(grad_dir, exist_ok=True)
    for f in os.listdir(grad_dir):  # stale grads from an older version of a model
        os.remove(os.path.join(grad_dir, f))

    # keep a pristine copy: the eval export / forward must not see train-mode BN updates
    initial = copy.deepcopy(model)

    # ---- export (eval mode)
    model.eval()
    onnx_path = os.path.join(out_dir, "model.onnx")
    # TrainingMode.PRESERVE with the module in eval(): the graph is the inference graph
    # (BatchNormalization in inference mode), but torch skips its eval-only peephole pass
    # that would fold BatchNorm into Conv and rename the initializers (TrainingMode.EVAL
    # does that even with do_constant_folding=False).
    torch.onnx.export(
        model,
        (x,),
        onnx_path,
        export_params=True,
        do_constant_folding=False,
        opset_version=opset,
        input_names=[input_name],
        output_names=["logits"],
        dynamic_axes={input_name: {0: "batch"}, "logits": {0: "batch"}},
        training=torch.onnx.TrainingMode.PRESERVE,
        keep_initializers_as_inputs=False,
    )
    om = onnx.load(onnx_path)
    onnx.checker.check_model(om)
    assert [i.name for i in om.graph.input] == [input_name], [i.name for i in om.graph.input]
    assert [o.name for o in om.graph.output] == ["logits"]
    for vi in list(om.graph.input) + list(om.graph.output):
        d0 = vi.type.tensor_type.shape.dim[0]
        assert d0.dim_param == "batch", (vi.name, d0)

    # every initializer must be a torch parameter or buffer, under the same name
    params = dict(initial.named_parameters())
    buffers = dict(initial.named_buffers())
    inits = {t.name: numpy_helper.to_array(t) for t in om.graph.initializer}
    for n, arr in inits.items():
        if n in params:
            ref = params[n].detach().numpy()
        elif n in buffers:
            ref = buffers[n].detach().numpy()
        else:
            raise SystemExit(f"{name}: initializer {n!r} is not a torch parameter or buffer")
        assert arr.shape == ref.shape and np.array_equal(arr, ref), n
    missing = sorted(set(params) - set(inits))
    if missing:
        raise SystemExit(f"{name}: parameters not exported as initializers: {missing}")
    exported_buffers = sorted(n for n in inits if n in buffers)

    # ---- eval-mode output
    with torch.no_grad():
        out = model(x)
    fix = lambda f: os.path.join(fix_dir, f)
    write_tensor(fix("x.pb"), x.numpy(), input_name)
    write_tensor(fix("labels.pb"), labels.numpy(), "labels")
    write_tensor(fix("output.pb"), out.numpy(), "logits")

    # ---- train-mode loss and gradients at the initial weights
    tm = copy.deepcopy(initial)
    tm.train()
    tm.zero_grad()
    loss = ce_loss(tm(x), labels)
    loss.backward()
    write_tensor(fix("loss.pb"), np.array(loss.item(), dtype=np.float32), "loss")
    for n, p in tm.named_parameters():
        assert p.grad is not None, n
        write_tensor(os.path.join(grad_dir, n + ".pb"), p.grad.numpy(), n)

    # ---- 5-step training curves from the same initial weights, same batch every step
    sgd = train_curve(
        initial, x, labels,
        lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0),
    )
    write_json(fix("train_sgd_momentum.json"), {
        "optimizer": "momentum", "lr": 0.1, "momentum": 0.9, "weight_decay": 0,
        "losses": sgd,
    })
    adamw = train_curve(
        initial, x, labels,
        lambda ps: torch.optim.AdamW(ps, lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                                     weight_decay=0.01, foreach=False),
    )
    write_json(fix("train_adamw.json"), {
        "optimizer": "adamw", "lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-8,
        "weight_decay": 0.01, "losses": adamw,
    })
    assert abs(sgd[0] - loss.item()) < 1e-6 and abs(adamw[0] - loss.item()) < 1e-6

    meta = {
        "params": sum(p.numel() for p in initial.parameters()),
        "param_tensors": len(list(initial.parameters())),
        "buffers": exported_buffers,
        "input": input_name,
        "input_shape": list(x.shape),
        "dims": {"batch": BATCH},
        "loss": "ce:logits",
        "opset": opset,
        "torch": torch.__version__,
    }
    write_json(os.path.join(out_dir, "meta.json"), meta)
    return {
        "name": name, "meta": meta, "ops": op_histogram(om),
        "loss": loss.item(), "sgd": sgd, "adamw": adamw,
        "bytes": os.path.getsize(onnx_path),
    }


def main():
    results = []

    seeded(0)
    mlp = MLP()
    x = torch.randn(BATCH, 32)
    labels = torch.randint(0, 10, (BATCH,))
    results.append(build("mlp", mlp, x, labels, 14, "x"))

    seeded(1)
    cnn = make_cnn()
    x = torch.randn(BATCH, 3, 16, 16)
    labels = torch.randint(0, 10, (BATCH,))
    results.append(build("cnn", cnn, x, labels, 14, "x"))

    for name, opset in (("gpt", 17), ("gpt_ln_decomposed", 14)):
        seeded(2)  # same weights and data for both exports
        gpt = GPT()
        seq = torch.randint(0, GPT_VOCAB, (BATCH, GPT_SEQ + 1))
        tokens, labels = seq[:, :-1].contiguous(), seq[:, 1:].contiguous()
        results.append(build(name, gpt, tokens, labels, opset, "tokens"))

    # fused vs decomposed LayerNorm
    by = {r["name"]: r for r in results}
    assert by["gpt"]["ops"]["LayerNormalization"] == 2 * GPT_LAYERS + 1, by["gpt"]["ops"]
    assert "LayerNormalization" not in by["gpt_ln_decomposed"]["ops"]
    assert by["gpt_ln_decomposed"]["ops"]["ReduceMean"] == 2 * (2 * GPT_LAYERS + 1)
    for f in ("output.pb", "loss.pb"):
        a = numpy_helper.to_array(onnx.load_tensor(os.path.join(HERE, "gpt", "fixtures", f)))
        b = numpy_helper.to_array(onnx.load_tensor(
            os.path.join(HERE, "gpt_ln_decomposed", "fixtures", f)))
        assert np.array_equal(a, b), f

    print()
    print(f"{'model':<20} {'opset':>5} {'params':>8} {'tensors':>7} {'onnx bytes':>10} "
          f"{'loss':>8}  sgd[-1]   adamw[-1]")
    for r in results:
        m = r["meta"]
        print(f"{r['name']:<20} {m['opset']:>5} {m['params']:>8} {m['param_tensors']:>7} "
              f"{r['bytes']:>10} {r['loss']:>8.4f}  {r['sgd'][-1]:.4f}    {r['adamw'][-1]:.4f}")
    print()
    for r in results:
        ops = ", ".join(f"{k} {v}" for k, v in sorted(r["ops"].items()))
        print(f"{r['name']}: {sum(r['ops'].values())} nodes: {ops}")
        if r["meta"]["buffers"]:
            print(f"  buffers as initializers: {r['meta']['buffers']}")
    print()
    import check_models  # independent numpy run of every model.onnx vs output.pb
    return check_models.main()


if __name__ == "__main__":
    sys.exit(main())
