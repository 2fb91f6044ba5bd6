"""test_old_opsets.py — models at opsets 7 to 12, read through the version
adapters (frontend/onnx_adapters.c) and the forms the IR reads at any
opset, against onnxruntime.

Each case is a small model built with onnx.helper at an old opset and
checked by onnx.checker, run by `shardc run` (with --no-fuse and fused) and
by onnxruntime on the same seeded random inputs (uniform in ±[0.05, 2),
never zero), outputs equal within rtol 1e-5, atol 1e-6, no NaN:
  softmax_3d_axis1   Softmax at opset 11 on [2,3,4], axis 1: the input is
                     coerced to 2-D [2,12] (not the per-axis form)
  softmax_default    Softmax at opset 12 on [2,3,5], no axis (default 1)
  logsoftmax_last    LogSoftmax at opset 9, axis 2 of 3
  unsqueeze_squeeze  Unsqueeze/Squeeze with `axes` attributes (opset 11)
  split_reduce       Split with a `split` attribute, ReduceSum with `axes`
                     (opset 11)
  slice_attrs        Slice with starts/ends/axes attributes (opset 9)
  pad_attrs          Pad with pads, mode and value attributes (opset 10,
                     constant value 1.5, and mode reflect)
  clip_attrs         Clip with min/max attributes (opset 10)
  batchnorm_spatial  BatchNormalization with spatial = 1 (opset 7)
  transformer_ish    opset 11: MatMul, Add, Softmax(axis = -1) over
                     [b, h, s, s] scores, Transpose, Reshape, Unsqueeze
                     (the Transpose is read by the GEMM as trans_b)
  depth_space        DepthToSpace DCR and CRD, SpaceToDepth (blocksize 3)
                     and a Relu fused after it (opset 11)
  depth_space_default  SpaceToDepth then DepthToSpace with the default
                     mode, its inverse, and a DepthToSpace CRD of a
                     constant, folded at compile time (opset 13)
  bitshift_uN        BitShift LEFT and RIGHT (opset 11) on uint8, 16, 32 and
                     64 with a broadcast count below the width, exactly
And refused with a clear error (exit 1): BatchNormalization with spatial = 0
(opset 7), opset 6 ("opset 6 is not supported"), and DepthToSpace on 6
channels with blocksize 2.

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


def vi(name, shape):
    return helper.make_tensor_value_info(name, T.FLOAT, shape)


def rand(rng, shape):
    return (rng.uniform(0.05, 2.0, shape) * rng.choice([-1.0, 1.0], shape)).astype(np.float32)


def cases(rng):
    out = []

    def add(name, opset, nodes, inputs, outputs, inits=()):
        g = helper.make_graph(nodes, name, [vi(n, s) for n, s in inputs],
                              [vi(n, s) for n, s in outputs], list(inits))
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = min(m.ir_version, 7)
        onnx.checker.check_model(m)
        out.append((name, m, {n: rand(rng, s) for n, s in inputs}))

    add("softmax_3d_axis1", 11, [helper.make_node("Softmax", ["x"], ["y"], axis=1)],
        [("x", [2, 3, 4])], [("y", [2, 3, 4])])
    add("softmax_default", 12, [helper.make_node("Softmax", ["x"], ["y"])],
        [("x", [2, 3, 5])], [("y", [2, 3, 5])])
    add("logsoftmax_last", 9, [helper.make_node("LogSoftmax", ["x"], ["y"], axis=2)],
        [("x", [2, 3, 5])], [("y", [2, 3, 5])])
    add("unsqueeze_squeeze", 11,
        [helper.make_node("Unsqueeze", ["x"], ["u"], axes=[0, 3]),
         helper.make_node("Relu", ["u"], ["r"]),
         helper.make_node("Squeeze", ["r"], ["y"], axes=[0])],
        [("x", [3, 4])], [("y", [3, 4, 1])])
    add("split_reduce", 11,
        [helper.make_node("Split", ["x"], ["a", "b"], axis=1, split=[2, 4]),
         helper.make_node("ReduceSum", ["a"], ["y"], axes=[1], keepdims=0),
         helper.make_node("Neg", ["b"], ["z"])],
        [("x", [3, 6])], [("y", [3]), ("z", [3, 4])])
    add("slice_attrs", 9,
        [helper.make_node("Slice", ["x"], ["y"], starts=[1, 0], ends=[3, -1], axes=[0, 2])],
        [("x", [4, 3, 5])], [("y", [2, 3, 4])])
    add("pad_attrs", 10,
        [helper.make_node("Pad", ["x"], ["y"], pads=[0, 1, 1, 2], value=1.5),
         helper.make_node("Pad", ["x"], ["z"], pads=[0, 2, 0, 1], mode="reflect")],
        [("x", [2, 4])], [("y", [3, 7]), ("z", [2, 7])])
    add("clip_attrs", 10, [helper.make_node("Clip", ["x"], ["y"], min=-0.5, max=0.75)],
        [("x", [3, 5])], [("y", [3, 5])])
    bn = [helper.make_tensor(n, T.FLOAT, [3], v) for n, v in
          (("s", [1.0, 0.5, 2.0]), ("b", [0.1, -0.2, 0.3]), ("m", [0.05, -0.1, 0.2]),
           ("v", [1.0, 0.25, 4.0]))]
    add("batchnorm_spatial", 7,
        [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], spatial=1,
                          epsilon=1e-3)],
        [("x", [2, 3, 4, 4])], [("y", [2, 3, 4, 4])], bn)
    w = helper.make_tensor("w", T.FLOAT, [8, 8], rand(rng, [8, 8]).ravel())
    shape = helper.make_tensor("shape", T.INT64, [3], [2, 4, 8])
    add("transformer_ish", 11,
        [helper.make_node("MatMul", ["x", "w"], ["q"]),
         helper.make_node("Reshape", ["q", "shape"], ["q3"]),
         helper.make_node("Unsqueeze", ["q3"], ["q4"], axes=[1]),
         helper.make_node("Transpose", ["q4"], ["k4"], perm=[0, 1, 3, 2]),
         helper.make_node("MatMul", ["q4", "k4"], ["s"]),
         helper.make_node("Softmax", ["s"], ["p"], axis=-1),
         helper.make_node("MatMul", ["p", "q4"], ["y"])],
        [("x", [8, 8])], [("y", [2, 1, 4, 8])], [w, shape])
    add("depth_space", 11,
        [helper.make_node("DepthToSpace", ["x"], ["d"], blocksize=2, mode="DCR"),
         helper.make_node("DepthToSpace", ["x"], ["c"], blocksize=2, mode="CRD"),
         helper.make_node("SpaceToDepth", ["z"], ["s"], blocksize=3),
         helper.make_node("Relu", ["s"], ["y"])],
        [("x", [2, 8, 3, 5]), ("z", [2, 3, 6, 9])],
        [("d", [2, 2, 6, 10]), ("c", [2, 2, 6, 10]), ("y", [2, 27, 2, 3])])
    k = helper.make_tensor("k", T.FLOAT, [1, 8, 1, 2], rand(rng, [16]))
    add("depth_space_default", 13,
        [helper.make_node("SpaceToDepth", ["x"], ["s"], blocksize=2),
         helper.make_node("DepthToSpace", ["s"], ["y"], blocksize=2),   # mode DCR: inverse
         helper.make_node("DepthToSpace", ["k"], ["kd"], blocksize=2, mode="CRD")],  # folded
        [("x", [1, 3, 4, 6])], [("y", [1, 3, 4, 6]), ("kd", [1, 2, 2, 4])], [k])
    return out


def main():
    if not SHARDC:
        print("SHARDC not set")
        return 1
    rng = np.random.default_rng(20261202)
    with tempfile.TemporaryDirectory() as tmp:
        for name, m, feeds in cases(rng):
            equals_onnxruntime(SHARDC, tmp, f"{name}_opset{m.opset_import[0].version}", m,
                               feeds, 1e-5, 1e-6)
        bn = [helper.make_tensor(n, T.FLOAT, [3], [1.0, 1.0, 1.0]) for n in "sbmv"]
        g = helper.make_graph([helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"],
                                                ["y"], spatial=0)], "bn0",
                              [vi("x", [2, 3, 4])], [vi("y", [2, 3, 4])], bn)
        refused_model(SHARDC, tmp, "batchnorm_spatial0",
                helper.make_model(g, opset_imports=[helper.make_opsetid("", 7)]), "spatial = 0")
        g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "old",
                              [vi("x", [2])], [vi("y", [2])])
        refused_model(SHARDC, tmp, "opset6", helper.make_model(g, opset_imports=[helper.make_opsetid("", 6)]),
                "opset 6 is not supported")
        g = helper.make_graph([helper.make_node("DepthToSpace", ["x"], ["y"], blocksize=2)], "d2s",
                              [vi("x", [1, 6, 2, 2])], [vi("y", [1, 1, 4, 4])])
        refused_model(SHARDC, tmp, "depth_to_space_channels",
                      helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]),
                      "not a multiple of blocksize")
        for name, m, feeds in bitshift_cases(rng):
            equals_onnxruntime(SHARDC, tmp, name, m, feeds, 0, 0)
    return finish()


def bitshift_cases(rng):
    """BitShift (opset 11, unsigned integers) LEFT and RIGHT with a
    broadcast count, at every width: counts below the width (onnxruntime
    shifts with C++'s operators, which leave wider counts undefined; shardc
    gives 0 there, checked by unit.test_cpu and unit.test_lower)."""
    out = []
    for np_t, onnx_t, bits in ((np.uint8, T.UINT8, 8), (np.uint16, T.UINT16, 16),
                               (np.uint32, T.UINT32, 32), (np.uint64, T.UINT64, 64)):
        x = helper.make_tensor_value_info("x", onnx_t, [3, 5])
        c = helper.make_tensor_value_info("c", onnx_t, [5])
        ys = [helper.make_tensor_value_info(y, onnx_t, [3, 5]) for y in ("l", "r")]
        g = helper.make_graph([helper.make_node("BitShift", ["x", "c"], ["l"], direction="LEFT"),
                               helper.make_node("BitShift", ["x", "c"], ["r"], direction="RIGHT")],
                              "bitshift", [x, c], ys)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)])
        m.ir_version = 7
        onnx.checker.check_model(m)
        hi = np.iinfo(np_t).max
        feeds = {"x": rng.integers(1, hi, (3, 5), dtype=np_t, endpoint=True),
                 "c": rng.integers(0, bits - 1, 5, dtype=np_t, endpoint=True)}
        out.append((f"bitshift_u{bits}_opset11", m, feeds))
    return out


if __name__ == "__main__":
    sys.exit(main())
