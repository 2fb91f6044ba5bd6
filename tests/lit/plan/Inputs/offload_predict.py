"""Checks the predicted step of a plan with activation offloading
(codegen/dist_sim.h: the copies on a copy queue over the host link).

  offload_predict.py BASE.json OFF.json OFF.txt HOST_LINK [pipelined]

BASE and OFF: `plan --train --cluster ... --json` without and with
--offload-activations; OFF.txt: OFF's text report. Per pipeline rank that
offloads, the text's copies line moves exactly twice the bytes it parks a
step (each offloaded microbatch copy out and back: the plan's offload
bytes) and takes that over HOST_LINK bytes/s (to the printed precision);
the critical rank's breakdown has its wait for them under
exposed_comm_s["host"], > 0 here (the sample's compute hides little);
the step is longer than BASE's, and without a pipeline by exactly that
wait (the same steps, the copies added). Exits 1 with the figures when a
relation does not hold."""
import json
import math
import re
import sys

UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


base, off = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
text, link = open(sys.argv[3]).read(), float(sys.argv[4])
pipelined = len(sys.argv) > 5 and sys.argv[5] == "pipelined"
if pipelined:
    parked = {q: r["offload"]["bytes"] for q, r in enumerate(off["pipeline"]["ranks"])
              if r["offload"]["bytes"] > 0}
else:
    parked = {0: off["offload"]["bytes"]}
lines = re.findall(r"copies: pipeline rank (\d+) moves .*? \((\d+) bytes\) a step over the "
                   r"host link .*? in ([\d.]+) (s|ms|us) ", text)
got = {int(q): (int(b), float(t) * UNITS[u]) for q, b, t, u in lines}
if sorted(got) != sorted(parked) or not parked:
    fail(f"copies lines for ranks {sorted(got)}, offloading ranks {sorted(parked)}")
for q, (moved, secs) in got.items():
    want = moved / link
    if moved != 2 * parked[q] or abs(secs - want) > max(5e-4 * want, 5e-10):
        fail(f"rank {q}: moves {moved} bytes in {secs!r} s; parks {parked[q]}: want "
             f"{2 * parked[q]} bytes in {2 * parked[q] / link!r} s")
pb, po = base["predicted"], off["predicted"]
host = po["breakdown"]["exposed_comm_s"].get("host", 0)
if "host" in pb["breakdown"]["exposed_comm_s"] or not (host > 0 and math.isfinite(host)):
    fail(f"exposed copies {host!r} with offloading, {pb['breakdown']} without")
if not po["step_time_s"] > pb["step_time_s"]:
    fail(f"step {po['step_time_s']!r} with offloading, {pb['step_time_s']!r} without")
if not pipelined and abs(po["step_time_s"] - pb["step_time_s"] - host) > 1e-9 * po["step_time_s"]:
    fail(f"step {po['step_time_s']!r} != {pb['step_time_s']!r} + copies {host!r}")
print(f"ok: step {pb['step_time_s']:.6g} -> {po['step_time_s']:.6g} s, copies exposed "
      f"{host:.6g} s; moved {sorted(got.items())}")
