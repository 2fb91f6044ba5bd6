"""test_search_estimate.py — the planner's memory estimate of a training
plan (passes/plan/search.c) against the exact plan, over a grid of
pipelined plans and a few without a pipeline.

For each plan it runs

    shardc plan MODEL --train --estimate --cluster C --mesh ... --dim batch=B
        --precision bf16 --optimizer adamw --json

(tools/plan_auto.c, estimate_one: the plan built as plan --train builds it,
shapes only, and the search's estimate of the same strategy) and checks, on
every pipeline rank, that the estimate is at least the exact memory less
the device's lines (which the estimate does not model) times 1 - MARGIN:
the estimate may err over (the exact check then decides) but an estimate
under the exact peak keeps a plan the exact check finds over the memory,
and the search's activation scaling rounds follow. Prints each plan's
ratios (estimate / exact, per rank and of the largest rank) and the range
over the grid; docs/planner.md, "The estimate", quotes them.

Models: samples/gpt_1p5b.onnx (48 blocks, h 1600, sequence 128) on
h100-sxm:8x1 and 8x2, samples/gpt2.onnx on h100-sxm:8x1, and three of
Megatron-LM's shapes (samples/make_gpt_shapes.py: the 7.5B, 36 blocks of h
4096, the 18B, 40 blocks of h 6144, and the 39B, 48 blocks of h 8192,
sequence 2048) on their A100
clusters, written into SC_BINARY_DIR/megatron_shapes as
test_megatron_table.py writes them.

    test_search_estimate.py [--quick]   (--quick: gpt_1p5b's plans only)

Environment: SHARDC, SC_SOURCE_DIR, SC_BINARY_DIR.
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import check, finish  # noqa: E402

SRC = os.environ.get("SC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
SHARDC = os.environ.get("SHARDC", os.path.join(SRC, "build", "shardc"))
BIN = os.environ.get("SC_BINARY_DIR", os.path.join(SRC, "build"))
sys.path.insert(0, os.path.join(SRC, "samples"))

# The estimate may be under the exact memory of a pipeline rank by at most
# this fraction (docs/planner.md, "The estimate": the documented margin).
MARGIN = 0.10

GPT_1P5B = os.path.join(SRC, "samples", "gpt_1p5b.onnx")
GPT2 = os.path.join(SRC, "samples", "gpt2.onnx")

# (model, cluster, batch, options): pipelined plans over the schedules,
# recompute kinds, ZeRO stages, tp and sequence parallelism; and a few
# without a pipeline
GRID = [
    (GPT_1P5B, "h100-sxm:8x1", 64, "--mesh pp=2,dp=4 --schedule 1f1b --microbatches 8 --recompute none"),
    (GPT_1P5B, "h100-sxm:8x1", 64, "--mesh pp=2,dp=4 --schedule 1f1b --microbatches 8 --recompute selective"),
    (GPT_1P5B, "h100-sxm:8x1", 64, "--mesh pp=2,dp=4 --schedule 1f1b --microbatches 8 --recompute full"),
    (GPT_1P5B, "h100-sxm:8x1", 64, "--mesh pp=2,dp=4 --schedule gpipe --microbatches 4 --recompute none"),
    (GPT_1P5B, "h100-sxm:8x1", 64, "--mesh pp=2,dp=4 --schedule zb-h1 --microbatches 8 --recompute none"),
    (GPT_1P5B, "h100-sxm:8x1", 64, "--mesh pp=2,dp=4 --schedule interleaved --virtual-stages 16 --microbatches 2 --recompute none"),
    (GPT_1P5B, "h100-sxm:8x1", 64, "--mesh pp=2,dp=4 --schedule interleaved --virtual-stages 4 --microbatches 4 --recompute full"),
    (GPT_1P5B, "h100-sxm:8x1", 64, "--mesh pp=4,dp=2 --schedule 1f1b --microbatches 8 --recompute none"),
    (GPT_1P5B, "h100-sxm:8x1", 64, "--mesh pp=4,dp=2 --schedule interleaved --virtual-stages 8 --microbatches 4 --recompute none"),
    (GPT_1P5B, "h100-sxm:8x1", 64, "--mesh pp=4,dp=2 --schedule zb-h1 --microbatches 16 --recompute selective"),
    (GPT_1P5B, "h100-sxm:8x1", 64, "--mesh pp=8 --schedule 1f1b --microbatches 16 --recompute full"),
    (GPT_1P5B, "h100-sxm:8x1", 64, "--mesh pp=2,fsdp=4 --zero 1 --schedule 1f1b --microbatches 8 --recompute none"),
    (GPT_1P5B, "h100-sxm:8x1", 64, "--mesh pp=2,fsdp=4 --zero 3 --schedule 1f1b --microbatches 8 --recompute full"),
    (GPT_1P5B, "h100-sxm:8x1", 64, "--mesh pp=2,dp=2,fsdp=2 --zero 3 --schedule interleaved --virtual-stages 16 --microbatches 2 --recompute none"),
    (GPT_1P5B, "h100-sxm:8x1", 64, "--mesh pp=4,fsdp=2 --zero 3 --schedule gpipe --microbatches 1 --recompute none"),
    (GPT_1P5B, "h100-sxm:8x2", 64, "--mesh pp=2,dp=4,fsdp=2 --zero 3 --schedule gpipe --microbatches 1 --recompute none"),
    (GPT_1P5B, "h100-sxm:8x2", 64, "--mesh pp=4,dp=4 --schedule interleaved --virtual-stages 4 --microbatches 4 --recompute none"),
    (GPT_1P5B, "h100-sxm:8x1", 64, "--mesh dp=8 --microbatches 1 --recompute full"),
    (GPT_1P5B, "h100-sxm:8x1", 64, "--mesh fsdp=8 --zero 3 --microbatches 1 --recompute none"),
    (GPT2, "h100-sxm:8x1", 16, "--mesh pp=2,fsdp=2,tp=2 --zero 2 --schedule gpipe --microbatches 1 --recompute none"),
    (GPT2, "h100-sxm:8x1", 16, "--mesh pp=2,dp=2,tp=2 --schedule 1f1b --microbatches 4 --recompute full --sequence-parallel"),
    # a fused attention core's stash under sequence parallelism: split by tp
    (GPT2, "h100-sxm:8x1", 16, "--mesh pp=2,tp=4 --schedule 1f1b --microbatches 4 --recompute none --sequence-parallel"),
]
MEGATRON = [
    ("a100_7p5b", "a100-80g:8x16", 512, "--mesh pp=4,dp=16,tp=2 --schedule zb-h1 --microbatches 32 --recompute full --sequence-parallel"),
    ("a100_7p5b", "a100-80g:8x16", 512, "--mesh pp=4,dp=8,fsdp=2,tp=2 --zero 3 --schedule 1f1b --microbatches 32 --recompute selective"),
    ("a100_18b", "a100-80g:8x32", 1024, "--mesh pp=8,dp=16,tp=2 --schedule zb-h1 --microbatches 64 --recompute none"),
    ("a100_39b", "a100-80g:8x64", 1536, "--mesh pp=2,dp=32,tp=8 --schedule 1f1b --microbatches 48 --recompute full"),
    ("a100_39b", "a100-80g:8x64", 1536, "--mesh pp=8,dp=8,tp=8 --schedule zb-h1 --microbatches 192 --recompute selective"),
    ("a100_39b", "a100-80g:8x64", 1536, "--mesh pp=2,dp=8,fsdp=4,tp=8 --zero 3 --schedule 1f1b --microbatches 48 --recompute full"),
]


def estimate(model, cluster, batch, options):
    """The --estimate JSON of one plan, or None (the failure checked)."""
    cmd = [SHARDC, "plan", model, "--train", "--estimate", "--no-weights", "--cluster", cluster,
           "--dim", f"batch={batch}", "--precision", "bf16", "--optimizer", "adamw",
           "--json"] + options.split()
    p = subprocess.run(cmd, capture_output=True, text=True)
    if not check(p.returncode == 0, f"{' '.join(cmd[2:])}: exit {p.returncode}: {p.stderr[-400:]}"):
        return None
    return json.loads(p.stdout)


def main():
    quick = sys.argv[1:] == ["--quick"]
    grid = [g for g in GRID if not quick or g[0] == GPT_1P5B]
    if not quick:
        from make_gpt_shapes import CONFIGS, write  # noqa: E402
        out = os.path.join(BIN, "megatron_shapes")
        os.makedirs(out, exist_ok=True)
        for name, cluster, batch, options in MEGATRON:
            path = os.path.join(out, f"{name}.onnx")
            if not os.path.exists(path):
                write(CONFIGS[name], out)
            grid.append((path, cluster, batch, options))
    peaks, lows = [], []
    print(f"{'model':14} {'cluster':14} {'largest':>7} {'lowest':>7}  per rank  options")
    for model, cluster, batch, options in grid:
        e = estimate(model, cluster, batch, options)
        if e is None:
            continue
        ratios = [r["ratio"] for r in e["ranks"]]
        peaks.append(e["peak_ratio"])
        lows.append(min(ratios))
        print(f"{os.path.basename(model)[:-5]:14} {cluster:14} {e['peak_ratio']:7.3f} "
              f"{min(ratios):7.3f}  {' '.join(f'{x:.2f}' for x in ratios)}  {options}")
        for r in e["ranks"]:
            check(r["ratio"] >= 1 - MARGIN and r["ratio"] == r["ratio"],
                  f"{options} on {cluster}: pipeline rank {r['pipe_rank']}'s estimate "
                  f"{r['estimate_bytes']} under the exact {r['exact_bytes'] - r['exact_device_bytes']} "
                  f"by more than {MARGIN:.0%} (ratio {r['ratio']:.3f})")
    if peaks:
        print(f"largest rank: estimate / exact {min(peaks):.3f} .. {max(peaks):.3f}; every rank: "
              f"lowest {min(lows):.3f} (margin {MARGIN:.0%})")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
