"""grad_accum_predict.py ONE.json TWO.json FOUR.json: the step predicted
for --grad-accum K runs the program K times (codegen/dist_sim.c, the
schedule's `runs`), the update and the gradients' reductions in the last
run only (a run before it skips what only the update needs:
sc_program_update_steps). So the forward and backward (compute_s) of K = 4
are twice K = 2's, the optimizer's time is once a step (K = 2's),
and the collectives a step are the program's (one reduction of every
gradient) plus, in each run before the last, the loss's two scalars (so
many calls, no more): within
1 % of the program's bytes, and within 5 % of K = 1's (the cut reduces
the position embedding's whole [64, 64] gradient once, 16 KiB, with the
accumulator it joins, not its [1, 16, 64] rows in every run's backward
as well, 4 KiB each); the step of K = 4 is less than twice K = 2's."""
import json
import sys

docs = [json.load(open(f)) for f in sys.argv[1:4]]
one, two, four = (d["predicted"] for d in docs)


def close(a, b, what):
    # the programs of K = 2 and 4 differ but for the mean's constant only
    # where the cut weighs a reduction in the backward K times: a few
    # elementwise steps
    assert abs(a - b) <= 1e-3 * max(abs(a), abs(b)), f"{what}: {a} against {b}"


close(four["breakdown"]["compute_s"], 2 * two["breakdown"]["compute_s"], "compute")
close(four["breakdown"]["optimizer_s"], two["breakdown"]["optimizer_s"], "optimizer")
sent = {k: d["collectives"]["dp"] for k, d in ((1, one), (2, two), (4, four))}
program = sum(c["bytes"] for c in docs[2]["collectives"] if c["axes"] == "dp")
assert sent[4]["bytes"] - program <= 0.01 * sent[1]["bytes"], (sent, program)
assert sent[4]["bytes"] <= 1.05 * sent[1]["bytes"], sent
# a run before the last reduces the loss's two scalars and nothing else
for k, d in ((2, docs[1]), (4, docs[2])):
    calls = sum(c["count"] for c in d["collectives"] if c["axes"] == "dp")
    assert d["predicted"]["collectives"]["dp"]["calls"] == calls + 2 * (k - 1), (k, calls, sent)
assert four["step_time_s"] < 2 * two["step_time_s"], (four["step_time_s"], two["step_time_s"])
assert two["step_time_s"] > one["step_time_s"], (two["step_time_s"], one["step_time_s"])
print(f"K=4 step {four['step_time_s'] * 1e6:.1f} us < 2 x K=2's {two['step_time_s'] * 1e6:.1f}; "
      f"dp bytes a step K=1 {sent[1]['bytes']:.0f}, K=4 {sent[4]['bytes']:.0f}: reduced once")
