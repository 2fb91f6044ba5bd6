"""bench_megatron.py — the planner's predicted step against Megatron-LM's
published figures.

For every configuration of samples/make_gpt_shapes.py (Megatron-LM's
weak-scaling tables: A100, SC'21; H100, its README) it generates the
shape-only GPT, runs

    shardc plan MODEL --train --no-weights --cluster PRESET:8xN
        --mesh pp=P,dp=D,tp=T --schedule 1f1b --microbatches M
        --precision bf16 --optimizer adamw --recompute R --dim batch=B --json

with the published mesh and global batch (M: the batch of a data-parallel
replica in microbatches of one sequence; R: full for the A100 rows, whose
published FLOP count includes the recomputed forward, none for the H100
rows, whose figure is model FLOPs), and prints per row: model, GPUs, batch,
the plan (mesh, microbatches), the published TFLOP/s per GPU, the
predicted one (`predicted.flops_per_s_per_gpu`), their ratio, and how long
`plan` took. Figures and ratios only: it never fails on a value (the test
models.test_megatron_table asserts the 20 % band). `make bench` runs it.

usage: bench_megatron.py [--shardc build/shardc] [--only NAME,...] [--out DIR]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "samples"))
from make_gpt_shapes import CONFIGS, write  # noqa: E402


def mesh_of(c):
    """The published mesh, pp outermost (the planner's order rule)."""
    return ",".join(f"{k}={c[k]}" for k in ("pp", "dp", "tp") if c[k] > 1) or "dp=1"


def plan_args(c):
    """`shardc plan` arguments (after the model) for configuration c."""
    nodes = max(1, c["gpus"] // 8)
    args = ["--train", "--no-weights", "--cluster", f"{c['cluster']}:8x{nodes}",
            "--mesh", mesh_of(c), "--precision", "bf16", "--optimizer", "adamw",
            "--recompute", "full" if c["table"] == "a100" else "none",
            "--dim", f"batch={c['batch']}", "--json"]
    if c["pp"] > 1:
        args += ["--schedule", "1f1b", "--microbatches", str(c["microbatches"])]
    return args


def predict(shardc, model_dir, c, timeout=600):
    """Runs the plan of c (its model already in model_dir). Returns a dict:
    rc, seconds, predicted (TFLOP/s per GPU or None), step_s, stderr,
    command."""
    cmd = [shardc, "plan", os.path.join(model_dir, c["name"] + ".onnx")] + plan_args(c)
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    out = {"rc": p.returncode, "seconds": time.perf_counter() - t, "predicted": None,
           "step_s": None, "stderr": p.stderr[-1000:], "command": cmd}
    if p.returncode == 0:
        pr = json.loads(p.stdout).get("predicted") or {}
        if pr.get("flops_per_s_per_gpu"):
            out["predicted"] = pr["flops_per_s_per_gpu"] / 1e12
            out["step_s"] = pr.get("step_time_s")
    return out


def header():
    return (f"{'model':10s} {'GPUs':>5s} {'batch':>5s} {'plan':24s} {'published':>9s} "
            f"{'predicted':>9s} {'ratio':>6s} {'plan s':>7s}")


def row(c, r):
    plan = mesh_of(c) + (f" M={c['microbatches']}" if c["pp"] > 1 else "")
    pred = f"{r['predicted']:9.1f}" if r["predicted"] else f"{'-':>9s}"
    ratio = f"{r['predicted'] / c['published_tflops']:6.3f}" if r["predicted"] else f"{'-':>6s}"
    return (f"{c['name']:10s} {c['gpus']:5d} {c['batch']:5d} {plan:24s} "
            f"{c['published_tflops']:9.1f} {pred} {ratio} {r['seconds']:7.2f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shardc", default=os.path.join(HERE, "..", "build", "shardc"))
    ap.add_argument("--only", default="")
    ap.add_argument("--out", default="", help="keep the models here (default: a temporary folder)")
    a = ap.parse_args()
    names = [s for s in a.only.split(",") if s] or list(CONFIGS)
    with tempfile.TemporaryDirectory() as tmp:
        out = a.out or tmp
        os.makedirs(out, exist_ok=True)
        t = time.perf_counter()
        for n in names:
            write(CONFIGS[n], out)
        print(f"generated {len(names)} shape-only models in {time.perf_counter() - t:.2f} s")
        print("predicted = shardc plan --train's predicted.flops_per_s_per_gpu (TFLOP/s per "
              "GPU); published: samples/make_gpt_shapes.py, docs/planner.md")
        print(header())
        for n in names:
            c = CONFIGS[n]
            r = predict(a.shardc, out, c)
            print(row(c, r), flush=True)
            if r["rc"] != 0:
                print(f"  plan failed ({r['rc']}): {r['stderr'].strip()}")


if __name__ == "__main__":
    main()
