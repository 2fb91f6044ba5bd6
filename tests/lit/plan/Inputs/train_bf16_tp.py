"""plan/train_bf16_tp.test: the bf16 step at tp=2 (argv[2]) has the fp32 step's
(argv[1]) parameter bytes and collective counts, and half the parameters of
the bf16 step on one rank (argv[3]), to within the replicated norms and
biases (1 %)."""
import json
import sys

f32, bf16, one = (json.load(open(p)) for p in sys.argv[1:4])
count = lambda r: {(c["op"], c["axes"]): c["count"] for c in r["collectives"]}  # noqa: E731
ok = True
if bf16["live"]["params"] != f32["live"]["params"]:
    print("params per rank: bf16 %d, fp32 %d" % (bf16["live"]["params"], f32["live"]["params"]))
    ok = False
if count(bf16) != count(f32) or not count(bf16):
    print("collectives: bf16 %s, fp32 %s" % (count(bf16), count(f32)))
    ok = False
half = bf16["live"]["params"] / one["live"]["params"]
if not 0.5 <= half <= 0.51:
    print("params per rank over one rank's: %.4f, want 0.5 .. 0.51" % half)
    ok = False
print("ok" if ok else "FAILS")
sys.exit(0 if ok else 1)
