"""test_train_flat.py — ZeRO-1/2 over a flat shard (passes/partition/flat.c):
a mesh whose fsdp degree divides no dim of some parameters trains as one
rank does, and shards their optimizer state and gradients flat.

At fsdp=3 no dim of most of the samples' parameters divides (GPT-2: 1000,
64, 256; the MLP: 128, 64, 10): each such parameter's state is its flat
view padded to a multiple of 3, its gradient reduce-scattered, its update
all-gathered. Checked, with seeded random data (batch 6), 3 steps:
  - GPT-2 (AdamW, clipping at 1) at fsdp=3 --zero 1, --zero 2,
    dp=2 x fsdp=3 --zero 1 (HSDP), fsdp=3 x tp=2 --zero 1 (the views per
    tensor-parallel piece, the fused QKV's strided columns per block),
    fsdp=3 --zero 1 --grad-accum 2 and pp=2 x fsdp=3 --zero 1 (1F1B, 2
    microbatches: the accumulated gradient reduce-scattered once a step),
    fsdp=3 --zero 3 with and without --no-reshard-after-forward (the
    parameters themselves stored flat, gathered for the forward and the
    backward);
    the MLP (SGD,
    momentum, weight decay) at fsdp=3 --zero 1: each step's loss and
    gradient norm equal one rank's (relative 2e-5), the checkpoints' weights
    and optimizer state equal one rank's tensor by tensor, in the
    parameters' shapes (test_train_dist's tolerances: 2e-2 of the change
    under AdamW, 2e-4 under SGD), finite;
  - a checkpoint saved after 2 steps at fsdp=3 --zero 1 resumes on one
    rank, at fsdp=3 --zero 1 and at fsdp=2 --zero 1 (dims sharded); one
    saved at fsdp=3 --zero 3 on one rank, at fsdp=3 --zero 3, fsdp=2
    --zero 3 and fsdp=3 --zero 1; step 3 equals the uninterrupted run's
    (2e-5);
  - fsdp=3 --zero 3 compiled to a bundle (training.json gives the flat
    parameters' shapes) trains to the same step 3; with --init rules
    (no model weights used) 2 steps equal one rank's;
  - `shardc plan --train --json` (the MLP at fsdp=3 --zero 1, AdamW): the
    reduce-scatters and the all-gathers each send (S−1)/S of the padded
    flat sizes, Σ 4·m_pad·2/3 bytes with m_pad the numel rounded up to a
    multiple of 3, to the byte; no all-reduce but the loss's and the
    norm's scalars; the optimizer state is 2 · Σ 4·m_pad/3 bytes a rank
    (each piece 64-byte aligned); the same mesh without the flat shard
    (dp=3) all-reduces every gradient and keeps the state whole; the
    planned arena a rank is the one `shardc train` allocates.

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
from checks import check, finish  # noqa: E402
from test_train_dist import arena_of, compare, losses, run  # noqa: E402
from test_train_dist import sample_args as dist_sample_args  # noqa: E402

SHARDC = os.environ.get("SHARDC")
SRC = os.environ.get("SC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BATCH, STEPS = 6, 3

SAMPLES = {
    "gpt2": (lambda r: {"input_ids": r.randint(0, 1000, (BATCH, 16)).astype(np.int64)},
             lambda r: r.randint(0, 1000, (BATCH, 16)),
             ["--optimizer", "adamw", "--lr", "1e-3", "--clip-grad-norm", "1"],
             [["--mesh", "fsdp=3", "--zero", "1"], ["--mesh", "fsdp=3", "--zero", "2"],
              ["--mesh", "dp=2,fsdp=3", "--zero", "1"], ["--mesh", "fsdp=3,tp=2", "--zero", "1"],
              ["--mesh", "fsdp=3", "--zero", "1", "--grad-accum", "2"],
              ["--mesh", "pp=2,fsdp=3", "--zero", "1", "--microbatches", "2",
               "--schedule", "1f1b"],
              ["--mesh", "fsdp=3", "--zero", "3"],
              ["--mesh", "fsdp=3", "--zero", "3", "--no-reshard-after-forward"]]),
    "mlp": (lambda r: {"x": r.uniform(-1, 1, (BATCH, 64)).astype(np.float32)},
            lambda r: r.randint(0, 10, (BATCH,)),
            ["--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9", "--weight-decay", "0.01"],
            [["--mesh", "fsdp=3", "--zero", "1"]]),
}


def sample_args(tmp, name):
    """(model, `train`'s arguments without a mesh or steps) for SAMPLES[name]."""
    return dist_sample_args(tmp, name, BATCH, SAMPLES, seed=13, steps=None)


def padded(n, s):
    return (n + s - 1) // s * s


def main():
    if not SHARDC:
        print("SHARDC is not set")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        for name, (_, _, opts, meshes) in SAMPLES.items():
            model, base = sample_args(tmp, name)
            init = {t.name: numpy_helper.to_array(t) for t in onnx.load(model).graph.initializer}
            runs = {}
            for i, mesh in enumerate([[]] + meshes):
                d = os.path.join(tmp, f"{name}_{i}")
                out = {"log": d + ".jsonl", "ck": d + "_ck"}
                out["p"] = run(base + ["--steps", str(STEPS), "--save", out["ck"],
                                       "--log-json", out["log"]] + mesh)
                runs[" ".join(mesh)] = out
            ref = runs[""]
            if not check(ref["p"].returncode == 0, f"{name} one rank: {ref['p'].stderr[-800:]}"):
                continue
            for mesh in meshes:
                what = " ".join(mesh)
                got = runs[what]
                if not check(got["p"].returncode == 0, f"{name} {what}: {got['p'].stderr[-800:]}"):
                    continue
                worst = compare(name, what, ref, got, init, 2e-2 if "adamw" in opts else 2e-4)
                print(f"{name:5s} {what:55s} loss/norm rel diff {worst:.2e}")

        # resuming a flat checkpoint (ZeRO-1's flat state; ZeRO-3's flat
        # parameters too) under other meshes
        model, base = sample_args(tmp, "gpt2")
        full = losses(os.path.join(tmp, "gpt2_0.jsonl"))

        def step3_equal(what, log):
            got = losses(log)
            check(len(got) >= 1 and got[-1]["step"] == 3 and
                  abs(got[-1]["loss"] - full[2]["loss"]) <= 2e-5 * abs(full[2]["loss"]) and
                  abs(got[-1]["grad_norm"] - full[2]["grad_norm"]) <=
                  2e-5 * abs(full[2]["grad_norm"]),
                  f"{what}: step 3 {got} vs {full[2]}")

        for zero, others in (("1", [["--mesh", "fsdp=2", "--zero", "1"]]),
                             ("3", [["--mesh", "fsdp=2", "--zero", "3"],
                                    ["--mesh", "fsdp=3", "--zero", "1"]])):
            ck = os.path.join(tmp, "flat_ck" + zero)
            p = run(base + ["--steps", "2", "--save", ck, "--mesh", "fsdp=3", "--zero", zero])
            if not check(p.returncode == 0, f"save at fsdp=3 --zero {zero}: {p.stderr[-500:]}"):
                continue
            for mesh in [[], ["--mesh", "fsdp=3", "--zero", zero]] + others:
                log = os.path.join(tmp, "resume%s_%s.jsonl" %
                                   (zero, "_".join(mesh).replace("=", "")))
                p = run(base + ["--steps", "3", "--resume", ck, "--log-json", log] + mesh)
                if check(p.returncode == 0, f"resume at {mesh}: {p.stderr[-500:]}"):
                    step3_equal(f"--zero {zero} checkpoint resumed at {mesh or 'one rank'}", log)

        # ZeRO-3's flat parameters from a compiled bundle (training.json
        # carries their shapes), and from --init's rules (drawn in P's shape)
        bundle = os.path.join(tmp, "z3_bundle")
        p = subprocess.run([SHARDC, "compile", model, "--train", "-o", bundle, "--dim",
                            f"batch={BATCH}", "--optimizer", "adamw", "--clip-grad-norm", "1",
                            "--mesh", "fsdp=3", "--zero", "3"], capture_output=True, text=True,
                           timeout=300)
        if check(p.returncode == 0, f"compile fsdp=3 --zero 3: {p.stderr[-500:]}"):
            shapes = [t for t in json.load(open(os.path.join(bundle, "training.json")))["params"]
                      if "param_shape" in t]
            check(len(shapes) > 0, "fsdp=3 --zero 3 bundle: no parameter stored flat")
            log = os.path.join(tmp, "z3_bundle.jsonl")
            args = base[base.index("--threads"):base.index("--optimizer")]
            p = run([bundle, "--lr", "1e-3", "--steps", "3", "--log-json", log] + args)
            if check(p.returncode == 0, f"train the fsdp=3 --zero 3 bundle: {p.stderr[-500:]}"):
                step3_equal("the fsdp=3 --zero 3 bundle", log)
        rules = ["--init", "*ln_*.weight=ones", "--init", "*.bias=zeros", "--init",
                 "*=normal:0.02", "--seed", "1", "--steps", "2"]
        inits = []
        for mesh in ([], ["--mesh", "fsdp=3", "--zero", "3"]):
            log = os.path.join(tmp, "init%d.jsonl" % len(mesh))
            p = run(base + rules + ["--log-json", log] + mesh)
            if check(p.returncode == 0, f"--init at {mesh}: {p.stderr[-500:]}"):
                inits.append(losses(log))
        if len(inits) == 2:
            check(all(abs(a["loss"] - b["loss"]) <= 2e-5 * abs(a["loss"]) for a, b in
                      zip(*inits)) and len(inits[1]) == 2,
                  f"--init at fsdp=3 --zero 3: {inits[1]} vs one rank {inits[0]}")

        # the planned arena is the allocated one (MLP, AdamW, fsdp=3 --zero 1)
        mlp, mlp_base = sample_args(tmp, "mlp")
        mesh = ["--mesh", "fsdp=3", "--zero", "1"]
        p = subprocess.run([SHARDC, "plan", mlp, "--train", "--dim", f"batch={BATCH}", "--json",
                            "--optimizer", "adamw"] + mesh, capture_output=True, text=True,
                           timeout=300)
        q = run(mlp_base[:mlp_base.index("--optimizer")] + ["--optimizer", "adamw", "--steps",
                                                             "1"] + mesh)
        if check(p.returncode == 0 and q.returncode == 0, f"mlp arena: {p.stderr[-300:]} "
                 f"{q.stderr[-300:]}"):
            planned = json.loads(p.stdout)["arena"]
            check(planned == arena_of(q.stdout),
                  f"mlp fsdp=3 --zero 1: planned arena {planned} vs allocated "
                  f"{arena_of(q.stdout)}")

    # communication and memory against the flat formulas (MLP, S = 3)
    mlp = os.path.join(SRC, "samples", "mlp.onnx")
    init = {t.name: numpy_helper.to_array(t) for t in onnx.load(mlp).graph.initializer}
    S = 3
    check(all(all(d % S for d in v.shape) for v in init.values()),
          "the MLP's parameters: some dim divides by 3 (the case needs none)")
    flat_bytes = sum(4 * padded(v.size, S) for v in init.values())
    want_sent = flat_bytes * (S - 1) // S
    state = 2 * sum((4 * padded(v.size, S) // S + 63) // 64 * 64 for v in init.values())
    sent = {}
    for mesh in (["--mesh", "fsdp=3", "--zero", "1"], ["--mesh", "dp=3"]):
        p = subprocess.run([SHARDC, "plan", mlp, "--train", "--dim", f"batch={BATCH}", "--json",
                            "--optimizer", "adamw"] + mesh, capture_output=True, text=True,
                           timeout=300)
        if not check(p.returncode == 0, f"plan {mesh}: {p.stderr[-500:]}"):
            continue
        j = json.loads(p.stdout)
        by_op = {}
        for c in j["collectives"]:
            s = by_op.setdefault(c["op"], {"sent": 0, "bytes": 0})
            s["sent"] += c["sent"]
            s["bytes"] += c["bytes"]
        sent[mesh[1]] = (by_op, j["live"]["optimizer state"])
    if "fsdp=3" in sent and "dp=3" in sent:
        flat, flat_state = sent["fsdp=3"]
        dp, dp_state = sent["dp=3"]
        for op in ("ReduceScatter", "AllGather"):
            got = flat.get(op, {"sent": 0, "bytes": 0})
            check(got["bytes"] == flat_bytes and got["sent"] == want_sent,
                  f"fsdp=3 --zero 1: {op} moves {got['bytes']} bytes, sends {got['sent']} a "
                  f"rank; the flat formula {flat_bytes}, {want_sent}")
        scalars = flat.get("AllReduce", {"bytes": 0})["bytes"]
        check(0 < scalars <= 64 and set(flat) <= {"ReduceScatter", "AllGather", "AllReduce"},
              f"fsdp=3 --zero 1: collectives {flat} (all-reduces of scalars only)")
        check(flat_state == state, f"fsdp=3 --zero 1: optimizer state {flat_state} bytes a rank, "
              f"the flat formula {state}")
        psi = sum(4 * v.size for v in init.values())
        check(dp.get("AllReduce", {"bytes": 0})["bytes"] >= psi and dp_state >= 2 * psi,
              f"dp=3: all-reduces {dp} and state {dp_state} (every gradient, the state whole)")
        print(f"mlp fsdp=3 --zero 1: reduce-scatter and all-gather {want_sent} bytes sent a rank "
              f"each (flat {flat_bytes}), optimizer state {flat_state} bytes a rank "
              f"(dp=3: {dp_state})")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
