"""test_train_ep.py — expert parallelism (`--mesh ep=N`, docs/moe.md) on the
mixture-of-experts sample (samples/moe.onnx: 2 layers, top-2 of 8 SwiGLU
experts, capacity 5 per sequence, d 64) trains and runs as one rank.

Training: 8 seeded sequences, batch 4, 3 SGD steps (lr 0.05, momentum
0.9) with `--aux-loss aux_loss=0.02`; every step's loss and gradient norm
within rtol 2e-5 and every final weight and momentum within 2e-4 of its
scale (test_train_dist.compare, the tolerances of test_train_dist and
test_train_cp), no NaN, for
  ep=2, ep=4, dp=2 x ep=2, fsdp=2 x ep=2, tp=2 x ep=2, ep=2 with
  --recompute full, pp=2 x ep=2 (1F1B, one microbatch) against one rank;
  ep=2 x fsdp=2 (ep first in the mesh: the storage group's collectives
  one over the group ep,fsdp, its rows reordered by bucket.c), under
  --zero 3 and --zero 1, and fsdp=2 x ep=2 under --zero 2 and --zero 1
  against one rank;
  the SMP v2 key expert_parallel_degree 2 over a world of --mesh dp=4
  (`--smp-config`: it says `--mesh dp=2,ep=2`) against one rank;
  pp=2 x ep=2 with 2 microbatches against pp=2 with 2 microbatches (the
  load-balancing loss is a product of two means over a microbatch: a
  microbatched step computes another loss than the whole batch's).
For each of these meshes without pp, the arena `plan --train --json`
plans for a rank is the one `train` allocates, to the byte (every
capacity buffer and all-to-all has a static shape).
An expert gradient reduced over ep (summed twice), an expert computed on
another rank's weights or a token sent to the wrong expert moves the loss
or the weights by far more than these.

Also:
  * the partitioned step (`plan --train --print-after=localize`, ep=2):
    every expert weight (w1, w2, w3) is held as its rank's 4 experts
    (local [4, 64, 64], split over ep), none is all-gathered, and no expert
    gradient is all-reduced, reduce-scattered or put in a reduction's
    bucket (each rank updates its 4 experts);
  * `plan --train --json` at ep=2 and ep=4 reports the all-to-alls over ep:
    per layer 2 in the forward (the dispatched tokens to their experts, the
    experts' outputs back) and 2 in the backward (the outputs' gradient to
    the experts, the inputs' gradient back), each sending the off-rank
    share of a rank's dispatched buffer: (ep - 1)/ep x (B/ep) x E x C x D x
    4 bytes;
  * `plan --train --json` at fsdp=2 x ep=2 (ZeRO 3, 2, 1): the parameters
    outside the experts are stored over fsdp and ep (the storage group),
    the experts over fsdp within their ep split: a quarter of every
    parameter (ZeRO 3) or of its optimizer state a rank; the rest's
    gradients reduce-scattered by one collective over fsdp,ep (group 4,
    3/4 of their bytes sent), the experts' over fsdp (1/2 of a rank's
    E/ep); gathers over fsdp,ep of 3/4 of the rest (ZeRO 3: again for the
    blocks' rest in the backward) and a few KiB of activations, over
    fsdp of the experts only, none over ep alone; no gradient all-reduced
    over ep (under 300 bytes: the aux loss's means, the norm's scalars);
    at dp=2 x ep=2 (ZeRO 0) the rest's gradients all-reduced over ep, and
    everything over dp;
  * `run --mesh ep=2` (batch 4), and the bundle `compile --mesh ep=2 -o`
    writes, equal one rank's logits and aux_loss (rtol 1e-5, atol 1e-6);
  * ep=2 on the emulated GPU (SHARDC_CUDA_EMU=1 --device cuda) trains as
    ep=2 on the CPU: 2 steps' losses and gradient norms within rtol 2e-5,
    the collective traces of both match within every group (the same
    calls in the same order on both ranks) and hold 8 all-to-alls a rank
    and step (a partial skip without the cuda target);
  * refused: 8 experts at ep=3 (batch 6), naming the sizes that divide
    (2 or 4); ep on a model without experts (the mlp sample); cp=2 and
    ep=2 x cp=2, training and inference, naming the capacity dispatch's
    CumSum (it would scan the tokens in cp's zig-zag order).

Expert tensor parallelism (`--expert-tensor-parallel`, part etp):
  * tp=2 x ep=2 and tp=2 alone with it, each with and without
    --sequence-parallel, train as one rank (the tolerances above);
  * `plan --train --json --optimizer adamw` at tp=2 x ep=2: with it each
    rank's parameters are smaller by exactly half its expert bytes,
    6 x (E/ep) x D x F x 4 / 2 = 196,608, its optimizer state by twice
    that (AdamW's two moments), and the gradients live at its peak by at
    least that (its peak is now the loss's, before any gradient); the experts add to the AllReduces
    over tp one per MoE layer in the forward (the w2 product's pending sum
    on the rank's [B, E/ep, C, D] slots: LAYERS x B x (E/ep) x C x D x 4 =
    40,960 bytes) and one 4-byte sum per expert parameter (its share of
    the gradient norm), and none in the backward (the input gradient's
    pending sum joins the residual gradient's all-reduce); the all-to-alls
    are unchanged;
  * the same plan with `--sequence-parallel`, against it without the
    option: the experts' pending sum leaves by a reduce-scatter onto the
    sequence of the rank's combined tokens [B/ep, S, D] (one a MoE layer
    in the forward), the experts' input gradient by another in the
    backward, and the gates' gradient (computed from the pending outputs
    with the gathered output gradient) by one of its [B/ep, S, k] values:
    3 x LAYERS reduce-scatters sending (tp - 1)/tp of each input, and no
    all-reduce over tp but the 3 x LAYERS 4-byte sums; the all-to-alls and
    all-gathers unchanged;
  * `run --mesh tp=2,ep=2 --expert-tensor-parallel` and `--mesh tp=2
    --expert-tensor-parallel` equal one rank (rtol 1e-5, atol 1e-6);
  * refused (exit 2): the option without a tp axis, on a model without
    experts (the mlp sample at tp=2), and at tp=3 (the experts' hidden
    size 64 does not divide: the message names 2 or 4).

--part meshes-1|meshes-2|meshes-3|etp|rest runs the first four meshes, the
next five, the last three, expert tensor parallelism, or everything else
(ctest runs the five side by side).

Environment: SHARDC, SC_SOURCE_DIR. Exit 0 on success, 1 on any failure.
"""
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import onnx
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(__file__))
import test_train_dist as dist  # noqa: E402
from checks import check, comm_traces_match, finish, has_cuda_target, skip_part  # noqa: E402

