"""edit_plan.py IN OUT EDIT — a hand edit of a plan written by `shardc plan --json`
(tests/lit/plan/edited.test). EDIT is one of the names below."""
import json
import sys

EDITS = {
    "tp3": lambda p: p["mesh"].update(axes="tp=3,pp=2"),
    "first-to-1": lambda p: p["pipeline"]["node_stages"].update({"/m/transformer/Reshape": 1}),
    "drop-node": lambda p: p["pipeline"]["node_stages"].pop("/m/transformer/Add"),
    "neg-stage": lambda p: p["pipeline"]["node_stages"].update({"/m/transformer/Add": -1}),
    "node-output": lambda p: p["shardings"].update({"/m/transformer/Add_output_0": "[_,_,tp]"}),
    "rank": lambda p: p["shardings"].update({"transformer.h.0.mlp.c_fc.bias": "[_,tp]"}),
    "microbatches3": lambda p: p["pipeline"].update(microbatches=3),
    "virtual-stages": lambda p: p["pipeline"].update(virtual_stages=2),
    "no-role": lambda p: p["mesh"].update(axes="tp=2,pp=2,zz=2"),
}

plan = json.load(open(sys.argv[1]))
EDITS[sys.argv[3]](plan)
json.dump(plan, open(sys.argv[2], "w"), indent=2)
