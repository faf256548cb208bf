#!/usr/bin/env bash
# Today's exports (torch 2.x's default torch.onnx.export, the dynamo exporter), made by
# tools/scripts/export_torch2_models.py into tests/data/torch2/qwen2: a Qwen2 of 2 layers
# (GQA, rotary embeddings, tied embeddings), its node metadata as the exporter wrote it.  optimize=False trains to torch's own losses on
# the same batch, with the trainable set from the exporter's signature (the rotary
# buffers frozen, the tied embedding trained once); the default export, whose optimizer
# folded and merged parameters into constants of its own, is refused naming the fix
# (it trained constants into NaN with exit 0 before).
set -u
tool=$1
src=$2
data=$src/tests/data/torch2/qwen2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/expect.sh"

args=(--loss ce:logits --optimizer momentum --lr 0.01 --steps 3 --data "$data")
expect 0 "training step: 26 parameters (20768 elements)" -- "$tool" train "$data/eval_opt0.onnx" "${args[@]}"
expect 0 "trainable set: the exporter's signature" -- "$tool" train "$data/eval_opt0.onnx" "${args[@]}"
expect 0 "1 of the exporter's 27 parameters are not in the graph under their names (first: 'm.model.embed_tokens.weight'): tied" -- \
    "$tool" train "$data/eval_opt0.onnx" "${args[@]}"
# torch's losses (torch.json) within float32 noise
out=$("$tool" train "$data/eval_opt0.onnx" "${args[@]}" 2>&1)
want=$(sed -n '/"losses"/,/]/p' "$data/torch.json" | grep -o '[0-9][0-9.e+-]*' | tr '\n' ' ')
got=$(sed -n 's/^step [0-9]*  loss \([0-9.nainf-]*\).*/\1/p' <<<"$out" | tr '\n' ' ')
if awk -v w="$want" -v g="$got" 'BEGIN { n = split(w, a, " "); m = split(g, b, " "); if (n != 3 || m != 3) exit 1;
        for (i = 1; i <= n; i++) { d = a[i] - b[i]; if (d < 0) d = -d; if (!(d <= 1e-5)) exit 1 } }'; then
    pass=$((pass + 1))
else
    fail=$((fail + 1))
    echo "FAIL: qwen2 optimize=False: losses $got, torch $want (want within 1e-5)"
fi
expect 2 "folded or merged 23 of the 27 parameters torch.export listed .* Export with torch.onnx.export(..., optimize=False)" -- \
    "$tool" train "$data/eval_opt1.onnx" "${args[@]}"
expect 2 "optimize=False" -- "$tool" plan "$data/eval_opt1.onnx" --loss ce:logits
expect 0 "arena" -- "$tool" plan "$data/eval_opt0.onnx" --loss ce:logits --optimizer adamw
# inspect: the exporter, the signature's counts and what the export lost
expect 0 "producer: pytorch 2.15" -- "$tool" inspect "$data/eval_opt0.onnx"
expect 0 "signature: torch.export's, 27 parameters, 2 buffers, 0 constants; 1 parameters not in the graph under their names (first: m.model.embed_tokens.weight)" -- "$tool" inspect "$data/eval_opt0.onnx"
expect 0 "the export lost its training structure .* optimize=False" -- "$tool" inspect "$data/eval_opt1.onnx"
expect 0 '"training_structure_lost": true' -- "$tool" inspect "$data/eval_opt1.onnx" --json
# opset 23's Attention (torch.onnx.export(..., opset_version=23)), expanded into the ops
# that define it, fuses as the exporter's own decomposition does: the expansion's zeroing
# of rows its mask keeps no key of is a product by ones under a causal mask
expect 0 "fused 2 attention, 2 of them grouped-query with K and V unrepeated" -- \
    "$tool" plan "$src/tests/data/torch2/llama/op23_eval_opt0.onnx" --loss ce:logits --optimizer adamw