SHARDC = os.environ.get("SHARDC")
MODEL = os.path.join(dist.SRC, "samples", "moe.onnx")
BATCH, LAYERS, E, C, D, SEQ, TOP_K = 4, 2, 8, 5, 64, 16, 2
OPTS = ["--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9",
        "--aux-loss", "aux_loss=0.02"]
PP2 = ["--mesh", "pp=2", "--microbatches", "2", "--schedule", "1f1b"]
SMP = "smp.json"  # {"expert_parallel_degree": 2}, written into tmp
# per --part: (mesh, reference: None = one rank, else the reference's mesh)
MESHES = {"meshes-1": [(["--mesh", "ep=2"], None), (["--mesh", "ep=4"], None),
                       (["--mesh", "dp=2,ep=2"], None), (["--mesh", "fsdp=2,ep=2"], None)],
          "meshes-2": [(["--mesh", "tp=2,ep=2"], None),
                       (["--mesh", "ep=2", "--recompute", "full"], None),
                       (["--mesh", "pp=2,ep=2", "--microbatches", "1", "--schedule", "1f1b"],
                        None),
                       (["--mesh", "pp=2,ep=2", "--microbatches", "2", "--schedule", "1f1b"],
                        PP2),
                       (["--mesh", "dp=4", "--smp-config", SMP], None)],
          "meshes-3": [(["--mesh", "ep=2,fsdp=2"], None),
                       (["--mesh", "ep=2,fsdp=2", "--zero", "1"], None),
                       (["--mesh", "fsdp=2,ep=2", "--zero", "2"], None),
                       (["--mesh", "fsdp=2,ep=2", "--zero", "1"], None)],
          "etp": [(["--mesh", "tp=2,ep=2", "--expert-tensor-parallel"], None),
                  (["--mesh", "tp=2", "--expert-tensor-parallel"], None),
                  (["--mesh", "tp=2,ep=2", "--expert-tensor-parallel", "--sequence-parallel"],
                   None),
                  (["--mesh", "tp=2", "--expert-tensor-parallel", "--sequence-parallel"], None)],
          "rest": []}
