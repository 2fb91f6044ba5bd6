"""Checks the predicted step of `shardc plan --cluster` reports.

  ratio A B LO HI   LO <= A/B <= HI, A and B the compute time of pipeline
                    rank 0 in two text reports
  less A B          A < B, the same figure
  json J [bubble]   J's "predicted" has every key docs/plan-format.md lists;
                    on every figure the breakdown's terms (compute,
                    recompute, optimizer, bubble, exposed communication)
                    sum to step_time_s within 1e-9 relative; "bubble":
                    bubble_s > 0 (a pipeline), else bubble_s == 0
  le J1 J2          J1's step_time_s <= J2's (overlap against none)
  rows T N          text report T's breakdown table has N rows whose
                    columns (compute, per-axis communication, bubble,
                    recompute, optimizer) sum to their total within the
                    printed precision
  busiest T P M     in text report T, the pipeline rank with the most
                    compute (recompute included) waits at most 1F1B's
                    bubble, (P - 1) / M of that compute, and the step ends
                    at most that much after the rank's own work (its total
                    less its bubble): the ranks wait for the slowest one's
                    schedule, not for each other's once-per-step pieces
Exits 1 (with the figures) when a relation does not hold or a report has
no predicted block."""
import json
import math
import re
import sys

UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
TIME = r"([\d.]+) (s|ms|us)"
KEYS = {"source", "step_time_s", "rank", "pipe_rank", "breakdown", "collectives",
        "tokens_per_s", "tflops_per_gpu", "mfu", "peak_bytes_per_rank", "fits"}
TERMS = {"compute_s", "exposed_comm_s", "bubble_s", "recompute_s", "optimizer_s"}


def table(path):
    text = open(path).read()
    m = re.search(r"^predicted step on .*\n(?:  (?!pp rank).*\n)*  pp rank.*\n((?:  \d+ .*\n)+)",
                  text, re.M)
    if not m:
        sys.exit(f"{path}: no predicted block")
    rows = []
    for line in m.group(1).splitlines():
        times = [float(v) * UNITS[u] for v, u in re.findall(TIME, line)]
        rows.append(times)
    return rows


def predicted(path):
    p = json.load(open(path)).get("predicted")
    if not p or "step_time_s" not in p:
        sys.exit(f"{path}: no predicted step: {p}")
    return p


def fail(msg):
    print(msg)
    sys.exit(1)


op = sys.argv[1]
if op in ("ratio", "less"):
    a, b = table(sys.argv[2])[0][0], table(sys.argv[3])[0][0]
    ok = a < b if op == "less" else float(sys.argv[4]) <= a / b <= float(sys.argv[5])
    print(f"{op}: {a:.6g} s vs {b:.6g} s: {'ok' if ok else 'FAILS'}")
    sys.exit(0 if ok else 1)
if op == "json":
    p = predicted(sys.argv[2])
    b = p["breakdown"]
    if set(p) != KEYS or set(b) != TERMS or p["source"] != "simulated":
        fail(f"keys: {sorted(p)} / {sorted(b)}")
    total = (b["compute_s"] + b["recompute_s"] + b["optimizer_s"] + b["bubble_s"] +
             sum(b["exposed_comm_s"].values()))
    if not math.isfinite(total) or abs(total - p["step_time_s"]) > 1e-9 * p["step_time_s"]:
        fail(f"terms {total!r} != step {p['step_time_s']!r}")
    pipeline = len(sys.argv) > 3 and sys.argv[3] == "bubble"
    if (b["bubble_s"] > 0) != pipeline:
        fail(f"bubble {b['bubble_s']!r}")
    if not (p["tokens_per_s"] > 0 and p["tflops_per_gpu"] > 0 and 0 < p["mfu"] < 1 and
            p["peak_bytes_per_rank"] > 0 and p["fits"] is True):
        fail(f"figures: {p}")
    print(f"json: step {p['step_time_s']:.6g} s = the sum of its terms; ok")
    sys.exit(0)
if op == "le":
    a, b = predicted(sys.argv[2])["step_time_s"], predicted(sys.argv[3])["step_time_s"]
    print(f"le: {a:.6g} s vs {b:.6g} s: {'ok' if a <= b else 'FAILS'}")
    sys.exit(0 if a <= b else 1)
if op == "rows":
    rows = table(sys.argv[2])
    if len(rows) != int(sys.argv[3]):
        fail(f"{len(rows)} rows, want {sys.argv[3]}")
    for r in rows:
        # a figure printed with 3 decimals of its unit (us below 1 ms, ms
        # below 1 s) is off by at most 5e-4 of itself, or 0.5 ns
        slack = sum(max(5e-4 * v, 5e-10) for v in r)
        if abs(sum(r[:-1]) - r[-1]) > slack:
            fail(f"row {r}: terms {sum(r[:-1])!r} != total {r[-1]!r}")
    print(f"rows: {len(rows)}, each the sum of its terms; ok")
    sys.exit(0)
if op == "busiest":
    rows = table(sys.argv[2])
    P, M = int(sys.argv[3]), int(sys.argv[4])
    # columns: compute, per-axis communication, bubble, recompute,
    # optimizer, total
    r = max(rows, key=lambda r: r[0] + r[-3])
    work, bubble, step = r[0] + r[-3], r[-4], max(x[-1] for x in rows)
    bound = (P - 1) / M * work
    late = step - (r[-1] - bubble)
    ok = all(math.isfinite(v) for v in (work, bubble, step)) and bubble <= bound and \
        late <= bound
    print(f"busiest: compute {work:.6g} s, bubble {bubble:.6g} s, the step {late:.6g} s after "
          f"its work, bound {bound:.6g} s: {'ok' if ok else 'FAILS'}")
    sys.exit(0 if ok else 1)
sys.exit(f"unknown check {op}")
