#!/usr/bin/env bash
# Makes the torch 2.x environment the fixture kit and the comparisons use: a venv with
# PyPI's torch, torchvision, transformers, onnx, onnxscript and onnxruntime (the exporter
# users run today: torch.onnx.export's default is the dynamo/onnxscript one).  Nothing
# of it is committed; scripts take its python with --python or VP_PYTHON.
# usage: tools/scripts/torch2_venv.sh [DIR]   (default build/venv-torch2)
set -euo pipefail
dir=${1:-build/venv-torch2}
if [[ ! -x $dir/bin/python ]]; then
    python3 -m venv "$dir" 2>/dev/null || {
        sudo=""
        [[ $(id -u) -eq 0 ]] || sudo="sudo"
        $sudo apt-get update -q && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q python3-venv
        python3 -m venv "$dir"
    }
fi
"$dir/bin/python" -m pip install -q --upgrade pip
"$dir/bin/python" -m pip install -q torch torchvision transformers onnx onnxscript onnxruntime
"$dir/bin/python" -c 'import torch, transformers, onnx, onnxscript; print("torch", torch.__version__, "transformers", transformers.__version__, "onnx", onnx.__version__)'