ETP = ["--expert-tensor-parallel"]


def base_args(tmp, steps=dist.STEPS):
    r = np.random.RandomState(11)
    ids, labels = os.path.join(tmp, "ids.npy"), os.path.join(tmp, "labels.npy")
    np.save(ids, r.randint(0, 1000, (8, 16)).astype(np.int64))
    np.save(labels, r.randint(0, 1000, (8, 16)).astype(np.int64))
    return [MODEL, "--dim", f"batch={BATCH}", "--steps", str(steps), "--threads", "1",
            "--labels", labels, "--data", f"input_ids={ids}"] + OPTS


def test_meshes(tmp, part):
    base = base_args(tmp)
    smp = os.path.join(tmp, SMP)
    with open(smp, "w") as f:
        json.dump({"expert_parallel_degree": 2}, f)
    meshes = [([smp if a == SMP else a for a in m], r) for m, r in MESHES[part]]
    refs = [[]] + ([PP2] if any(r for _, r in meshes) else [])
    runs = refs + [m for m, _ in meshes]

    def job(i, mesh):
        d = os.path.join(tmp, f"run_{i}")
        out = {"log": d + ".jsonl", "ck": d + "_ck", "mesh": mesh}
        out["p"] = dist.run(base + ["--save", out["ck"], "--log-json", out["log"]] + mesh)
        return out

    with ThreadPoolExecutor(4) as ex:  # the runs mostly wait on their ranks
        results = list(ex.map(lambda a: job(*a), enumerate(runs)))
    init = {t.name: numpy_helper.to_array(t) for t in onnx.load(MODEL).graph.initializer}
    ref_of = {tuple(m): r for m, r in zip(refs, results)}
    for r in results[:len(refs)]:
        check(r["p"].returncode == 0, f"moe {' '.join(r['mesh'])}: {r['p'].stderr[-800:]}")
    for (mesh, ref_mesh), res in zip(meshes, results[len(refs):]):
        if smp in mesh:
            check("--mesh dp=2,ep=2" in res["p"].stderr,
                  f"smp-config expert_parallel_degree: {res['p'].stderr[-500:]}")
        what = " ".join(mesh)
        ref = ref_of[tuple(ref_mesh or [])]
        if ref["p"].returncode or not check(res["p"].returncode == 0,
                                            f"moe {what}: {res['p'].stderr[-800:]}"):
            continue
        worst = dist.compare("moe", what, ref, res, init, 2e-4)
        print(f"moe {what:50s} against {' '.join(ref['mesh']) or 'one rank':30s} "
              f"loss rel diff {worst:.2e}")
        if "pp=" not in what and smp not in mesh:
            planned_arena(mesh, res["p"].stdout)


def planned_arena(mesh, stdout):
    """With a capacity every buffer of the ep step is static: the arena
    `plan --train --json` plans for a rank is the one `train` allocates."""
    p = plan(["--optimizer", "sgd", "--momentum", "0.9", "--json"] + mesh)
    got = dist.arena_of(stdout)
    want = json.loads(p.stdout)["arena"] if p.returncode == 0 else None
    check(want is not None and want > 0 and got == want,
          f"{' '.join(mesh)}: planned arena {want}, allocated {got} {p.stderr[-300:]}")
    print(f"moe {' '.join(mesh)}: planned arena = allocated = {got} bytes")


def plan(args):
    return subprocess.run([SHARDC, "plan", MODEL, "--train", "--dim", f"batch={BATCH}",
                           "--aux-loss", "aux_loss=0.02"] + args,
                          capture_output=True, text=True, timeout=600)


