#!/usr/bin/env bash
# Runs every benchmark and records the tables in RESULTS.md (the README points there).
# usage: run.sh BUILD_DIR RESULTS.md
set -euo pipefail
build=$1
out=$2
tmp=$(mktemp)
{
    echo "# Benchmark results"
    echo
    echo "Recorded by \`cmake --build build --target bench\` on $(date -u +%Y-%m-%d), $(nproc) cores,"
    echo "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'). Ratios are against baselines measured"
    echo "in the same run; absolute times on a shared machine are noisy."
    for b in "$build"/bench_*; do
        [[ -x $b ]] || continue
        echo
        echo "## $(basename "$b")"
        echo
        "$b"
    done
} >"$tmp"
mv "$tmp" "$out"
cat "$out"
