"""plan/train_bf16_tp.test: the bf16 step at tp=2 (argv[2]) has the fp32 step's
(argv[1]) parameter bytes, collective counts and fallbacks to replicated
(as many values not split and nodes computed whole) and, when the bf16 step on
one rank is given (argv[3]), half its parameters, to within the replicated
norms and biases (1 %: GPT-1.5B's; the small GPT-2 sample's replicated
embedding and norms are more, so it is compared with fp32 only)."""
import json
import sys

f32, bf16 = (json.load(open(p)) for p in sys.argv[1:3])
count = lambda r: {(c["op"], c["axes"]): c["count"] for c in r["collectives"]}  # noqa: E731
ok = True
if bf16["live"]["params"] != f32["live"]["params"]:
    print("params per rank: bf16 %d, fp32 %d" % (bf16["live"]["params"], f32["live"]["params"]))
    ok = False
if count(bf16) != count(f32) or not count(bf16):
    print("collectives: bf16 %s, fp32 %s" % (count(bf16), count(f32)))
    ok = False
fallbacks = lambda r: (r["fallbacks"]["values"], r["fallbacks"]["nodes"])  # noqa: E731
if fallbacks(bf16) != fallbacks(f32):
    print("fallbacks (values, nodes): bf16 %s, fp32 %s" % (fallbacks(bf16), fallbacks(f32)))
    ok = False
if len(sys.argv) > 3:
    half = bf16["live"]["params"] / json.load(open(sys.argv[3]))["live"]["params"]
    if not 0.5 <= half <= 0.51:
        print("params per rank over one rank's: %.4f, want 0.5 .. 0.51" % half)
        ok = False
print("ok" if ok else "FAILS")
sys.exit(0 if ok else 1)
