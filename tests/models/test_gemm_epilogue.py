"""test_gemm_epilogue.py — epilogue kernels run on each tile of their
product (docs/runtime.md#epilogues-on-each-tile).

A GEMM step's epilogue kernel that reads the product only at each point's
own element (sc_program_pointwise_after) runs on each tile's rows as the
tile ends, and a direct convolution's pointwise epilogue on each tile's
output, instead of a pass over the whole output afterwards.

Models (onnx.helper, seeded random weights and inputs, never zero):
  - mlp: x [2, 300, 200] -> MatMul + bias -> GELU (the tanh form GPT-2
    exports) -> MatMul + bias + x (a residual): products of 600 x 1000 x
    200 and 600 x 200 x 1000, several row and column tiles, the last ones
    partial;
  - conv: a 3x3 convolution of 32 channels + bias + residual add + ReLU,
    batch 3 on 9x9.
Each equals onnxruntime (rtol 1e-4, atol 1e-4; --no-fuse and fused), the
profile (SHARDC_PROFILE=1) notes "epilogue per tile" on the steps that
have one (both GEMMs of mlp; the convolution when oneDNN runs it
directly, on a CPU with AVX2), and the outputs are bit-identical to those
with the epilogue run after the whole product (SHARDC_EPILOGUE_TILES=0,
whose profile notes none), with 1 and 2 threads.

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


def mlp_model(rng):
    d, f = 200, 1000
    inits = [numpy_helper.from_array(rand(rng, [d, f], 0.1), "W1"),
             numpy_helper.from_array(rand(rng, [f]), "B1"),
             numpy_helper.from_array(rand(rng, [f, d], 0.05), "W2"),
             numpy_helper.from_array(rand(rng, [d]), "B2")]
    for n, v in (("half", 0.5), ("one", 1.0), ("c", 0.044715), ("s", 0.7978845608), ("three", 3.0)):
        inits.append(numpy_helper.from_array(np.array(v, np.float32), n))
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h0"]),
             helper.make_node("Add", ["h0", "B1"], ["h"]),
             # GELU, tanh form: 0.5 h (1 + tanh(s (h + c h^3)))
             helper.make_node("Pow", ["h", "three"], ["h3"]),
             helper.make_node("Mul", ["h3", "c"], ["ch3"]),
             helper.make_node("Add", ["h", "ch3"], ["inner"]),
             helper.make_node("Mul", ["inner", "s"], ["sinner"]),
             helper.make_node("Tanh", ["sinner"], ["t"]),
             helper.make_node("Add", ["t", "one"], ["t1"]),
             helper.make_node("Mul", ["h", "half"], ["hh"]),
             helper.make_node("Mul", ["hh", "t1"], ["g"]),
             helper.make_node("MatMul", ["g", "W2"], ["z0"]),
             helper.make_node("Add", ["z0", "B2"], ["z"]),
             helper.make_node("Add", ["z", "x"], ["y"])]
    return model("mlp", nodes, [helper.make_tensor_value_info("x", T.FLOAT, [2, 300, d])], "y",
                 [2, 300, d], inits)


def conv_model(rng):
    c = 32
    inits = [numpy_helper.from_array(rand(rng, [c, c, 3, 3], 0.1), "W"),
             numpy_helper.from_array(rand(rng, [c]), "B")]
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["cv"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["cv", "x"], ["s"]),
             helper.make_node("Relu", ["s"], ["y"])]
    return model("conv", nodes, [helper.make_tensor_value_info("x", T.FLOAT, [3, c, 9, 9])], "y",
                 [3, c, 9, 9], inits)


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
        for name, m, shape, want_steps in (("mlp", mlp_model(rng), [2, 300, 200], 2),
                                           ("conv", conv_model(rng), [3, 32, 9, 9], 1)):
            x = rand(rng, shape)
            np.save(os.path.join(tmp, name + "_x.npy"), x)
            equals_onnxruntime(SHARDC, tmp, name, m, {"x": x}, 1e-4, 1e-4)
            base, text = run(tmp, name, "1", "0")
            check("epilogue per tile" not in text,
                  f"{name}: SHARDC_EPILOGUE_TILES=0 still runs an epilogue per tile:\n{text}")
            for threads in ("1", "2"):
                got, text = run(tmp, name, threads, "1")
                steps = [ln for ln in text.splitlines() if "epilogue per tile" in ln]
                if name == "mlp" or has_avx2():
                    check(len(steps) == want_steps,
                          f"{name}: {len(steps)} steps run their epilogue per tile, want "
                          f"{want_steps}:\n{text}")
                if got is not None and base is not None:
                    check(got.tobytes() == base.tobytes(),
                          f"{name}, {threads} threads: per tile and after differ: max |diff| "
                          f"{np.max(np.abs(got - base))}")
            print(f"ok: {name}: epilogues per tile, bit-identical to after the product, "
                  "1 and 2 threads")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
