"""test_bf16_matmul.py — bf16 matrix products as GEMM steps.

A MatMul or Gemm whose operands are bfloat16, with at least 4,096
multiply-adds, is one GEMM step (codegen/lower_linalg.c), not a kernel: the
devices widen the operands to f32 (a product of two bf16 values is exact
there), sum in f32 and round each result to bf16 once
(runtime/device.h: sc_host_gemm_bf16; cuBLASLt with f32 compute on a GPU).
Checked on seeded inputs, for a MatMul against a constant, a batched
MatMul of two inputs with a broadcast batch, and a Gemm with transB and a
bias (each between Casts from and to f32):

  * the compiled program has a GEMM step for each product (none a kernel);
  * every output element is the float64 product of the bf16 values rounded
    to bf16, or one bf16 unit from it (where the f32 sum rounds the other
    way: at most 5% of the elements); no NaN;
  * 1 and 2 threads give the same bits;
  * on the emulated GPU (SHARDC_CUDA_EMU=1, --device cuda): the same bits
    as the CPU.

Environment: SHARDC. Exit 0 on success, 1 on any failure.
"""
import os
import re
import subprocess
import sys
import tempfile

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper
from checks import check, finish, has_cuda_target, skip_part

SHARDC = os.environ.get("SHARDC", "shardc")
BF16 = ml_dtypes.bfloat16


def bf16(x):
    return np.asarray(x, np.float32).astype(BF16)


def model(path, rng):
    """Y1 = X1 @ W (W [96, 80] const), Y2 = X2 @ X3 ([2, 3, 24, 40] @ [3, 40, 33]),
    Y3 = Gemm(X1[0], V, c, transB=1) (V [50, 96], c [50]); bf16 between Casts."""
    w = bf16(rng.uniform(-1, 1, (96, 80)))
    v = bf16(rng.uniform(-1, 1, (50, 96)))
    c = bf16(rng.uniform(-1, 1, (50,)))
    nodes, inits = [], []
    for name, arr in (("W", w), ("V", v), ("c", c)):
        t = numpy_helper.from_array(arr.astype(np.float32), name + "32")
        inits.append(t)
        nodes.append(h.make_node("Cast", [name + "32"], [name], to=T.BFLOAT16))
    for x in ("X1", "X2", "X3"):
        nodes.append(h.make_node("Cast", [x], [x + "b"], to=T.BFLOAT16))
    nodes += [
        h.make_node("MatMul", ["X1b", "W"], ["P1"]),
        h.make_node("MatMul", ["X2b", "X3b"], ["P2"]),
        h.make_node("Gather", ["X1b", "zero"], ["X1r"], axis=0),
        h.make_node("Gemm", ["X1r", "V", "c"], ["P3"], transB=1),
    ]
    inits.append(numpy_helper.from_array(np.array(0, np.int64), "zero"))
    for i in (1, 2, 3):
        nodes.append(h.make_node("Cast", [f"P{i}"], [f"Y{i}"], to=T.FLOAT))
    g = h.make_graph(
        nodes, "bf16_products",
        [h.make_tensor_value_info("X1", T.FLOAT, [4, 64, 96]),
         h.make_tensor_value_info("X2", T.FLOAT, [2, 3, 24, 40]),
         h.make_tensor_value_info("X3", T.FLOAT, [3, 40, 33])],
        [h.make_tensor_value_info("Y1", T.FLOAT, [4, 64, 80]),
         h.make_tensor_value_info("Y2", T.FLOAT, [2, 3, 24, 33]),
         h.make_tensor_value_info("Y3", T.FLOAT, [64, 50])], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)
    return w, v, c


def reference(x1, x2, x3, w, v, c):
    f = lambda a: np.asarray(a, np.float32).astype(BF16).astype(np.float64)  # noqa: E731
    y1 = f(x1) @ f(w)
    y2 = f(x2) @ f(x3)
    y3 = f(x1[0]) @ f(v).T + f(c)
    return {k: y for k, y in (("Y1", y1), ("Y2", y2), ("Y3", y3))}


def run(work, path, inputs, tag, extra=(), env=None):
    out = os.path.join(work, tag)
    args = [SHARDC, "run", path, "-q", "--output-dir", out] + list(extra)
    for k in inputs:
        args += ["--input", f"{k}={os.path.join(work, k + '.npy')}"]
    e = dict(os.environ)
    e.update(env or {})
    r = subprocess.run(args, capture_output=True, text=True, env=e, timeout=300)
    if not check(r.returncode == 0, f"{tag}: exit {r.returncode}: {r.stderr[-400:]}"):
        return None
    return {k: np.load(os.path.join(out, k + ".npy")) for k in ("Y1", "Y2", "Y3")}


def main():
    rng = np.random.default_rng(20261204)
    with tempfile.TemporaryDirectory() as work:
        path = os.path.join(work, "bf16.onnx")
        w, v, c = model(path, rng)
        inputs = {"X1": rng.uniform(-1, 1, (4, 64, 96)).astype(np.float32),
                  "X2": rng.uniform(-1, 1, (2, 3, 24, 40)).astype(np.float32),
                  "X3": rng.uniform(-1, 1, (3, 40, 33)).astype(np.float32)}
        for k, a in inputs.items():
            np.save(os.path.join(work, k + ".npy"), a)

        r = subprocess.run([SHARDC, "run", path, "--random-inputs", "1", "-q",
                            "--output-dir", os.path.join(work, "p"), "--print-after=program"],
                           capture_output=True, text=True, timeout=300)
        gemms = len(re.findall(r"^s\d+ gemm ", r.stderr, re.M))
        check(r.returncode == 0 and gemms == 3,
              f"the program has {gemms} GEMM steps, want 3 (exit {r.returncode})")

        want = reference(inputs["X1"], inputs["X2"], inputs["X3"], w, v, c)
        one = run(work, path, inputs, "t1", ["--threads", "1"])
        two = run(work, path, inputs, "t2", ["--threads", "2"])
        if one and two:
            for k in want:
                got, ref = one[k].astype(np.float64), want[k]
                rounded = ref.astype(np.float32).astype(BF16).astype(np.float64)
                off = np.abs(got - rounded)
                unit = np.abs(rounded) * 2.0 ** -7
                check(not np.isnan(got).any(), f"{k}: NaN")
                check(bool(np.all(off <= unit + 1e-30)),
                      f"{k}: {int(np.sum(off > unit))} elements more than one bf16 unit off "
                      f"(worst {float(np.max(off / np.maximum(np.abs(rounded), 1e-30))):.3g})")
                check(float(np.mean(off > 0)) <= 0.05,
                      f"{k}: {float(np.mean(off > 0)):.3f} of the elements are not the rounded "
                      "product")
                check(np.array_equal(one[k], two[k]), f"{k}: 1 and 2 threads differ")
        if not has_cuda_target(SHARDC):
            skip_part("the emulated GPU", "this shardc has no cuda target (no NVRTC)")
            return finish()
        emu = run(work, path, inputs, "emu", ["--device", "cuda", "--no-allow-tf32"], {"SHARDC_CUDA_EMU": "1"})
        if emu and one:
            for k in want:
                check(np.array_equal(emu[k], one[k]),
                      f"{k}: the emulated GPU differs from the CPU "
                      f"(max {float(np.max(np.abs(emu[k] - one[k]))):.3g})")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
