#!/usr/bin/env bash
# Runs tests/python/test_onnx_vplan.py (the Python package tools/python/onnx_vplan against
# torch) with one Python, the package from the source tree (PYTHONPATH, no pip install)
# and ONNX_VPLAN the built command.  Skips (77) with the reason where that Python, torch,
# onnx or numpy is absent.
# usage: run_tests.sh torch2|system ONNX_VPLAN SOURCE_DIR [PYTHON3]
#   torch2: $VP_TORCH2_PYTHON, else the venv tools/scripts/torch2_venv.sh makes
#           (SOURCE_DIR/build/venv-torch2); system: PYTHON3, else /usr/bin/python3
#           (Debian's torch 1.13 is python3-torch)
set -u
which=$1
tool=$2
src=$3
if [[ $which == torch2 ]]; then
    py=${VP_TORCH2_PYTHON:-$src/build/venv-torch2/bin/python}
    hint="make it with tools/scripts/torch2_venv.sh or set VP_TORCH2_PYTHON"
else
    py=${4:-/usr/bin/python3}
    hint="on Debian: apt-get install python3-torch python3-onnx python3-numpy"
fi
if [[ ! -x $py ]]; then
    echo "skip: no Python at $py ($hint)"
    exit 77
fi
if ! why=$("$py" -c 'import torch, onnx, numpy' 2>&1); then
    echo "skip: $py cannot import torch, onnx and numpy ($hint): $(tail -1 <<<"$why")"
    exit 77
fi
export ONNX_VPLAN=$tool
export PYTHONPATH=$src/tools/python${PYTHONPATH:+:$PYTHONPATH}
export PYTHONDONTWRITEBYTECODE=1
exec "$py" "$src/tests/python/test_onnx_vplan.py"
