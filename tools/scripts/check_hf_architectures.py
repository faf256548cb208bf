#!/usr/bin/env python3
"""Hugging Face architectures beyond the fixture kit, exported as users export them today,
trained by onnx-vplan against torch's own steps.

In:  tiny configs of each architecture (random weights, seed 0, every dropout 0), exported
     by torch 2.x's torch.onnx.export (dynamo, optimize=False) into WORK/NAME/model.onnx
     (kept for reruns), with a batch of ids and labels and the parameters torch does not
     train (frozen.json, passed as --freeze: no exporter records requires_grad);
     BUILD/onnx-vplan.  Run with PyPI's
     torch 2.x (tools/scripts/torch2_venv.sh's venv).
Out: on stdout, a markdown table: per architecture torch's 3 losses (momentum SGD, lr 0.01,
     the step torch2_kit.sh takes), ours, the largest relative difference, and what
     onnx-vplan fused (attention cores); exit 1 when a model that loads trains to other
     losses (beyond float32 noise: 5e-6 of the loss, at least 5e-6, as tests/torch2_kit.sh
     checks the kit; a loss near 0 is a difference of logits and is no more exact than
     they are), 0 otherwise.  A model onnx-vplan refuses is listed
     with the reason (it names the node and the op), not counted as a failure: the table
     says what is not supported yet.
usage: check_hf_architectures.py [--build DIR] [--work DIR] [--only NAME ...]
"""
import argparse
import contextlib
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

    def pix(m):
        return kit.Logits(m, "pixels"), torch.randn(B, 3, 32, 32), torch.randint(0, 3, (B,))

    class Seq2Seq(torch.nn.Module):
        """An encoder-decoder's logits from one input: the ids, read by the encoder and fed
        to the decoder as its (teacher-forced) input; the export takes one tensor."""

        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, x):
            return self.m(input_ids=x, decoder_input_ids=x, use_cache=False).logits

    class Features(torch.nn.Module):
        """A classifier whose input is a spectrogram (input_features), as Whisper's is."""

        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, x):
            return self.m(input_features=x).logits

    def s2s(m):
        return Seq2Seq(m), ids(), ids()

    class Inputs(torch.nn.Module):
        """A classifier whose ids are named inputs, as Perceiver's are."""

        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, x):
            return self.m(inputs=x).logits

    def video(m):
        return kit.Logits(m, "pixels"), torch.randn(B, 2, 3, 32, 32), torch.randint(0, 3, (B,))

    def audio(m):
        return kit.Logits(m, "audio"), torch.randn(B, 400), torch.randint(0, 3, (B,))

    # the speech encoders' (wav2vec2's) feature extractor, projection and conv positions, small
    speech = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                  conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16,
                  num_conv_pos_embedding_groups=2, num_labels=3, classifier_proj_size=16, hidden_dropout=0.0,
                  attention_dropout=0.0, activation_dropout=0.0, feat_proj_dropout=0.0, final_dropout=0.0,
                  layerdrop=0.0, mask_time_prob=0.0, apply_spec_augment=False)

    d = dict(vocab_size=V)

    def olmoe(**kw):
        return lm(T.OlmoeForCausalLM(T.OlmoeConfig(
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=32,
            intermediate_size=64, max_position_embeddings=32, num_experts=4, num_experts_per_tok=2,
            attention_dropout=0.0, pad_token_id=0, **kw, **d)))

    def qwen2_moe(**kw):
        return lm(T.Qwen2MoeForCausalLM(T.Qwen2MoeConfig(
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=32,
            intermediate_size=64, moe_intermediate_size=32, shared_expert_intermediate_size=64,
            max_position_embeddings=32, num_experts=4, num_experts_per_tok=2, attention_dropout=0.0, **kw, **d)))

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
        "gpt_neo": lambda: lm(T.GPTNeoForCausalLM(T.GPTNeoConfig(
            num_layers=2, attention_types=[[["global", "local"], 1]], num_heads=2, hidden_size=32,
            intermediate_size=64, window_size=4, max_position_embeddings=32, embed_dropout=0.0,
            attention_dropout=0.0, resid_dropout=0.0, **d))),
        "gptj": lambda: lm(T.GPTJForCausalLM(T.GPTJConfig(
            n_layer=2, n_head=2, n_embd=32, n_inner=64, rotary_dim=8, n_positions=32, embd_pdrop=0.0,
            attn_pdrop=0.0, resid_pdrop=0.0, **d))),
        "codegen": lambda: lm(T.CodeGenForCausalLM(T.CodeGenConfig(
            n_layer=2, n_head=2, n_embd=32, n_inner=64, rotary_dim=8, n_positions=32, n_ctx=32, embd_pdrop=0.0,
            attn_pdrop=0.0, resid_pdrop=0.0, **d))),
        "gpt_bigcode": lambda: lm(T.GPTBigCodeForCausalLM(T.GPTBigCodeConfig(
            n_layer=2, n_head=2, n_embd=32, n_inner=64, n_positions=32, multi_query=True, embd_pdrop=0.0,
            attn_pdrop=0.0, resid_pdrop=0.0, **d))),
        "biogpt": lambda: lm(T.BioGptForCausalLM(T.BioGptConfig(
            num_hidden_layers=2, num_attention_heads=2, hidden_size=32, intermediate_size=64,
            max_position_embeddings=32, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
            activation_dropout=0.0, layerdrop=0.0, **d))),
        "gemma2": lambda: lm(T.Gemma2ForCausalLM(T.Gemma2Config(
            num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, hidden_size=32, head_dim=16,
            intermediate_size=64, max_position_embeddings=32, sliding_window=4, attention_dropout=0.0, **d))),
        "qwen3": lambda: lm(T.Qwen3ForCausalLM(T.Qwen3Config(
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=32, head_dim=8,
            intermediate_size=64, max_position_embeddings=32, attention_dropout=0.0, **d))),
        "phi3": lambda: lm(T.Phi3ForCausalLM(T.Phi3Config(
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=32,
            intermediate_size=64, max_position_embeddings=32, original_max_position_embeddings=32,
            resid_pdrop=0.0, embd_pdrop=0.0, attention_dropout=0.0, pad_token_id=0, **d))),
        "starcoder2": lambda: lm(T.Starcoder2ForCausalLM(T.Starcoder2Config(
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=32,
            intermediate_size=64, max_position_embeddings=32, residual_dropout=0.0, embedding_dropout=0.0,
            attention_dropout=0.0, **d))),
        "olmo2": lambda: lm(T.Olmo2ForCausalLM(T.Olmo2Config(
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=32,
            intermediate_size=64, max_position_embeddings=32, attention_dropout=0.0, pad_token_id=0, **d))),
        "stablelm": lambda: lm(T.StableLmForCausalLM(T.StableLmConfig(
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=32,
            intermediate_size=64, max_position_embeddings=32, hidden_dropout=0.0, attention_dropout=0.0, **d))),
        "cohere": lambda: lm(T.CohereForCausalLM(T.CohereConfig(
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=32,
            intermediate_size=64, max_position_embeddings=32, attention_dropout=0.0, pad_token_id=0, **d))),
        "granite": lambda: lm(T.GraniteForCausalLM(T.GraniteConfig(
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=32,
            intermediate_size=64, max_position_embeddings=32, attention_dropout=0.0, **d))),
        "mixtral": lambda: lm(T.MixtralForCausalLM(T.MixtralConfig(
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=32,
            intermediate_size=64, max_position_embeddings=32, num_local_experts=4, num_experts_per_tok=2,
            attention_dropout=0.0, **d))),
        "xglm": lambda: lm(T.XGLMForCausalLM(T.XGLMConfig(
            num_layers=2, attention_heads=2, d_model=32, ffn_dim=64, max_position_embeddings=32, dropout=0.0,
            attention_dropout=0.0, activation_dropout=0.0, layerdrop=0.0, **d))),
        "xlm_roberta": lambda: cls(T.XLMRobertaForSequenceClassification(T.XLMRobertaConfig(
            num_hidden_layers=2, num_attention_heads=2, hidden_size=32, intermediate_size=64, num_labels=3,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, max_position_embeddings=40, **d))),
        "mobilebert": lambda: cls(T.MobileBertForSequenceClassification(T.MobileBertConfig(
            num_hidden_layers=2, num_attention_heads=2, hidden_size=32, embedding_size=16, intra_bottleneck_size=16,
            intermediate_size=32, true_hidden_size=16, num_feedforward_networks=2, num_labels=3,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, classifier_dropout=0.0,
            max_position_embeddings=32, **d))),
        "convbert": lambda: cls(T.ConvBertForSequenceClassification(T.ConvBertConfig(
            num_hidden_layers=2, num_attention_heads=2, hidden_size=32, embedding_size=16, intermediate_size=64,
            num_labels=3, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, max_position_embeddings=32,
            **d))),
        "mpnet": lambda: cls(T.MPNetForSequenceClassification(T.MPNetConfig(
            num_hidden_layers=2, num_attention_heads=2, hidden_size=32, intermediate_size=64, num_labels=3,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, max_position_embeddings=40, **d))),
        "roformer": lambda: cls(T.RoFormerForSequenceClassification(T.RoFormerConfig(
            num_hidden_layers=2, num_attention_heads=2, hidden_size=32, embedding_size=32, intermediate_size=64,
            num_labels=3, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, max_position_embeddings=32,
            **d))),
        "modernbert": lambda: cls(T.ModernBertForSequenceClassification(T.ModernBertConfig(
            num_hidden_layers=2, num_attention_heads=2, hidden_size=32, intermediate_size=64, num_labels=3,
            local_attention=4, global_attn_every_n_layers=2, max_position_embeddings=32, embedding_dropout=0.0,
            attention_dropout=0.0, mlp_dropout=0.0, classifier_dropout=0.0, pad_token_id=0, **d))),
        "funnel": lambda: cls(T.FunnelForSequenceClassification(T.FunnelConfig(
            block_sizes=[1, 1], num_decoder_layers=1, n_head=2, d_model=32, d_head=16, d_inner=64, num_labels=3,
            hidden_dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, **d))),
        "deit": lambda: pix(T.DeiTForImageClassification(T.DeiTConfig(
            num_hidden_layers=2, num_attention_heads=2, hidden_size=32, intermediate_size=64, image_size=32,
            patch_size=8, num_labels=3, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))),
        "beit": lambda: pix(T.BeitForImageClassification(T.BeitConfig(
            num_hidden_layers=2, num_attention_heads=2, hidden_size=32, intermediate_size=64, image_size=32,
            patch_size=8, num_labels=3, use_relative_position_bias=True, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0, drop_path_rate=0.0))),
        "dinov2": lambda: pix(T.Dinov2ForImageClassification(T.Dinov2Config(
            num_hidden_layers=2, num_attention_heads=2, hidden_size=32, mlp_ratio=2, image_size=32, patch_size=4,
            num_labels=3, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, drop_path_rate=0.0))),
        "swin": lambda: pix(T.SwinForImageClassification(T.SwinConfig(
            image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4,
            num_labels=3, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, drop_path_rate=0.0))),
        "convnext": lambda: pix(T.ConvNextForImageClassification(T.ConvNextConfig(
            image_size=32, num_stages=2, hidden_sizes=[8, 16], depths=[1, 1], num_labels=3, drop_path_rate=0.0))),
        "segformer": lambda: pix(T.SegformerForImageClassification(T.SegformerConfig(
            image_size=32, num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[8, 16],
            num_attention_heads=[1, 2], mlp_ratios=[2, 2], num_labels=3, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0, classifier_dropout_prob=0.0, drop_path_rate=0.0))),
        "mobilevit": lambda: pix(T.MobileViTForImageClassification(T.MobileViTConfig(
            image_size=32, patch_size=2, hidden_sizes=[16, 24, 32], neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64],
            num_attention_heads=2, num_labels=3, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
            classifier_dropout_prob=0.0))),
        "regnet": lambda: pix(T.RegNetForImageClassification(T.RegNetConfig(
            embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], groups_width=8, num_labels=3))),
        # the sequence classifier pools at each row's last EOS: boolean indexing, NonZero
        "bart": lambda: (kit.Logits(T.BartForSequenceClassification(T.BartConfig(
            encoder_layers=1, decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2, d_model=32,
            encoder_ffn_dim=64, decoder_ffn_dim=64, num_labels=3, dropout=0.0, attention_dropout=0.0,
            activation_dropout=0.0, max_position_embeddings=32, **d)), "cls"),
            torch.cat([ids()[:, :-1], torch.full((B, 1), 2)], 1), torch.randint(0, 3, (B,))),
        # --- decoders: sliding windows, ALiBi, partial rotary, qk norms, clipped qkv
        "gemma3": lambda: lm(T.Gemma3ForCausalLM(T.Gemma3TextConfig(
            num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, hidden_size=32, head_dim=16,
            intermediate_size=64, max_position_embeddings=32, sliding_window=4,
            layer_types=["sliding_attention", "full_attention"], query_pre_attn_scalar=16, attention_dropout=0.0,
            pad_token_id=0, **d))),
        "mpt": lambda: lm(T.MptForCausalLM(T.MptConfig(
            n_layers=2, n_heads=2, d_model=32, expansion_ratio=2, max_seq_len=32, resid_pdrop=0.0, emb_pdrop=0.0,
            attn_config={"attn_pdrop": 0, "alibi": True}, **d))),
        "persimmon": lambda: lm(T.PersimmonForCausalLM(T.PersimmonConfig(
            num_hidden_layers=2, num_attention_heads=2, hidden_size=32, intermediate_size=64,
            max_position_embeddings=32, qk_layernorm=True, hidden_dropout=0.0, attention_dropout=0.0,
            pad_token_id=0, **d))),
        "nemotron": lambda: lm(T.NemotronForCausalLM(T.NemotronConfig(
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=32, head_dim=8,
            intermediate_size=64, max_position_embeddings=32, attention_dropout=0.0, pad_token_id=0, **d))),
        "glm": lambda: lm(T.GlmForCausalLM(T.GlmConfig(
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=32, head_dim=8,
            intermediate_size=64, max_position_embeddings=32, attention_dropout=0.0, pad_token_id=0, **d))),
        "olmo": lambda: lm(T.OlmoForCausalLM(T.OlmoConfig(
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=32,
            intermediate_size=64, max_position_embeddings=32, clip_qkv=8.0, attention_dropout=0.0,
            pad_token_id=0, **d))),
        # --- mixtures of experts: top-k routing, shared experts, mixture of attention heads
        "olmoe": lambda: olmoe(),
        "qwen2_moe": lambda: qwen2_moe(),
        # the same two with experts_implementation "batched_mm": each token's k experts'
        # weights gathered and applied by batched products.  By default transformers 5 runs
        # them through its op transformers::grouped_mm_fallback, which torch.onnx.export
        # cannot translate; "eager" loops over the experts hit, a data-dependent length
        # torch.export cannot trace
        "olmoe_batched": lambda: olmoe(experts_implementation="batched_mm"),
        "qwen2_moe_batched": lambda: qwen2_moe(experts_implementation="batched_mm"),
        "jetmoe": lambda: lm(T.JetMoeForCausalLM(T.JetMoeConfig(
            num_hidden_layers=2, num_key_value_heads=2, kv_channels=8, hidden_size=32, intermediate_size=64,
            max_position_embeddings=32, num_local_experts=4, num_experts_per_tok=2, attention_dropout=0.0,
            **d))),
        # --- recurrences: a selective state-space scan, RWKV's time mixing
        "mamba": lambda: lm(T.MambaForCausalLM(T.MambaConfig(
            num_hidden_layers=2, hidden_size=32, state_size=8, expand=2, conv_kernel=4, time_step_rank=4,
            pad_token_id=0, **d))),
        "rwkv": lambda: lm(T.RwkvForCausalLM(T.RwkvConfig(
            num_hidden_layers=2, hidden_size=32, attention_hidden_size=32, intermediate_size=64,
            context_length=32, **d))),
        # --- encoders: two-stream relative attention, grouped 1x1 convolutions, characters hashed
        "xlnet": lambda: cls(T.XLNetForSequenceClassification(T.XLNetConfig(
            n_layer=2, n_head=2, d_model=32, d_head=16, d_inner=64, num_labels=3, dropout=0.0,
            summary_last_dropout=0.0, pad_token_id=0, **d))),
        "squeezebert": lambda: cls(T.SqueezeBertForSequenceClassification(T.SqueezeBertConfig(
            num_hidden_layers=2, num_attention_heads=2, hidden_size=32, embedding_size=32, intermediate_size=64,
            q_groups=2, k_groups=2, v_groups=2, post_attention_groups=2, intermediate_groups=2, num_labels=3,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, max_position_embeddings=32, **d))),
        "canine": lambda: cls(T.CanineForSequenceClassification(T.CanineConfig(
            num_hidden_layers=2, num_attention_heads=2, hidden_size=32, intermediate_size=64, num_labels=3,
            downsampling_rate=4, upsampling_kernel_size=4, num_hash_functions=4, num_hash_buckets=64,
            local_transformer_stride=4, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
            max_position_embeddings=32))),
        # --- speech: raw audio through conv feature extractors; Whisper's log-mel encoder
        "hubert": lambda: audio(T.HubertForSequenceClassification(T.HubertConfig(**speech))),
        "wavlm": lambda: audio(T.WavLMForSequenceClassification(T.WavLMConfig(
            num_buckets=16, max_bucket_distance=32, **speech))),
        "whisper": lambda: (Features(T.WhisperForAudioClassification(T.WhisperConfig(
            num_mel_bins=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2, decoder_attention_heads=2,
            d_model=32, encoder_ffn_dim=64, decoder_ffn_dim=64, max_source_positions=16, max_target_positions=32,
            classifier_proj_size=16, num_labels=3, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
            encoder_layerdrop=0.0, decoder_layerdrop=0.0, pad_token_id=0, **d))),
            torch.randn(B, 16, 32), torch.randint(0, 3, (B,))),
        # --- translation: encoder-decoders with their LM heads
        "marian": lambda: s2s(T.MarianMTModel(T.MarianConfig(
            encoder_layers=2, decoder_layers=2, encoder_attention_heads=2, decoder_attention_heads=2, d_model=32,
            encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=32, dropout=0.0, attention_dropout=0.0,
            activation_dropout=0.0, pad_token_id=0, decoder_start_token_id=0, decoder_vocab_size=V, **d))),
        "mbart": lambda: s2s(T.MBartForConditionalGeneration(T.MBartConfig(
            encoder_layers=2, decoder_layers=2, encoder_attention_heads=2, decoder_attention_heads=2, d_model=32,
            encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=32, dropout=0.0, attention_dropout=0.0,
            activation_dropout=0.0, classifier_dropout=0.0, **d))),
        # --- vision: CLIP's tower, LeViT's attention biases, pooling, depthwise and
        # squeeze-excite, focal modulation, weight standardization, separable attention,
        # convolutional projections
        "clip": lambda: pix(T.CLIPForImageClassification(T.CLIPConfig(
            vision_config=dict(num_hidden_layers=2, num_attention_heads=2, hidden_size=32, intermediate_size=64,
                               image_size=32, patch_size=8, attention_dropout=0.0),
            text_config=dict(num_hidden_layers=2, num_attention_heads=2, hidden_size=32, intermediate_size=64,
                             max_position_embeddings=32, **d), num_labels=3))),
        # 64x64 pixels: 4x4 tokens, 2x2 after the subsampling attention; at 32x32 the last
        # stage's BatchNorm1d sees 2 values a channel, and torch's float32 steps differ from
        # its float64 ones by 15% by the third
        "levit": lambda: (kit.Logits(T.LevitForImageClassification(T.LevitConfig(
            image_size=64, hidden_sizes=[16, 32], num_attention_heads=[2, 2], depths=[1, 1], key_dim=[8, 8],
            mlp_ratio=[2, 2], attention_ratio=[2, 2], down_ops=[["Subsample", 8, 2, 2, 2, 2]],
            drop_path_rate=0, num_labels=3)), "pixels"), torch.randn(B, 3, 64, 64), torch.randint(0, 3, (B,))),
        "poolformer": lambda: pix(T.PoolFormerForImageClassification(T.PoolFormerConfig(
            num_encoder_blocks=2, depths=[1, 1], hidden_sizes=[8, 16], patch_sizes=[7, 3], strides=[4, 2],
            padding=[2, 1], mlp_ratio=2.0, drop_path_rate=0.0, num_labels=3))),
        # hidden_dim is the head's BatchNorm width: round_filters(1280) at width 0.25
        "efficientnet": lambda: pix(T.EfficientNetForImageClassification(T.EfficientNetConfig(
            image_size=32, width_coefficient=0.25, depth_coefficient=1.0, kernel_sizes=[3, 5], in_channels=[32, 16],
            out_channels=[16, 32], strides=[1, 2], num_block_repeats=[1, 1], expand_ratios=[1, 4], hidden_dim=320,
            dropout_rate=0.0, drop_connect_rate=0.0, num_labels=3))),
        "focalnet": lambda: pix(T.FocalNetForImageClassification(T.FocalNetConfig(
            image_size=32, patch_size=4, embed_dim=16, hidden_sizes=[16, 32], depths=[1, 1], focal_levels=[2, 2],
            focal_windows=[3, 3], mlp_ratio=2.0, hidden_dropout_prob=0.0, drop_path_rate=0.0, num_labels=3))),
        "bit": lambda: pix(T.BitForImageClassification(T.BitConfig(
            embedding_size=8, hidden_sizes=[16, 32], depths=[1, 1], num_groups=2, drop_path_rate=0.0,
            num_labels=3))),
        # five stride-2 stages, the last unfolded in 2x2 patches: 64x64 pixels
        "mobilevitv2": lambda: (kit.Logits(T.MobileViTV2ForImageClassification(T.MobileViTV2Config(
            image_size=64, width_multiplier=0.25, n_attn_blocks=[1, 1, 1], base_attn_unit_dims=[16, 24, 32],
            classifier_dropout_prob=0.0, attn_dropout=0.0, ffn_dropout=0.0, num_labels=3)), "pixels"),
            torch.randn(B, 3, 64, 64), torch.randint(0, 3, (B,))),
        # depth [1, 2]: CvtStage takes its drop-path rate at index stage of a list depth[stage] long
        "cvt": lambda: pix(T.CvtForImageClassification(T.CvtConfig(
            embed_dim=[16, 32], num_heads=[1, 2], depth=[1, 2], patch_sizes=[7, 3], patch_stride=[4, 2],
            patch_padding=[2, 1], mlp_ratio=[2.0, 2.0], attention_drop_rate=[0.0, 0.0], drop_rate=[0.0, 0.0],
            drop_path_rate=[0.0, 0.0], qkv_bias=[True, True], cls_token=[False, True],
            qkv_projection_method=["dw_bn", "dw_bn"], kernel_qkv=[3, 3], padding_kv=[1, 1], stride_kv=[2, 2],
            padding_q=[1, 1], stride_q=[1, 1], num_labels=3))),
        # --- token mixers other than softmax attention: Fourier transforms, Nystrom
        # landmarks, LSH expectations.  YOSO's backward is torch's own hand-written
        # approximation (YosoCumulation): its query and key gradients differ from the exact
        # ones onnx-vplan takes by 20-40%, but they are ~1e-4 here and move no loss by 5e-6
        "fnet": lambda: cls(T.FNetForSequenceClassification(T.FNetConfig(
            num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_labels=3, hidden_dropout_prob=0.0,
            max_position_embeddings=32, pad_token_id=0, **d))),
        # segment_means_seq_len is the sequence's length: 4 landmarks of 2 tokens each
        "nystromformer": lambda: cls(T.NystromformerForSequenceClassification(T.NystromformerConfig(
            num_hidden_layers=2, num_attention_heads=2, hidden_size=32, intermediate_size=64, num_labels=3,
            segment_means_seq_len=S, num_landmarks=4, conv_kernel_size=3, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0, max_position_embeddings=32, **d))),
        "yoso": lambda: cls(T.YosoForSequenceClassification(T.YosoConfig(
            num_hidden_layers=2, num_attention_heads=2, hidden_size=32, intermediate_size=64, num_labels=3,
            use_expectation=True, hash_code_len=9, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
            max_position_embeddings=32, **d))),
        # --- long-sequence attention: sliding windows with a global first token, BigBird's
        # block-sparse pattern (random blocks seeded per layer, so each step draws the same:
        # 16 tokens, more than (5 + 2 * random blocks) blocks of 2), Reformer's chunked local
        # and LSH attention in reversible layers (hash_seed: the same rotations each step)
        "longformer": lambda: cls(T.LongformerForSequenceClassification(T.LongformerConfig(
            num_hidden_layers=2, num_attention_heads=2, hidden_size=32, intermediate_size=64, num_labels=3,
            attention_window=4, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
            max_position_embeddings=40, pad_token_id=1, **d))),
        "big_bird": lambda: (kit.Logits(T.BigBirdForSequenceClassification(T.BigBirdConfig(
            num_hidden_layers=2, num_attention_heads=2, hidden_size=32, intermediate_size=64, num_labels=3,
            attention_type="block_sparse", block_size=2, num_random_blocks=1, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0, classifier_dropout=0.0, max_position_embeddings=32, pad_token_id=0,
            sep_token_id=2, **d)), "cls"), torch.randint(3, V, (B, 16)), torch.randint(0, 3, (B,))),
        "reformer": lambda: cls(T.ReformerForSequenceClassification(T.ReformerConfig(
            attn_layers=["local", "lsh"], num_attention_heads=2, attention_head_size=16, hidden_size=32,
            feed_forward_size=64, axial_pos_shape=[2, 4], axial_pos_embds_dim=[16, 16], max_position_embeddings=S,
            local_attn_chunk_length=4, lsh_attn_chunk_length=4, num_buckets=2, num_hashes=1, hash_seed=0,
            is_decoder=False, num_labels=3, hidden_dropout_prob=0.0, local_attention_probs_dropout_prob=0.0,
            lsh_attention_probs_dropout_prob=0.0, classifier_dropout=0.0, pad_token_id=0, **d))),
        # latents cross-attending to the embedded ids (its input is named inputs)
        "perceiver": lambda: (Inputs(T.PerceiverForSequenceClassification(T.PerceiverConfig(
            num_latents=8, d_latents=32, d_model=32, num_blocks=1, num_self_attends_per_block=2,
            num_self_attention_heads=2, num_cross_attention_heads=2, self_attention_widening_factor=2,
            cross_attention_widening_factor=2, attention_probs_dropout_prob=0.0, max_position_embeddings=S,
            num_labels=3, **d))), ids(), torch.randint(0, 3, (B,))),
        # --- encoders and decoders: pre-norm BERT, decoupled embeddings, CTRL's sinusoids,
        # ImageGPT's mean-pooled classifier
        "megatron_bert": lambda: cls(T.MegatronBertForSequenceClassification(T.MegatronBertConfig(
            num_hidden_layers=2, num_attention_heads=2, hidden_size=32, intermediate_size=64, num_labels=3,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, max_position_embeddings=32, **d))),
        "rembert": lambda: cls(T.RemBertForSequenceClassification(T.RemBertConfig(
            num_hidden_layers=2, num_attention_heads=2, hidden_size=32, input_embedding_size=16,
            output_embedding_size=16, intermediate_size=64, num_labels=3, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0, classifier_dropout_prob=0.0, max_position_embeddings=32, bos_token_id=1,
            eos_token_id=2, **d))),
        "ctrl": lambda: lm(T.CTRLLMHeadModel(T.CTRLConfig(
            n_layer=2, n_head=2, n_embd=32, dff=64, n_positions=32, resid_pdrop=0.0, embd_pdrop=0.0, **d))),
        "imagegpt": lambda: cls(T.ImageGPTForImageClassification(T.ImageGPTConfig(
            n_layer=2, n_head=2, n_embd=32, n_inner=64, n_positions=32, resid_pdrop=0.0, embd_pdrop=0.0,
            attn_pdrop=0.0, num_labels=3, **d))),
        # --- state spaces: Mamba2's chunked scan (chunks of 4), RecurrentGemma's RG-LRU
        "mamba2": lambda: lm(T.Mamba2ForCausalLM(T.Mamba2Config(
            num_hidden_layers=2, hidden_size=32, num_heads=4, head_dim=16, expand=2, n_groups=1, state_size=8,
            conv_kernel=4, chunk_size=4, pad_token_id=0, **d))),
        "recurrent_gemma": lambda: lm(T.RecurrentGemmaForCausalLM(T.RecurrentGemmaConfig(
            num_hidden_layers=2, hidden_size=32, lru_width=32, intermediate_size=64, num_attention_heads=2,
            num_key_value_heads=1, attention_window_size=4, block_types=["recurrent", "attention"],
            attention_dropout=0.0, pad_token_id=0, **d))),
        # --- speech: SEW-D's squeezed DeBERTa attention, Data2Vec's conv positions, the
        # Conformer's relative attention and depthwise convolution module
        "sew_d": lambda: audio(T.SEWDForSequenceClassification(T.SEWDConfig(
            squeeze_factor=2, max_position_embeddings=32, position_buckets=16, **speech))),
        "data2vec_audio": lambda: audio(T.Data2VecAudioForSequenceClassification(T.Data2VecAudioConfig(
            **dict(speech, num_conv_pos_embeddings=2, conv_pos_kernel_size=5)))),
        "wav2vec2_conformer": lambda: audio(T.Wav2Vec2ConformerForSequenceClassification(T.Wav2Vec2ConformerConfig(
            position_embeddings_type="relative", max_source_positions=64, conv_depthwise_kernel_size=3,
            conformer_conv_dropout=0.0, **speech))),
        # the same in eager attention: the default (SDPA with the relative-position bias, in
        # training) fails the exporter's decomposition ("Cannot view a tensor ...")
        "wav2vec2_conformer_eager": lambda: audio(T.Wav2Vec2ConformerForSequenceClassification(kit.eager(
            T.Wav2Vec2ConformerConfig(position_embeddings_type="relative", max_source_positions=64,
                                      conv_depthwise_kernel_size=3, conformer_conv_dropout=0.0, **speech)))),
        # --- vision: BEiT's twin, log-spaced continuous position biases and cosine attention,
        # global response norms, TF-padded depthwise-separable stacks (64x64: their BatchNorms
        # see 2x2 values a channel at the end), bottlenecks, overlapping patches, unrolled
        # mask units, additive attention
        "data2vec_vision": lambda: pix(T.Data2VecVisionForImageClassification(T.Data2VecVisionConfig(
            num_hidden_layers=2, num_attention_heads=2, hidden_size=32, intermediate_size=64, image_size=32,
            patch_size=8, num_labels=3, use_relative_position_bias=True, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0, drop_path_rate=0.0))),
        "swinv2": lambda: pix(T.Swinv2ForImageClassification(T.Swinv2Config(
            image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4,
            pretrained_window_sizes=[0, 0], num_labels=3, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
            drop_path_rate=0.0))),
        "convnextv2": lambda: pix(T.ConvNextV2ForImageClassification(T.ConvNextV2Config(
            image_size=32, num_stages=2, hidden_sizes=[8, 16], depths=[1, 1], num_labels=3, drop_path_rate=0.0))),
        # the two MobileNets train chaotically at this size (torch's float32 and float64 steps
        # part by 1e-4 at the second loss, by up to 0.2 at the third): their rows differ from
        # torch by float32 noise; v1's first step differs where one ReLU6 input lies 1e-5 from 0
        "mobilenet_v1": lambda: (kit.Logits(T.MobileNetV1ForImageClassification(T.MobileNetV1Config(
            image_size=64, depth_multiplier=0.25, min_depth=8, classifier_dropout_prob=0.0, num_labels=3)), "pixels"),
            torch.randn(B, 3, 64, 64), torch.randint(0, 3, (B,))),
        "mobilenet_v2": lambda: (kit.Logits(T.MobileNetV2ForImageClassification(T.MobileNetV2Config(
            image_size=64, depth_multiplier=0.25, min_depth=8, classifier_dropout_prob=0.0, num_labels=3)), "pixels"),
            torch.randn(B, 3, 64, 64), torch.randint(0, 3, (B,))),
        "resnet": lambda: pix(T.ResNetForImageClassification(T.ResNetConfig(
            embedding_size=8, hidden_sizes=[16, 32], depths=[1, 1], layer_type="bottleneck", num_labels=3))),
        "pvt_v2": lambda: pix(T.PvtV2ForImageClassification(T.PvtV2Config(
            image_size=32, num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[8, 16],
            patch_sizes=[7, 3], strides=[4, 2], num_attention_heads=[1, 2], mlp_ratios=[2, 2], num_labels=3,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, drop_path_rate=0.0))),
        # 8x8 tokens after the stride-4 stem: one 8x8 mask unit, pooled 2x2 into the second stage
        "hiera": lambda: pix(T.HieraForImageClassification(T.HieraConfig(
            embed_dim=8, image_size=[32, 32], patch_size=[7, 7], patch_stride=[4, 4], patch_padding=[3, 3],
            mlp_ratio=2.0, depths=[1, 1], num_heads=[1, 2], num_query_pool=1, query_stride=[2, 2],
            masked_unit_size=[8, 8], masked_unit_attention=[True, False], drop_path_rate=0.0, num_labels=3))),
        "swiftformer": lambda: pix(T.SwiftFormerForImageClassification(T.SwiftFormerConfig(
            image_size=32, depths=[1, 1], embed_dims=[16, 32], mlp_ratio=2, downsamples=[True, True],
            drop_path_rate=0.0, drop_mlp_rate=0.0, drop_conv_encoder_rate=0.0, num_labels=3))),
        # --- video: [B, frames, 3, H, W], divided space-time attention and tubelets
        "timesformer": lambda: video(T.TimesformerForVideoClassification(T.TimesformerConfig(
            image_size=32, patch_size=8, num_frames=2, num_hidden_layers=2, num_attention_heads=2, hidden_size=32,
            intermediate_size=64, attention_type="divided_space_time", hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0, drop_path_rate=0, num_labels=3))),
        "videomae": lambda: video(T.VideoMAEForVideoClassification(T.VideoMAEConfig(
            image_size=32, patch_size=8, num_frames=2, tubelet_size=2, num_hidden_layers=2, num_attention_heads=2,
            hidden_size=32, intermediate_size=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
            use_mean_pooling=True, num_labels=3))),
    }


