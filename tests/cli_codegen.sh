#!/usr/bin/env bash
# `codegen`: for every bundled model (a checkpointed and a bf16 plan too, and the LSTM,
# GRU, Resize, ScatterND and attention models of tests/data), the generated
# step compiles with the system cc at -Wall -Wextra -Werror -std=c17 against the built
# libvplanrt, and trains bit-identically to `run` on the same plan and the same batch
# (the generated step calls what run's CPU backend calls: oneDNN's convolutions and
# sgemm): the same losses (%.17g) and the same weights file after the steps (cmp).  The
# weights compiled in (--embed-weights) give the same, and codegen --reference (the
# reference kernels and OpenBLAS) gives what `run --reference` gives.  The step and init refuse an arena one
# byte short without writing to it (tests/codegen_harness.c); a corrupt or truncated
# plan exits 2 naming it.  Given the CUDA backend's host emulation (runtime/cuda/emu),
# --target cuda too: the step (compiled by cc, and by nvcc where it is) on the emulated
# device gives the losses and weights of `run --backend cuda` on the same plan, bit for bit.
# usage: cli_codegen.sh ONNX-VPLAN SOURCE_DIR LIBVPLANRT.a 'LIBS libvplanrt needs' [EXTRA_CFLAGS
#                       [ONNX-VPLAN-CUDA-EMU LIBVPLAN_CUDA_EMU.a]]
set -u
tool=$1
src=$2
lib=$3
blas=$4 # the libraries libvplanrt needs, words: OpenBLAS, oneDNN, -fopenmp
extra=${5:-}
emu_tool=${6:-}
emu_lib=${7:-}
# VP_CODEGEN_QUICK=1 (the sanitizer build): the bundled models, weights compiled in for
# the MLP only, the CUDA target on the MLP only
quick=${VP_CODEGEN_QUICK:-0}
cc=${CC:-cc}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/expect.sh"
steps=3

# the values of a flat JSON array field, one per line
field() { tr -d ' \n' < "$1" | sed -n "s/.*\"$2\":\(\[[^]]*\]\).*/\1/p" | tr -d '[]' | tr ',' '\n'; }

build() { # dir prefix -> dir/harness
    local d=$1 p=$2
    # shellcheck disable=SC2086
    $cc -std=c17 -O2 -fno-math-errno -Wall -Wextra -Werror $extra -I"$src/runtime" -I"$src/planner" -DPREFIX="$p" \
        -DUPREFIX="${p^^}" -include "$d/${p}_step.h" "$src/tests/codegen_harness.c" "$d/${p}_step.c" \
        "$lib" $blas -lm -o "$d/harness" 2> "$d/cc.log"
}

