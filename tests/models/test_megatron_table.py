"""test_megatron_table.py — the planner's predicted TFLOP/s per GPU for
Megatron-LM's published configurations, within 20 % of the published
figure.

For each row of samples/make_gpt_shapes.py (model, GPUs, global batch, the
published mesh; the published figure and its source are there and in
docs/planner.md, "Validation against published figures") it generates the
shape-only GPT into the build tree (SC_BINARY_DIR/megatron_shapes; never
committed, about 0.1 s a model), runs `shardc plan --train --json` with the
published mesh (bench/bench_megatron.py's command: bf16, AdamW, 1F1B, one
sequence a microbatch), and checks
  - plan succeeds and writes `predicted` with a finite, positive TFLOP/s
    per GPU (NaN fails);
  - predicted / published is within [0.8, 1.2].
Prints the table (model, GPUs, batch, plan, published, predicted, ratio,
seconds of `plan`).

    test_megatron_table.py [--table a100|h100|all]   (default all)

ctest runs `--table a100` (models.test_megatron_table): the SC'21 A100 rows
are within the band with today's cost model. The H100 rows (Megatron-LM's
README) are not yet: the cost model sums compute and communication and
counts the unfused attention of a 4096-token sequence as memory-bound
passes over its score tensors, where the published runs use fused
attention and overlap (docs/planner.md lists the measured ratios); their
check is kept here, ready, and is not registered while it fails.

Environment: SHARDC, SC_SOURCE_DIR, SC_BINARY_DIR.
"""
import math
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import check, finish  # noqa: E402

SRC = os.environ.get("SC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(SRC, "bench"))
from bench_megatron import CONFIGS, header, predict, row, write  # noqa: E402

BAND = 0.20  # the required agreement with the published figure


def main():
    table = "all"
    if len(sys.argv) == 3 and sys.argv[1] == "--table" and sys.argv[2] in ("a100", "h100", "all"):
        table = sys.argv[2]
    elif len(sys.argv) != 1:
        print("usage: test_megatron_table.py [--table a100|h100|all]")
        return 2
    shardc = os.environ.get("SHARDC")
    if not shardc:
        print("SHARDC not set")
        return 2
    base = os.environ.get("SC_BINARY_DIR") or tempfile.mkdtemp()
    out = os.path.join(base, "megatron_shapes")
    os.makedirs(out, exist_ok=True)
    names = [n for n, c in CONFIGS.items() if table in ("all", c["table"])]
    print(header())
    for n in names:
        c = CONFIGS[n]
        write(c, out)
        r = predict(shardc, out, c, timeout=300)
        print(row(c, r), flush=True)
        if not check(r["rc"] == 0, f"{n}: plan failed ({r['rc']}): {r['stderr'].strip()}"):
            continue
        p = r["predicted"]
        if not check(p is not None and math.isfinite(p) and p > 0,
                     f"{n}: no finite positive predicted TFLOP/s per GPU: {p}"):
            continue
        ratio = p / c["published_tflops"]
        check(abs(ratio - 1) <= BAND,
              f"{n}: predicted {p:.1f} TFLOP/s per GPU, published {c['published_tflops']}: "
              f"ratio {ratio:.3f} outside 1 +- {BAND}")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
