#!/usr/bin/env bash
# test_run_all.sh — rehearses tests/gpu/run-all.sh on the emulated GPU
# (SHARDC_CUDA_EMU=1, --quick: no timings), so that the script a GPU
# machine runs is known to work before a device is lent: it must end with
# "N passed, 0 failed" (N >= 3: with --quick, the kernels, the samples and
# the arena) and write a JSON summary whose counts agree.
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
SHARDC_CUDA_EMU=1 bash "$here/run-all.sh" --quick --json "$out/summary.json" >"$out/log" 2>&1
rc=$?
last=$(tail -n 1 "$out/log")
echo "run-all: exit $rc, '$last'"
if [ $rc -ne 0 ] || ! echo "$last" | grep -Eq '^[3-9][0-9]* passed, 0 failed$'; then
  echo "FAIL: run-all.sh rehearsal"; tail -n 40 "$out/log"; exit 1
fi
py=${PYTHON:-python3}
"$py" - "$out/summary.json" "$last" <<'PY' || exit 1
import json, sys
s = json.load(open(sys.argv[1]))
passed = int(sys.argv[2].split()[0])
assert s["emulated"] is True, s
assert s["passed"] == passed and s["failed"] == 0, s
names = {c["name"] for c in s["checks"] if c["status"] == "pass"}
assert {"kernels", "samples", "arena"} <= names, names
print("ok")
PY
