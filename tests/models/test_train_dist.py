"""test_train_dist.py — a partitioned training step trains exactly as one rank.

For each sample (MLP, GPT-2, Llama, ViT) and each mesh below, `shardc train
--mesh ...` (thread-ranks, one CPU thread each) runs 3 steps on seeded
random data (8 examples, batch 4: the second step wraps around) and must
give, against the same command on one rank:
  - every step's loss and gradient norm within rtol 2e-5 (both sides sum in
    fp32 in different orders; measured at most about 4e-7);
  - every final weight and optimizer-state tensor (the checkpoint's, which
    a mesh writes whole) within 2e-4 of the tensor's largest update, or of
    its largest value for the optimizer state, with SGD (the update is
    linear in the gradient; measured at most about 2e-5); with AdamW (GPT-2)
    within 2e-2: m / (sqrt(v) + eps) turns the rounding noise of a gradient
    element near zero into a difference of up to lr (measured 4e-3). A
    wrong gradient scale, a missing reduction or a shard applied to the
    wrong rows moves them by the update itself;
  - no NaN.
Meshes: dp=2; fsdp=2 with --zero 1, 2 and 3; dp=2 x fsdp=2 (HSDP);
--hybrid-shard-degree 2 on dp=4; tp=2 with and without
--sequence-parallel; fsdp=2 x tp=2. GPT-2 (tied embedding and LM head,
AdamW with clipping) and the MLP (SGD with momentum and weight decay) run
all of them, Llama and ViT a subset; GPT-2 and Llama also dp=2 x tp=2
with --sequence-parallel (Llama tp=2 with it too). GPT-2 also with --recompute selective
and full, on one rank and under fsdp=2 x tp=2 (recomputing runs the same
operations again: on one rank its log and checkpoint are asserted
bit-identical to the run without it). Pipelines, all four samples: pp=2
with 4 microbatches under gpipe, 1f1b and interleaved (2 virtual stages);
pp=2 x fsdp=2 (ZeRO-3) with full recompute and dp=2 x tp=2 x pp=2, 1f1b, 2
microbatches (the step's batch of 4 is the same; its gradient the mean of
the microbatches'); pp=2 with zb-h1 (weight gradients apart from input
gradients, the last rank holding one back); GPT-2 also pp=4 with zb-h1
(ranks 1, 2, 3 holding 1, 2, 3 weight pieces back).

Also:
  - memory: with --no-overlap, under fsdp=2 (ZeRO-3) each rank's arena is
    smaller than under dp=2 (the same batch per rank, the state
    replicated), and ZeRO-1's is between; ZeRO-3's prefetch (the default)
    holds more than nothing and at most one block's gathered parameters
    more at the peak (the plan's live communication bytes: live bytes, not
    the arena, whose placement moves by tens of KiB);
  - a mesh's checkpoint is sharded (format 2: each piece written once, by
    the rank holding its one copy, into that rank's files; put together
    here from the manifest, each tensor tiled exactly) and its tensors are
    the one-rank run's (above);
  - a checkpoint saved after 2 steps under fsdp=2 x tp=2 resumes on one rank,
    under dp=2 and under dp=2 x pp=2, one saved under pp=2 x tp=2 on one
    rank and under fsdp=2, and step 3 equals the uninterrupted run's;
  - pipelines (GPT-2, pp=2, 4 microbatches): `shardc plan --train --json`
    gives each pipeline rank's stashed microbatches equal to the schedule's
    formula (GPipe 4, 4; 1F1B and ZB-H1 2, 1; interleaved 5, 3), the bytes of
    handed-over values it keeps equal to what `shardc train` measures, and
    its one arena (shared by its pieces) equal to the bytes `shardc train`
    allocates for it;
    --schedule-table prints 1F1B's action lists with their sends and
    receives;
  - SHARDC_FAIL_RANK=1 ends the job with that rank's message and a non-zero
    exit, without hanging;
  - --smp-config (SMP v2 keys) over --mesh dp=8: hybrid_shard_degree 2,
    tensor_parallel_degree 2 and activation_checkpointing "full" train as
    dp=2 x fsdp=2 x tp=2 with full recompute, equal to one rank;
    hybrid_shard_degree 0 and context_parallel_degree 2 over --mesh dp=4
    train as fsdp=2 x cp=2, equal to one rank; random_seed
    is named as ignored; a degree that does not divide, activation
    offloading without activation checkpointing, an unknown key, a wrongly typed value and
    malformed JSON are refused naming the file and the key;
  - communication (`shardc plan --train --json`, the MLP at fsdp=2, every
    parameter dividing): ZeRO-1 and ZeRO-2 send Ψ(n−1)/n in reduce-scatters
    and Ψ(n−1)/n in all-gathers (2Ψ(n−1)/n, the ZeRO paper's), ZeRO-3 the
    same reduce-scatters and Ψ(n−1)/n + Ψ_b(n−1)/n in all-gathers, Ψ_b the
    weights the backward reads (with --no-reshard-after-forward: none), and
    dp=2 all-reduces 2Ψ(n−1)/n; besides, only the loss's and the norm's
    scalars; each to the byte. The planned arena per rank is the one
    `shardc train --mesh` allocates;
  - ZeRO-3 gathers GPT-2's parameters per block (one all-gather per block
    and region instead of one per tensor; the same bytes);
  - GPT-2 and Llama at tp=2, with and without --sequence-parallel, and at
    dp=2 x tp=2 with it, train with nothing computed whole (no fallback
    warning: under sequence parallelism the merges of [b, s/tp, h] into a
    product's rows keep the split as a stride of b);
  - GPT-2 at tp=2:
    the logits stay split by vocabulary (the log-softmax takes the group's
    max and sum: two all-reduces of [b, s, 1], no all-gather of the logits),
    the fused QKV projection's backward stays split by heads; the step's
    all-gathers move under 4 KiB (the column-parallel biases' gradients);
  - the whole training step at tp=2 (GPT-2's fused LayerNorm, Llama's
    decomposed RMSNorm) runs Megatron's collectives and no others: 5
    all-reduces of [b, s, h] forward and 5 backward (the min-cut reduces the
    pending gradient of each column-parallel input once, not the norms'
    weight gradients and the embeddings' after it), 2 of [b, s] for the
    cross-entropy, and scalars;
  - minimal communication whatever the export's norms look like: the
    forward of GPT-2 (fused LayerNorm), BERT and Llama (RMSNorm decomposed
    into Pow/ReduceMean/Sqrt/Div/Mul) at tp=2 runs Megatron's all-reduces,
    1 after the embedding and 2 per layer (5 for these 2-layer samples: a
    pending sum once reduced stays reduced, so a decomposed norm's second
    read of it does not reduce it again — it was 10 for Llama);
  - memory per rank (the same plans, AdamW in fp32: 4 bytes of weight and
    8 of moments per parameter): the parameters take 4Ψ/n under ZeRO-3 and
    4Ψ otherwise, the optimizer state 8Ψ/n under ZeRO >= 1 and 8Ψ under
    DDP — to the byte, each tensor's piece rounded up to the arena's
    64-byte alignment.

--part NAME runs a part of the above, so that ctest can run the parts side
by side, each well inside its time limit (tests/CMakeLists.txt): "meshes-1"
and "meshes-2" the meshes against one rank of the samples in PARTS (together
every sample, each once: checked), "rest" everything after them (resuming,
plans, memory, communication, refusals, a failing rank; it runs GPT-2's
one-rank reference for itself). Without --part, all of it.

Environment: SHARDC. Exit 0 on success, 1 on any failure.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import onnx
from onnx import numpy_helper
from safetensors.numpy import load_file
from checks import check, finish

SHARDC = os.environ.get("SHARDC")
SRC = os.environ.get("SC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))

ALL = [["--mesh", "dp=2"], ["--mesh", "fsdp=2", "--zero", "1"],
       ["--mesh", "fsdp=2", "--zero", "2"], ["--mesh", "fsdp=2"], ["--mesh", "dp=2,fsdp=2"],
       ["--mesh", "dp=4", "--hybrid-shard-degree", "2"], ["--mesh", "tp=2"],
       ["--mesh", "tp=2", "--sequence-parallel"], ["--mesh", "fsdp=2,tp=2"]]
SOME = [["--mesh", "dp=2,fsdp=2"], ["--mesh", "tp=2"], ["--mesh", "fsdp=2,tp=2"]]
# sequence parallelism beside dp (tp=2 alone is in ALL for GPT-2)
SP = [["--mesh", "tp=2", "--sequence-parallel"], ["--mesh", "dp=2,tp=2", "--sequence-parallel"]]
# pipelines: the step's 4 examples in microbatches, forward and backward apart
PP = [["--mesh", "pp=2", "--microbatches", "4", "--schedule", "gpipe"],
      ["--mesh", "pp=2", "--microbatches", "4", "--schedule", "1f1b"],
      ["--mesh", "pp=2", "--microbatches", "4", "--schedule", "zb-h1"],
      ["--mesh", "pp=2", "--microbatches", "4", "--schedule", "interleaved",
       "--virtual-stages", "2"],
      ["--mesh", "pp=2,fsdp=2", "--microbatches", "2", "--schedule", "1f1b",
       "--recompute", "full"],
      ["--mesh", "dp=2,tp=2,pp=2", "--microbatches", "2", "--schedule", "1f1b"]]

SAMPLES = {
    # name: (inputs of 8 examples, labels, step options, meshes)
    "mlp": (lambda r: {"x": r.uniform(-1, 1, (8, 64)).astype(np.float32)},
            lambda r: r.randint(0, 10, (8,)),
            ["--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9",
             "--weight-decay", "0.01"], ALL + PP),
    "gpt2": (lambda r: {"input_ids": r.randint(0, 1000, (8, 16)).astype(np.int64)},
             lambda r: r.randint(0, 1000, (8, 16)),
             ["--optimizer", "adamw", "--lr", "1e-3", "--clip-grad-norm", "1"],
            ALL + [["--recompute", "selective"], ["--recompute", "full"],
                   ["--mesh", "fsdp=2,tp=2", "--recompute", "full"],
                   ["--mesh", "pp=4", "--microbatches", "4", "--schedule", "zb-h1"],
                   SP[1]] + PP),
    "llama": (lambda r: {"input_ids": r.randint(0, 1000, (8, 16)).astype(np.int64)},
              lambda r: r.randint(0, 1000, (8, 16)),
              ["--optimizer", "sgd", "--lr", "0.1", "--momentum", "0.9"], SOME + SP + PP),
    "vit": (lambda r: {"pixel_values": r.uniform(-1, 1, (8, 3, 32, 32)).astype(np.float32)},
            lambda r: r.randint(0, 10, (8,)),
            ["--optimizer", "sgd", "--lr", "0.1", "--momentum", "0.9", "--nesterov"], SOME + PP),
}
STEPS = 3
# --part: the samples whose meshes each part runs; "rest" runs none of them
PARTS = {"meshes-1": ["mlp", "llama", "vit"], "meshes-2": ["gpt2"], "rest": []}


def run(args, env=None, timeout=600):
    return subprocess.run([SHARDC, "train"] + args, capture_output=True, text=True,
                          timeout=timeout, env=env)


def losses(log):
    return [json.loads(line) for line in open(log)]


def arena_of(stdout):
    m = re.search(r"memory: arena .*?\((\d+) bytes\)", stdout)
    return int(m.group(1)) if m else None


def load_ckpt(folder, group):
    """A checkpoint group's tensors, whole: version 1 holds each in one file;
    version 2 (a mesh's save) in shards across the writers' files, which are
    put together here from the manifest, independently of shardc, checking
    that they tile every tensor exactly."""
    m = json.load(open(os.path.join(folder, "manifest.json")))
    if m["format_version"] == 1:
        return load_file(os.path.join(folder, group + ".safetensors"))
    files = {f["name"]: load_file(os.path.join(folder, f["name"])) for f in m["files"]
             if f["group"] == group}
    out = {}
    for t in m["tensors"][group]:
        a = np.zeros(t["shape"], dtype=np.float32)
        seen = np.zeros(t["shape"], dtype=np.int32)
        for sh in t["shards"]:
            box = tuple(slice(o, o + n) for o, n in zip(sh["offsets"], sh["shape"]))
            a[box] = files[sh["file"]][sh["key"]]
            seen[box] += 1
        check((seen == 1).all(), f"{folder}: shards of {t['name']} do not tile it")
        out[t["name"]] = a
    return out


def compare(name, what, ref, got, init, tol, floor=1e-9, stats=None, log_tol=2e-5):
    """The logs step by step (each loss and gradient norm within log_tol
    relative), then the checkpoints tensor by tensor (each
    within tol of its scale, plus floor); the worst loss or gradient norm's
    relative difference returned, and stats[group] (if given) set to the
    group's worst difference over its scale (of the tensors whose bound is
    not the floor)."""
    la, lb = losses(ref["log"]), losses(got["log"])
    if not check(len(la) == len(lb) == STEPS, f"{name} {what}: {len(lb)} steps logged"):
        return
    worst = 0.0
    for a, b in zip(la, lb):
        for k in ("loss", "grad_norm"):
            x, y = a[k], b[k]
            ok = x is not None and y is not None and abs(x - y) <= log_tol * abs(x) + 1e-7
            check(ok, f"{name} {what}: step {a['step']} {k} {y} vs one rank {x}")
            if ok:
                worst = max(worst, abs(x - y) / max(abs(x), 1e-30))
    for group in ("weights", "optimizer"):
        wa = load_ckpt(ref["ck"], group)
        wb = load_ckpt(got["ck"], group)
        check(sorted(wa) == sorted(wb), f"{name} {what}: {group} tensors differ")
        for k, a in wa.items():
            b = wb.get(k)
            if b is None or not check(a.shape == b.shape, f"{name} {what}: {k} shape"):
                continue
            if not check(np.isfinite(b).all(), f"{name} {what}: {k} not finite"):
                continue
            a64, b64 = a.astype(np.float64), b.astype(np.float64)
            if group == "weights":
                scale = np.abs(a64 - init[k].astype(np.float64)).max() if k in init else 0.0
            else:
                scale = np.abs(a64).max()
            err = np.abs(a64 - b64).max()
            if stats is not None and tol * scale >= floor:  # not a tensor near zero
                stats[group] = max(stats.get(group, 0.0), err / scale)
            check(err <= tol * scale + floor,
                  f"{name} {what}: {group} '{k}' differs by {err:.3g} (scale {scale:.3g})")
    return worst


def same_bits(name, what, ref, got):
    """Recompute on one rank runs the same operations again: every logged
    figure and every checkpointed tensor equals the run without it, bit for
    bit."""
    keys = ("step", "loss", "grad_norm", "lr")  # not time_ms
    la = [[e.get(k) for k in keys] for e in losses(ref["log"])]
    lb = [[e.get(k) for k in keys] for e in losses(got["log"])]
    check(la == lb, f"{name} {what}: the log differs from the run without recompute: {lb} vs {la}")
    for group in ("weights", "optimizer"):
        wa, wb = load_ckpt(ref["ck"], group), load_ckpt(got["ck"], group)
        diff = [k for k in wa if k not in wb or wa[k].tobytes() != wb[k].tobytes()]
        check(sorted(wa) == sorted(wb) and not diff,
              f"{name} {what}: {group} not bit-identical to no recompute: {diff[:5]}")


def sample_args(tmp, name, batch, samples=None, seed=11, steps=STEPS):
    """(model, `train`'s arguments without a mesh) for SAMPLES[name] (or
    samples[name]): its inputs and labels, seeded by seed, written into
    tmp, the batch, `steps` steps (none given when None), one thread a
    rank."""
    make, labels, opts, _ = (samples or SAMPLES)[name]
    model = os.path.join(SRC, "samples", name + ".onnx")
    r = np.random.RandomState(seed)
    data = []
    for k, v in make(r).items():
        f = os.path.join(tmp, f"{name}_{k}.npy")
        np.save(f, v)
        data += ["--data", f"{k}={f}"]
    f = os.path.join(tmp, f"{name}_labels.npy")
    np.save(f, labels(r).astype(np.int64))
    return model, [model, "--dim", f"batch={batch}"] + \
        (["--steps", str(steps)] if steps is not None else []) + \
        ["--threads", "1", "--labels", f] + data + opts


def parse_part(prog, parts):
    """(part, exit code) from the command line `[--part NAME]`: NAME one of
    parts' keys, or (None, None) without it; a usage error prints the usage
    and gives (None, 2)."""
    if len(sys.argv) == 3 and sys.argv[1] == "--part" and sys.argv[2] in parts:
        return sys.argv[2], None
    if len(sys.argv) != 1:
        print(f"usage: {prog} [--part {'|'.join(parts)}]")
        return None, 2
    return None, None


def main():
    if not SHARDC:
        print("SHARDC is not set")
        return 1
    part, bad = parse_part("test_train_dist.py", PARTS)
    if bad:
        return bad
    in_parts = sorted(n for names in PARTS.values() for n in names)
    if in_parts != sorted(SAMPLES):  # the parts together run every sample once
        print(f"PARTS names {in_parts}, not each of {sorted(SAMPLES)} once")
        return 1
    if part:
        print(f"part {part}: the meshes of {PARTS[part] or 'no sample'}"
              + (", then everything after them" if part == "rest" else ""))
    with tempfile.TemporaryDirectory() as tmp:
        for name, (_, _, opts, meshes) in SAMPLES.items():
            model, base = sample_args(tmp, name, 4)
            if part and name not in PARTS[part]:
                if not (part == "rest" and name == "gpt2"):
                    continue  # its data written: later sections read it
                meshes = []  # only the one-rank run, the reference "rest" resumes against

            def job(i, mesh):
                d = os.path.join(tmp, f"{name}_{i}")
                out = {"log": d + ".jsonl", "ck": d + "_ck", "mesh": mesh}
                p = run(base + ["--save", out["ck"], "--log-json", out["log"]] + mesh)
                out["p"] = p
                return out

            with ThreadPoolExecutor(2) as ex:
                results = list(ex.map(lambda a: job(*a), enumerate([[]] + meshes)))
            ref = results[0]
            if not check(ref["p"].returncode == 0,
                         f"{name}: one rank: {ref['p'].stderr[-800:]}"):
                continue
            init = {t.name: numpy_helper.to_array(t) for t in onnx.load(model).graph.initializer}
            one_arena = arena_of(ref["p"].stdout)
            arenas = {}
            for res in results[1:]:
                what = " ".join(res["mesh"])
                if not check(res["p"].returncode == 0, f"{name} {what}: {res['p'].stderr[-800:]}"):
                    continue
                if name in ("gpt2", "llama") and (res["mesh"] == ["--mesh", "tp=2"] or
                                                   res["mesh"] in SP):
                    check("fallback" not in res["p"].stderr,
                          f"{name} {what}: nodes computed whole: {res['p'].stderr[-800:]}")
                worst = compare(name, what, ref, res, init, 2e-2 if "adamw" in opts else 2e-4)
                if res["mesh"][0] == "--recompute":
                    same_bits(name, what, ref, res)
                arena = arena_of(res["p"].stdout)
                print(f"{name:6s} {what:40s} loss rel diff {worst:.2e}  arena/rank {arena} "
                      f"(one rank {one_arena})")
                arenas[" ".join(res["mesh"])] = arena

        if part and part != "rest":
            return finish()

        # resuming under other meshes: 2 steps at fsdp=2 x tp=2, then step 3
        name = "gpt2"
        model = os.path.join(SRC, "samples", "gpt2.onnx")
        r = np.random.RandomState(11)
        ids = os.path.join(tmp, "gpt2_input_ids.npy")
        lab = os.path.join(tmp, "gpt2_labels.npy")
        base = [model, "--dim", "batch=4", "--threads", "1", "--data", f"input_ids={ids}",
                "--labels", lab] + SAMPLES["gpt2"][2]
        ck = os.path.join(tmp, "resume_ck")
        p = run(base + ["--steps", "2", "--save", ck, "--mesh", "fsdp=2,tp=2"])
        full = losses(os.path.join(tmp, "gpt2_0.jsonl"))
        if check(p.returncode == 0, f"resume: save at fsdp=2,tp=2: {p.stderr[-500:]}"):
            for mesh in ([], ["--mesh", "dp=2"]):
                log = os.path.join(tmp, "resume_%d.jsonl" % len(mesh))
                p = run(base + ["--steps", "3", "--resume", ck, "--log-json", log] + mesh)
                if not check(p.returncode == 0, f"resume at {mesh}: {p.stderr[-500:]}"):
                    continue
                got = losses(log)
                check(len(got) == 1 and got[0]["step"] == 3 and
                      abs(got[0]["loss"] - full[2]["loss"]) <= 2e-5 * abs(full[2]["loss"]),
                      f"resume at {mesh or 'one rank'}: step 3 {got} vs {full[2]}")

        # a pipelined run's checkpoint resumes without a pipeline, and a
        # pipeline resumes another mesh's checkpoint
        ck_pp = os.path.join(tmp, "resume_pp_ck")
        pp_mesh = ["--mesh", "pp=2,tp=2", "--microbatches", "2", "--schedule", "1f1b"]
        p = run(base + ["--steps", "2", "--save", ck_pp] + pp_mesh)
        if check(p.returncode == 0, f"resume: save at pp=2,tp=2: {p.stderr[-500:]}"):
            for src, mesh in ((ck_pp, []), (ck_pp, ["--mesh", "fsdp=2"]),
                              (ck, ["--mesh", "dp=2,pp=2", "--microbatches", "2",
                                    "--schedule", "gpipe"])):
                log = os.path.join(tmp, "resume_pp_%d.jsonl" % len(mesh))
                p = run(base + ["--steps", "3", "--resume", src, "--log-json", log] + mesh)
                if not check(p.returncode == 0, f"resume at {mesh}: {p.stderr[-500:]}"):
                    continue
                got = losses(log)
                check(len(got) == 1 and got[0]["step"] == 3 and
                      abs(got[0]["loss"] - full[2]["loss"]) <= 2e-5 * abs(full[2]["loss"]),
                      f"resume {os.path.basename(src)} at {mesh or 'one rank'}: step 3 {got} "
                      f"vs {full[2]}")

        # a pipeline's plan: the schedule's stash formula, and the bytes each
        # pipeline rank keeps planned = what the runtime kept
        for sched, extra in (("1f1b", []), ("gpipe", []), ("zb-h1", []),
                             ("interleaved", ["--virtual-stages", "2"])):
            mesh = ["--mesh", "pp=2", "--microbatches", "4", "--schedule", sched] + extra
            p = subprocess.run([SHARDC, "plan", model, "--dim", "batch=4", "--train", "--json",
                                "--optimizer", "adamw", "--clip-grad-norm", "1"] + mesh,
                               capture_output=True, text=True, timeout=300)
            if not check(p.returncode == 0, f"plan {mesh}: {p.stderr[-300:]}"):
                continue
            pl = json.loads(p.stdout)["pipeline"]
            for r in pl["ranks"]:
                check(r["stashed_microbatches"] == r["stash_formula"] and r["stash_peak"] > 0,
                      f"plan {sched} rank {r['rank']}: {r['stashed_microbatches']} stashed, "
                      f"formula {r['stash_formula']}")
            want = {"gpipe": [4, 4], "1f1b": [2, 1], "zb-h1": [2, 1], "interleaved": [5, 3]}[sched]
            check([r["stashed_microbatches"] for r in pl["ranks"]] == want,
                  f"plan {sched}: stashed {[r['stashed_microbatches'] for r in pl['ranks']]}, "
                  f"want {want}")
            p = run(base + ["--steps", "1"] + mesh)
            m = re.search(r"kept at once, per pipeline rank: ([\d ]+) bytes", p.stdout)
            check(p.returncode == 0 and m and
                  [int(x) for x in m.group(1).split()] == [r["stash_peak"] for r in pl["ranks"]],
                  f"{sched}: runtime stash {m and m.group(1)} vs plan "
                  f"{[r['stash_peak'] for r in pl['ranks']]}: {p.stderr[-300:]}")
            # one arena per pipeline rank, shared by its pieces: planned =
            # allocated
            m = re.search(r"one arena per pipeline rank, shared by its pieces: ([\d ]+) bytes",
                          p.stdout)
            check(m and [int(x) for x in m.group(1).split()] == [r["arena"] for r in pl["ranks"]]
                  and all(r["arena"] > 0 for r in pl["ranks"]),
                  f"{sched}: runtime arenas {m and m.group(1)} vs plan "
                  f"{[r['arena'] for r in pl['ranks']]}")
            print(f"pipeline {sched:12s} stash per rank {[r['stash_peak'] for r in pl['ranks']]} "
                  f"bytes (planned = kept), microbatches {want}, arena per rank "
                  f"{[r['arena'] for r in pl['ranks']]} (planned = allocated)")
        p = subprocess.run([SHARDC, "plan", model, "--dim", "batch=4", "--train",
                            "--schedule-table", "--mesh", "pp=2", "--microbatches", "4",
                            "--schedule", "1f1b"], capture_output=True, text=True, timeout=300)
        check(p.returncode == 0 and "rank 0: P0>1 F0.0>1 F0.1>1 B0.0 W0.0<1 F0.2>1" in p.stdout and
              "rank 1: P1 F1.0<0 B1.0>0 W1.0 F1.1<0" in p.stdout, f"schedule table: {p.stdout[-600:]}")
        # the tied embedding crosses once per step: its copy in the first
        # rank's prepare piece (P0, before any forward; the last rank's
        # first forward receives it), the LM head's gradient after the last
        # microbatch
        # (N0 receives it); N1 receives nothing (its sums of squares go to
        # each rank's update piece, which combines them itself: N0 sends
        # its own to U1, and U0 sends nothing)
        check("W1.2 F1.3<0 B1.3>0 W1.3>0 N1>0 U1<0" in p.stdout and "N0<1>1 U0<1\n" in p.stdout,
              f"schedule table: the tied gradient once per step: {p.stdout[-600:]}")
        wte = [t for t in onnx.load(model).graph.initializer if t.name == "transformer.wte.weight"]
        tied = 4 * int(np.prod(wte[0].dims)) if wte else -1
        sent = {}
        for batch in (4, 8):
            p = subprocess.run([SHARDC, "plan", model, "--dim", f"batch={batch}", "--train", "--json",
                                "--mesh", "pp=2", "--microbatches", "4", "--schedule", "1f1b"],
                               capture_output=True, text=True, timeout=300)
            if check(p.returncode == 0, f"plan pp=2 batch {batch}: {p.stderr[-300:]}"):
                sent[batch] = [r["p2p_sent"] for r in json.loads(p.stdout)["pipeline"]["ranks"]]
        if len(sent) == 2:
            # sent = (activations per example) * batch + (once per step): the
            # once-per-step part is the tied weight, the first chunk's squares
            # of its gradients (one f32 per parameter, to the last chunk,
            # which sums them: passes/partition/pipe_train.c) and a few scalars
            once = [2 * a - b for a, b in zip(sent[4], sent[8])]
            squares = 4 * sum(1 for t in onnx.load(model).graph.initializer if t.data_type == 1)
            check(all(tied <= x <= tied + squares + 64 for x in once),
                  f"pipeline bytes sent once per step {once}, want the tied weight's {tied} "
                  f"(+ at most {squares} bytes of squares, and scalars): sent {sent}")
            print(f"pipeline pp=2: sent per step {sent[4]} (batch 4), {sent[8]} (batch 8): "
                  f"{once} once per step, the tied weight {tied} bytes")
        p = subprocess.run([SHARDC, "plan", model, "--dim", "batch=4", "--train",
                            "--schedule-table", "--mesh", "pp=2", "--microbatches", "4",
                            "--schedule", "zb-h1"], capture_output=True, text=True, timeout=300)
        check(p.returncode == 0 and "B1.2>0 W1.1 F1.3<0 B1.3>0 W1.2 W1.3" in p.stdout
              and "B0.2 W0.2<1 B0.3 W0.3<1 N0" in p.stdout,
              f"zb-h1 table: rank 1 (the last) holds a weight piece back, rank 0 none: "
              f"{p.stdout[-600:]}")

        # communication volume against the ZeRO formulas (MLP, n = 2)
        mlp = os.path.join(SRC, "samples", "mlp.onnx")
        init = {t.name: numpy_helper.to_array(t) for t in onnx.load(mlp).graph.initializer}
        psi = sum(4 * v.size for v in init.values())
        psi_b = 4 * (init["2.weight"].size + init["4.weight"].size)  # read by the backward
        cases = [(["--mesh", "fsdp=2", "--zero", "1"], {"ReduceScatter": psi // 2,
                                                        "AllGather": psi // 2}, 1, 2),
                 (["--mesh", "fsdp=2", "--zero", "2"], {"ReduceScatter": psi // 2,
                                                        "AllGather": psi // 2}, 1, 2),
                 (["--mesh", "fsdp=2"], {"ReduceScatter": psi // 2,
                                         "AllGather": (psi + psi_b) // 2}, 2, 2),
                 (["--mesh", "fsdp=2", "--no-reshard-after-forward"],
                  {"ReduceScatter": psi // 2, "AllGather": psi // 2}, 2, 2),
                 (["--mesh", "dp=2"], {"AllReduce": psi}, 1, 1)]

        def pieces(n):  # every parameter's piece, each 64-byte aligned
            return sum((4 * v.size // n + 63) // 64 * 64 for v in init.values())

        for mesh, want, n_params, n_state in cases:
            p = subprocess.run([SHARDC, "plan", mlp, "--train", "--dim", "batch=4", "--json",
                                "--optimizer", "adamw"] + mesh, capture_output=True, text=True,
                               timeout=300)
            if not check(p.returncode == 0, f"plan {mesh}: {p.stderr[-500:]}"):
                continue
            j = json.loads(p.stdout)
            check(j["psi_bytes"] == psi, f"plan {mesh}: psi {j['psi_bytes']} vs {psi}")
            sent = {}
            for c in j["collectives"]:
                sent[c["op"]] = sent.get(c["op"], 0) + c["sent"]
            scalars = sent.get("AllReduce", 0) - want.get("AllReduce", 0)
            for op, v in want.items():
                got = sent.get(op, 0) - (scalars if op == "AllReduce" else 0)
                check(got == v or (op == "AllReduce" and 0 <= got - v <= 64),
                      f"plan {mesh}: {op} sends {sent.get(op, 0)} bytes per rank, the formula "
                      f"{v}")
            check(set(sent) <= set(want) | {"AllReduce"}, f"plan {mesh}: collectives {sent}")
            check(0 <= scalars <= 64, f"plan {mesh}: {scalars} bytes of scalar all-reduces")
            live = j["live"]
            check(live["params"] == pieces(n_params) and
                  live["optimizer state"] == 2 * pieces(n_state),
                  f"plan {mesh}: params {live['params']} (want {pieces(n_params)}), optimizer "
                  f"state {live['optimizer state']} (want {2 * pieces(n_state)})")
            print(f"plan {' '.join(mesh):40s} sent/rank {j['sent_per_rank']} = "
                  f"{j['sent_per_rank'] / psi:.4f} psi (ZeRO figure {j['zero_figure']:.4f})")
            if mesh == ["--mesh", "fsdp=2"]:
                x = os.path.join(tmp, "mlp_x.npy")
                q = run([mlp, "--dim", "batch=4", "--steps", "1", "--optimizer", "adamw",
                         "--data", f"x={x}", "--labels", os.path.join(tmp, "mlp_labels.npy"),
                         "--threads", "1"] + mesh)
                check(q.returncode == 0 and arena_of(q.stdout) == j["arena"],
                      f"fsdp=2: planned arena {j['arena']} vs allocated {arena_of(q.stdout)}")

        # memory against the ZeRO stages (GPT-2, the arena per rank): with every
        # collective where it is (--no-overlap) ZeRO-3 < ZeRO-1 < dp=2; FSDP's
        # prefetch (the default) holds one block's gathered parameters more
        gpt2 = os.path.join(SRC, "samples", "gpt2.onnx")
        block = 4 * sum(t.size for k, t in ((t.name, numpy_helper.to_array(t))
                        for t in onnx.load(gpt2).graph.initializer)
                        if k.startswith("transformer.h.0."))
        ar, js = {}, {}
        for mesh in (["--mesh", "fsdp=2"], ["--mesh", "fsdp=2", "--zero", "1"],
                     ["--mesh", "dp=2"]):
            for ov in ([], ["--no-overlap"]):
                p = subprocess.run([SHARDC, "plan", gpt2, "--train", "--dim", "batch=4",
                                    "--json", "--optimizer", "adamw"] + mesh + ov,
                                   capture_output=True, text=True, timeout=300)
                if check(p.returncode == 0, f"plan {mesh} {ov}: {p.stderr[-300:]}"):
                    js[" ".join(mesh[1:] + ov)] = json.loads(p.stdout)
                    ar[" ".join(mesh[1:] + ov)] = js[" ".join(mesh[1:] + ov)]["arena"]
        a3, a1, a0 = (ar.get(k) for k in ("fsdp=2 --no-overlap",
                                          "fsdp=2 --zero 1 --no-overlap", "dp=2 --no-overlap"))
        print(f"gpt2 arena per rank, --no-overlap: ZeRO-3 {a3}, ZeRO-1 {a1}, dp=2 {a0}; "
              f"ZeRO-3 with prefetch {ar.get('fsdp=2')} (a block's parameters: {block} bytes "
              f"gathered)")
        check(a3 and a1 and a0 and a3 < a1 < a0,
              f"gpt2 arena per rank: ZeRO-3 {a3}, ZeRO-1 {a1}, dp=2 {a0}")
        # the prefetch's cost: the gathered parameters live at the peak (the
        # memory plan's bytes by class, not the arena: greedy placement
        # moves the arena by tens of KiB either way); the peak's other
        # classes grow too (the async collectives' buffers live until
        # their waits, the deferred steps' inputs), printed, not bounded
        on, off = js.get("fsdp=2"), js.get("fsdp=2 --no-overlap")
        if on and off:
            comm = on["live"]["communication"] - off["live"]["communication"]
            print(f"ZeRO-3 overlap at the peak: +{on['peak_live'] - off['peak_live']} live "
                  f"bytes, of them +{comm} gathered parameters (one block's: {block}); "
                  f"by class {[(k, on['live'][k] - off['live'][k]) for k in on['live']]}")
            check(0 < comm <= block and on["peak_live"] > off["peak_live"],
                  f"ZeRO-3's prefetch holds {comm} bytes more gathered at the peak, one "
                  f"block's parameters are {block}")

        # recompute: the activations live at the peak shrink, and the plan says
        # what is recomputed (the attention cores unfused: a fused core saves
        # no probabilities, and selective recompute has nothing of it to do,
        # docs/passes.md#fused-attention)
        acts, need = {}, {}  # activations at the peak, step memory (arena and constants)
        for kind in ("none", "selective", "full"):
            p = subprocess.run([SHARDC, "plan", os.path.join(SRC, "samples", "gpt2.onnx"),
                                "--train", "--dim", "batch=4", "--json", "--optimizer", "adamw",
                                "--no-fuse-attention", "--recompute", kind],
                               capture_output=True, text=True, timeout=300)
            if check(p.returncode == 0, f"plan --recompute {kind}: {p.stderr[-500:]}"):
                j = json.loads(p.stdout)
                acts[kind] = j["live"]["activations"]
                need[kind] = j["total"]
                rc = j["recompute"]
                check(rc["kind"] == kind and (rc["nodes"] > 0) == (kind != "none"),
                      f"plan --recompute {kind}: {rc}")
        # ZeRO-3's parameter all-gathers grouped per block: GPT-2 (2 blocks)
        # gathers each block's 12 tensors in one collective per region
        # (forward, backward), the 4 tensors outside blocks alone; the bytes
        # sent are those of the tensors' own gathers (ZeRO-1's all-gather of
        # every updated parameter sends Ψ(n-1)/n too)
        sent_ag = {}
        for z in (["--zero", "1"], []):
            p = subprocess.run([SHARDC, "plan", os.path.join(SRC, "samples", "gpt2.onnx"),
                                "--dim", "batch=4", "--train", "--json", "--mesh", "fsdp=2"] + z,
                               capture_output=True, text=True,
                               timeout=300)
            if check(p.returncode == 0, f"plan gpt2 fsdp=2 {z}: {p.stderr[-300:]}"):
                ag = [c for c in json.loads(p.stdout)["collectives"] if c["op"] == "AllGather"]
                sent_ag[" ".join(z)] = (sum(c["count"] for c in ag), sum(c["sent"] for c in ag))
        if len(sent_ag) == 2:
            (n1, s1), (n3, s3) = sent_ag["--zero 1"], sent_ag[""]
            print(f"gpt2 fsdp=2 all-gathers: ZeRO-3 {n3} ({s3} bytes sent), ZeRO-1 {n1} ({s1})")
            check(n3 <= 12 and s3 >= s1 > 0,
                  f"gpt2 ZeRO-3 all-gathers not grouped per block: {n3} of them, {s3} bytes")
        if len(acts) == 3:
            print(f"gpt2 activations at the peak: none {acts['none']}, selective "
                  f"{acts['selective']}, full {acts['full']}")
            check(acts["full"] < acts["selective"] < acts["none"],
                  f"gpt2 activations at the peak by recompute: {acts}")
        # --recompute auto: the least recompute whose step (arena and
        # constants) fits the budget; budgets between the three figures
        if check(len(need) == 3 and need["full"] < need["selective"] < need["none"],
                 f"step memory by recompute: {need}"):
            for budget, want in ((need["none"], "none"), (need["none"] - 1, "selective"),
                                 (need["selective"] - 1, "full"), (need["full"] - 1, None)):
                p = subprocess.run([SHARDC, "plan", os.path.join(SRC, "samples", "gpt2.onnx"),
                                    "--train", "--dim", "batch=4", "--json", "--optimizer",
                                    "adamw", "--no-fuse-attention", "--recompute", "auto",
                                    "--memory-budget",
                                    str(budget)], capture_output=True, text=True, timeout=300)
                if want is None:
                    check(p.returncode == 1 and "no recompute fits" in p.stderr,
                          f"auto, budget {budget}: exit {p.returncode} {p.stderr[-300:]}")
                else:
                    got = json.loads(p.stdout)["recompute"]["kind"] if p.returncode == 0 else None
                    check(got == want and "--recompute auto chose " + want in p.stderr,
                          f"auto, budget {budget}: chose {got}, want {want}: {p.stderr[-300:]}")

        # tensor parallel: no logits gathered, QKV backward split
        gpt2 = os.path.join(SRC, "samples", "gpt2.onnx")
        p = subprocess.run([SHARDC, "plan", gpt2, "--train", "--dim", "batch=4", "--json",
                            "--optimizer", "adamw", "--mesh", "tp=2"], capture_output=True,
                           text=True, timeout=300)
        if check(p.returncode == 0, f"plan gpt2 tp=2: {p.stderr[-500:]}"):
            ag = sum(c["sent"] for c in json.loads(p.stdout)["collectives"]
                     if c["op"] == "AllGather")
            check(ag < 4096, f"gpt2 tp=2: all-gathers send {ag} bytes per rank")

        # tensor parallel in a bf16 step (products between casts): split as
        # in fp32, nothing computed whole, the losses one rank's in bf16 to
        # 1e-3 relative (the row-parallel products' partial sums are added
        # in bf16, 8 significant bits, where one rank adds in the GEMM's
        # fp32 accumulator; measured 1e-4). Data parallel in bf16: the
        # GEMM weights' gradients all-reduced in bf16 buckets, one per dtype
        # and block (bucket.c), the losses and gradient norms one rank's to
        # 1e-3 (each rank's half-batch gradient rounded to bf16 before the
        # sum; measured 2e-5 and 2.3e-4)
        bf16_logs = []
        for mesh in ([], ["--mesh", "tp=2"], ["--mesh", "dp=2"]):
            log = os.path.join(tmp, "bf16_%d.jsonl" % len(bf16_logs))
            p = run(base + ["--steps", "3", "--precision", "bf16", "--log-json", log] + mesh)
            if check(p.returncode == 0 and "fallback" not in p.stderr,
                     f"gpt2 bf16 {mesh or 'one rank'}: {p.stderr[-500:]}"):
                bf16_logs.append(losses(log))
        if len(bf16_logs) == 3:
            one = bf16_logs[0]
            for what, got, keys in (("tp=2", bf16_logs[1], ("loss",)),
                                    ("dp=2", bf16_logs[2], ("loss", "grad_norm"))):
                for k in keys:
                    a, b = [s[k] for s in one], [s[k] for s in got]
                    ok = len(a) == len(b) == 3 and None not in a + b
                    rel = max(abs(x - y) / abs(x) for x, y in zip(a, b)) if ok else 1.0
                    check(ok and rel <= 1e-3,
                          f"gpt2 bf16 {what} {k} {b} vs one rank {a}: rel {rel:.2e}")
                    print(f"gpt2 bf16 {what}: {k} within {rel:.2e} of one rank's")

        # SMP v2 configuration
        smp = os.path.join(tmp, "smp.json")
        with open(smp, "w") as f:
            json.dump({"hybrid_shard_degree": 2, "tensor_parallel_degree": 2,
                       "activation_checkpointing": "full", "random_seed": 7}, f)
        log = os.path.join(tmp, "smp.jsonl")
        p = run(base + ["--steps", "3", "--log-json", log, "--mesh", "dp=8", "--smp-config", smp])
        if check(p.returncode == 0, f"smp-config: {p.stderr[-500:]}"):
            check("--mesh dp=2,fsdp=2,tp=2 --recompute full" in p.stderr and
                  "'random_seed' is ignored" in p.stderr, f"smp-config notes: {p.stderr[-500:]}")
            got = losses(log)
            check(len(got) == 3 and all(abs(a["loss"] - b["loss"]) <= 2e-5 * abs(a["loss"])
                                        for a, b in zip(full, got)),
                  f"smp-config losses {[x['loss'] for x in got]} vs {[x['loss'] for x in full]}")
        # context_parallel_degree: cp out of the data-parallel ranks
        with open(smp, "w") as f:
            json.dump({"hybrid_shard_degree": 0, "context_parallel_degree": 2}, f)
        log = os.path.join(tmp, "smp_cp.jsonl")
        p = run(base + ["--steps", "3", "--log-json", log, "--mesh", "dp=4", "--smp-config", smp])
        if check(p.returncode == 0, f"smp-config cp: {p.stderr[-500:]}"):
            check("--mesh fsdp=2,cp=2" in p.stderr, f"smp-config cp note: {p.stderr[-500:]}")
            got = losses(log)
            check(len(got) == 3 and all(abs(a["loss"] - b["loss"]) <= 2e-5 * abs(a["loss"])
                                        for a, b in zip(full, got)),
                  f"smp-config cp losses {[x['loss'] for x in got]} vs "
                  f"{[x['loss'] for x in full]}")
        for i, (cfg, want) in enumerate(((b'{"hybrid_shard_degree": 3}', "does not divide"),
                                         (b'{"context_parallel_degree": 3}', "does not divide"),
                                         (b'{"sm_activation_offloading": true}',
                                          "needs activation_checkpointing"),
                                         (b'{"foo": 1}', "'foo' is not an SMP v2 key"),
                                         (b'{"tensor_parallel_degree": "2"}', "must be an integer"),
                                         (b'[1', "line "))):
            bad = os.path.join(tmp, f"smp_bad{i}.json")
            with open(bad, "wb") as f:
                f.write(cfg)
            p = run(base + ["--steps", "1", "--mesh", "dp=4", "--smp-config", bad], timeout=120)
            check(p.returncode != 0 and want in p.stderr and bad in p.stderr,
                  f"smp-config {cfg!r}: exit {p.returncode}, {p.stderr[-300:]}")

        # Megatron's all-reduce count in the forward, whatever the norms
        for name in ("gpt2", "bert", "llama"):
            p = subprocess.run([SHARDC, "plan", os.path.join(SRC, "samples", name + ".onnx"),
                                "--dim", "batch=2", "--mesh", "tp=2"],
                               capture_output=True, text=True, timeout=300)
            if not check(p.returncode == 0, f"plan {name} tp=2: {p.stderr[-300:]}"):
                continue
            # the report's table: "  STAGE  AllReduce  tp  COUNT  bytes ..."
            rows = re.findall(r"^\s+\d+\s+AllReduce\s+tp\s+(\d+)\s", p.stdout, re.M)
            n_ar = sum(int(x) for x in rows)
            check(rows and n_ar == 5, f"{name} tp=2: {n_ar} all-reduces in the forward, "
                  f"Megatron's 5")

        # Megatron's collectives in the whole training step at tp=2 (batch 4,
        # sequence 16, hidden 64): 1 + 2 per layer all-reduces of [b, s, h] in
        # the forward and as many in the backward (the pending gradient of
        # each column-parallel input reduced once, where it is made: the
        # min-cut; not after a norm's backward spread it over the norm's
        # weights, nor again at the embeddings), the vocabulary-parallel
        # cross-entropy's max and sum over [b, s], scalars (loss, norm) and
        # nothing else — for a fused LayerNorm (GPT-2) and a decomposed
        # RMSNorm (Llama, whose rotary slices' gradients stay split too)
        for name in ("gpt2", "llama"):
            p = subprocess.run([SHARDC, "plan", os.path.join(SRC, "samples", name + ".onnx"),
                                "--train", "--dim", "batch=4", "--mesh", "tp=2", "--no-overlap",
                                "--print-after=program"], capture_output=True, text=True,
                               timeout=300)
            if not check(p.returncode == 0, f"plan --train {name} tp=2: {p.stderr[-300:]}"):
                continue
            comm = re.findall(r"^s\d+ comm (\w+) .*count (\d+) group tp", p.stderr, re.M)
            acts = [c for c in comm if c == ("all_reduce", "4096")]
            ce = [c for c in comm if c[1] == "64" and c[0] == "all_reduce"]
            other = [c for c in comm if c not in acts and c not in ce and c[1] != "1"]
            print(f"{name} tp=2 training step: {len(acts)} all-reduces of [b,s,h], {len(ce)} "
                  f"of [b,s], others {other}")
            check(len(acts) == 10 and len(ce) == 2 and not other,
                  f"{name} tp=2: {len(acts)} activation all-reduces (Megatron: 10), {len(ce)} "
                  f"cross-entropy ones (2), others {other}")

        # refused with a message naming what is missing: a training schedule
        # for inference, interleaving with microbatches not in groups of the
        # pipeline, microbatches without a pipeline in training, an fsdp axis
        # for inference, --zero out of range
        for args, want in (([gpt2, "--dim", "batch=4", "--mesh", "pp=2", "--schedule", "1f1b"],
                            "needs a training step"),
                           ([gpt2, "--dim", "batch=6", "--train", "--mesh", "pp=2",
                             "--microbatches", "3", "--schedule", "interleaved",
                             "--virtual-stages", "2"], "not a multiple of 2"),
                           ([gpt2, "--dim", "batch=4", "--train", "--mesh", "dp=2",
                             "--microbatches", "2"], "--grad-accum"),
                           ([gpt2, "--dim", "batch=4", "--mesh", "fsdp=2"],
                            "needs a training step"),
                           ([gpt2, "--dim", "batch=4", "--train", "--mesh", "fsdp=2", "--zero",
                             "4"], "--zero expects 1, 2 or 3")):
            p = subprocess.run([SHARDC, "plan"] + args, capture_output=True, text=True,
                               timeout=120)
            check(p.returncode != 0 and want in p.stderr and "Traceback" not in p.stderr,
                  f"plan {args[1:]}: exit {p.returncode}, {p.stderr[-300:]}")

        # a failing rank ends the job
        env = dict(os.environ, SHARDC_FAIL_RANK="1")
        try:
            p = run(base + ["--steps", "2", "--mesh", "dp=2"], env=env, timeout=120)
            check(p.returncode != 0 and "rank 1: injected failure" in p.stderr,
                  f"failing rank: exit {p.returncode}, {p.stderr[-400:]}")
        except subprocess.TimeoutExpired:
            check(False, "failing rank: the job hung")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
