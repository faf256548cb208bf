#!/usr/bin/env bash
# Layers point down only (DESIGN.md): planner/ includes nothing from runtime/ or codegen/,
# runtime/ nothing from codegen/.  Every #include "..." of a .c, .h or .cu file is resolved
# as the compiler would (the file's own folder, then planner/, runtime/, runtime/cpu/,
# runtime/cuda/, codegen/) and its layer compared with the includer's; any upward one
# fails.  What the planner needs of the runtime (the CPU kernels constant folding runs,
# oneDNN's workspace sizes) it declares itself and the runtime installs
# (planner/ir/host.h, runtime/cpu_host.h), so there is no exception to list.
# usage: check_layers.sh SOURCE_DIR
set -u
src=$1
cd "$src" || exit 2

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
checked=0
while IFS= read -r f; do
    checked=$((checked + 1))
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

for edge in "${found[@]}"; do
    echo "FAIL: an upward include: $edge (planner/ includes nothing from runtime/ or codegen/, runtime/ nothing from codegen/)"
done
echo "files checked: $checked, upward includes: ${#found[@]}"
if ((${#found[@]})); then
    echo "0 passed, ${#found[@]} failed"
    exit 1
fi
echo "1 passed, 0 failed"
