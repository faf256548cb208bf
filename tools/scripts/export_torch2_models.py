#!/usr/bin/env python3
"""Exports small Hugging Face models with torch 2.x's default torch.onnx.export (the
dynamo exporter, optimize on and off) and records torch's own training losses on the
same batch, for tests/cli_torch2.sh.

Run with the venv of tools/scripts/torch2_venv.sh:
    build/venv-torch2/bin/python tools/scripts/export_torch2_models.py tests/data/torch2

Writes into OUT: qwen2_opt0.onnx (optimize=False) and qwen2_opt1.onnx (the default), a
Qwen2 of 2 layers with grouped-query attention, rotary embeddings and tied embeddings,
random weights from a config (seed 0); x.bin and labels.bin, the batch (int64, raw);
qwen2_losses.json, torch's losses over 3 steps of SGD with momentum 0.9, lr 0.01, on the
mean cross-entropy over every position, as `onnx-vplan train --loss ce:logits
--optimizer momentum --lr 0.01 --data OUT` computes it."""
import json
import sys

import onnx
import torch
import transformers


class Logits(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x):
        return self.m(input_ids=x, use_cache=False).logits


def main(out):
    torch.manual_seed(0)
    cfg = transformers.Qwen2Config(num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, hidden_size=32,
                                   intermediate_size=64, vocab_size=64, max_position_embeddings=32,
                                   tie_word_embeddings=True)
    model = Logits(transformers.Qwen2ForCausalLM(cfg).eval())
    x = torch.randint(0, 64, (2, 8))
    labels = torch.randint(0, 64, (2, 8))
    for optimize in (False, True):
        path = f"{out}/qwen2_opt{int(optimize)}.onnx"
        torch.onnx.export(model, (x,), path, input_names=["x"], output_names=["logits"], optimize=optimize)
        onnx.checker.check_model(path)
    x.numpy().tofile(f"{out}/x.bin")
    labels.numpy().tofile(f"{out}/labels.bin")
    # torch's own steps, from the weights exported
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    model.train()
    losses = []
    for _ in range(3):
        opt.zero_grad()
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    with open(f"{out}/qwen2_losses.json", "w") as f:
        json.dump({"torch": torch.__version__, "transformers": transformers.__version__, "optimizer": "momentum",
                   "lr": 0.01, "momentum": 0.9, "losses": losses}, f, indent=1)
        f.write("\n")
    print("wrote", out, losses)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/torch2")
