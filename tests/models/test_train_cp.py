"""test_train_cp.py — context-parallel training (`shardc train --mesh cp=N`,
docs/context-parallel.md) trains exactly as one rank.

GPT-2 (position embedding read from a parameter, tied LM head, AdamW with
clipping) and Llama (rotary tables, grouped kv heads, SGD with momentum),
sequence 16, on the seeded data and step options of test_train_dist.py
(8 examples, batch 4, 3 steps; its comparison, imported): every step's
loss and gradient norm within rtol 2e-5, every final weight and optimizer
tensor within 2e-4 (SGD) or 2e-2 (AdamW) of its scale, no NaN, for
  cp=2, cp=4, tp=2 x cp=2, fsdp=2 x cp=2, pp=2 x cp=2 (1F1B, 2
  microbatches), dp=2 x cp=2, and cp=2 with --recompute full and selective
  (fsdp=2 is ZeRO-3, the default), tp=2 x cp=2 with --sequence-parallel
  and fsdp=2 x cp=2 under --zero 1 (GPT-2 also fsdp=2 x cp=2 with
  --recompute full and under --zero 2, and dp=2 x tp=2 x cp=2 with
  --sequence-parallel; Llama pp=2 x tp=2 x cp=2 with --sequence-parallel,
  1F1B, 2 microbatches).
and vit_pool (no causal mask, its 16 tokens mean-pooled; the vit sample's
images, labels and SGD with Nesterov momentum) for
  cp=2, cp=4, tp=2 x cp=2, fsdp=2 x cp=2, pp=2 x cp=2 (1F1B, 2
  microbatches), dp=2 x cp=2 (its checkpoints within 2e-4 of the scale
  plus 1e-8: the keys' biases' gradient is zero in exact arithmetic, their
  momentum rounding noise of about 1e-9 on both sides),
and nothing computed whole (no fallback warning: dp and fsdp split the
batch, cp the sequence, on their own dims; the permutations' gradients
stay split; vit_pool's pooling is a pending sum over cp, each rank's mean
scaled by 1/cp). A wrong ring (a block under the wrong mask, a gradient not
returned home),
a loss not reduced over cp (its sum or its count), a gradient of a
replicated weight not all-reduced over cp, or a position table in the
wrong order each moves the loss or the weights by far more than these.

Also:
  * the ring runs in both directions: GPT-2's partitioned step
    (`plan --train --print-after=localize`) at cp=N holds, per layer,
    2 (N − 1) shifted Send/Recv pairs forward (keys, values) and 4 (N − 1)
    + 2 backward (keys, values and their gradients' accumulators, then
    the gradients' hop home), and no whole attention or attention
    gradient;
  * `plan --train --mesh cp=N --json`: each rank's shifted Sends over cp
    (the program's own, counted by the plan) number L (2 (N − 1) + 4 (N − 1)
    + 2) and send the formula's bytes of docs/context-parallel.md: forward
    (N − 1) and backward (2N − 1) hops of b · kvh · 2c · (d + dv) · 4 bytes
    per layer, the backward's (`sent_backward`) apart; the activations saved for the backward per rank fall by
    N (within 1 % of 1/N of the single rank's: measured 512 bytes above
    1/N of 1,241,088 at cp=2 and cp=4),
    and at dp=2 × cp=2 and fsdp=2 × cp=2 by 4 (within 1 %; no transposed
    copy of the tied LM head);
  * the ring overlaps its attention blocks (docs/context-parallel.md,
    "Overlap"): in GPT-2's compiled step (`plan --train --print-after=
    program`) at cp=2 and cp=4 every shifted Send and its Recv are one
    send_recv step (L (2 (N − 1) + 4 (N − 1) + 2) of them, no Send or Recv
    with a shift left), and every hop but the two taking dK and dV home
    starts asynchronously with an attention block (forward or gradient)
    between its start and its wait: the K/V hop of ring step i + 1 starts
    before step i's blocks, the dK/dV hop right after them; the step
    trained with and without `--no-overlap` at cp=2 and cp=4 logs the same
    losses and gradient norms and saves the same checkpoint, bit for bit
    (the arithmetic is the same); and the simulated step
    (`plan --train --cluster h100-sxm:8x1 --json`, "predicted") at cp=2 and
    cp=4 takes no longer than with `--no-overlap`, its exposed cp
    communication no more;
  * tp=2 x cp=2 with --sequence-parallel nests the norms' split inside
    cp's (`plan --train --json`, GPT-2 and Llama): the collectives over tp
    are reduce-scatters and all-gathers (at least 4L of each), their
    all-reduces move less than half the bytes of the same mesh without
    it, and the activations saved per rank fall by at least half the 2L + 1
    norms' inputs (measured: GPT-2 351,360 -> 289,920 bytes, Llama
    269,440 -> 164,352);
  * `shardc compile --train --mesh cp=2 -o DIR` writes a training bundle
    that `shardc train DIR` runs as one rank (GPT-2's log, rtol 2e-5);
  * ViT (17 tokens: not divisible by 2·cp) is refused in training as in
    inference, naming the lengths that divide; so is vit_pool at cp=3 (16
    tokens in 6 chunks).

--part gpt2|llama|vit_pool|rest runs one sample's meshes, or everything after them
(ctest runs the three side by side, each well inside its time limit).

Environment: SHARDC, SC_SOURCE_DIR. Exit 0 on success, 1 on any failure.
"""
import json
import os
import re
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import onnx
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(__file__))
import test_train_dist as dist  # noqa: E402
from checks import check, finish  # noqa: E402

