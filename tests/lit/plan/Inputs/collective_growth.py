"""collective_growth.py A.json B.json TOL: two `shardc plan --train --json`
reports of a pipelined step; each pipeline rank's bytes sent in
collectives per step in B are within TOL (relative) of A's, and not zero.
Exits 1 with the figures otherwise."""
import json
import sys

a, b = (json.load(open(p))["pipeline"]["ranks"] for p in sys.argv[1:3])
tol = float(sys.argv[3])
ok = len(a) == len(b) > 0
for ra, rb in zip(a, b):
    x, y = ra["collective_sent"], rb["collective_sent"]
    good = x > 0 and abs(y - x) <= tol * x
    print(f"rank {ra['rank']}: {x} vs {y} bytes sent in collectives: {'ok' if good else 'FAILS'}")
    ok = ok and good
sys.exit(0 if ok else 1)
