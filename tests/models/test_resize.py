"""test_resize.py — Resize, and the Upsample and Resize-10 forms the version
adapters turn into it (frontend/onnx_adapters.c), against onnxruntime.

Each case is one node (plus a Relu after it, so the fused path inlines the
Resize into a consumer) built with onnx.helper and checked by onnx.checker,
run by `shardc run` (--no-fuse and fused) and by onnxruntime on the same
seeded inputs (uniform in ±[0.05, 2), never zero); outputs within rtol
1e-5, atol 1e-5, no NaN. The cases cover every mode (nearest with its four
roundings, linear, cubic with cubic_coeff_a), every coordinate
transformation (half_pixel, half_pixel_symmetric, pytorch_half_pixel,
align_corners, asymmetric, tf_crop_and_resize with extrapolation),
up- and down-scaling, scales and sizes, axes, keep_aspect_ratio_policy,
exclude_outside, antialias (linear and cubic downscales), 3-D and 5-D
inputs and a uint8 image (nearest). Refused with a clear error: an
antialiased downscale needing more taps than the lowering builds, linear
mode on an integer input, and both scales and sizes given.

Environment: SHARDC. Exit 0 on success, 1 on any failure.
"""
import os
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto as T, helper, numpy_helper
from checks import equals_onnxruntime, finish, refused_model

SHARDC = os.environ.get("SHARDC")


def rand(rng, shape, dtype=np.float32):
    if dtype == np.uint8:
        return rng.integers(0, 256, shape).astype(np.uint8)
    return (rng.uniform(0.05, 2.0, shape) * rng.choice([-1.0, 1.0], shape)).astype(dtype)


