"""The page of `plan --auto --html` against the same run's --json:
html_auto.py PAGE.html AUTO.json KIND.

Prints, for FileCheck: the page's kind (its summary's "plan" line), the
candidates' count and that each row equals the JSON's candidate of that
rank (options, the step time within 1e-8 relative (the page's 9 digits), exact, why; only the
chosen one marked chosen), that the page's predicted step is the chosen
plan's exact one (1e-9 relative) and, for inference, that the one memory
bar per stage sums, less the device's lines, to the chosen plan's peak per
rank. Exit 1 on any mismatch."""
import json
import re
import sys

page = open(sys.argv[1], encoding="utf-8").read()
m = re.search(r'<script type="application/json" id="plan-data">(.*?)</script>', page, re.S)
d = json.loads(m.group(1))
auto = json.load(open(sys.argv[2]))["auto"]
bad = 0


def fail(what):
    global bad
    print("MISMATCH:", what)
    bad += 1


def close(a, b):
    # the page writes 9 significant digits (plan_html.c's JSON_REAL_PRECISION(9)): 1e-8 relative
    return abs(a - b) <= 1e-8 * abs(b)


print("kind", dict(d["summary"]).get("plan"))
rows, want = d["candidates"] or [], auto["candidates"]
print(f"candidates {len(rows)} of {len(want)}")
if len(rows) != len(want):
    fail("the candidates' count")
chosen = auto["chosen"]
for i, (r, c) in enumerate(zip(rows, want)):
    if r["plan"] != c["options"] or r["why"] != c["why"] or r["exact"] != c["exact"]:
        fail(f"row {i}: {r} against {c}")
    if not close(r["step_s"], c["predicted"]["step_time_s"]):
        fail(f"row {i}: step {r['step_s']} against {c['predicted']['step_time_s']}")
    if r["chosen"] != (c["options"] == chosen["options"] and c["why"] == "chosen"):
        fail(f"row {i}: chosen {r['chosen']}")
print(f"rows equal the json's; chosen {sum(r['chosen'] for r in rows)}")
step = chosen["predicted"]["step_time_s"]
if not close(d["timeline"]["step_s"], step):
    fail(f"the page's step {d['timeline']['step_s']} against the chosen plan's {step}")
print("the page's step is the chosen plan's")
if d["summary"] and dict(d["summary"]).get("plan") == "inference":
    device = d["memory"]["parts"].index("device runtime")
    peak = max(sum(b["bytes"]) - b["bytes"][device] for b in d["memory"]["bars"])
    if peak != chosen["predicted"]["peak_bytes_per_rank"]:
        fail(f"the bars' peak {peak} against {chosen['predicted']['peak_bytes_per_rank']}")
    print(f"bars {len(d['memory']['bars'])}, the largest the chosen plan's peak per rank")
sys.exit(1 if bad else 0)
