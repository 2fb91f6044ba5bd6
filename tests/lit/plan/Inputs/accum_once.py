"""accum_once.py STEP.json...: `shardc plan --train --cluster C --json`
reports of an unpipelined step of gradient accumulation (--grad-accum K),
each over dp: the collectives the predicted step makes over dp
(`predicted.collectives`, K runs of the program, the runs before the last
skipping what only the update needs) move within 1 % of the program's bytes
over dp (one run's: every gradient reduced once a step), where a step that
reduced them every run would move K times as much. Exits 1 with the figures
otherwise."""
import json
import sys

ok = True
for path in sys.argv[1:]:
    d = json.load(open(path))
    program = sum(c["bytes"] for c in d["collectives"] if c["axes"] == "dp")
    step = d["predicted"]["collectives"]["dp"]
    good = program > 0 and step["bytes"] - program <= 0.01 * program
    print(f"{d['precision']}: {step['calls']} calls, {step['bytes']:.0f} bytes over dp a step, "
          f"the program's {program}: {'reduced once' if good else 'FAILS'}")
    ok = ok and good
sys.exit(0 if ok else 1)
