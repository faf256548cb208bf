#!/usr/bin/env python3
"""Our arena against PyTorch 2.x eager's peak on today's exports (issue 37).

In:  Hugging Face models built from configs (random weights, seed 0), exported by torch
     2.x's torch.onnx.export (the dynamo exporter, optimize=False) into BUILD/torch2_peak;
     BUILD/onnx-vplan.  Run with PyPI's torch 2.x (tools/scripts/torch2_venv.sh's venv:
     --python or VP_TORCH2_PYTHON in tools/bench/run.sh).
Out: on stdout, the markdown section that tools/bench/run.sh records in RESULTS.md: per
     model PyTorch's peak, our arena without checkpointing (attention fused, the default,
     and plain), their ratios, and the attention cores fused; then in bf16: PyTorch's peak
     under torch.autocast("cpu", bfloat16) against our `plan --precision bf16`.
Keeps: the method of tools/bench/torch_peak.py, imported from it: one AdamW step
     (torch.optim.AdamW, lr 1e-3; ours `plan --optimizer adamw`), forward, mean
     cross-entropy over every position, backward, update; PyTorch's peak is the second
     step's, from torch.profiler's memory events on the CPU over the bytes alive before
     it.  Hugging Face's attention runs through scaled_dot_product_attention in eager, as
     users run it.  Without torch or transformers the section says so; it never fails
     the bench.
"""
import argparse
import contextlib
import json
import os
import subprocess
import sys

import torch_peak  # the method (this folder is on the path of a script run from it)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
MiB = float(1 << 20)
TRAIN_EXPORT = {"bert_drop"}  # models that drop: exported from train(), whose Dropout the step draws


