"""test_contrib_ops.py — onnxruntime's com.microsoft ops, as exports
optimised by its transformer tools contain them, read as IR ops at import
(frontend/onnx_adapters.c), against onnxruntime itself.

Each case is a small model (onnx.helper, the com.microsoft opset imported
beside the default one) run by `shardc run` (--no-fuse and fused) and by
onnxruntime on the same seeded random inputs (uniform in ±[0.05, 2), never
zero); outputs equal within rtol 1e-4, atol 1e-5 (erf and tanh: another
libm), no NaN:
  gelu, bias_gelu, fast_gelu (with and without bias), quick_gelu (alpha
  1.5), fused_matmul (alpha 0.5, transB on a [2,6,5] initializer, and
  transA on a [3,4] graph input), skip_layer_norm (gamma, beta, bias; the
  sum output 3 too) at opset 17 (LayerNormalization) and at opset 14 (its
  decomposition), skip_simplified_layer_norm, and SimplifiedLayerNormalization
  (default domain, as onnxruntime registers it); embed_layer_norm (word,
  position and segment embeddings, its mask_index and embedding_sum
  outputs, the mask_index read by com.microsoft Attention; rows padded on
  the left, on the right and not at all) at opset 17, and at opset 14 with
  position_ids; MoE (moe_cases: every activation, k 1 to 3, routing
  weights normalised or not, biases or not, swiglu with its limit).
Refused, naming the op: FusedMatMul with transBatchA, SkipLayerNormalization
asked for its mean output, MoE with fc3 weights or an unknown activation,
an unknown com.microsoft op.

Environment: SHARDC. Exit 0 on success, 1 on any failure.
"""
import os
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto as T, helper
from checks import equals_onnxruntime, finish, refused_model

SHARDC = os.environ.get("SHARDC")
MS = "com.microsoft"


def vi(name, shape):
    return helper.make_tensor_value_info(name, T.FLOAT, shape)


def rand(rng, shape):
    return (rng.uniform(0.05, 2.0, shape) * rng.choice([-1.0, 1.0], shape)).astype(np.float32)


def build(name, nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, name, [vi(n, s) for n, s in inputs],
                          [vi(n, s) for n, s in outputs], list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset),
                                               helper.make_opsetid(MS, 1)])


def cases(rng):
    def init(n, shape):
        return helper.make_tensor(n, T.FLOAT, shape, rand(rng, shape).ravel())

    x = [("x", [2, 3, 8])]
    out = [
        ("gelu", build("gelu", [helper.make_node("Gelu", ["x"], ["y"], domain=MS)], x,
                       [("y", [2, 3, 8])])),
        ("bias_gelu", build("bias_gelu", [helper.make_node("BiasGelu", ["x", "b"], ["y"],
                                                           domain=MS)], x, [("y", [2, 3, 8])],
                            [init("b", [8])])),
        ("fast_gelu", build("fast_gelu", [helper.make_node("FastGelu", ["x"], ["y"], domain=MS),
                                          helper.make_node("FastGelu", ["x", "b"], ["z"],
                                                           domain=MS)],
                            x, [("y", [2, 3, 8]), ("z", [2, 3, 8])], [init("b", [8])])),
        ("quick_gelu", build("quick_gelu", [helper.make_node("QuickGelu", ["x"], ["y"],
                                                             domain=MS, alpha=1.5)],
                             x, [("y", [2, 3, 8])])),
        ("fused_matmul", build("fused_matmul", [
            helper.make_node("FusedMatMul", ["a", "w"], ["y"], domain=MS, alpha=0.5, transB=1),
            helper.make_node("FusedMatMul", ["c", "d"], ["z"], domain=MS, transA=1)],
            [("a", [2, 4, 5]), ("c", [3, 4]), ("d", [3, 2])], [("y", [2, 4, 6]), ("z", [4, 2])],
            [init("w", [2, 6, 5])])),
    ]
    for opset in (17, 14):
        out.append((f"skip_layer_norm_op{opset}", build(
            "sln", [helper.make_node("SkipLayerNormalization", ["x", "s", "g", "be", "bi"],
                                     ["y", "", "", "sum"], domain=MS, epsilon=1e-5)],
            x + [("s", [2, 3, 8])], [("y", [2, 3, 8]), ("sum", [2, 3, 8])],
            [init("g", [8]), init("be", [8]), init("bi", [8])], opset)))
    out.append(("skip_simplified_layer_norm", build(
        "ssln", [helper.make_node("SkipSimplifiedLayerNormalization", ["x", "s", "g"], ["y"],
                                  domain=MS, epsilon=1e-6)],
        x + [("s", [2, 3, 8])], [("y", [2, 3, 8])], [init("g", [8])])))
    out.append(("simplified_layer_norm", build(
        "sln_default", [helper.make_node("SimplifiedLayerNormalization", ["x", "g"], ["y"],
                                         axis=-1, epsilon=1e-5)],
        x, [("y", [2, 3, 8])], [init("g", [8])])))
    return out + moe_cases(rng)


