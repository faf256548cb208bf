#!/usr/bin/env bash
# Makes the ONNX Runtime training environment tools/bench/ort_peak.py compares with: a
# venv with PyPI's onnxruntime-training (1.19.2, the last release, has wheels for CPython
# 3.8 to 3.11 on x86_64 Linux), the onnx it was built against, numpy 1.x, and the torch
# its onnxruntime.training package imports (its amp and optim modules).  A venv of its
# own: onnxruntime-training and torch2_venv.sh's onnxruntime are one package name.
# Nothing of it is committed; run.sh takes its python from VP_ORT_PYTHON, else this
# default.
# usage: tools/scripts/ort_venv.sh [DIR]   (default build/venv-ort)
set -euo pipefail
dir=${1:-build/venv-ort}
source "$(dirname "${BASH_SOURCE[0]}")/venv_common.sh"
make_venv "$dir"
"$dir/bin/python" -m pip install -q "onnxruntime-training==1.19.2" "onnx==1.16.2" "numpy<2" "torch==2.4.1"
"$dir/bin/python" -c 'import onnxruntime, onnxruntime.training, onnx; print("onnxruntime-training", onnxruntime.__version__, "onnx", onnx.__version__)'
