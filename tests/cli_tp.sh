#!/usr/bin/env bash
# Tensor parallelism from a user's seat: plan --tp N writes one plan per rank and reports
# the bytes each rank sends; mpirun -np N onnx-vplan run PLAN runs them, counting the
# bytes it sends (equal to the plan's figure) and giving the losses of the one-rank
# plan; the refusals exit 2 naming the node or the launch.
# Usage: cli_tp.sh TOOL SOURCE_DIR MPIRUN (MPIRUN empty: the mpirun checks are left out)
set -u
tool=$1
src=$2
mpirun=${3:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/expect.sh"

gpt=$src/models/gpt/model.onnx
qkv=$src/tests/data/tp/gpt_qkv/model.onnx
gopt=(--dim batch=4 --loss ce:logits --freeze '^causal_mask$' --optimizer adamw)
qopt=(--dim batch=2 --loss ce:logits --freeze '^mask$' --optimizer momentum --lr 0.05)

# Megatron's count, 2 layers, s b h = 16 * 4 * 32: ((4 L + 2) sbh + 3 sb) 4 bytes 2(n-1)/n = 82688
expect 0 "each rank sends 80.75 KiB a step" -- "$tool" plan "$gpt" "${gopt[@]}" --tp 2 -o "$tmp/gpt.vplan"
expect 0 "^  communication " -- "$tool" plan "$gpt" "${gopt[@]}" --tp 2
expect 0 "5 column- and 4 row-parallel products" -- "$tool" plan "$gpt" "${gopt[@]}" --tp 2
expect 0 "vocabulary-parallel (64 tokens, 32 a rank): 1 embedding split by rows, the LM head by columns" -- \
    "$tool" plan "$gpt" "${gopt[@]}" --tp 2
# --json under --tp: one report a rank, with what was split and what it sends
expect 0 "" -- "$tool" plan "$gpt" "${gopt[@]}" --tp 2 --json "$tmp/gpt.json"
for r in 0 1; do
    expect 0 '"rank": '$r -- cat "$tmp/gpt.json.$r"
    expect 0 '"vocab_parallel_loss": true' -- cat "$tmp/gpt.json.$r"
    expect 0 '"bytes_sent_per_step": 82688' -- cat "$tmp/gpt.json.$r"
done
expect 0 "rank 1: arena" -- "$tool" plan "$gpt" "${gopt[@]}" --tp 2
expect 0 "tp_bytes_sent" -- "$tool" show "$tmp/gpt.vplan.1"
expect 0 ": sound: [0-9][0-9]* steps" -- "$tool" verify "$tmp/gpt.vplan.1"
expect 2 "node '/blocks.0/attn/Reshape' (Reshape): --tp 4 does not divide the heads (2)" -- "$tool" plan "$gpt" "${gopt[@]}" --tp 4
expect 2 "does not divide the output features of its weight (32)" -- "$tool" plan "$qkv" "${qopt[@]}" --tp 3
expect 2 "rank 0 of a 2-rank tensor-parallel plan, but this is rank 0 of 1" -- "$tool" run "$tmp/gpt.vplan.0"
# the name given to plan -o, which names no file under --tp: the per-rank files and mpirun
expect 2 "gpt.vplan.0 is there: a tensor-parallel plan is written as one file per rank" -- "$tool" run "$tmp/gpt.vplan"
expect 2 "run it as mpirun -np 2" -- "$tool" train "$gpt" "${gopt[@]}" --tp 2
expect 2 "--sp needs --tp 2 or more" -- "$tool" plan "$gpt" "${gopt[@]}" --sp
# --sp: the same all-reduces as reduce-scatters and all-gathers, plus the gradients of the
# 14 LayerNorm and bias parameters read whole (14 * 32 floats), plus the 5 regions' inputs
# all-gathered again in the backward (5 * 4*16*32 floats, half sent): 82688 + 1792 + 20480
expect 0 "sequence-parallel: between the regions each rank holds 1/2 of the sequence; 5 all-gathers and 5" -- \
    "$tool" plan "$gpt" "${gopt[@]}" --tp 2 --sp
expect 0 "rank 1: arena .*, sends 104960 bytes a step" -- "$tool" plan "$gpt" "${gopt[@]}" --tp 2 --sp
expect 0 "^  5 all-gathers run again in the backward" -- "$tool" plan "$gpt" "${gopt[@]}" --tp 2 --sp

# losses "step K  loss X" of a run, one per line
losses() { sed -nE 's/^step [0-9]+  loss ([0-9.e+-]+).*/\1/p'; }
# the largest relative difference between two columns of numbers
worst() { paste "$1" "$2" | awk '{d = $1 - $2; if (d < 0) d = -d; r = d / ($2 < 0 ? -$2 : $2); if (r > w) w = r} END {printf "%.3g\n", w + 0}'; }

if [[ -n $mpirun ]]; then
    mpi=("$mpirun" --allow-run-as-root --oversubscribe)
    # the sanitizer build: the ranks' options (full stacks for tests/lsan_mpi.supp)
    [[ -n ${VP_MPI_ASAN_OPTIONS:-} ]] && mpi=(env "ASAN_OPTIONS=$VP_MPI_ASAN_OPTIONS" "${mpi[@]}")
    for n in 1 2 4; do
        "$tool" plan "$qkv" "${qopt[@]}" --tp $n -o "$tmp/qkv$n.vplan" >/dev/null || echo "FAIL: plan --tp $n"
    done
    "$tool" run "$tmp/qkv1.vplan" --steps 5 | losses >"$tmp/l1"
    for n in 2 4; do
        "$tool" plan "$qkv" "${qopt[@]}" --tp $n --sp -o "$tmp/sp$n.vplan" >/dev/null || echo "FAIL: plan --tp $n --sp"
    done
    for plan in qkv2 qkv4 sp2 sp4; do
        n=${plan: -1}
        out=$("${mpi[@]}" -np $n "$tool" run "$tmp/$plan.vplan" --steps 5 2>&1)
        # every rank's line: counted = planned
        # 13 all-reduces; under --sp 15 all-gathers (5 again in the backward), 10 reduce-scatters,
        # 16 all-reduces, 1 of the maximum
        [[ $plan == sp* ]] && calls=42 || calls=13
        sed -nE 's/^rank [0-9]+ of [0-9]+: sent ([0-9]+) bytes a step in '$calls' collectives .*; planned ([0-9]+)$/\1 \2/p' \
            <<<"$out" >"$tmp/bytes$plan"
        expect 0 "" -- awk -v n=$n '$1 != $2 || $1 == 0 {bad = 1} END {exit bad || NR != n}' "$tmp/bytes$plan"
        # rank 0's losses against the one-rank plan's
        losses <<<"$out" >"$tmp/l$plan"
        w=$(worst "$tmp/l$plan" "$tmp/l1")
        expect 0 "" -- awk -v w="$w" 'BEGIN {exit !(w < 1e-5)}'
        echo "mpirun -np $n run $plan: bytes counted = planned on every rank; losses within $w of one rank's"
    done
    out=$("${mpi[@]}" -np 2 "$tool" train "$gpt" "${gopt[@]}" --tp 2 --steps 5 2>&1)
    expect 0 "rank 0 sent 82688 bytes a step in 13 collectives" -- echo "$out"
    "$tool" train "$gpt" "${gopt[@]}" --steps 5 | losses >"$tmp/g1"
    losses <<<"$out" >"$tmp/g2"
    w=$(worst "$tmp/g2" "$tmp/g1")
    expect 0 "" -- awk -v w="$w" 'BEGIN {exit !(w < 1e-5)}'
    echo "mpirun -np 2 train models/gpt (adamw): losses within $w of one rank's"
    "${mpi[@]}" -np 2 "$tool" train "$gpt" "${gopt[@]}" --tp 2 --sp --steps 5 2>&1 | losses >"$tmp/g2sp"
    w=$(worst "$tmp/g2sp" "$tmp/g1")
    expect 0 "" -- awk -v w="$w" 'BEGIN {exit !(w < 1e-5)}'
    echo "mpirun -np 2 train models/gpt --tp 2 --sp (adamw): losses within $w of one rank's"
    # --save under --tp: the split weights gathered back whole; the saved models' losses agree
    "${mpi[@]}" -np 2 "$tool" train "$qkv" "${qopt[@]}" --tp 2 --steps 3 --save "$tmp/tp2.onnx" >/dev/null
    "$tool" train "$qkv" "${qopt[@]}" --steps 3 --save "$tmp/tp1.onnx" >/dev/null
    "$tool" train "$tmp/tp2.onnx" "${qopt[@]}" --steps 1 --data "$src/tests/data/tp/gpt_qkv/fixtures" 2>/dev/null | losses >"$tmp/s2" ||
        echo "FAIL: the model saved under --tp 2 does not train"
    "$tool" train "$tmp/tp1.onnx" "${qopt[@]}" --steps 1 --data "$src/tests/data/tp/gpt_qkv/fixtures" | losses >"$tmp/s1"
    w=$(worst "$tmp/s2" "$tmp/s1")
    expect 0 "" -- awk -v w="$w" 'BEGIN {exit !(w < 1e-5)}'
    expect 0 "params: " -- "$tool" inspect "$tmp/tp2.onnx" --dim batch=2
    echo "mpirun -np 2 train --save: the gathered model's loss within $w of the one-rank model's"
    # --lora --tp: each adapter pair split along its rank as a column/row pair of its own (the
    # base weights frozen and whole); losses as one rank's, the adapters gathered by --save
    # and the merged model give the one-rank run's next loss
    lopt=(--dim batch=8 --loss ce:logits --optimizer adamw --freeze '^causal_mask$' --lora r=4 --steps 3)
    expect 0 "tensor parallel over 2 ranks: 9 column- and 9 row-parallel products" -- "$tool" plan "$gpt" "${lopt[@]:0:10}" --tp 2
    "${mpi[@]}" -np 2 "$tool" train "$gpt" "${lopt[@]}" --tp 2 --save "$tmp/lora2.onnx" --merge "$tmp/merged2.onnx" | losses >"$tmp/lo2"
    "$tool" train "$gpt" "${lopt[@]}" --save "$tmp/lora1.onnx" | losses >"$tmp/lo1"
    w=$(worst "$tmp/lo2" "$tmp/lo1")
    expect 0 "" -- awk -v w="$w" 'BEGIN {exit !(w < 1e-5)}'
    "$tool" train "$gpt" "${lopt[@]:0:10}" --lora-load "$tmp/lora2.onnx" --steps 1 | losses >"$tmp/ll2"
    "$tool" train "$gpt" "${lopt[@]:0:10}" --lora-load "$tmp/lora1.onnx" --steps 1 | losses >"$tmp/ll1"
    "$tool" train "$tmp/merged2.onnx" "${lopt[@]:0:8}" --steps 1 | losses >"$tmp/lm2"
    w=$(worst "$tmp/ll2" "$tmp/ll1")
    wm=$(worst "$tmp/lm2" "$tmp/ll1")
    expect 0 "" -- awk -v w="$w" -v m="$wm" 'BEGIN {exit !(w < 1e-5 && m < 1e-5)}'
    echo "mpirun -np 2 train --lora --tp 2: losses, gathered adapters ($w) and merged model ($wm) as one rank's"
    # bf16: the all-reduce sums in float32 and rounds once, the one-rank product rounds
    # its own sum: within bf16's rounding of each other
    "$tool" plan "$gpt" "${gopt[@]}" --precision bf16 -o "$tmp/b1.vplan" >/dev/null
    "$tool" plan "$gpt" "${gopt[@]}" --precision bf16 --tp 2 -o "$tmp/b2.vplan" >/dev/null
    "$tool" run "$tmp/b1.vplan" --steps 3 | losses >"$tmp/b1"
    "${mpi[@]}" -np 2 "$tool" run "$tmp/b2.vplan" --steps 3 | losses >"$tmp/b2"
    w=$(worst "$tmp/b2" "$tmp/b1")
    expect 0 "" -- awk -v w="$w" 'BEGIN {exit !(w < 2e-3)}'
    echo "mpirun -np 2 run models/gpt bf16: losses within $w of one rank's"
fi
expect_summary