def moe_cases(rng):
    """com.microsoft MoE: T = 6 rows (a [2, 3, 8] input, or [6, 8]), E = 4
    experts, router logits a graph input; every activation, k of 1, 2 and
    3, with and without normalize_routing_weights and the biases; swiglu
    interleaved (swiglu_fusion 1) with alpha 1.702, beta 1 and limit 1.5,
    and with the defaults."""
    E, D, F = 4, 8, 5

    def init(n, shape):
        return helper.make_tensor(n, T.FLOAT, shape, (0.3 * rand(rng, shape)).ravel())

    out = []
    for name, act, k, norm, bias, x3, extra in (
            ("moe_relu", "relu", 2, 0, True, True, {}),
            ("moe_gelu", "gelu", 2, 1, False, False, {}),
            ("moe_silu", "silu", 1, 0, True, False, {}),
            ("moe_identity", "identity", 3, 1, True, True, {}),
            ("moe_swiglu", "swiglu", 2, 1, True, True,
             {"swiglu_fusion": 1, "activation_alpha": 1.702, "activation_beta": 1.0,
              "swiglu_limit": 1.5}),
            ("moe_swiglu_default", "swiglu", 2, 0, False, False, {"swiglu_fusion": 1})):
        f1 = 2 * F if act == "swiglu" else F
        ins = ["x", "r", "w1", "b1" if bias else "", "w2"] + (["b2"] if bias else [])
        inits = [init("w1", [E, f1, D]), init("w2", [E, D, F])]
        if bias:
            inits += [init("b1", [E, f1]), init("b2", [E, D])]
        xs = [2, 3, D] if x3 else [6, D]
        node = helper.make_node("MoE", ins, ["y"], domain=MS, k=k, activation_type=act,
                                normalize_routing_weights=norm, **extra)
        out.append((name, build(name, [node], [("x", xs), ("r", [6, E])], [("y", xs)], inits)))
    return out


def embed_cases(rng):
    """EmbedLayerNormalization (BERT's embeddings, as onnxruntime's optimizer
    fuses them) with its mask_index feeding com.microsoft Attention, and
    the int32 feeds they take: ids and segment ids in range; the mask has
    row 0 padded on the left, row 1 on the right, row 2 not at all (the
    mask_index counts the ones, and Attention masks the keys at and after
    that count: onnxruntime's right-padding reading)."""
    B, S, H, V = 3, 6, 8, 11

    def init(n, shape):
        return helper.make_tensor(n, T.FLOAT, shape, rand(rng, shape).ravel())

    def ivi(n, shape):
        return helper.make_tensor_value_info(n, T.INT32, shape)

    mask = np.ones((B, S), np.int32)
    mask[0, :2] = 0
    mask[1, -3:] = 0
    ids = rng.integers(0, V, (B, S)).astype(np.int32)
    seg = rng.integers(0, 2, (B, S)).astype(np.int32)
    pos = rng.integers(0, 10, (B, S)).astype(np.int32)
    out = []
    for opset, with_pos in ((17, False), (14, True)):
        ins = ["ids", "seg", "word", "posw", "segw", "g", "b", "mask"] + (["pos"] if with_pos else [])
        eln = helper.make_node("EmbedLayerNormalization", ins, ["e", "mi", "sum"], domain=MS,
                               epsilon=1e-5)
        att = helper.make_node("Attention", ["e", "w", "wb", "mi"], ["y"], domain=MS,
                               num_heads=2)
        g = helper.make_graph(
            [eln, att], "eln", [ivi("ids", [B, S]), ivi("seg", [B, S]), ivi("mask", [B, S])] +
            ([ivi("pos", [B, S])] if with_pos else []),
            [vi("e", [B, S, H]), ivi("mi", [B]), vi("sum", [B, S, H]), vi("y", [B, S, H])],
            [init("word", [V, H]), init("posw", [10, H]), init("segw", [2, H]), init("g", [H]),
             init("b", [H]), init("w", [H, 3 * H]), init("wb", [3 * H])])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset),
                                                helper.make_opsetid(MS, 1)])
        feeds = {"ids": ids, "seg": seg, "mask": mask}
        if with_pos:
            feeds["pos"] = pos
        out.append((f"embed_layer_norm_op{opset}" + ("_pos" if with_pos else ""), m, feeds))
    return out


