"""test_train_flat_bucket.py — ZeRO-1/2's collectives grouped per block
(passes/partition/bucket.c): the gradients' reduce-scatters (a pipelined
norm piece's too, hoisted so that a block's form one bucket), the gradient
norm's all-reduces of scalars (one where each sharded term had its own) and
the all-gathers of the updated parameters after the update, and the step
still trains as one rank.

Checked, GPT-2 with seeded random data (batch 12), AdamW with clipping at
1, 3 steps:
  - --zero 1 and --zero 2 at fsdp=3 (3 divides no dim of most parameters:
    flat shards, padded), at dp=2 x fsdp=2 (HSDP, dims sharded) and at
    pp=2 x fsdp=2 (1F1B, 2 microbatches) in fp32, and in bf16 (with
    --reduce-dtype bf16) fsdp=3 --zero 1, dp=2 x fsdp=2 --zero 2,
    pp=2 x fsdp=2 --zero 1 and pp=2 x fsdp=3 --zero 2 (flat shards in a
    pipeline): each step's loss and gradient norm equal one
    rank's in the same precision (fp32 within 2e-5 relative, the final
    weights and optimizer state within 2e-2 of their scale:
    test_train_flat's tolerances; bf16 within 1e-3, the final weights
    within 0.4 of their change over the 3 steps in 2-norm, the QKV bias's
    key third apart: test_train_zero3_bf16's, whose bf16_close checks
    them), finite;
  - pp=2 x fsdp=3 --zero 1 on the emulated GPU equals it on the CPU
    (2 steps, 2e-5; skipped without a cuda target);
  - `shardc plan --train --json`: at fsdp=3 --zero 1 the all-gathers of the
    updated parameters are one a block and dtype plus those that cannot join
    (the 4 parameters outside the blocks, gathered alone as under ZeRO-3,
    and a block's fused QKV weight, gathered along dim 1, and its bias,
    updated apart from the flat ones): at most 4 + 3 x 2 = 10 for GPT-2's 2
    blocks, where there was one a parameter (28); the bytes are the padded
    flat sizes, as before; pp=2 x fsdp=3 --zero 1 (1F1B, 2 microbatches)
    makes at most 30 collectives over fsdp a step (predicted.collectives),
    where it made 65: the norm piece's reduce-scatters, its scalar
    all-reduces and the update's all-gathers were one a parameter or more.

Environment: SHARDC. Exit 0 on success, 1 on any failure.
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import check, finish, has_cuda_target, skip_part  # noqa: E402
from test_train_dist import compare, load_ckpt, run  # noqa: E402
from test_train_dist import sample_args as dist_sample_args  # noqa: E402
from test_train_zero3_bf16 import LR, bf16_close  # noqa: E402

SHARDC = os.environ.get("SHARDC")
SRC = os.environ.get("SC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BATCH = 12
PIPE = ["--microbatches", "2", "--schedule", "1f1b"]
MESHES = [m + ["--zero", z] for z in ("1", "2")
          for m in (["--mesh", "fsdp=3"], ["--mesh", "dp=2,fsdp=2"], ["--mesh", "pp=2,fsdp=2"] + PIPE)]
# one of each mesh, both stages, and the flat shards in a pipeline (its norm
# piece's reduce-scatters hoisted, in bf16 with the Cast back)
BF16_MESHES = [MESHES[0], MESHES[4], MESHES[2], ["--mesh", "pp=2,fsdp=3", "--zero", "2"] + PIPE]
SAMPLES = {
    "gpt2": (lambda r: {"input_ids": r.randint(0, 1000, (BATCH, 16)).astype(np.int64)},
             lambda r: r.randint(0, 1000, (BATCH, 16)),
             ["--optimizer", "adamw", "--lr", str(LR), "--clip-grad-norm", "1"], MESHES),
}
PRECISIONS = {"fp32": ([], [], MESHES),
              "bf16": (["--precision", "bf16"], ["--reduce-dtype", "bf16"], BF16_MESHES)}


def plan(model, args):
    p = subprocess.run([SHARDC, "plan", model, "--train", "--dim", f"batch={BATCH}", "--json",
                        "--optimizer", "adamw", "--cluster", "h100-sxm:8x1"] + args,
                       capture_output=True, text=True, timeout=300)
    if not check(p.returncode == 0, f"plan {args}: {p.stderr[-500:]}"):
        return None
    return json.loads(p.stdout)


def emulated_gpu(tmp, base):
    """pp=2 x fsdp=3 --zero 1 (1F1B, 2 microbatches: every kind of bucket
    above) on the emulated GPU (SHARDC_CUDA_EMU=1 --device cuda) against the
    CPU, f32 products without TF32 on both: 2 steps' losses and gradient
    norms within 2e-5 relative."""
    if not has_cuda_target(SHARDC):
        skip_part("the emulated GPU", "this shardc has no cuda target (no NVRTC)")
        return
    args = base[:base.index("--steps")] + ["--steps", "2"] + \
        base[base.index("--steps") + 2:] + ["--mesh", "pp=2,fsdp=3", "--zero", "1"] + PIPE + \
        ["--no-allow-tf32"]
    logs = {}
    for dev in ("cpu", "cuda"):
        log = os.path.join(tmp, f"emu_{dev}.jsonl")
        p = run(args + ["--device", dev, "--log-json", log],
                env=dict(os.environ, SHARDC_CUDA_EMU="1"))
        if not check(p.returncode == 0, f"--device {dev}: {p.stderr[-600:]}"):
            return
        logs[dev] = [json.loads(line) for line in open(log)]
    got = [(a[k], b[k]) for a, b in zip(logs["cpu"], logs["cuda"]) for k in ("loss", "grad_norm")]
    worst = max(abs(a - b) / abs(a) for a, b in got) if got else float("nan")
    check(len(got) == 4 and worst <= 2e-5,
          f"pp=2 x fsdp=3 --zero 1 on the emulated GPU against the CPU: {got}")
    print(f"gpt2 pp=2 x fsdp=3 --zero 1 on the emulated GPU: within {worst:.2e} of the CPU")


def main():
    if not SHARDC:
        print("SHARDC is not set")
        return 1
    params = {}
    with tempfile.TemporaryDirectory() as tmp:
        model, base = dist_sample_args(tmp, "gpt2", BATCH, SAMPLES, seed=17, steps=3)
        init = {t.name: numpy_helper.to_array(t) for t in onnx.load(model).graph.initializer}
        for prec, (one, dist, meshes) in PRECISIONS.items():
            ref = {"log": os.path.join(tmp, prec + "_ref.jsonl"),
                   "ck": os.path.join(tmp, prec + "_ref_ck")}
            p = run(base + one + ["--save", ref["ck"], "--log-json", ref["log"]])
            if not check(p.returncode == 0, f"gpt2 {prec} one rank: {p.stderr[-800:]}"):
                continue
            if prec == "fp32":  # the trained parameters, as the step's checkpoint holds them
                params = load_ckpt(ref["ck"], "weights")
            for i, mesh in enumerate(meshes):
                what = f"{prec} " + " ".join(mesh)
                got = {"log": os.path.join(tmp, f"{prec}_{i}.jsonl"),
                       "ck": os.path.join(tmp, f"{prec}_{i}_ck")}
                p = run(base + one + dist + mesh + ["--save", got["ck"], "--log-json", got["log"]])
                if not check(p.returncode == 0, f"gpt2 {what}: {p.stderr[-800:]}"):
                    continue
                if prec == "bf16":
                    bf16_close(" ".join(mesh), ref, got, init)
                    continue
                worst = compare("gpt2", what, ref, got, init, 2e-2)
                if worst is not None:
                    print(f"gpt2 {what:60s} loss/norm rel diff {worst:.2e}")
        emulated_gpu(tmp, base)

    gpt2 = os.path.join(SRC, "samples", "gpt2.onnx")
    j = plan(gpt2, ["--mesh", "fsdp=3", "--zero", "1"])
    if j:
        by_op = {}
        for c in j["collectives"]:
            s = by_op.setdefault(c["op"], {"count": 0, "bytes": 0})
            s["count"] += c["count"]
            s["bytes"] += c["bytes"]
        n_params = len(params)
        # every parameter gathered once: the flat ones padded to a multiple of 3
        want = sum(4 * (v.size if any(d % 3 == 0 for d in v.shape) else (v.size + 2) // 3 * 3)
                   for v in params.values())
        g = by_op.get("AllGather", {"count": 0, "bytes": 0})
        check(n_params == 28 and 0 < g["count"] <= 10 and g["bytes"] == want,
              f"fsdp=3 --zero 1: {g['count']} all-gathers of {g['bytes']} bytes for "
              f"{n_params} parameters (want at most 10, {want} bytes)")
        print(f"gpt2 fsdp=3 --zero 1: {g['count']} all-gathers of the updated parameters "
              f"({g['bytes']} bytes) for {n_params} parameters; collectives {by_op}")
    j = plan(gpt2, ["--mesh", "pp=2,fsdp=3", "--zero", "1"] + PIPE)
    if j:
        calls = j["predicted"].get("collectives", {}).get("fsdp", {}).get("calls", 0)
        check(0 < calls <= 30, f"pp=2 x fsdp=3 --zero 1: {calls} collectives over fsdp a step "
              "(want at most 30; one a parameter or more made 65)")
        print(f"gpt2 pp=2 x fsdp=3 --zero 1: {calls} collectives over fsdp a step")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
