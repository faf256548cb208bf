#!/usr/bin/env python3
"""The Python package onnx_vplan (tools/python) against torch itself, on whichever torch
this Python has: PyPI's torch 2.x (the dynamo exporter) or Debian's 1.13 (TorchScript).

For each model: onnx_vplan.export of it (from eval()), then `onnx-vplan train` on the file
(SGD with momentum 0.9, lr 0.01, 3 steps, cross-entropy of `logits`, `--data DIR` with
raw x.bin and labels.bin as tests/data/torch2 holds them) against torch's own 3 steps in
train() mode on the same batch:
  - the losses within 1e-5;
  - the tool trains as many parameter elements as torch does (tied embeddings once, no
    buffer trained; with torch 1.x, parameters of equal initial value stay apart);
  - the weights and BatchNorm running statistics `train --save` writes equal torch's
    after its steps (what torch does not train stays as it was);
  - plan() gives the arena the command gives on the same file.
Then plan() of a module, its report, DOT, timeline and plan file, auto=True's candidates,
max_batch, and bad arguments raising VplanError with the tool's own message.  A model that
drops (Dropout, a dropout probability) is exported from train(), its Dropout in the graph
and trained with new masks each step, where eval() (mode="eval") leaves it out.

Models: a GPT-style nn.Module (tied embeddings, a causal-mask buffer, LayerNorms of
equal initial value), a CNN with BatchNorm, torchvision's MobileNetV2 reduced as the
kit's (where torchvision is); with torch 2.x also Hugging Face GPT-2 (tied embeddings)
and Llama from tiny configs (as tools/scripts/export_torch2_models.py; transformers is
not in Debian, whose torch is 1.13).  What this Python cannot build is skipped with the
reason.

Needs ONNX_VPLAN (the built command) and tools/python on PYTHONPATH
(tests/python/run_tests.sh sets both)."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import onnx
import torch
from onnx import numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "python"))
import onnx_vplan  # noqa: E402
from onnx_vplan import planning  # noqa: E402
from onnx_vplan.exporting import EXPORT_KEY, SIGNATURE_KEY, graph_metadata  # noqa: E402

TORCH2 = int(torch.__version__.split(".")[0]) >= 2
STEPS, LR, MOMENTUM = 3, 0.01, 0.9
LOSS_TOL = 1e-5
V, B, T = 64, 2, 8
TOOL = os.environ.get("ONNX_VPLAN", "onnx-vplan")

try:
    import transformers
except ImportError:
    transformers = None
try:
    import torchvision
except ImportError:
    torchvision = None


class Logits(torch.nn.Module):
    """A Hugging Face model's logits as its one output (tools/scripts/export_torch2_models.py)."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x):
        return self.m(input_ids=x, use_cache=False).logits


class TinyGPT(torch.nn.Module):
    """nanoGPT-style: tied token embedding and head, a causal mask buffer, LayerNorms."""

    def __init__(self, d=32, heads=2, layers=2):
        super().__init__()
        self.wte = torch.nn.Embedding(V, d)
        self.wpe = torch.nn.Embedding(T, d)
        self.blocks = torch.nn.ModuleList([TinyBlock(d, heads) for _ in range(layers)])
        self.ln_f = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, V, bias=False)
        self.head.weight = self.wte.weight  # tied
        for p in self.parameters():  # as nanoGPT; LayerNorms keep their equal ones and zeros
            if p.dim() == 2:
                torch.nn.init.normal_(p, 0.0, 0.02)

    def forward(self, x):
        pos = torch.arange(0, x.shape[1], dtype=torch.long)
        h = self.wte(x) + self.wpe(pos)
        for b in self.blocks:
            h = b(h)
        return self.head(self.ln_f(h))


class TinyBlock(torch.nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln_1, self.ln_2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.fc, self.out = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)
        self.register_buffer("mask", torch.tril(torch.ones(T, T)).view(1, 1, T, T))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / (c // self.heads) ** 0.5)
        att = att.masked_fill(self.mask[:, :, :t, :t] == 0, float("-inf")).softmax(-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, c))
        return x + self.out(torch.nn.functional.gelu(self.fc(self.ln_2(x))))


