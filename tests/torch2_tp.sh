#!/usr/bin/env bash
# Tensor parallelism on today's exports (issue 41): the torch 2.x kit's Llama (GQA 4/2,
# rotary embeddings, SwiGLU, RMSNorm), GPT-2 (a fused QKV product split by torch.split),
# BERT and ViT (separate q, k, v with biases) at --tp 2: every attention projection and
# every MLP product of each layer split (column / row counts = layers x products per
# layer, plus the LM head's or the pooler's), the bytes each rank sends as planned, and
# rank 0's losses under mpirun -np 2 the one-rank plan's within 1e-5 over 5 steps (the
# Llama also with --sp), and a Llama of 4 key/value heads under mpirun -np 4.
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

# what stays whole is named with the node its split stops at: Qwen2's single key/value
# head does not divide among 2 ranks, so its attention stays replicated
expect 0 "left replicated (every rank computes it whole): 8 products" -- "$tool" plan "$kit/qwen2/eval_opt0.onnx" "${args[@]}" --tp 2
expect 0 "the product by 'm.model.layers.0.self_attn.q_proj.weight': its columns' split stops at '.*' (Attention)" -- \
    "$tool" plan "$kit/qwen2/eval_opt0.onnx" "${args[@]}" --tp 2

losses() { sed -nE 's/^step [0-9]+  loss ([0-9.e+-]+).*/\1/p'; }
worst() { paste "$1" "$2" | awk '{d = $1 - $2; if (d < 0) d = -d; r = d / ($2 < 0 ? -$2 : $2); if (r > w) w = r} END {printf "%.3g\n", w + 0}'; }
if [[ -n $mpirun ]]; then
    mpi=("$mpirun" --allow-run-as-root --oversubscribe)
    [[ -n ${VP_MPI_ASAN_OPTIONS:-} ]] && mpi=(env "ASAN_OPTIONS=$VP_MPI_ASAN_OPTIONS" "${mpi[@]}")
    # llama_sp: the same Llama sequence-parallel between the regions (RMSNorm's Pow and
    # ReduceMean over the hidden size are token-wise)
    # llama_mha4: a Llama of 4 heads and 4 key/value heads over 4 ranks
    for m in llama gpt2 bert vit llama_sp llama_mha4; do
        f=$kit/${m%_sp}/eval_opt0.onnx sp=() n=2
        [[ $m == *_sp ]] && sp=(--sp)
        [[ $m == llama_mha4 ]] && f=$kit/llama_mha/eval_opt0.onnx n=4
        "$tool" plan "$f" "${args[@]}" --tp 1 -o "$tmp/$m.1.vplan" >/dev/null || echo "FAIL: $m plan --tp 1"
        "$tool" plan "$f" "${args[@]}" --tp $n "${sp[@]}" -o "$tmp/$m.2.vplan" >/dev/null || echo "FAIL: $m plan --tp $n ${sp[*]}"
        "$tool" run "$tmp/$m.1.vplan" --steps 5 | losses >"$tmp/$m.l1"
        out=$("${mpi[@]}" -np $n "$tool" run "$tmp/$m.2.vplan" --steps 5 2>&1)
        # every rank: the bytes counted = the bytes planned
        sed -nE 's/^rank [0-9]+ of '$n': sent ([0-9]+) bytes a step in [0-9]+ collectives .*; planned ([0-9]+)$/\1 \2/p' \
            <<<"$out" >"$tmp/$m.bytes"
        expect 0 "" -- awk -v n=$n '$1 != $2 || $1 == 0 {bad = 1} END {exit bad || NR != n}' "$tmp/$m.bytes"
        losses <<<"$out" >"$tmp/$m.l2"
        if [[ $(wc -l <"$tmp/$m.l2") -eq 5 ]] && awk -v w="$(worst "$tmp/$m.l2" "$tmp/$m.l1")" 'BEGIN {exit !(w < 1e-5)}'; then
            pass=$((pass + 1))
        else
            fail=$((fail + 1))
            echo "FAIL: $m --tp $n under mpirun: losses $(tr '\n' ' ' <"$tmp/$m.l2"), one rank's $(tr '\n' ' ' <"$tmp/$m.l1")"
        fi
    done
fi
expect_summary
