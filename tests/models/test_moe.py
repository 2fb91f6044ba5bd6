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
