"""test_train_accum_dist.py — gradient accumulation under data parallelism
reduces the gradients once a step (docs/training.md, "Gradient
accumulation"): each rank sums its microbatches' gradients unreduced and
only the step's last run reduces the mean (DDP's no_sync).

With seeded random data (8 rows a step), 3 steps, checked:
  - the GPT-2 sample (AdamW, clipping at 1) and the MLP (SGD, momentum,
    weight decay) at dp=2 --grad-accum 2 --dim batch=4 against one rank at
    --dim batch=8: each step's loss and gradient norm within 2e-5
    relative, the checkpoints' weights and optimizer state tensor by tensor
    (test_train_dist's tolerances: 2e-2 of the change under AdamW, 2e-4
    under SGD); likewise the GPT-2 sample at fsdp=2 --zero 1 (the means
    reduce-scattered once, flat or on a dim) and dp=2 x fsdp=2 --zero 2
    (HSDP: then all-reduced over dp);
  - the collectives each rank calls (SHARDC_COMM_TRACE): the MLP's step at
    dp=2 and at fsdp=2 --zero 1 with --grad-accum 2 makes as many gradient
    all-reduces and reduce-scatters, of as many elements, as the step
    without (one reduction of every gradient a step, not one a
    microbatch); the calls of more elements than a scalar are counted, the
    losses' scalar all-reduces (one a run) left out; the ranks' traces
    match;
  - `plan --train --json` at dp=2 (the MLP, batch 4) predicts the same:
    the dp all-reduces a step (`predicted.collectives`) of --grad-accum 2
    and 4 are the step without's, and in each run before the last the
    loss's two scalars (2 calls, 8 bytes) only.

Environment: SHARDC. Exit 0 on success, 1 on any failure.
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
from checks import check, comm_traces_match, finish  # noqa: E402
from test_train_dist import compare, run  # noqa: E402
from test_train_dist import sample_args as dist_sample_args  # noqa: E402

SHARDC = os.environ.get("SHARDC")
SRC = os.environ.get("SC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
ROWS, STEPS = 8, 3  # STEPS: test_train_dist's, which compare() checks

SAMPLES = {
    "gpt2": (lambda r: {"input_ids": r.randint(0, 1000, (ROWS, 16)).astype(np.int64)},
             lambda r: r.randint(0, 1000, (ROWS, 16)),
             ["--optimizer", "adamw", "--lr", "1e-3", "--clip-grad-norm", "1"],
             [["--mesh", "dp=2"], ["--mesh", "fsdp=2", "--zero", "1"],
              ["--mesh", "dp=2,fsdp=2", "--zero", "2"]]),
    "mlp": (lambda r: {"x": r.uniform(-1, 1, (ROWS, 64)).astype(np.float32)},
            lambda r: r.randint(0, 10, (ROWS,)),
            ["--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9", "--weight-decay", "0.01"],
            [["--mesh", "dp=2"]]),
}


def with_batch(args, batch):
    out = list(args)
    out[out.index("--dim") + 1] = f"batch={batch}"
    return out


def reductions(folder):
    """Per rank, the all-reduce and reduce-scatter calls of more than one
    element: (op, count, dtype) in call order."""
    calls = {}
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name)) as f:
            calls[name] = [tuple(w[2:5]) for w in map(str.split, f)
                           if w[2] in ("all_reduce", "reduce_scatter") and int(w[3]) > 1]
    return calls


def main():
    if not SHARDC:
        print("SHARDC is not set")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        for name, (_, _, opts, meshes) in SAMPLES.items():
            model, base = dist_sample_args(tmp, name, ROWS, SAMPLES, seed=17, steps=STEPS)
            init = {t.name: numpy_helper.to_array(t) for t in onnx.load(model).graph.initializer}
            ref = {"log": os.path.join(tmp, name + "_one.jsonl"),
                   "ck": os.path.join(tmp, name + "_one_ck")}
            p = run(base + ["--save", ref["ck"], "--log-json", ref["log"]])
            if not check(p.returncode == 0, f"{name} one rank: {p.stderr[-800:]}"):
                continue
            for mesh in meshes:
                what = " ".join(mesh) + " --grad-accum 2 at batch 4"
                tag = "_".join(mesh).replace("=", "").replace(",", "")
                got = {"log": os.path.join(tmp, f"{name}_{tag}.jsonl"),
                       "ck": os.path.join(tmp, f"{name}_{tag}_ck")}
                p = run(with_batch(base, ROWS // 2) + ["--grad-accum", "2", "--save", got["ck"],
                                                       "--log-json", got["log"]] + mesh)
                if not check(p.returncode == 0, f"{name} {what}: {p.stderr[-800:]}"):
                    continue
                worst = compare(name, what, ref, got, init, 2e-2 if "adamw" in opts else 2e-4)
                print(f"{name:5s} {what:45s} against one rank at batch 8: loss/norm rel diff "
                      f"{worst:.2e}")

        # the collectives a rank calls: one reduction of the gradients a step
        _, base = dist_sample_args(tmp, "mlp", ROWS, SAMPLES, seed=17, steps=2)
        for mesh in (["--mesh", "dp=2"], ["--mesh", "fsdp=2", "--zero", "1"]):
            what = " ".join(mesh[1:])
            seen = {}
            for k in (1, 2):
                traces = os.path.join(tmp, f"traces{k}_{len(mesh)}")
                os.makedirs(traces)
                args = with_batch(base, ROWS // k) + mesh
                if k > 1:
                    args += ["--grad-accum", str(k)]
                p = run(args, env=dict(os.environ, SHARDC_COMM_TRACE=traces))
                if not check(p.returncode == 0,
                             f"mlp {what} grad-accum {k} traced: {p.stderr[-500:]}"):
                    continue
                ok, why, calls = comm_traces_match(traces)
                check(ok and calls > 0, f"mlp {what} grad-accum {k}: traces differ: {why}")
                seen[k] = reductions(traces)
            if len(seen) == 2:
                one, two = seen[1], seen[2]
                n = sum(len(v) for v in one.values())
                check(n > 0 and one == two,
                      f"mlp {what}: gradient reductions with --grad-accum 2 {two} against "
                      f"without {one}")
                print(f"mlp   {what} --grad-accum 2: {n // len(one)} gradient reductions a rank "
                      f"in 2 steps of {sum(int(c) for _, c, _ in next(iter(two.values())))} "
                      "elements, as without accumulation")

    # the plan predicts the same bytes
    mlp = os.path.join(SRC, "samples", "mlp.onnx")
    sent = {}
    for k in (1, 2, 4):
        p = subprocess.run([SHARDC, "plan", mlp, "--train", "--dim", "batch=4", "--json",
                            "--optimizer", "adamw", "--mesh", "dp=2", "--cluster",
                            "h100-sxm:2x1", "--grad-accum", str(k)],
                           capture_output=True, text=True, timeout=300)
        if check(p.returncode == 0, f"plan --grad-accum {k}: {p.stderr[-500:]}"):
            c = json.loads(p.stdout)["predicted"].get("collectives", {}).get("dp", {})
            sent[k] = (c.get("calls"), c.get("bytes"))
    if len(sent) == 3:
        # a run before the last all-reduces the loss's two f32 scalars (8
        # bytes) and nothing else
        (c1, b1), (c2, b2), (c4, b4) = sent[1], sent[2], sent[4]
        check(c1 and b1 and (c2, b2) == (c1 + 2, b1 + 8) and (c4, b4) == (c1 + 6, b1 + 24),
              f"plan dp=2: (all-reduces, bytes) a step {sent}")
        print(f"plan  dp=2: (all-reduces, bytes) a step {sent} (K = 1, 2, 4)")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
