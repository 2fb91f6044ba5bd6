#!/usr/bin/env python3
"""Shape-only GPT models of Megatron-LM's published configurations.

    .venv/bin/python samples/make_gpt_shapes.py OUT_DIR [--only NAME[,NAME...]]

writes OUT_DIR/NAME.onnx for each configuration below: the GPT graph of
samples/make_samples.py's gpt_1p5b (build_gpt2_graph, imported, op for op
like the GPT-2 export; the output layer tied to the token embedding), at the
configuration's hidden size, layers, heads, vocabulary and sequence length,
with a symbolic "batch" dimension. Every initializer is external data in
NAME.weights, a file that is never written: the models are for `shardc plan
--no-weights` and `shardc inspect --no-weights`, whose figures need shapes
only. Needs onnx and numpy (the .venv), not torch; the files are small (the
graph, the causal mask constant) and nothing is committed: the tests and
`make bench` generate them into the build tree.

CONFIGS holds the published rows, each with the figure it reports and the
source it was read from (docs/planner.md, "Validation against published
figures", lists the sources and what could not be verified):

  a100  Megatron-LM's README from April 2021 to July 2024 (the image
        images/cases_april2021.png, the weak-scaling table of Narayanan et
        al., SC'21, "Efficient Large-Scale Language Model Training on GPU
        Clusters Using Megatron-LM", Table 1): hidden, layers, parameters,
        model-parallel size, GPUs, global batch, achieved TFLOP/s per GPU,
        percentage of the 312 TFLOP/s peak. Vocabulary 51,200, sequence
        2048, 80 GB A100s, 8 a node (the README's text). The README splits
        the model-parallel size as tensor parallel 8 above 8 ("the 145B
        model reports the total model parallel size of 64, which means that
        this setup used TP=8 and PP=8"); below 8 it is all tensor parallel.
        The heads are the paper's Table 1 as quoted elsewhere, not read
        from the paper itself (see docs/planner.md); they change no FLOP
        count. Microbatches of one sequence (not in the table).
  h100  Megatron-LM's README since July 2024 (images/model_table.png):
        heads, hidden, layers, tensor, pipeline and data-parallel sizes,
        GPUs, global batch, per-GPU TFLOP/s, MFU. Vocabulary 131,072,
        sequence 4096 (the README's text). Microbatches of one sequence
        (not in the table).
"""

import argparse
import math
import os
import sys
import time

import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_samples import build_gpt2_graph, check_external_graph  # noqa: E402

# name: (table, heads, hidden, layers, tp, pp, gpus, global batch,
#        published TFLOP/s per GPU, published % of peak)
_A100 = dict(table="a100", cluster="a100-80g", vocab=51200, seq=2048)
_H100 = dict(table="h100", cluster="h100-sxm", vocab=131072, seq=4096)
_ROWS = [
    ("a100_1p7b", _A100, 24, 2304, 24, 1, 1, 32, 512, 137.0, 44),
    ("a100_3p6b", _A100, 32, 3072, 30, 2, 1, 64, 512, 138.0, 44),
    ("a100_7p5b", _A100, 32, 4096, 36, 4, 1, 128, 512, 142.0, 46),
    ("a100_18b", _A100, 48, 6144, 40, 8, 1, 256, 1024, 135.0, 43),
    ("a100_39b", _A100, 64, 8192, 48, 8, 2, 512, 1536, 138.0, 44),
    ("a100_76b", _A100, 80, 10240, 60, 8, 4, 1024, 1792, 140.0, 45),
    ("a100_145b", _A100, 96, 12288, 80, 8, 8, 1536, 2304, 148.0, 47),
    ("a100_310b", _A100, 128, 16384, 96, 8, 16, 1920, 2160, 155.0, 50),
    ("a100_530b", _A100, 128, 20480, 105, 8, 35, 2520, 2520, 163.0, 52),
    ("a100_1t", _A100, 160, 25600, 128, 8, 64, 3072, 3072, 163.0, 52),
    ("h100_1p7b", _H100, 16, 2048, 24, 1, 1, 48, 192, 408.8, 41),
    ("h100_7p1b", _H100, 32, 4096, 30, 2, 1, 96, 192, 465.9, 47),
    ("h100_16b", _H100, 48, 6144, 32, 4, 1, 192, 192, 489.1, 49),
    ("h100_32b", _H100, 56, 7168, 48, 8, 1, 384, 192, 459.6, 46),
    ("h100_70b", _H100, 64, 8192, 84, 8, 2, 768, 384, 419.7, 42),
    ("h100_119b", _H100, 80, 10240, 92, 8, 4, 1536, 768, 420.5, 43),
    ("h100_177b", _H100, 96, 12288, 96, 8, 6, 2304, 1152, 432.8, 44),
    ("h100_314b", _H100, 128, 16384, 96, 8, 8, 3072, 1536, 474.4, 48),
    ("h100_462b", _H100, 144, 18432, 112, 8, 16, 6144, 3072, 459.9, 47),
]