SHARDC = os.environ.get("SHARDC")
MESHES = [["--mesh", "cp=2"], ["--mesh", "cp=4"], ["--mesh", "tp=2,cp=2"],
          ["--mesh", "fsdp=2,cp=2"],
          ["--mesh", "pp=2,cp=2", "--microbatches", "2", "--schedule", "1f1b"],
          ["--mesh", "dp=2,cp=2"],
          ["--mesh", "cp=2", "--recompute", "full"],
          ["--mesh", "cp=2", "--recompute", "selective"]]
# tp with --sequence-parallel beside cp (the norms' tokens split over tp
# inside cp's split; the zig-zag permutation reads the all-reduced token
# embedding and each rank slices its cp and tp rows of it; nothing computed
# whole), also with dp (GPT-2) and pp (Llama) beside, and fsdp under ZeRO 1
# and 2 (ZeRO 3 is the default of the meshes above)
EXTRA = {"gpt2": [["--mesh", "fsdp=2,cp=2", "--recompute", "full"],
                  ["--mesh", "tp=2,cp=2", "--sequence-parallel"],
                  ["--mesh", "dp=2,tp=2,cp=2", "--sequence-parallel"],
                  ["--mesh", "fsdp=2,cp=2", "--zero", "1"],
                  ["--mesh", "fsdp=2,cp=2", "--zero", "2"]],
         "llama": [["--mesh", "tp=2,cp=2", "--sequence-parallel"],
                   ["--mesh", "pp=2,tp=2,cp=2", "--sequence-parallel", "--microbatches", "2",
                    "--schedule", "1f1b"],
                   ["--mesh", "fsdp=2,cp=2", "--zero", "1"]]}
# vit_pool (docs/context-parallel.md, "Lengths that do not divide"): the vit
# sample's seeded images, labels and step options (SGD with Nesterov
# momentum); no causal mask, its 16 tokens mean-pooled into the classifier
SAMPLES = dict(dist.SAMPLES, vit_pool=dist.SAMPLES["vit"])
VIT_MESHES = [["--mesh", "cp=2"], ["--mesh", "cp=4"], ["--mesh", "tp=2,cp=2"],
              ["--mesh", "fsdp=2,cp=2"],
              ["--mesh", "pp=2,cp=2", "--microbatches", "2", "--schedule", "1f1b"],
              ["--mesh", "dp=2,cp=2"]]
# vit (17 tokens: 16 patches and the class token) pads its sequence to the
# next multiple of cp (18 at cp=2, 20 at cp=4), the padding rows' keys
# masked out on the ring and the class token's selection a weighted sum
OWN_MESHES = {"vit_pool": VIT_MESHES + [["--mesh", "cp=3"]], "vit": VIT_MESHES}
# the absolute floor of the checkpoints' comparison: vit_pool's keys'
# biases have a gradient that is zero in exact arithmetic (a softmax row
# does not change when q·b is added to all its scores), so their momentum
# is the rounding of a sum that cancels, about 1e-9 on both sides whatever
# the order (measured: up to 2.2e-9 apart, values up to 1.4e-9), where the
# other tensors' updates are above 1e-3
FLOOR = {"vit_pool": 1e-8, "vit": 1e-8}
LAYERS, HEADS, HEAD_DIM, SEQ, BATCH = 2, 4, 16, 16, 4  # GPT-2's sample
HIDDEN = {"gpt2": 64, "llama": 64}  # the samples' hidden sizes (Llama: 2 layers too)


