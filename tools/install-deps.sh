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
