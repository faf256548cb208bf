#!/usr/bin/env python3
"""The torch 2.x fixture kit: small Hugging Face and torchvision models built from configs
(random weights, seed 0), exported by torch 2.x's default torch.onnx.export (the dynamo
exporter) with optimize off and on, from the model in eval and in train mode, with torch's
own training of the same model on the same batch recorded beside them.

Run with the venv of tools/scripts/torch2_venv.sh:
    build/venv-torch2/bin/python tools/scripts/export_torch2_models.py [OUT] [NAME...]
(OUT defaults to tests/data/torch2; NAMEs pick models, default all.)

For each model NAME it writes OUT/NAME/:
  eval_opt0.onnx, eval_opt1.onnx, train_opt0.onnx, train_opt1.onnx
      torch.onnx.export(model, args, path, input_names=[...], output_names=["logits"],
      optimize=False|True) after model.eval() or model.train(): what a user gets.  The
      node metadata that is most of each file is dropped but for the module scopes
      (`pkg.torch.onnx.name_scopes`) and the FX call of each embedding
      (`pkg.torch.onnx.fx_node`: its padding_idx), which the planner reads; qwen2 keeps
      all of it, as the exporter wrote it.  A train_* file the same as its eval_* one (no BatchNorm,
      every dropout 0) is not written; torch.json says so.
  op23_eval_opt0.onnx       (llama, bert, wav2vec2) eval_opt0.onnx at opset_version=23: ONNX's Attention
      (and wav2vec2's GroupNormalization)
  nosig_eval_opt0.onnx      (gemma) eval_opt0.onnx without the graph's metadata: no
      signature, as other exporters write
  <input>.bin, labels.bin   the batch, raw little-endian (what `train --data OUT/NAME` reads)
  torch.json                torch's training in train() mode over STEPS steps of SGD with
      momentum 0.9, lr 0.01, on the mean cross-entropy of `logits` against labels: the
      losses, each parameter's gradient norm at the first step (by module path), the
      parameters torch trains and the buffers it carries
  logits_after.bin          the logits (float32) of the model after those steps, in
      eval() mode (BatchNorm reading the running statistics the steps carried) on the
      same batch, for `train --save` then `eval` to reproduce
The tool's own run of these files is tests/cli_torch2.sh and tests/torch2_kit.sh."""
import json
import os
import sys

import onnx
import torch
import transformers

STEPS = 3
LR = 0.01
MOMENTUM = 0.9


class Logits(torch.nn.Module):
    """The model's logits as the one output, called with positional tensors."""

    def __init__(self, m, kind):
        super().__init__()
        self.m = m
        self.kind = kind

    def forward(self, *args):
        if self.kind == "lm":
            return self.m(input_ids=args[0], use_cache=False).logits
        if self.kind == "seq2seq":
            return self.m(input_ids=args[0], decoder_input_ids=args[1], use_cache=False).logits
        if self.kind == "cls":
            return self.m(input_ids=args[0]).logits
        if self.kind == "lm_mask":  # with the padding mask a batch of unequal lengths needs
            return self.m(input_ids=args[0], attention_mask=args[1], use_cache=False).logits
        if self.kind == "cls_mask":
            return self.m(input_ids=args[0], attention_mask=args[1]).logits
        if self.kind == "pixels":
            return self.m(pixel_values=args[0]).logits
        if self.kind == "audio":
            return self.m(input_values=args[0]).logits
        return self.m(args[0])  # torchvision


V = 64  # vocabulary of the language models
B, T = 2, 8


def ids(*shape):
    return torch.randint(0, V, shape)


def padded(x, pad):
    """x with its last two positions of the first row the padding token, as a padded batch
    has them."""
    x[0, -2:] = pad
    return x


def lm(cls, **cfg):
    return lambda: (Logits(cls[0](cls[1](**cfg)), "lm"), {"x": ids(B, T)}, ids(B, T))


def eager(cfg):
    cfg._attn_implementation = "eager"
    return cfg


