"""test_reduce_dtype.py — the dtype a bf16 step reduces its gradients in
over the data axes (`--reduce-dtype`, docs/training.md "Mixed precision").

GPT-2's sample, SGD with momentum (an update proportional to the gradient,
so the weights show the gradients' difference), seeded token ids (batch
4), 3 steps in bf16:
  - one rank, and dp=2 and fsdp=2 --zero 2 with --reduce-dtype fp32 (the
    default: each GEMM weight's gradient reduced after its cast back to
    the f32 weight's) and bf16 (dp: before it; fsdp: every gradient cast
    to bf16 for its reduce-scatter, the shard cast back to f32), fsdp=2
    --zero 3 and hybrid dp=2,fsdp=2 --zero 3 with bf16, and a pipeline
    pp=2,dp=2 (1F1B, 2 microbatches: each stage's mean over the microbatches
    reduced once a step) with fp32 and bf16: each step's loss and gradient
    norm equal one rank's within 1e-3 relative (test_train_dist's bf16
    dp=2 bound: each rank's half-batch gradient is rounded to bf16 before
    the sum), the checkpoints' weights within 2e-2 of their change over
    the 3 steps and the momentum within 2e-2 of its largest (test_train_dist's
    compare, its bound under AdamW; bf16's 8 bits are 4e-3), all finite;
  - `shardc plan --train --json` at dp=2: under fp32 the dp all-reduces
    move exactly the bytes of the fp32 step's (every gradient in fp32);
    under bf16 exactly 2 bytes less per element of the Gemm weights and
    biases (their gradients reduced in bf16: half of 4 bytes), so fp32
    doubles those; at fsdp=2 (--zero 2 and 3) the reduce-scatters move the
    fp32 step's bytes under fp32, and under bf16 exactly 2 bytes an element
    of every parameter (each gradient cast to bf16 and reduce-scattered:
    the fp32 step's 4 bytes a parameter halved; the position embedding's
    too, whose sum the fp32 step all-reduces as its [1, 16, 64] input's
    gradient, the cut's cheaper place there); hybrid dp=2,fsdp=2 --zero 3
    the same reduce-scatters, and its dp all-reduces move the bf16 shards
    (the parameters' elements / 2 x 2 bytes) and the loss's sum and label
    count (two f32 scalars, 8 bytes); the flat shard (fsdp=3 --zero 2, batch
    6: the parameters no dim of which divides by 3 are reduce-scattered
    flat, padded) exactly half the fp32 step's reduce-scatter bytes; the
    pipeline's bytes in collectives per pipeline rank the fp32 step's under
    fp32, at most 3/4 of them under bf16 (pp=2,dp=2: 614,656 and 66,320
    bytes against 431,232 and 33,168);
  - the refusals: --reduce-dtype in an fp32 step, without --train, and a
    low reduce dtype that is not the step's (bf16 in an fp16 step); the
    Python package's plan(..., reduce_dtype=) writes it in the plan file.

Environment: SHARDC, SC_SOURCE_DIR. Exit 0 on success, 1 on any failure.
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
from test_train_dist import compare  # noqa: E402

SHARDC = os.environ.get("SHARDC")
SRC = os.environ.get("SC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BATCH, STEPS = 4, 3
MODEL = os.path.join(SRC, "samples", "gpt2.onnx")
STEP = ["--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9", "--precision", "bf16"]
MESHES = [["--mesh", "dp=2"], ["--mesh", "fsdp=2", "--zero", "2"],
          ["--mesh", "fsdp=2", "--zero", "3"], ["--mesh", "dp=2,fsdp=2", "--zero", "3"]]
# a pipeline over data-parallel replicas: each stage reduces its gradients'
# mean over the microbatches once a step, in the reduce dtype
PIPE = ["--mesh", "pp=2,dp=2", "--schedule", "1f1b", "--microbatches", "2"]


def shardc(args, timeout=600):
    return subprocess.run([SHARDC] + args, capture_output=True, text=True, timeout=timeout)


def plan_bytes(args, by_axes=False, batch=BATCH):
    """{op: bytes} of the plan's collectives over its data axes ({(op,
    axes): bytes} with by_axes)."""
    p = shardc(["plan", MODEL, "--train", "--dim", f"batch={batch}", "--json",
                "--optimizer", "adamw"] + args)
    if not check(p.returncode == 0, f"plan {args}: {p.stderr[-500:]}"):
        return None
    out = {}
    for c in json.loads(p.stdout)["collectives"]:
        if c["axes"] in ("dp", "fsdp"):
            k = (c["op"], c["axes"]) if by_axes else c["op"]
            out[k] = out.get(k, 0) + c["bytes"]
    return out


def trained(tmp, base, what, args):
    d = os.path.join(tmp, what.replace(" ", "_").replace("=", ""))
    run = {"log": d + ".jsonl", "ck": d + "_ck"}
    p = shardc(["train"] + base + ["--steps", str(STEPS), "--save", run["ck"],
                                   "--log-json", run["log"]] + args)
    return run if check(p.returncode == 0, f"train {what}: {p.stderr[-800:]}") else None


def param_elements():
    """Elements of the trained parameters (the plan's "parameters")."""
    p = shardc(["plan", MODEL, "--train", "--dim", f"batch={BATCH}", "--json"])
    ok = check(p.returncode == 0, f"plan: {p.stderr[-500:]}")
    return json.loads(p.stdout)["parameters"] if ok else None


def gemm_elements():
    """Elements of the initializers Gemm reads (weights and biases): the
    parameters whose gradients a bf16 step computes in bf16."""
    g = onnx.load(MODEL).graph
    init = {t.name: t for t in g.initializer}
    names = {i for n in g.node if n.op_type == "Gemm" for i in n.input if i in init}
    return sum(int(np.prod(init[i].dims)) for i in names)


def main():
    if not SHARDC:
        print("SHARDC is not set")
        return 1
    init = {t.name: numpy_helper.to_array(t) for t in onnx.load(MODEL).graph.initializer}
    with tempfile.TemporaryDirectory() as tmp:
        r = np.random.RandomState(7)
        ids, labels = os.path.join(tmp, "ids.npy"), os.path.join(tmp, "labels.npy")
        np.save(ids, r.randint(0, 1000, (BATCH, 16)).astype(np.int64))
        np.save(labels, r.randint(0, 1000, (BATCH, 16)).astype(np.int64))
        base = [MODEL, "--dim", f"batch={BATCH}", "--threads", "1", "--data",
                f"input_ids={ids}", "--labels", labels] + STEP
        ref = trained(tmp, base, "one rank", [])
        for mesh in MESHES + [PIPE]:
            # the meshes added for the bf16 reduce-scatter run it alone
            for rd in ("fp32", "bf16") if mesh in MESHES[:2] + [PIPE] else ("bf16",):
                what = f"{' '.join(mesh[1:])} --reduce-dtype {rd}"
                got = trained(tmp, base, what, mesh + ["--reduce-dtype", rd])
                if ref and got:
                    worst = compare("gpt2 bf16", what, ref, got, init, 2e-2, log_tol=1e-3)
                    if worst is not None:
                        print(f"{what:40s} loss/norm within {worst:.2e} of one rank's")

        # the bytes
        n_gemm, n_param = gemm_elements(), param_elements()
        for mesh, op in ((["--mesh", "dp=2"], "AllReduce"),
                         (["--mesh", "fsdp=2", "--zero", "2"], "ReduceScatter"),
                         (["--mesh", "fsdp=2", "--zero", "3"], "ReduceScatter"),
                         (["--mesh", "fsdp=3", "--zero", "2"], "ReduceScatter")):
            batch = 6 if "fsdp=3" in mesh else BATCH
            f32 = plan_bytes(mesh, batch=batch)
            lo = {rd: plan_bytes(mesh + ["--precision", "bf16", "--reduce-dtype", rd],
                                 batch=batch)
                  for rd in ("fp32", "bf16")}
            if f32 is None or None in lo.values() or n_param is None:
                continue
            if op == "AllReduce":
                want_bf16 = f32[op] - 2 * n_gemm
            elif "fsdp=2" in mesh:
                want_bf16 = 2 * n_param
            else:  # the flat shard: padded, as the fp32 step's
                want_bf16 = f32[op] // 2
            check(lo["fp32"][op] == f32[op],
                  f"{mesh}: {op} bytes under --reduce-dtype fp32 {lo['fp32'][op]}, the fp32 "
                  f"step's {f32[op]}")
            check(lo["bf16"][op] == want_bf16,
                  f"{mesh}: {op} bytes under --reduce-dtype bf16 {lo['bf16'][op]}, want "
                  f"{want_bf16} (the fp32 step's {f32[op]}; {n_gemm} Gemm elements, "
                  f"{n_param} parameter elements)")
            print(f"{' '.join(mesh[1:]):16s} {op}: fp32 step {f32[op]}, bf16 step reducing in "
                  f"fp32 {lo['fp32'][op]}, in bf16 {lo['bf16'][op]}")

        # the pipeline: each pipeline rank's collectives (all over dp) move
        # the fp32 step's bytes under fp32, and under bf16 at most 3/4 of
        # them (half for the gradients computed in bf16, the Gemm weights'
        # and biases' and the tied embedding's; the norms' and the
        # position table's stay f32)
        sent = {}
        for what, args in (("f32", []), ("fp32", ["--precision", "bf16", "--reduce-dtype", "fp32"]),
                           ("bf16", ["--precision", "bf16", "--reduce-dtype", "bf16"])):
            p = shardc(["plan", MODEL, "--train", "--dim", f"batch={BATCH}", "--json",
                        "--optimizer", "adamw"] + PIPE + args)
            if check(p.returncode == 0, f"plan {PIPE + args}: {p.stderr[-500:]}"):
                ranks = json.loads(p.stdout)["pipeline"]["ranks"]
                sent[what] = [r["collective_sent"] for r in ranks]
        if len(sent) == 3:
            check(sent["fp32"] == sent["f32"] and all(x > 0 for x in sent["f32"]),
                  f"{PIPE}: collective bytes per pipeline rank under --reduce-dtype fp32 "
                  f"{sent['fp32']}, the fp32 step's {sent['f32']}")
            check(all(b <= 0.75 * f for b, f in zip(sent["bf16"], sent["f32"])),
                  f"{PIPE}: collective bytes per pipeline rank under --reduce-dtype bf16 "
                  f"{sent['bf16']}, want at most 3/4 of the fp32 step's {sent['f32']}")
            print(f"{' '.join(PIPE[1:]):16s} collective bytes per pipeline rank: fp32 step "
                  f"{sent['f32']}, bf16 step reducing in fp32 {sent['fp32']}, in bf16 "
                  f"{sent['bf16']}")

        # hybrid: the shard's dp all-reduce in bf16 too
        hy = ["--mesh", "dp=2,fsdp=2", "--zero", "3"]
        f32 = plan_bytes(hy, by_axes=True)
        lo = {rd: plan_bytes(hy + ["--precision", "bf16", "--reduce-dtype", rd], by_axes=True)
              for rd in ("fp32", "bf16")}
        if f32 is not None and None not in lo.values() and n_param is not None:
            rs, ar = ("ReduceScatter", "fsdp"), ("AllReduce", "dp")
            check(lo["fp32"][rs] == f32[rs] and lo["fp32"][ar] == f32[ar],
                  f"{hy}: under --reduce-dtype fp32 {lo['fp32']}, the fp32 step's {f32}")
            # beside the shards, the loss's sum and its label count: two
            # f32 scalars, 8 bytes
            scalars = 8
            check(lo["bf16"][rs] == 2 * n_param and lo["bf16"][ar] == n_param + scalars,
                  f"{hy}: under --reduce-dtype bf16 reduce-scatter {lo['bf16'][rs]}, dp "
                  f"all-reduce {lo['bf16'][ar]}; want {2 * n_param}, {n_param + scalars}")
            print(f"{' '.join(hy[1:]):16s} fp32 step {f32}, bf16 step reducing in bf16 "
                  f"{lo['bf16']}")

        # the refusals
        for args, says in (
                (["plan", MODEL, "--train", "--mesh", "dp=2", "--reduce-dtype", "fp32"],
                 "an fp32 step's gradients"),
                (["plan", MODEL, "--mesh", "dp=2", "--reduce-dtype", "bf16"], "needs --train"),
                (["plan", MODEL, "--train", "--mesh", "dp=2", "--precision", "fp16",
                  "--reduce-dtype", "bf16"], "the step's precision is fp16"),
                (["plan", MODEL, "--train", "--mesh", "dp=2", "--precision", "bf16",
                  "--reduce-dtype", "fp8"], "expects fp32, bf16 or fp16")):
            p = shardc(args + ["--dim", f"batch={BATCH}"])
            check(p.returncode != 0 and says in p.stderr,
                  f"{' '.join(args[2:])}: rc {p.returncode}, {p.stderr[-300:]!r} (want {says!r})")

    # the package's keyword, into the plan file
    sys.path.insert(0, os.path.join(SRC, "python"))
    os.environ.setdefault("SHARDC_LIBRARY",
                          os.path.join(os.path.dirname(os.path.abspath(SHARDC)), "libshardc.so"))
    try:
        import shardc as sc
    except (ImportError, OSError) as e:
        check(False, f"import shardc: {e}")
        return finish()
    m = sc.load(MODEL, dims={"batch": BATCH}, no_weights=True)
    for rd in (None, "bf16"):
        p = sc.plan(m, mesh="dp=2", train=sc.TrainConfig(optimizer="adamw", precision="bf16"),
                    reduce_dtype=rd)
        got = json.loads(p.json)["training"]["reduce_dtype"]
        check(got == (rd or "fp32"), f"plan(reduce_dtype={rd}): the plan file says {got}")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