check() { # name model-dir (under the source tree) plan-options...
    local name=$1 model=$2
    shift 2
    local d=$tmp/$name
    mkdir -p "$d/data"
    if ! "$tool" plan "$src/$model/model.onnx" "$@" -o "$d/$name.vplan" > "$d/plan.log" 2>&1 ||
        ! "$tool" run "$d/$name.vplan" --steps $steps --save-inputs "$d/data" --save-weights "$d/run.weights" \
            --json "$d/run.json" > "$d/run.log" 2>&1 ||
        ! "$tool" run "$d/$name.vplan" --reference --steps $steps --save-weights "$d/run_ref.weights" \
            --json "$d/run_ref.json" >> "$d/run.log" 2>&1; then
        fail=$((fail + 1)); echo "FAIL $name: plan or run"; cat "$d/plan.log" "$d/run.log"; return
    fi
    # variants: "" (weights file), --embed-weights, --reference (against run --reference)
    local variants=(--embed-weights "" --reference)
    [[ $quick == 1 && $name != mlp ]] && variants=("")
    for embed in "${variants[@]}"; do
        local ref=""
        [[ $embed == --reference ]] && ref=_ref
        rm -f "$d/${name}_step.c" "$d/${name}.weights"
        if ! "$tool" codegen "$d/$name.vplan" -o "$d" $embed > "$d/codegen.log" 2>&1; then
            fail=$((fail + 1)); echo "FAIL $name $embed: codegen"; cat "$d/codegen.log"; continue
        fi
        if ! build "$d" "$name"; then
            fail=$((fail + 1)); echo "FAIL $name $embed: the generated step does not compile"; head -30 "$d/cc.log"; continue
        fi
        local w=$d/$name.weights
        [[ $embed == --embed-weights ]] && w=/nonexistent
        if ! "$d/harness" "$w" "$d/data" $steps "$d/step.weights" > "$d/step.log" 2>&1; then
            fail=$((fail + 1)); echo "FAIL $name $embed: the step"; cat "$d/step.log"; continue
        fi
        local want got
        want=$(field "$d/run$ref.json" losses | paste -sd' ')
        got=$(sed -n 's/^loss //p' "$d/step.log" | paste -sd' ')
        local who="run${ref:+ --reference}"
        if [[ -z $want || $want != "$got" ]]; then
            fail=$((fail + 1)); echo "FAIL $name $embed: losses $got, $who gives $want"
        elif ! cmp -s "$d/run$ref.weights" "$d/step.weights"; then
            fail=$((fail + 1)); echo "FAIL $name $embed: weights after $steps steps differ from $who's: $(cmp "$d/run$ref.weights" "$d/step.weights")"
        else
            pass=$((pass + 1))
            echo "ok   $name ${embed:-(weights file)}: losses $got and $(stat -c %s "$d/step.weights")-byte weights as $who's"
        fi
    done
}

check mlp models/mlp --dim batch=4 --loss ce:logits --optimizer adamw
check mlp_momentum models/mlp --dim batch=4 --loss ce:logits --optimizer momentum --no-fused-update
check cnn models/cnn --dim batch=4 --loss ce:logits --optimizer adamw
check gpt models/gpt --dim batch=4 --loss ce:logits --optimizer adamw --freeze '^causal_mask$'
check gpt_ln_decomposed models/gpt_ln_decomposed --dim batch=4 --loss ce:logits --optimizer sgd --freeze '^causal_mask$'
# checkpointed (recompute steps) and bf16 (casts, master weights)
[[ $quick == 1 ]] || check gpt_remat models/gpt --dim batch=4 --loss ce:logits --optimizer adamw --freeze '^causal_mask$' --remat sqrtn
[[ $quick == 1 ]] || check cnn_bf16 models/cnn --dim batch=4 --loss ce:logits --optimizer adamw --precision bf16
# the kernels of the test models: LSTM, GRU, Resize, ScatterND, attention with a boolean mask
[[ $quick == 1 ]] || check lstm tests/data/rnn/lstm_op17 --dim batch=2 --loss ce:logits --optimizer adam
[[ $quick == 1 ]] || check gru tests/data/rnn/gru_op13 --dim batch=2 --loss ce:logits --optimizer sgd
[[ $quick == 1 ]] || check unet tests/data/resample/unet_bilinear_ac_op13 --dim batch=2 --loss ce:logits --optimizer adamw
[[ $quick == 1 ]] || check scatter tests/data/resample/scatter_op13 --dim batch=2 --loss ce:logits --optimizer momentum
[[ $quick == 1 ]] || check attention tests/data/attention/where_bool_opset13 --dim batch=2 --loss ce:logits --optimizer adamw