# Each entry: name -> a function giving (module, named inputs, labels).  Every dropout is
# 0, so train() and eval() compute the same function except BatchNorm.
MODELS = {
    "gpt2": lm((transformers.GPT2LMHeadModel, transformers.GPT2Config), n_layer=2, n_head=2, n_embd=32,
               vocab_size=V, n_positions=32, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0),
    "llama": lm((transformers.LlamaForCausalLM, transformers.LlamaConfig), num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, hidden_size=32, intermediate_size=64,
                vocab_size=V, max_position_embeddings=32, tie_word_embeddings=False),
    # every head its own key/value head, 4 of each: a split among 4 ranks (tests/torch2_tp.sh)
    "llama_mha": lm((transformers.LlamaForCausalLM, transformers.LlamaConfig), num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=4, hidden_size=32, intermediate_size=64,
                    vocab_size=V, max_position_embeddings=32, tie_word_embeddings=False),
    # the kit's Llama and BERT with the padding mask as an input, as a batch of unequal
    # lengths is trained, each's first row padded on the right
    "llama_pad": lambda: (Logits(transformers.LlamaForCausalLM(transformers.LlamaConfig(
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=32, intermediate_size=64,
        vocab_size=V, max_position_embeddings=32)), "lm_mask"),
        {"x": ids(B, T), "mask": torch.tensor([[1] * (T - 2) + [0, 0], [1] * T])}, ids(B, T)),
    # not in the kit (EXTRA): the same Llama padded on the left, so its first two query rows
    # keep no key.  Hugging Face's mask then fills them with torch.finfo.min at opset 18
    # (uniform probabilities; the graph is not what torch's eager sdpa computes, which
    # zeroes them) and ONNX's Attention zeroes them at opset 23 (torch's losses);
    # tests/cli_torch2.sh checks fused against unfused on both
    "llama_left": lambda: (Logits(transformers.LlamaForCausalLM(transformers.LlamaConfig(
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=32, intermediate_size=64,
        vocab_size=V, max_position_embeddings=32)), "lm_mask"),
        {"x": ids(B, T), "mask": torch.tensor([[0, 0] + [1] * (T - 2), [1] * T])}, ids(B, T)),
    # not in the kit (EXTRA): XGLM padded on the left, its mask an input, so its first two
    # query rows keep no key: its clamp at torch.finfo.min then ties every score of those
    # rows, which halves their gradient in torch (and in the unfused graph), so that
    # attention stays unfused (tests/cli_torch2.sh)
    "xglm_left": lambda: (Logits(transformers.XGLMForCausalLM(transformers.XGLMConfig(
        num_layers=2, attention_heads=2, d_model=32, ffn_dim=64, vocab_size=V, max_position_embeddings=32,
        dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, layerdrop=0.0)), "lm_mask"),
        {"x": ids(B, T), "mask": torch.tensor([[0, 0] + [1] * (T - 2), [1] * T])}, ids(B, T)),
    "bert_pad": lambda: (Logits(transformers.BertForSequenceClassification(transformers.BertConfig(
        num_hidden_layers=2, num_attention_heads=2, hidden_size=32, intermediate_size=64, vocab_size=V,
        max_position_embeddings=32, num_labels=3, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)),
        "cls_mask"), {"x": ids(B, T), "mask": torch.tensor([[1] * (T - 3) + [0] * 3, [1] * T])},
        torch.randint(0, 3, (B,))),
    "qwen2": lm((transformers.Qwen2ForCausalLM, transformers.Qwen2Config), num_hidden_layers=2,
                num_attention_heads=2, num_key_value_heads=1, hidden_size=32, intermediate_size=64,
                vocab_size=V, max_position_embeddings=32, tie_word_embeddings=True),
    "gemma": lm((transformers.GemmaForCausalLM, transformers.GemmaConfig), num_hidden_layers=2,
                num_attention_heads=2, num_key_value_heads=1, head_dim=16, hidden_size=32,
                intermediate_size=64, vocab_size=V, max_position_embeddings=32),
    # Gemma 2: eager attention, its scores soft-capped (50 tanh(x / 50)) before the mask, a
    # sliding-window layer of 4 positions beside a global one, the probabilities cast to
    # their own dtype before the product with V, its final logits soft-capped too
    "gemma2": lm((transformers.Gemma2ForCausalLM, transformers.Gemma2Config), num_hidden_layers=2,
                 num_attention_heads=2, num_key_value_heads=1, head_dim=16, hidden_size=32,
                 intermediate_size=64, vocab_size=V, max_position_embeddings=32, sliding_window=4),
    "bert": lambda: (Logits(transformers.BertForSequenceClassification(transformers.BertConfig(
        num_hidden_layers=2, num_attention_heads=2, hidden_size=32, intermediate_size=64, vocab_size=V,
        max_position_embeddings=32, num_labels=3, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)),
        "cls"), {"x": ids(B, T)}, torch.randint(0, 3, (B,))),
    "roberta": lambda: (Logits(transformers.RobertaForSequenceClassification(transformers.RobertaConfig(
        num_hidden_layers=2, num_attention_heads=2, hidden_size=32, intermediate_size=64, vocab_size=V,
        max_position_embeddings=40, num_labels=3, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)),
        "cls"), {"x": ids(B, T)}, torch.randint(0, 3, (B,))),
    # T5's attention as "eager": through sdpa torch.onnx.export fails in its decompositions
    "t5": lambda: (Logits(transformers.T5ForConditionalGeneration(eager(transformers.T5Config(
        num_layers=2, num_decoder_layers=2, num_heads=2, d_model=32, d_kv=16, d_ff=64, vocab_size=V,
        dropout_rate=0.0, decoder_start_token_id=0))), "seq2seq"),
        {"x": ids(B, T), "y": ids(B, T)}, ids(B, T)),
    # OPT (its table tied to the LM head) with its padding token (pad_token_id 1) in the
    # batch: torch keeps nn.Embedding's padding_idx row out of the embedding's gradient,
    # which the ONNX graph cannot say; the exporter's fx_node metadata does
    "opt": lambda: (Logits(transformers.OPTForCausalLM(transformers.OPTConfig(
        num_hidden_layers=2, num_attention_heads=2, hidden_size=32, ffn_dim=64, word_embed_proj_dim=32,
        vocab_size=V, max_position_embeddings=32, dropout=0.0, attention_dropout=0.0)), "lm"),
        {"x": padded(ids(B, T), 1)}, ids(B, T)),
    # GPT-Neo: unscaled scores, its causal window (a global layer, then a local one of 4
    # positions) filled with torch.finfo.min by a Where, then the padding mask added
    "gpt_neo": lm((transformers.GPTNeoForCausalLM, transformers.GPTNeoConfig), num_layers=2,
                  attention_types=[[["global", "local"], 1]], window_size=4, num_heads=2, hidden_size=32,
                  intermediate_size=64, vocab_size=V, max_position_embeddings=32, embed_dropout=0.0,
                  attention_dropout=0.0, resid_dropout=0.0),
    # XGLM: its attention through rank-3 batched products, the masked scores clamped at
    # torch.finfo.min by a Max, the softmax taken over the rank-3 view
    "xglm": lm((transformers.XGLMForCausalLM, transformers.XGLMConfig), num_layers=2, attention_heads=2, d_model=32,
               ffn_dim=64, vocab_size=V, max_position_embeddings=32, dropout=0.0, attention_dropout=0.0,
               activation_dropout=0.0, layerdrop=0.0),
    # BLOOM: ALiBi position biases, and its tanh GELU factored as x * (1 + 0.044715 x^2)
    "bloom": lm((transformers.BloomForCausalLM, transformers.BloomConfig), n_layer=2, n_head=2, hidden_size=32,
                vocab_size=V, hidden_dropout=0.0, attention_dropout=0.0),
    # DeBERTa-v2 as v3 is configured (relative attention, c2p and p2c): its scores through
    # rank-3 batched products, K^T divided by the scale before the product, the relative
    # position terms (computed from parameters) added, and masked_fill (a Where) before
    # the softmax
    "deberta_v2": lambda: (Logits(transformers.DebertaV2ForSequenceClassification(eager(transformers.DebertaV2Config(
        num_hidden_layers=2, num_attention_heads=2, hidden_size=32, intermediate_size=64, vocab_size=V,
        max_position_embeddings=32, num_labels=3, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        relative_attention=True, pos_att_type=["p2c", "c2p"], max_relative_positions=16, position_buckets=8,
        position_biased_input=False))), "cls"), {"x": ids(B, T)}, torch.randint(0, 3, (B,))),
    # Funnel: its relative attention written as torch.einsum, which the exporter keeps as
    # ONNX Einsum (five a layer), and the sequence pooled between its blocks
    "funnel": lambda: (Logits(transformers.FunnelForSequenceClassification(transformers.FunnelConfig(
        block_sizes=[1, 1], num_decoder_layers=1, n_head=2, d_model=32, d_head=16, d_inner=64, vocab_size=V,
        num_labels=3, hidden_dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)), "cls"),
        {"x": ids(B, T)}, torch.randint(0, 3, (B,))),
    "vit": lambda: (Logits(transformers.ViTForImageClassification(transformers.ViTConfig(
        image_size=16, patch_size=4, num_channels=3, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, num_labels=5, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)),
        "pixels"), {"x": torch.randn(B, 3, 16, 16)}, torch.randint(0, 5, (B,))),
    "wav2vec2": lambda: (Logits(transformers.Wav2Vec2ForSequenceClassification(transformers.Wav2Vec2Config(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=2, num_labels=4, classifier_proj_size=16, hidden_dropout=0.0,
        attention_dropout=0.0, activation_dropout=0.0, feat_proj_dropout=0.0, final_dropout=0.0,
        layerdrop=0.0, mask_time_prob=0.0, apply_spec_augment=False)), "audio"),
        {"x": torch.randn(B, 400)}, torch.randint(0, 4, (B,))),
}


