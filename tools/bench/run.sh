#!/usr/bin/env bash
# Runs every benchmark and records the tables in RESULTS.md (the README points there).
# usage: run.sh BUILD_DIR RESULTS.md
# The PyTorch comparisons (torch_peak.py, torch_speed.py, torch_export_matrix.py) run with Debian's
# Python, or VP_PYTHON; each prints a skip line where torch or torchvision is missing.
# torch2_peak.py runs with PyPI's torch 2.x: VP_TORCH2_PYTHON, else build/venv-torch2; ort_peak.py
# with onnxruntime-training: VP_ORT_PYTHON, else build/venv-ort (tools/scripts/ort_venv.sh).
set -euo pipefail
build=$1
out=$2
here=$(cd "$(dirname "$0")" && pwd)
py=${VP_PYTHON:-/usr/bin/python3}
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
    echo
    bash "$here/arena_scale.sh" "$build"
    for s in torch_peak.py torch_speed.py torch_export_matrix.py bench_codegen.py; do
        echo
        if [[ ! -x $py ]]; then
            case $s in
                torch_peak.py) echo "## Arena against PyTorch eager's peak" ;;
                bench_codegen.py) echo "## Generated C step against \`run\` and PyTorch eager (CPU)" ;;
                torch_speed.py) echo "## CPU step time against PyTorch eager" ;;
                *) echo "## torch.onnx exports: load and plan by opset" ;;
            esac
            echo
            echo "Skipped: no Python at $py (set VP_PYTHON)."
            continue
        fi
        # the profiler's glog warnings and the exporter's progress go to a log
        GLOG_minloglevel=2 "$py" "$here/$s" --build "$build" 2>>"$build/torch_bench.log" ||
            echo "**$s failed (exit $?)**: see $build/torch_bench.log"
    done
    # today's exports against PyTorch 2.x (PyPI's torch in tools/scripts/torch2_venv.sh's venv)
    echo
    py2=${VP_TORCH2_PYTHON:-$here/../../build/venv-torch2/bin/python}
    if [[ -x $py2 ]]; then
        for s in torch2_peak.py torch2_speed.py search_scale.py; do
            echo
            GLOG_minloglevel=2 "$py2" "$here/$s" --build "$build" 2>>"$build/torch_bench.log" ||
                echo "**$s failed (exit $?)**: see $build/torch_bench.log"
        done
    else
        for t in "Arena against PyTorch 2.x eager's peak (torch 2.x exports)" \
            "CPU step time against PyTorch 2.x eager and torch.compile (torch 2.x exports)" "The joint search at LLM scale (\`plan --auto\`, torch 2.x exports)"; do
            echo
            echo "## $t"
            echo
            echo "Skipped: no torch 2.x Python at $py2 (make it with tools/scripts/torch2_venv.sh, or set VP_TORCH2_PYTHON)."
        done
    fi
    # ONNX Runtime's training step on the same exports (torch2_peak.py wrote them)
    echo
    pyo=${VP_ORT_PYTHON:-$here/../../build/venv-ort/bin/python}
    echo
    if [[ -x $pyo ]]; then
        "$pyo" "$here/ort_peak.py" --build "$build" 2>>"$build/torch_bench.log" ||
            echo "**ort_peak.py failed (exit $?)**: see $build/torch_bench.log"
    else
        echo "## Arena against ONNX Runtime's training step (torch 2.x exports)"
        echo
        echo "Skipped: no onnxruntime-training Python at $pyo (make it with tools/scripts/ort_venv.sh, or set VP_ORT_PYTHON)."
    fi
} >"$tmp"
mv "$tmp" "$out"
cat "$out"
