#!/usr/bin/env bash
# Layers point down only (DESIGN.md): planner/ includes nothing from runtime/ or codegen/,
# runtime/ nothing from codegen/.  Every #include "..." of a .c, .h or .cu file is resolved
# as the compiler would (the file's own folder, then planner/, runtime/, runtime/cpu/,
# runtime/cuda/, codegen/) and its layer compared with the includer's.
#
# The kernel dispatch still sits in the op registry (planner/ops/*.c name their CPU
# kernels) and the planner sizes oneDNN's workspaces by asking it (memory/workspace.c):
# those upward includes are listed below, one by one, until they move (issue 36).  The
# check fails on any upward include not listed, and on a listed one that is gone, so the
# list only shrinks.
# usage: check_layers.sh SOURCE_DIR
set -u
src=$1
cd "$src" || exit 2
known=(
    # planner/ops: each family's registry row names its CPU kernel
    "planner/ops/attention.c -> runtime/cpu/k_attention.h"
    "planner/ops/collective.c -> runtime/cpu/k_elementwise.h"
    "planner/ops/elementwise.c -> runtime/cpu/k_elementwise.h"
    "planner/ops/gelu_matmul.c -> runtime/cpu/k_train.h"
    "planner/ops/grad_linalg.c -> runtime/cpu/k_linalg.h"
    "planner/ops/grad_norm.c -> runtime/cpu/k_linalg.h"
    "planner/ops/grad_tensor.c -> runtime/cpu/k_tensor.h"
    "planner/ops/grad_util.c -> runtime/cpu/k_elementwise.h"
    "planner/ops/linalg.c -> runtime/cpu/k_linalg.h"
    "planner/ops/quant.c -> runtime/cpu/k_fake_quant.h"
    "planner/ops/recurrent.c -> runtime/cpu/k_recurrent.h"
    "planner/ops/reduce.c -> runtime/cpu/k_reduce.h"
    "planner/ops/resample.c -> runtime/cpu/k_resample.h"
    "planner/ops/source.c -> runtime/cpu/k_tensor.h"
    "planner/ops/tensor.c -> runtime/cpu/k_tensor.h"
    "planner/ops/train.c -> runtime/cpu/k_linalg.h"
    "planner/ops/train.c -> runtime/cpu/k_train.h"
    "planner/ops/update.c -> runtime/cpu/k_train.h"
    # the CPU profile's convolution workspaces, sized by asking oneDNN
    "planner/memory/workspace.c -> runtime/backend.h"
    "planner/memory/workspace.c -> runtime/cpu/dn.h"
)

layer_of() { # the top folder a path lies in
    echo "${1%%/*}"
}

# Resolves the include $2 of file $1 as the build's include path does; prints the path
# found, or nothing for a header outside the tree (generated, system).
resolve() {
    local dir=${1%/*} d
    for d in "$dir" planner runtime runtime/cpu runtime/cuda codegen; do
        if [[ -f $d/$2 ]]; then
            realpath --relative-to=. "$d/$2"
            return
        fi
    done
}

found=()
while IFS= read -r f; do
    from=$(layer_of "$f")
    while IFS= read -r inc; do
        path=$(resolve "$f" "$inc")
        [[ -n $path ]] || continue
        to=$(layer_of "$path")
        if [[ ($from == planner && ($to == runtime || $to == codegen)) || ($from == runtime && $to == codegen) ]]; then
            found+=("$f -> $path")
        fi
    done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
done < <(git ls-files -co --exclude-standard -- 'planner/*.c' 'planner/*.h' 'runtime/*.c' 'runtime/*.h' 'runtime/*.cu' | sort)

pass=0
fail=0
for edge in "${found[@]}"; do
    listed=0
    for k in "${known[@]}"; do [[ $k == "$edge" ]] && listed=1; done
    if ((listed)); then
        pass=$((pass + 1))
    else
        fail=$((fail + 1))
        echo "FAIL: an upward include: $edge (planner/ includes nothing from runtime/ or codegen/, runtime/ nothing from codegen/)"
    fi
done
for k in "${known[@]}"; do
    gone=1
    for edge in "${found[@]}"; do [[ $k == "$edge" ]] && gone=0; done
    if ((gone)); then
        fail=$((fail + 1))
        echo "FAIL: '$k' is listed as a known upward include but is gone: take it off the list"
    fi
done
echo "upward includes: ${#found[@]}, all listed (the kernel dispatch and oneDNN's workspace query, to move)"
echo "$pass passed, $fail failed"
((fail == 0))
