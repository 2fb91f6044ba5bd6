"""test_moe.py — the mixture-of-experts sample (samples/moe.onnx: top-2 of 8
SwiGLU experts, capacity 5 per sequence, the load-balancing loss as its
second output `aux_loss`) in training, and `shardc train --aux-loss`
(docs/moe.md). Its inference against onnxruntime is test_run_samples.py's;
its training against PyTorch, test_train_torch.py's (train_refs/moe).

On seeded token ids (batch 2, labels uniform in [0, 1000)):
  * the loss of step 1 (before any update) with `--aux-loss aux_loss=C` is
    cross-entropy(logits) + C * aux_loss, both from onnxruntime on the same
    ids, within rtol 1e-5 (the project's fp32 bound for a sum of 32k
    terms), for C = 0.02 and 1; without --aux-loss it is the cross-entropy
    alone (and the two differ: aux_loss is about 1);
  * with `--aux-loss aux_loss=1` no --logits is needed (logits is the only
    output no auxiliary loss names); with neither it is a usage error that
    says --logits;
  * training on aux_loss alone (`--loss output:aux_loss`, one SGD step, lr
    1) moves the routers of both layers (the gradient reaches a router
    through the mean routing probabilities) and layer 0's experts (they
    feed layer 1's router); layer 1's experts, the final norm and the LM
    head have no path to aux_loss (the top-k choice and the capacity masks
    are integer or 0/1 values computed from indices, no float path), so
    the step has no such parameters and the checkpoint lacks them;
  * partitioned (batch 4): `shardc run` over tp=2, dp=2 and pp=2 equals
    onnxruntime (rtol 1e-4, atol 1e-5; the aux loss averages over the whole
    batch, so dp must gather it right), and 3 AdamW steps with the aux loss
    over dp=2 and tp=2 give one rank's losses within rtol 1e-5 (measured
    1e-7: sums in another order);
  * one MatMul per expert (the sample's batched expert products rewritten
    as a Split over the experts, a MatMul by each expert's own [D, F]
    weight and a Concat): `shardc run` equals onnxruntime on it (rtol 1e-4,
    atol 1e-5); 3 SGD steps with the aux loss equal the stacked sample's
    (losses and gradient norms within rtol 2e-5, each expert's final
    weights within 2e-4 of its update); `--mesh ep=2` on it is refused
    (exit 2: ep finds experts by their stacked weights);
  * refused with exit 2 and the option named: --aux-loss without '=', with
    a coefficient that is no number or is not finite, the same name twice;
    refused naming the output: a name the model lacks, a non-scalar output.

Environment: SHARDC, SC_SOURCE_DIR. Exit 0 on success, 1 on any failure.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnxruntime as ort
from safetensors.numpy import load_file
from checks import check, finish

SHARDC = os.environ.get("SHARDC")
SRC = os.environ.get("SC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
MODEL = os.path.join(SRC, "samples", "moe.onnx")
RTOL = 1e-5


def train(tmp, *extra):
    return subprocess.run([SHARDC, "train", MODEL, "--dim", "batch=2", "--steps", "1",
                           "--data", "input_ids=%s/ids.npy" % tmp, "--threads", "1", "--quiet"]
                          + list(extra), capture_output=True, text=True, timeout=300)


def first_loss(tmp, *extra):
    log = os.path.join(tmp, "log.jsonl")
    r = train(tmp, "--labels", "%s/labels.npy" % tmp, "--log-json", log, *extra)
    if not check(r.returncode == 0, "train %s: exit %d: %s" % (" ".join(extra), r.returncode,
                                                                r.stderr.strip()[-400:])):
        return float("nan")
    import json
    return float(json.loads(open(log).readline())["loss"])


def cross_entropy(logits, labels):
    z = logits.reshape(-1, logits.shape[-1]).astype(np.float64)
    z = z - z.max(1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(1, keepdims=True))
    return float(-logp[np.arange(z.shape[0]), labels.reshape(-1)].mean())


def refused(tmp, args, needles, rc=None):
    r = train(tmp, "--labels", "%s/labels.npy" % tmp, *args)
    ok = r.returncode != 0 and (rc is None or r.returncode == rc)
    check(ok and all(n in r.stderr for n in needles),
          "%s: exit %d, expected a refusal naming %s: %s" % (" ".join(args), r.returncode,
                                                              needles, r.stderr.strip()))


def per_expert_model(path):
    """The sample with one MatMul per expert: every batched expert product
    xe [B, E, C, D] @ W [E, D, F] becomes a Split of xe over the experts,
    E MatMuls by their own [D, F] weights W.e, and a Concat: the same
    function, as models whose experts are separate modules export it.
    Returns the names of the stacked weights replaced."""
    import onnx
    from onnx import helper, numpy_helper
    m = onnx.load(MODEL)
    g = m.graph
    inits = {t.name: t for t in g.initializer}
    nodes, stacked = [], []
    for n in g.node:
        w = n.input[1] if n.op_type == "MatMul" else None
        if w not in inits or len(inits[w].dims) != 3:
            nodes.append(n)
            continue
        e = inits[w].dims[0]
        if w not in stacked:
            stacked.append(w)
        pieces = [f"{n.name}/x{i}" for i in range(e)]
        nodes.append(helper.make_node("Split", [n.input[0]], pieces, n.name + "/split", axis=1))
        for i in range(e):
            nodes.append(helper.make_node("MatMul", [pieces[i], f"{w}.{i}"], [f"{n.name}/y{i}"],
                                          f"{n.name}/expert{i}"))
        nodes.append(helper.make_node("Concat", [f"{n.name}/y{i}" for i in range(e)],
                                      list(n.output), n.name + "/concat", axis=1))
    for w in stacked:
        a = numpy_helper.to_array(inits[w])
        g.initializer.remove(inits[w])
        g.initializer.extend(numpy_helper.from_array(np.ascontiguousarray(a[i]), f"{w}.{i}")
                             for i in range(a.shape[0]))
    del g.node[:]
    g.node.extend(nodes)
    onnx.save(m, path)
    return stacked


def test_per_expert(tmp, rng):
    """One MatMul per expert (separate [D, F] weights): inference equals
    onnxruntime on that model (rtol 1e-4, atol 1e-5), and 3 SGD steps with
    the aux loss equal the stacked sample's (losses and gradient norms
    within rtol 2e-5, each final per-expert weight within 2e-4 of the
    largest update of its slice of the stacked one's: the same arithmetic
    as one batched MatMul). ep needs the stacked weights (docs/moe.md): on
    this model `--mesh ep=2` is refused, exit 2, saying it has no experts."""
    import json
    from onnx import numpy_helper
    path = os.path.join(tmp, "moe_per_expert.onnx")
    stacked = per_expert_model(path)
    check(len(stacked) == 6, "per-expert model: stacked expert weights replaced: %s" % stacked)
    ids = np.load(os.path.join(tmp, "ids4.npy"))
    out = os.path.join(tmp, "out_per_expert")
    r = subprocess.run([SHARDC, "run", path, "--dim", "batch=4", "--input",
                        "input_ids=%s/ids4.npy" % tmp, "--output-dir", out, "--quiet"],
                       capture_output=True, text=True, timeout=300)
    if check(r.returncode == 0, "run, one MatMul per expert: %s" % r.stderr[-400:]):
        for name, w in zip(("logits", "aux_loss"),
                           ort.InferenceSession(path).run(None, {"input_ids": ids})):
            got = np.load(os.path.join(out, name + ".npy"))
            check(got.shape == w.shape and not np.isnan(got).any()
                  and np.allclose(got, w, rtol=1e-4, atol=1e-5),
                  "run, one MatMul per expert: %s differs from onnxruntime by %s"
                  % (name, np.abs(got - w).max() if got.shape == w.shape else got.shape))
    runs = {}
    for what, model in (("stacked", MODEL), ("per expert", path)):
        log, ck = (os.path.join(tmp, "%s_%s" % (what.replace(" ", "_"), x)) for x in ("log", "ck"))
        r = subprocess.run([SHARDC, "train", model, "--dim", "batch=4", "--steps", "3",
                            "--data", "input_ids=%s/ids4.npy" % tmp, "--labels",
                            "%s/labels4.npy" % tmp, "--optimizer", "sgd", "--lr", "0.05",
                            "--momentum", "0.9", "--aux-loss", "aux_loss=0.02", "--threads", "1",
                            "--log-json", log, "--save", ck, "--quiet"],
                           capture_output=True, text=True, timeout=300)
        if check(r.returncode == 0, "train, %s: %s" % (what, r.stderr[-400:])):
            runs[what] = ([json.loads(line) for line in open(log)],
                          load_file(os.path.join(ck, "weights.safetensors")))
    if len(runs) == 2:
        (la, wa), (lb, wb) = runs["stacked"], runs["per expert"]
        got = [(a[k], b[k]) for a, b in zip(la, lb) for k in ("loss", "grad_norm")]
        worst = max(abs(a - b) / abs(a) for a, b in got)
        check(len(got) == 6 and not np.isnan([b for _, b in got]).any() and worst <= 2e-5,
              "one MatMul per expert against stacked: losses and norms %s" % got)
        import onnx
        init = {t.name: numpy_helper.to_array(t) for t in onnx.load(MODEL).graph.initializer}
        for w in stacked:
            for i in range(init[w].shape[0]):
                a, b = wa[w][i], wb.get("%s.%d" % (w, i))
                scale = np.abs(a - init[w][i]).max()
                check(b is not None and scale > 0 and np.abs(a - b).max() <= 2e-4 * scale,
                      "one MatMul per expert: %s.%d differs from the stacked weight's slice by "
                      "%s (its update %s)" % (w, i, None if b is None else np.abs(a - b).max(),
                                              scale))
        print("one MatMul per expert: losses and gradient norms within %.2e of the stacked "
              "sample's" % worst)
    r = subprocess.run([SHARDC, "plan", path, "--dim", "batch=4", "--mesh", "ep=2"],
                       capture_output=True, text=True, timeout=300)
    check(r.returncode == 2 and "experts" in r.stderr,
          "ep=2, one MatMul per expert: exit %d: %s" % (r.returncode, r.stderr.strip()[-300:]))


def main():
    if not SHARDC:
        print("SHARDC is not set")
        return 1
    rng = np.random.default_rng(4242)
    ids = rng.integers(0, 1000, (2, 16)).astype(np.int64)
    labels = rng.integers(0, 1000, (2, 16)).astype(np.int64)
    logits, aux = ort.InferenceSession(MODEL).run(None, {"input_ids": ids})
    ce, aux = cross_entropy(logits, labels), float(aux)
    check(0.5 < aux < 2.0, "aux_loss %g: expected about 1 (balanced routing)" % aux)
    with tempfile.TemporaryDirectory() as tmp:
        np.save(os.path.join(tmp, "ids.npy"), ids)
        np.save(os.path.join(tmp, "labels.npy"), labels)
        for coef in (0.02, 1.0):
            got = first_loss(tmp, "--aux-loss", "aux_loss=%g" % coef)
            want = ce + coef * aux
            check(abs(got - want) <= RTOL * abs(want),
                  "aux-loss %g: step-1 loss %.8g, cross-entropy + coef * aux_loss %.8g"
                  % (coef, got, want))
        got = first_loss(tmp, "--logits", "logits")
        check(abs(got - ce) <= RTOL * ce, "no aux-loss: loss %.8g, cross-entropy %.8g" % (got, ce))
        check(abs(got - (ce + 0.02 * aux)) > 100 * RTOL * ce, "the aux loss changes nothing")
        r = train(tmp, "--labels", "%s/labels.npy" % tmp)
        check(r.returncode != 0 and "--logits" in r.stderr,
              "two outputs, no --logits or --aux-loss: exit %d: %s" % (r.returncode, r.stderr))

        # the aux loss alone: gradients through the router, none through the choice
        ck = os.path.join(tmp, "ck")
        r = train(tmp, "--loss", "output:aux_loss", "--optimizer", "sgd", "--lr", "1",
                  "--save", ck)
        if check(r.returncode == 0, "--loss output:aux_loss: %s" % r.stderr.strip()[-400:]):
            import onnx
            from onnx import numpy_helper
            init = {t.name: numpy_helper.to_array(t)
                    for t in onnx.load(MODEL).graph.initializer}
            w = load_file(os.path.join(ck, "weights.safetensors"))
            moved = {k: float(np.abs(w[k] - init[k]).max()) for k in w}
            for k in ("layers.0.block_sparse_moe.gate.weight.T",
                      "layers.1.block_sparse_moe.gate.weight.T",
                      "layers.0.block_sparse_moe.w1", "layers.0.block_sparse_moe.w2",
                      "layers.0.block_sparse_moe.w3"):
                check(moved.get(k, 0) > 1e-7, "aux loss alone: %s did not move" % k)
            for k in ("layers.1.block_sparse_moe.w1", "layers.1.block_sparse_moe.w2",
                      "layers.1.block_sparse_moe.w3", "lm_head.weight.T", "norm.weight"):
                check(k not in moved, "aux loss alone: %s is in the step (moved by %s)"
                      % (k, moved.get(k)))

        # partitioned: inference against onnxruntime, training against one rank
        np.save(os.path.join(tmp, "ids4.npy"), rng.integers(0, 1000, (4, 16)).astype(np.int64))
        np.save(os.path.join(tmp, "labels4.npy"), rng.integers(0, 1000, (4, 16)).astype(np.int64))
        want = ort.InferenceSession(MODEL).run(None, {"input_ids": np.load(tmp + "/ids4.npy")})
        for mesh in ("tp=2", "dp=2", "pp=2"):
            out = os.path.join(tmp, "out_" + mesh)
            r = subprocess.run([SHARDC, "run", MODEL, "--dim", "batch=4", "--mesh", mesh,
                                "--input", "input_ids=%s/ids4.npy" % tmp, "--output-dir", out,
                                "--quiet"], capture_output=True, text=True, timeout=300)
            if not check(r.returncode == 0, "run --mesh %s: %s" % (mesh, r.stderr[-400:])):
                continue
            for name, w in zip(("logits", "aux_loss"), want):
                g = np.load(os.path.join(out, name + ".npy"))
                check(g.shape == w.shape and not np.isnan(g).any()
                      and np.allclose(g, w, rtol=1e-4, atol=1e-5),
                      "run --mesh %s: %s differs from onnxruntime by %s" % (
                          mesh, name, np.abs(g - w).max() if g.shape == w.shape else g.shape))
        losses = {}
        for mesh in ("", "dp=2", "tp=2"):
            log = os.path.join(tmp, "log_%s.jsonl" % mesh)
            r = subprocess.run([SHARDC, "train", MODEL, "--dim", "batch=4", "--steps", "3",
                                "--data", "input_ids=%s/ids4.npy" % tmp,
                                "--labels", "%s/labels4.npy" % tmp, "--optimizer", "adamw",
                                "--aux-loss", "aux_loss=0.02", "--log-json", log, "--quiet"]
                               + (["--mesh", mesh] if mesh else []),
                               capture_output=True, text=True, timeout=300)
            if check(r.returncode == 0, "train --mesh %s: %s" % (mesh, r.stderr[-400:])):
                import json
                losses[mesh] = np.array([json.loads(line)["loss"] for line in open(log)])
        for mesh in ("dp=2", "tp=2"):
            if "" in losses and mesh in losses:
                check(np.allclose(losses[mesh], losses[""], rtol=1e-5, atol=0),
                      "train --mesh %s: losses %s, one rank %s" % (mesh, losses[mesh],
                                                                  losses[""]))
        test_per_expert(tmp, rng)

        refused(tmp, ["--aux-loss", "aux_loss"], ["--aux-loss", "NAME=COEF"], 2)
        refused(tmp, ["--aux-loss", "aux_loss=x"], ["--aux-loss", "aux_loss=x"], 2)
        refused(tmp, ["--aux-loss", "aux_loss=inf"], ["--aux-loss", "finite"], 2)
        refused(tmp, ["--aux-loss", "aux_loss=1", "--aux-loss", "aux_loss=2"],
                ["--aux-loss", "twice"], 2)
        refused(tmp, ["--aux-loss", "nope=1"], ["--aux-loss nope", "no output named 'nope'"])
        refused(tmp, ["--aux-loss", "logits=1", "--logits", "logits"],
                ["--aux-loss logits", "float scalar", "rank 3"])
    return finish()


if __name__ == "__main__":
    sys.exit(main())
