#!/usr/bin/env bash
# tools/vplan.mk, installed by `cmake --install` into a temporary prefix: make builds
# model.onnx -> model.vplan -> model_step.c -> model_step.o; a second make does nothing
# (make -q says so); touching the model rebuilds the plan, the source and the object;
# changing an option (on the command line or per model) rebuilds them once, and going
# back rebuilds them again.
# usage: vplan_mk.sh CMAKE BUILD_DIR SOURCE_DIR
set -u
cmake=$1
build=$2
src=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/expect.sh"

"$cmake" --install "$build" --prefix "$tmp/prefix" > "$tmp/install.log" || { cat "$tmp/install.log"; exit 1; }
mkdir "$tmp/w"
cd "$tmp/w" || exit 1
cp "$src/models/mlp/model.onnx" mlp.onnx
cat > Makefile <<MK
include $tmp/prefix/share/vplan/vplan.mk
VPLAN_DIMS = batch=4
VPLAN_LOSS = ce:logits
all: mlp_step.o
MK

products="mlp.vplan mlp_step.c mlp_step.h mlp_step.o"
mtimes() { for f in $products; do stat -c %.Y "$f" 2>/dev/null || echo 0; done; }
check() { # what, want (same|rebuilt), make arguments...
    local what=$1 want=$2
    shift 2
    local before after newer=0
    before=$(mtimes)
    sleep 1.1 # so that a rebuilt file's time differs
    if ! make "$@" > make.log 2>&1; then
        fail=$((fail + 1)); echo "FAIL $what: make failed"; tail -20 make.log; return
    fi
    after=$(mtimes)
    newer=$(paste <(echo "$before") <(echo "$after") | awk '$2 > $1 { n++ } END { print n + 0 }')
    if [[ $want == same && $newer == 0 ]] || [[ $want == rebuilt && $newer == 4 ]]; then
        pass=$((pass + 1)); echo "ok   $what: $want"
    else
        fail=$((fail + 1)); echo "FAIL $what: want $want; $newer of 4 products newer"; cut -c1-160 make.log | head
    fi
}

check "first make" rebuilt
for f in $products mlp.weights; do [[ -s $f ]] || { fail=$((fail + 1)); echo "FAIL: make did not make $f"; }; done
expect 0 "" -- make -q
check "second make" same
touch mlp.onnx
expect 1 "" -- make -q
check "make after touching the model" rebuilt
check "an option changed (VPLAN_OPTIMIZER=sgd)" rebuilt VPLAN_OPTIMIZER=sgd
grep -q -- "--optimizer sgd" make.log && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: the plan was not made with sgd"; }
check "the same option again" same VPLAN_OPTIMIZER=sgd
check "a per-model option (mlp_VPLAN_PRECISION=bf16)" rebuilt VPLAN_OPTIMIZER=sgd mlp_VPLAN_PRECISION=bf16
check "back to the defaults" rebuilt
check "and again" same
expect_summary
