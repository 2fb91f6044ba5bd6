"""test_train_ms_moe.py — a model containing onnxruntime's fused
`com.microsoft.MoE` trains (docs/moe.md): the op's expansion (Softmax,
TopK, the routing matrix's ScatterElements of the top-k weights into
zeros, every expert, the weighted sum) differentiated by autodiff, the
ScatterElements gradient rule (passes/grad_rules.c) carrying the routing
weights' gradient back to the router.

The model: x [batch, 8] (batch 8, seeded uniform in [-1, 1)), router
logits x · Wr [8, 4], MoE over 4 experts (k = 2, weights renormalised,
silu, both biases, F = 6), then a head y · Wh [8, 5] into 5 labels
(cross-entropy against seeded random labels). onnxruntime-training is not
used (not installed): as test_train_samples.py does, one `shardc train`
step with SGD at lr 1 gives the gradient exactly (initial minus saved
weights); the largest element of every parameter's gradient (the router's
included: it reaches the loss only through the routing matrix) must match
central finite differences of the loss onnxruntime computes (its MoE
kernel, float64 cross-entropy from its logits), h = 1e-2 · max(1, |w|),
within 5 % + 2e-4 (onnxruntime computes in fp32: the difference quotient
carries about 1e-5 / h of rounding; the data keep every row's top 2
experts ahead of the third by more than the step moves them, checked), and
the step's loss must equal onnxruntime's within rtol 1e-4, atol 1e-5. Then
10 SGD steps (lr 0.5) on the same batch: every loss finite and the last
below 0.9 of the first. No NaN.

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
from onnx import TensorProto as T, helper
from safetensors.numpy import load_file

sys.path.insert(0, os.path.dirname(__file__))
from checks import check, finish, gradient_matches_fd  # noqa: E402
from test_train_samples import ce  # noqa: E402

SHARDC = os.environ.get("SHARDC")
BATCH, D, E, F, C, K = 8, 8, 4, 6, 5, 2


def model(rng):
    def init(name, shape, scale):
        return helper.make_tensor(name, T.FLOAT, shape,
                                  (scale * rng.uniform(-1, 1, shape)).astype(np.float32).ravel())

    inits = [init("wr", [D, E], 1.0), init("w1", [E, F, D], 0.5), init("b1", [E, F], 0.2),
             init("w2", [E, D, F], 0.5), init("b2", [E, D], 0.2), init("wh", [D, C], 0.5)]
    nodes = [helper.make_node("MatMul", ["x", "wr"], ["r"]),
             helper.make_node("MoE", ["x", "r", "w1", "b1", "w2", "b2"], ["y"],
                              domain="com.microsoft", k=K, activation_type="silu",
                              normalize_routing_weights=1),
             helper.make_node("MatMul", ["y", "wh"], ["logits"])]
    g = helper.make_graph(nodes, "ms_moe",
                          [helper.make_tensor_value_info("x", T.FLOAT, ["batch", D])],
                          [helper.make_tensor_value_info("logits", T.FLOAT, ["batch", C])],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    return m


def loss_of(m, x, labels):
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return ce(sess.run(["logits"], {"x": x})[0], labels)


def main():
    if not SHARDC:
        print("SHARDC is not set")
        return 1
    rng = np.random.RandomState(7)
    m = model(rng)
    x = rng.uniform(-1, 1, (BATCH, D)).astype(np.float32)
    labels = rng.randint(0, C, (BATCH,)).astype(np.int64)
    # the finite differences must not change which experts a row takes
    init = {t.name: onnx.numpy_helper.to_array(t) for t in m.graph.initializer}
    logits = np.sort(x.astype(np.float64) @ init["wr"], axis=1)
    gap = (logits[:, E - K] - logits[:, E - K - 1]).min()
    check(gap > 0.05, f"the router's top-{K} gap {gap:.3g}: finite differences would reroute")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "ms_moe.onnx")
        onnx.save(m, path)
        np.save(os.path.join(tmp, "x.npy"), x)
        np.save(os.path.join(tmp, "labels.npy"), labels)
        args = [SHARDC, "train", path, "--dim", f"batch={BATCH}", "--data",
                "x=" + os.path.join(tmp, "x.npy"), "--labels", os.path.join(tmp, "labels.npy"),
                "--optimizer", "sgd", "--quiet"]
        ck, log = os.path.join(tmp, "ck"), os.path.join(tmp, "log.jsonl")
        p = subprocess.run(args + ["--steps", "1", "--lr", "1", "--save", ck, "--log-json", log],
                           capture_output=True, text=True, timeout=600)
        if not check(p.returncode == 0, f"train one step: {p.stderr[-1500:]}"):
            return finish()
        step = json.loads(open(log).readline())
        want = loss_of(m, x, labels)
        check(step["loss"] is not None and abs(step["loss"] - want) <= 1e-5 + 1e-4 * abs(want),
              f"step loss {step['loss']} vs onnxruntime {want}")
        saved = load_file(os.path.join(ck, "weights.safetensors"))
        check(sorted(saved) == sorted(init), f"saved weights {sorted(saved)}")
        check(np.abs(saved["wr"] - init["wr"]).max() > 1e-4,
              "the router got no gradient (it reaches the loss only through ScatterElements)")
        worst = gradient_matches_fd("ms_moe", m, saved, lambda mm: loss_of(mm, x, labels),
                                    0.05, 2e-4, per_weight=1, n=len(init))
        print(f"one step: loss {step['loss']:.6f} (onnxruntime {want:.6f}); the largest "
              f"gradient element of each of {len(init)} parameters within "
              f"{worst:.1e} (relative) of finite differences")
        p = subprocess.run(args + ["--steps", "10", "--lr", "0.5", "--log-json", log],
                           capture_output=True, text=True, timeout=600)
        if check(p.returncode == 0, f"train 10 steps: {p.stderr[-1500:]}"):
            losses = [json.loads(line)["loss"] for line in open(log)]
            check(len(losses) == 10 and all(v is not None and np.isfinite(v) for v in losses)
                  and losses[-1] < 0.9 * losses[0], f"10 steps: losses {losses}")
            print(f"10 steps: loss {losses[0]:.4f} -> {losses[-1]:.4f}")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