def base_args(tmp, name):
    model, base = dist.sample_args(tmp, name, BATCH, SAMPLES)
    return model, SAMPLES[name][2], base


def test_meshes(tmp, name):
    model, opts, base = base_args(tmp, name)
    meshes = OWN_MESHES.get(name, MESHES + EXTRA.get(name, []))

    def job(i, mesh):
        d = os.path.join(tmp, f"{name}_{i}")
        out = {"log": d + ".jsonl", "ck": d + "_ck", "mesh": mesh}
        out["p"] = dist.run(base + ["--save", out["ck"], "--log-json", out["log"]] + mesh)
        return out

    with ThreadPoolExecutor(2) as ex:
        results = list(ex.map(lambda a: job(*a), enumerate([[]] + meshes)))
    ref = results[0]
    if not check(ref["p"].returncode == 0, f"{name}: one rank: {ref['p'].stderr[-800:]}"):
        return
    init = {t.name: numpy_helper.to_array(t) for t in onnx.load(model).graph.initializer}
    for res in results[1:]:
        what = " ".join(res["mesh"])
        if not check(res["p"].returncode == 0, f"{name} {what}: {res['p'].stderr[-800:]}"):
            continue
        check("fallback" not in res["p"].stderr,
              f"{name} {what}: nodes computed whole: {res['p'].stderr[-800:]}")
        stats = {}
        worst = dist.compare(name, what, ref, res, init, 2e-2 if "adamw" in opts else 2e-4,
                             FLOOR.get(name, 1e-9), stats)
        print(f"{name:6s} {what:50s} loss rel diff {worst:.2e}, weights "
              f"{stats.get('weights', 0):.2e} and optimizer {stats.get('optimizer', 0):.2e} "
              f"of their scale")


def plan(tmp, args):
    model, _, _ = base_args(tmp, "gpt2")
    return dist.subprocess.run([SHARDC, "plan", model, "--train", "--dim", f"batch={BATCH}"]
                               + args, capture_output=True, text=True, timeout=600)


def test_rings(tmp):
    for n in (2, 4):
        p = plan(tmp, ["--mesh", f"cp={n}", "--print-after=localize"])
        ir = p.stdout + p.stderr
        shifted = ir.count("shift = 1")  # a Send and a Recv per pair
        want = 2 * LAYERS * (2 * (n - 1) + 4 * (n - 1) + 2)
        check(p.returncode == 0 and shifted == want,
              f"train cp={n}: {shifted} shifted Send/Recv, want {want}: {p.stderr[-500:]}")
        whole = [ln for ln in ir.splitlines()
                 if ("= FusedAttention(" in ln or "= FusedAttentionGrad(" in ln)
                 and "/ring/" not in ln]
        check(not whole, f"train cp={n}: an attention left whole: {whole[:1]}")


def program_steps(tmp, args):
    """(exit code, {index: text}) of the steps `plan --train --print-after=
    program` prints ("s12 attention ...")."""
    p = plan(tmp, args + ["--print-after=program"])
    steps = {}
    for ln in (p.stdout + p.stderr).splitlines():
        m = re.match(r"^s(\d+) (.*)$", ln)
        if m:
            steps[int(m.group(1))] = m.group(2)
    return p.returncode, steps


