"""test_offload.py — activation offloading (--offload-activations, codegen/
offload.c) moves saved activations to a host pool and back without
changing a bit of training, and the device's peak drops by what the plan
says.

GPT-2 sample, batch 32 (sequence 16), AdamW with clipping, 3 steps on
seeded random tokens (the third wraps around the 64 examples):
  - with --recompute full (the checkpointed block inputs are offloaded)
    at horizons 0 and the default 2, and --recompute none (every saved
    activation) at horizon 1: every logged loss, gradient norm and learning rate and
    every checkpointed weight and optimizer tensor equal the run without
    offloading, bit for bit (the copies move bytes; the kernels are the
    same);
  - `shardc plan --train --json`: with offloading, something is offloaded
    (values > 0), the host pool holds the offloaded bytes (at least them,
    at most 64-byte alignment more each: they are all parked at once where
    the forward turns into the backward), the device's peak live bytes
    drop by exactly saved_at_peak, and peak_live_without
    equals the peak live bytes of the plan compiled without offloading
    (the copies add no live bytes, so the figure is exact, not an
    estimate); without recompute the drop is most of the saved
    activations (> 40 % of the peak); with full recompute at batch 32 the
    peak is block 0's MLP backward, where no offloaded value is held, so
    it stays (saved_at_peak 0), and at batch 128 (plan only) the peak
    without offloading is block 1's MLP backward, where block 0's
    offloaded input is held: offloading lowers it (saved_at_peak > 0,
    less than that one value, as the peak moves to block 0's backward);
  - `shardc train` allocates the planned arena and the planned host pool,
    both exactly (its "memory:" lines);
  - under --mesh dp=2 and --mesh fsdp=2,tp=2 (thread-ranks) the logs with
    and without offloading are bit-identical, and so is the step the SMP v2
    keys (activation_checkpointing "full", sm_activation_offloading,
    activation_loading_horizon 1) give over --mesh dp=2;
  - under --mesh cp=2 with --recompute full and none: the log and the
    checkpoint bit-identical with and without offloading, the arena and the
    host pool allocated as planned, the device's peak live bytes lower by
    exactly saved_at_peak (without recompute lower, and the arena too), and
    the SMP v2 keys activation_checkpointing "full",
    sm_activation_offloading and context_parallel_degree 2 over --mesh dp=2
    give that step (its log and host pool);
  - a training bundle compiled with offloading (`compile --train`) trains
    with its host pool and logs what the model file's step without
    offloading logs;
  - --recompute auto with a budget between the step's memory with full
    recompute and with full recompute and offloading tries none,
    selective, full (over) and full+offload (fits), and chooses that;
  - the copy back points (a 4-block GPT, full recompute, H = 0 .. 3): each
    block input's copy back starts right before reload point g - H, g its
    own (the blocks in the backward's order), the first for g < H;
  - --activation-loading-horizon without --offload-activations is a usage
    error (pipelined training: test_offload_pipe.py).

The peaks above are those of GPT-2 with its GELU spelled out: the test
sets SHARDC_NO_FUSE_GELU=1 for every command (docs/passes.md, fuse-gelu),
since with the GELU one Gelu node the MLP backward holds less and the
peaks move to the LM head's gradient.
Environment: SHARDC. Exit 0 on success, 1 on any failure."""
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
from safetensors.numpy import load_file
from checks import check, finish

os.environ["SHARDC_NO_FUSE_GELU"] = "1"  # the peaks this test names (above)

