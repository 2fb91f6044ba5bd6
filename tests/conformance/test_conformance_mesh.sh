#!/usr/bin/env bash
# test_conformance_mesh.sh — every ONNX node test that passes on one rank
# (manifest.txt: pass) must pass partitioned over `--mesh dp=3` too: the
# inputs' dim 0 is split over 3 thread-ranks wherever it divides (the
# node tests' [3,4,5] shapes mostly do), so each op's sharding rule, the
# reshards localize.c inserts and the runner's cutting and gathering are
# checked against the ONNX reference outputs, op by op. 3 (not 2) also
# exercises uneven group sizes in the communicators. Then again with every
# float input's last dim split 2 ways (--split-last 2, through a plan's
# per-input overrides): the splits meet the dims ops reduce, contract,
# slice and reshape. Each run prints how many tests ran split, split with a
# fallback, or replicated (no input split), and fails when the split count
# falls below the runner's SPLIT_FLOOR. Arguments go to test_node_tests.py:
# ctest passes --shard I/4 (tests/CMakeLists.txt), so that four tests
# together run every node test once.
set -u
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PY="${PYTHON:-$HERE/../../.venv/bin/python}"
if [ -z "${SHARDC:-}" ]; then
  echo "test_conformance_mesh.sh: SHARDC is not set (run through ctest)" >&2
  exit 2
fi
rc=0
"$PY" "$HERE/test_node_tests.py" --shardc "$SHARDC" --jobs "${SC_CONFORMANCE_JOBS:-2}" \
  --mesh dp=3 "$@" || rc=1
"$PY" "$HERE/test_node_tests.py" --shardc "$SHARDC" --jobs "${SC_CONFORMANCE_JOBS:-2}" \
  --split-last 2 "$@" || rc=1
exit $rc