def test_overlap(tmp):
    _, _, base = base_args(tmp, "gpt2")
    for n in (2, 4):
        rc, steps = program_steps(tmp, ["--mesh", f"cp={n}"])
        hops = {i: t for i, t in steps.items() if " send_recv " in t}
        stray = [t for t in steps.values() if re.match(r"comm (start )?(send|recv) .* shift", t)]
        want = LAYERS * (2 * (n - 1) + 4 * (n - 1) + 2)
        if not check(rc == 0 and len(hops) == want and not stray,
                     f"cp={n}: {len(hops)} send_recv steps, want {want}; unpaired: {stray[:2]}"):
            continue
        waits = {}
        for i, t in steps.items():
            m = re.match(r"wait s(\d+)", t)
            if m:
                waits[int(m.group(1))] = i
        blocks = [i for i, t in steps.items() if t.startswith("attention")]
        home = 2 * n + 4 * n  # the backward's tags from 2N; the hops home: 2N + 4N, + 1
        overlapped = 0
        for i, t in sorted(hops.items()):
            if int(re.search(r" tag (\d+)", t).group(1)) >= home:
                continue
            w = waits.get(i)
            overlapped += check(t.startswith("comm start send_recv") and w is not None
                                and any(i < b < w for b in blocks),
                                f"cp={n}: hop s{i} ({t}) has no attention block between its "
                                f"start and its wait (s{w})")
        print(f"plan --train cp={n}: {len(hops)} hops one send_recv each, {overlapped} "
              f"overlapping an attention block")
        # the same arithmetic: the same log and checkpoint, bit for bit
        runs = {}
        for tag, extra in (("overlap", []), ("serial", ["--no-overlap"])):
            d = os.path.join(tmp, f"ov{n}_{tag}")
            runs[tag] = (d, dist.run(base + ["--mesh", f"cp={n}", "--save", d + "_ck",
                                             "--log-json", d + ".jsonl"] + extra))
        if all(check(r.returncode == 0, f"train cp={n} {t}: {r.stderr[-500:]}")
               for t, (_, r) in runs.items()):
            (a, _), (b, _) = runs["overlap"], runs["serial"]
            la, lb = dist.losses(a + ".jsonl"), dist.losses(b + ".jsonl")
            check(len(la) == len(lb) == dist.STEPS
                  and all(x[k] == y[k] for x, y in zip(la, lb) for k in ("loss", "grad_norm")),
                  f"train cp={n}: the log {lb} with --no-overlap, {la} without")
            for group in ("weights", "optimizer"):
                wa, wb = dist.load_ckpt(a + "_ck", group), dist.load_ckpt(b + "_ck", group)
                check(wa and sorted(wa) == sorted(wb)
                      and all(np.array_equal(wa[k], wb[k]) for k in wa),
                      f"train cp={n}: the checkpoint's {group} differ with --no-overlap")
        # the simulator sees the overlap
        pred = {}
        for tag, extra in (("overlap", []), ("serial", ["--no-overlap"])):
            p = plan(tmp, ["--mesh", f"cp={n}", "--cluster", "h100-sxm:8x1", "--json"] + extra)
            if check(p.returncode == 0, f"plan cp={n} {tag}: {p.stderr[-500:]}"):
                pred[tag] = json.loads(p.stdout)["predicted"]
        if len(pred) == 2:
            t1, t0 = pred["overlap"]["step_time_s"], pred["serial"]["step_time_s"]
            e1, e0 = (pred[k]["breakdown"]["exposed_comm_s"].get("cp", 0) for k in
                      ("overlap", "serial"))
            check(t1 <= t0 and e1 <= e0,
                  f"cp={n}: simulated step {t1} s (cp exposed {e1}) with the overlap, "
                  f"{t0} s ({e0}) without")
            print(f"plan --train cp={n} --cluster h100-sxm:8x1: step {t1 * 1e6:.3f} us, cp "
                  f"exposed {e1 * 1e6:.3f} us; --no-overlap {t0 * 1e6:.3f} us, {e0 * 1e6:.3f} us")


def ring_bytes(n, grad):
    """docs/context-parallel.md: per layer, (N - 1) hops of K and V forward,
    2N - 1 backward (K and V, then their gradients one hop further), each
    b · kvh · 2c · (d + dv) · 4 bytes, c = S / 2N."""
    c = SEQ // (2 * n)
    return (2 * n - 1 if grad else n - 1) * BATCH * HEADS * 2 * c * 2 * HEAD_DIM * 4 * LAYERS


