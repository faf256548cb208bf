#!/usr/bin/env bash
# `onnx-vplan arena` on long CSVs (issue 40: linear or n log n in its input, its limits
# covering all it does): wall seconds, peak memory and arena against its bound, at the
# default limits (where the allocator's replay takes dense pieces, arena_alloc.c) and,
# as the baseline in the same run, with limits wide enough for the ten greedy orders.
# usage: arena_scale.sh BUILD_DIR   (prints a markdown table)
set -euo pipefail
tool=$1/onnx-vplan
if [[ ! -x /usr/bin/time ]]; then # Debian's `time` package measures the peak memory
    echo "## onnx-vplan arena on long CSVs"
    echo
    echo "Skipped: no /usr/bin/time (apt-get install time)."
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "## onnx-vplan arena on long CSVs"
echo
echo "Random buffers (awk, seed 7): start uniform over 2n steps, 1-2000 steps long, 1-100000 bytes."
echo
echo "| buffers | limits | seconds | peak MB | arena / bound | kept |"
echo "|---|---|---|---|---|---|"
for n in 10000 100000 1000000; do
    csv=$tmp/a$n.csv
    awk -v n=$n 'BEGIN { srand(7); print "id,lower,upper,size";
        for (i = 0; i < n; i++) { l = int(rand() * 2 * n); printf "%d,%d,%d,%d\n", i, l, l + 1 + int(rand() * 2000), 1 + int(rand() * 100000) } }' >"$csv"
    for limits in default wide; do
        opts=()
        [[ $limits == wide ]] && opts=(--time-limit 1000)
        [[ $limits == wide && $n -gt 100000 ]] && continue # hours of greedy orders
        /usr/bin/time -f "%e %M" -o "$tmp/time" "$tool" arena "$csv" "${opts[@]}" >"$tmp/out"
        read -r secs kb <"$tmp/time"
        ratio=$(sed -n 's/^ratio: *\([0-9.]*\), kept \(.*\), .*/\1/p' "$tmp/out")
        kept=$(sed -n 's/^ratio: *[0-9.]*, kept \(.*\), [0-9.]* s$/\1/p' "$tmp/out")
        echo "| $n | $limits | $secs | $((kb / 1024)) | $ratio | $kept |"
    done
done
