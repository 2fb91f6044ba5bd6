"""bench_partition.py — how fast partitioning is, and what it costs in memory.

Figures printed (never fails on a time; `make bench` runs it):
  1. GPT-2 sample at dp=2 x tp=2 x pp=2 (8 ranks, batch 4):
     a. `shardc plan` (import, canonical passes, seeds, stages, localize,
        pipeline split, lowering and memory plan of both stage programs):
        median wall time of N runs, process start included;
     b. `shardc run --mesh` end to end (the above, plus JIT-compiling both
        stage programs, 8 rank threads and the run itself): median wall time.
     Target: partitioning + codegen under 2 s (b bounds it from above).
  2. `shardc plan` of the shape-only 1.5B GPT (samples/gpt_1p5b.onnx,
     --no-weights) at tp=8 x pp=8 (64 ranks): median wall time and peak RSS.
     Targets: < 2 s and < 500 MB.
  3. Latency of GPT-2 (batch 8) on this machine's cores: one rank (all
     threads) against 2 ranks (one thread each) at tp=2, dp=2, pp=2 and
     pp=2 with 4 microbatches: `shardc run --repeat 50 --warmup 5`, median.
     No target: it shows what each split costs or saves here.

usage: bench_partition.py [--shardc build/shardc] [--runs N]
"""
import argparse
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_inspect import run_once, SRC  # noqa: E402


def measure(cmd, runs):
    times, rss = [], []
    for _ in range(runs):
        t, r, rc = run_once(cmd)
        if rc != 0:
            print(f"FAILED ({rc}): {' '.join(cmd)}")
            return None, None
        times.append(t)
        rss.append(r)
    return statistics.median(times), max(rss)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shardc", default=os.path.join(SRC, "build", "shardc"))
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    gpt2 = os.path.join(SRC, "samples", "gpt2.onnx")
    big = os.path.join(SRC, "samples", "gpt_1p5b.onnx")
    mesh = ["--mesh", "pp=2,dp=2,tp=2", "--dim", "batch=4"]
    t, r = measure([a.shardc, "plan", gpt2] + mesh, a.runs)
    if t is not None:
        print(f"gpt2 dp2xtp2xpp2 plan (partition + lowering + memory plan): median {t*1e3:.0f} ms, "
              f"peak RSS {r/2**20:.1f} MiB (target < 2 s: {t/2:.2f} of it)")
    with tempfile.TemporaryDirectory() as tmp:
        t, r = measure([a.shardc, "run", gpt2, "--random-inputs", "1", "--quiet",
                        "--output-dir", tmp] + mesh, a.runs)
    if t is not None:
        print(f"gpt2 dp2xtp2xpp2 run end to end (+ JIT, 8 ranks, run): median {t*1e3:.0f} ms, "
              f"peak RSS {r/2**20:.1f} MiB (target < 2 s: {t/2:.2f} of it)")
    t, r = measure([a.shardc, "plan", big, "--no-weights", "--mesh", "tp=8,pp=8",
                    "--dim", "batch=1"], a.runs)
    if t is not None:
        print(f"gpt_1p5b tp8xpp8 plan --no-weights (64 ranks): median {t*1e3:.0f} ms "
              f"(target < 2 s: {t/2:.3f} of it), peak RSS {r/2**20:.1f} MiB "
              f"(target < 500 MB: {r/500e6:.2f} of it)")
    import re
    import subprocess
    base = None
    for mesh in [[], ["--mesh", "tp=2"], ["--mesh", "dp=2"], ["--mesh", "pp=2"],
                 ["--mesh", "pp=2", "--microbatches", "4"]]:
        with tempfile.TemporaryDirectory() as tmp:
            r = subprocess.run([a.shardc, "run", gpt2, "--dim", "batch=8", "--random-inputs",
                                "1", "-q", "--output-dir", tmp, "--repeat", "50", "--warmup",
                                "5"] + mesh, capture_output=True, text=True)
        m = re.search(r"run: median ([0-9.]+) ms", r.stderr)
        if r.returncode != 0 or not m:
            print(f"FAILED: gpt2 latency {' '.join(mesh)}: {r.stderr[-300:]}")
            continue
        t = float(m.group(1))
        base = base or t
        print(f"gpt2 batch 8 latency {' '.join(mesh) or '(one rank)':28s} median {t:7.3f} ms "
              f"({t / base:.2f}x the one-rank run)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
