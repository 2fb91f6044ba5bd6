"""test_offload_cuda.py — activation offloading on the CUDA device, on the
emulated GPU (SHARDC_CUDA_EMU=1: the project's fake driver, whose streams
are threads and whose race check reports operations of two streams on the
same device memory that no event orders; docs/offload.md).

GPT-2 sample, batch 4, AdamW, --recompute full, 2 steps on seeded random
tokens, --device cuda:
  - with --offload-activations the logged losses, gradient norms and
    learning rates are bit-identical to the same run without it (the same
    kernels in the same order; the copies run on a copy stream into pinned
    host memory);
  - the fake driver counts no violation, and the bytes copied device to
    host and host to device each grow by exactly the offloaded bytes per
    step (`plan --train --json`'s offload.bytes: every offloaded value goes
    out once and back once a step), CUDA graph replays included;
  - with the test hook SHARDC_CUDA_SKIP_COPY_WAITS=1 (the compute stream no
    longer waits for the copies back) and --no-cuda-graph, the race check
    reports a race: the wait the offloading inserts is what orders them;
  - pipelined (--mesh pp=2 --microbatches 2 --schedule 1f1b --comm
    cuda-local, horizon 1): the log is bit-identical to the pipelined run
    without offloading, the fake driver counts no violation in either, and
    each pipeline rank's stash peak and host pool are the plan's
    (docs/offload.md, "Pipelines"); the copies out and back run on each
    pipeline rank's copy queue between host buffers (the stash is host
    memory there), which the fake driver does not see: with the test hook
    SHARDC_PIPE_SKIP_COPY_WAITS=1 the rank's own race check refuses to go
    on past a copy out it did not wait for.

Environment: SHARDC. Exit 0 on success, 1 on any failure, 77 when shardc
has no CUDA target."""
import functools
import json
import os
import re
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "models"))
from checks import (check, fake_cuda_summary as summary, finish, has_cuda_target,  # noqa: E402
                    run_shardc, skip_all)

SHARDC = os.environ.get("SHARDC")
SRC = os.environ.get("SC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
MODEL = os.path.join(SRC, "samples", "gpt2.onnx")
STEP = ["--dim", "batch=4", "--optimizer", "adamw", "--recompute", "full"]
KEYS = ("step", "loss", "grad_norm", "lr")
STEPS = 2


shardc = functools.partial(run_shardc, SHARDC)


PIPE = ["--mesh", "pp=2", "--microbatches", "2", "--schedule", "1f1b"]


def with_and_without(tmp, what, ref_args, off_args):
    """Trains without and with offloading: the logs bit-identical, no
    violation in either; (ref's run, off's run, their fake driver counts)
    when both ran, else None."""
    r0, ref, c0 = train(tmp, what + "-ref", ref_args, quiet=False)
    r1, got, c1 = train(tmp, what + "-off", off_args, quiet=False)
    if not check(r0.returncode == 0 and r1.returncode == 0,
                 f"{what}: train: {r0.stderr[-400:]} / {r1.stderr[-400:]}"):
        return None
    check(len(got) == STEPS and got == ref,
          f"{what}: the log with offloading {got} differs from without {ref}")
    check(c0.get("violations", -1) == 0 and c1.get("violations", -1) == 0,
          f"{what}: fake driver violations: {c0} / {c1}")
    return r0, r1, c0, c1


def per_rank(what, out):
    m = re.search(what + r" .*?rank: ([\d ]+) bytes", out)
    return [int(x) for x in m.group(1).split()] if m else None


def pipelined(tmp):
    off = ["--offload-activations", "--activation-loading-horizon", "1"]
    p = shardc(["plan", "--train", MODEL, "--json"] + STEP + PIPE + off)
    if not check(p.returncode == 0, f"plan pp=2: {p.stderr[-500:]}"):
        return
    ranks = json.loads(p.stdout)["pipeline"]["ranks"]
    check(ranks[0]["offload"]["values"] > 0, f"plan pp=2: nothing offloaded: {ranks[0]}")
    pipe = PIPE + ["--comm", "cuda-local"]
    runs = with_and_without(tmp, "pp2", pipe, pipe + off)
    if runs:
        r1 = runs[1]
        stash, host = per_rank("stashed values", r1.stdout), per_rank("host pool", r1.stdout)
        check(stash == [r["stash_peak"] for r in ranks] and
              host == [r["offload"]["host_pool"] for r in ranks],
              f"pp=2: stash {stash} and host pool {host} per rank, planned {ranks}")
    r2, _, _ = train(tmp, "pp2-skip", pipe + off, env={"SHARDC_PIPE_SKIP_COPY_WAITS": "1"})
    check(r2.returncode != 0 and "race: pipeline rank" in r2.stderr,
          f"pp=2: a missing wait for a copy out was not caught: {r2.stderr[-400:]}")


def train(tmp, tag, extra, env=None, quiet=True):
    log, lj = os.path.join(tmp, tag + ".cuda.log"), os.path.join(tmp, tag + ".jsonl")
    e = {"SHARDC_CUDA_EMU": "1", "SHARDC_FAKE_CUDA_LOG": log}
    e.update(env or {})
    r = shardc(["train", MODEL, "--device", "cuda", "--no-allow-tf32", "--steps", str(STEPS),
                "--data", "input_ids=" + os.path.join(tmp, "ids.npy"),
                "--labels", os.path.join(tmp, "labels.npy"), "--log-json", lj] +
               (["--quiet"] if quiet else []) + STEP + extra, env=e)
    logs = [[x.get(k) for k in KEYS] for x in map(json.loads, open(lj))] \
        if os.path.exists(lj) else []
    return r, logs, summary(log) if os.path.exists(log) else {}


def main():
    if not SHARDC:
        print("SHARDC not set")
        return 1
    if not has_cuda_target(SHARDC):
        return skip_all("this shardc has no cuda target (built without NVRTC)")
    with tempfile.TemporaryDirectory() as tmp:
        r = np.random.RandomState(41)
        np.save(os.path.join(tmp, "ids.npy"), r.randint(0, 1000, (8, 16)).astype(np.int64))
        np.save(os.path.join(tmp, "labels.npy"), r.randint(0, 1000, (8, 16)).astype(np.int64))
        p = shardc(["plan", "--train", MODEL, "--json", "--offload-activations"] + STEP)
        if not check(p.returncode == 0, f"plan: {p.stderr[-500:]}"):
            return finish()
        off = json.loads(p.stdout)["offload"]
        check(off["values"] > 0, f"plan: nothing offloaded: {off}")
        runs = with_and_without(tmp, "one-rank", [], ["--offload-activations"])
        if runs:
            c0, c1 = runs[2], runs[3]
            for k in ("dtoh_bytes", "htod_bytes"):
                check(c1.get(k, 0) - c0.get(k, 0) == STEPS * off["bytes"],
                      f"{k}: {c1.get(k)} with offloading, {c0.get(k)} without: not "
                      f"{STEPS} x {off['bytes']} more")
        r2, _, c2 = train(tmp, "skip", ["--offload-activations", "--no-cuda-graph"],
                          env={"SHARDC_CUDA_SKIP_COPY_WAITS": "1"})
        check(c2.get("violations", 0) > 0 and "race" in r2.stderr,
              f"a missing wait was not caught: {c2}, {r2.stderr[-400:]}")
        pipelined(tmp)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
