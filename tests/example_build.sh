#!/usr/bin/env bash
# models/example, built as a user would against an installed tree (`cmake --install`
# into a temporary prefix): its Makefile (vplan.mk) plans, generates, compiles and links
# the MLP's step, trains it on data/, and writes trained.onnx with `export`; the mean
# loss falls to under half its first epoch's; trained.onnx loads and its weights are the
# trained ones.  The same example through the CMake package (vplan_add_training_step)
# trains to the same weights, byte for byte.
# usage: example_build.sh CMAKE BUILD_DIR SOURCE_DIR [EXTRA_FLAGS]
# (EXTRA_FLAGS: the sanitizers, when the installed library was built with them)
set -u
cmake=$1
build=$2
src=$3
extra=${4:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/expect.sh"

"$cmake" --install "$build" --prefix "$tmp/prefix" > "$tmp/install.log" || { cat "$tmp/install.log"; exit 1; }
tool=$tmp/prefix/bin/onnx-vplan
cp -r "$src/models/example" "$tmp/ex"
rm -f "$tmp/ex"/{mlp.*,mlp_step.*,main.o,train,trained.*}
epochs=30

mk=(make -C "$tmp/ex" VPLAN_PREFIX="$tmp/prefix" MODEL="$src/models/mlp/model.onnx" EPOCHS=$epochs)
[[ -n $extra ]] && mk+=(CFLAGS="-O2 -Wall -Wextra -Werror $extra" LDFLAGS="$extra")
if "${mk[@]}" > "$tmp/make.log" 2>&1; then
    pass=$((pass + 1))
    grep -E "^(training|epoch (1|$epochs) |wrote)" "$tmp/make.log"
else
    fail=$((fail + 1)); echo "FAIL: make"; tail -30 "$tmp/make.log"
fi
first=$(sed -n 's/^epoch 1  mean loss //p' "$tmp/make.log")
last=$(sed -n "s/^epoch $epochs  mean loss //p" "$tmp/make.log")
if [[ -n $first && -n $last ]] && awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a / 2) }'; then
    pass=$((pass + 1)); echo "ok   mean loss $first -> $last"
else
    fail=$((fail + 1)); echo "FAIL: mean loss $first -> $last, want under half"
fi
expect 0 "with 6 initializers" -- grep "wrote .*trained.onnx" "$tmp/make.log"
expect 0 "6,922\|6922" -- "$tool" inspect "$tmp/ex/trained.onnx" --dim batch=16
# the trained weights are in the model: export of the untrained file gives another model
"$tool" export "$tmp/ex/mlp.vplan" --weights "$tmp/ex/mlp.weights" --model "$tmp/ex/mlp.onnx" -o "$tmp/untrained.onnx" > /dev/null
if cmp -s "$tmp/untrained.onnx" "$tmp/ex/trained.onnx"; then
    fail=$((fail + 1)); echo "FAIL: trained.onnx holds the initial weights"
else
    pass=$((pass + 1))
fi
expect 0 "Nothing to be done\|is up to date" -- "${mk[@]}"

# the CMake package
if "$cmake" -S "$tmp/ex" -B "$tmp/cb" -DCMAKE_PREFIX_PATH="$tmp/prefix" -DMODEL="$src/models/mlp/model.onnx" \
    -DCMAKE_C_FLAGS="$extra" -DCMAKE_EXE_LINKER_FLAGS="$extra" > "$tmp/cmake.log" 2>&1 &&
    "$cmake" --build "$tmp/cb" >> "$tmp/cmake.log" 2>&1 &&
    "$tmp/cb/train" "$tmp/ex/data" "$tmp/cb/mlp_step/mlp.weights" "$tmp/cb.weights" $epochs >> "$tmp/cmake.log" 2>&1; then
    # the plans differ only in the model path they record: compare the payloads
    if cmp -s -i 24 "$tmp/cb.weights" "$tmp/ex/trained.weights"; then
        pass=$((pass + 1)); echo "ok   the CMake build trains to the same weights"
    else
        fail=$((fail + 1)); echo "FAIL: the CMake build's trained weights differ from make's"
    fi
else
    fail=$((fail + 1)); echo "FAIL: the CMake build"; tail -30 "$tmp/cmake.log"
fi
expect_summary