expect 0 "fused 2 attention, 6 Q, K, V read in place" -- "$tool" plan "$src/tests/data/torch2/bert/op23_eval_opt0.onnx" --loss ce:logits
# wav2vec2 at opset 23: its GroupNorm written as GroupNormalization (expanded into
# InstanceNormalization), torch's losses (torch2_kit), its attention fused
expect 0 "fused 2 attention" -- "$tool" plan "$src/tests/data/torch2/wav2vec2/op23_eval_opt0.onnx" --loss ce:logits
# a padding mask as an input (tests/data/torch2_masks/llama_left, the kit's Llama padded on
# the left: two query rows keep no key), its attention fused: at opset 18 those rows are
# filled with torch.finfo.min everywhere (uniform, as Softmax gives them), at opset 23
# zeroed (ONNX's Attention; torch's losses); fused trains as unfused, step for step
left=$src/tests/data/torch2_masks/llama_left
for f in eval_opt0 op23_eval_opt0; do
    expect 0 "fused 2 attention" -- "$tool" plan "$left/$f.onnx" --loss ce:logits
    fused=$("$tool" train "$left/$f.onnx" --loss ce:logits --optimizer adamw --steps 3 --data "$left" 2>&1 | grep '^step' | cut -c1-24)
    plain=$("$tool" train "$left/$f.onnx" --loss ce:logits --optimizer adamw --steps 3 --data "$left" --attention plain 2>&1 |
        grep '^step' | cut -c1-24)
    if [[ -n $fused && $fused == "$plain" ]]; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1))
        echo "FAIL: llama_left $f: fused '$fused', unfused '$plain'"
    fi
done
expect 0 "step 3  loss 4.0622" -- "$tool" train "$left/op23_eval_opt0.onnx" --loss ce:logits --optimizer momentum --lr 0.01 \
    --steps 3 --data "$left"
# XGLM (the kit's): its softmax over the rank-3 view of the scores and its clamp at
# torch.finfo.min (a Max) fuse under its constant causal mask; padded on the left with the
# mask an input (tests/data/torch2_masks/xglm_left), two rows keep no key and the clamp
# ties each of their scores, which halves their gradient: not fused there, torch's losses
expect 0 "fused 2 attention, 13 MatMul" -- "$tool" plan "$src/tests/data/torch2/xglm/eval_opt0.onnx" --loss ce:logits
xleft=$src/tests/data/torch2_masks/xglm_left
expect 0 "fused 13 MatMul of a transposed weight" -- "$tool" plan "$xleft/eval_opt0.onnx" --loss ce:logits
expect 0 "step 3  loss 4.10931" -- "$tool" train "$xleft/eval_opt0.onnx" --loss ce:logits --optimizer momentum --lr 0.01 \
    --steps 3 --data "$xleft"
# a train()-mode module whose BatchNorm the exporter's optimizer folded into its Conv
# (tests/data/torch2_folded, tools/scripts/make_folded_bn_export.py): nothing of the
# exporter's own beside the missing parameters, but their module's running statistics
# are gone too; refused naming the fix, the optimize=False export of it trained
folded=$src/tests/data/torch2_folded
expect 2 "folded 2 of the 5 parameters .* neither 'bn.weight' nor its module's buffer 'bn.running_mean' .* optimize=False" -- \
    "$tool" train "$folded/bn_opt1.onnx" --loss ce:logits --optimizer momentum --steps 1
expect 0 '"training_structure_lost": true' -- "$tool" inspect "$folded/bn_opt1.onnx" --json
expect 0 "step 2  loss" -- "$tool" train "$folded/bn_opt0.onnx" --loss ce:logits --optimizer momentum --steps 2
# the trainable set: without a signature (an exporter that writes none) every float
# initializer but scalars (Gemma's embedding scale, a buffer), and torch's losses still;
# --trainable names exactly what trains
gemma=$src/tests/data/torch2/gemma
gargs=(--loss ce:logits --optimizer momentum --lr 0.01 --steps 1 --data "$gemma")
expect 0 "trainable set: every float initializer (no exporter signature) but 1 scalars, taken for constants" -- \
    "$tool" train "$gemma/nosig_eval_opt0.onnx" "${gargs[@]}"