def test_step():
    p = plan(["--mesh", "ep=2", "--print-after=localize"])
    if not check(p.returncode == 0, f"plan --train ep=2: {p.stderr[-500:]}"):
        return
    lines = (p.stdout + p.stderr).splitlines()
    experts = [f"layers.{i}.block_sparse_moe.w{k}" for i in range(LAYERS) for k in (1, 2, 3)]
    gathered = [w for w in experts if any(f"= AllGather(%{w})" in ln for ln in lines)]
    check(not gathered, f"ep=2: expert weights all-gathered: {gathered}")
    stored = [w for w in experts
              if not any(ln.strip().startswith(f"input %{w} : f32[{E // 2},{D},{D}] "
                                                  "shard<[ep,_,_]>") for ln in lines)]
    check(not stored, f"ep=2: expert weights not held as E/2 experts split over ep: {stored}")
    # a reduction, or a bucket's copy-in (Reshape) before one, reading the gradient
    reduced = [w for w in experts for ln in lines
               if any(f"{op}(%grad:{w}" in ln for op in ("AllReduce", "ReduceScatter", "Reshape"))]
    check(not reduced, f"ep=2: expert gradients reduced over ep: {reduced[:3]}")
    check(any("AllToAll(" in ln for ln in lines), "ep=2: no AllToAll in the step")


