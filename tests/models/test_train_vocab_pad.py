"""test_train_vocab_pad.py — training a vocabulary that tensor parallelism
does not divide (passes/partition/vocab_pad.c, sc_partition_pad_vocab_train;
docs/partitioning.md, "A trained vocabulary").

The GPT-2 graph of samples/make_samples.py at vocabulary 1001 (2 blocks,
hidden 64, 4 heads, sequence 16, tied embedding and LM head), seeded random
weights and data (batch 4), SGD with momentum (AdamW's first update is the
sign of each gradient element, which rounding turns where a gradient is
near zero), 3 steps:
  - at tp=2, tp=4, dp=2,tp=2 with sequence parallelism, fsdp=2,tp=2 with
    ZeRO-3 and tp=2,pp=2 (2 microbatches) each step's loss and gradient
    norm equal one rank's (relative 2e-5) and the checkpoints equal one
    rank's tensor by tensor, in the model's names and shapes
    ("transformer.wte.weight" [1001, 64] and its momentum; 2e-2 of the
    change, test_train_dist's);
  - `plan --train --mesh tp=2 --json`: the model's parameter count
    (168,256), no fallback, and no all-gather at all (unpadded, the table
    was split on its hidden dim and all-gathered whole for the LM head);
    `--list-params` names the model's tensor with its 1001 rows;
  - a checkpoint saved after 2 steps at tp=2 resumes on one rank and at
    tp=4 (its padded rows made anew), and one saved on one rank resumes at
    tp=2: step 3 equals the uninterrupted one-rank run's (2e-5);
  - `export` of the tp=2 checkpoint equals that of one rank's;
  - a bundle compiled at tp=2: its training.json gives the padded
    parameter's vocabulary {dim 0, size 1001}; the bundle trains to one
    rank's step 3; a vocab entry edited to a malformed one (a dim out of
    range, a size of 0 or of at least the parameter's rows, a key
    missing, not an object), or put on a parameter whose name is not a
    padded copy's, is refused naming training.json and the parameter;
  - `--init` rules at tp=2 give one rank's 2 steps (the padded copy is
    drawn as the model's tensor, its padded rows zero);
  - ids made negative (a third of them, counted from the end of the
    vocabulary) train at tp=2 and at dp=2,tp=2 with sequence parallelism
    as on one rank: the padded table's gradient wraps them by the model's
    vocabulary, not the padded one (grad_rules.c, sc_grad_gather);
  - `check --train --mesh tp=2`: its equivalence check passes (the mesh's
    state read back by the model's names).

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
from checks import check, finish  # noqa: E402
from test_train_dist import STEPS, compare, losses, run  # noqa: E402
from test_train_flat_tp import edit_refused, last_step_equal  # noqa: E402

SHARDC = os.environ.get("SHARDC")
SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(SRC, "samples"))

VOCAB, BATCH, SEQ = 1001, 4, 16
WTE = "transformer.wte.weight"
MESHES = [["--mesh", "tp=2"], ["--mesh", "tp=4"],
          ["--mesh", "dp=2,tp=2", "--sequence-parallel"],
          ["--mesh", "fsdp=2,tp=2", "--zero", "3"],
          ["--mesh", "tp=2,pp=2", "--microbatches", "2"]]


def write_model(folder):
    import make_samples as ms
    c = dict(vocab=VOCAB, n_positions=64, n_embd=64, n_head=4, n_layer=2, seq=SEQ)
    rng = np.random.default_rng(3)
    weights = {}
    for name, shape in ms.gpt2_param_shapes(c):
        w = rng.standard_normal(shape) * 0.05
        if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
            w += 1
        weights[name] = w.astype(np.float32)
    model, _ = ms.build_gpt2_graph(c, weights=weights)
    path = os.path.join(folder, "gpt2_v1001.onnx")
    onnx.save(model, path)
    return path


def rel(a, b):
    return abs(a - b) / max(abs(a), 1e-30)


def main():
    if not SHARDC:
        print("SHARDC is not set")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        model = write_model(tmp)
        init = {t.name: numpy_helper.to_array(t) for t in onnx.load(model).graph.initializer}
        rng = np.random.default_rng(5)
        ids, labels = os.path.join(tmp, "ids.npy"), os.path.join(tmp, "labels.npy")
        np.save(ids, rng.integers(0, VOCAB, (BATCH, SEQ), dtype=np.int64))
        np.save(labels, rng.integers(0, VOCAB, (BATCH, SEQ), dtype=np.int64))
        data = ["--data", f"input_ids={ids}", "--labels", labels, "--threads", "1"]
        base = [model, "--dim", f"batch={BATCH}", "--optimizer", "sgd", "--momentum", "0.9",
                "--lr", "0.1"] + data

        runs = {}
        for mesh in [[]] + MESHES:
            what = " ".join(mesh) or "one rank"
            d = os.path.join(tmp, f"run{len(runs)}")
            out = {"log": d + ".jsonl", "ck": d + "_ck"}
            p = run(base + ["--steps", str(STEPS), "--save", out["ck"], "--log-json",
                            out["log"]] + mesh)
            runs[what] = out if check(p.returncode == 0, f"{what}: {p.stderr[-800:]}") else None
        ref = runs["one rank"]
        for what, got in runs.items():
            if what == "one rank" or ref is None or got is None:
                continue
            worst = compare("gpt2 v1001", what, ref, got, init, 2e-2)
            print(f"gpt2 vocabulary 1001 {what:45s} loss/norm rel diff {worst:.2e}")
        if ref:
            from test_train_dist import load_ckpt
            tp2 = runs["--mesh tp=2"]
            w = load_ckpt(tp2["ck"], "weights") if tp2 else {}
            check(w.get(WTE) is not None and w[WTE].shape == (VOCAB, 64),
                  f"tp=2 checkpoint: {WTE} {w.get(WTE, np.zeros(0)).shape}")

        # the plan: the model's count, no fallback, no gather of the table
        p = subprocess.run([SHARDC, "plan", model, "--train", "--dim", f"batch={BATCH}",
                            "--mesh", "tp=2", "--json"], capture_output=True, text=True,
                           timeout=300)
        if check(p.returncode == 0, f"plan tp=2: {p.stderr[-500:]}"):
            j = json.loads(p.stdout)
            ops = {c.get("op") for c in j["collectives"]} if isinstance(
                j["collectives"], list) else set(j["collectives"])
            check(j["parameters"] == 168256 and j["fallbacks"]["values"] == 0 and
                  j["fallbacks"]["nodes"] == 0 and not any("Gather" in str(o) for o in ops),
                  f"plan tp=2: parameters {j['parameters']}, fallbacks {j['fallbacks']}, "
                  f"collectives {ops}")
        p = run(base + ["--steps", "1", "--mesh", "tp=2", "--list-params"])
        line = [ln for ln in p.stdout.splitlines() if ln.startswith(WTE + " ")]
        check(p.returncode == 0 and len(line) == 1 and "[1001,64]" in line[0] and
              "trainable: 168,256 parameters" in p.stdout,
              f"--list-params at tp=2: {p.stdout[-600:]}{p.stderr[-300:]}")

        # resumed across tp sizes
        full = losses(ref["log"]) if ref else None

        def step3_equal(what, log):
            last_step_equal(full, what, log)

        for saved, resumed in ((["--mesh", "tp=2"], []), (["--mesh", "tp=2"], ["--mesh", "tp=4"]),
                               ([], ["--mesh", "tp=2"])):
            ck = os.path.join(tmp, "ck_" + "_".join(saved).replace("=", ""))
            if not os.path.isdir(ck):
                p = run(base + ["--steps", "2", "--save", ck] + saved)
                if not check(p.returncode == 0, f"save at {saved}: {p.stderr[-500:]}"):
                    continue
            log = os.path.join(tmp, f"resume{len(saved)}{len(resumed)}.jsonl")
            p = run(base + ["--steps", "3", "--resume", ck, "--log-json", log] + resumed)
            what = f"saved at {' '.join(saved) or 'one rank'}, resumed at " \
                   f"{' '.join(resumed) or 'one rank'}"
            if check(p.returncode == 0, f"{what}: {p.stderr[-500:]}"):
                step3_equal(what, log)

        # export: the model's weights, as one rank's
        exported = []
        for what in ("one rank", "--mesh tp=2"):
            out = os.path.join(tmp, f"export{len(exported)}.onnx")
            if runs.get(what) is None:
                continue
            p = subprocess.run([SHARDC, "export", runs[what]["ck"], "--model", model, "-o", out],
                               capture_output=True, text=True, timeout=300)
            if check(p.returncode == 0, f"export {what}: {p.stderr[-500:]}"):
                exported.append({t.name: numpy_helper.to_array(t).astype(np.float64)
                                 for t in onnx.load(out).graph.initializer})
        if len(exported) == 2:
            a, b = exported
            check(sorted(a) == sorted(b) and a[WTE].shape == (VOCAB, 64) and
                  all(np.abs(a[k] - b[k]).max() <= 2e-2 * max(np.abs(a[k] - init[k]).max(), 1e-9)
                      + 1e-9 for k in a if k in init),
                  "export of tp=2's checkpoint differs from one rank's")

        # a bundle compiled at tp=2
        bundle = os.path.join(tmp, "bundle")
        p = subprocess.run([SHARDC, "compile", model, "--train", "-o", bundle, "--dim",
                            f"batch={BATCH}", "--optimizer", "sgd", "--momentum", "0.9",
                            "--mesh", "tp=2"], capture_output=True, text=True, timeout=300)
        padded = WTE + ".vocab_padded"
        if check(p.returncode == 0, f"compile tp=2: {p.stderr[-500:]}"):
            params = json.load(open(os.path.join(bundle, "training.json")))["params"]
            vocab = {t["name"]: t["vocab"] for t in params if "vocab" in t}
            check(vocab == {padded: {"dim": 0, "size": VOCAB}}, f"bundle: vocab {vocab}")
            log = os.path.join(tmp, "bundle.jsonl")
            p = run([bundle, "--lr", "0.1", "--steps", "3", "--log-json", log] + data)
            if check(p.returncode == 0, f"train the tp=2 bundle: {p.stderr[-500:]}"):
                step3_equal("the tp=2 bundle", log)
            other = "transformer.ln_f.weight"
            for name, bad in ((padded, {"dim": 0, "size": 0}), (padded, {"dim": 9, "size": 1}),
                              (padded, {"dim": 2, "size": 1}), (padded, {"dim": 0, "size": 1002}),
                              (padded, {"dim": 0, "size": 5000}), (padded, {"dim": 0}),
                              (padded, "1001"), (other, {"dim": 0, "size": 1})):
                def edit(j):
                    for t in j["params"]:
                        t.pop("vocab", None)
                        if t["name"] == name:
                            t["vocab"] = bad
                edit_refused(bundle, edit, ["--lr", "0.1"] + data, (name, "vocab"),
                             f"vocab {bad} on {name}")

        # --init rules: the padded copy drawn as the model's tensor
        rules = ["--init", "*ln_*.weight=ones", "--init", "*.bias=zeros", "--init",
                 "*=normal:0.02", "--seed", "1", "--steps", "2"]
        inits = []
        for mesh in ([], ["--mesh", "tp=2"]):
            log = os.path.join(tmp, "init%d.jsonl" % len(mesh))
            p = run(base + rules + ["--log-json", log] + mesh)
            if check(p.returncode == 0, f"--init at {mesh}: {p.stderr[-500:]}"):
                inits.append(losses(log))
        if len(inits) == 2:
            check(all(rel(a[k], b[k]) <= 2e-5 for a, b in zip(*inits)
                      for k in ("loss", "grad_norm")) and len(inits[1]) == 2,
                  f"--init at tp=2: {inits[1]} vs one rank {inits[0]}")

        # negative ids count from the end of the model's vocabulary (the
        # forward's masked lookup and the gradient's wrapped indices), not
        # of the padded table
        neg = os.path.join(tmp, "neg_ids.npy")
        np.save(neg, np.load(ids) - VOCAB * (np.arange(BATCH * SEQ).reshape(BATCH, SEQ) % 3 == 0))
        wrapped = []
        for mesh in ([], ["--mesh", "tp=2"], ["--mesh", "dp=2,tp=2", "--sequence-parallel"]):
            log = os.path.join(tmp, "neg%d.jsonl" % len(wrapped))
            args = [a if a != f"input_ids={ids}" else f"input_ids={neg}" for a in base]
            p = run(args + ["--steps", "2", "--log-json", log] + mesh)
            if check(p.returncode == 0, f"negative ids at {mesh}: {p.stderr[-500:]}"):
                wrapped.append(losses(log))
        if len(wrapped) == 3:
            check(all(rel(a[k], b[k]) <= 2e-5 for got in wrapped[1:] for a, b in
                      zip(wrapped[0], got) for k in ("loss", "grad_norm")),
                  f"negative ids: {wrapped[1:]} vs one rank {wrapped[0]}")

        # check's equivalence reads the mesh's state by the model's names
        p = subprocess.run([SHARDC, "check", model, "--train", "--mesh", "tp=2", "--dim",
                            f"batch={BATCH}"], capture_output=True, text=True, timeout=600)
        eq = [ln for ln in p.stdout.splitlines() if ln.strip().startswith("equivalence")]
        check(len(eq) == 1 and "passed" in eq[0], f"check tp=2: {p.stdout[-800:]}"
              f"{p.stderr[-300:]}")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