expect 0 "training step: 22 parameters" -- "$tool" train "$gemma/nosig_eval_opt0.onnx" "${gargs[@]}" --trainable .
expect 0 "trainable set: --trainable 'mlp' (16 float initializers it does not match, not trained)" -- \
    "$tool" train "$gemma/eval_opt0.onnx" "${gargs[@]}" --trainable mlp
expect 0 "training step: 4 parameters (8192 elements), 2 frozen" -- "$tool" train "$gemma/eval_opt0.onnx" "${gargs[@]}" --trainable mlp --freeze down_proj
expect 2 "no trainable parameter (--trainable matches no float initializer" -- \
    "$tool" train "$gemma/eval_opt0.onnx" "${gargs[@]}" --trainable nothing-is-named-so
expect 2 "--trainable '(' is not a valid regular expression" -- "$tool" train "$gemma/eval_opt0.onnx" "${gargs[@]}" --trainable '('
expect 0 "trainable set: 21 float initializers, every one (no exporter signature) but 1 scalars" -- \
    "$tool" inspect "$gemma/nosig_eval_opt0.onnx"
expect 0 "trainable set: 20 float initializers, the signature's parameters (2 buffers" -- "$tool" inspect "$gemma/eval_opt0.onnx"
expect 0 '"from": "rule",' -- "$tool" inspect "$gemma/nosig_eval_opt0.onnx" --json
# torch 2.x's scaled_dot_product_attention (scale split over Q and K^T, K^T through
# Reshape/Transpose/Reshape, the IsNaN guard of fully masked rows) fused into one
# Attention per layer; the kit's sweep (torch2_kit.sh) checks the losses stay torch's
kit=$src/tests/data/torch2
for m in llama gpt2 bert vit; do
    expect 0 "fused 2 attention" -- "$tool" train "$kit/$m/eval_opt0.onnx" --loss ce:logits --steps 1 --data "$kit/$m"
done
# SiLU (Mul(x, Sigmoid(x))) as ONNX's Swish, and swish(G) U into the down projection: the
# gated MLP keeps G and U alone for its backward; RMSNorm (Pow, ReduceMean, Add, Sqrt,
# Reciprocal, Mul, Mul) as SimplifiedLayerNormalization, keeping x, not x / rms too
# Hugging Face's causal mask (0 and torch.finfo.min, folded) becomes causal=1: no mask kept
expect 0 "vplan.Attention(add_4, add_5, transpose_2) {scale=0.353553, causal=1" -- \
    "$tool" plan "$kit/llama/eval_opt0.onnx" --loss ce:logits --dump-after attention-inputs
# K and V of 2 key/value heads read as they are by the 4 query heads, not repeated (GQA)
expect 0 "fused 2 attention, 2 of them grouped-query with K and V unrepeated, 5 RMSNorm, 15 MatMul of a transposed weight, 2 SiLU (Swish), 2 SwiGLU into its MatMul" -- \
    "$tool" train "$kit/llama/eval_opt0.onnx" --loss ce:logits --steps 1 --data "$kit/llama"
# Gemma's GELU-gated MLP (GeGLU, Gelu of the tanh form) fused into its down product too,
# training to torch's losses (torch.json: momentum, lr 0.01) within float32 noise
expect 0 "2 GeGLU into its MatMul" -- "$tool" plan "$kit/gemma/eval_opt0.onnx" --loss ce:logits
expect 0 "step 3  loss 4.0512" -- "$tool" train "$kit/gemma/eval_opt0.onnx" --loss ce:logits --optimizer momentum --lr 0.01 \
    --steps 3 --data "$kit/gemma"
