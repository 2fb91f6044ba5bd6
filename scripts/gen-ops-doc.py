#!/usr/bin/env python3
"""Regenerates the op table of docs/ops.md from ir/ops.def.

docs/ops.md is hand-written prose around one generated table, between the
markers below. `--check` exits 1 when the table is stale (run by the suite).
"""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BEGIN = "<!-- BEGIN GENERATED OP TABLE (scripts/gen-ops-doc.py) -->"
END = "<!-- END GENERATED OP TABLE -->"
ROW = re.compile(r'^OP\((\w+),\s*"(\w+)",\s*(\d+),\s*(-?\d+),\s*(-?\d+),\s*(-?\d+),'
                 r'\s*(-?\d+),\s*([\w|]+),\s*(\w+),\s*(\w+),\s*(\w+),\s*(\w+),\s*(\w+),\s*(\w+)\)', re.M)
FAMILY = {"E": "elementwise", "R": "reduction", "N": "neural network", "S": "shape / data movement",
          "C": "collective (internal)", "K": "composite", "A": "fused attention (internal)"}


def opset_bounds():
    text = (ROOT / "ir/ops.h").read_text()
    lo = int(re.search(r"SC_OPSET_MIN = (\d+)", text).group(1))
    hi = int(re.search(r"SC_OPSET_MAX = (\d+)", text).group(1))
    return lo, hi


def table():
    lo, hi = opset_bounds()
    family = None
    lines = ["| op | family | opsets | inputs | outputs | folded | shape rule | lowering | sharding rule | gradient |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for line in (ROOT / "ir/ops.def").read_text().splitlines():
        m = re.search(r"\((E|R|N|S|C|K|A)\) ----", line)
        if m:
            family = FAMILY[m.group(1)]
        r = ROW.match(line)
        if not r:
            continue
        _, name, since, mi, ma, mo, xo, _, infer, _, ev, lower, shard, grad = r.groups()
        arity = lambda a, b: a if a == b else (f"{a}+" if b == "-1" else f"{a}–{b}")
        first = max(int(since), lo)
        opsets = "internal" if family in (FAMILY["C"], FAMILY["A"]) else f"{first}–{hi}"
        if family == FAMILY["K"]:  # replaced by its expansion: the later columns are its ops'
            lines.append(f"| {name} | {family} | {opsets} | {arity(mi, ma)} | {arity(mo, xo)} | "
                         f"its expansion's | expanded (`passes/composite.c`) | its expansion's | "
                         f"its expansion's | its expansion's |")
            continue
        lines.append(f"| {name} | {family} | {opsets} | {arity(mi, ma)} | "
                     f"{arity(mo, xo)} | {'yes' if ev != 'NOEVAL' else 'no'} | `{infer}` | `{lower}` | "
                     f"`{shard}` | {'—' if grad == 'no_grad' else '`' + grad + '`'} |")
    return "\n".join(lines)


def main():
    doc = ROOT / "docs/ops.md"
    text = doc.read_text()
    i, j = text.index(BEGIN), text.index(END)
    new = text[: i + len(BEGIN)] + "\n" + table() + "\n" + text[j:]
    if "--check" in sys.argv:
        if new != text:
            print("docs/ops.md is stale: run scripts/gen-ops-doc.py", file=sys.stderr)
            return 1
        print("docs/ops.md is up to date")
        return 0
    doc.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
