#!/usr/bin/env bash
# Tensor parallelism on today's exports (issue 41): the torch 2.x kit's Llama (GQA 4/2,
# rotary embeddings, SwiGLU, RMSNorm), GPT-2 (a fused QKV product split by torch.split),
# BERT and ViT (separate q, k, v with biases) at --tp 2: every attention projection and
# every MLP product of each layer split (column / row counts = layers x products per
# layer, plus the LM head's or the pooler's), the bytes each rank sends as planned, and
# rank 0's losses under mpirun -np 2 the one-rank plan's within 1e-5 over 5 steps (the
# Llama also with --sp), and a Llama of 4 key/value heads under mpirun -np 4, and the
# trained weights after them (SGD with momentum) within 1e-5 of one rank's.  Qwen2 and
# Gemma (1 key/value head) and the Llama at --tp 4 (2): their key/value projections
# computed whole on every rank, the rest split, the losses again one rank's.
# usage: torch2_tp.sh ONNX_VPLAN SOURCE_DIR MPIRUN (MPIRUN empty: the mpirun checks are left out)
set -u
tool=$1
src=$2
mpirun=${3:-}
kit=$src/tests/data/torch2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/expect.sh"
args=(--loss ce:logits --optimizer adamw)

# 2 layers each: Llama q, k, v, gate, up / o, down and the LM head's vocabulary columns;
# GPT-2 c_attn, c_fc / c_proj twice; BERT q, k, v, intermediate / output twice and the
# pooler; ViT q, k, v, intermediate / output
expect 0 "tensor parallel over 2 ranks: 11 column- and 4 row-parallel products" -- "$tool" plan "$kit/llama/eval_opt0.onnx" "${args[@]}" --tp 2
expect 0 "tensor parallel over 2 ranks: 4 column- and 4 row-parallel products" -- "$tool" plan "$kit/gpt2/eval_opt0.onnx" "${args[@]}" --tp 2
expect 0 "tensor parallel over 2 ranks: 9 column- and 5 row-parallel products" -- "$tool" plan "$kit/bert/eval_opt0.onnx" "${args[@]}" --tp 2
expect 0 "tensor parallel over 2 ranks: 8 column- and 4 row-parallel products" -- "$tool" plan "$kit/vit/eval_opt0.onnx" "${args[@]}" --tp 2
expect 0 "tensor parallel over 4 ranks: 11 column- and 4 row-parallel products" -- "$tool" plan "$kit/llama_mha/eval_opt0.onnx" "${args[@]}" --tp 4

# Qwen2 and Gemma: 2 heads, 1 key/value head, which does not divide among 2 ranks: q by
# columns, o by rows, k and v computed whole on every rank (Megatron-LM's replicated
# key/value heads), each rank's share of the repeated heads cut for the fused Attention,
# their gradients all-reduced; each one named with the reason and what it costs.  The
# Llama at --tp 4 (4 heads, 2 key/value heads) the same way.
for m in qwen2/eval_opt0 gemma/eval_opt0 gemma/nosig_eval_opt0; do
    expect 0 "tensor parallel over 2 ranks: 6 column- and 4 row-parallel products" -- "$tool" plan "$kit/$m.onnx" "${args[@]}" --tp 2
    expect 0 "left replicated (every rank computes it whole): 4 products" -- "$tool" plan "$kit/$m.onnx" "${args[@]}" --tp 2
    expect 0 "the product by 'm.model.layers.1.self_attn.v_proj.weight': --tp 2 does not divide its key/value heads (1);" -- \
        "$tool" plan "$kit/$m.onnx" "${args[@]}" --tp 2
done
expect 0 "computed whole on every rank; 'node_scaled_dot_product_attention_attention/Attention' (Attention) reads each rank's share" -- \
    "$tool" plan "$kit/qwen2/eval_opt0.onnx" "${args[@]}" --tp 2
# k_proj's weight and bias, 16 x 32 + 16 floats; 6 x 16 tokens x 32 x 16 multiply-adds
expect 0 "costs its gradients' all-reduce (2.06 KiB a step) and 49.2 kFLOP a step on every rank (24.6 were it split)" -- \
    "$tool" plan "$kit/qwen2/eval_opt0.onnx" "${args[@]}" --tp 2