def tiny_cnn():
    """Convolutions with BatchNorm (equal initial weights: ones and zeros), ReLU, pooling."""
    nn = torch.nn
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))


def tiny_cnn_frozen():
    """tiny_cnn with its first convolution and last Linear's bias frozen (requires_grad=False),
    as Marian's and Whisper's position tables are: torch does not train them."""
    m = tiny_cnn()
    m[0].requires_grad_(False)
    m[9].bias.requires_grad_(False)
    return m


def ids(*shape):
    return torch.randint(0, V, shape)


def hf_lm(cls, cfg_cls, **cfg):
    return lambda: (Logits(cls(cfg_cls(**cfg))), ids(B, T), ids(B, T))


def mobilenet():
    stages = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 2, 2]]
    kw = {"dropout": 0.0} if "dropout" in torchvision.models.MobileNetV2.__init__.__code__.co_varnames else {}
    m = torchvision.models.MobileNetV2(num_classes=10, width_mult=0.25, inverted_residual_setting=stages, **kw)
    for mod in m.modules():  # torchvision 0.14 has no dropout argument: make it 0
        if isinstance(mod, torch.nn.Dropout):
            mod.p = 0.0
    return m, torch.randn(B, 3, 32, 32), torch.randint(0, 10, (B,))


def cases():
    """name -> (builder or None, reason it cannot run here)."""
    out = {}
    for name in ("gpt2", "llama"):
        out[name] = (None, f"Hugging Face models are tested with torch 2.x (this is {torch.__version__})")
    if TORCH2:
        if transformers is None:
            out["gpt2"] = out["llama"] = (None, "transformers is not installed")
        else:
            out["gpt2"] = (hf_lm(transformers.GPT2LMHeadModel, transformers.GPT2Config, n_layer=2, n_head=2, n_embd=32,
                                 vocab_size=V, n_positions=32, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0), "")
            out["llama"] = (hf_lm(transformers.LlamaForCausalLM, transformers.LlamaConfig, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=2, hidden_size=32, intermediate_size=64,
                                  vocab_size=V, max_position_embeddings=32, tie_word_embeddings=False), "")
    out["tiny_gpt"] = (lambda: (TinyGPT(), ids(B, T), ids(B, T)), "")
    out["tiny_cnn"] = (lambda: (tiny_cnn(), torch.randn(B, 3, 16, 16), torch.randint(0, 10, (B,))), "")
    out["tiny_cnn_frozen"] = (lambda: (tiny_cnn_frozen(), torch.randn(B, 3, 16, 16), torch.randint(0, 10, (B,))), "")
    out["mobilenet_v2"] = (mobilenet, "") if torchvision is not None else (None, "torchvision is not installed")
    return out


def torch_steps(model, x, labels):
    """torch's own training: (losses, state_dict after), in train() mode."""
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, {k: v.detach().clone() for k, v in model.state_dict().items()}


def read_json(path):
    with open(path) as f:
        return json.load(f)


def tool(*args):
    r = subprocess.run([TOOL] + [str(a) for a in args], capture_output=True, text=True)
    return r.returncode, r.stdout, r.stderr


