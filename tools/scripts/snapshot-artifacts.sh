#!/usr/bin/env bash
# Writes every artifact the command produces for the bundled models (plan files, text
# and JSON reports, DOT graphs, SVG timelines, show's output) into DIR, so that two
# builds can be compared byte for byte: run it with the old build and the new one, then
# `diff -r`. Timing fields (planning_seconds and the report's "planned in" line) are
# masked, since they are the only parts that legitimately change from run to run.
#   usage: tools/scripts/snapshot-artifacts.sh BUILD_DIR OUT_DIR
set -euo pipefail
tool=$(realpath "$1")/onnx-vplan
out=$2
src=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out"
mask() { sed -E "s|$out|OUT|g" | sed -E 's/("planning_seconds": )[0-9.e+-]+/\1X/; s/(planned in )[0-9.]+ ?[a-z]*/\1X/; s/[0-9.]+ s\b/X s/g'; }

snap() { # name, model, extra args...
    local name=$1 model=$2; shift 2
    local base="$out/$name"
    set +e
    "$tool" plan "$src/models/$model/model.onnx" --dim batch=8 --loss ce:logits "$@" \
        -o "$base.vplan" --json "$base.json.raw" --dot "$base.dot" --timeline "$base.svg" \
        >"$base.report.raw" 2>&1
    echo "exit $?" >>"$base.report.raw"
    set -e
    mask <"$base.report.raw" >"$base.report"; rm -f "$base.report.raw"
    [ -f "$base.json.raw" ] && { mask <"$base.json.raw" >"$base.json"; rm -f "$base.json.raw"; }
    if [ -f "$base.vplan" ]; then
        "$tool" show "$base.vplan" --json | mask >"$base.show.json"
        "$tool" show "$base.vplan" --steps | mask >"$base.show.txt"
        "$tool" verify "$base.vplan" | mask >"$base.verify.txt"
    fi
}
for m in mlp cnn gpt gpt_ln_decomposed; do
    freeze=()
    case $m in gpt*) freeze=(--freeze '^causal_mask$') ;; esac
    snap "$m.sgd" "$m" "${freeze[@]}"
    snap "$m.adamw" "$m" --optimizer adamw "${freeze[@]}"
    snap "$m.separate" "$m" --optimizer momentum --no-fused-update "${freeze[@]}"
    snap "$m.dp" "$m" --optimizer adamw --budget 300KiB "${freeze[@]}"
    snap "$m.sqrtn" "$m" --optimizer adam --budget 300KiB --remat sqrtn "${freeze[@]}"
    snap "$m.h100" "$m" --optimizer adamw --device h100 "${freeze[@]}"
done
"$tool" inspect "$src/models/cnn/model.onnx" --dim batch=4 --json >"$out/cnn.inspect.json"
"$tool" inspect "$src/models/gpt/model.onnx" --dim batch=4 >"$out/gpt.inspect.txt"
echo "wrote $(ls "$out" | wc -l) artifacts to $out"
