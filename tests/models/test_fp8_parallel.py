"""test_fp8_parallel.py — `--precision fp8` under tensor and pipeline parallelism.

The GPT-2 sample (batch 8, AdamW, lr 1e-3, --fp8-amax-history 4) at tp=2
with --sequence-parallel, dp=2 x tp=2, pp=2 (1F1B, 2 microbatches),
tp=2 x pp=2 (1F1B, 2 microbatches) and dp=2 with --grad-accum 2 (the
runs before the last skip the update and the gradients' reductions; each
run's amax joins "accum:T.fp8_amax") against one rank's fp8 run:

  * after step 1 the 32 X and W history and scale tensors bit for bit: a
    weight split over tp has its amax reduced with a max all-reduce over
    the tp group (a ReduceMax over a split dim, passes/partition/
    shard_rule.h), a pipelined step records the max over its microbatches
    (the accumulator "accum:T.fp8_amax"), so every rank quantizes with one
    rank's scales. The 16 dY tensors: under a pipeline each microbatch's
    loss is a mean over half the rows, so its dY and amax are twice one
    rank's, as with --grad-accum 2 (here and test_fp8_state.py); at step 1's scale of
    1 E5M2 rounds the small gradients to subnormals, so upstream sums in
    another order (tp's partial products) move some of them: each dY amax
    within 10 % of one rank's (times 2 under a pipeline), as
    test_fp8_state.py's --grad-accum bound;
  * step 1's loss within 1e-6 (the same forward: the quantized X and W are
    the same values; the loss sums in another order);
  * step 1's gradient norm within 5e-3: its dY roundings are the coarse
    subnormal ones above (measured: --grad-accum 2 7.2e-4, tp=2 2.5e-3);
  * tp=2 x pp=2 over 4 steps: losses within 5e-4 of one rank's, the bound
    test_fp8_state.py uses for dp=2 and --grad-accum 2 (the split gradient
    sums round differently in bf16, which FP8's rounding widens).

Environment: SHARDC. Exit 0 on success, 1 on any failure (checks.py).
"""
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor

from checks import check
from fp8_runs import merged, run_test, train

BASE = ["--precision", "fp8", "--fp8-amax-history", "4"]
PIPE = ["--microbatches", "2", "--schedule", "1f1b"]
MESHES = {"tp2sp": ["--mesh", "tp=2", "--sequence-parallel"], "dp2tp2": ["--mesh", "dp=2,tp=2"],
          "pp2": ["--mesh", "pp=2"] + PIPE, "tp2pp2": ["--mesh", "tp=2,pp=2"] + PIPE,
          "dp2ga2": ["--mesh", "dp=2", "--grad-accum", "2"]}
BATCH = {"dp2ga2": 4}  # a microbatch's: 2 of them, the step's 8 rows


def norms(work, tag):
    log = os.path.join(work, tag + ".jsonl")
    return [json.loads(l)["grad_norm"] for l in open(log) if l.strip()] if os.path.exists(log) else []


def parts(work):
    jobs = {"one": (BASE + ["--save", f"{work}/one"], 1),
            "one4": (BASE, 4), "tp2pp2_4": (BASE + MESHES["tp2pp2"], 4)}
    for tag, mesh in MESHES.items():
        jobs[tag] = (BASE + mesh + ["--save", f"{work}/{tag}"], 1)
    with ThreadPoolExecutor(2) as pool:
        futs = {t: pool.submit(train, work, t, extra, steps, batch=BATCH.get(t, 8))
                for t, (extra, steps) in jobs.items()}
        losses = {t: f.result() for t, f in futs.items()}
    if len(losses["one"]) != 1:
        check(False, "one rank ran")
        return
    ref = merged(f"{work}/one", "optimizer")
    keys = sorted(k for k in ref if "fp8" in k)
    check(len(keys) == 48, f"48 FP8 state tensors on one rank: {len(keys)}")
    xw = [k for k in keys if not k.split(".fp8")[0].endswith("/grad")]
    for tag in MESHES:
        if len(losses[tag]) != 1:
            check(False, f"{tag} ran")
            continue
        got = merged(f"{work}/{tag}", "optimizer")
        check(all(k in got for k in keys), f"{tag}: the FP8 state tensors")
        diff = [k for k in xw if k in got and got[k].tobytes() != ref[k].tobytes()]
        check(len(xw) == 32 and not diff, f"{tag}: step 1's X/W FP8 state differs: {diff[:3]}")
        times = 2.0 if "pp" in tag or "ga" in tag else 1.0  # a microbatch's mean
        worst = 0.0
        for k in keys:
            if k.endswith("/grad.fp8_amax_history") and k in got:
                ratio = float(got[k][-1] / ref[k][-1]) / times
                worst = max(worst, abs(ratio - 1))
                check(abs(ratio - 1) <= 0.1 and got[k][0] == 0 and not got[k][:-1].any(),
                      f"{tag} {k}: {got[k]} against {ref[k]} (x{times}: {ratio})")
        loss_rel = abs(losses[tag][0] - losses["one"][0]) / abs(losses["one"][0])
        n1, n = norms(work, tag), norms(work, "one")
        norm_rel = abs(n1[0] - n[0]) / n[0] if n1 and n else 1.0
        print(f"{tag}: step 1's {len(xw)} X/W FP8 state tensors equal one rank's bit for bit, "
              f"dY amaxes within {worst:.1e} (x{times:g}); loss within {loss_rel:.1e}, "
              f"grad norm within {norm_rel:.1e}")
        check(loss_rel <= 1e-6, f"{tag}: step 1 loss {losses[tag]} != {losses['one']}")
        check(norm_rel <= 5e-3, f"{tag}: step 1 grad norm {n1} against {n}")
    a, b = losses["tp2pp2_4"], losses["one4"]
    if len(a) != 4 or len(b) != 4:
        check(False, "the 4-step runs ran")
        return
    rel = max(abs(x - y) / abs(y) for x, y in zip(a, b))
    print(f"tp=2 x pp=2: 4 steps' losses within {rel:.1e} of one rank's")
    check(rel < 5e-4, f"tp=2 x pp=2 losses {a} not within 5e-4 of one rank's {b}")


if __name__ == "__main__":
    sys.exit(run_test(parts))