expect 0 "tensor parallel over 4 ranks: 7 column- and 4 row-parallel products" -- "$tool" plan "$kit/llama/eval_opt0.onnx" "${args[@]}" --tp 4
expect 0 "the product by 'm.model.layers.0.self_attn.k_proj.weight': --tp 4 does not divide its key/value heads (2);" -- \
    "$tool" plan "$kit/llama/eval_opt0.onnx" "${args[@]}" --tp 4

# --sp where the residual stream's neighbours are not split by vocabulary: GPT-2's tied
# embedding cut to each rank's positions and its head reading the sequence gathered whole,
# BERT's token-type table and pooler the same; ViT's 17 positions (the class token and 16
# patches) refused at --tp 2, naming the all-reduce
expect 0 "sequence-parallel: between the regions each rank holds 1/2 of the sequence; 3 all-gathers and 4" -- \
    "$tool" plan "$kit/gpt2/eval_opt0.onnx" "${args[@]}" --tp 2 --sp
expect 0 "^  1 value whole on every rank .* cut to each rank's positions;" -- "$tool" plan "$kit/gpt2/eval_opt0.onnx" "${args[@]}" --tp 2 --sp
expect 0 "^  2 values whole on every rank .* cut to each rank's positions;" -- "$tool" plan "$kit/bert/eval_opt0.onnx" "${args[@]}" --tp 2 --sp
expect 0 "^  1 gathered whole for ops that mix tokens" -- "$tool" plan "$kit/bert/eval_opt0.onnx" "${args[@]}" --tp 2 --sp
expect 2 "node 'val_91_partial/TPAllReduce' (vplan.TPAllReduce): --sp: --tp 2 does not divide the sequence of the all-reduced \[batch, seq, hidden\] (17 positions)" -- \
    "$tool" plan "$kit/vit/eval_opt0.onnx" "${args[@]}" --tp 2 --sp