class Exported(unittest.TestCase):
    """One export per model, shared by the checks on it."""
    tmp = None
    models = {}

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="test_onnx_vplan_")
        cls.models = {}

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def model(self, name):
        """(dir, path, torch losses, torch state after, trained elements) of model `name`."""
        if name in self.models:
            return self.models[name]
        build, why = cases()[name]
        if build is None:
            self.skipTest(f"{name}: {why}")
        torch.manual_seed(0)
        model, x, labels = build()
        d = os.path.join(self.tmp.name, name)
        os.makedirs(d)
        path = onnx_vplan.export(model, (x,), os.path.join(d, "model.onnx"), input_names=["x"], output_names=["logits"],
                                 progress=False)
        x.numpy().tofile(os.path.join(d, "x.bin"))
        labels.numpy().tofile(os.path.join(d, "labels.bin"))
        elements = sum(p.numel() for p in model.parameters() if p.requires_grad)  # each tied tensor once
        params = {p.data_ptr() for p in model.parameters()}  # tied ones under every name
        fixed = {k: v.detach().clone() for k, v in model.state_dict().items()  # what torch never changes
                 if v.data_ptr() not in params and not k.endswith(("running_mean", "running_var", "num_batches_tracked"))}
        losses, state = torch_steps(model, x, labels)
        self.models[name] = (d, path, losses, state, elements, fixed)
        return self.models[name]

    def check_trains_as_torch(self, name):
        d, path, want, state, elements, fixed = self.model(name)
        saved = os.path.join(d, "trained.onnx")
        rc, out, err = tool("train", path, "--loss", "ce:logits", "--optimizer", "momentum", "--lr", LR, "--momentum",
                            MOMENTUM, "--steps", STEPS, "--data", d, "--save", saved, "--json", os.path.join(d, "t.json"))
        self.assertEqual(rc, 0, f"{name}: train exit {rc}: {err}")
        got = read_json(os.path.join(d, "t.json"))["losses"]
        diffs = [abs(a - b) for a, b in zip(got, want)]
        print(f"\n  {name} (torch {torch.__version__}): losses {['%.7f' % v for v in got]}, torch "
              f"{['%.7f' % v for v in want]}, largest difference {max(diffs):.2e}", file=sys.stderr)
        self.assertEqual(len(got), STEPS)
        self.assertTrue(all(e <= LOSS_TOL for e in diffs), f"{name}: losses {got}, torch {want}")
        self.assertIn("trainable set: the exporter's signature", out)
        self.assertIn(f"parameters ({elements} elements)", out, f"{name}: torch trains {elements} elements:\n{out}")
        # the weights and running statistics saved equal torch's after its steps (float32
        # noise over 3 steps), and the buffers torch never changes are unchanged, bit for bit
        inits = {i.name: numpy_helper.to_array(i) for i in onnx.load(saved).graph.initializer}
        for k, v in fixed.items():
            if k in inits:
                self.assertTrue(np.array_equal(inits[k].reshape(tuple(v.shape)), v.numpy()), f"{name}: buffer {k} changed")
        compared = 0
        for k, v in state.items():  # initializers keep torch's names
            if k not in inits or not v.dtype.is_floating_point:
                continue
            a = inits[k].reshape(tuple(v.shape))
            self.assertTrue(np.allclose(a, v.numpy(), rtol=1e-3, atol=1e-4),
                            f"{name}: {k} after {STEPS} steps differs from torch's by {np.abs(a - v.numpy()).max()}")
            compared += 1
        self.assertGreater(compared, 0)
        return out

    def check_plan_arena(self, name):
        d, path, *_ = self.model(name)
        p = onnx_vplan.plan(path, loss="ce", optimizer="adamw", device="h100", progress=False)
        jpath = os.path.join(d, "cli.json")
        rc, _, err = tool("plan", path, "--loss", "ce:logits", "--optimizer", "adamw", "--device", "h100", "--json", jpath)
        self.assertEqual(rc, 0, err)
        cli = read_json(jpath)
        print(f"  {name}: plan() arena {p.arena_bytes} bytes, the command's {cli['arena_bytes']}", file=sys.stderr)
        self.assertEqual(p.arena_bytes, cli["arena_bytes"])
        self.assertEqual(p.categories, cli["categories"])
        self.assertEqual(p.peak_step, cli["peak_step"])
        self.assertTrue(p.fits)


