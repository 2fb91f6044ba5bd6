"""test_conv_igemm.py — convolutions on the CUDA device as our implicit-GEMM kernels.

A GEMM step that carries a 2-D convolution with an im2col kernel runs on
the CUDA device as the codegen's implicit-GEMM kernel for it
(codegen/cuda/cuda.h: sc_cuda_conv; runtime/cuda_device.c): the columns
are computed from the input as the tiles load, and the im2col, padded-copy
and bias kernels are skipped. Checked, on seeded inputs, per model (Conv
then Relu, f32):

  * large: 8 -> 128 channels, 184 x 184, 3 x 3, pad 1, a bias: the large
    tile (128 x 128 x 32, 64 KiB of dynamic shared memory), so the device
    raises the kernel's limit with cuFuncSetAttribute first (the fake
    driver refuses the launch otherwise, as a GPU does; its log shows the
    call);
  * stem: 3 -> 20 channels, 21 x 21, 7 x 7, stride 2, pads 3, 2, 1, 3, a
    bias, batch 2 (K = 147 and M = 20 not multiples of the tile);
  * dilated: 5 -> 12 channels, 3 x 3, dilation 2, pad 2, no bias, batch 3;
  * strided 1 x 1: 16 -> 24 channels, stride 2 (an im2col: yes);
  * 1 x 1: stride 1, no padding: no im2col, so a plain GEMM (none).

For each: SHARDC_CUDA_VERBOSE counts the convolutions run as implicit
GEMMs (1, or 0 for the plain 1 x 1); the outputs agree with the CPU
device's within 1e-5 of the largest |value| and with a float64 numpy
convolution within 1e-4 of it, no NaN; CUDA-graph replays equal stream
launches bit for bit; the fake driver reports no violation (its race
check knows each kernel's extents); SHARDC_CUDA_CONV=im2col runs none as
implicit GEMMs and agrees within 1e-5.

Environment: SHARDC, SC_CUDA_REAL (1: the real driver; the fake driver's
log is not read). Exit 0 on success, 1 on any failure.
"""
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models"))
from checks import check, finish, has_cuda_target, skip_all, within  # noqa: E402

SHARDC = os.environ.get("SHARDC", "shardc")
REAL = os.environ.get("SC_CUDA_REAL") == "1"

# name: batch, C, M, H (= W), kernel, stride, pads (t, l, b, r), dilation, bias, implicit
CASES = {
    "large": (1, 8, 128, 184, 3, 1, (1, 1, 1, 1), 1, True, 1),
    "stem": (2, 3, 20, 21, 7, 2, (3, 2, 1, 3), 1, True, 1),
    "dilated": (3, 5, 12, 15, 3, 1, (2, 2, 2, 2), 2, False, 1),
    "strided_1x1": (2, 16, 24, 13, 1, 2, (0, 0, 0, 0), 1, True, 1),
    "plain_1x1": (2, 16, 24, 13, 1, 1, (0, 0, 0, 0), 1, True, 0),
}