SHARDC = os.environ.get("SHARDC")
SRC = os.environ.get("SC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
MODEL = os.path.join(SRC, "samples", "gpt2.onnx")
STEP = ["--dim", "batch=32", "--optimizer", "adamw", "--clip-grad-norm", "1"]
KEYS = ("step", "loss", "grad_norm", "lr")  # not time_ms


def shardc(args, timeout=300):
    return subprocess.run([SHARDC] + args, capture_output=True, text=True, timeout=timeout)


def train(tmp, tag, extra):
    log, ck = os.path.join(tmp, tag + ".jsonl"), os.path.join(tmp, tag + ".ck")
    r = shardc(["train", MODEL, "--data", "input_ids=" + os.path.join(tmp, "ids.npy"),
                "--labels", os.path.join(tmp, "labels.npy"), "--steps", "3", "--threads", "2",
                "--log-json", log, "--save", ck] + STEP + extra)
    if not check(r.returncode == 0, f"train {tag}: exit {r.returncode}: {r.stderr[-800:]}"):
        return None
    m = re.search(r"memory: arena .*?\((\d+) bytes\)", r.stdout)
    h = re.search(r"memory: host pool .*?\((\d+) bytes\)", r.stdout)
    logs = [[e.get(k) for k in KEYS] for e in map(json.loads, open(log))]
    return {"log": logs, "ck": ck, "arena": int(m.group(1)) if m else None,
            "host": int(h.group(1)) if h else 0}


def plan(extra):
    r = shardc(["plan", "--train", MODEL, "--json"] + STEP + extra)
    if not check(r.returncode == 0, f"plan {extra}: exit {r.returncode}: {r.stderr[-800:]}"):
        return None
    return json.loads(r.stdout)


def same_bits(what, ref, got, steps=3):
    check(ref["log"] == got["log"] and len(got["log"]) == steps,
          f"{what}: the log differs from the run without offloading: {got['log']} vs "
          f"{ref['log']}")
    files = sorted(f for f in os.listdir(ref["ck"]) if f.endswith(".safetensors"))
    check(len(files) >= 1 and files == sorted(f for f in os.listdir(got["ck"])
                                              if f.endswith(".safetensors")),
          f"{what}: checkpoint files {files} and {os.listdir(got['ck'])}")
    for group in files:  # weights and optimizer, or a pipeline's per rank
        wa = load_file(os.path.join(ref["ck"], group))
        wb = load_file(os.path.join(got["ck"], group))
        diff = [k for k in wa if k not in wb or wa[k].tobytes() != wb[k].tobytes()]
        check(sorted(wa) == sorted(wb) and not diff,
              f"{what}: {group} not bit-identical to the run without offloading: {diff[:5]}")
        check(all(np.isfinite(v).all() for v in wb.values()), f"{what}: {group} not finite")


def copy_back_points(tmp):
    """A 4-block GPT (shape-only, make_samples' GPT-2 graph), --recompute
    full: the compiled program (`plan --train --print-after=program`) copies
    each of the 4 block inputs back from the host pool right before reload
    point g - H (g the index of the value's own reload point, the block's
    recompute, in the order the backward reaches them; 0 when g < H), for H
    = 0 .. 3: the horizon counts blocks."""
    sys.path.insert(0, os.path.join(SRC, "samples"))
    import onnx
    from make_samples import build_gpt2_graph
    model, _ = build_gpt2_graph(dict(vocab=512, n_positions=16, n_embd=64, n_head=4,
                                     n_layer=4, seq=16), external="absent.weights")
    path = os.path.join(tmp, "gpt4.onnx")
    onnx.save(model, path)
    for h in range(4):
        r = shardc(["plan", "--train", path, "--no-weights", "--dim", "batch=4",
                    "--recompute", "full", "--offload-activations",
                    "--activation-loading-horizon", str(h), "--print-after=program"])
        steps = [re.match(r"^s(\d+) (.*)$", ln) for ln in (r.stdout + r.stderr).splitlines()]
        steps = [(int(m.group(1)), m.group(2)) for m in steps if m]
        copies, waits = {}, {}  # value -> [copy out step, copy back step]; copy -> its wait
        for i, t in steps:
            m = re.match(r"copy start b\d+ -> b\d+ \((.*)\)$", t)
            if m:
                copies.setdefault(m.group(1), []).append(i)
            m = re.match(r"wait s(\d+)", t)
            if m:
                waits[int(m.group(1))] = i
        if not check(r.returncode == 0 and len(copies) == 4 and
                     all(len(c) == 2 and c[1] in waits for c in copies.values()),
                     f"H={h}: copies {copies}: {r.stderr[-500:]}"):
            continue
        inserted = {i for i, t in steps if t.startswith(("copy start", "wait s"))}

        def next_original(i):
            return min(j for j, _ in steps if j > i and j not in inserted)
        reload = {v: next_original(waits[c[1]]) for v, c in copies.items()}
        order = sorted(copies, key=lambda v: reload[v])
        for g, v in enumerate(order):
            want = reload[order[max(g - h, 0)]]
            got = next_original(copies[v][1])
            check(got == want, f"H={h}: the copy back of {v} (reload point {g}, step "
                  f"s{reload[v]}) starts before s{got}, want s{want} (reload point "
                  f"{max(g - h, 0)})")
    print("copy back points: 4 block inputs, H = 0 .. 3, each before reload point g - H")


def held_at_peak():
    """--recompute full at batch 128: without offloading the peak is block
    1's MLP backward, where block 0's input (one of the two offloaded
    values) waits for block 0's recompute; offloading drops that step by
    exactly that value, and the step's peak moves to block 0's MLP
    backward (where nothing offloaded is held), which is then the peak:
    the plan's saving is the old peak less the new, > 0 and less than the
    one value held."""
    step = ["plan", "--train", MODEL, "--json", "--recompute", "full", "--dim", "batch=128",
            "--optimizer", "adamw", "--clip-grad-norm", "1"]
    a, b = shardc(step), shardc(step + ["--offload-activations"])
    if not check(a.returncode == 0 and b.returncode == 0,
                 f"plan --recompute full, batch 128: {a.stderr[-400:]} {b.stderr[-400:]}"):
        return
    pref, p = json.loads(a.stdout), json.loads(b.stdout)
    o = p["offload"]
    one = o["bytes"] // max(o["values"], 1)
    check(o["values"] == 2 and one == 128 * 16 * 64 * 4,
          f"batch 128: offloaded {o['values']} values, {o['bytes']} bytes")
    check(pref["peak_origin"] == "/m/transformer/h.1/mlp/c_proj/Gemm/grad/11" and
          p["peak_origin"] == "/m/transformer/h.0/mlp/c_proj/Gemm/grad/63",
          f"batch 128: peak at {pref['peak_origin']} without offloading, {p['peak_origin']} with")
    check(o["peak_live_without"] == pref["peak_live"] and
          p["peak_live"] == pref["peak_live"] - o["saved_at_peak"] and
          0 < o["saved_at_peak"] < one,
          f"batch 128: peak {p['peak_live']}, {pref['peak_live']} without, saved "
          f"{o['saved_at_peak']}, one block input {one}")


def write_data(tmp):
    """64 seeded random examples of 16 tokens: ids.npy and labels.npy."""
    r = np.random.RandomState(41)
    np.save(os.path.join(tmp, "ids.npy"), r.randint(0, 1000, (64, 16)).astype(np.int64))
    np.save(os.path.join(tmp, "labels.npy"), r.randint(0, 1000, (64, 16)).astype(np.int64))


def checks_one_step(tmp):
    """The checks of the module docstring, on the data write_data put in tmp."""
    for rc in ("full", "none"):
        base = ["--recompute", rc]
        ref = train(tmp, f"{rc}-ref", base)
        pref = plan(base)
        if not ref or not pref:
            continue
        check(ref["arena"] == pref["arena"] and ref["host"] == 0,
              f"{rc}: the run allocated {ref['arena']} bytes, planned {pref['arena']}")
        for h in (("0", None) if rc == "full" else ("1",)):
            off = base + ["--offload-activations"] + (["--activation-loading-horizon", h]
                                                      if h else [])
            what = f"--recompute {rc} --offload-activations, horizon {h or 'default'}"
            got = train(tmp, f"{rc}-{h}", off)
            p = plan(off)
            if not got or not p:
                continue
            same_bits(what, ref, got)
            o = p["offload"]
            check(o["values"] > 0 and o["bytes"] > 0, f"{what}: nothing offloaded: {o}")
            check(o["bytes"] <= o["host_pool"] <= o["bytes"] + 64 * o["values"],
                  f"{what}: host pool {o['host_pool']} for {o['bytes']} bytes offloaded")
            check(o["peak_live_without"] == pref["peak_live"],
                  f"{what}: peak without offloading {o['peak_live_without']}, but the plan "
                  f"compiled without it peaks at {pref['peak_live']}")
            check(p["peak_live"] == pref["peak_live"] - o["saved_at_peak"],
                  f"{what}: peak {p['peak_live']} against {pref['peak_live']} without, "
                  f"saved_at_peak {o['saved_at_peak']}")
            if rc == "full":
                # the peak is block 0's MLP backward, where block 0's
                # input is back on the device and block 1's is freed:
                # nothing offloaded is held there, the peak stays
                check(o["saved_at_peak"] == 0 and
                      pref["peak_origin"] == p["peak_origin"] ==
                      "/m/transformer/h.0/mlp/c_proj/Gemm/grad/63",
                      f"{what}: peak at {p['peak_origin']} (without: "
                      f"{pref['peak_origin']}), saved_at_peak {o['saved_at_peak']}")
            if rc == "none":
                check(o["saved_at_peak"] > 0.4 * pref["peak_live"],
                      f"{what}: saves {o['saved_at_peak']} of {pref['peak_live']}")
            check(got["arena"] == p["arena"] and got["arena"] < ref["arena"],
                  f"{what}: arena allocated {got['arena']}, planned {p['arena']}, "
                  f"{ref['arena']} without offloading")
            check(got["host"] == o["host_pool"],
                  f"{what}: host pool allocated {got['host']}, planned {o['host_pool']}")
            if rc == "full" and h is None and p["total"] < pref["total"]:
                # --recompute auto: full recompute alone does not fit
                # the budget, with offloading it does
                budget = (p["total"] + pref["total"]) // 2
                a = shardc(["plan", "--train", MODEL, "--json", "--recompute", "auto",
                            "--memory-budget", str(budget)] + STEP)
                chose = json.loads(a.stdout)["offload"] if a.returncode == 0 else None
                check(chose and chose["values"] == o["values"] and
                      "chose full with --offload-activations" in a.stderr and
                      re.search(r"^  full +step .*: over by", a.stderr, re.M) and
                      re.search(r"^  full\+offload +step .*: fits by", a.stderr, re.M),
                      f"--recompute auto, budget {budget}: {chose} {a.stderr[-800:]}")
    held_at_peak()
    copy_back_points(tmp)
    smp = os.path.join(tmp, "smp.json")
    with open(smp, "w") as f:
        json.dump({"activation_checkpointing": "full", "sm_activation_offloading": True,
                   "activation_loading_horizon": 1}, f)
    for mesh in ("dp=2", "fsdp=2,tp=2"):
        base = ["--mesh", mesh, "--recompute", "full"]
        ref = train(tmp, f"{mesh}-ref", base)
        runs = [("--offload-activations", train(tmp, f"{mesh}-off",
                                                base + ["--offload-activations"]))]
        if mesh == "dp=2":  # the SMP v2 keys over a world of 2: the same step
            runs.append(("--smp-config", train(tmp, "smp", ["--mesh", "dp=2",
                                                            "--smp-config", smp])))
        for how, got in runs:
            if ref and got:
                check(ref["log"] == got["log"],
                      f"--mesh {mesh} {how}: the log differs with offloading: "
                      f"{got['log']} vs {ref['log']}")
                check(got["host"] > 0, f"--mesh {mesh} {how}: no host pool allocated")
    # context parallelism: a cp rank's saved activations (its S/cp tokens,
    # the ring's blocks among them) offloaded as on one rank; the SMP v2
    # keys with context_parallel_degree over a world of 2 give that step
    for rc in ("full", "none"):
        base = ["--mesh", "cp=2", "--recompute", rc]
        what = f"--mesh cp=2 --recompute {rc} --offload-activations"
        ref, pref = train(tmp, f"cp-{rc}-ref", base), plan(base)
        got = train(tmp, f"cp-{rc}-off", base + ["--offload-activations"])
        p = plan(base + ["--offload-activations"])
        if not (ref and pref and got and p):
            continue
        same_bits(what, ref, got)
        o = p["offload"]
        check(o["values"] > 0 and 0 < o["host_pool"] <= o["bytes"] + 64 * o["values"],
              f"{what}: offloaded {o}")
        check(o["peak_live_without"] == pref["peak_live"] and
              p["peak_live"] == pref["peak_live"] - o["saved_at_peak"],
              f"{what}: peak {p['peak_live']}, {pref['peak_live']} without, {o}")
        check(got["arena"] == p["arena"] and got["host"] == o["host_pool"] and
              ref["arena"] == pref["arena"],
              f"{what}: allocated arena {got['arena']} and host pool {got['host']}, planned "
              f"{p['arena']} and {o['host_pool']}")
        if rc == "none":
            check(o["saved_at_peak"] > 0 and p["arena"] < pref["arena"],
                  f"{what}: the device peak does not drop: {o}, arena {p['arena']} against "
                  f"{pref['arena']}")
        print(f"{what}: {o['values']} values, {o['bytes']} bytes offloaded, host pool "
              f"{o['host_pool']}, peak live {pref['peak_live']} -> {p['peak_live']}, arena "
              f"{pref['arena']} -> {p['arena']}")
        if rc == "full":
            with open(smp, "w") as f:
                json.dump({"activation_checkpointing": "full", "sm_activation_offloading": True,
                           "context_parallel_degree": 2}, f)
            s2 = train(tmp, "smp-cp", ["--mesh", "dp=2", "--smp-config", smp])
            check(s2 and s2["log"] == got["log"] and s2["host"] == got["host"],
                  f"--smp-config with context_parallel_degree 2 and offloading: "
                  f"{s2 and s2['log']} vs {got['log']}")
    # a training bundle carries the copies and the host pool
    bundle = os.path.join(tmp, "bundle")
    r = shardc(["compile", MODEL, "--train", "-o", bundle, "--recompute", "none",
                "--offload-activations"] + STEP)
    if check(r.returncode == 0, f"compile --train: {r.stderr[-500:]}"):
        ref = train(tmp, "none-ref-again", ["--recompute", "none"])
        log = os.path.join(tmp, "bundle.jsonl")
        r = shardc(["train", bundle, "--data", "input_ids=" + os.path.join(tmp, "ids.npy"),
                    "--labels", os.path.join(tmp, "labels.npy"), "--steps", "3",
                    "--threads", "2", "--log-json", log])
        if check(r.returncode == 0 and "memory: host pool" in r.stdout,
                 f"train BUNDLE: {r.stderr[-500:]}") and ref:
            got = [[e.get(k) for k in KEYS] for e in map(json.loads, open(log))]
            check(got == ref["log"], f"the bundle's log {got} vs {ref['log']}")
    r = shardc(["plan", "--train", MODEL, "--activation-loading-horizon", "1"])
    check(r.returncode == 2 and "goes with --offload-activations" in r.stderr,
          f"a horizon without offloading: exit {r.returncode}: {r.stderr[-400:]}")


def run_with_data(body):
    """body(tmp) with write_data's files in a temporary folder; the exit code."""
    if not SHARDC:
        print("SHARDC is not set")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        write_data(tmp)
        body(tmp)
    return finish()


def main():
    return run_with_data(checks_one_step)


if __name__ == "__main__":
    sys.exit(main())
