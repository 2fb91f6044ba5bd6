"""auto_reduce_dtype.test's check: BF16.json (--reduce-dtype bf16) and
FP32.json (the default) of the same search. The chosen plan's replay and
plan file carry the option in the first and not in the second; dp=2,
compiled exactly in both, is predicted as `plan --mesh dp=2` with the
same options predicts it, and differently in the two (the all-reduces'
dtype), so the exact candidates were built with the option."""
import json
import sys

bf16, fp32 = (json.load(open(p))["auto"] for p in sys.argv[1:3])
assert "--reduce-dtype bf16" in bf16["chosen"]["replay"], bf16["chosen"]["replay"]
assert bf16["chosen"]["plan"]["training"]["reduce_dtype"] == "bf16"
assert "--reduce-dtype" not in fp32["chosen"]["replay"], fp32["chosen"]["replay"]
assert fp32["chosen"]["plan"]["training"]["reduce_dtype"] == "fp32"


def dp2(a):
    got = [c for c in a["candidates"] if c["exact"] and c["mesh"]["dp"] == 2]
    assert got, "dp=2 was not compiled exactly"
    return got[0]["predicted"]["step_time_s"]


b, f = dp2(bf16), dp2(fp32)
assert b > 0 and f > 0 and abs(b - f) > 1e-3 * f, (b, f)
print(f"dp=2 exact: {b * 1e6:.3f} us reduced in bf16, {f * 1e6:.3f} us in fp32")
