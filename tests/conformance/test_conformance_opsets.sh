#!/usr/bin/env bash
# test_conformance_opsets.sh — the counted ONNX node tests converted down to
# opsets 7..12 by onnx.version_converter (node_data.converted_dir; the
# expected outputs are the original ones), through shardc's version
# adapters: the statuses must match manifest-opsets.txt (names NAME@OPSET).
# The converter has down-adapters for few ops, so most tests stay at their
# own opset ("not convertible", not counted). Converted models are cached
# under $SC_BINARY_DIR/conformance/onnx-node-tests-opsetN/. Arguments go to
# the runner: ctest passes --shard I/4 (tests/CMakeLists.txt).
set -u
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PY="${PYTHON:-$HERE/../../.venv/bin/python}"
if [ -z "${SHARDC:-}" ]; then
  echo "test_conformance_opsets.sh: SHARDC is not set (run through ctest)" >&2
  exit 2
fi
exec "$PY" "$HERE/test_node_tests.py" --shardc "$SHARDC" --jobs "${SC_CONFORMANCE_JOBS:-2}" \
  --opsets 7,8,9,10,11,12 --manifest "$HERE/manifest-opsets.txt" "$@"