def torchvision_models():
    import torchvision
    # MobileNetV2 at width 0.25 with its first three stages: BatchNorm, depthwise
    # convolutions, ReLU6, residual adds and the 1280-channel head, in 200 kB; dropout 0
    # so that torch's steps are the function the export computes
    stages = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 2, 2]]
    MODELS["mobilenet_v2"] = lambda: (Logits(torchvision.models.MobileNetV2(
        num_classes=10, width_mult=0.25, inverted_residual_setting=stages, dropout=0.0), "vision"),
        {"x": torch.randn(B, 3, 32, 32)}, torch.randint(0, 10, (B,)))


KEEP_ALL_METADATA = {"qwen2"}
# eval_opt0 again without the exporter's signature, as an exporter that writes none: the
# trainable set then follows the rule (every float initializer but scalars; Gemma's
# embedding scale is a scalar buffer)
NO_SIGNATURE_TWIN = {"gemma"}
# eval_opt0 again at opset 23, where the exporter writes scaled_dot_product_attention as
# ONNX's Attention (Llama: causal, grouped-query; BERT: a padding mask)
EXTRA = {"llama_left", "xglm_left"}  # written only when named (into tests/data/torch2_masks), not the kit's
OPSET23 = {"llama", "bert", "wav2vec2", "llama_pad", "bert_pad", "llama_left"}  # wav2vec2: GroupNorm as GroupNormalization there