class TestModels(Exported):
    def test_gpt2(self):
        self.check_trains_as_torch("gpt2")
        self.assertIn("tied", self.tool_warnings("gpt2"))
        meta = self.export_meta("gpt2")
        self.assertEqual(meta["tied"], {"m.transformer.wte.weight": "m.lm_head.weight"})
        self.check_plan_arena("gpt2")

    def test_llama(self):
        self.check_trains_as_torch("llama")
        meta = self.export_meta("llama")
        self.assertEqual(meta["tied"], {})
        self.assertIn("m.model.rotary_emb.inv_freq", meta["buffers"])
        self.check_plan_arena("llama")

    def test_mobilenet_v2(self):
        self.check_trains_as_torch("mobilenet_v2")
        meta = self.export_meta("mobilenet_v2")
        self.assertTrue(any(b.endswith("running_var") for b in meta["buffers"]))
        self.check_plan_arena("mobilenet_v2")

    def test_tiny_gpt(self):
        self.check_trains_as_torch("tiny_gpt")
        meta = self.export_meta("tiny_gpt")
        self.assertIn(meta["tied"], ({"head.weight": "wte.weight"}, {"wte.weight": "head.weight"}))
        self.assertIn("blocks.0.mask", meta["buffers"])
        # the LayerNorms' equal initial values did not tie them
        self.assertIn("blocks.1.ln_2.weight", meta["parameters"])
        self.check_plan_arena("tiny_gpt")

    def test_tiny_cnn(self):
        self.check_trains_as_torch("tiny_cnn")
        meta = self.export_meta("tiny_cnn")
        self.assertIn("1.running_mean", meta["buffers"])
        self.assertIn("5.weight", meta["parameters"])
        self.check_plan_arena("tiny_cnn")

    def test_frozen_parameters(self):
        """Parameters torch does not train (requires_grad=False) are marked in the graph
        signature, which no exporter records, and the tool does not train them: their
        values after the steps are torch's (unchanged), the trained elements torch's."""
        out = self.check_trains_as_torch("tiny_cnn_frozen")
        self.assertIn("parameters it marks requires_grad=False not trained either", out)
        _, path, *_ = self.model("tiny_cnn_frozen")
        sig = graph_metadata(onnx.load(path), SIGNATURE_KEY)
        frozen = sorted(line.split("target='")[1].split("'")[0] for line in sig.split("\n")
                        if "requires_grad=False" in line)
        self.assertEqual(frozen, ["0.bias", "0.weight", "9.bias"])
        self.assertIn("3 parameters marked requires_grad=False not trained", self.tool_warnings("tiny_cnn_frozen"))

    def export_meta(self, name):
        _, path, *_ = self.model(name)
        m = onnx.load(path)
        sig = graph_metadata(m, SIGNATURE_KEY)
        self.assertIsNotNone(sig, "no graph signature")
        self.assertIn(": PARAMETER target='", sig)
        meta = {p.key: p.value for p in m.metadata_props}
        return json.loads(meta[EXPORT_KEY])

    def tool_warnings(self, name):
        _, path, *_ = self.model(name)
        return tool("inspect", path)[1]


def first_case():
    """The model the plan checks use: the quickest to export that this Python builds."""
    for name in ("tiny_gpt", "gpt2", "tiny_cnn", "mobilenet_v2"):
        if cases()[name][0] is not None:
            return name
    return None