# Gemma 2's eager attention: its scores soft-capped (Div, Tanh, Mul by 50) before the mask
# and its probabilities cast to their own dtype fuse as Attention's softcap; the
# sliding-window layer keeps its constant mask, the global one becomes causal=1; trains to
# torch's losses (3.940372 at step 3)
expect 0 "= vplan.Attention(add_7, add_8, transpose_2, where_1) {scale=0.0625, causal=0, y_bshd=1, softcap=50}" -- \
    "$tool" plan "$kit/gemma2/eval_opt0.onnx" --loss ce:logits --dump-after attention-inputs
expect 0 "{scale=0.0625, causal=1, y_bshd=1, softcap=50}" -- \
    "$tool" plan "$kit/gemma2/eval_opt0.onnx" --loss ce:logits --dump-after attention-inputs
expect 0 "step 3  loss 3.94037" -- "$tool" train "$kit/gemma2/eval_opt0.onnx" --loss ce:logits --optimizer momentum \
    --lr 0.01 --steps 3 --data "$kit/gemma2"
# GPT-2's Conv1D after its GELU (FastGelu, Reshape, Gemm with the bias) into GeluMatMul
# and the bias Add, the GELU's output never stored; trains to torch's losses
expect 0 "2 FastGelu, 1 MatMul of a transposed weight, 2 Gelu into its MatMul" -- \
    "$tool" plan "$kit/gpt2/eval_opt0.onnx" --loss ce:logits
expect 0 "vplan.GeluMatMul(node_view_12:0, m.transformer.h.0.mlp.c_proj.weight) {transB=0, approximate='tanh'}" -- \
    "$tool" plan "$kit/gpt2/eval_opt0.onnx" --loss ce:logits --dump-after fuse-act-matmul
expect 0 "step 3  loss 4.00928" -- "$tool" train "$kit/gpt2/eval_opt0.onnx" --loss ce:logits --optimizer momentum --lr 0.01 \
    --steps 3 --data "$kit/gpt2"
# BLOOM's tanh GELU factored as (sqrt(2/pi) x) (1 + 0.044715 x x): one FastGelu, into
# its product; its attention, rank-3 batched products around the ALiBi bias and a
# causal mask, fused: causal=1, the bias the one mask (torch2_kit checks its losses and
# fused = unfused)
expect 0 "fused 2 attention, 2 FastGelu, 9 MatMul of a transposed weight, 2 Gelu into its MatMul" -- \
    "$tool" plan "$kit/bloom/eval_opt0.onnx" --loss ce:logits
expect 0 "vplan.Attention(clone, clone_1, clone_2, node_bmm/rank4:0_4) {scale=0.25, causal=1, y_bshd=1}" -- \
    "$tool" plan "$kit/bloom/eval_opt0.onnx" --loss ce:logits --dump-after fuse-attention
# DeBERTa-v2's the same way, its masked_fill (a Where) between the scores and the softmax,
# its relative position terms (from parameters) a second mask with its gradient; their
# c2p and p2c gathers (torch.gather over an index expanded to every batch and head) as a
# Gather of one row of offsets, not a constant index of the full shape per layer
expect 0 "fused 2 attention, 16 MatMul of a transposed weight, 4 GatherElements over repeating indices as a Gather, 2 Gelu into its MatMul" -- \
    "$tool" plan "$kit/deberta_v2/eval_opt0.onnx" --loss ce:logits
# LoRA on exports with a signature: the adapters are ours, trained, neither torch's
# parameters nor the exporter's constants (the tied Qwen2 was refused, the Llama had
# "no trainable parameter")
for m in llama qwen2; do
    expect 0 "lora r=4 scale 1: 15 adapted weights, 4480 adapter parameters" -- \
        "$tool" train "$kit/$m/eval_opt0.onnx" --loss ce:logits --optimizer adamw --lora r=4 --steps 2 --data "$kit/$m"
done
# an offloaded fused update copies the weight back over the one the backward still reads
# (RMSNorm's dx reads its weight after dW): after that read, or the plan is unsound
llama=$kit/llama
expect 0 "host: .* the offloaded optimizer state" -- "$tool" plan "$llama/eval_opt0.onnx" --loss ce:logits --optimizer adamw \
    --offload --device h100 -o "$tmp/off.vplan"
