#!/usr/bin/env bash
# dp correct under casts, fused updates and offload (issue 39): on every export of the
# torch 2.x kit (tests/data/torch2/*/eval_opt0.onnx), with updates fused, separate and
# offloaded to the host, a bf16 step fits wherever the fp32 one does: dp's smallest fp32
# peak (`plan --budget 1 --remat dp`: nothing fits, so dp answers with the smallest arena
# it finds) taken as the budget, dp's bf16 plan fits it.  bf16 halves every activation
# and adds weight copies and casts that dp may drop and redo in the backward like any
# activation; a bf16 plan over that budget means dp kept what it need not.  No slack: on
# these two-layer models of width 32 the smallest peak is the parameters, their state
# and one GEMM's workspace, the same bytes in either precision.  Until stop 47 one
# weight's half-width copy and an alignment unit were allowed (ViT's bf16 plan took
# 2.75 KiB more, DeBERTa-v2's with separate updates 768 B: its K copied for the fused
# core); the backward's order, cast fusion's peak check and K read in place closed both.
# Exit 1 naming the model and the configuration.
# usage: remat_dp_bf16.sh ONNX_VPLAN SOURCE_DIR
set -u
tool=$1
src=$2
pass=0
fail=0
smallest() { # model, precision, budget, extra options: the arena in bytes, or empty
    "$tool" plan "$1" --loss ce:logits --optimizer adamw --device h100 --budget "$3" --remat dp --precision "$2" "${@:4}" \
        2>&1 | sed -n 's/^arena: .*(\([0-9]*\) bytes)$/\1/p'
}
for f in "$src"/tests/data/torch2/*/eval_opt0.onnx; do
    name=$(basename "$(dirname "$f")")
    for cfg in --fused-update --no-fused-update --offload; do
        fp32=$(smallest "$f" fp32 1 "$cfg")
        bf16=$(smallest "$f" bf16 "${fp32:-0}" "$cfg")
        if [[ -z $fp32 || -z $bf16 ]]; then
            fail=$((fail + 1))
            echo "FAIL: $name $cfg: not planned (fp32 '$fp32', bf16 '$bf16')"
        elif ((bf16 > fp32)); then
            fail=$((fail + 1))
            echo "FAIL: $name $cfg: under fp32's smallest peak $fp32 B dp's bf16 plan takes $bf16 B"
        else
            pass=$((pass + 1))
            echo "ok: $name $cfg: bf16 $bf16 B under fp32's smallest peak $fp32 B"
        fi
    done
done
((pass + fail >= 30)) || { echo "FAIL: only $((pass + fail)) checks: is the kit (tests/data/torch2) there?"; exit 1; }
echo "$pass passed, $fail failed"
((fail == 0))
