"""test_conv_epilogue.py — a direct convolution's pointwise epilogue
kernel runs on each tile's output as the tile ends
(docs/runtime.md#epilogues-on-each-tile).

Models (onnx.helper, seeded random weights and inputs, never zero): a 3x3
convolution + bias + residual add + ReLU,
  - batch 3, 32 channels on 9x9: one tile per image, the epilogue on
    whole images;
  - batch 2, 64 channels on 7x7: both images in a tile of 32 channels
    (a 49-pixel plane), the epilogue on each image's part.
Each equals onnxruntime (rtol 1e-4, atol 1e-4; --no-fuse and fused). On a
CPU with AVX2 (oneDNN runs the convolution directly) the profile
(SHARDC_PROFILE=1) notes "epilogue per tile" on its step, and the outputs
are bit-identical to those with the epilogue run after the last tile
(SHARDC_EPILOGUE_TILES=0, whose profile notes none), with 1 and 2 threads.

Environment: SHARDC. Exit 0 on success, 1 on any failure.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto as T, helper, numpy_helper
from checks import check, equals_onnxruntime, finish, has_avx2

SHARDC = os.environ.get("SHARDC")


def rand(rng, shape, scale=1.0):
    v = rng.uniform(0.05, 1.0, shape) * rng.choice([-1.0, 1.0], shape) * scale
    return v.astype(np.float32)


def model(name, nodes, inputs, output, out_shape, inits):
    g = helper.make_graph(nodes, name, inputs,
                          [helper.make_tensor_value_info(output, T.FLOAT, out_shape)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def conv_model(rng, n, c, hw):
    inits = [numpy_helper.from_array(rand(rng, [c, c, 3, 3], 0.1), "W"),
             numpy_helper.from_array(rand(rng, [c]), "B")]
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["cv"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["cv", "x"], ["s"]),
             helper.make_node("Relu", ["s"], ["y"])]
    shape = [n, c, hw, hw]
    return model("conv", nodes, [helper.make_tensor_value_info("x", T.FLOAT, shape)], "y", shape,
                 inits)


def run(tmp, name, threads, tiles):
    out = os.path.join(tmp, f"{name}_{threads}_{tiles}")
    env = dict(os.environ, SHARDC_PROFILE="1", SHARDC_EPILOGUE_TILES=tiles)
    r = subprocess.run([SHARDC, "run", os.path.join(tmp, name + ".onnx"), "--input",
                        "x=" + os.path.join(tmp, name + "_x.npy"), "-q", "--repeat", "2",
                        "--threads", threads, "--output-dir", out],
                       capture_output=True, text=True, timeout=120, env=env)
    check(r.returncode == 0, f"{name}: exit {r.returncode}: {r.stderr.strip()}")
    return (np.load(os.path.join(out, "y.npy")) if r.returncode == 0 else None), r.stderr


def main():
    if not SHARDC:
        print("SHARDC not set")
        return 1
    rng = np.random.default_rng(20261203)
    with tempfile.TemporaryDirectory() as tmp:
        for name, shape in (("whole_images", [3, 32, 9, 9]), ("image_parts", [2, 64, 7, 7])):
            m = conv_model(rng, *shape[:3])
            x = rand(rng, shape)
            np.save(os.path.join(tmp, name + "_x.npy"), x)
            equals_onnxruntime(SHARDC, tmp, name, m, {"x": x}, 1e-4, 1e-4)
            base, text = run(tmp, name, "1", "0")
            check("epilogue per tile" not in text,
                  f"{name}: SHARDC_EPILOGUE_TILES=0 still runs an epilogue per tile:\n{text}")
            for threads in ("1", "2"):
                got, text = run(tmp, name, threads, "1")
                steps = [ln for ln in text.splitlines() if "epilogue per tile" in ln]
                if has_avx2():
                    check(len(steps) == 1,
                          f"{name}: {len(steps)} steps run their epilogue per tile, want 1:\n"
                          f"{text}")
                if got is not None and base is not None:
                    check(got.tobytes() == base.tobytes(),
                          f"{name}, {threads} threads: per tile and after differ: max |diff| "
                          f"{np.max(np.abs(got - base))}")
            print(f"ok: {name}: the epilogue per tile, bit-identical to after the last tile, "
                  "1 and 2 threads")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
