#!/usr/bin/python3
"""Real torch.onnx exports of models a new user would bring, with random weights.

In:  the models below, built in PyTorch with random weights (nothing is downloaded):
     torchvision resnet18, mobilenet_v2, squeezenet1_1 (batch 8, 3x224x224, 1000
     classes), a 4-layer MLP, and a nanoGPT-style decoder (6 pre-LN layers, d 256,
     4 heads, seq 128, vocab 1024, exact GELU, the causal mask a registered buffer
     read through masked_fill, positions through torch.arange).
Out: for every model and every --opset, OUT/<name>-op<N>.onnx, exported from eval()
     with TrainingMode.PRESERVE (BatchNormalization stays a node: torch's EVAL mode
     folds it into the convolution, which is not the step PyTorch trains), and with
     --training also OUT/<name>-op<N>-train.onnx from train() with
     TrainingMode.TRAINING (BatchNormalization in training mode, Dropout nodes).
     OUT/<name>-op<N>[-train].json says what a planner needs: the input name and shape, the batch
     the fixtures assume, the regex of the non-parameter buffers that were exported
     as initializers (give it to `plan --freeze`), the parameter count.
Keeps: the batch dim of the input and of the output 'logits' is symbolic ('batch');
     parameters keep their torch names as initializers (do_constant_folding=False).

The modules are also what tools/bench/torch_peak.py trains in eager mode
(build_model), so both sides measure one network.

usage: export_torch_models.py [OUT] [--opset N ...] [--training] [--models a,b]
       (OUT defaults to build/torch_models; the files are large: make them at bench time)
"""
import argparse
import json
import math
import os
import sys

BATCH = 8
GPT_VOCAB, GPT_SEQ, GPT_D, GPT_HEADS, GPT_LAYERS = 1024, 128, 256, 4, 6
MLP_DIMS = (784, 1024, 1024, 1024, 10)
MODELS = ("mlp", "resnet18", "mobilenet_v2", "squeezenet1_1", "gpt")


def gpt_classes():
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class CausalSelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(GPT_D, 3 * GPT_D)
            self.c_proj = nn.Linear(GPT_D, GPT_D)
            # nanoGPT keeps a lower-triangular ones matrix and masks where it is 0
            self.register_buffer(
                "causal_mask", torch.tril(torch.ones(GPT_SEQ, GPT_SEQ)).view(1, 1, GPT_SEQ, GPT_SEQ))

        def forward(self, x):
            B, T, C = x.size()
            q, k, v = self.c_attn(x).split(GPT_D, dim=2)
            q = q.view(B, T, GPT_HEADS, C // GPT_HEADS).transpose(1, 2)
            k = k.view(B, T, GPT_HEADS, C // GPT_HEADS).transpose(1, 2)
            v = v.view(B, T, GPT_HEADS, C // GPT_HEADS).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.causal_mask[:, :, :T, :T] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
            return self.c_proj(y)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(GPT_D)
            self.attn = CausalSelfAttention()
            self.ln_2 = nn.LayerNorm(GPT_D)
            self.c_fc = nn.Linear(GPT_D, 4 * GPT_D)
            self.mlp_proj = nn.Linear(4 * GPT_D, GPT_D)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(GPT_VOCAB, GPT_D)
            self.wpe = nn.Embedding(GPT_SEQ, GPT_D)
            self.blocks = nn.ModuleList([Block() for _ in range(GPT_LAYERS)])
            self.ln_f = nn.LayerNorm(GPT_D)
            self.lm_head = nn.Linear(GPT_D, GPT_VOCAB, bias=False)
            for name, p in self.named_parameters():
                if p.dim() == 2:
                    nn.init.normal_(p, 0.0, 0.02)

        def forward(self, idx):
            _, T = idx.size()
            pos = torch.arange(0, T, dtype=torch.long, device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for block in self.blocks:
                x = block(x)
            return self.lm_head(self.ln_f(x))

    return GPT


def build_model(name, batch=BATCH, seed=0):
    """(module, input, labels, input name) with random weights; the module in eval()."""
    import torch
    import torch.nn as nn

    torch.manual_seed(seed)
    if name == "mlp":
        layers = []
        for i in range(len(MLP_DIMS) - 1):
            layers.append(nn.Linear(MLP_DIMS[i], MLP_DIMS[i + 1]))
            if i + 2 < len(MLP_DIMS):
                layers.append(nn.ReLU())
        model = nn.Sequential(*layers)
        x = torch.randn(batch, MLP_DIMS[0])
        labels = torch.randint(0, MLP_DIMS[-1], (batch,))
        input_name = "x"
    elif name == "gpt":
        model = gpt_classes()()
        x = torch.randint(0, GPT_VOCAB, (batch, GPT_SEQ))
        labels = torch.randint(0, GPT_VOCAB, (batch, GPT_SEQ))
        input_name = "tokens"
    else:
        import torchvision

        model = getattr(torchvision.models, name)(weights=None, num_classes=1000)
        x = torch.randn(batch, 3, 224, 224)
        labels = torch.randint(0, 1000, (batch,))
        input_name = "x"
    distinct_params(model, seed)
    return model.eval(), x, labels, input_name


def distinct_params(model, seed):
    """Parameters and BatchNorm statistics with distinct random values, as a trained
    model has. At their initial values many are equal (every BatchNorm and LayerNorm
    weight of one width is ones, SqueezeNet's biases are zeros), and torch.onnx (1.13)
    deduplicates equal initializers of a module in eval(): the export keeps one and
    feeds the others through Identity nodes, which ties parameters of different layers
    together (and a BatchNorm weight to another layer's running_var) in the graph a
    trainer reads. Normalisation affines get weights near 1, any other parameter that
    holds one value throughout gets small noise."""
    import torch
    import torch.nn as nn

    g = torch.Generator().manual_seed(1000 + seed)
    norms = (nn.modules.batchnorm._BatchNorm, nn.LayerNorm)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, norms) and m.weight is not None:
                m.weight.copy_(torch.rand(m.weight.shape, generator=g) * 0.5 + 0.75)
                m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.1)
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=g) + 0.5)
            if isinstance(m, norms):
                continue
            for p in m.parameters(recurse=False):
                if p.numel() > 1 and bool((p == p.flatten()[0]).all()):
                    p.copy_(torch.randn(p.shape, generator=g) * 0.01)