def _config(row):
    name, base, heads, hidden, layers, tp, pp, gpus, batch, tflops, pct = row
    c = dict(base, name=name, heads=heads, hidden=hidden, layers=layers, tp=tp,
             pp=pp, gpus=gpus, batch=batch, published_tflops=tflops,
             published_pct=pct, microbatch=1)
    assert gpus % (tp * pp) == 0, name
    c["dp"] = gpus // (tp * pp)
    assert batch % (c["dp"] * c["microbatch"]) == 0, name
    # microbatches a pipeline replica runs per step (its batch in sequences
    # of `microbatch`)
    c["microbatches"] = batch // (c["dp"] * c["microbatch"])
    return c


CONFIGS = {r[0]: _config(r) for r in _ROWS}


def gpt_params(c):
    """Parameters of the generated graph: tied embedding, learned positions,
    12·h² + 13·h a layer (weights and biases), the final norm."""
    h, L = c["hidden"], c["layers"]
    return (c["vocab"] + c["seq"]) * h + L * (12 * h * h + 13 * h) + 2 * h


def build(c):
    """The ModelProto of configuration c and the bytes its (unwritten)
    external data file would hold."""
    g = dict(vocab=c["vocab"], n_positions=c["seq"], n_embd=c["hidden"],
             n_head=c["heads"], n_layer=c["layers"], seq=c["seq"])
    return build_gpt2_graph(g, external=c["name"] + ".weights")


def write(c, out, check=False):
    """Writes OUT/NAME.onnx; returns its path. check: also run onnx.checker
    and strict shape inference (seconds on the largest)."""
    model, total = build(c)
    path = os.path.join(out, c["name"] + ".onnx")
    onnx.save(model, path)
    if check:
        check_external_graph(path, total)
    params = sum(math.prod(t.dims) for t in model.graph.initializer)
    assert params == gpt_params(c), (c["name"], params, gpt_params(c))
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--only", default="", help="comma-separated names")
    ap.add_argument("--check", action="store_true",
                    help="onnx.checker and strict shape inference on each")
    a = ap.parse_args()
    names = [s for s in a.only.split(",") if s] or list(CONFIGS)
    for s in names:
        if s not in CONFIGS:
            sys.exit("unknown configuration %r (have: %s)" % (s, ", ".join(CONFIGS)))
    os.makedirs(a.out, exist_ok=True)
    for s in names:
        t = time.perf_counter()
        path = write(CONFIGS[s], a.out, a.check)
        print("%-10s %7.1fB parameters  %s (%d bytes, %.2f s)"
              % (s, gpt_params(CONFIGS[s]) / 1e9, path, os.path.getsize(path),
                 time.perf_counter() - t), flush=True)


if __name__ == "__main__":
    main()