def resize_model(name, shape, opset=19, scales=None, sizes=None, roi=None, elem=T.FLOAT,
                 relu=True, **attrs):
    inits, ins = [], ["x"]
    for nm, v, dt in (("roi", roi, np.float32), ("scales", scales, np.float32),
                      ("sizes", sizes, np.int64)):
        if v is None:
            ins.append("")
        else:
            inits.append(numpy_helper.from_array(np.array(v, dtype=dt), nm))
            ins.append(nm)
    while ins and ins[-1] == "":
        ins.pop()
    if opset == 10:   # Resize-10: (X, scales)
        ins = ["x", "scales"]
    nodes = [helper.make_node("Resize", ins, ["r" if relu else "y"], name="resize", **attrs)]
    if relu:
        nodes.append(helper.make_node("Relu", ["r"], ["y"]))
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", elem, shape)],
                          [helper.make_tensor_value_info("y", elem, [f"o{i}" for i in range(len(shape))])],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def cases():
    c = []
    x4 = [1, 2, 4, 5]
    for nm in ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"):
        c.append((f"nearest_{nm}", resize_model("n", x4, scales=[1, 1, 1.7, 2.3], mode="nearest",
                                                 nearest_mode=nm)))
        c.append((f"nearest_down_{nm}", resize_model("n", x4, scales=[1, 1, 0.6, 0.5],
                                                      mode="nearest", nearest_mode=nm,
                                                      coordinate_transformation_mode="asymmetric")))
    for ct in ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
               "asymmetric"):
        c.append((f"linear_{ct}", resize_model("l", x4, scales=[1, 1, 1.5, 0.6], mode="linear",
                                                coordinate_transformation_mode=ct)))
        c.append((f"cubic_{ct}", resize_model("c", x4, sizes=[1, 2, 7, 3], mode="cubic",
                                               coordinate_transformation_mode=ct)))
    c.append(("cubic_a_exclude", resize_model("c", x4, scales=[1, 1, 2, 2], mode="cubic",
                                              cubic_coeff_a=-0.5, exclude_outside=1)))
    c.append(("tf_crop", resize_model("t", x4, sizes=[1, 2, 3, 6], roi=[0, 0, 0.2, -0.1, 1, 1, 0.9, 1.2],
                                      mode="linear", coordinate_transformation_mode="tf_crop_and_resize",
                                      extrapolation_value=0.25, relu=False)))
    c.append(("axes_sizes", resize_model("a", x4, sizes=[8, 3], axes=[2, 3], mode="linear")))
    c.append(("keep_not_larger", resize_model("k", x4, sizes=[6, 6], axes=[2, 3], mode="nearest",
                                              keep_aspect_ratio_policy="not_larger")))
    c.append(("negative_axes", resize_model("k", x4, sizes=[6, 6], axes=[-2, -1], mode="nearest")))
    c.append(("keep_not_smaller", resize_model("k", x4, sizes=[6, 6], axes=[2, 3], mode="linear",
                                               keep_aspect_ratio_policy="not_smaller")))
    c.append(("antialias_linear", resize_model("aa", [1, 2, 9, 10], scales=[1, 1, 0.6, 0.35],
                                               mode="linear", antialias=1)))
    c.append(("antialias_cubic", resize_model("aa", [1, 2, 9, 10], sizes=[1, 2, 4, 12],
                                              mode="cubic", antialias=1, exclude_outside=1)))
    c.append(("rank3_linear", resize_model("r3", [2, 3, 5], scales=[1, 1, 2.5], mode="linear")))
    c.append(("rank5_nearest", resize_model("r5", [1, 1, 2, 3, 2], scales=[1, 1, 2, 2, 2],
                                             opset=13, mode="nearest")))
    c.append(("uint8_nearest", resize_model("u8", [1, 3, 4, 4], scales=[1, 1, 2, 2], elem=T.UINT8,
                                            relu=False, mode="nearest")))
    c.append(("opset11_sizes", resize_model("o11", x4, opset=11, scales=[], roi=[],
                                            sizes=[1, 2, 6, 9], mode="linear")))
    # the adapters: Resize-10 and Upsample at opsets 9 and 7
    c.append(("resize10", resize_model("r10", x4, opset=10, scales=[1, 1, 2, 3], mode="nearest")))
    for opset in (7, 9):
        for mode in ("nearest", "linear"):
            if opset == 9:
                sc = numpy_helper.from_array(np.array([1, 1, 2, 1.5], np.float32), "scales")
                n = helper.make_node("Upsample", ["x", "scales"], ["y"], mode=mode)
                inits = [sc]
            else:
                n = helper.make_node("Upsample", ["x"], ["y"], mode=mode, scales=[1.0, 1.0, 2.0, 1.5])
                inits = []
            g = helper.make_graph([n], "up", [helper.make_tensor_value_info("x", T.FLOAT, x4)],
                                  [helper.make_tensor_value_info("y", T.FLOAT, ["a", "b", "c", "d"])],
                                  inits)
            m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
            m.ir_version = 7
            onnx.checker.check_model(m)
            c.append((f"upsample{opset}_{mode}", m))
    return c


def main():
    if not SHARDC:
        print("SHARDC not set")
        return 1
    rng = np.random.default_rng(20261203)
    with tempfile.TemporaryDirectory() as tmp:
        for name, m in cases():
            inp = m.graph.input[0]
            shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
            dt = np.uint8 if inp.type.tensor_type.elem_type == T.UINT8 else np.float32
            equals_onnxruntime(SHARDC, tmp, name, m, {"x": rand(rng, shape, dt)}, 1e-5, 1e-5)
        refused_model(SHARDC, tmp, "antialias_wide",
                      resize_model("aa", [1, 1, 64, 4], scales=[1, 1, 0.05, 1], mode="cubic",
                                   antialias=1), "antialiased downscale")
        refused_model(SHARDC, tmp, "linear_uint8",
                      resize_model("lu", [1, 1, 4, 4], scales=[1, 1, 2, 2], mode="linear",
                                   elem=T.UINT8, relu=False), "needs a float input")
        refused_model(SHARDC, tmp, "scales_and_sizes",
                      resize_model("ss", [1, 1, 4, 4], scales=[1, 1, 2, 2], sizes=[1, 1, 8, 8]),
                      "exactly one of scales and sizes")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
