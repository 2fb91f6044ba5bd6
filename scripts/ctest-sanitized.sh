#!/usr/bin/env bash
# ctest under the sanitizers, with one narrow retry.
#
# LeakSanitizer checks for leaks at exit by stopping every thread from a
# tracer thread; that tracer itself sometimes dies of SIGSEGV ("Tracer
# caught signal 11 ... LeakSanitizer has encountered a fatal error") after
# the test's own checks have all passed. It is a known, intermittent fault
# of the sanitizer runtime (google/sanitizers#1353), not a leak and not a
# failure of the test. A test that failed with that signature, and only
# that, is run once more on its own; any other failure fails at once, and
# a test that shows the signature twice fails too. Every retry is printed.
#
# Usage (from the build directory): ctest-sanitized.sh [ctest options...]
set -uo pipefail

junit=$(mktemp)
trap 'rm -f "$junit"' EXIT

ctest --output-on-failure --output-junit "$junit" "$@"
rc=$?
[ "$rc" -eq 0 ] && exit 0

# The failed tests, and whether each failed only as the tracer crash.
retry=$(python3 - "$junit" <<'EOF'
import sys
import xml.etree.ElementTree as ET

sig = ("Tracer caught signal", "LeakSanitizer has encountered a fatal error")
names, other = [], []
for case in ET.parse(sys.argv[1]).getroot().iter("testcase"):
    if case.get("status") not in ("fail", "failed") and case.find("failure") is None:
        continue
    out = "".join(case.itertext())
    tracer = all(s in out for s in sig)
    # The test's own failures come before the exit-time check: any of them
    # means a real failure, whatever happens at exit.
    real = any(s in out for s in ("[  FAILED  ]", "ERROR: AddressSanitizer",
                                  "runtime error:", "ERROR: LeakSanitizer: detected"))
    (names if tracer and not real else other).append(case.get("name"))
if other or not names:
    sys.exit(1)
print(" ".join(names))
EOF
) || exit "$rc"

for t in $retry; do
  echo "ctest-sanitized: $t failed only as LeakSanitizer's tracer crash at exit; running it once more"
  ctest --output-on-failure -R "^${t//./\\.}\$" || exit 1
done
exit 0
