#!/usr/bin/env python3
"""Hugging Face architectures beyond the fixture kit, exported as users export them today,
trained by onnx-vplan against torch's own steps.

In:  tiny configs of each architecture (random weights, seed 0, every dropout 0), exported
     by torch 2.x's torch.onnx.export (dynamo, optimize=False) into WORK/NAME/model.onnx
     (kept for reruns), with a batch of ids and labels; BUILD/onnx-vplan.  Run with PyPI's
     torch 2.x (tools/scripts/torch2_venv.sh's venv).
Out: on stdout, a markdown table: per architecture torch's 3 losses (momentum SGD, lr 0.01,
     the step torch2_kit.sh takes), ours, the largest relative difference, and what
     onnx-vplan fused (attention cores); exit 1 when a model that loads trains to other
     losses (beyond 5e-6 relative), 0 otherwise.  A model onnx-vplan refuses is listed
     with the reason (it names the node and the op), not counted as a failure: the table
     says what is not supported yet.
usage: check_hf_architectures.py [--build DIR] [--work DIR] [--only NAME ...]
"""
import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
V, B, S = 64, 2, 8


def architectures():
    import torch
    import transformers as T
    spec = importlib.util.spec_from_file_location("kit", os.path.join(HERE, "export_torch2_models.py"))
    kit = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kit)

    def ids():
        return torch.randint(3, V, (B, S))

    def lm(m):
        return kit.Logits(m, "lm"), ids(), ids()

    def cls(m):
        return kit.Logits(m, "cls"), ids(), torch.randint(0, 3, (B,))

    d = dict(vocab_size=V)
    return {
        "distilbert": lambda: cls(T.DistilBertForSequenceClassification(T.DistilBertConfig(
            n_layers=2, n_heads=2, dim=32, hidden_dim=64, num_labels=3, dropout=0.0, attention_dropout=0.0,
            seq_classif_dropout=0.0, max_position_embeddings=32, **d))),
        "albert": lambda: cls(T.AlbertForSequenceClassification(T.AlbertConfig(
            num_hidden_layers=2, num_attention_heads=2, hidden_size=32, embedding_size=16, intermediate_size=64,
            num_labels=3, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, classifier_dropout_prob=0.0,
            max_position_embeddings=32, **d))),
        "electra": lambda: cls(T.ElectraForSequenceClassification(T.ElectraConfig(
            num_hidden_layers=2, num_attention_heads=2, hidden_size=32, embedding_size=16, intermediate_size=64,
            num_labels=3, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, max_position_embeddings=32, **d))),
        "mistral": lambda: lm(T.MistralForCausalLM(T.MistralConfig(
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=32, intermediate_size=64,
            max_position_embeddings=32, **d))),
        "phi": lambda: lm(T.PhiForCausalLM(T.PhiConfig(
            num_hidden_layers=2, num_attention_heads=2, hidden_size=32, intermediate_size=64,
            max_position_embeddings=32, resid_pdrop=0.0, embd_pdrop=0.0, attention_dropout=0.0, **d))),
        "gpt_neox": lambda: lm(T.GPTNeoXForCausalLM(T.GPTNeoXConfig(
            num_hidden_layers=2, num_attention_heads=2, hidden_size=32, intermediate_size=64,
            max_position_embeddings=32, hidden_dropout=0.0, attention_dropout=0.0, **d))),
        "falcon": lambda: lm(T.FalconForCausalLM(T.FalconConfig(
            num_hidden_layers=2, num_attention_heads=2, hidden_size=32, hidden_dropout=0.0, attention_dropout=0.0,
            **d))),
        # the sequence classifier pools at each row's last EOS: boolean indexing, NonZero
        "bart": lambda: (kit.Logits(T.BartForSequenceClassification(T.BartConfig(
            encoder_layers=1, decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2, d_model=32,
            encoder_ffn_dim=64, decoder_ffn_dim=64, num_labels=3, dropout=0.0, attention_dropout=0.0,
            activation_dropout=0.0, max_position_embeddings=32, **d)), "cls"),
            torch.cat([ids()[:, :-1], torch.full((B, 1), 2)], 1), torch.randint(0, 3, (B,))),
    }


def export(name, build, out):
    import torch
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    model, x, y = build()
    model.train()
    torch.onnx.export(model, (x,), os.path.join(out, "model.onnx"), input_names=["x"], output_names=["logits"],
                      optimize=False, external_data=False)
    x.numpy().tofile(os.path.join(out, "x.bin"))
    y.numpy().tofile(os.path.join(out, "labels.bin"))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    losses = []
    for _ in range(3):
        opt.zero_grad()
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    with open(os.path.join(out, "losses.json"), "w") as f:
        json.dump(losses, f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--work", default=None, help="where the exports go (default BUILD/hf_architectures)")
    ap.add_argument("--only", nargs="*")
    a = ap.parse_args()
    vplan = os.path.join(a.build, "onnx-vplan")
    work = a.work or os.path.join(a.build, "hf_architectures")
    archs = architectures()
    names = a.only or list(archs)
    print("| architecture | torch's losses | ours | largest relative difference | fused |")
    print("|---|---|---|---|---|")
    failed = 0
    for name in names:
        out = os.path.join(work, name)
        if not os.path.exists(os.path.join(out, "losses.json")):
            try:
                export(name, archs[name], out)
            except Exception as e:  # torch's own exporter failing is a row, not a crash
                print(f"| {name} | torch.onnx.export failed: {str(e).splitlines()[0][:120]} | | | |")
                continue
        want = json.load(open(os.path.join(out, "losses.json")))
        r = subprocess.run([vplan, "train", os.path.join(out, "model.onnx"), "--loss", "ce:logits", "--optimizer",
                            "momentum", "--lr", "0.01", "--steps", "3", "--data", out],
                           capture_output=True, text=True)
        text = r.stdout + r.stderr
        got = [float(v) for v in re.findall(r"^step \d+  loss (\S+)", text, re.M)]
        fused = re.search(r"fused (\d+ attention)", text)
        if r.returncode or len(got) != 3:
            why = [l for l in text.splitlines() if l.startswith("onnx-vplan:") and "warning" not in l]
            print(f"| {name} | {', '.join(f'{v:.6f}' for v in want)} | refused (exit {r.returncode}): "
                  f"{(why[-1] if why else text.strip().splitlines()[-1])[:160]} | | |")
            continue
        diff = max(abs(g - w) / abs(w) for g, w in zip(got, want))
        bad = diff > 5e-6
        failed += bad
        print(f"| {name} | {', '.join(f'{v:.6f}' for v in want)} | {', '.join(f'{v:.6f}' for v in got)} | "
              f"{diff:.1e}{' (over 5e-6)' if bad else ''} | {fused.group(1) if fused else 'no attention'} |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
