#!/usr/bin/env bash
# Makes the torch 2.x environment the fixture kit and the comparisons use: a venv with
# PyPI's torch, torchvision, transformers, onnx, onnxscript and onnxruntime (the exporter
# users run today: torch.onnx.export's default is the dynamo/onnxscript one).  Nothing
# of it is committed; scripts take its python with --python or VP_PYTHON.
# usage: tools/scripts/torch2_venv.sh [DIR]   (default build/venv-torch2)
set -euo pipefail
dir=${1:-build/venv-torch2}
source "$(dirname "${BASH_SOURCE[0]}")/venv_common.sh"
make_venv "$dir"
"$dir/bin/python" -m pip install -q torch torchvision transformers onnx onnxscript onnxruntime
"$dir/bin/python" -c 'import torch, transformers, onnx, onnxscript; print("torch", torch.__version__, "transformers", transformers.__version__, "onnx", onnx.__version__)'