def frozen_buffers(model):
    """Buffers that are not BatchNorm statistics: constants to the step (the causal
    mask), which a planner must not train. BatchNorm's running_mean / running_var are
    recognised by the planner itself; num_batches_tracked is not exported."""
    import torch.nn as nn

    bn = set()
    for mname, m in model.named_modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            bn.update(f"{mname}.{b}" for b, _ in m.named_buffers(recurse=False))
    return sorted(n for n, _ in model.named_buffers() if n not in bn)


def export(name, out_dir, opset, training, log=sys.stdout):
    import torch
    import onnx

    model, x, labels, input_name = build_model(name)
    suffix = "-train" if training else ""
    path = os.path.join(out_dir, f"{name}-op{opset}{suffix}.onnx")
    if training:
        model.train()
    torch.onnx.export(
        model, (x,), path,
        export_params=True,
        do_constant_folding=False,
        opset_version=opset,
        input_names=[input_name],
        output_names=["logits"],
        dynamic_axes={input_name: {0: "batch"}, "logits": {0: "batch"}},
        training=torch.onnx.TrainingMode.TRAINING if training else torch.onnx.TrainingMode.PRESERVE,
        keep_initializers_as_inputs=False,
    )
    om = onnx.load(path)
    onnx.checker.check_model(om)
    inits = {t.name for t in om.graph.initializer}
    missing = [n for n, _ in model.named_parameters() if n not in inits]
    if missing:  # tied by the exporter: the graph would not train what torch trains
        raise SystemExit(f"{name}: parameters not exported as initializers: {missing[:5]}")
    frozen = [b for b in frozen_buffers(model) if b in inits]
    meta = {
        "name": name,
        "input": input_name,
        "input_shape": list(x.shape),
        "batch": BATCH,
        "params": sum(p.numel() for p in model.parameters()),
        "freeze": "|".join(f"^{b.replace('.', '[.]')}$" for b in frozen) or None,
        "torch": torch.__version__,
    }
    with open(path[:-len(".onnx")] + ".json", "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    nodes = len(om.graph.node)
    print(f"{os.path.basename(path)}: {nodes} nodes, {meta['params']} params, "
          f"{os.path.getsize(path) / 2**20:.1f} MiB" + (f", freeze {len(frozen)} buffers" if frozen else ""), file=log)
    return path


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", nargs="?", default=os.path.join("build", "torch_models"))
    ap.add_argument("--opset", type=int, nargs="+", default=[17])
    ap.add_argument("--training", action="store_true",
                    help="also write training-mode exports (<name>-op<N>-train.onnx)")
    ap.add_argument("--models", default=",".join(MODELS))
    a = ap.parse_args(argv)
    try:
        import torch  # noqa: F401
        import onnx  # noqa: F401
    except ImportError as e:
        print(f"export_torch_models: skipped, {e}", file=sys.stderr)
        return 0
    import warnings
    warnings.filterwarnings("ignore")  # torch.onnx's tracer warnings about size() arithmetic
    os.makedirs(a.out, exist_ok=True)
    for name in a.models.split(","):
        if name not in MODELS:
            ap.error(f"unknown model {name}; known: {', '.join(MODELS)}")
        if name in ("resnet18", "mobilenet_v2", "squeezenet1_1"):
            try:
                import torchvision  # noqa: F401
            except ImportError:
                print(f"export_torch_models: {name} skipped, torchvision is not installed", file=sys.stderr)
                continue
        for opset in a.opset:
            for training in ((False, True) if a.training else (False,)):
                export(name, a.out, opset, training)
    return 0


if __name__ == "__main__":
    sys.exit(main())
