"""bench_param_init.py — the memory of delayed parameter initialisation.

A shape-only GPT (samples/make_samples.py's build_gpt2_graph: d 1024, 24
layers, 16 heads, vocabulary 50,257, sequence 128; about 355M parameters,
no weight file) trains 2 steps at fsdp=8 on thread-ranks with
`--no-weights --init '*=normal:0.02' --optimizer adamw`: every rank writes
only its own shards (runtime/param_init.h). Printed: the process's peak RSS
(os.wait4), the sum of the shards (fp32 weights, gradients and AdamW's two
moments: 16 bytes a parameter, which the 8 ranks hold between them once),
the ratio of the two, and what 8 whole copies would be. Never fails on a
figure; `make bench` runs it (a few minutes on 2 cores, ~7 GB of memory).

With --recompute full (activation checkpointing, passes/recompute.c) the
ranks keep only each block's input for the backward.

usage: bench_param_init.py [--shardc build/shardc] [--layers N] [--d D]
                           [--recompute none|selective|full]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "samples"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shardc", default=os.path.join(os.path.dirname(HERE), "build", "shardc"))
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--d", type=int, default=1024)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--recompute", default="none", choices=["none", "selective", "full"])
    a = ap.parse_args()
    import onnx
    from make_samples import build_gpt2_graph
    vocab, seq = 50257, 128
    tmp = tempfile.mkdtemp(prefix="sc_bench_param_init_")
    model, _ = build_gpt2_graph(dict(vocab=vocab, n_positions=seq, n_embd=a.d,
                                     n_head=a.d // 64, n_layer=a.layers, seq=seq),
                                external="absent.weights")
    path = os.path.join(tmp, "gpt_shapes.onnx")
    onnx.save(model, path)
    rng = np.random.default_rng(0)
    ids, lab = os.path.join(tmp, "ids.npy"), os.path.join(tmp, "lab.npy")
    np.save(ids, rng.integers(0, vocab, (a.ranks, seq)).astype(np.int64))
    np.save(lab, rng.integers(0, vocab, (a.ranks, seq)).astype(np.int64))
    args = [a.shardc, "train", path, "--no-weights", "--init", "*=normal:0.02", "--dim",
            f"batch={a.ranks}", "--data", f"input_ids={ids}", "--labels", lab, "--steps", "2",
            "--mesh", f"fsdp={a.ranks}", "--optimizer", "adamw", "--recompute", a.recompute]
    out_f = os.path.join(tmp, "out.txt")
    t0 = time.time()
    with open(out_f, "w") as fo:
        p = subprocess.Popen(args, stdout=fo, stderr=subprocess.STDOUT)
        _, status, ru = os.wait4(p.pid, 0)
    secs = time.time() - t0
    out = open(out_f).read()
    print(out)
    if os.waitstatus_to_exitcode(status) != 0:
        print("shardc train failed")
        return 1
    params = int(re.search(r"training (\d+) parameters", out).group(1))
    rss = ru.ru_maxrss * 1024
    shards = 16 * params
    gib = 2.0 ** 30
    print(f"GPT d {a.d}, {a.layers} layers: {params / 1e6:.1f}M parameters, fsdp={a.ranks}, "
          f"recompute {a.recompute}, 2 steps in {secs:.0f} s")
    print(f"  peak RSS                                  {rss / gib:7.2f} GiB")
    print(f"  sum of the shards (weights, gradients,    {shards / gib:7.2f} GiB")
    print(f"    AdamW moments, fp32)                    (ratio RSS / shards {rss / shards:.2f})")
    print(f"  {a.ranks} whole copies of that state             {a.ranks * shards / gib:7.2f} GiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
