"""The page of `plan --train --auto --html` against the page `plan --train
--mesh ... --html` draws for the plan --auto chose, on the same cluster:
html_same.py SHARDC MODEL AUTO.json AUTO.html OUT.html ARGS...

ARGS are the options both commands share (--cluster, --precision,
--optimizer); the chosen plan's options and its batch come from AUTO.json.
The two pages' data (the JSON each embeds, tools/plan_html.c) must be equal
but for the title ("command") and the --auto table ("candidates"): the
summary, the capacity, every memory bar (on a GPU cluster the CUDA
device's lines: workspace, context, NCCL's buffers; none on a plan whose
ranks run no collective, only pipeline hand-offs), the timeline and the
collectives. Prints, for FileCheck, what was compared; exit 1 on any
difference, naming the key."""
import json
import re
import subprocess
import sys

shardc, model, auto_json, auto_html, out_html = sys.argv[1:6]
shared = sys.argv[6:]


def data(path):
    page = open(path, encoding="utf-8").read()
    m = re.search(r'<script type="application/json" id="plan-data">(.*?)</script>', page, re.S)
    return json.loads(m.group(1))


auto = json.load(open(auto_json))["auto"]
chosen = auto["chosen"]
batch = chosen["micro_batch_size"] * chosen["microbatches"] * chosen["mesh"]["dp"] * \
    chosen["mesh"]["fsdp"]
# the weights as the search read them (--no-weights for a shape-only model)
weights = ["--no-weights"] if "--no-weights" in chosen["replay"].split() else []
cmd = [shardc, "plan", model, "--train", *weights, "--dim", f"batch={batch}"] + \
    chosen["options"].split() + shared + ["--html", out_html]
subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
a, b = data(auto_html), data(out_html)
bad = 0
for key in sorted(set(a) | set(b)):
    if key in ("command", "candidates"):
        continue
    if a.get(key) != b.get(key):
        print(f"MISMATCH: {key}: --auto's {json.dumps(a.get(key))[:400]} against --mesh's "
              f"{json.dumps(b.get(key))[:400]}")
        bad += 1
if not a.get("candidates") or sum(c["chosen"] for c in a["candidates"]) != 1:
    print("MISMATCH: the --auto page has no table with one chosen row")
    bad += 1
device = a["memory"]["parts"].index("device runtime")
# NCCL's buffers are counted per collective's communicator; a plan whose
# ranks only hand values to their pipeline neighbours has none (its
# point-to-point buffers are not modelled: docs/planner.md)
lines = [x["bytes"][device] > 0 for x in a["memory"]["bars"]]
only_p2p = all(r["axes"] == "pp" for r in a["collectives"]["rows"])
print(f"chosen {chosen['options']}; bars {len(a['memory']['bars'])}, device lines "
      f"{'yes' if all(lines) else 'none: pipeline hand-offs only' if only_p2p and not any(lines) else 'no'}; "
      f"pages equal but title and table: {'yes' if not bad else 'no'}")
sys.exit(1 if bad else 0)
