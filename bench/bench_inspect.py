"""bench_inspect.py — how fast `shardc inspect` is and how much memory it takes.

Figures printed (never fails on a time; `make bench` runs it):
  1. GPT-2 sample (samples/gpt2.onnx): import + canonical passes + report,
     median wall time of N runs of `shardc inspect --json` (process start
     included), and peak RSS. Target: < 50 ms.
  2. The 1.5B-parameter GPT (samples/gpt_1p5b.onnx, --no-weights: shapes
     only): same figures. Targets: < 1 s and < 200 MB peak RSS.
  3. External weights are memory-mapped, not read: a model with ~1 GiB of
     external float32 weights (4 MatMul weights of 256 MiB, written here into
     a temporary folder) is inspected and its peak RSS compared with the size
     of the weight file. Target: RSS far below the file size.

Peak RSS is measured per run with GNU time (%M), else os.wait4.

usage: bench_inspect.py [--shardc build/shardc] [--runs N] [--skip-big]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(HERE)


TIME = "/usr/bin/time" if os.path.exists("/usr/bin/time") else None


def run_once(cmd):
    """(wall seconds, peak RSS bytes, exit status) of one run (see run_capture)."""
    dt, rss, rc, _, _ = run_capture(cmd)
    return dt, rss, rc


def run_capture(cmd, env=None):
    """(wall seconds, peak RSS bytes, exit status, stdout, stderr) of one run.

    The peak RSS comes from GNU time (its child is forked from a small
    process); without it, from os.wait4, which on Linux also counts the RSS
    this Python process had when it forked the child (an overestimate)."""
    with tempfile.NamedTemporaryFile("r", suffix=".rss") as rss_file, \
            tempfile.TemporaryFile() as out:
        full = [TIME, "-f", "%M", "-o", rss_file.name] + cmd if TIME else cmd
        t0 = time.perf_counter()
        p = subprocess.Popen(full, stdout=out, stderr=subprocess.PIPE, env=env)
        err = p.stderr.read().decode(errors="replace")
        _, status, ru = os.wait4(p.pid, 0)
        dt = time.perf_counter() - t0
        p.stderr.close()
        p.returncode = os.waitstatus_to_exitcode(status)
        rss = ru.ru_maxrss * 1024
        if TIME:
            lines = [ln for ln in rss_file.read().split() if ln.isdigit()]
            rss = int(lines[-1]) * 1024 if lines else rss
        out.seek(0)
        text = out.read().decode(errors="replace")
    if p.returncode != 0:
        print(f"  command failed ({p.returncode}): {' '.join(cmd)}\n  {err.strip()[-2000:]}")
    return dt, rss, p.returncode, text, err


def bench(label, cmd, runs, target_s=None, target_rss=None):
    times, rss, rc = [], 0, 0
    for _ in range(runs):
        dt, r, rc = run_once(cmd)
        if rc != 0:
            break
        times.append(dt)
        rss = max(rss, r)
    if not times:
        print(f"{label}: FAILED (exit {rc})")
        return
    med = statistics.median(times)
    line = f"{label}: median {med * 1000:.1f} ms over {len(times)} runs (min {min(times) * 1000:.1f} ms), peak RSS {rss / 2**20:.1f} MiB"
    notes = []
    if target_s is not None:
        notes.append(f"time target < {target_s * 1000:.0f} ms: {'met' if med < target_s else 'NOT met'}")
    if target_rss is not None:
        notes.append(f"RSS target < {target_rss / 1e6:.0f} MB: {'met' if rss < target_rss else 'NOT met'}")
    print(line + ("\n    " + "; ".join(notes) if notes else ""))


def make_big_model(folder, n_weights=4, dim=8192):
    """A chain of MatMuls whose weights (dim x dim float32 each: 256 MiB for
    dim 8192) are external data in one file of real random bytes."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    rng = np.random.default_rng(42)
    bin_path = os.path.join(folder, "weights.bin")
    inits = []
    offset = 0
    with open(bin_path, "wb") as f:
        for i in range(n_weights):
            rows_per_chunk = 512
            for r in range(0, dim, rows_per_chunk):
                f.write(rng.standard_normal((rows_per_chunk, dim), dtype=np.float32).tobytes())
            length = dim * dim * 4
            t = TensorProto()
            t.name = f"layers.{i}.weight"
            t.data_type = TensorProto.FLOAT
            t.dims.extend([dim, dim])
            t.data_location = TensorProto.EXTERNAL
            for k, v in (("location", "weights.bin"), ("offset", str(offset)), ("length", str(length))):
                e = t.external_data.add()
                e.key, e.value = k, v
            offset += length
            inits.append(t)
    nodes, prev = [], "x"
    for i in range(n_weights):
        out = "y" if i == n_weights - 1 else f"h{i}"
        nodes.append(helper.make_node("MatMul", [prev, f"layers.{i}.weight"], [out], name=f"/layers.{i}/MatMul"))
        prev = out
    g = helper.make_graph(nodes, "big_external", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", dim])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", dim])], inits)
    model_path = os.path.join(folder, "big.onnx")
    with open(model_path, "wb") as f:
        f.write(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    return model_path, os.path.getsize(bin_path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shardc", default=os.path.join(SRC, "build", "shardc"))
    ap.add_argument("--runs", type=int, default=11)
    ap.add_argument("--skip-big", action="store_true", help="skip the 1 GiB external-weights check")
    a = ap.parse_args()
    if not os.path.exists(a.shardc):
        print(f"no shardc binary at {a.shardc} (build first)")
        return 1
    print(f"shardc: {a.shardc}")
    bench("GPT-2 sample (import+fold+inspect --json)",
          [a.shardc, "inspect", os.path.join(SRC, "samples", "gpt2.onnx"), "--json", "--dim", "batch=1"],
          a.runs, target_s=0.050)
    bench("GPT 1.5B shape-only (--no-weights)",
          [a.shardc, "inspect", os.path.join(SRC, "samples", "gpt_1p5b.onnx"), "--no-weights", "--json",
           "--dim", "batch=1"],
          max(3, a.runs // 2), target_s=1.0, target_rss=200e6)
    if a.skip_big:
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        model, size = make_big_model(tmp)
        print(f"wrote {size / 2**30:.2f} GiB of external weights in {time.perf_counter() - t0:.1f} s")
        dt, rss, rc = run_once([a.shardc, "inspect", model, "--json", "--dim", "batch=1"])
        if rc == 0:
            print(f"1 GiB external weights: {dt * 1000:.1f} ms, peak RSS {rss / 2**20:.1f} MiB vs weight file "
                  f"{size / 2**20:.0f} MiB (RSS/file = {rss / size:.3f}; target: far below 1)")
        else:
            print("1 GiB external weights: FAILED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