def models(big):
    """name -> (description, build() -> (module, x, labels))."""
    import torch
    import transformers

    kit = torch_peak.import_path("export_torch2_models",
                                 os.path.join(ROOT, "tools", "scripts", "export_torch2_models.py"))

    def lm(layers, d, heads, kv, inter, vocab, b, t):
        cfg = transformers.LlamaConfig(num_hidden_layers=layers, hidden_size=d, num_attention_heads=heads,
                                       num_key_value_heads=kv, intermediate_size=inter, vocab_size=vocab,
                                       max_position_embeddings=t, tie_word_embeddings=False)
        return lambda: (kit.Logits(transformers.LlamaForCausalLM(cfg), "lm"), torch.randint(0, vocab, (b, t)),
                        torch.randint(0, vocab, (b, t)))

    def bert(b, t):
        cfg = transformers.BertConfig(num_hidden_layers=4, hidden_size=256, num_attention_heads=4,
                                      intermediate_size=1024, vocab_size=1000, max_position_embeddings=t,
                                      num_labels=3, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        return lambda: (kit.Logits(transformers.BertForSequenceClassification(cfg), "cls"),
                        torch.randint(0, 1000, (b, t)), torch.randint(0, 3, (b,)))

    def bert_drop(b, t):
        # Hugging Face's default dropout (0.1 on the hidden states and the attention
        # probabilities), exported from train(): an eval() export has no Dropout
        cfg = transformers.BertConfig(num_hidden_layers=4, hidden_size=256, num_attention_heads=4,
                                      intermediate_size=1024, vocab_size=1000, max_position_embeddings=t, num_labels=3)
        return lambda: (kit.Logits(transformers.BertForSequenceClassification(cfg), "cls"),
                        torch.randint(0, 1000, (b, t)), torch.randint(0, 3, (b,)))

    def vit(b):
        cfg = transformers.ViTConfig(image_size=64, patch_size=8, num_channels=3, hidden_size=256,
                                     num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024,
                                     num_labels=10, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        return lambda: (kit.Logits(transformers.ViTForImageClassification(cfg), "pixels"), torch.randn(b, 3, 64, 64),
                        torch.randint(0, 10, (b,)))

    def gpt2(b, t):
        cfg = transformers.GPT2Config(n_layer=4, n_embd=256, n_head=4, vocab_size=1000, n_positions=t,
                                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        return lambda: (kit.Logits(transformers.GPT2LMHeadModel(cfg), "lm"), torch.randint(0, 1000, (b, t)),
                        torch.randint(0, 1000, (b, t)))

    def qwen2(b, t):
        cfg = transformers.Qwen2Config(num_hidden_layers=4, hidden_size=256, num_attention_heads=8, num_key_value_heads=2,
                                       intermediate_size=688, vocab_size=1000, max_position_embeddings=t,
                                       tie_word_embeddings=True)
        return lambda: (kit.Logits(transformers.Qwen2ForCausalLM(cfg), "lm"), torch.randint(0, 1000, (b, t)),
                        torch.randint(0, 1000, (b, t)))

    def gemma(b, t):
        cfg = transformers.GemmaConfig(num_hidden_layers=4, hidden_size=256, num_attention_heads=8, num_key_value_heads=1,
                                       head_dim=32, intermediate_size=688, vocab_size=1000, max_position_embeddings=t)
        return lambda: (kit.Logits(transformers.GemmaForCausalLM(cfg), "lm"), torch.randint(0, 1000, (b, t)),
                        torch.randint(0, 1000, (b, t)))

    def gemma2(b, t):
        cfg = transformers.Gemma2Config(num_hidden_layers=4, hidden_size=256, num_attention_heads=8,
                                        num_key_value_heads=2, head_dim=32, intermediate_size=688, vocab_size=1000,
                                        max_position_embeddings=t, sliding_window=t // 2)
        return lambda: (kit.Logits(transformers.Gemma2ForCausalLM(cfg), "lm"), torch.randint(0, 1000, (b, t)),
                        torch.randint(0, 1000, (b, t)))

    def roberta(b, t):
        cfg = transformers.RobertaConfig(num_hidden_layers=4, hidden_size=256, num_attention_heads=4,
                                         intermediate_size=1024, vocab_size=1000, max_position_embeddings=t + 2,
                                         num_labels=3, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        return lambda: (kit.Logits(transformers.RobertaForSequenceClassification(cfg), "cls"),
                        torch.randint(3, 1000, (b, t)), torch.randint(0, 3, (b,)))

    class T5Same(torch.nn.Module):
        """T5 trained to its own input: the ids as the encoder's and the decoder's input (one tensor, as the
        benchmark's step feeds it)."""

        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, x):
            return self.m(input_ids=x, decoder_input_ids=x, use_cache=False).logits

    def t5(b, t):
        cfg = transformers.T5Config(num_layers=4, num_decoder_layers=4, num_heads=4, d_model=256, d_kv=64, d_ff=1024,
                                    vocab_size=1000, dropout_rate=0.0, decoder_start_token_id=0)
        cfg._attn_implementation = "eager"  # through sdpa torch.onnx.export fails in its decompositions
        return lambda: (T5Same(transformers.T5ForConditionalGeneration(cfg)), torch.randint(0, 1000, (b, t)),
                        torch.randint(0, 1000, (b, t)))

    def wav2vec2(b, samples):
        cfg = transformers.Wav2Vec2Config(hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                                          intermediate_size=1024, conv_dim=(128, 128), conv_stride=(5, 2),
                                          conv_kernel=(10, 3), num_conv_pos_embeddings=16,
                                          num_conv_pos_embedding_groups=4, num_labels=4, classifier_proj_size=64,
                                          hidden_dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
                                          feat_proj_dropout=0.0, final_dropout=0.0, layerdrop=0.0, mask_time_prob=0.0,
                                          apply_spec_augment=False)
        return lambda: (kit.Logits(transformers.Wav2Vec2ForSequenceClassification(cfg), "audio"),
                        torch.randn(b, samples), torch.randint(0, 4, (b,)))

    def bloom(b, t):
        cfg = transformers.BloomConfig(n_layer=4, hidden_size=256, n_head=4, vocab_size=1000, hidden_dropout=0.0,
                                       attention_dropout=0.0)
        return lambda: (kit.Logits(transformers.BloomForCausalLM(cfg), "lm"), torch.randint(0, 1000, (b, t)),
                        torch.randint(0, 1000, (b, t)))

    def xglm(b, t):
        cfg = transformers.XGLMConfig(num_layers=4, d_model=256, attention_heads=4, ffn_dim=1024, vocab_size=1000,
                                      max_position_embeddings=t, dropout=0.0, attention_dropout=0.0,
                                      activation_dropout=0.0, layerdrop=0.0)
        # ids from 2 on: no padding token (1) in the batch
        return lambda: (kit.Logits(transformers.XGLMForCausalLM(cfg), "lm"), torch.randint(2, 1000, (b, t)),
                        torch.randint(0, 1000, (b, t)))

    def opt(b, t):
        cfg = transformers.OPTConfig(num_hidden_layers=4, hidden_size=256, num_attention_heads=4, ffn_dim=1024,
                                     word_embed_proj_dim=256, vocab_size=1000, max_position_embeddings=t,
                                     dropout=0.0, attention_dropout=0.0)
        # ids from 2 on: no padding token (1) in the batch, as in the other language models
        return lambda: (kit.Logits(transformers.OPTForCausalLM(cfg), "lm"), torch.randint(2, 1000, (b, t)),
                        torch.randint(0, 1000, (b, t)))

    def deberta_v2(b, t):
        # as v3 is configured (the kit's DeBERTa-v2): relative attention, c2p and p2c; eager
        # attention, which is what DeBERTa runs in PyTorch
        cfg = kit.eager(transformers.DebertaV2Config(
            num_hidden_layers=4, hidden_size=256, num_attention_heads=4, intermediate_size=1024, vocab_size=1000,
            max_position_embeddings=t, num_labels=3, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
            relative_attention=True, pos_att_type=["p2c", "c2p"], max_relative_positions=64, position_buckets=32,
            position_biased_input=False))
        return lambda: (kit.Logits(transformers.DebertaV2ForSequenceClassification(cfg), "cls"),
                        torch.randint(0, 1000, (b, t)), torch.randint(0, 3, (b,)))

    def gpt_neo(b, t):
        # a global layer, then a local one (window 32), alternating, as GPT-Neo's configs do
        cfg = transformers.GPTNeoConfig(num_layers=4, attention_types=[[["global", "local"], 2]], window_size=32,
                                        hidden_size=256, num_heads=4, intermediate_size=1024, vocab_size=1000,
                                        max_position_embeddings=t, embed_dropout=0.0, attention_dropout=0.0,
                                        resid_dropout=0.0)
        return lambda: (kit.Logits(transformers.GPTNeoForCausalLM(cfg), "lm"), torch.randint(0, 1000, (b, t)),
                        torch.randint(0, 1000, (b, t)))

    def funnel(b, t):
        # relative attention through torch.einsum (ONNX Einsum), the sequence pooled between blocks
        cfg = transformers.FunnelConfig(block_sizes=[2, 2], num_decoder_layers=1, n_head=4, d_model=256, d_head=64,
                                        d_inner=1024, vocab_size=1000, num_labels=3, hidden_dropout=0.0,
                                        attention_dropout=0.0, activation_dropout=0.0)
        return lambda: (kit.Logits(transformers.FunnelForSequenceClassification(cfg), "cls"),
                        torch.randint(0, 1000, (b, t)), torch.randint(0, 3, (b,)))

    def resnet18(b):
        import torchvision
        return lambda: (kit.Logits(torchvision.models.resnet18(num_classes=10), "torchvision"),
                        torch.randn(b, 3, 112, 112), torch.randint(0, 10, (b,)))

    out = {
        "llama": ("Llama, 4 layers, d 256, GQA 8/2 (4 x 64)", lm(4, 256, 8, 2, 688, 1000, 4, 64)),
        "gpt2": ("GPT-2, 4 layers, d 256 (4 x 64)", gpt2(4, 64)),
        "bert": ("BERT classifier, 4 layers, d 256 (8 x 64)", bert(8, 64)),
        "vit": ("ViT, 4 layers, d 256 (4 x 3 x 64 x 64)", vit(4)),
        "resnet18": ("torchvision ResNet-18 (4 x 3 x 112 x 112)", resnet18(4)),
        "qwen2": ("Qwen2, 4 layers, d 256, GQA 8/2, tied embeddings (4 x 64)", qwen2(4, 64)),
        "gemma": ("Gemma, 4 layers, d 256, MQA 8/1, GeGLU (4 x 64)", gemma(4, 64)),
        "gemma2": ("Gemma 2, 4 layers, d 256, GQA 8/2, soft-capped scores, sliding window 32 (4 x 64)", gemma2(4, 64)),
        "roberta": ("RoBERTa classifier, 4 layers, d 256 (8 x 64)", roberta(8, 64)),
        "t5": ("T5, 4 + 4 layers, d 256 (4 x 64 in, the same 64 out)", t5(4, 64)),
        "wav2vec2": ("wav2vec2 classifier, 4 layers, d 256 (4 x 8000 samples)", wav2vec2(4, 8000)),
        "bloom": ("BLOOM, 4 layers, d 256, ALiBi (4 x 64)", bloom(4, 64)),
        "opt": ("OPT, 4 layers, d 256, tied embeddings (4 x 64)", opt(4, 64)),
        "xglm": ("XGLM, 4 layers, d 256, rank-3 attention clamped at finfo.min (4 x 64)", xglm(4, 64)),
        "deberta_v2": ("DeBERTa-v2 classifier (v3's relative attention), 4 layers, d 256 (8 x 64)", deberta_v2(8, 64)),
        "gpt_neo": ("GPT-Neo, 4 layers, d 256, global and local attention (4 x 64)", gpt_neo(4, 64)),
        "funnel": ("Funnel classifier, 2 + 2 layers and 1 up, d 256, Einsum attention (8 x 64)", funnel(8, 64)),
        "bert_drop": ("BERT classifier as bert, Hugging Face's default dropout 0.1, exported from train() (8 x 64)",
                      bert_drop(8, 64)),
    }
    if big:
        out["llama12"] = ("Llama, 12 layers, d 1024, GQA 16/4 (4 x 512)", lm(12, 1024, 16, 4, 2816, 32000, 4, 512))
    return out


def autocast_step(tp, model, x, labels):
    """torch_peak.Step with the forward and the loss under torch.autocast("cpu", bfloat16),
    as a user trains in bf16 on the CPU (AdamW's master weights and state stay float32)."""
    import torch
    import torch.nn.functional as F
    from torch.profiler import record_function

    class AutocastStep(tp.Step):
        def run(self, zero_grad=True):
            if zero_grad:
                self.opt.zero_grad(set_to_none=self.set_to_none)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                logits = self.model(self.x)
                loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), self.labels.reshape(-1))
            with record_function(tp.BACKWARD):
                loss.backward()
            self.opt.step()
            return float(loss)

    step = AutocastStep(model, x, labels)
    step.opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return step


def plan(vplan, path, attention, precision="fp32", budget=None):
    out_json = path + f".{attention}.{precision}{'.dp' if budget else ''}.json"
    cmd = [vplan, "plan", path, "--loss", "ce:logits", "--optimizer", "adamw", "--attention", attention,
           "--precision", precision, "--json", out_json]
    if budget:  # dp's checkpointing under that many bytes
        cmd += ["--remat", "dp", "--budget", str(budget)]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        lines = [l for l in r.stdout.splitlines() if l.strip()]
        return None, (lines[-1] if lines else f"exit {r.returncode}")
    # the report's knobs line "loss ...; fused 4 attention, ...": what was fused
    fused = next((l.split("; ", 1)[-1].strip() for l in r.stdout.splitlines()
                  if l.lstrip().startswith("loss ") and "; " in l), "")
    with open(out_json) as f:
        return json.load(f), fused


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--big", action="store_true", help="also the 12-layer d 1024 Llama (minutes, 8 GB)")
    ap.add_argument("--only", nargs="*", help="model names")
    ap.add_argument("--opset", type=int, help="export at this opset (23: scaled_dot_product_attention as ONNX "
                    "Attention) rather than the exporter's default")
    a = ap.parse_args()
    print("## Arena against PyTorch 2.x eager's peak (torch 2.x exports)")
    print()
    try:
        import torch
        import transformers
    except ImportError as e:
        print(f"Skipped: {e} for {sys.executable} (make the venv with tools/scripts/torch2_venv.sh).")
        return
    tp = torch_peak
    vplan = os.path.join(a.build, "onnx-vplan")
    work = os.path.join(a.build, "torch2_peak")
    os.makedirs(work, exist_ok=True)
    torch.set_num_threads(2)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}; one AdamW step on the CPU, "
          "no checkpointing; PyTorch's peak by torch.profiler's memory events over its second step.")
    print()
    print("| model | PyTorch eager peak | ours, attention fused | ratio | ours, plain attention | ratio | fused | "
          "bf16: PyTorch autocast peak | ours bf16 | ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    over = []  # rows over 0.85 without checkpointing: planned again with dp under 0.85 of the peak
    for name, (desc, build) in models(a.big).items():
        if a.only and name not in a.only:
            continue
        torch.manual_seed(0)
        model, x, labels = build()
        path = os.path.join(work, name + (f".op{a.opset}" if a.opset else "") + ".onnx")
        model.train(name in TRAIN_EXPORT)
        with contextlib.redirect_stdout(sys.stderr):  # the exporter's progress lines
            torch.onnx.export(model, (x,), path, input_names=["x"], output_names=["logits"], optimize=False,
                              **({"opset_version": a.opset} if a.opset else {}))
        state = {k: v.clone() for k, v in model.state_dict().items()}
        model.eval()
        step = tp.Step(model, x, labels)
        step.opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        m = tp.measure(step)
        fused, note = plan(vplan, path, "fused")
        plain, _ = plan(vplan, path, "plain")
        if not fused or not plain:
            print(f"| {desc} | {m['peak'] / MiB:.1f} MiB | {note} | | | | |")
            continue
        f, p = fused["arena_bytes"], plain["arena_bytes"]
        if f > 0.85 * m["peak"]:
            over.append((desc, path, int(0.85 * m["peak"])))
        # bf16: autocast from the same initial weights, against `plan --precision bf16`
        model.load_state_dict(state)
        ma = tp.measure(autocast_step(tp, model, x, labels))
        low, _ = plan(vplan, path, "fused", "bf16")
        lo = f"{low['arena_bytes'] / MiB:.1f} MiB | {low['arena_bytes'] / ma['peak']:.2f}" if low else "plan failed |"
        print(f"| {desc} | {m['peak'] / MiB:.1f} MiB | {f / MiB:.1f} MiB | {f / m['peak']:.2f} | {p / MiB:.1f} MiB | "
              f"{p / m['peak']:.2f} | {note} | {ma['peak'] / MiB:.1f} MiB | {lo} |")
        sys.stdout.flush()
        del step, model
    if over:
        print()
        print("The rows over 0.85 planned again with checkpointing (`--remat dp`) under 0.85 of PyTorch's eager peak "
              "(fp32, attention fused); recompute: dp's estimated share of the step spent recomputing.")
        print()
        print("| model | budget (0.85 of eager) | ours with dp | fits | recompute |")
        print("|---|---|---|---|---|")
        for desc, path, budget in over:
            r, note = plan(vplan, path, "fused", budget=budget)
            if not r:
                print(f"| {desc} | {budget / MiB:.2f} MiB | {note} | | |")
                continue
            print(f"| {desc} | {budget / MiB:.2f} MiB | {r['arena_bytes'] / MiB:.2f} MiB | {'yes' if r['fits'] else 'no'} | "
                  f"+{100 * r['recompute_overhead']:.1f}% |")


if __name__ == "__main__":
    main()
