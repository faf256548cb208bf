#!/usr/bin/env bash
# Installs what onnx-vplan builds and tests with, from Debian's packages.
# Runs as root (CI, a fresh machine) or through sudo; skips apt when all is present.
set -euo pipefail
pkgs=(cmake make gcc clang protobuf-c-compiler libprotobuf-c-dev libonnx-dev libopenblas-dev libdnnl-dev libglpk-dev graphviz valgrind libopenmpi-dev openmpi-bin)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    sudo=""
    [[ $(id -u) -eq 0 ]] || sudo="sudo"
    echo "installing: ${missing[*]}"
    $sudo apt-get update -q
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
# The QDQ check (tests/qdq_ort.py) runs the exported int8 model in ONNX Runtime: Debian's
# numpy and onnx, PyPI's onnxruntime.  Without them that one test skips, so a failure here
# is reported, not fatal.
if ! /usr/bin/python3 -c 'import numpy, onnx, onnxruntime' 2>/dev/null; then
    sudo=""
    [[ $(id -u) -eq 0 ]] || sudo="sudo"
    { DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends python3-numpy python3-onnx python3-pip &&
        $sudo /usr/bin/python3 -m pip install -q --break-system-packages onnxruntime==1.19.2; } ||
        echo "install-deps: numpy/onnx/onnxruntime not installed: tests/qdq_ort.py will skip"
fi
# The Python front door's tests with Debian's torch 1.13 (tests/python, python_system:
# the TorchScript exporter the torch 1.x fixtures came from).  Without it that test skips,
# so a failure here is reported, not fatal.
if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    sudo=""
    [[ $(id -u) -eq 0 ]] || sudo="sudo"
    { $sudo apt-get update -q && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends python3-torch; } ||
        echo "install-deps: python3-torch not installed: python_system will skip"
fi
