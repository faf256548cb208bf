#!/usr/bin/env bash
# Cast fusion never raises a bf16 step's peak (precision/cast_fuse.h, train/training.c's
# cast-fusion pass): on every export of the torch 2.x kit (tests/data/torch2/*/
# eval_opt0.onnx) and models/gpt, planned for the CPU and for h100 (products with cuBLAS
# workspaces), updates fused and separate, the bf16 plan's peak (`plan`'s lower bound:
# the most bytes live at one step) with the Casts fused is at most without
# (--no-cast-fusion).  Fusing a widening Cast starts its float32 buffer at the producer,
# and the backward is then ordered otherwise: GPT-2's with separate updates held 33 KiB
# more before the pass tried its fusions on a copy first.
# Exit 1 naming the model and the configuration.
# usage: cast_fusion_peak.sh ONNX_VPLAN SOURCE_DIR
set -u
tool=$1
src=$2
pass=0
fail=0
peak() { # model, options: the plan's lower bound in bytes, or empty
    "$tool" plan "$1" --loss ce:logits --optimizer adamw --precision bf16 "${@:2}" 2>&1 |
        sed -n 's/^lower bound: .*(\([0-9]*\) bytes).*/\1/p'
}
for f in "$src"/tests/data/torch2/*/eval_opt0.onnx "$src"/models/gpt/model.onnx; do
    name=$(basename "$(dirname "$f")")
    extra=()
    [[ $name == gpt ]] && extra=(--dim batch=8 --freeze '^causal_mask$')
    for dev in cpu h100; do
        for cfg in --fused-update --no-fused-update; do
            fused=$(peak "$f" --device "$dev" "$cfg" "${extra[@]}")
            plain=$(peak "$f" --device "$dev" "$cfg" "${extra[@]}" --no-cast-fusion)
            if [[ -z $fused || -z $plain ]]; then
                fail=$((fail + 1))
                echo "FAIL: $name $dev $cfg: not planned (fused '$fused', unfused '$plain')"
            elif ((fused > plain)); then
                fail=$((fail + 1))
                echo "FAIL: $name $dev $cfg: bf16 peak $fused B with Casts fused, $plain B without"
            else
                pass=$((pass + 1))
                echo "ok: $name $dev $cfg: bf16 peak $fused B with Casts fused, $plain B without"
            fi
        done
    done
done
((pass + fail >= 40)) || { echo "FAIL: only $((pass + fail)) checks: is the kit (tests/data/torch2) there?"; exit 1; }
echo "$pass passed, $fail failed"
((fail == 0))
