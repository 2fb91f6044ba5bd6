#!/usr/bin/env bash
# Create .venv-samples (at the repository root) with the pinned torch,
# transformers, onnx and onnxruntime of samples/requirements.txt, for
# samples/make_samples.py. PyPI's torch wheel for Linux brings the CUDA
# libraries as dependencies (about 7 GB installed, a few minutes to fetch);
# the samples are built on the CPU. Does nothing when the venv is up to date.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${SAMPLES_VENV:-$root/.venv-samples}"
req="$root/samples/requirements.txt"
python="${PYTHON:-python3}"

if [ -x "$venv/bin/python" ] && cmp -s "$req" "$venv/.samples-requirements.txt"; then
    echo "install-torch.sh: $venv is up to date"
    exit 0
fi
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
"$venv/bin/python" -m pip install -r "$req"
"$venv/bin/python" -c 'import torch, transformers, onnx, onnxruntime; print("torch", torch.__version__, "transformers", transformers.__version__, "onnx", onnx.__version__, "onnxruntime", onnxruntime.__version__)'
cp "$req" "$venv/.samples-requirements.txt"
