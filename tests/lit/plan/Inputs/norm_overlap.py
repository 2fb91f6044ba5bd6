"""The last microbatch's weight work runs in each chunk's norm piece, beside
the data-parallel reductions of the gradients it finishes: from `plan
--html`'s timeline (the simulated events of every pipeline rank), for
pipeline rank 0's norm piece, the seconds of data-parallel collectives that
ran while its compute queue computed (hidden) against its compute there.

    norm_overlap.py PAGE.html MIN_FRACTION

Exit 1 unless hidden >= MIN_FRACTION x that compute (and both > 0)."""
import json
import sys

page = open(sys.argv[1]).read()
start = page.index('id="plan-data">') + len('id="plan-data">')
tl = json.loads(page[start:page.index("</script>", start)])["timeline"]
NORM = 3  # ir/pipe.h: forward, backward, weight, norm, update
dp = tl["queues"].index("dp")
busy = [k for k, name in enumerate(tl["kinds"]) if name in ("compute", "optimizer")]
mine = [e for e in tl["events"] if e[0] == 0 and e[3] == NORM]
computing = [(e[8], e[9]) for e in mine if e[1] == -1 and e[2] in busy]
reducing = [(e[8], e[9]) for e in mine if e[1] == dp and tl["kinds"][e[2]] == "collective"]
compute = sum(b - a for a, b in computing)
hidden = sum(max(0.0, min(b, d) - max(a, c)) for a, b in reducing for c, d in computing)
print(f"rank 0 norm piece: compute {compute * 1e3:.3f} ms, dp collectives "
      f"{sum(b - a for a, b in reducing) * 1e3:.3f} ms, of them beside compute "
      f"{hidden * 1e3:.3f} ms")
ok = compute > 0 and hidden >= float(sys.argv[2]) * compute
print("ok" if ok else "FAIL: the reductions do not run beside the weight work")
sys.exit(0 if ok else 1)