def test_plan(tmp):
    p1 = plan(tmp, ["--json"])
    if not check(p1.returncode == 0, f"plan --train one rank: {p1.stderr[-500:]}"):
        return
    one = json.loads(p1.stdout)["saved_activations"]
    for n in (2, 4):
        p = plan(tmp, ["--mesh", f"cp={n}", "--json"])
        if not check(p.returncode == 0, f"plan --train cp={n}: {p.stderr[-500:]}"):
            continue
        pl = json.loads(p.stdout)
        sends = [c for c in pl["collectives"] if c["op"] == "Send" and c["axes"] == "cp"]
        want = ring_bytes(n, False) + ring_bytes(n, True)
        hops = LAYERS * ((n - 1) * 2 + (n - 1) * 4 + 2)
        check(len(sends) == 1 and sends[0]["sent"] == want and sends[0]["count"] == hops
              and sends[0]["sent_backward"] == ring_bytes(n, True),
              f"plan --train cp={n}: the ring's Sends {sends}, want {hops} sending {want} "
              f"bytes (forward {ring_bytes(n, False)} + backward {ring_bytes(n, True)})")
        saved = pl["saved_activations"]
        check(abs(saved * n / one - 1) <= 0.01,
              f"cp={n}: saved activations per rank {saved} bytes, one rank {one}: "
              f"want about 1/{n}")
        print(f"plan --train cp={n}: ring {want} bytes sent per rank (forward "
              f"{ring_bytes(n, False)}, backward {ring_bytes(n, True)}); saved activations "
              f"{saved} per rank vs {one} on one rank (1/{one / saved:.2f})")
    # dp (or fsdp) beside cp: each rank holds half the batch and half the
    # sequence, a quarter of one rank's saved activations (the tied LM
    # head's product reads the weight in the backward, not a transposed copy)
    for mesh in ("dp=2,cp=2", "fsdp=2,cp=2"):
        p = plan(tmp, ["--mesh", mesh, "--json"])
        if not check(p.returncode == 0, f"plan --train {mesh}: {p.stderr[-500:]}"):
            continue
        saved = json.loads(p.stdout)["saved_activations"]
        check(abs(saved * 4 / one - 1) <= 0.01,
              f"{mesh}: saved activations per rank {saved} bytes, one rank {one}: want about 1/4")
        print(f"plan --train {mesh}: saved activations {saved} per rank vs {one} on one rank "
              f"(1/{one / saved:.2f})")


def tp_collectives(plan_json):
    """{op: (count, bytes)} of the step's collectives over tp alone"""
    return {c["op"]: (c["count"], c["bytes"]) for c in plan_json["collectives"]
            if c["axes"] == "tp"}