# --target cuda on the emulated device, against run --backend cuda
check_cuda() { # name model-dir plan-options...
    local p=$1 name=${1}_cuda model=$2
    shift 2
    local d=$tmp/$name
    mkdir -p "$d/data"
    if ! "$tool" plan "$src/$model/model.onnx" "$@" -o "$d/$p.vplan" > "$d/plan.log" 2>&1 ||
        ! "$emu_tool" run "$d/$p.vplan" --backend cuda --steps $steps --save-inputs "$d/data" \
            --save-weights "$d/run.weights" --json "$d/run.json" > "$d/run.log" 2>&1 ||
        ! "$tool" codegen "$d/$p.vplan" -o "$d" --target cuda > "$d/codegen.log" 2>&1; then
        fail=$((fail + 1)); echo "FAIL $name: plan, run or codegen"; cat "$d"/*.log; return
    fi
    # shellcheck disable=SC2086
    if ! $cc -std=c17 -O2 -Wall -Wextra -Werror $extra -I"$src/runtime" -I"$src/planner" -I"$src/runtime/cuda" \
        -DPREFIX="$p" -DUPREFIX="${p^^}" -include "$d/${p}_step.h" "$src/tests/codegen_cuda_harness.c" \
        "$d/${p}_step.c" "$emu_lib" "$lib" $blas -lstdc++ -lm -o "$d/harness" 2> "$d/cc.log"; then
        fail=$((fail + 1)); echo "FAIL $name: the generated step does not compile"; head -30 "$d/cc.log"; return
    fi
    if command -v nvcc > /dev/null &&
        ! nvcc -c -Xcompiler -std=c17,-Wall,-Wextra,-Werror -I"$src/runtime" -I"$src/planner" -I"$src/runtime/cuda" \
            "$d/${p}_step.c" -o "$d/nvcc.o" > "$d/nvcc.log" 2>&1; then
        fail=$((fail + 1)); echo "FAIL $name: nvcc does not compile the generated step"; head -30 "$d/nvcc.log"; return
    fi
    if ! "$d/harness" "$d/$p.weights" "$d/data" $steps "$d/step.weights" > "$d/step.log" 2>&1; then
        fail=$((fail + 1)); echo "FAIL $name: the step"; cat "$d/step.log"; return
    fi
    local want got
    want=$(field "$d/run.json" losses | paste -sd' ')
    got=$(sed -n 's/^loss //p' "$d/step.log" | paste -sd' ')
    if [[ -z $want || $want != "$got" ]]; then
        fail=$((fail + 1)); echo "FAIL $name: losses $got, run --backend cuda gives $want"
    elif ! cmp -s "$d/run.weights" "$d/step.weights"; then
        fail=$((fail + 1)); echo "FAIL $name: weights differ from run --backend cuda's"
    else
        pass=$((pass + 1)); echo "ok   $name: losses $got and weights as run --backend cuda's"
    fi
}
if [[ -n $emu_tool && -n $emu_lib ]]; then
    # the h200 profile: the generated step hands each product its planned workspace
    check_cuda mlp models/mlp --dim batch=4 --loss ce:logits --optimizer momentum --device h200
    [[ $quick == 1 ]] || check_cuda cnn models/cnn --dim batch=4 --loss ce:logits --optimizer adamw
    [[ $quick == 1 ]] || check_cuda gpt models/gpt --dim batch=4 --loss ce:logits --optimizer adamw --freeze '^causal_mask$'
else
    echo "skip --target cuda: no CUDA emulation in this build"
fi

# bad plans: exit 2 naming the file
plan=$tmp/mlp/mlp.vplan
head -c 300 "$plan" > "$tmp/truncated.vplan"
cp "$plan" "$tmp/corrupt.vplan"
printf '\x55\xaa' | dd of="$tmp/corrupt.vplan" bs=1 seek=200 conv=notrunc 2>/dev/null
echo "not a plan" > "$tmp/text.vplan"
expect 2 "truncated.vplan: truncated plan file" -- "$tool" codegen "$tmp/truncated.vplan" -o "$tmp/bad"
expect 2 "corrupt.vplan: plan file checksum mismatch" -- "$tool" codegen "$tmp/corrupt.vplan" -o "$tmp/bad"
expect 2 "text.vplan: not an onnx-vplan plan file" -- "$tool" codegen "$tmp/text.vplan" -o "$tmp/bad"
expect 2 "cannot open\|No such file" -- "$tool" codegen "$tmp/missing.vplan" -o "$tmp/bad"
expect 2 "is not a C identifier" -- "$tool" codegen "$plan" -o "$tmp/bad" --prefix 9lives
expect 2 "-o DIR is required" -- "$tool" codegen "$plan"
# a weights file of another plan is refused by init
expect 1 "written for another plan" -- "$tmp/gpt/harness" "$tmp/mlp/mlp.weights" "$tmp/gpt/data" 1 "$tmp/x.weights"
expect_summary