def drop_metadata(path):
    m = onnx.load(path)
    for n in m.graph.node:
        # the module scopes (checkpointing's layers) and an embedding's FX call (its
        # padding_idx, whose gradient row torch keeps at 0)
        keep = [p for p in n.metadata_props if p.key == "pkg.torch.onnx.name_scopes" or
                (p.key == "pkg.torch.onnx.fx_node" and "aten.embedding" in p.value)]
        del n.metadata_props[:]
        n.metadata_props.extend(keep)
    onnx.save(m, path)
    onnx.checker.check_model(path)


def export(name, out):
    torch.manual_seed(0)
    model, inputs, labels = MODELS[name]()
    args = tuple(inputs.values())
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    files = []
    for mode in ("eval", "train"):
        for optimize in (False, True):
            model.train(mode == "train")
            path = os.path.join(d, f"{mode}_opt{int(optimize)}.onnx")
            torch.onnx.export(model, args, path, input_names=list(inputs), output_names=["logits"],
                              optimize=optimize, external_data=False)
            if name not in KEEP_ALL_METADATA:
                drop_metadata(path)
            model.load_state_dict(state)  # a train()-mode export may move BatchNorm's statistics
            if mode == "train":
                twin = os.path.join(d, f"eval_opt{int(optimize)}.onnx")
                if open(path, "rb").read() == open(twin, "rb").read():
                    os.remove(path)
                    continue
            files.append(os.path.basename(path))
    if name in OPSET23:
        model.eval()
        path = os.path.join(d, "op23_eval_opt0.onnx")
        torch.onnx.export(model, args, path, input_names=list(inputs), output_names=["logits"], optimize=False,
                          opset_version=23, external_data=False)
        drop_metadata(path)
        model.load_state_dict(state)
        files.append("op23_eval_opt0.onnx")
    if name in NO_SIGNATURE_TWIN:
        m = onnx.load(os.path.join(d, "eval_opt0.onnx"))
        del m.graph.metadata_props[:]
        onnx.save(m, os.path.join(d, "nosig_eval_opt0.onnx"))
        files.append("nosig_eval_opt0.onnx")
    for k, v in inputs.items():
        v.numpy().tofile(os.path.join(d, f"{k}.bin"))
    labels.numpy().tofile(os.path.join(d, "labels.bin"))
    # torch's own steps in train() mode from the weights exported
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    losses, grad_norms = [], {}
    names = {id(p): n for n, p in model.named_parameters()}
    for step in range(STEPS):
        opt.zero_grad()
        logits = model(*args)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
        loss.backward()
        if step == 0:
            grad_norms = {names[id(p)]: float(p.grad.norm()) for p in model.parameters() if p.grad is not None}
        opt.step()
        losses.append(loss.item())
    model.eval()  # BatchNorm then reads the running statistics the steps carried
    with torch.no_grad():
        model(*args).float().numpy().tofile(os.path.join(d, "logits_after.bin"))
    info = {"torch": torch.__version__, "transformers": transformers.__version__, "optimizer": "momentum",
            "lr": LR, "momentum": MOMENTUM, "steps": STEPS, "inputs": list(inputs), "files": files, "losses": losses,
            "parameters": sum(1 for _ in model.parameters()),
            "parameter_elements": sum(p.numel() for p in model.parameters()),
            "buffers": [n for n, _ in model.named_buffers()], "grad_norms_step0": grad_norms}
    with open(os.path.join(d, "torch.json"), "w") as f:
        json.dump(info, f, indent=1)
        f.write("\n")
    print(f"{name}: losses {losses}", flush=True)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/data/torch2"
    torchvision_models()
    names = sys.argv[2:] or [n for n in MODELS if n not in EXTRA]
    for name in names:
        export(name, out)


if __name__ == "__main__":
    main()
