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
# usage: cli_codegen.sh GROUP ONNX-VPLAN SOURCE_DIR LIBVPLANRT.a 'LIBS libvplanrt needs' [EXTRA_CFLAGS
#                       [ONNX-VPLAN-CUDA-EMU LIBVPLAN_CUDA_EMU.a]]
# GROUP, so that ctest runs the groups side by side (each compiles its steps at -O2):
#   models    mlp, mlp_momentum, cnn, gpt, gpt_ln_decomposed; the bad plans
#   variants  gpt_remat, cnn_bf16 and the test models (lstm, gru, unet, scatter, attention,
#             the torch 2.x kit's T5)
#   cuda      --target cuda
set -u
group=$1
tool=$2
src=$3
lib=$4
blas=$5 # the libraries libvplanrt needs, words: OpenBLAS, oneDNN, -fopenmp
extra=${6:-}
emu_tool=${7:-}
emu_lib=${8:-}
case $group in
models | variants) ;;
cuda) [[ -n $emu_tool && -n $emu_lib ]] || { echo "cli_codegen.sh cuda: needs ONNX-VPLAN-CUDA-EMU and LIBVPLAN_CUDA_EMU.a"; exit 2; } ;;
*) echo "cli_codegen.sh: GROUP is models, variants or cuda, not '$group'"; exit 2 ;;
esac
# VP_CODEGEN_QUICK=1 (the sanitizer build, which runs the groups models and cuda only):
# weights compiled in and --reference for the MLP only, the CUDA target on the MLP only
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
    # variants: "" (weights file), --embed-weights, --reference (against run --reference)
    local variants=(--embed-weights "" --reference)
    [[ $quick == 1 && $name != mlp ]] && variants=("")
    local file=$src/$model/model.onnx
    [[ $model == *.onnx ]] && file=$src/$model
    if ! "$tool" plan "$file" "$@" -o "$d/$name.vplan" > "$d/plan.log" 2>&1 ||
        ! "$tool" run "$d/$name.vplan" --steps $steps --save-inputs "$d/data" --save-weights "$d/run.weights" \
            --json "$d/run.json" > "$d/run.log" 2>&1 ||
        { [[ ${#variants[@]} == 3 ]] &&
            ! "$tool" run "$d/$name.vplan" --reference --steps $steps --save-weights "$d/run_ref.weights" \
                --json "$d/run_ref.json" >> "$d/run.log" 2>&1; }; then
        fail=$((fail + 1)); echo "FAIL $name: plan or run"; cat "$d/plan.log" "$d/run.log"; return
    fi
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

if [[ $group == models ]]; then
    check mlp models/mlp --dim batch=4 --loss ce:logits --optimizer adamw
    check mlp_momentum models/mlp --dim batch=4 --loss ce:logits --optimizer momentum --no-fused-update
    check cnn models/cnn --dim batch=4 --loss ce:logits --optimizer adamw
    check gpt models/gpt --dim batch=4 --loss ce:logits --optimizer adamw --freeze '^causal_mask$'
    check gpt_ln_decomposed models/gpt_ln_decomposed --dim batch=4 --loss ce:logits --optimizer sgd --freeze '^causal_mask$'
fi
if [[ $group == variants ]]; then
    # checkpointed (recompute steps) and bf16 (casts, master weights)
    check gpt_remat models/gpt --dim batch=4 --loss ce:logits --optimizer adamw --freeze '^causal_mask$' --remat sqrtn
    check cnn_bf16 models/cnn --dim batch=4 --loss ce:logits --optimizer adamw --precision bf16
    # the kernels of the test models: LSTM, GRU, Resize, ScatterND, attention with a boolean mask
    check lstm tests/data/rnn/lstm_op17 --dim batch=2 --loss ce:logits --optimizer adam
    check gru tests/data/rnn/gru_op13 --dim batch=2 --loss ce:logits --optimizer sgd
    check unet tests/data/resample/unet_bilinear_ac_op13 --dim batch=2 --loss ce:logits --optimizer adamw
    check scatter tests/data/resample/scatter_op13 --dim batch=2 --loss ce:logits --optimizer momentum
    check attention tests/data/attention/where_bool_opset13 --dim batch=2 --loss ce:logits --optimizer adamw
    # T5 (torch 2.x): its attention fused with the trained position bias as the mask
    check t5 tests/data/torch2/t5/eval_opt0.onnx --loss ce:logits --optimizer adamw
    # Dropout (torch 1.13, train mode): the step count carried, the attention's dropout
    # fused, recomputed under sqrtn
    check gpt_drop tests/data/tp/gpt_drop --dim batch=2 --loss ce:logits --optimizer adamw --remat sqrtn
fi

# --target cuda on the emulated device, against run --backend cuda
check_cuda() { # name model-dir plan-options...
    local p=$1 name=${1}_cuda model=$2
    shift 2
    local d=$tmp/$name
    mkdir -p "$d/data"
    local file=$src/$model/model.onnx
    [[ $model == *.onnx ]] && file=$src/$model
    if ! "$tool" plan "$file" "$@" -o "$d/$p.vplan" > "$d/plan.log" 2>&1 ||
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
if [[ $group == cuda ]]; then
    # the h200 profile: the generated step hands each product its planned workspace
    check_cuda mlp models/mlp --dim batch=4 --loss ce:logits --optimizer momentum --device h200
    [[ $quick == 1 ]] || check_cuda cnn models/cnn --dim batch=4 --loss ce:logits --optimizer adamw
    [[ $quick == 1 ]] || check_cuda gpt models/gpt --dim batch=4 --loss ce:logits --optimizer adamw --freeze '^causal_mask$'
    # T5: the mask's gradient (its trained position bias) on the emulated device
    [[ $quick == 1 ]] || check_cuda t5 tests/data/torch2/t5/eval_opt0.onnx --loss ce:logits --optimizer adamw
    # Dropout: the masks drawn on the device from the step count there, the attention's fused
    [[ $quick == 1 ]] || check_cuda gpt_drop tests/data/tp/gpt_drop --dim batch=2 --loss ce:logits --optimizer adamw
fi
[[ $group == models ]] || { expect_summary; exit; }

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
