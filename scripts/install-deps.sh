#!/usr/bin/env bash
# Installs what shardc needs to build and test: Debian packages for the C
# libraries and tools, and a project-local Python virtual environment (.venv)
# with the test tooling (onnx, onnxruntime, numpy, lit; selenium and Pillow
# drive headless Chromium and read its screenshots; junitparser, PyYAML and
# check-jsonschema for test_check.py, which reads shardc check's JUnit file
# and validates docs/ci.md's jobs against the GitHub and GitLab schemas that
# check-jsonschema ships; pytest runs the Python package's suite, python/tests).
#
# Idempotent: when everything is present it only checks, and returns quickly.
# torch/transformers are NOT installed here; `make samples` installs them into
# .venv-samples on demand (they are needed only to regenerate samples).
set -euo pipefail
cd "$(dirname "$0")/.."

DEB_PKGS=(
  cmake make gcc g++ pkg-config
  protobuf-c-compiler libprotobuf-c-dev libonnx-dev
  llvm-14-dev llvm-14-tools clang-14 libclang-rt-14-dev
  libdnnl-dev
  openmpi-bin libopenmpi-dev
  libcmocka-dev
  graphviz
  libjansson-dev
  zlib1g-dev libzstd-dev libtinfo-dev libxml2-dev libedit-dev libffi-dev
  python3-venv strace
  patchelf xz-utils  # tests/gpu/pack.sh: a build for a GPU machine without these libraries
  chromium chromium-driver  # tests/models/test_html_report.py: plan --html pages in a browser
  shellcheck  # tests/models/test_check.py: docs/ci.md's jobs' shell lines
)

missing=()
for p in "${DEB_PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "install-deps: installing Debian packages: ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
  $SUDO apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" \
    > /tmp/shardc-apt.log 2>&1 || { tail -30 /tmp/shardc-apt.log; exit 1; }
fi

PY_PKGS=(numpy onnx onnxruntime lit safetensors tensorboard selenium pillow junitparser pyyaml
         check-jsonschema pytest)
VENV=.venv
PYTHON=${PYTHON:-python3}
if [ ! -x "$VENV/bin/python" ]; then
  echo "install-deps: creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import numpy, onnx, onnxruntime, lit, safetensors, tensorboard, selenium, PIL, junitparser, yaml, check_jsonschema, pytest" 2>/dev/null; then
  echo "install-deps: installing Python packages into $VENV: ${PY_PKGS[*]}"
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q "${PY_PKGS[@]}"
fi
touch "$VENV/.deps-ok"
echo "install-deps: ok"
