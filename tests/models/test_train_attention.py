"""test_train_attention.py — training through fused attention
(passes/fuse_attention.c, the FusedAttention gradient rule, the CPU
device's attention steps) equals training with the cores unfused
(--no-fuse-attention): the GPT-2 sample, 4 AdamW steps on seeded random
tokens, in fp32 and bf16, on one rank and over dp=2 and tp=2 thread-ranks.

Per step, the loss and the gradient norm of the fused run against the
unfused run of the same mesh and precision:
  fp32: |a - b| <= 1e-5 |a| + 1e-6 — the same products in another order
        (blocked online softmax against a materialised one; measured at
        most 2.1e-7 relative);
  bf16: |a - b| <= 5e-3 |a| + 1e-6 — the fused step multiplies f32
        probabilities by V where the unfused one rounds them to bf16
        first: about a unit of 2^-8 (3.9e-3) at worst (measured at most
        7e-4 relative).
Both runs must report the cores fused (2) or not ("not fused") in
`shardc plan --train --json` for that mesh. No NaN.
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
MESHES = [[], ["--mesh", "dp=2"], ["--mesh", "tp=2"]]
PRECISIONS = {"fp32": 1e-5, "bf16": 5e-3}


def main():
    if not SHARDC:
        print("SHARDC not set")
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        rng = np.random.RandomState(5)
        ids, labels = os.path.join(tmp, "ids.npy"), os.path.join(tmp, "labels.npy")
        np.save(ids, rng.randint(0, 1000, (4, 16)).astype(np.int64))
        np.save(labels, rng.randint(0, 1000, (4, 16)).astype(np.int64))
        jobs = []
        for prec in PRECISIONS:
            for mesh in MESHES:
                for fused in (True, False):
                    jobs.append((prec, mesh, fused))

        def job(j):
            prec, mesh, fused = j
            tag = f"{prec} {' '.join(mesh) or 'one rank'} {'fused' if fused else 'unfused'}"
            log = os.path.join(tmp, tag.replace(" ", "_").replace("=", "") + ".jsonl")
            extra = ([] if fused else ["--no-fuse-attention"]) + mesh + \
                (["--precision", "bf16"] if prec == "bf16" else [])
            p = subprocess.run([SHARDC, "train", MODEL, "--dim", "batch=4", "--data",
                                f"input_ids={ids}", "--labels", labels, "--steps", str(STEPS),
                                "--optimizer", "adamw", "--lr", "1e-3", "--threads", "1",
                                "--log-json", log] + extra,
                               capture_output=True, text=True, timeout=600)
            q = subprocess.run([SHARDC, "plan", MODEL, "--train", "--dim", "batch=4", "--json"] +
                               extra, capture_output=True, text=True, timeout=600)
            return tag, p, log, q

        with ThreadPoolExecutor(2) as ex:
            results = list(ex.map(job, jobs))
        for i in range(0, len(results), 2):
            (tf, pf, logf, qf), (tu, pu, logu, qu) = results[i], results[i + 1]
            prec = jobs[i][0]
            ok = check(pf.returncode == 0, f"{tf}: exit {pf.returncode}: {pf.stderr[-1500:]}")
            ok = check(pu.returncode == 0, f"{tu}: exit {pu.returncode}: {pu.stderr[-1500:]}") and ok
            if qf.returncode == 0 and qu.returncode == 0:
                af, au = json.loads(qf.stdout)["attention"], json.loads(qu.stdout)["attention"]
                check(af["ran"] and af["fused"] == 2, f"{tf}: plan says {af}")
                check(not au["ran"] and au["fused"] == 0, f"{tu}: plan says {au}")
            else:
                check(False, f"{tf}: plan failed: {qf.stderr[-800:]} {qu.stderr[-800:]}")
            if not ok:
                continue
            same_steps(tf, logu, logf, STEPS, PRECISIONS[prec], "unfused")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
