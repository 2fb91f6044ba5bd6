"""test_train_zero3_bf16.py — ZeRO-3 in a bf16 step gathers the bf16 cast
of each shard (passes/partition/localize.c, casts_first), as FSDP's
MixedPrecision(param_dtype=bf16) does, and trains as one rank.

A parameter that the forward and the backward read only through mixed
precision's Cast to bf16 (GPT-2's linear layers' weights and biases) is
cast on its shard and the bf16 shard is all-gathered: half the bytes of
gathering the f32 shard then casting. Checked, GPT-2 with seeded random
data (batch 6), AdamW with clipping, 3 steps:
  - bf16 at fsdp=2 and fsdp=3 --zero 3, each with and without
    --no-reshard-after-forward, and pp=2 x fsdp=3 --zero 3 (1F1B, 2
    microbatches): each step's loss and gradient norm equal one rank's in
    bf16 within 1e-3 relative (test_train_dist's bf16 tolerance: each
    rank's gradient pieces rounded to bf16 before their sum), the final
    weights within 0.4 of their change over the 3 steps in 2-norm (AdamW's
    first steps move each element by about lr whatever its gradient's
    size, so bf16's rounding of the small ones moves them as much), all
    finite, no fallback at fsdp=2. The QKV bias's key third is held apart:
    its gradient is zero in exact arithmetic (q·b_k adds one constant to a
    row of scores, which softmax ignores), so each step moves each of its
    elements by about lr times the sign of bf16's rounding on either run,
    and its difference is as large as its change; it is checked to have
    moved at most lr·(1.004 + wd·|w|) a step (AdamW's bias-corrected
    |m/sqrt(v)| over the first 3 steps, by Cauchy-Schwarz) and the rest of
    the bias within 0.4 of its change. With the key third the bias measured
    0.27-0.45 of its change over 8 data seeds (bf16 GPT-2 at the meshes of
    test_train_flat_bucket, with the GELU one Gelu node or spelled out),
    0.09 at most without it, every tensor 0.17 at most over 5 of those
    seeds (these meshes here: 0.016-0.024); and the fsdp=2 --zero 3 runs
    (with and without --no-reshard-after-forward) bit for bit the fsdp=2
    --zero 1 run's, which casts the whole replicated parameter (a Cast
    commutes with a gather);
  - fp32 at fsdp=3 --zero 3 with and without --no-reshard-after-forward:
    test_train_dist's tolerances (losses 2e-5, weights and state 2e-2 of
    their scale), nothing gathered in bf16;
  - a checkpoint saved after 2 bf16 steps at fsdp=2 --zero 3 resumes on one
    rank and at fsdp=3 --zero 3 --no-reshard-after-forward, and step 3's loss
    and gradient norm equal the uninterrupted one-rank run's within 1e-3;
  - `shardc plan --train --json` at fsdp=2 and fsdp=3 --zero 3 --precision
    bf16: the forward's all-gathers move 2 bytes an element of the linear
    layers' weights and biases (read only through their Cast) and 4 of
    every other parameter (the embeddings, read by a Gather and the tied LM
    head; the norms), to the byte, once a step under
    --no-reshard-after-forward; each rank sends (S-1)/S of it; in fp32
    every parameter's 4. At fsdp=3, where 3 divides none of most
    parameters' dims, ZeRO-3 stores those flat (passes/partition/flat.c):
    their elements are padded to a multiple of 3, and the fsdp=3 runs
    above train them so.

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
from test_train_dist import compare, load_ckpt, losses, run, same_bits  # noqa: E402

SHARDC = os.environ.get("SHARDC")
SRC = os.environ.get("SC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BATCH, STEPS = 6, 3
MODEL = os.path.join(SRC, "samples", "gpt2.onnx")
BF16 = ["--precision", "bf16"]
NRAF = ["--no-reshard-after-forward"]
ZERO1 = ["--mesh", "fsdp=2", "--zero", "1"]
BF16_MESHES = [["--mesh", "dp=2"], ZERO1, ["--mesh", "fsdp=2", "--zero", "3"], ["--mesh", "fsdp=2", "--zero", "3"] + NRAF,
               ["--mesh", "fsdp=3", "--zero", "3"], ["--mesh", "fsdp=3", "--zero", "3"] + NRAF,
               ["--mesh", "pp=2,fsdp=3", "--zero", "3", "--microbatches", "2",
                "--schedule", "1f1b"]]
WEIGHT_TOL = 0.4
LR, WEIGHT_DECAY = 1e-3, 0.01  # AdamW's lr here and its default weight decay
F32_MESHES = [["--mesh", "fsdp=3", "--zero", "3"], ["--mesh", "fsdp=3", "--zero", "3"] + NRAF]


def base_args(tmp):
    r = np.random.RandomState(13)
    ids, lab = os.path.join(tmp, "ids.npy"), os.path.join(tmp, "labels.npy")
    np.save(ids, r.randint(0, 1000, (BATCH, 16)).astype(np.int64))
    np.save(lab, r.randint(0, 1000, (BATCH, 16)).astype(np.int64))
    return [MODEL, "--dim", f"batch={BATCH}", "--threads", "1", "--data", f"input_ids={ids}",
            "--labels", lab, "--optimizer", "adamw", "--lr", str(LR), "--clip-grad-norm", "1"]


def rel(a, b):
    return abs(a - b) / max(abs(a), 1e-30)


def bf16_close(what, ref, got, init):
    la, lb = losses(ref["log"]), losses(got["log"])
    if not check(len(la) == len(lb) == STEPS, f"bf16 {what}: {len(lb)} steps logged"):
        return
    worst = 0.0
    for a, b in zip(la, lb):
        for k in ("loss", "grad_norm"):
            ok = a[k] is not None and b[k] is not None and rel(a[k], b[k]) <= 1e-3
            check(ok, f"bf16 {what}: step {a['step']} {k} {b[k]} vs one rank {a[k]}")
            if ok:
                worst = max(worst, rel(a[k], b[k]))
    wa, wb = load_ckpt(ref["ck"], "weights"), load_ckpt(got["ck"], "weights")
    check(sorted(wa) == sorted(wb), f"bf16 {what}: weight tensors differ")
    wworst = 0.0
    for k, a in wa.items():
        b = wb.get(k)
        if b is None or not check(a.shape == b.shape and np.isfinite(b).all(),
                                  f"bf16 {what}: '{k}' shape or not finite"):
            continue
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        w0 = init[k].astype(np.float64) if k in init else np.zeros_like(a64)
        if k.endswith("attn.c_attn.bias") and a64.size % 3 == 0:
            # the key third: a zero gradient in exact arithmetic (above)
            n = a64.size // 3
            key = slice(n, 2 * n)
            most = np.abs(b64[key] - w0[key]).max()
            bound = STEPS * LR * (1.004 + WEIGHT_DECAY * (np.abs(w0[key]).max() + STEPS * LR))
            check(most <= bound, f"bf16 {what}: '{k}' key third moved {most:.3g}, "
                  f"AdamW's {STEPS} steps at most {bound:.3g}")
            a64, b64, w0 = (np.r_[x[:n], x[2 * n:]] for x in (a64, b64, w0))
        scale = np.linalg.norm(a64 - w0) if k in init else np.linalg.norm(a64)
        err = np.linalg.norm(a64 - b64)
        wworst = max(wworst, err / max(scale, 1e-30))
        check(err <= WEIGHT_TOL * scale + 1e-9,
              f"bf16 {what}: weight '{k}' differs by {err:.3g} (change {scale:.3g}, 2-norms)")
    print(f"gpt2 bf16 {what:60s} loss/norm rel {worst:.2e}, weights {wworst:.2e} of change")


def gathered(j):
    """(forward bytes, all bytes, sent a rank) of the plan's all-gathers."""
    fw = al = sent = 0
    for c in j["collectives"]:
        if c["op"] == "AllGather":
            al += c["bytes"]
            sent += c["sent"]
            fw += c["bytes"] - c["sent_backward"] * c["group"] // (c["group"] - 1)
    return fw, al, sent


