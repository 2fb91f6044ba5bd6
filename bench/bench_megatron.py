"""bench_megatron.py — the planner's predicted step against Megatron-LM's
published figures.

For every configuration of samples/make_gpt_shapes.py (Megatron-LM's
weak-scaling tables: A100, SC'21; H100, its README) it generates the
shape-only GPT, runs

    shardc plan MODEL --train --no-weights --cluster PRESET:8xN
        --mesh pp=P,dp=D,tp=T --schedule 1f1b --microbatches M
        --precision bf16 --optimizer adamw --recompute R --dim batch=B --json
        [--sequence-parallel]

with the published mesh and global batch (M: the batch of a data-parallel
replica in microbatches of one sequence; R: full for the A100 rows, whose
published FLOP count includes the recomputed forward, none for the H100
rows, whose figure is model FLOPs; --sequence-parallel for the H100 rows
with tp > 1, as published: sequence_parallel_args), and prints per row: model, GPUs, batch,
the plan (mesh, microbatches), the published TFLOP/s per GPU, the
predicted one, their ratio, the planner's own GEMM TFLOP/s
(`predicted.tflops_per_gpu`) and how long `plan` took; then `plan --train --auto` on the same model, GPUs and global
batch (memory per rank up to the published plan's predicted peak, or the
device's if more): the chosen plan's tokens/s over the published plan's,
how long the search took, and the plan it chose.

Like for like: a published figure is a FLOP count of the published
table's own formula (published_flops) over the measured step time, so the
predicted figure is that same count over the predicted step time
(`predicted.step_time_s`): their ratio is the published step time over
the predicted one. The planner's `tflops_per_gpu` counts the GEMM and
fused-attention FLOPs the compiled step runs (causal attention's visible
half, its backward 2.5 times its forward), which is not the count either
table used. Figures and ratios only:
it never fails on a value (tests/models/test_megatron_table.py asserts the
20 % band and the search). `make bench` runs it.

`--grad-accum K` plans each unpipelined row as K microbatches of batch / K
(`--grad-accum K --dim batch=B/K`: Megatron's runs are microbatches of one
sequence; the step reduces its gradients once, in its last run).

usage: bench_megatron.py [--shardc build/shardc] [--only NAME,...] [--out DIR]
                         [--grad-accum K]
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
    """The published mesh, pp outermost (the planner's order rule). The
    H100 runs used Megatron's distributed optimizer (ZeRO-1 over dp); shardc
    plans it as `fsdp=D --zero 1` (every parameter of these shapes sharded
    flat), predicted slower than dp for the 70B and 32B rows (its fp32
    all-gather at the step's end: docs/planner.md, "ZeRO-1 over a flat
    shard"; the 70B 3.112 s against dp's 2.502 s, 2026-12-06), so the rows
    keep dp. The 32B row as `fsdp=48,tp=8 --zero 3
    --no-reshard-after-forward` (flat tensor-parallel pieces, bf16 gathered
    once a step) is slower than dp too (ratio 0.644 against 0.849); the
    pipelined 70B row cannot be planned so yet."""
    return ",".join(f"{k}={c[k]}" for k in ("pp", "dp", "tp") if c[k] > 1) or "dp=1"


def attention_args(c):
    """The attention as the published runs had it: SC'21's A100 runs (2021)
    materialised the scores (Megatron's fused softmax, no FlashAttention),
    so their rows are planned with the core unfused; the H100 README's runs
    use FlashAttention, as shardc's fused core."""
    return ["--no-fuse-attention"] if c["table"] == "a100" else []


def loss_args(c):
    """The loss as the published runs computed it: both tables' runs took
    Megatron-LM's vocabulary-parallel cross-entropy on an f32 copy of the
    logits, at every tensor-parallel size, one (unfused) PyTorch op a pass:
    the cast (`output.float()`, megatron/model/gpt_model.py at aed2f75e20,
    April 2021; `vocab_parallel_logits.float()`,
    megatron/core/tensor_parallel/cross_entropy.py:27 at f2e5db402c, July
    2024), max, subtract, exp, sum, divide in the forward, the gradient's
    multiply and its cast back to bf16 in the backward: about 52 bytes an
    element of the logits. `--no-fuse-loss` plans that decomposed form (36
    bytes an element at tp=1), which shardc compiles at tp > 1 anyway; the
    fused SoftmaxCrossEntropy (6 bytes) is shardc's own program, which
    `--auto` keeps. docs/planner.md, "The H100 1.7B row"."""
    return ["--no-fuse-loss"]


def published_flops(c):
    """FLOPs of one training step of c as its table counts them (B global
    batch, s sequence, L layers, h hidden, V vocabulary; MLP 4h, no grouped
    query attention, no gated linear unit):

      a100  Narayanan et al., SC'21, the FLOP count of its appendix, with
            the recomputed forward: 96·B·s·L·h²·(1 + s/6h + V/16Lh).
      h100  Megatron-LM's megatron/training/training.py,
            num_floating_point_operations, as of the commit that published
            the H100 table (f2e5db402c, 2024-07-15): 12·B·s·L·h²·((1 + 1 +
            s/h) + 4 + V/2Lh), i.e. 72·B·s·L·h²·(1 + s/6h + V/12Lh), model
            FLOPs without recomputation, the attention's scores over all
            s² pairs (the causal half, s/2h, came in March 2025, 8873b55d6a).
    """
    B, s, L, h, V = c["batch"], c["seq"], c["layers"], c["hidden"], c["vocab"]
    if c["table"] == "a100":
        return 96.0 * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h))
    return 12.0 * B * s * L * h * h * ((1 + 1 + s / h) + 4 + V / (2 * L * h))


def like_for_like(c, step_s):
    """The predicted TFLOP/s per GPU counted as the published figure is:
    published_flops(c) over the predicted step time and c's GPUs."""
    return published_flops(c) / (step_s * c["gpus"]) / 1e12 if step_s else None


def plan_args(c, accum=1):
    """`shardc plan` arguments (after the model) for configuration c;
    accum > 1: an unpipelined row as that many microbatches a step."""
    nodes = max(1, c["gpus"] // 8)
    accum = accum if c["pp"] == 1 and c["batch"] % (accum * c["dp"]) == 0 else 1
    args = ["--train", "--no-weights", "--cluster", f"{c['cluster']}:8x{nodes}",
            "--mesh", mesh_of(c), "--precision", "bf16", "--optimizer", "adamw",
            "--recompute", "full" if c["table"] == "a100" else "none",
            "--dim", f"batch={c['batch'] // accum}", "--json"] + attention_args(c) + loss_args(c)
    if accum > 1:
        args += ["--grad-accum", str(accum)]
    if c["pp"] > 1:
        args += ["--schedule", "1f1b", "--microbatches", str(c["microbatches"])]
    return args + sequence_parallel_args(c) + reduce_dtype_args(c)


def reduce_dtype_args(c):
    """The gradient reduction's bytes as the published runs moved them. The
    H100 README's runs used the distributed optimizer (its
    `--overlap-param-gather` is refused without `--use-distributed-optimizer`,
    megatron/training/arguments.py at f2e5db402c): each rank reduce-scatters
    the fp32 gradients during the backward, (S-1)/S x 4 bytes a parameter,
    and gathers the bf16 parameters during the next forward, (S-1)/S x 2,
    hidden there. The table plans those rows as dp (docs/planner.md: the
    flat ZeRO-3 that plans them as Megatron ran them is built for the
    unpipelined rows but predicted slower there, and not for pipelines), whose
    all-reduce moves 2 (S-1)/S x the reduce dtype's bytes: in bf16, the 4
    bytes Megatron's reduce-scatter moves during the backward, so the H100
    rows are planned with `--reduce-dtype bf16`. Pipelined rows reduce the
    mean of their microbatches' gradients once a step, in the norm piece,
    in that dtype too. SC'21's A100 rows predate the distributed optimizer and
    all-reduced fp32 gradients (`--accumulate-allreduce-grads-in-fp32`):
    shardc's default."""
    return ["--reduce-dtype", "bf16"] if c["table"] == "h100" else []


def sequence_parallel_args(c):
    """Sequence parallelism as the published runs had it: the H100 README's
    runs overlapped tensor-parallel communication with GEMMs
    (`--tp-comm-overlap`), which Megatron-LM refuses without
    `--sequence-parallel` (megatron/training/arguments.py at f2e5db402c:
    "Tensor parallel communication/GEMM overlap can happen only when
    sequence parallelism is enabled"), so every H100 row with tp > 1 ran
    with it. SC'21's A100 rows predate it (Korthikanti et al., 2022)."""
    return ["--sequence-parallel"] if c["table"] == "h100" and c["tp"] > 1 else []


def predict(shardc, model_dir, c, timeout=600, accum=1):
    """Runs the plan of c (its model already in model_dir). Returns a dict:
    rc, seconds, predicted (TFLOP/s per GPU counted as the published
    figure: like_for_like; or None), gemm_tflops (the planner's
    `tflops_per_gpu`), step_s, tokens_per_s, peak_bytes, breakdown, stderr,
    command."""
    cmd = [shardc, "plan", os.path.join(model_dir, c["name"] + ".onnx")] + plan_args(c, accum)
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    out = {"rc": p.returncode, "seconds": time.perf_counter() - t, "predicted": None,
           "gemm_tflops": None, "step_s": None, "tokens_per_s": None, "peak_bytes": None,
           "breakdown": None, "stderr": p.stderr[-1000:], "command": cmd}
    if p.returncode == 0:
        pr = json.loads(p.stdout).get("predicted") or {}
        if pr.get("step_time_s"):
            out["step_s"] = pr["step_time_s"]
            out["predicted"] = like_for_like(c, out["step_s"])
            out["gemm_tflops"] = pr.get("tflops_per_gpu")
            out["tokens_per_s"] = pr.get("tokens_per_s")
            out["peak_bytes"] = pr.get("peak_bytes_per_rank")
            out["breakdown"] = pr.get("breakdown")
    return out


def search(shardc, model_dir, c, budget_bytes, timeout=600):
    """`plan --train --auto` on c's model, GPUs and global batch (bf16,
    AdamW), memory per rank at most budget_bytes (the published plan's
    predicted peak when that is above the device's: the search is then
    held to the memory the published plan is predicted to need, and
    compared on speed). Returns rc, seconds, tokens_per_s, tflops, fits,
    the chosen plan's options, stderr."""
    nodes = max(1, c["gpus"] // 8)
    cmd = [shardc, "plan", os.path.join(model_dir, c["name"] + ".onnx"), "--train", "--auto",
           "--cluster", f"{c['cluster']}:8x{nodes}", "--global-batch", str(c["batch"]),
           "--precision", "bf16", "--optimizer", "adamw", "--json"] + attention_args(c) + \
        reduce_dtype_args(c)  # the published plan's numerics: kept by --auto
    if budget_bytes:
        cmd += ["--memory-budget", str(int(budget_bytes))]
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    out = {"rc": p.returncode, "seconds": time.perf_counter() - t, "tokens_per_s": None,
           "tflops": None, "plan": "", "stderr": p.stderr[-1000:]}
    if p.returncode == 0:
        ch = json.loads(p.stdout)["auto"]["chosen"]
        pr = ch.get("predicted") or {}
        out["tokens_per_s"] = pr.get("tokens_per_s")
        out["tflops"] = pr.get("tflops_per_gpu")
        out["plan"] = ch.get("replay", "")
    return out


def device_bytes(c):
    """The device memory of c's cluster preset, as `plan` reads it."""
    return {"a100-80g": 81920 << 20, "h100-sxm": 81559 << 20}[c["cluster"]]


def header():
    return (f"{'model':10s} {'GPUs':>5s} {'batch':>5s} {'plan':24s} {'published':>9s} "
            f"{'predicted':>9s} {'ratio':>6s} {'GEMM':>6s} {'plan s':>7s} {'auto/pub':>8s} "
            f"{'auto s':>6s}  "
            f"auto's plan")


def row(c, r, a=None):
    """One line of the table: r from predict, a from search (or None)."""
    plan = (mesh_of(c) + (f" M={c['microbatches']}" if c["pp"] > 1 else "") +
            (" sp" if sequence_parallel_args(c) else ""))
    pred = f"{r['predicted']:9.1f}" if r["predicted"] else f"{'-':>9s}"
    ratio = f"{r['predicted'] / c['published_tflops']:6.3f}" if r["predicted"] else f"{'-':>6s}"
    gemm = f"{r['gemm_tflops']:6.1f}" if r.get("gemm_tflops") else f"{'-':>6s}"
    line = (f"{c['name']:10s} {c['gpus']:5d} {c['batch']:5d} {plan:24s} "
            f"{c['published_tflops']:9.1f} {pred} {ratio} {gemm} {r['seconds']:7.2f}")
    if a is not None:
        speed = (f"{a['tokens_per_s'] / r['tokens_per_s']:8.3f}"
                 if a["tokens_per_s"] and r["tokens_per_s"] else f"{'-':>8s}")
        line += f" {speed} {a['seconds']:6.2f}  {a['plan'] or 'none: ' + a['stderr'][-120:].strip()}"
    return line


def breakdown(r):
    """The predicted step's breakdown (its critical rank's terms), one line."""
    b = r.get("breakdown")
    if not b or not r.get("step_s"):
        return ""
    comm = ", ".join(f"{k} {v:.3f}" for k, v in sorted((b.get("exposed_comm_s") or {}).items()))
    return (f"  step {r['step_s']:.3f} s: compute {b.get('compute_s', 0):.3f}, exposed "
            f"communication ({comm or 'none'}), bubble {b.get('bubble_s', 0):.3f}, recompute "
            f"{b.get('recompute_s', 0):.3f}, optimizer {b.get('optimizer_s', 0):.3f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shardc", default=os.path.join(HERE, "..", "build", "shardc"))
    ap.add_argument("--only", default="")
    ap.add_argument("--out", default="", help="keep the models here (default: a temporary folder)")
    ap.add_argument("--grad-accum", type=int, default=1,
                    help="unpipelined rows as K microbatches of batch / K")
    a = ap.parse_args()
    names = [s for s in a.only.split(",") if s] or list(CONFIGS)
    with tempfile.TemporaryDirectory() as tmp:
        out = a.out or tmp
        os.makedirs(out, exist_ok=True)
        t = time.perf_counter()
        for n in names:
            write(CONFIGS[n], out)
        print(f"generated {len(names)} shape-only models in {time.perf_counter() - t:.2f} s")
        print("predicted = the published table's FLOP count over shardc plan --train's "
              "predicted.step_time_s (the simulated step); GEMM = its predicted.tflops_per_gpu; "
              "published: samples/make_gpt_shapes.py, docs/planner.md")
        print(header())
        for n in names:
            c = CONFIGS[n]
            r = predict(a.shardc, out, c, accum=a.grad_accum)
            s = search(a.shardc, out, c, max(r["peak_bytes"] or 0, device_bytes(c)))
            print(row(c, r, s), flush=True)
            print(breakdown(r), flush=True)
            if r["rc"] != 0:
                print(f"  plan failed ({r['rc']}): {r['stderr'].strip()}")


if __name__ == "__main__":
    main()