def run_case(tmp, rng, name, m):
    feeds = {i.name: rand(rng, [d.dim_value for d in i.type.tensor_type.shape.dim])
             for i in m.graph.input}
    equals_onnxruntime(SHARDC, tmp, name, m, feeds, 1e-4, 1e-5)


def main():
    if not SHARDC:
        print("SHARDC not set")
        return 1
    rng = np.random.default_rng(20261202)
    with tempfile.TemporaryDirectory() as tmp:
        for name, m in cases(rng):
            run_case(tmp, rng, name, m)
        for name, m, feeds in embed_cases(rng):
            equals_onnxruntime(SHARDC, tmp, name, m, feeds, 1e-4, 1e-5)
        w = helper.make_tensor("w", T.FLOAT, [2, 5, 6], np.ones(60, np.float32))
        refused_model(SHARDC, tmp, "trans_batch", build("tb", [helper.make_node(
            "FusedMatMul", ["a", "w"], ["y"], domain=MS, transBatchA=1)],
            [("a", [2, 4, 5])], [("y", [2, 4, 6])], [w]), ["FusedMatMul", "transBatchA"])
        g = helper.make_tensor("g", T.FLOAT, [8], np.ones(8, np.float32))
        refused_model(SHARDC, tmp, "mean_output", build("mo", [helper.make_node(
            "SkipLayerNormalization", ["x", "s", "g"], ["y", "mean"], domain=MS)],
            [("x", [2, 8]), ("s", [2, 8])], [("y", [2, 8]), ("mean", [2, 1])], [g]),
            ["SkipLayerNormalization", "output 1", "'mean'"])
        w1 = helper.make_tensor("w1", T.FLOAT, [2, 4, 3], np.ones(24, np.float32))
        w2 = helper.make_tensor("w2", T.FLOAT, [2, 3, 4], np.ones(24, np.float32))
        refused_model(SHARDC, tmp, "moe_fc3", build("fc3", [helper.make_node(
            "MoE", ["x", "r", "w1", "", "w2", "", "w1"], ["y"], domain=MS, k=1,
            activation_type="relu")], [("x", [5, 3]), ("r", [5, 2])], [("y", [5, 3])],
            [w1, w2]), ["MoE", "fc3"])
        refused_model(SHARDC, tmp, "moe_activation", build("act", [helper.make_node(
            "MoE", ["x", "r", "w1", "", "w2"], ["y"], domain=MS, k=1,
            activation_type="tanh")], [("x", [5, 3]), ("r", [5, 2])], [("y", [5, 3])],
            [w1, w2]), ["MoE", "tanh"])
        refused_model(SHARDC, tmp, "unknown", build("u", [helper.make_node("NoSuchOp", ["x"], ["y"], domain=MS)],
                                     [("x", [2])], [("y", [2])]),
               ["NoSuchOp", "com.microsoft"])
    return finish()


if __name__ == "__main__":
    sys.exit(main())
