#!/bin/bash
# test_conformance.sh — ctest entry for the ONNX backend node tests.
#
# Runs tests/conformance/test_node_tests.py with the suite's Python and
# shardc binary (ctest sets PYTHON, SHARDC, SC_SOURCE_DIR, SC_BINARY_DIR).
# Fails on a manifest mismatch, a crash or a timeout; exits 77 (skipped)
# while the shardc binary has no `run` command. Generated node-test data is
# cached under $SC_BINARY_DIR/conformance/. Arguments go to the runner: ctest
# passes --shard I/4 (tests/CMakeLists.txt). See tests/conformance/README.md.
set -u
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PY="${PYTHON:-$HERE/../../.venv/bin/python}"
if [ -z "${SHARDC:-}" ]; then
  echo "test_conformance.sh: SHARDC is not set (run through ctest)" >&2
  exit 2
fi
exec "$PY" "$HERE/test_node_tests.py" --shardc "$SHARDC" --jobs "${SC_CONFORMANCE_JOBS:-2}" "$@"