losses() { sed -nE 's/^step [0-9]+  loss ([0-9.e+-]+).*/\1/p'; }
worst() { paste "$1" "$2" | awk '{d = $1 - $2; if (d < 0) d = -d; r = d / ($2 < 0 ? -$2 : $2); if (r > w) w = r} END {printf "%.3g\n", w + 0}'; }
# tp_run TAG FILE N SP OPTIONS...: plans the model on 1 and N ranks (SP: --sp, or empty:
# not), runs 5 steps of each
# (mpirun -np N for the second), each saving its trained model as $tmp/TAG.{1,N}.onnx;
# checks every rank's bytes counted = planned and rank 0's losses within 1e-5 of one
# rank's; leaves the worst loss difference in $w
tp_run() {
    local tag=$1 f=$2 n=$3 sp=$4
    shift 4
    "$tool" plan "$f" "$@" --tp 1 -o "$tmp/$tag.1.vplan" >/dev/null || echo "FAIL: $tag plan --tp 1"
    "$tool" plan "$f" "$@" --tp $n $sp -o "$tmp/$tag.$n.vplan" >/dev/null || echo "FAIL: $tag plan --tp $n $sp"
    "$tool" run "$tmp/$tag.1.vplan" --steps 5 --save "$tmp/$tag.1.onnx" | losses >"$tmp/$tag.l1"
    local out
    out=$("${mpi[@]}" -np $n "$tool" run "$tmp/$tag.$n.vplan" --steps 5 --save "$tmp/$tag.$n.onnx" 2>&1)
    sed -nE 's/^rank [0-9]+ of '$n': sent ([0-9]+) bytes a step in [0-9]+ collectives .*; planned ([0-9]+)$/\1 \2/p' \
        <<<"$out" >"$tmp/$tag.bytes"
    expect 0 "" -- awk -v n=$n '$1 != $2 || $1 == 0 {bad = 1} END {exit bad || NR != n}' "$tmp/$tag.bytes"
    losses <<<"$out" >"$tmp/$tag.l2"
    w=$(worst "$tmp/$tag.l2" "$tmp/$tag.l1")
    if [[ $(wc -l <"$tmp/$tag.l2") -eq 5 ]] && awk -v w="$w" 'BEGIN {exit !(w < 1e-5)}'; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1))
        echo "FAIL: $tag --tp $n under mpirun: losses $(tr '\n' ' ' <"$tmp/$tag.l2"), one rank's $(tr '\n' ' ' <"$tmp/$tag.l1")"
    fi
}
if [[ -n $mpirun ]]; then
    mpi=("$mpirun" --allow-run-as-root --oversubscribe)
    [[ -n ${VP_MPI_ASAN_OPTIONS:-} ]] && mpi=(env "ASAN_OPTIONS=$VP_MPI_ASAN_OPTIONS" "${mpi[@]}")
    # llama_sp: the same Llama sequence-parallel between the regions (RMSNorm's Pow and
    # ReduceMean over the hidden size are token-wise); gpt2_sp, bert_sp, qwen2_sp and
    # gemma_sp too (LayerNormalization is token-wise): an embedding left replicated (tied
    # to the LM head) or a token-type table read whole is cut to each rank's positions,
    # GPT-2's products over flattened tokens have their collectives moved to the
    # [batch, seq, hidden] side, and a head left replicated or BERT's pooler (its first
    # token) reads the sequence gathered whole
    # llama_mha4: a Llama of 4 heads and 4 key/value heads over 4 ranks
    # llama4: the Llama (2 key/value heads) over 4 ranks, k and v whole on every rank
    # gemma_nosig: rotary tables computed from a trained buffer (no exporter signature):
    # their gradients, each rank's part from its heads, all-reduced too
    # roberta, t5 (self- and cross-attention, relative position bias), wav2vec2 (a
    # convolutional front end before the transformer): the kit's other architectures
    sgd=(--loss ce:logits --optimizer momentum --lr 0.05)
    for m in llama gpt2 bert vit llama_sp gpt2_sp bert_sp qwen2_sp gemma_sp llama_mha4 llama4 qwen2 gemma gemma_nosig roberta t5 wav2vec2; do
        f=$kit/${m%_sp}/eval_opt0.onnx sp= n=2
        [[ $m == *_sp ]] && sp=--sp
        [[ $m == llama_mha4 ]] && f=$kit/llama_mha/eval_opt0.onnx n=4
        [[ $m == llama4 ]] && f=$kit/llama/eval_opt0.onnx n=4
        [[ $m == gemma_nosig ]] && f=$kit/gemma/nosig_eval_opt0.onnx
        tp_run "$m" "$f" $n "$sp" "${args[@]}"
        wa=$w
        # the weights after the 5 steps, the model rank 0 wrote from every rank's slices
        # against the one-rank run's, under SGD with momentum: the weights follow the
        # gradients linearly there, where Adam's step, divided by the gradient's own size,
        # blows what rounding leaves of a gradient that is zero in exact arithmetic
        # (attention's key bias: softmax is shift-invariant) up to a step of lr on any run
        tp_run "$m.sgd" "$f" $n "$sp" "${sgd[@]}"
        expect 0 "every tensor within" -- "$tool" compare "$tmp/$m.sgd.$n.onnx" "$tmp/$m.sgd.1.onnx" --tolerance 1e-5
        echo "$m --tp $n under mpirun: losses within $wa (adamw), $w (momentum) of one rank's; weights: ${expect_out#compared }"
    done
    # BERT's word embeddings split by vocabulary rows with its padding token (0) and the
    # first row of rank 1's slice (32) in the batch (tests/data/torch2/bert/padded): the
    # padding row, which gets no gradient as in torch, is rank 0's alone, so the weights
    # after 5 steps are one rank's
    bp=$kit/bert/padded
    "$tool" plan "$kit/bert/eval_opt0.onnx" "${sgd[@]}" --tp 1 -o "$tmp/bp.1.vplan" >/dev/null
    "$tool" plan "$kit/bert/eval_opt0.onnx" "${sgd[@]}" --tp 2 -o "$tmp/bp.2.vplan" >/dev/null
    expect 0 "step 5" -- "$tool" run "$tmp/bp.1.vplan" --steps 5 --data "$bp" --save "$tmp/bp.1.onnx"
    expect 0 "step 5" -- "${mpi[@]}" -np 2 "$tool" run "$tmp/bp.2.vplan" --steps 5 --data "$bp" --save "$tmp/bp.2.onnx"
    expect 0 "every tensor within" -- "$tool" compare "$tmp/bp.2.onnx" "$tmp/bp.1.onnx" --tolerance 1e-5
fi
expect_summary
