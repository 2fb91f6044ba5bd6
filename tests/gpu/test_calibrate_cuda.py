"""test_calibrate_cuda.py — `shardc calibrate --device cuda` (docs/planner.md,
section 5) on the emulated GPU (SHARDC_CUDA_EMU=1: the fake driver, the
kernels compiled for the host, the host GEMM in place of cuBLASLt), or on the
real driver with SC_CUDA_REAL=1 (tests/gpu/run-all.sh's planner section).

  * `calibrate --device cuda --quick -o FILE` exits 0 and writes a profile
    of device kind "cuda" with the GPU's name (the fake driver's says
    "emulated"), one thread, the GEMM grid {256, 1024}^3 in fp32 and bf16
    (16 rows), each row's seconds equal to 2mnk / its rate, a positive
    memory bandwidth and step overhead, the fused attention's rows (fp32
    and bf16, forward and backward, 2 heads x 256 x 256, head dim 64,
    causal; each rate its FLOPs over its seconds), and no communicator (one process on
    one GPU has none of 2+ ranks); the emulated GPU writes no context_bytes
    (its figure is no driver's), a real one a positive one;
  * shardc reads it back strictly: `plan --train --cluster h200:1x1@FILE`
    predicts a step time with the profile's figures, and a step with a
    fused attention (samples/gpt2.onnx fuses its core) takes longer with
    the profile's attention rate divided by 10 than with it (the rows are
    what the simulator times the kernel by);
  * without a driver (SHARDC_CUDA_EMU=0 where libcuda.so.1 cannot be
    loaded) it exits 1 with "calibrate --device cuda: no CUDA driver" and
    writes nothing.
The emulated timings measure the host, not a GPU: the figures are checked
for form, not for speed.

Environment: SHARDC, SC_SOURCE_DIR, SC_CUDA_REAL. Exit 0 on success, 1 on any
failure, 77 when shardc was built without the CUDA backend.
"""
import ctypes
import json
import math
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "models"))
from checks import check, finish  # noqa: E402