expect 0 "step 3  loss 4.015722" -- "$tool" run "$tmp/off.vplan" --steps 3 --data "$llama"
expect 0 "step 3  loss 4.015722" -- "$tool" train "$llama/eval_opt0.onnx" --loss ce:logits --optimizer adamw --steps 3 --data "$llama"
# bf16 with the weights cast again for the backward (the default) trains to the bits of
# the copies held across (--keep-weight-copies), planned and run as well as trained
for keep in "" --keep-weight-copies; do
    "$tool" train "$llama/eval_opt0.onnx" --loss ce:logits --optimizer adamw --precision bf16 --steps 3 --data "$llama" \
        $keep | sed -n 's/^\(step [0-9]*  loss [^ ]*\).*/\1/p' >"$tmp/bf16$keep.train"
    "$tool" plan "$llama/eval_opt0.onnx" --loss ce:logits --optimizer adamw --precision bf16 $keep -o "$tmp/bf16$keep.vplan" \
        >/dev/null
    "$tool" run "$tmp/bf16$keep.vplan" --steps 3 | sed -n 's/^\(step [0-9]*  loss [^ ]*\).*/\1/p' >"$tmp/bf16$keep.run"
done
expect 0 "" -- cmp "$tmp/bf16.train" "$tmp/bf16--keep-weight-copies.train"
expect 0 "" -- cmp "$tmp/bf16.run" "$tmp/bf16--keep-weight-copies.run"
expect 0 "step 3  loss" -- cat "$tmp/bf16.train"
# each LayerNorm (GPT-2) and RMSNorm (Llama) run again for the backward rather than its
# output held across: the weights after 3 steps are those of the held outputs bit for
# bit (--keep-norm-outputs), in float32 and bf16, and the arena is smaller
for m in gpt2 llama; do
    for prec in fp32 bf16; do
        for keep in "" --keep-norm-outputs; do
            "$tool" plan "$kit/$m/eval_opt0.onnx" --loss ce:logits --optimizer adamw --precision $prec $keep \
                -o "$tmp/norm-$m-$prec$keep.vplan" --json "$tmp/norm-$m-$prec$keep.json" >"$tmp/norm-$m-$prec$keep.txt"
            "$tool" run "$tmp/norm-$m-$prec$keep.vplan" --steps 3 --data "$kit/$m" --save "$tmp/norm-$m-$prec$keep.onnx" \
                >/dev/null
        done
        expect 0 "norms run again for the backward" -- cat "$tmp/norm-$m-$prec.txt"
        expect 0 "largest absolute difference 0 " -- "$tool" compare "$tmp/norm-$m-$prec.onnx" \
            "$tmp/norm-$m-$prec--keep-norm-outputs.onnx" --tolerance 0
        a=$(sed -n 's/.*"arena_bytes": *\([0-9]*\).*/\1/p' "$tmp/norm-$m-$prec.json" | head -1)
        b=$(sed -n 's/.*"arena_bytes": *\([0-9]*\).*/\1/p' "$tmp/norm-$m-$prec--keep-norm-outputs.json" | head -1)
        # (the kit's models are of width 32: only GPT-2's float32 step peaks where a norm's
        # output is live; the others are no larger)
        if [[ $m-$prec == gpt2-fp32 ]]; then
            expect 0 "" -- test "${a:-0}" -gt 0 -a "${a:-0}" -lt "${b:-0}"
        else
            expect 0 "" -- test "${a:-0}" -gt 0 -a "${a:-0}" -le "${b:-0}"
        fi
    done
done
# checkpointing weighs the step as the exporter wrote it (it may recompute a norm itself)
"$tool" plan "$kit/gpt2/eval_opt0.onnx" --loss ce:logits --optimizer adamw --remat dp --budget 1 >"$tmp/norm-dp.txt" 2>&1
expect 0 "checkpointing: dp" -- cat "$tmp/norm-dp.txt"
expect 1 "" -- grep -q "norms run again" "$tmp/norm-dp.txt"
expect_summary
