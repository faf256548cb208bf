#!/usr/bin/env bash
# Runs tests/torch2_load_back.py with PyPI's torch 2.x: $VP_TORCH2_PYTHON, else the venv
# tools/scripts/torch2_venv.sh makes by default (build/venv-torch2); skips (77) without.
# usage: torch2_load_back.sh ONNX_VPLAN SOURCE_DIR
py=${VP_TORCH2_PYTHON:-$2/build/venv-torch2/bin/python}
if [[ ! -x $py ]]; then
    echo "skip: no torch 2.x Python ($py); make it with tools/scripts/torch2_venv.sh or set VP_TORCH2_PYTHON"
    exit 77
fi
exec "$py" "$(dirname "$0")/torch2_load_back.py" "$1" "$2"
