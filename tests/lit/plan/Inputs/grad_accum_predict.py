"""grad_accum_predict.py ONE.json TWO.json FOUR.json: the step predicted
for --grad-accum K runs the program K times (codegen/dist_sim.c, the
schedule's `runs`). The programs of K = 2 and K = 4 are the same but for
the mean's constant, so every term of K = 4 is exactly twice K = 2's, and
tokens/s and the MFU are equal; K = 2 is at least twice K = 1 (its runs
add the running gradient sums and the guarded update)."""
import json
import sys

one, two, four = (json.load(open(f))["predicted"] for f in sys.argv[1:4])


def close(a, b, what):
    assert abs(a - b) <= 1e-9 * max(abs(a), abs(b)), f"{what}: {a} against {b}"


close(four["step_time_s"], 2 * two["step_time_s"], "step")
for term in ("compute_s", "optimizer_s", "recompute_s", "bubble_s"):
    close(four["breakdown"][term], 2 * two["breakdown"][term], term)
for axes, s in four["breakdown"]["exposed_comm_s"].items():
    close(s, 2 * two["breakdown"]["exposed_comm_s"][axes], "exposed " + axes)
close(four["tokens_per_s"], two["tokens_per_s"], "tokens/s")
close(four["mfu"], two["mfu"], "mfu")
assert two["step_time_s"] >= 2 * one["step_time_s"], (two["step_time_s"], one["step_time_s"])
print(f"K=4 step {four['step_time_s'] * 1e6:.1f} us = 2 x K=2's; K=2 is "
      f"{two['step_time_s'] / one['step_time_s']:.2f} x K=1's")