def test_sequence_parallel(tmp):
    """tp=2 x cp=2 with --sequence-parallel splits the norms' tokens over
    tp inside cp's split: each row-parallel product's sum is reduce-
    scattered, each column-parallel product's input all-gathered (at least
    2L + 2L of each, forward and backward), the all-reduces over tp move
    less than half the bytes they move without it, and the activations
    saved for the backward fall by at least half of the 2L + 1 norms'
    inputs, b · S/cp · h · 4 bytes each (GPT-2 and Llama)."""
    for name in ("gpt2", "llama"):
        model, _, _ = base_args(tmp, name)
        got = {}
        for sp in ([], ["--sequence-parallel"]):
            p = dist.subprocess.run([SHARDC, "plan", model, "--train", "--dim", f"batch={BATCH}",
                                     "--mesh", "tp=2,cp=2", "--json"] + sp,
                                    capture_output=True, text=True, timeout=600)
            if not check(p.returncode == 0, f"{name} plan tp=2,cp=2 {sp}: {p.stderr[-500:]}"):
                break
            got[bool(sp)] = json.loads(p.stdout)
        if len(got) < 2:
            continue
        plain, sp = tp_collectives(got[False]), tp_collectives(got[True])
        rs, ag = sp.get("ReduceScatter", (0, 0)), sp.get("AllGather", (0, 0))
        check(rs[0] >= 4 * LAYERS and ag[0] >= 4 * LAYERS and
              "ReduceScatter" not in plain and "AllGather" not in plain,
              f"{name} tp=2,cp=2: collectives over tp {sp} with --sequence-parallel, "
              f"{plain} without: want reduce-scatters and all-gathers in place of all-reduces")
        ar, ar0 = sp.get("AllReduce", (0, 0))[1], plain.get("AllReduce", (0, 0))[1]
        check(2 * ar < ar0, f"{name} tp=2,cp=2: all-reduced over tp {ar} bytes with "
              f"--sequence-parallel, {ar0} without: want less than half")
        saved, saved0 = got[True]["saved_activations"], got[False]["saved_activations"]
        norm = BATCH * (SEQ // 2) * HIDDEN[name] * 4  # a norm's input, cp's tokens
        check(saved0 - saved >= (2 * LAYERS + 1) * norm // 2,
              f"{name} tp=2,cp=2: saved activations {saved} bytes a rank with "
              f"--sequence-parallel, {saved0} without: want at least "
              f"{(2 * LAYERS + 1) * norm // 2} fewer")
        print(f"{name} tp=2,cp=2 --sequence-parallel: over tp {sp} (without: {plain}); saved "
              f"activations {saved0} -> {saved} bytes a rank")


def test_bundle(tmp):
    """`compile --train --mesh cp=2` writes a training bundle whose steps
    are the one-rank run's (losses and gradient norms, rtol 2e-5)."""
    model, opts, base = base_args(tmp, "gpt2")
    art = os.path.join(tmp, "cp_bundle")
    step = [o for o in opts if o != "--lr" and o != "1e-3"]  # the compiled step's options
    c = dist.subprocess.run([SHARDC, "compile", model, "--train", "--dim", f"batch={BATCH}",
                             "--mesh", "cp=2", "-o", art] + step,
                            capture_output=True, text=True, timeout=600)
    if not check(c.returncode == 0, f"compile --train --mesh cp=2: {c.stderr[-800:]}"):
        return
    one, got = os.path.join(tmp, "b_one.jsonl"), os.path.join(tmp, "b_cp.jsonl")
    data = base[base.index("--labels"):len(base) - len(opts)]  # labels and inputs
    r1 = dist.run(base + ["--log-json", one])
    r2 = dist.run([art, "--steps", str(dist.STEPS), "--threads", "1", "--lr", "1e-3",
                   "--log-json", got] + data)
    if not check(r1.returncode == 0 and r2.returncode == 0,
                 f"the cp=2 bundle: {r1.stderr[-500:]} {r2.stderr[-800:]}"):
        return
    la, lb = dist.losses(one), dist.losses(got)
    check(len(la) == len(lb) == dist.STEPS and all(
        abs(a[k] - b[k]) <= 2e-5 * abs(a[k]) + 1e-7 for a, b in zip(la, lb)
        for k in ("loss", "grad_norm")), f"the cp=2 bundle's log {lb} vs one rank {la}")


def test_refusal(tmp):
    """a causal model's sequence that does not divide into 2·cp chunks is
    refused (padding is for attention without a causal mask)"""
    _, _, base = base_args(tmp, "gpt2")
    needle = ("sequence length 16 does not divide into 2·cp = 6 chunks (cp=3); "
              "lengths that do: 12 or 18")
    p = dist.run(base + ["--mesh", "cp=3"])
    check(p.returncode == 2 and needle in p.stderr,
          f"gpt2 train cp=3: exit {p.returncode}, want '{needle}': {p.stderr[-800:]}")


def test_padding_plan(tmp):
    """`plan --train --mesh cp=N` on vit states the padding"""
    model, _, _ = base_args(tmp, "vit")
    for n, padded in ((2, 18), (4, 20)):
        p = dist.subprocess.run([SHARDC, "plan", model, "--train", "--dim", f"batch={BATCH}",
                                 "--mesh", f"cp={n}"], capture_output=True, text=True,
                                timeout=600)
        want = (f"sequence 17 padded to {padded} for cp={n}: {padded - 17} masked "
                f"key{'s' if padded - 17 > 1 else ''}")
        check(p.returncode == 0 and want in p.stdout,
              f"vit plan --train cp={n}: want '{want}': {p.stdout[-800:]} {p.stderr[-500:]}")


# --part: what each part runs (tests/CMakeLists.txt runs them side by side)
PARTS = {"gpt2": ["gpt2"], "llama": ["llama"], "vit_pool": ["vit_pool"], "vit": ["vit"],
         "rest": []}


def main():
    if not SHARDC:
        print("SHARDC is not set")
        return 1
    part, bad = dist.parse_part("test_train_cp.py", PARTS)
    if bad:
        return bad
    with tempfile.TemporaryDirectory() as tmp:
        for name in (PARTS[part] if part else ["gpt2", "llama", "vit_pool", "vit"]):
            test_meshes(tmp, name)
        if part in (None, "rest"):
            test_rings(tmp)
            test_overlap(tmp)
            test_plan(tmp)
            test_sequence_parallel(tmp)
            test_bundle(tmp)
            test_refusal(tmp)
            test_padding_plan(tmp)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
