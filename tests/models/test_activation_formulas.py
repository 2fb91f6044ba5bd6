"""test_activation_formulas.py — the activations a training step saves per
transformer layer are Korthikanti et al.'s ("Reducing Activation
Recomputation in Large Transformer Models", 2022, section 4), to the byte.

The paper counts, per layer of sequence s, micro-batch b, hidden h and a
heads, in 16-bit activations with dropout: sbh(34 + 5as/h) bytes without
recompute, 34sbh with selective recompute (the attention core recomputed),
2sbh with full recompute (the layer's input alone); with t-way tensor
parallelism sbh(10 + 24/t + 5as/(ht)), and with sequence parallelism too
sbh(34/t + 5as/(ht)). Its terms are, in elements of [s, b, h]: the
LayerNorm inputs (2), the QKV projection's input (1), Q and K (2), V (1),
the output projection's input (1), the MLP's first input (1), the GeLU's
input and output (4 + 4), all at 2 bytes; the softmax output and the
dropout output (as^2b each, 2 bytes); and 1-byte dropout masks (2sbh and
as^2b). A step here has no dropout and keeps fp32 activations, so the same
terms give, in bytes,
    none        4 (16 sbh + a s^2 b)
    selective   4 · 16 sbh
    full        4 sbh
    tp=t        4 (4 sbh + 12 sbh/t + a s^2 b/t)
    tp=t + sp   4 (16 sbh + a s^2 b)/t, and 4 · 16 sbh/t with selective
(the paper's formula with the dropout terms left out and 4 bytes for 2).

The model: GPT-style pre-LN layers built here (fused LayerNormalization,
a fused QKV MatMul split into heads, Softmax, Gelu, residual adds, biases),
an MSE loss on the last layer's output, the attention core unfused as the
paper has it (--no-fuse-attention). `shardc plan --train --json`
reports `saved_activations`: the bytes of forward values live when the
backward begins. Per layer is the difference between the 3-layer and the
2-layer model (every layer's input is then an activation; the loss's and
the input's share cancel). Environment: SHARDC. Exit 0 on success.
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from checks import check, failures

SHARDC = os.environ.get("SHARDC")
S, B, H, A = 8, 2, 64, 4    # sequence, micro-batch, hidden, heads (sbh != as^2b)
D = H // A


def layer(i, x, nodes, inits, rng):
    p = f"transformer.h.{i}"
    n = f"/transformer/h.{i}"

    def w(name, shape):
        inits.append(numpy_helper.from_array(
            rng.uniform(-0.1, 0.1, shape).astype(np.float32), f"{p}.{name}"))
        return f"{p}.{name}"

    def c(name, vals):
        inits.append(numpy_helper.from_array(np.array(vals, dtype=np.int64), f"{n}/{name}"))
        return f"{n}/{name}"

    def node(op, ins, outs, name, **kw):
        nodes.append(helper.make_node(op, ins, outs, name=f"{n}/{name}", **kw))
        return outs[0]

    v = lambda s: f"{n}/{s}"
    ln1 = node("LayerNormalization", [x, w("ln_1.weight", [H]), w("ln_1.bias", [H])],
               [v("ln1")], "ln_1/LayerNormalization", axis=-1)
    qkv = node("MatMul", [ln1, w("attn.c_attn.weight", [H, 3 * H])], [v("qkv_mm")],
               "attn/c_attn/MatMul")
    qkv = node("Add", [qkv, w("attn.c_attn.bias", [3 * H])], [v("qkv")], "attn/c_attn/Add")
    node("Split", [qkv, c("split", [H, H, H])], [v("q"), v("k"), v("v")], "attn/Split", axis=-1)
    heads = c("heads", [B, S, A, D])
    q = node("Reshape", [v("q"), heads], [v("q4")], "attn/Reshape_q")
    q = node("Transpose", [q], [v("qt")], "attn/Transpose_q", perm=[0, 2, 1, 3])
    k = node("Reshape", [v("k"), heads], [v("k4")], "attn/Reshape_k")
    k = node("Transpose", [k], [v("kt")], "attn/Transpose_k", perm=[0, 2, 3, 1])
    vv = node("Reshape", [v("v"), heads], [v("v4")], "attn/Reshape_v")
    vv = node("Transpose", [vv], [v("vt")], "attn/Transpose_v", perm=[0, 2, 1, 3])
    sc = node("MatMul", [q, k], [v("scores")], "attn/MatMul")
    node("Constant", [], [v("scale")], "attn/Constant",  # not an initializer: not trained
         value=numpy_helper.from_array(np.array(1 / np.sqrt(D), np.float32)))
    sc = node("Mul", [sc, v("scale")], [v("scaled")], "attn/Mul")
    pr = node("Softmax", [sc], [v("probs")], "attn/Softmax", axis=-1)
    o = node("MatMul", [pr, vv], [v("ctx")], "attn/MatMul_1")
    o = node("Transpose", [o], [v("ctx_t")], "attn/Transpose_o", perm=[0, 2, 1, 3])
    o = node("Reshape", [o, c("merge", [B, S, H])], [v("ctx_m")], "attn/Reshape_o")
    o = node("MatMul", [o, w("attn.c_proj.weight", [H, H])], [v("proj_mm")],
             "attn/c_proj/MatMul")
    o = node("Add", [o, w("attn.c_proj.bias", [H])], [v("proj")], "attn/c_proj/Add")
    x2 = node("Add", [x, o], [v("res1")], "Add")
    ln2 = node("LayerNormalization", [x2, w("ln_2.weight", [H]), w("ln_2.bias", [H])],
               [v("ln2")], "ln_2/LayerNormalization", axis=-1)
    f = node("MatMul", [ln2, w("mlp.c_fc.weight", [H, 4 * H])], [v("fc_mm")],
             "mlp/c_fc/MatMul")
    f = node("Add", [f, w("mlp.c_fc.bias", [4 * H])], [v("fc")], "mlp/c_fc/Add")
    g = node("Gelu", [f], [v("gelu")], "mlp/Gelu")
    m = node("MatMul", [g, w("mlp.c_proj.weight", [4 * H, H])], [v("mlp_mm")],
             "mlp/c_proj/MatMul")
    m = node("Add", [m, w("mlp.c_proj.bias", [H])], [v("mlp")], "mlp/c_proj/Add")
    return node("Add", [x2, m], [v("out")], "Add_1")


def model(layers, path):
    rng = np.random.RandomState(7)
    nodes, inits = [], []
    x = "x"
    for i in range(layers):
        x = layer(i, x, nodes, inits, rng)
    nodes.append(helper.make_node("Identity", [x], ["y"], name="/out/Identity"))
    g = helper.make_graph(
        nodes, "layers",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, S, H])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, S, H])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    onnx.checker.check_model(m)
    onnx.save(m, path)


def saved(path, *extra):
    # the paper's core is unfused: its softmax output is saved (a fused core
    # saves its output and log-sum-exp instead: docs/passes.md)
    r = subprocess.run([SHARDC, "plan", path, "--train", "--loss", "mse", "--json",
                        "--no-fuse-attention"] + list(extra),
                       capture_output=True, text=True, timeout=300)
    if not check(r.returncode == 0, f"plan {' '.join(extra)}: {r.stderr.strip()}"):
        return None
    return json.loads(r.stdout)["saved_activations"]


def main():
    if not SHARDC:
        print("SHARDC is not set")
        return 1
    sbh, as2b = S * B * H, A * S * S * B
    cases = [  # (what, options, bytes per layer)
        ("no recompute", [], 4 * (16 * sbh + as2b)),
        ("selective recompute", ["--recompute", "selective"], 4 * 16 * sbh),
        ("full recompute", ["--recompute", "full"], 4 * sbh),
        ("tp=2", ["--mesh", "tp=2"], 4 * (4 * sbh + 12 * sbh // 2 + as2b // 2)),
        ("tp=2 + sequence parallel", ["--mesh", "tp=2", "--sequence-parallel"],
         4 * (16 * sbh + as2b) // 2),
        ("tp=2 + sp + selective", ["--mesh", "tp=2", "--sequence-parallel", "--recompute",
                                   "selective"], 4 * 16 * sbh // 2),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        paths = {}
        for n in (2, 3):
            paths[n] = os.path.join(tmp, f"layers{n}.onnx")
            model(n, paths[n])
        for what, opts, want in cases:
            two, three = saved(paths[2], *opts), saved(paths[3], *opts)
            if two is None or three is None:
                continue
            got = three - two
            print(f"{what:26s} per layer {got:8d} bytes, Korthikanti's terms {want:8d} "
                  f"(2 layers {two}, 3 layers {three})")
            check(got == want, f"{what}: {got} bytes saved per layer, the formula gives {want}")
    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