class TestPlan(Exported):
    def test_plan_module(self):
        """plan() of a module: exported, planned; its report and files; same arena as the
        command on the file it planned."""
        name = first_case()
        if name is None:
            self.skipTest("no model can be built here")
        torch.manual_seed(0)
        model, x, _ = cases()[name][0]()
        p = onnx_vplan.plan(model, (x,), budget="1GiB", device="a100", output_names=["logits"], progress=False)
        self.assertTrue(os.path.exists(p.model_path))
        self.assertIn("arena:", p.report())
        self.assertTrue(p.fits)
        self.assertGreater(p.categories["parameters"], 0)
        self.assertGreater(p.estimated_step_seconds, 0)
        self.assertIsNone(p.candidates)
        rc, _, err = tool("plan", p.model_path, "--loss", "ce:logits", "--optimizer", "adamw", "--device", "a100",
                          "--budget", "1GiB", "--json", os.path.join(self.tmp.name, "m.json"))
        self.assertEqual(rc, 0, err)
        self.assertEqual(read_json(os.path.join(self.tmp.name, "m.json"))["arena_bytes"], p.arena_bytes)
        for method, fname in ((p.to_dot, "p.dot"), (p.timeline, "p.svg"), (p.save, "p.vplan")):
            f = os.path.join(self.tmp.name, fname)
            method(f)
            self.assertGreater(os.path.getsize(f), 0, fname)
        rc, out, err = tool("verify", os.path.join(self.tmp.name, "p.vplan"))
        self.assertEqual(rc, 0, err)

    def test_auto_and_budget(self):
        name = first_case()
        if name is None:
            self.skipTest("no model can be built here")
        _, path, *_ = self.model(name)
        full = onnx_vplan.plan(path, device="a100", progress=False).arena_bytes
        p = onnx_vplan.plan(path, budget=full, device="a100", auto=True, progress=False)
        self.assertTrue(p.candidates)
        self.assertIsNotNone(p.chosen)
        self.assertTrue(p.candidates[p.chosen]["fits"])
        self.assertIn("joint search", p.report())
        over = onnx_vplan.plan(path, budget=1024, device="a100", remat="none", progress=False)
        self.assertFalse(over.fits)
        self.assertEqual(over.exit_code, 3)

    def test_knobs(self):
        """precision, remat, offload and tensor parallelism reach the tool; tp's
        report is rank 0's (FILE.0), as the command writes it."""
        name = first_case()
        if name is None:
            self.skipTest("no model can be built here")
        _, path, *_ = self.model(name)
        full = onnx_vplan.plan(path, device="a100", optimizer="adam", progress=False)
        off = onnx_vplan.plan(path, device="a100", optimizer="adam", offload=True, progress=False)
        self.assertGreater(off.categories["host"], 0)
        self.assertLess(off.arena_bytes, full.arena_bytes)
        low = onnx_vplan.plan(path, device="a100", precision="bf16", remat="sqrtn", progress=False)
        self.assertGreater(low.categories["weight_copies"], 0)
        self.assertEqual(low.remat, "sqrtn")
        # (--lora itself is refused on a signed export today: the adapters are not in the
        # signature; only the option's spelling is checked here)
        self.assertIn("r=4,alpha=8:qkv", planning._lora_spec({"r": 4, "alpha": 8, "regex": "qkv"}))
        tp = onnx_vplan.plan(path, device="a100", tp=2, progress=False)
        jpath = os.path.join(self.tmp.name, "tp.json")
        rc, _, err = tool("plan", path, "--loss", "ce:logits", "--optimizer", "adamw", "--device", "a100", "--tp", "2",
                          "--json", jpath)
        self.assertEqual(rc, 0, err)
        self.assertEqual(tp.arena_bytes, read_json(jpath + ".0")["arena_bytes"])
        self.assertIn("tensor_parallel", tp.json)

    def test_max_batch(self):
        name = first_case()
        if name is None:
            self.skipTest("no model can be built here")
        torch.manual_seed(0)
        build = cases()[name][0]
        model, x, _ = build()
        make = (lambda b: ids(b, T)) if x.dtype == torch.long else (lambda b: torch.randn((b,) + tuple(x.shape[1:])))
        budget = 8 << 20
        p = onnx_vplan.max_batch(model, make, dim="batch", budget=budget, device="a100", remat="none",
                                 output_names=["logits"], progress=False)
        self.assertIsNotNone(p.batch)
        self.assertGreaterEqual(p.batch, 1)
        print(f"  max_batch({name}, budget 8 MiB): batch {p.batch}, arena {p.arena_bytes}", file=sys.stderr)
        at = onnx_vplan.plan(p.model_path, dims={"batch": p.batch}, budget=budget, device="a100", remat="none",
                             progress=False)
        above = onnx_vplan.plan(p.model_path, dims={"batch": p.batch + 1}, budget=budget, device="a100", remat="none",
                                progress=False)
        self.assertTrue(at.fits)
        self.assertFalse(above.fits)
        self.assertEqual(at.arena_bytes, p.arena_bytes)

    def test_bad_arguments(self):
        """A bad argument raises VplanError with the tool's own message and exit code."""
        name = first_case()
        if name is None:
            self.skipTest("no model can be built here")
        _, path, *_ = self.model(name)
        for kw, opt in (({"device": "tpu"}, ["--device", "tpu"]), ({"budget": -5}, ["--budget", "-5"]),
                        ({"budget": "-5GiB"}, ["--budget", "-5GiB"]), ({"optimizer": "lbfgs"}, ["--optimizer", "lbfgs"]),
                        ({"loss": "ce:nope"}, []), ({"precision": "fp8"}, ["--precision", "fp8"])):
            with self.assertRaises(onnx_vplan.VplanError) as cm:
                onnx_vplan.plan(path, progress=False, **kw)
            loss = kw.get("loss", "ce:logits")
            rc, _, err = tool("plan", path, "--loss", loss, *opt)
            line = [ln for ln in err.splitlines() if ln.startswith("onnx-vplan: ") and "warning" not in ln][0]
            self.assertEqual(cm.exception.exit_code, rc, kw)
            self.assertEqual(cm.exception.exit_code, 2, kw)
            self.assertEqual(cm.exception.message, line[len("onnx-vplan: "):], kw)
        with self.assertRaises(onnx_vplan.VplanError) as cm:
            onnx_vplan.plan(os.path.join(self.tmp.name, "absent.onnx"), progress=False)
        self.assertIn("absent.onnx", cm.exception.message)
        with self.assertRaises(onnx_vplan.VplanError) as cm:
            onnx_vplan.plan(path, dims=["batch", 2], progress=False)
        self.assertEqual(cm.exception.exit_code, 2)
        with self.assertRaises(onnx_vplan.VplanError):
            onnx_vplan.plan(torch.nn.Linear(2, 2), progress=False)  # a module without args



