"""Compares the first rank's predicted compute time of two `shardc plan
--cluster` reports: `ratio A B LO HI` checks LO <= A/B <= HI, `less A B`
checks A < B. Exits 1 (with the figures) when the relation does not hold
or a report has no predicted block."""
import re
import sys

UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}


def compute_s(path):
    text = open(path).read()
    m = re.search(r"^predicted step on .*\n.*\n\s+0\s+\d+\s+([\d.]+) (s|ms|us)\s", text, re.M)
    if not m:
        sys.exit(f"{path}: no predicted block")
    return float(m.group(1)) * UNITS[m.group(2)]


op, a, b = sys.argv[1], compute_s(sys.argv[2]), compute_s(sys.argv[3])
ok = a < b if op == "less" else float(sys.argv[4]) <= a / b <= float(sys.argv[5])
print(f"{op}: {a:.6g} s vs {b:.6g} s: {'ok' if ok else 'FAILS'}")
sys.exit(0 if ok else 1)
