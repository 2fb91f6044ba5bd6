"""test_offload_pipe.py — activation offloading under pipelined training
(--offload-activations with --mesh pp=2; docs/offload.md, "Pipelines"):
the stashed microbatches of the saved activations wait in each pipeline
rank's host pool, training does not change by a bit, and the device's
stash peak drops by what the plan says.

GPT-2 sample, batch 8 in 4 microbatches, AdamW, 2 steps on seeded random
tokens (test_offload.py's helpers):
  - under gpipe (horizon 0) and 1f1b (horizon 1), with --recompute full and
    none, and interleaved (2 virtual stages, none, horizon 1): the logs and
    checkpoints equal the pipelined run without offloading bit for bit;
    per pipeline rank the plan's stash peak and total without offloading
    equal those of the plan compiled without it, `train` measures the
    planned stash peak and host pool to the byte, rank 0 offloads and its
    stash peak drops; with full recompute rank 0's figures are the
    schedule's: rank 0 runs both blocks, so each microbatch offloads their
    two inputs (8,192 bytes each); GPipe parks all 4 microbatches' in the
    host pool and, at horizon 0, has one microbatch's back at its stash
    peak (the drop is the other 3), 1F1B parks 2 (min(P - rank, M)) and,
    at horizon 1, the drop is one microbatch's;
  - the copies out run on the copy queue, ordered by waits: with the test
    hook SHARDC_PIPE_SKIP_COPY_WAITS=1 (the rank's thread no longer waits
    for them) the rank's race check refuses to go on past a value whose
    copy out it did not wait for (1f1b, none, horizon 1: both a value made
    here, copied out of the arena, and one received, copied out of its
    stash slot);
  - a pipelined training bundle compiled with offloading trains with its
    host pool and logs what the model file logs.

Environment: SHARDC. Exit 0 on success, 1 on any failure."""
import json
import os
import re
import subprocess
import sys

from checks import check
from test_offload import KEYS, MODEL, SHARDC, run_with_data, same_bits, shardc

PIPE = ["--dim", "batch=8", "--optimizer", "adamw", "--mesh", "pp=2", "--microbatches", "4"]


def pipe_train(tmp, tag, extra):
    """A pipelined run: its log, checkpoint and the per-rank stash peak and
    host pool `train` prints."""
    log, ck = os.path.join(tmp, tag + ".jsonl"), os.path.join(tmp, tag + ".ck")
    r = shardc(["train", MODEL, "--data", "input_ids=" + os.path.join(tmp, "ids.npy"),
                "--labels", os.path.join(tmp, "labels.npy"), "--steps", "2",
                "--log-json", log, "--save", ck] + PIPE + extra)
    if not check(r.returncode == 0, f"train {tag}: exit {r.returncode}: {r.stderr[-800:]}"):
        return None
    st = re.search(r"stashed values .*?rank: ([\d ]+) bytes", r.stdout)
    h = re.search(r"host pool of offloaded activations .*?rank: ([\d ]+) bytes", r.stdout)
    return {"log": [[e.get(k) for k in KEYS] for e in map(json.loads, open(log))], "ck": ck,
            "stash": [int(x) for x in st.group(1).split()] if st else None,
            "host": [int(x) for x in h.group(1).split()] if h else None}


def pipe_plan(extra):
    r = shardc(["plan", "--train", MODEL, "--json"] + PIPE + extra)
    if not check(r.returncode == 0, f"plan {extra}: exit {r.returncode}: {r.stderr[-800:]}"):
        return None
    return json.loads(r.stdout)["pipeline"]["ranks"]