class ClsLogits(Logits):
    """A classifier's logits (no cache argument)."""

    def forward(self, x):
        return self.m(input_ids=x).logits


class DropMLP(torch.nn.Module):
    """Linear, BatchNorm, ReLU, Dropout(0.5), Linear; and a dropout probability held as a
    float, as Hugging Face's attention modules hold theirs."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.bn = torch.nn.BatchNorm1d(32)
        self.drop = torch.nn.Dropout(0.5)
        self.fc2 = torch.nn.Linear(32, 4)
        self.attention_dropout = 0.1

    def forward(self, x):
        return self.fc2(self.drop(torch.relu(self.bn(self.fc1(x)))))


class TestDropout(unittest.TestCase):
    def test_dropout_exported_from_train(self):
        """Both exporters leave an eval() Dropout out; the front door exports a model that
        drops from train(), restores its state and mode, and the tool draws new masks."""
        torch.manual_seed(0)
        model = DropMLP().eval()
        self.assertEqual(sorted(onnx_vplan.exporting.dropping(model)), ["attention_dropout", "drop"])
        self.assertEqual(onnx_vplan.exporting.dropping(TinyGPT()), [])
        before = {k: v.clone() for k, v in model.state_dict().items()}
        x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
        with tempfile.TemporaryDirectory(prefix="test_dropout_") as d:
            ops = {}
            for mode in (None, "eval"):
                path = onnx_vplan.export(model, (x,), os.path.join(d, f"{mode}.onnx"), input_names=["x"],
                                         output_names=["logits"], mode=mode, progress=False)
                ops[mode] = [n.op_type for n in onnx.load(path).graph.node]
            self.assertIn("Dropout", ops[None], ops[None])
            self.assertNotIn("Dropout", ops["eval"], ops["eval"])
            self.assertFalse(model.training, "the model's mode is restored")
            for k, v in model.state_dict().items():
                self.assertTrue(torch.equal(v, before[k]), f"{k} changed by the export")
            x.numpy().tofile(os.path.join(d, "x.bin"))
            y.numpy().tofile(os.path.join(d, "labels.bin"))
            losses = {}
            for mode in (None, "eval"):
                rc, out, err = tool("train", os.path.join(d, f"{mode}.onnx"), "--loss", "ce:logits", "--steps", 2,
                                    "--data", d, "--json", os.path.join(d, f"{mode}.json"))
                self.assertEqual(rc, 0, err)
                self.assertNotIn("stays the same", err)
                losses[mode] = read_json(os.path.join(d, f"{mode}.json"))["losses"]
            # half the activations dropped: the first step's loss is not the undropped one
            self.assertNotEqual(losses[None][0], losses["eval"][0], losses)
            with self.assertRaises(onnx_vplan.VplanError):
                onnx_vplan.export(model, (x,), os.path.join(d, "bad.onnx"), mode="inference", progress=False)

    def test_random_ops_fall_back_to_eval(self):
        """A model whose train() export draws with ops the tool does not run (stochastic
        depth's uniform draws) is exported from eval() with a warning, which the tool plans."""
        if not TORCH2:
            self.skipTest("torch 2.x's exporter writes stochastic depth as RandomUniformLike")

        class DropPath(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = torch.nn.Linear(8, 8)
                self.drop = torch.nn.Dropout(0.1)

            def forward(self, x):
                h = self.fc(x)
                if self.training:  # stochastic depth, per row, as torchvision's StochasticDepth
                    h = h * (torch.rand(x.shape[0], 1) >= 0.2).to(h.dtype) / 0.8
                return self.drop(x + h)

        model, x = DropPath(), torch.randn(4, 8)
        with tempfile.TemporaryDirectory(prefix="test_random_ops_") as d:
            import contextlib
            import io
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                path = onnx_vplan.export(model, (x,), os.path.join(d, "m.onnx"), progress=False)
            self.assertIn("RandomUniform", err.getvalue())
            self.assertIn("exported from eval()", err.getvalue())
            ops = [n.op_type for n in onnx.load(path).graph.node]
            self.assertFalse(set(ops) & set(onnx_vplan.exporting.RANDOM_OPS), ops)
            rc, _, stderr = tool("plan", path, "--loss", "mse:" + onnx.load(path).graph.output[0].name)
            self.assertEqual(rc, 0, stderr)

    def test_attention_dropout_fused(self):
        """Hugging Face's BERT with its default dropout (0.1 on the attention probabilities
        too), exported from train(): the probabilities' Dropout fuses into the attention
        core, which draws the decomposed step's masks, so both train to the same losses
        (within 1e-5)."""
        if not TORCH2 or transformers is None:
            self.skipTest("Hugging Face models are tested with torch 2.x and transformers")
        torch.manual_seed(0)
        cfg = transformers.BertConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=2, intermediate_size=64,
                                      vocab_size=V, max_position_embeddings=T, num_labels=3)
        model = ClsLogits(transformers.BertForSequenceClassification(cfg))
        x, y = ids(B, T), torch.randint(0, 3, (B,))
        with tempfile.TemporaryDirectory(prefix="test_attention_dropout_") as d:
            path = onnx_vplan.export(model, (x,), os.path.join(d, "model.onnx"), input_names=["x"],
                                     output_names=["logits"], progress=False)
            x.numpy().tofile(os.path.join(d, "x.bin"))
            y.numpy().tofile(os.path.join(d, "labels.bin"))
            losses = {}
            for attention in ("fused", "plain"):
                rc, out, err = tool("train", path, "--loss", "ce:logits", "--optimizer", "adamw", "--steps", 3, "--data",
                                    d, "--attention", attention, "--json", os.path.join(d, f"{attention}.json"))
                self.assertEqual(rc, 0, err)
                if attention == "fused":
                    self.assertIn("fused 2 attention", out)
                losses[attention] = read_json(os.path.join(d, f"{attention}.json"))["losses"]
            print(f"\n  BERT with dropout 0.1: losses fused {losses['fused']}, decomposed {losses['plain']}", file=sys.stderr)
            self.assertEqual(len(losses["fused"]), 3)
            for a, b in zip(losses["fused"], losses["plain"]):  # the products sum in another order
                self.assertLessEqual(abs(a - b), 1e-5 * abs(b), losses)


if __name__ == "__main__":
    print(f"torch {torch.__version__}, onnx {onnx.__version__}, transformers "
          f"{getattr(transformers, '__version__', 'absent')}, torchvision {getattr(torchvision, '__version__', 'absent')}, "
          f"tool {TOOL}", file=sys.stderr)
    unittest.main(verbosity=2)
