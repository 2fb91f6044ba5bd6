"""bench_fused_train.py — the training step's memory-bound kernels, two shardc builds compared.

Figures printed (never fails on a time): for a GPT-2 graph of GPT-2 small's
shape (samples/make_samples.py's build_gpt2_graph: 12 layers, d 768, 12
heads, vocabulary 50257; sequence --seq, default 128) with seeded random
weights, trained one step at a time on the CPU with
`shardc train --optimizer adamw --lr 1e-4 --threads T` on the same batch
every step, for each shardc given (--shardc, and --baseline when given, e.g.
a build of the commit before the fused kernels):

  - kernels per step: the kernel steps of `shardc compile --train`'s
    program.json (and the GEMM, attention and other steps beside them);
  - step time: the median `time_ms` of the --log-json lines after --warmup
    steps, and the baseline's over this build's (a ratio above 1: this build
    is faster);
  - the step-1 loss of each (the same model and batch: they agree within
    float rounding where the arithmetic order differs);
  - the arena of `shardc plan --train --json` (the step's planned memory).

The model is written once into --cache (~500 MB, not committed) and reused;
--layers makes a shorter model of the same width (a quicker run). Needs
onnx and numpy (the .venv), not torch.

usage: bench_fused_train.py [--shardc build/shardc] [--baseline OTHER/shardc]
                            [--layers 12] [--seq 128] [--batch 1] [--steps 4]
                            [--warmup 1] [--threads 2] [--precision fp32|bf16]
                            [--cache DIR]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(SRC, "samples"))


def gpt2_small(layers, seq, cache):
    """The model file (written on first use): GPT-2 small's shape with
    `layers` layers, weights N(0, 0.02) from numpy's default_rng(7), norms'
    weights 1 and biases 0."""
    path = os.path.join(cache, f"gpt2-small-L{layers}-S{seq}.onnx")
    if os.path.exists(path):
        return path
    import onnx
    import make_samples
    c = dict(vocab=50257, n_positions=1024, n_embd=768, n_head=12, n_layer=layers, seq=seq)
    rng = np.random.default_rng(7)
    w = {}
    for name, shape in make_samples.gpt2_param_shapes(c):
        if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
            w[name] = np.ones(shape, np.float32)
        elif name.endswith(".bias"):
            w[name] = np.zeros(shape, np.float32)
        else:
            w[name] = rng.normal(0, 0.02, shape).astype(np.float32)
    model, _ = make_samples.build_gpt2_graph(c, weights=w)
    os.makedirs(cache, exist_ok=True)
    print(f"writing {path} (once; reused from the cache)", flush=True)
    onnx.save(model, path + ".tmp")
    os.replace(path + ".tmp", path)
    return path


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=3600)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])} failed ({p.returncode}): "
                           f"{p.stderr.decode(errors='replace').strip()[-600:]}")
    return p.stdout.decode(errors="replace")


def kernels(exe, model, a, folder):
    """{step kind: count} of the compiled step's program.json."""
    out = os.path.join(folder, "bundle")
    run([exe, "compile", model, "--train", "--dim", f"batch={a.batch}", "--optimizer", "adamw",
         "--precision", a.precision, "-o", out])
    steps = json.load(open(os.path.join(out, "program.json")))["steps"]
    kinds = {}
    for s in steps:
        kinds[s["kind"]] = kinds.get(s["kind"], 0) + 1
    return kinds


def train(exe, model, data, a, folder):
    """(median ms of the timed steps, step-1 loss)."""
    log = os.path.join(folder, "log.json")
    run([exe, "train", model, "--data", f"input_ids={data[0]}", "--labels", data[1],
         "--dim", f"batch={a.batch}", "--steps", str(a.warmup + a.steps), "--optimizer", "adamw",
         "--lr", "1e-4", "--precision", a.precision, "--log-json", log, "--threads",
         str(a.threads)])
    lines = [json.loads(ln) for ln in open(log) if ln.strip()]
    return statistics.median(ln["time_ms"] for ln in lines[a.warmup:]), lines[0]["loss"]


def arena(exe, model, a):
    p = subprocess.run([exe, "plan", model, "--train", "--dim", f"batch={a.batch}", "--optimizer",
                        "adamw", "--precision", a.precision, "--json"],
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=1800)
    try:
        return json.loads(p.stdout)["arena"] if p.returncode == 0 else None
    except (ValueError, KeyError):
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shardc", default=os.environ.get("SHARDC", os.path.join(SRC, "build", "shardc")))
    ap.add_argument("--baseline", help="another shardc to compare with")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--cache", default=os.path.join(SRC, "build", "bench-cache"))
    a = ap.parse_args()
    model = gpt2_small(a.layers, a.seq, a.cache)
    builds = [("this", a.shardc)] + ([("baseline", a.baseline)] if a.baseline else [])
    rows = {}
    with tempfile.TemporaryDirectory() as d:
        rng = np.random.default_rng(11)
        data = (os.path.join(d, "ids.npy"), os.path.join(d, "labels.npy"))
        for f in data:
            np.save(f, rng.integers(0, 50257, (a.batch, a.seq), dtype=np.int64))
        for tag, exe in builds:
            folder = os.path.join(d, tag)
            os.makedirs(folder)
            k = kernels(exe, model, a, folder)
            ms, loss = train(exe, model, data, a, folder)
            rows[tag] = (k, ms, loss, arena(exe, model, a))
    print(f"\nGPT-2 small shape, {a.layers} layers, batch {a.batch}, sequence {a.seq}, "
          f"{a.precision}, adamw, {a.threads} threads; median of {a.steps} steps after {a.warmup}")
    print(f"{'build':<9} {'kernels':>8} {'other steps':>24} {'step ms':>9} {'loss 1':>10} "
          f"{'arena MiB':>10}")
    for tag, (k, ms, loss, ar) in rows.items():
        other = ", ".join(f"{n} {c}" for n, c in sorted(k.items()) if n != "kernel")
        ars = f"{ar / 2**20:10.1f}" if ar else "       n/a"
        print(f"{tag:<9} {k.get('kernel', 0):>8} {other:>24} {ms:>9.1f} {loss:>10.5f} {ars}")
    if "baseline" in rows:
        print(f"step time, baseline / this: {rows['baseline'][1] / rows['this'][1]:.2f}; kernels "
              f"{rows['baseline'][0].get('kernel', 0)} -> {rows['this'][0].get('kernel', 0)}")


if __name__ == "__main__":
    main()
