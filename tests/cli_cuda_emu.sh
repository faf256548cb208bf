#!/usr/bin/env bash
# `run --backend cuda` on the CUDA backend's host emulation (runtime/cuda/emu): the
# plans of the bundled models run, their losses agree with `run --backend cpu` on the
# same plan (1e-5 relative in fp32), and the arena cudaMemGetInfo measures is the
# planned one (on the h200 profile with the cuBLAS and cuDNN workspaces in it).  Mixed-precision plans (bf16, fp16 with loss scaling) run the float16 and
# bfloat16 kernels; their losses are held to TOL=2e-3 relative: the first Adam step is
# close to a sign step, so a gradient that rounds to the neighbouring bf16 value where it
# is near zero moves its weight by up to lr, which the second loss sees (cnn bf16 measured
# 5e-4 at step 2; gpt bf16 equal to the printed digits).  An offloaded plan (--offload)
# runs with its host block in page-locked memory and the device arena still as planned.
# usage: cli_cuda_emu.sh ONNX-VPLAN-CUDA-EMU SOURCE_DIR
set -u
tool=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

# the values of a flat JSON array or number field, one per line
field() { tr -d ' \n' < "$1" | sed -n "s/.*\"$2\":\(\[[^]]*\]\|[-0-9.e]*\).*/\1/p" | tr -d '[]' | tr ',' '\n'; }

check() { # name, model (models/NAME, or a path under the source tree), plan options...; TOL in the environment (default 1e-5)
    local name=$1 model=$2
    shift 2
    local file="$src/models/$model/model.onnx"
    [[ $model == */* ]] && file="$src/$model"
    if ! "$tool" plan "$file" "$@" -o "$tmp/$name.vplan" > "$tmp/plan.log" 2>&1; then
        echo "FAIL $name: plan"; cat "$tmp/plan.log"; fail=1; return
    fi
    for b in cpu cuda; do
        # shellcheck disable=SC2086 # RUN_ARGS: more run options (--data DIR), split
        if ! "$tool" run "$tmp/$name.vplan" --backend $b --steps 2 --json "$tmp/$name.$b.json" ${RUN_ARGS:-} > "$tmp/$b.log" 2>&1; then
            echo "FAIL $name: run --backend $b"; cat "$tmp/$b.log"; fail=1; return
        fi
    done
    local bad
    bad=$(paste <(field "$tmp/$name.cpu.json" losses) <(field "$tmp/$name.cuda.json" losses) |
          awk -v tol="${TOL:-1e-5}" '{ d = $1 - $2; if (d < 0) d = -d; s = $1 < 0 ? -$1 : $1; if (s < 1) s = 1; if (NF != 2 || d > tol * s) print }')
    local planned measured
    planned=$(field "$tmp/$name.cuda.json" arena_bytes)
    measured=$(field "$tmp/$name.cuda.json" arena_measured_bytes)
    if [ -n "$bad" ] || [ -z "$(field "$tmp/$name.cuda.json" losses)" ]; then
        echo "FAIL $name: losses differ (cpu, cuda): $bad"; fail=1
    elif [ "$planned" != "$measured" ]; then
        echo "FAIL $name: planned arena $planned B, measured $measured B"; fail=1
    else
        echo "ok   $name: losses $(field "$tmp/$name.cuda.json" losses | paste -sd' ') as on the cpu ($(field "$tmp/$name.cpu.json" losses | paste -sd' ')); arena $measured B as planned"
    fi
}

check mlp_momentum mlp --dim batch=4 --loss ce:logits --optimizer momentum
# VP_CUDA_QUICK (the sanitizer build): test_cuda_ops runs the CNN's kernels already
# on the h200 profile: every Conv, ConvGrad and product step gets its planned workspace
[ "${VP_CUDA_QUICK:-0}" = 0 ] && check cnn_adamw_h200 cnn --dim batch=4 --loss ce:logits --optimizer adamw --device h200
check gpt_adamw gpt --dim batch=8 --loss ce:logits --optimizer adamw --freeze '^causal_mask$'
check mlp_adamw_offload mlp --dim batch=4 --loss ce:logits --optimizer adamw --offload
TOL=2e-3 check gpt_adamw_bf16_h200 gpt --dim batch=8 --loss ce:logits --optimizer adamw --freeze '^causal_mask$' --precision bf16 --device h200
TOL=2e-3 check gpt_adamw_fp16 gpt --dim batch=8 --loss ce:logits --optimizer adamw --freeze '^causal_mask$' --precision fp16
TOL=2e-3 check mlp_momentum_fp16 mlp --dim batch=4 --loss ce:logits --optimizer momentum --precision fp16
[ "${VP_CUDA_QUICK:-0}" = 0 ] && TOL=2e-3 check cnn_adamw_bf16 cnn --dim batch=4 --loss ce:logits --optimizer adamw --precision bf16
# torch 2.x's exports of the fixture kit (tests/data/torch2), each architecture's whole
# step: the rotary slices' Pad gradients (Llama, Qwen2, Gemma), RoBERTa's CumSum
# positions, wav2vec2's InstanceNormalization and padded convolutions, DeBERTa-v2's Tile
# and row gathers, in float32; in bf16, DeBERTa-v2's 16-bit GatherGrad and MobileNetV2's
# Clip with bf16 bounds
# (VP_CUDA_QUICK, the sanitizer build: the four whose steps need those kernels)
kit=$(cd "$src/tests/data/torch2" && ls -d */ | tr -d /)
[ "${VP_CUDA_QUICK:-0}" = 0 ] || kit="llama roberta wav2vec2 deberta_v2"
for m in $kit; do
    check "kit_$m" "tests/data/torch2/$m/eval_opt0.onnx" --loss ce:logits --optimizer adamw --device h200
done
# a padding mask keeping no key of two query rows (tests/data/torch2_masks/llama_left):
# filled with torch.finfo.min everywhere at opset 18, zeroed at opset 23
for f in eval_opt0 op23_eval_opt0; do
    RUN_ARGS="--data $src/tests/data/torch2_masks/llama_left" check "left_pad_$f" \
        "tests/data/torch2_masks/llama_left/$f.onnx" --loss ce:logits --optimizer adamw --device h200
done
for m in deberta_v2 mobilenet_v2; do
    TOL=2e-3 check "kit_${m}_bf16" "tests/data/torch2/$m/eval_opt0.onnx" --loss ce:logits --optimizer adamw \
        --device h200 --precision bf16
done
exit $fail
