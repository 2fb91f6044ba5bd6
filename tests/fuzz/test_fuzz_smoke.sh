#!/usr/bin/env bash
# test_fuzz_smoke.sh — the ctest smoke run of the fuzzers (60 s in all).
# Builds them in the test build's folder (so that parallel builds do not
# share one), runs tests/fuzz/run.sh, passes its status through: 0 clean,
# 77 skipped (clang-14 / libFuzzer missing), anything else a finding.
set -euo pipefail
ROOT=${SC_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
if [ -n "${SC_BINARY_DIR:-}" ]; then
  export FUZZ_BUILD=${FUZZ_BUILD:-$SC_BINARY_DIR/fuzz}
fi
FUZZ_SECONDS=60 exec bash "$ROOT/tests/fuzz/run.sh"