SHARDC = os.environ.get("SHARDC")
SRC = os.environ.get("SC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
REAL = os.environ.get("SC_CUDA_REAL") == "1"


def shardc(args, env):
    e = dict(os.environ)
    e.update(env)
    return subprocess.run([SHARDC] + args, capture_output=True, text=True, timeout=600, env=e)


def main():
    if not SHARDC:
        print("SHARDC is not set")
        return 1
    env = {"SHARDC_CUDA_EMU": "0" if REAL else "1"}
    with tempfile.TemporaryDirectory() as d:
        prof = os.path.join(d, "gpu.json")
        r = shardc(["calibrate", "--device", "cuda", "--quick", "-o", prof], env)
        if r.returncode != 0 and "built without the CUDA backend" in r.stderr:
            print("skip: shardc was built without the CUDA backend")
            return 77
        if not check(r.returncode == 0, f"calibrate --device cuda: exit {r.returncode}: "
                     f"{r.stderr[-600:]}"):
            return finish()
        with open(prof) as f:
            p = json.load(f)
        dev = p["device"]
        check(dev["kind"] == "cuda" and dev["threads"] == 1, f"device {dev}")
        check(("emulated" in dev["name"]) != REAL, f"device name {dev['name']!r}")
        check(("context_bytes" in dev) == REAL and dev.get("context_bytes", 1) > 0,
              f"context_bytes {dev}")
        shapes = {(g["m"], g["n"], g["k"], g["dtype"], g.get("trans_a", False),
                   g.get("trans_b", False)) for g in p["gemm"]}
        want = {(m, n, k, t, ta, tb) for m in (256, 1024) for n in (256, 1024)
                for k in (256, 1024) for t in ("fp32", "bf16")
                for ta, tb in ((False, False), (False, True), (True, False))}
        check(shapes == want and len(p["gemm"]) == 48, f"GEMM rows {sorted(shapes)}")
        for g in p["gemm"]:
            flops = 2.0 * g["m"] * g["n"] * g["k"]
            ok = g["seconds"] > 0 and math.isfinite(g["flops_per_s"]) and g["flops_per_s"] > 0
            check(ok and abs(flops / g["seconds"] - g["flops_per_s"]) <= 1e-6 * g["flops_per_s"],
                  f"GEMM row {g}")
        # the fused attention: a row a dtype and direction at the quick
        # shape (2 heads x 256 x 256, head dim 64, causal), its rate its
        # FLOPs (the backward 2.5 times the forward's) over its seconds
        att = {(a["dtype"], a["grad"]): a for a in p.get("attention", [])}
        check(set(att) == {(t, g) for t in ("fp32", "bf16") for g in (False, True)}
              and len(p.get("attention", [])) == 4, f"attention rows {sorted(att)}")
        for a in att.values():
            flops = 4.0 * a["heads"] * (a["sq"] * (a["sq"] + 1) / 2) * a["d"] * (
                2.5 if a["grad"] else 1)
            ok = (a["heads"], a["sq"], a["d"]) == (2, 256, 64) and a["seconds"] > 0 and \
                math.isfinite(a["flops_per_s"]) and a["flops_per_s"] > 0
            check(ok and abs(flops / a["seconds"] - a["flops_per_s"]) <= 1e-6 * a["flops_per_s"],
                  f"attention row {a}")
        check(p["memory_bytes_per_s"] > 0 and p["step_overhead_s"] > 0,
              f"memory {p['memory_bytes_per_s']}, step {p['step_overhead_s']}")
        check(p["comms"] == [], f"comms {p['comms']}")
        print(f"  {dev['name']}: {len(p['gemm'])} GEMM rows, best fp32 "
              f"{max(g['flops_per_s'] for g in p['gemm'] if g['dtype'] == 'fp32') / 1e9:.3g} "
              f"GFLOP/s, memory {p['memory_bytes_per_s'] / 1e9:.3g} GB/s, "
              f"step {p['step_overhead_s'] * 1e6:.3g} us")

        r = shardc(["plan", os.path.join(SRC, "samples", "gpt2.onnx"), "--train", "--dim",
                    "batch=2", "--no-weights", "--mesh", "dp=1", "--cluster",
                    f"h200:1x1@{prof}"], env)
        check(r.returncode == 0 and "step time:" in r.stdout and "cuda context" in r.stdout,
              f"plan with the profile: exit {r.returncode}: {r.stdout[-400:]} {r.stderr[-400:]}")

        # the attention rows are what the simulator times the kernel by: a
        # tenth of the rate, a longer step
        slow = dict(p, attention=[dict(a, seconds=a["seconds"] * 10,
                                       flops_per_s=a["flops_per_s"] / 10)
                                  for a in p["attention"]])
        slow_prof = os.path.join(d, "slow.json")
        with open(slow_prof, "w") as f:
            json.dump(slow, f)
        times = []
        for pf in (prof, slow_prof):
            r = shardc(["plan", os.path.join(SRC, "samples", "gpt2.onnx"), "--train", "--dim",
                        "batch=2", "--no-weights", "--mesh", "dp=1", "--cluster",
                        f"h200:1x1@{pf}"], env)
            line = [x for x in r.stdout.splitlines() if "step time:" in x]
            fused = "2 cores fused" in r.stdout
            times.append(float(line[0].split()[2]) if r.returncode == 0 and line and fused
                         else math.nan)
        check(times[1] > times[0] > 0, f"step ms with the measured attention and a tenth of "
              f"its rate: {times}")

        try:
            if REAL:
                raise AttributeError
            ctypes.CDLL("libcuda.so.1")
            print("a CUDA driver is installed: the no-driver message is not checked here")
        except AttributeError:
            pass
        except OSError:
            out = os.path.join(d, "none.json")
            r = shardc(["calibrate", "--device", "cuda", "--quick", "-o", out],
                       {"SHARDC_CUDA_EMU": "0"})
            check(r.returncode == 1 and "calibrate --device cuda: no CUDA driver" in r.stderr
                  and not os.path.exists(out),
                  f"no driver: exit {r.returncode}: {r.stderr[-300:]}")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
