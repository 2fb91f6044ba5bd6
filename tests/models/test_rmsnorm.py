"""test_rmsnorm.py — RMSNormalization (opset 23) end to end through `shardc run`.

Builds small opset-23 models with onnx.helper (onnxruntime may not run
RMSNormalization, so the reference is numpy, in float64):
    Y = X / sqrt(mean(X^2 over axes >= axis) + epsilon) * scale
For f32 X of shape [2,3,4,8] with axis -1 (scale [8]), axis -2 (scale
[4,1], epsilon 0.01) and axis 1 (scale [3,4,8]), and an f16 case (axis -1):
seeded random inputs in [-2,-0.05] U [0.05,2] (never zeros), run with
--no-fuse and fused; the output has X's dtype and shape, no NaN, and matches
within rtol 1e-5, atol 1e-6 (f16: rtol 2e-3, atol 2e-3, an f16 ulp). Also an
opset-22 model is rejected (exit 1) naming the opset.

Environment: SHARDC (the binary). Exit 0 on success, 1 on any failure.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper
from checks import check, failures

SHARDC = os.environ.get("SHARDC")


def model(shape, sshape, ttype, attrs, opset=23):
    x = helper.make_tensor_value_info("x", ttype, shape)
    s = helper.make_tensor_value_info("s", ttype, sshape)
    y = helper.make_tensor_value_info("y", ttype, shape)
    node = helper.make_node("RMSNormalization", ["x", "s"], ["y"], **attrs)
    g = helper.make_graph([node], "rms", [x, s], [y])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def reference(x, s, axis, eps):
    x64, s64 = x.astype(np.float64), s.astype(np.float64)
    axes = tuple(range(axis % x.ndim, x.ndim))
    ms = np.mean(x64 * x64, axis=axes, keepdims=True)
    return x64 / np.sqrt(ms + eps) * s64


def rand(rng, shape, dt):
    v = rng.uniform(0.05, 2.0, size=shape) * rng.choice([-1.0, 1.0], size=shape)
    return v.astype(dt)


def run_case(tmp, name, shape, sshape, dt, attrs, seed):
    ttype = TensorProto.FLOAT if dt == np.float32 else TensorProto.FLOAT16
    path = os.path.join(tmp, name + ".onnx")
    onnx.save(model(shape, sshape, ttype, attrs), path)
    rng = np.random.default_rng(seed)
    x, s = rand(rng, shape, dt), rand(rng, sshape, dt)
    np.save(os.path.join(tmp, name + "_x.npy"), x)
    np.save(os.path.join(tmp, name + "_s.npy"), s)
    want = reference(x, s, attrs.get("axis", -1), attrs.get("epsilon", 1e-5))
    rtol, atol = (1e-5, 1e-6) if dt == np.float32 else (2e-3, 2e-3)
    for extra in (["--no-fuse"], []):
        out = os.path.join(tmp, name + "_out" + "".join(extra))
        r = subprocess.run([SHARDC, "run", path, "--input", f"x={tmp}/{name}_x.npy",
                            "--input", f"s={tmp}/{name}_s.npy", "--output-dir", out] + extra,
                           capture_output=True, text=True, timeout=120)
        what = f"{name} {' '.join(extra)}".strip()
        if not check(r.returncode == 0, f"{what}: exit {r.returncode}: {r.stderr.strip()}"):
            continue
        got = np.load(os.path.join(out, "y.npy"))
        check(got.dtype == dt and got.shape == tuple(shape),
              f"{what}: got {got.dtype}{got.shape}, want {np.dtype(dt)}{tuple(shape)}")
        check(not np.isnan(got).any(), f"{what}: NaN in the output")
        g64 = got.astype(np.float64)
        ok = np.allclose(g64, want, rtol=rtol, atol=atol)
        check(ok, f"{what}: max |diff| {np.max(np.abs(g64 - want)):.3g}")


def main():
    if not SHARDC:
        print("SHARDC not set")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        f32, f16 = np.float32, np.float16
        run_case(tmp, "last", [2, 3, 4, 8], [8], f32, {}, 1)
        run_case(tmp, "axis_m2", [2, 3, 4, 8], [4, 1], f32, {"axis": -2, "epsilon": 0.01}, 2)
        run_case(tmp, "axis1", [2, 3, 4, 8], [3, 4, 8], f32, {"axis": 1}, 3)
        run_case(tmp, "half", [3, 16], [16], f16, {"axis": -1}, 4)
        # opset 22: the op does not exist yet
        path = os.path.join(tmp, "old.onnx")
        onnx.save(model([2, 8], [8], TensorProto.FLOAT, {}, opset=22), path)
        r = subprocess.run([SHARDC, "run", path, "--random-inputs", "1", "--output-dir",
                            os.path.join(tmp, "old_out")],
                           capture_output=True, text=True, timeout=120)
        check(r.returncode == 1 and "23" in r.stderr,
              f"opset 22: exit {r.returncode}, stderr {r.stderr.strip()!r}")
    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