def model(path, case, rng):
    n, c, m, hw, k, s, pads, d, bias, _ = CASES[case]
    w = (rng.standard_normal((m, c, k, k)) / np.sqrt(c * k * k)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    inits = [numpy_helper.from_array(w, "W")] + ([numpy_helper.from_array(b, "B")] if bias else [])
    conv = h.make_node("Conv", ["X", "W"] + (["B"] if bias else []), ["P"],
                       pads=[pads[0], pads[1], pads[2], pads[3]], strides=[s, s],
                       dilations=[d, d], kernel_shape=[k, k])
    g = h.make_graph([conv, h.make_node("Relu", ["P"], ["Y"])], case,
                     [h.make_tensor_value_info("X", T.FLOAT, [n, c, hw, hw])],
                     [h.make_tensor_value_info("Y", T.FLOAT, None)], inits)
    mod = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    mod.ir_version = 8
    onnx.save(mod, path)
    return w, (b if bias else None)


def reference(x, w, b, s, pads, d):
    """Relu(conv2d(x, w) + b) in float64."""
    n, c, hh, ww = x.shape
    m, _, k, _ = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    oh = (hh + pads[0] + pads[2] - (d * (k - 1) + 1)) // s + 1
    ow = (ww + pads[1] + pads[3] - (d * (k - 1) + 1)) // s + 1
    y = np.zeros((n, m, oh, ow))
    for i in range(k):
        for j in range(k):
            patch = xp[:, :, i * d:i * d + s * (oh - 1) + 1:s, j * d:j * d + s * (ow - 1) + 1:s]
            y += np.einsum("nchw,mc->nmhw", patch, w[:, :, i, j].astype(np.float64))
    if b is not None:
        y += b.astype(np.float64)[None, :, None, None]
    return np.maximum(y, 0)


def sh(args, env=None):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([SHARDC] + args, capture_output=True, text=True, timeout=600, env=e)


def implicit_count(stderr):
    m = re.search(r"(\d+) convolutions as implicit GEMMs", stderr)
    return int(m.group(1)) if m else None


def violations(log):
    if REAL:
        return 0
    with open(log) as f:
        found = re.findall(r"summary:.* violations=(\d+)", f.read())
    return int(found[-1]) if found else None


def main():
    if not has_cuda_target(SHARDC):
        return skip_all("this shardc has no cuda target (built without NVRTC)")
    rng = np.random.default_rng(4120)
    with tempfile.TemporaryDirectory() as tmp:
        for case, (n, c, m, hw, k, s, pads, d, bias, want_n) in CASES.items():
            path = os.path.join(tmp, case + ".onnx")
            w, b = model(path, case, rng)
            x = rng.uniform(-1, 1, (n, c, hw, hw)).astype(np.float32)
            xf = os.path.join(tmp, case + ".x.npy")
            np.save(xf, x)
            want = reference(x, w, b, s, pads, d)
            outs = {}
            runs = (("cpu", ["--device", "cpu"], {}),
                    ("graph", ["--device", "cuda", "--no-allow-tf32", "--repeat", "3"], {}),
                    ("stream", ["--device", "cuda", "--no-allow-tf32", "--no-cuda-graph"], {}),
                    ("im2col", ["--device", "cuda", "--no-allow-tf32"], {"SHARDC_CUDA_CONV": "im2col"}))
            for tag, flags, env in runs:
                od = os.path.join(tmp, f"{case}.{tag}")
                log = os.path.join(tmp, f"{case}.{tag}.log")
                e = dict(env)
                if tag != "cpu":
                    e.update({"SHARDC_CUDA_EMU": "0" if REAL else "1",
                              "SHARDC_CUDA_VERBOSE": "1", "SHARDC_FAKE_CUDA_LOG": log})
                r = sh(["run", path, "-q", "--input", "X=" + xf, "--output-dir", od] + flags, e)
                if not check(r.returncode == 0, f"{case} ({tag}): {r.stderr[-400:]}"):
                    continue
                outs[tag] = np.load(os.path.join(od, "Y.npy"))
                within(outs[tag], want, 1e-4, f"{case} ({tag}) against numpy")
                if tag == "cpu":
                    continue
                got_n = implicit_count(r.stderr)
                check(got_n == (0 if tag == "im2col" else want_n),
                      f"{case} ({tag}): {got_n} convolutions as implicit GEMMs")
                check(violations(log) == 0, f"{case} ({tag}): fake driver violations")
                if case == "large" and tag == "graph" and not REAL:
                    with open(log) as f:
                        check(re.search(r"cuFuncSetAttribute sc_conv\d+ max_dynamic_shared=65536",
                                        f.read()) is not None,
                              "large: no cuFuncSetAttribute for its 64 KiB of shared memory")
            for tag in ("graph", "stream", "im2col"):
                if tag in outs and "cpu" in outs:
                    within(outs[tag], outs["cpu"].astype(np.float64), 1e-5,
                          f"{case} ({tag}) against the cpu")
            if "graph" in outs and "stream" in outs:
                check(np.array_equal(outs["graph"], outs["stream"]),
                      f"{case}: graph replay and stream launches differ")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