def pipelined(tmp):
    """Offloading under pipelined training (docs/offload.md, "Pipelines")."""
    M = 4
    cases = [("gpipe", "full", "0"), ("1f1b", "full", "1"), ("gpipe", "none", "0"),
             ("1f1b", "none", "1"), ("interleaved", "none", "1")]
    for sched, rc, h in cases:
        base = ["--schedule", sched, "--recompute", rc] + \
            (["--virtual-stages", "2"] if sched == "interleaved" else [])
        off = base + ["--offload-activations", "--activation-loading-horizon", h]
        what = f"pp=2 {sched} --recompute {rc}, horizon {h}"
        tag = f"pp-{sched}-{rc}"
        ref, got = pipe_train(tmp, tag + "-ref", base), pipe_train(tmp, tag + "-off", off)
        pref, p = pipe_plan(base), pipe_plan(off)
        if not (ref and got and pref and p):
            continue
        same_bits(what, ref, got, steps=2)
        check(ref["host"] is None and got["stash"] == [r["stash_peak"] for r in p] and
              got["host"] == [r["offload"]["host_pool"] for r in p],
              f"{what}: the run kept stash {got['stash']} and host pool {got['host']} per "
              f"rank, planned {[r['stash_peak'] for r in p]} and "
              f"{[r['offload']['host_pool'] for r in p]}")
        for q, (a, b) in enumerate(zip(pref, p)):
            o = b["offload"]
            check(o["stash_peak_without"] == a["stash_peak"] and
                  o["total_without"] == a["total"] and
                  o["saved_at_peak"] == a["total"] - b["total"] and
                  b["arena"] == a["arena"] and o["host_pool"] <= o["bytes"],
                  f"{what}: rank {q}: {o}, without offloading stash {a['stash_peak']} "
                  f"total {a['total']}, with total {b['total']}")
        o0 = p[0]["offload"]
        check(o0["values"] > 0 and p[0]["stash_peak"] < o0["stash_peak_without"],
              f"{what}: rank 0 offloads {o0['values']} values, stash peak "
              f"{p[0]['stash_peak']} against {o0['stash_peak_without']} without")
        if rc == "full":
            one = o0["bytes"] // M  # one microbatch's: both blocks' inputs
            parked = M if sched == "gpipe" else min(2, M)  # 1F1B: min(P - rank, M)
            drop = (M - 1) * one if sched == "gpipe" else one
            check(o0["values"] == 2 * M and one == 2 * (8 // M) * 16 * 64 * 4 and
                  o0["host_pool"] == parked * one and
                  o0["stash_peak_without"] - p[0]["stash_peak"] == drop,
                  f"{what}: rank 0 offloaded {o0['values']} values of {one} bytes, host pool "
                  f"{o0['host_pool']}, stash peak {p[0]['stash_peak']} against "
                  f"{o0['stash_peak_without']} without: expected {parked} parked and a drop "
                  f"of {drop}")
    # a missing wait for a copy out is caught
    args = ["train", MODEL, "--data", "input_ids=" + os.path.join(tmp, "ids.npy"),
            "--labels", os.path.join(tmp, "labels.npy"), "--steps", "1"] + PIPE + \
        ["--schedule", "1f1b", "--recompute", "none", "--offload-activations",
         "--activation-loading-horizon", "1"]
    r = subprocess.run([SHARDC] + args, capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, SHARDC_PIPE_SKIP_COPY_WAITS="1"))
    check(r.returncode != 0 and "race: pipeline rank" in r.stderr and
          "before waiting for its copy to the host pool" in r.stderr,
          f"a missing wait for a copy out was not caught: exit {r.returncode}, "
          f"{r.stderr[-400:]}")
    # a pipelined training bundle carries the offloaded names and the horizon
    bundle = os.path.join(tmp, "pp-bundle")
    base = ["--schedule", "1f1b", "--recompute", "none"]
    r = shardc(["compile", MODEL, "--train", "-o", bundle, "--offload-activations",
                "--activation-loading-horizon", "1"] + PIPE + base)
    if check(r.returncode == 0, f"compile --train --mesh pp=2: {r.stderr[-500:]}"):
        log = os.path.join(tmp, "pp-bundle.jsonl")
        r = shardc(["train", bundle, "--data", "input_ids=" + os.path.join(tmp, "ids.npy"),
                    "--labels", os.path.join(tmp, "labels.npy"), "--steps", "2",
                    "--log-json", log])
        ref = pipe_train(tmp, "pp-1f1b-none-ref-again", base)
        if check(r.returncode == 0 and "host pool of offloaded activations" in r.stdout,
                 f"train pipelined BUNDLE: {r.stderr[-500:]} {r.stdout[-500:]}") and ref:
            got = [[e.get(k) for k in KEYS] for e in map(json.loads, open(log))]
            check(got == ref["log"], f"the pipelined bundle's log {got} vs {ref['log']}")


def main():
    return run_with_data(pipelined)


if __name__ == "__main__":
    sys.exit(main())
