"""Checks of tests/lit/plan/recompute_bf16.test: F32 B16 NONE are plan
--train --json of gpt2 with selective recompute in fp32 and bf16 and with
no recompute in bf16."""
import json
import sys


def load(p):
    with open(p) as f:
        return json.load(f)


f32, b16, none = (load(p) for p in sys.argv[1:4])
r32, r16 = f32["recompute"], b16["recompute"]
assert r32["kind"] == r16["kind"] == "selective", (r32, r16)
assert r32["blocks"] == r16["blocks"] == 2, (r32, r16)
# the same cores: the same recomputed FLOPs, and at least the same nodes
# (plus the casts of the bf16 step)
assert r32["nodes"] > 0 and r16["nodes"] >= r32["nodes"], (r32, r16)
assert r16["flops"] == r32["flops"] > 0, (r32, r16)
assert b16["saved_activations"] < none["saved_activations"], (b16["saved_activations"],
                                                               none["saved_activations"])
print("bf16 selective ok: %d nodes, %d bytes saved against %d" % (
    r16["nodes"], b16["saved_activations"], none["saved_activations"]))