def test_bytes():
    for n in (2, 4):
        p = plan(["--mesh", f"ep={n}", "--json"])
        if not check(p.returncode == 0, f"plan --train ep={n}: {p.stderr[-500:]}"):
            continue
        a2a = [c for c in json.loads(p.stdout)["collectives"]
               if c["op"] == "AllToAll" and c["axes"] == "ep"]
        one = (n - 1) * (BATCH // n) * E * C * D * 4 // n  # off-rank share of a buffer
        want = {"count": 4 * LAYERS, "sent": 4 * LAYERS * one, "sent_backward": 2 * LAYERS * one}
        got = {k: a2a[0][k] for k in want} if len(a2a) == 1 else a2a
        check(got == want, f"plan --train ep={n}: all-to-alls {got}, want {want}")
        print(f"ep={n}: all-to-alls {got}")


def param_bytes():
    """The sample's float parameters' bytes: (the experts', the rest's, the
    rest's inside the blocks, which ZeRO-3 gathers again for the backward)."""
    experts = {f"layers.{i}.block_sparse_moe.w{k}" for i in range(LAYERS) for k in (1, 2, 3)}
    got = [0, 0, 0]
    for t in onnx.load(MODEL).graph.initializer:
        a = numpy_helper.to_array(t)
        if a.dtype != np.float32 or a.size == 1:
            continue
        expert = t.name in experts
        got[0 if expert else 1] += a.nbytes
        got[2] += 0 if expert or not t.name.startswith("layers.") else a.nbytes
    return tuple(got)


def test_fsdp_ep_plan():
    """Under fsdp x ep the parameters outside the experts are stored over the
    4 ranks of fsdp and ep (their gathers and reduce-scatters one collective
    over both), the experts over fsdp within their ep split; under dp x ep
    (ZeRO 0) the rest's gradients are all-reduced over dp and over ep, the
    experts' over dp alone."""
    experts, rest, block_rest = param_bytes()
    check(experts == LAYERS * 3 * E * D * D * 4, f"expert bytes {experts}")
    for zero in ([], ["--zero", "1"], ["--zero", "2"]):
        p = plan(["--mesh", "fsdp=2,ep=2", "--optimizer", "sgd", "--momentum", "0.9", "--json"]
                 + zero)
        what = f"plan --train fsdp=2,ep=2 {' '.join(zero)}"
        if not check(p.returncode == 0, f"{what}: {p.stderr[-500:]}"):
            continue
        j = json.loads(p.stdout)
        coll = {(c["op"], c["axes"]): c for c in j["collectives"]}
        sent = {k: c["sent"] for k, c in coll.items()}
        # the rank's quarter of everything: the experts' E/ep over fsdp, the rest over 4
        state = "params" if not zero else "optimizer state"
        check(j["live"][state] == experts // 4 + rest // 4,
              f"{what}: live {state} {j['live'][state]}, want {experts // 4} + {rest // 4}")
        # one reduce-scatter of the rest's gradients over fsdp and ep (3/4 of
        # them sent), the experts' over fsdp (1/2 of a rank's E/ep)
        want = {("ReduceScatter", "fsdp,ep"): 3 * rest // 4,
                ("ReduceScatter", "fsdp"): experts // 2 // 2}
        got = {k: sent.get(k) for k in want}
        check(got == want and coll[("ReduceScatter", "fsdp,ep")]["group"] == 4,
              f"{what}: reduce-scatters {got}, want {want}")
        # no gradient all-reduced over ep: only the aux loss's 8-wide means
        # and the gradient norm's scalars (326,432 bytes when the rest was
        # stored over fsdp alone)
        ar = sum(c["sent"] for (op, axes), c in coll.items()
                 if op == "AllReduce" and "ep" in axes.split(","))
        check(ar <= 4 * LAYERS * E * 4 + 8 * 4, f"{what}: {ar} bytes all-reduced over ep")
        # the gathers: the rest's over fsdp and ep, the experts' over fsdp,
        # each sending what the rank lacks; none over ep alone
        gathered = 3 * rest // 4 if zero else 3 * (rest + block_rest) // 4
        ag = sent.get(("AllGather", "fsdp,ep"), 0)
        check(gathered <= ag < gathered + 8192,
              f"{what}: AllGather over fsdp,ep sent {ag}, want {gathered} and the "
              "activations' few")
        ag_f = sent.get(("AllGather", "fsdp"))
        want_f = experts // 2 // 2 * (1 if zero else 2)  # ZeRO 3: forward and backward
        check(ag_f == want_f and ("AllGather", "ep") not in coll,
              f"{what}: AllGather over fsdp {ag_f} (want {want_f}), over ep "
              f"{sent.get(('AllGather', 'ep'))}")
        print(f"{what}: live {state} {j['live'][state]}, reduce-scatters {got}, "
              f"all-reduced over ep {ar}, gathered over fsdp,ep {ag}, over fsdp {ag_f}")
    p = plan(["--mesh", "dp=2,ep=2", "--optimizer", "sgd", "--momentum", "0.9", "--json"])
    if check(p.returncode == 0, f"plan --train dp=2,ep=2: {p.stderr[-500:]}"):
        sent = {(c["op"], c["axes"]): c["sent"] for c in json.loads(p.stdout)["collectives"]}
        # a 2-rank ring all-reduce sends the tensor once
        ep, dp = sent.get(("AllReduce", "ep"), 0), sent.get(("AllReduce", "dp"), 0)
        check(rest <= ep < rest + 1024 and rest + experts // 2 <= dp < rest + experts // 2 + 1024,
              f"plan --train dp=2,ep=2: all-reduced over ep {ep} (want {rest} and the "
              f"scalars), over dp {dp} (want {rest + experts // 2})")
        print(f"dp=2,ep=2: all-reduced over ep {ep}, over dp {dp}")


def test_etp_plan():
    """Expert tensor parallelism's plan against the replicated experts'."""
    got = {}
    for what, args in (("replicated", []), ("split", ETP)):
        p = plan(["--mesh", "tp=2,ep=2", "--optimizer", "adamw", "--json"] + args)
        if not check(p.returncode == 0, f"plan --train tp=2,ep=2 {what}: {p.stderr[-500:]}"):
            return
        got[what] = json.loads(p.stdout)
    rep, etp = got["replicated"], got["split"]
    half = LAYERS * 3 * (E // 2) * D * D * 4 // 2  # half a rank's expert bytes
    for k, want in (("params", half), ("gradients", half), ("optimizer state", 2 * half)):
        d = rep["live"][k] - etp["live"][k]
        # the gradients live at the peak: at least the experts' half less
        # (exactly, where both peaks fall in the backward; etp's is the
        # loss's, before any gradient, since the lookup's gradient is the
        # rank's vocabulary rows)
        check(d == want or (k == "gradients" and d >= want),
              f"tp=2,ep=2 --expert-tensor-parallel: {k} {etp['live'][k]} against "
              f"{rep['live'][k]} replicated: {d} less, want {want}")
    coll = {w: {(c["op"], c["axes"]): c for c in g["collectives"]} for w, g in got.items()}
    ar = [coll[w].get(("AllReduce", "tp"), {}) for w in ("replicated", "split")]
    fwd = LAYERS * BATCH * (E // 2) * C * D * 4  # the w2 products' pending sums
    want = {"count": LAYERS + LAYERS * 3, "sent": fwd + LAYERS * 3 * 4, "sent_backward": 0}
    diff = {k: ar[1].get(k, 0) - ar[0].get(k, 0) for k in want}
    check(diff == want, f"tp=2,ep=2 --expert-tensor-parallel: AllReduce over tp adds {diff}, "
                        f"want {want}")
    a2a = [coll[w].get(("AllToAll", "ep")) for w in ("replicated", "split")]
    check(a2a[0] is not None and a2a[0] == a2a[1], f"all-to-alls changed: {a2a}")
    print(f"tp=2,ep=2 --expert-tensor-parallel: live params {rep['live']['params']} -> "
          f"{etp['live']['params']}, AllReduce over tp adds {diff}")


def test_etp_sp_plan():
    """Under sequence parallelism the experts' sum is reduce-scattered onto the
    sequence of the combined tokens, not all-reduced on the capacity slots."""
    got = {}
    for what, args in (("replicated", []), ("split", ETP)):
        p = plan(["--mesh", "tp=2,ep=2", "--sequence-parallel", "--json"] + args)
        if not check(p.returncode == 0, f"plan --train tp=2,ep=2 sp {what}: {p.stderr[-500:]}"):
            return
        got[what] = {(c["op"], c["axes"]): c for c in json.loads(p.stdout)["collectives"]}
    tp, rank_batch = 2, BATCH // 2  # the batch over ep
    tokens = rank_batch * SEQ * D * 4  # a rank's [B/ep, S, D] combined tokens
    gates = rank_batch * SEQ * TOP_K * 4  # a rank's [B/ep, S, k] gates' gradient
    half = lambda b: (tp - 1) * b // tp  # what a ring reduce-scatter sends
    want = {("ReduceScatter", "tp"): {"count": 3 * LAYERS,
                                      "sent": LAYERS * (2 * half(tokens) + half(gates)),
                                      "sent_backward": LAYERS * (half(tokens) + half(gates))},
            ("AllReduce", "tp"): {"count": 3 * LAYERS, "sent": 3 * LAYERS * 4,
                                  "sent_backward": 0}}
    for key, w in want.items():
        a, b = (got[x].get(key, {}) for x in ("replicated", "split"))
        diff = {k: b.get(k, 0) - a.get(k, 0) for k in w}
        check(diff == w, f"tp=2,ep=2 sp --expert-tensor-parallel: {key[0]} over tp adds {diff}, "
                         f"want {w}")
        print(f"tp=2,ep=2 sp --expert-tensor-parallel: {key[0]} over tp adds {diff}")
    for key in (("AllToAll", "ep"), ("AllGather", "tp")):
        a, b = ({k: got[x].get(key, {}).get(k) for k in ("count", "sent", "sent_backward")}
                for x in ("replicated", "split"))
        check(a["count"] and a == b,
              f"tp=2,ep=2 sp --expert-tensor-parallel: {key} changed: {a} -> {b}")


def test_run(tmp, meshes=(["--mesh", "ep=2"],), bundle_mesh=["--mesh", "ep=2"]):
    ids = os.path.join(tmp, "ids4.npy")
    np.save(ids, np.random.RandomState(5).randint(0, 1000, (BATCH, 16)).astype(np.int64))
    runs = [("one rank", [MODEL, "--dim", f"batch={BATCH}"])]
    runs += [(" ".join(m), [MODEL, "--dim", f"batch={BATCH}"] + m) for m in meshes]
    if bundle_mesh:
        bundle = os.path.join(tmp, "bundle_ep2")
        r = subprocess.run([SHARDC, "compile", MODEL, "--dim", f"batch={BATCH}"] + bundle_mesh
                           + ["-o", bundle], capture_output=True, text=True, timeout=300)
        check(r.returncode == 0, f"compile {' '.join(bundle_mesh)}: {r.stderr[-400:]}")
        runs.append(("the ep=2 bundle", [bundle]))
    outs = {}
    for what, args in runs:
        d = os.path.join(tmp, "out_" + what.replace(" ", "_").replace("=", "").replace(",", ""))
        r = subprocess.run([SHARDC, "run"] + args + ["--input", f"input_ids={ids}",
                                                     "--output-dir", d, "--quiet"],
                           capture_output=True, text=True, timeout=300)
        if check(r.returncode == 0, f"run {what}: {r.stderr[-400:]}"):
            outs[what] = d
    if "one rank" not in outs:
        return
    for what in [w for w in outs if w != "one rank"]:
        for name in ("logits", "aux_loss"):
            a, b = (np.load(os.path.join(outs[k], name + ".npy")) for k in ("one rank", what))
            check(a.shape == b.shape and not np.isnan(b).any()
                  and np.allclose(b, a, rtol=1e-5, atol=1e-6),
                  f"run {what}: {name} differs from one rank by "
                  f"{np.abs(a - b).max() if a.shape == b.shape else b.shape}")


def test_emulated_gpu(tmp):
    """ep=2 on the emulated GPU (SHARDC_CUDA_EMU=1 --device cuda: its
    communicator's all-to-alls on the communication streams) trains as ep=2
    on the CPU (f32 products without TF32 on both: --no-allow-tf32): 2 SGD
    steps' losses and gradient norms within rtol 2e-5;
    both runs' collective traces match within every group and hold the
    step's 8 all-to-alls a rank and step."""
    if not has_cuda_target(SHARDC):
        skip_part("ep=2 on the emulated GPU", "this shardc has no cuda target (no NVRTC)")
        return
    steps, logs = 2, {}
    for dev, env in (("cpu", {}), ("cuda", {"SHARDC_CUDA_EMU": "1"})):
        log, trace = os.path.join(tmp, f"emu_{dev}.jsonl"), os.path.join(tmp, f"trace_{dev}")
        os.makedirs(trace)
        r = subprocess.run([SHARDC, "train"] + base_args(tmp, steps) +
                           ["--mesh", "ep=2", "--device", dev, "--no-allow-tf32",
                            "--log-json", log],
                           capture_output=True, text=True, timeout=600,
                           env=dict(os.environ, SHARDC_COMM_TRACE=trace, **env))
        if not check(r.returncode == 0, f"ep=2 --device {dev}: {r.stderr[-600:]}"):
            return
        ok, why, _ = comm_traces_match(trace)
        n = sum(line.split()[2] == "all_to_all" for f in os.listdir(trace)
                for line in open(os.path.join(trace, f)))
        check(ok and n == 2 * steps * 4 * LAYERS,
              f"ep=2 --device {dev}: traces {why or 'match'}, {n} all-to-alls "
              f"(want {2 * steps * 4 * LAYERS}: 2 ranks x {steps} steps x {4 * LAYERS})")
        logs[dev] = [json.loads(line) for line in open(log)]
    got = [(a[k], b[k]) for a, b in zip(logs["cpu"], logs["cuda"]) for k in ("loss", "grad_norm")]
    worst = max(abs(a - b) / abs(a) for a, b in got) if got else None
    check(len(got) == 2 * steps and not any(np.isnan(b) for _, b in got) and worst <= 2e-5,
          f"ep=2 on the emulated GPU against the CPU: {got} (rel diff {worst})")
    print(f"ep=2 on the emulated GPU: losses and gradient norms within {worst:.2e} of the CPU's")


def test_refused(tmp):
    r = subprocess.run([SHARDC, "plan", MODEL, "--dim", "batch=6", "--mesh", "ep=3"],
                       capture_output=True, text=True, timeout=300)
    check(r.returncode == 2 and "8 experts" in r.stderr and "ep=3" in r.stderr
          and "2 or 4" in r.stderr, f"ep=3 with 8 experts: exit {r.returncode}: {r.stderr}")
    mlp = os.path.join(dist.SRC, "samples", "mlp.onnx")
    r = subprocess.run([SHARDC, "plan", mlp, "--dim", "batch=4", "--mesh", "ep=2"],
                       capture_output=True, text=True, timeout=300)
    check(r.returncode == 2 and "experts" in r.stderr and "dp" in r.stderr,
          f"ep=2 on a dense model: exit {r.returncode}: {r.stderr}")
    # cp holds the tokens in its zig-zag order; the capacity dispatch's
    # CumSum over them would run in it (trained, cp=2 moved the step-1 loss
    # by 1e-3 relative)
    for mesh, train in (("cp=2", ["--train", "--aux-loss", "aux_loss=0.02"]),
                        ("ep=2,cp=2", ["--train", "--aux-loss", "aux_loss=0.02"]),
                        ("cp=2", [])):
        r = subprocess.run([SHARDC, "plan", MODEL, "--dim", f"batch={BATCH}", "--mesh", mesh]
                           + train, capture_output=True, text=True, timeout=300)
        check(r.returncode == 2 and "CumSum" in r.stderr and "zig-zag" in r.stderr,
              f"{mesh} {' '.join(train)} on the MoE sample: exit {r.returncode}: {r.stderr}")


def test_etp_refused():
    r = subprocess.run([SHARDC, "plan", MODEL, "--dim", f"batch={BATCH}", "--mesh", "ep=2"]
                       + ETP, capture_output=True, text=True, timeout=300)
    check(r.returncode == 2 and "--expert-tensor-parallel" in r.stderr and "tp" in r.stderr,
          f"--expert-tensor-parallel without tp: exit {r.returncode}: {r.stderr}")
    mlp = os.path.join(dist.SRC, "samples", "mlp.onnx")
    r = subprocess.run([SHARDC, "plan", mlp, "--dim", "batch=4", "--mesh", "tp=2"] + ETP,
                       capture_output=True, text=True, timeout=300)
    check(r.returncode == 2 and "experts" in r.stderr and "tp=2" in r.stderr,
          f"--expert-tensor-parallel on a dense model: exit {r.returncode}: {r.stderr}")
    r = subprocess.run([SHARDC, "plan", MODEL, "--dim", f"batch={BATCH}", "--mesh", "tp=3"]
                       + ETP, capture_output=True, text=True, timeout=300)
    check(r.returncode == 2 and "hidden size 64" in r.stderr and "tp=3" in r.stderr
          and "2 or 4" in r.stderr,
          f"--expert-tensor-parallel, F=64 over tp=3: exit {r.returncode}: {r.stderr}")


def main():
    part, rc = dist.parse_part("test_train_ep.py", MESHES)
    if rc is not None:
        return rc
    if not SHARDC:
        print("SHARDC is not set")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        if part in (None, "rest"):
            test_refused(tmp)
            test_step()
            test_bytes()
            test_fsdp_ep_plan()
            test_run(tmp)
            test_emulated_gpu(tmp)
        if part in (None, "etp"):
            test_etp_refused()
            test_etp_plan()
            test_etp_sp_plan()
            replay = os.path.join(tmp, "etp_plan.json")
            with open(replay, "w") as f:
                p = subprocess.run([SHARDC, "plan", MODEL, "--dim", f"batch={BATCH}", "--mesh",
                                    "tp=2,ep=2", "--json"] + ETP, stdout=f, text=True,
                                   stderr=subprocess.PIPE, timeout=300)
            check(p.returncode == 0, f"plan --json tp=2,ep=2 {ETP[0]}: {p.stderr[-400:]}")
            with open(replay) as f:
                text = f.read()
            check('"expert_tensor_parallel": true' in text and '"[ep,_,tp]"' in text,
                  f"plan --json tp=2,ep=2 {ETP[0]}: the option or the split not in the plan")
            test_run(tmp, [["--mesh", "tp=2,ep=2"] + ETP, ["--mesh", "tp=2"] + ETP,
                           ["--plan", replay]], None)
        for p in MESHES if part is None else [part]:
            if MESHES[p]:
                test_meshes(tmp, p)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
