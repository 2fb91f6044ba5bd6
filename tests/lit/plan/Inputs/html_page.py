"""The data of a `plan --html` page (tools/plan_html.c) against the same
plan's `plan --train --json`: html_page.py PAGE.html PLAN.json.

Prints, for FileCheck: the page's pipeline ranks and lanes; that every
memory bar's parts, less the device's lines, sum to the JSON's per-rank
"total"; that each rank's compute-lane events tile [0, its finish] (each
starts where the last ended, within 1e-8 of the step) and that the last
finish is the JSON's predicted step time (1e-8 relative: the page writes
its numbers with 9 significant digits, tools/html_page.c, so a figure is
off by up to 5e-9 of itself). Exit 1 on any mismatch."""
import json
import re
import sys

page = open(sys.argv[1], encoding="utf-8").read()
m = re.search(r'<script type="application/json" id="plan-data">(.*?)</script>', page, re.S)
d = json.loads(m.group(1))
plan = json.load(open(sys.argv[2]))
bad = 0


TOL = 1e-8  # 9 significant digits on the page


def fail(what):
    global bad
    print("MISMATCH:", what)
    bad += 1


t = d["timeline"]
print(f"pipeline ranks {len(t['ranks'])}, queues {' '.join(t['queues'])}")
parts = d["memory"]["parts"]
device = parts.index("device runtime")
for bar, row in zip(d["memory"]["bars"], plan["pipeline"]["ranks"]):
    got = sum(bar["bytes"]) - bar["bytes"][device]
    if got != row["total"]:
        fail(f"{bar['label']}: bar {got} bytes, plan --train --json total {row['total']}")
print(f"bars {len(d['memory']['bars'])} equal the json totals")
step = t["step_s"]
for q, r in enumerate(t["ranks"]):
    at = 0.0
    for e in t["events"]:
        if e[0] != q or e[1] != -1:
            continue
        if abs(e[8] - at) > TOL * step:
            fail(f"pipeline rank {q}: an event starts at {e[8]}, the last ended at {at}")
        at = e[9]
    if abs(at - r["finish_s"]) > TOL * step:
        fail(f"pipeline rank {q}: events end at {at}, the rank finishes at {r['finish_s']}")
want = plan["predicted"]["step_time_s"]
if abs(step - want) > TOL * want or abs(max(r["finish_s"] for r in t["ranks"]) - want) > TOL * want:
    fail(f"step {step} against the json's {want}")
print("compute lanes tile each rank's step; the step is the json's")
sys.exit(1 if bad else 0)
