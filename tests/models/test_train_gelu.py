"""test_train_gelu.py — training through the folded GELU
(passes/fuse_gelu.c: GPT-2's gelu_new, eight ops, made one
Gelu(approximate="tanh") node before autodiff) equals training with the
chain kept (SHARDC_NO_FUSE_GELU=1): the GPT-2 sample, 4 AdamW steps on
seeded random tokens, in fp32 on one rank and over tp=2 thread-ranks, and
in bf16 on one rank.

Per step, the loss and the gradient norm of the folded run against the
kept run of the same mesh and precision:
  fp32: |a - b| <= 1e-5 |a| + 1e-6 — the same formula with the same f32
        constants, evaluated in another order (the Gelu's gradient rule
        against autodiff of the eight ops);
  bf16: |a - b| <= 5e-3 |a| + 1e-6 — the kept chain rounds each of its
        intermediate values to bf16, the Gelu kernel only its result:
        about a unit of 2^-8 (3.9e-3) at worst.
`shardc plan --train --json` must show what the fold buys: the folded
step's activations (forward values the backward reads) below the kept
one's, on one rank at batch=4 (the GELU's input alone saved in place of
the chain's intermediate values). No NaN.
Environment: SHARDC, SHARDC_SOURCE_DIR. Exit 0 on success, 1 on failure."""
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from checks import check, finish, same_steps

SHARDC = os.environ.get("SHARDC")
SRC = os.environ.get("SHARDC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
MODEL = os.path.join(SRC, "samples", "gpt2.onnx")
STEPS = 4
RUNS = [("fp32", []), ("fp32", ["--mesh", "tp=2"]), ("bf16", [])]
TOL = {"fp32": 1e-5, "bf16": 5e-3}


def env(folded):
    e = dict(os.environ)
    e.pop("SHARDC_NO_FUSE_GELU", None)
    if not folded:
        e["SHARDC_NO_FUSE_GELU"] = "1"
    return e


def main():
    if not SHARDC:
        print("SHARDC not set")
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        rng = np.random.RandomState(11)
        ids, labels = os.path.join(tmp, "ids.npy"), os.path.join(tmp, "labels.npy")
        np.save(ids, rng.randint(0, 1000, (4, 16)).astype(np.int64))
        np.save(labels, rng.randint(0, 1000, (4, 16)).astype(np.int64))
        jobs = [(prec, mesh, folded) for prec, mesh in RUNS for folded in (True, False)]

        def job(j):
            prec, mesh, folded = j
            tag = f"{prec} {' '.join(mesh) or 'one rank'} {'folded' if folded else 'kept'}"
            log = os.path.join(tmp, tag.replace(" ", "_").replace("=", "") + ".jsonl")
            extra = mesh + (["--precision", "bf16"] if prec == "bf16" else [])
            p = subprocess.run([SHARDC, "train", MODEL, "--dim", "batch=4", "--data",
                                f"input_ids={ids}", "--labels", labels, "--steps", str(STEPS),
                                "--optimizer", "adamw", "--lr", "1e-3", "--threads", "1",
                                "--log-json", log] + extra,
                               capture_output=True, text=True, timeout=600, env=env(folded))
            return tag, p, log

        with ThreadPoolExecutor(2) as ex:
            results = list(ex.map(job, jobs))
        for i in range(0, len(results), 2):
            (tf, pf, logf), (tk, pk, logk) = results[i], results[i + 1]
            prec = jobs[i][0]
            ok = check(pf.returncode == 0, f"{tf}: exit {pf.returncode}: {pf.stderr[-1500:]}")
            ok = check(pk.returncode == 0, f"{tk}: exit {pk.returncode}: {pk.stderr[-1500:]}") and ok
            if not ok:
                continue
            same_steps(tf, logk, logf, STEPS, TOL[prec], "kept")
        acts = {}
        for folded in (True, False):
            q = subprocess.run([SHARDC, "plan", MODEL, "--train", "--dim", "batch=4", "--json"],
                               capture_output=True, text=True, timeout=600, env=env(folded))
            if check(q.returncode == 0, f"plan --train: {q.stderr[-800:]}"):
                acts[folded] = json.loads(q.stdout)["live"]["activations"]
        if len(acts) == 2:
            check(0 < acts[True] < acts[False],
                  f"plan --train: activations {acts[True]} bytes folded, {acts[False]} kept")
            print(f"ok   plan --train batch=4: activations {acts[False]:,} -> {acts[True]:,} bytes")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