def export(name, build, out, optimize):
    import torch
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    model, x, y = build()
    model.train()
    with contextlib.redirect_stdout(sys.stderr):  # the exporter's progress lines, off the table
        torch.onnx.export(model, (x,), os.path.join(out, "model.onnx"), input_names=["x"], output_names=["logits"],
                          optimize=optimize, external_data=False)
    x.numpy().tofile(os.path.join(out, "x.bin"))
    y.numpy().tofile(os.path.join(out, "labels.bin"))
    # the parameters torch does not train (requires_grad=False: Marian's, Whisper's and
    # RoFormer's sinusoidal position tables), which no exporter records: the user names them
    # with --freeze (onnx_vplan.export marks them in the signature instead)
    frozen = [n for n, p in model.named_parameters() if not p.requires_grad]
    with open(os.path.join(out, "frozen.json"), "w") as f:
        json.dump(frozen, f)
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
    ap.add_argument("--optimize", action="store_true",
                    help="export with optimize=True (the exporter's default) into WORK/NAME.opt")
    a = ap.parse_args()
    vplan = os.path.join(a.build, "onnx-vplan")
    work = a.work or os.path.join(a.build, "hf_architectures")
    archs = architectures()
    names = a.only or list(archs)
    print("| architecture | torch's losses | ours | largest relative difference | fused |")
    print("|---|---|---|---|---|")
    failed = 0
    for name in names:
        out = os.path.join(work, name + (".opt" if a.optimize else ""))
        if not os.path.exists(os.path.join(out, "losses.json")):
            try:
                export(name, archs[name], out, a.optimize)
            except Exception as e:  # torch's own exporter failing is a row, not a crash
                lines = [l for l in str(e).splitlines() if l.strip()] or [type(e).__name__]
                cause = [l for l in lines if "Error'>" in l or l.startswith(("<class '", "ValueError", "RuntimeError"))]
                why = re.sub(r"\x1b\[[0-9;]*m", "", (cause or lines)[-1]).replace("|", "/")
                print(f"| {name} | torch.onnx.export failed: {why[:160]} | | | |")
                continue
        want = json.load(open(os.path.join(out, "losses.json")))
        frozen_path = os.path.join(out, "frozen.json")
        frozen = json.load(open(frozen_path)) if os.path.exists(frozen_path) else []
        freeze = ["--freeze", "^(" + "|".join(re.escape(n) for n in frozen) + ")$"] if frozen else []
        r = subprocess.run([vplan, "train", os.path.join(out, "model.onnx"), "--loss", "ce:logits", "--optimizer",
                            "momentum", "--lr", "0.01", "--steps", "3", "--data", out] + freeze,
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
        bad = any(abs(g - w) > 5e-6 * max(abs(w), 1.0) for g, w in zip(got, want))
        failed += bad
        note = f" ({len(frozen)} frozen by --freeze)" if frozen else ""
        print(f"| {name} | {', '.join(f'{v:.6f}' for v in want)} | {', '.join(f'{v:.6f}' for v in got)}{note} | "
              f"{diff:.1e}{' (over 5e-6 of max(loss, 1))' if bad else ''} | {fused.group(1) if fused else 'no attention'} |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
