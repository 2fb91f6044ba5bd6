"""test_demo.py — `make demo` (scripts/demo.sh) runs and labels what it prints.

Runs scripts/demo.sh against the suite's build (BUILD = $SC_BINARY_DIR; it
writes under BUILD/demo) and checks:
  * it exits 0 (shardc equals onnxruntime, 4 ranks equal 1 rank);
  * no line is a bare figure: every line holding a number also holds a
    word saying what it is, or is a row of a table under a header of
    column names (the pass-timing table's "0.24 (100.0%) Total" row, once
    printed alone, is not allowed);
  * the timing lines it promises are there, labelled.

Environment: SC_SOURCE_DIR, SC_BINARY_DIR. Exit 0 on success, 1 on failure.
"""
import os
import re
import subprocess
import sys

SRC = os.environ.get("SC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("SC_BINARY_DIR", os.path.join(SRC, "build"))


def main():
    r = subprocess.run(["bash", os.path.join(SRC, "scripts", "demo.sh")], cwd=SRC,
                       env=dict(os.environ, BUILD=os.path.abspath(BUILD)),
                       capture_output=True, text=True, timeout=600)
    failures = []
    if r.returncode != 0:
        failures.append(f"demo.sh exit {r.returncode}: {r.stderr[-2000:]}")
    lines = r.stdout.splitlines()
    # a bare figure: numbers, units, percentages and punctuation only, or the
    # pass-timing table's total row on its own
    unit = r"(ms|s|KiB|MiB|GiB|B|bytes|%|MFLOP|GFLOP)"
    bare = re.compile(rf"^[\s\d.,:()\[\]%+-]*(\d[\d.,]*\s*{unit}?[\s()%.,\d]*)+$")
    in_table = False  # under a header of column names, until a blank line
    for ln in lines:
        if not ln.strip():
            in_table = False
        elif not re.search(r"\d", ln) and len(re.split(r"\s{2,}", ln.strip())) >= 3:
            in_table = True
        elif re.match(r"^\s*[\d.]+\s+\(\s*[\d.]+%\)\s+Total\s*$", ln) or \
                (bare.match(ln) and not in_table):
            failures.append(f"unlabelled line: {ln!r}")
    for want in ("graph passes (bind-dims, infer-shapes, fold, dce, fuse):",
                 "compile (passes, lowering, memory plan):", "one run on", "activation arena:",
                 "max |shardc - onnxruntime|", "max |4 ranks - 1 rank|",
                 "max |4 ranks - 1 rank| loss"):
        if not any(want in ln for ln in lines):
            failures.append(f"no line with '{want}'")
    for f in failures:
        print("FAIL:", f)
    if failures:
        return 1
    print(f"ok: make demo ran; its {len(lines)} lines all say what their figures are")
    return 0


if __name__ == "__main__":
    sys.exit(main())
