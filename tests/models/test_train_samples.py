"""test_train_samples.py — the whole training graph of every sample model
(MLP, GPT-2, BERT, Llama, ViT, ResNet), each op's gradient rule working
together, against finite differences taken with onnxruntime.

For each sample: one `shardc train` step with SGD, lr 1, no momentum, on
seeded random data (batch 2; cross-entropy against random labels over the
last axis of the logits, or mse against random targets for BERT's
pooler_output), saved as a checkpoint: the gradient is exactly the initial
weight minus the saved one. For the 4 parameter elements with the largest
gradient (over all tensors), the same loss is computed in float64 from
onnxruntime's outputs of the model with that element moved by ±h
(h = 1e-2 · max(1, |w|)), and the central difference must match:
|g − fd| <= 0.05 · |fd| + 2e-4 (onnxruntime computes in fp32: the
difference quotient carries about 1e-5 / h of rounding; 5% bounds the
step's curvature error for these models). The loss of the step itself must
equal the onnxruntime one within rtol 1e-4, atol 1e-5. No NaN. Also: every
sample trains for 20 AdamW steps without a non-finite loss.

Environment: SHARDC. Exit 0 on success, 1 on any failure.
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from safetensors.numpy import load_file
from checks import check, failures, gradient_matches_fd

SHARDC = os.environ.get("SHARDC")
SRC = os.environ.get("SC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))


def ce(logits, labels):
    z = logits.astype(np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    flat = logp.reshape(-1, logp.shape[-1])
    return -flat[np.arange(flat.shape[0]), labels.reshape(-1)].mean()


SAMPLES = {
    # name: (inputs maker, output read by the loss, loss kind)
    "mlp": (lambda r: {"x": r.uniform(-1, 1, (2, 64)).astype(np.float32)}, "y", "ce"),
    "gpt2": (lambda r: {"input_ids": r.randint(0, 1000, (2, 16)).astype(np.int64)}, "logits", "ce"),
    "llama": (lambda r: {"input_ids": r.randint(0, 1000, (2, 16)).astype(np.int64)}, "logits", "ce"),
    "bert": (lambda r: {"input_ids": r.randint(0, 1000, (2, 16)).astype(np.int64),
                        "attention_mask": np.ones((2, 16), np.int64)}, "pooler_output", "mse"),
    "vit": (lambda r: {"pixel_values": r.uniform(-1, 1, (2, 3, 32, 32)).astype(np.float32)},
            "logits", "ce"),
    "resnet": (lambda r: {"x": r.uniform(-1, 1, (2, 3, 32, 32)).astype(np.float32)}, "y", "ce"),
}


def loss_of(model_bytes, inputs, out, kind, target):
    sess = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    y = sess.run(None, inputs)[names.index(out)]
    if kind == "ce":
        return ce(y, target)
    return ((y.astype(np.float64) - target) ** 2).mean()


def main():
    if not SHARDC:
        print("SHARDC is not set")
        return 1
    for name, (make, out, kind) in SAMPLES.items():
        path = os.path.join(SRC, "samples", name + ".onnx")
        r = np.random.RandomState(5)
        inputs = make(r)
        m = onnx.load(path)
        outs = {o.name: o for o in m.graph.output}
        with tempfile.TemporaryDirectory() as tmp:
            args = []
            for k, v in inputs.items():
                np.save(os.path.join(tmp, k + ".npy"), v)
                args += ["--data", f"{k}={os.path.join(tmp, k + '.npy')}"]
            sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
            y0 = sess.run([out], inputs)[0]
            if kind == "ce":
                target = r.randint(0, y0.shape[-1], y0.shape[:-1]).astype(np.int64)
                np.save(os.path.join(tmp, "t.npy"), target)
                args += ["--labels", os.path.join(tmp, "t.npy")]
            else:
                target = r.uniform(-1, 1, y0.shape).astype(np.float32)
                np.save(os.path.join(tmp, "t.npy"), target)
                args += ["--targets", os.path.join(tmp, "t.npy"), "--loss", "mse"]
                target = target.astype(np.float64)
            if len(outs) > 1:
                args += ["--logits", out]
            ck, log = os.path.join(tmp, "ck"), os.path.join(tmp, "log.jsonl")
            p = subprocess.run([SHARDC, "train", path, "--dim", "batch=2", "--steps", "1",
                                "--optimizer", "sgd", "--lr", "1", "--save", ck, "--log-json", log,
                                "--quiet"] + args, capture_output=True, text=True, timeout=600)
            if not check(p.returncode == 0, f"{name}: train: {p.stderr[-500:]}"):
                continue
            step = json.loads(open(log).readline())
            want = loss_of(path, inputs, out, kind, target)
            check(step["loss"] is not None and abs(step["loss"] - want) <= 1e-5 + 1e-4 * abs(want),
                  f"{name}: step loss {step['loss']} vs onnxruntime {want}")
            saved = load_file(os.path.join(ck, "weights.safetensors"))
            worst = gradient_matches_fd(
                name, m, saved,
                lambda mm: loss_of(mm.SerializeToString(), inputs, out, kind, target), 0.05, 2e-4)
            # twenty AdamW steps stay finite
            p = subprocess.run([SHARDC, "train", path, "--dim", "batch=2", "--steps", "20",
                                "--optimizer", "adamw", "--lr", "1e-3", "--log-json", log,
                                "--quiet"] + args, capture_output=True, text=True, timeout=600)
            if check(p.returncode == 0, f"{name}: 20 adamw steps: {p.stderr[-300:]}"):
                losses = [json.loads(line)["loss"] for line in open(log)]
                check(len(losses) == 20 and all(x is not None for x in losses),
                      f"{name}: non-finite losses {losses}")
            print(f"ok: {name}: step loss {step['loss']:.6f}, 4 gradients within "
                  f"{100 * worst:.2f}% of finite differences")
    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    print("all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