def main():
    if not SHARDC:
        print("SHARDC is not set")
        return 1
    init = {t.name: numpy_helper.to_array(t) for t in onnx.load(MODEL).graph.initializer}
    with tempfile.TemporaryDirectory() as tmp:
        base = base_args(tmp)
        runs = {}
        for i, (prec, mesh) in enumerate([("bf16", [])] + [("bf16", m) for m in BF16_MESHES] +
                                         [("f32", [])] + [("f32", m) for m in F32_MESHES]):
            d = os.path.join(tmp, f"run_{i}")
            out = {"log": d + ".jsonl", "ck": d + "_ck"}
            out["p"] = run(base + (BF16 if prec == "bf16" else []) +
                           ["--steps", str(STEPS), "--save", out["ck"], "--log-json", out["log"]]
                           + mesh)
            what = " ".join(mesh)
            ok = check(out["p"].returncode == 0, f"{prec} {what or 'one rank'}: "
                       f"{out['p'].stderr[-800:]}")
            if ok and "fsdp=2" in what:
                check("fallback" not in out["p"].stderr,
                      f"{prec} {what}: fallbacks {out['p'].stderr[-500:]}")
            runs[(prec, what)] = out if ok else None
        for prec, meshes in (("bf16", BF16_MESHES), ("f32", F32_MESHES)):
            ref = runs[(prec, "")]
            for mesh in meshes:
                what = " ".join(mesh)
                got = runs[(prec, what)]
                if ref is None or got is None:
                    continue
                if prec == "bf16":
                    bf16_close(what, ref, got, init)
                else:
                    worst = compare("gpt2", what, ref, got, init, 2e-2)
                    print(f"gpt2 f32  {what:60s} loss/norm rel diff {worst:.2e}")

        # a Cast commutes with a gather: ZeRO-3's bf16 gathers give ZeRO-1's bits
        for extra in ([], NRAF):
            z3 = runs[("bf16", " ".join(["--mesh", "fsdp=2", "--zero", "3"] + extra))]
            if z3 and runs[("bf16", " ".join(ZERO1))]:
                same_bits("gpt2 bf16", "fsdp=2 --zero 3 " + " ".join(extra),
                          runs[("bf16", " ".join(ZERO1))], z3)

        # resuming a bf16 ZeRO-3 checkpoint on one rank and at fsdp=3
        full = losses(runs[("bf16", "")]["log"]) if runs[("bf16", "")] else None
        ck = os.path.join(tmp, "z3_ck")
        p = run(base + BF16 + ["--steps", "2", "--save", ck, "--mesh", "fsdp=2", "--zero", "3"])
        if full and check(p.returncode == 0, f"save at fsdp=2 --zero 3: {p.stderr[-500:]}"):
            for mesh in ([], ["--mesh", "fsdp=3", "--zero", "3"] + NRAF):
                log = os.path.join(tmp, "resume_%d.jsonl" % len(mesh))
                p = run(base + BF16 + ["--steps", "3", "--resume", ck, "--log-json", log] + mesh)
                if not check(p.returncode == 0, f"resume at {mesh}: {p.stderr[-500:]}"):
                    continue
                got = losses(log)
                check(len(got) == 1 and got[0]["step"] == 3 and
                      rel(full[2]["loss"], got[0]["loss"]) <= 1e-3 and
                      rel(full[2]["grad_norm"], got[0]["grad_norm"]) <= 1e-3,
                      f"resume at {mesh or 'one rank'}: step 3 {got} vs {full[2]}")

    # the gathers' bytes against the formula: S = 2 (dims sharded), S = 3
    # (flat: each parameter's numel padded to a multiple of 3)
    linear = ("c_attn", "c_proj", "c_fc")
    trained = {k: v for k, v in init.items() if not k.endswith(".T")}  # the tied copy
    for S in (2, 3):
        def padded(n):
            return (n + S - 1) // S * S
        low = sum(padded(v.size) for k, v in trained.items() if any(s in k for s in linear))
        high = sum(padded(v.size) for k, v in trained.items() if not any(s in k for s in linear))
        want = {"bf16": 2 * low + 4 * high, "f32": 4 * (low + high)}
        for prec in ("bf16", "f32"):
            for extra in ([], NRAF):
                p = subprocess.run([SHARDC, "plan", MODEL, "--train", "--dim", "batch=6",
                                    "--json", "--mesh", f"fsdp={S}", "--zero", "3"] +
                                   (BF16 if prec == "bf16" else []) + extra,
                                   capture_output=True, text=True, timeout=300)
                if not check(p.returncode == 0, f"plan {prec} {extra}: {p.stderr[-500:]}"):
                    continue
                fw, al, sent = gathered(json.loads(p.stdout))
                check(fw == want[prec] and S * sent == (S - 1) * al and
                      (al == fw) == bool(extra),
                      f"plan fsdp={S} --zero 3 {prec} {' '.join(extra)}: all-gathers move {al} "
                      f"bytes, {fw} in the forward, send {sent} a rank; the formula "
                      f"{want[prec]} (bf16 elements {low}, f32 {high})")
                print(f"plan fsdp={S} --zero 3 {prec} {' '.join(extra):28s} forward gathers "
                      f"{fw} bytes (formula {want[prec]}), step {al}, sent a rank {sent}")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
