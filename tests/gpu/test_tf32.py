"""test_tf32.py — f32 products with TF32 operands on the CUDA device
(`--allow-tf32`, the default; docs/cuda-backend.md, "GEMM engines").

On the emulated GPU (SHARDC_CUDA_EMU=1; the real driver with SC_CUDA_REAL=1):

  * a MatMul [64, 300] x [300, 96] of seeded normal values run by default,
    with --allow-tf32 and with --no-allow-tf32 (SHARDC_CUDA_VERBOSE: "1 f32
    products with TF32 operands", then 0):
    - full f32 is within 1e-5 of numpy's float64 product (of its largest
      magnitude);
    - the default and --allow-tf32 give the same bits;
    - emulated, the default is within 1e-5 of the float64 product of the
      operands rounded to TF32 (to nearest, ties away from zero: PTX's
      cvt.rna.tf32.f32), and differs from the exact product by more than
      1e-4 (measured 2.6e-4: TF32 keeps 10 mantissa bits, a relative 2^-11
      per operand) and by at most 2^-10; on a GPU (cuBLASLt's
      CUBLAS_COMPUTE_32F_FAST_TF32, whose kernels may round otherwise)
      within 2^-10 of the exact product;
  * a bf16 MatMul is not affected (0 products with TF32 operands, the same
    bits with and without);
  * training the MLP sample 4 steps (AdamW) by default counts its f32
    products with TF32 operands (every GEMM step of the step), its losses
    are finite and within 1e-2 of --no-allow-tf32's, and differ from them
    (TF32 was used: measured up to 1.5e-5); --no-allow-tf32's are within 2e-5 of
    the CPU's.

Environment: SHARDC, SC_CUDA_REAL. Exit 0 on success, 1 on a failure, 77
where this shardc has no cuda target.
"""
import json
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
from checks import check, finish, has_cuda_target, skip_all  # noqa: E402

SHARDC = os.environ.get("SHARDC", "shardc")
REAL = os.environ.get("SC_CUDA_REAL") == "1"
SAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "samples")
M, K, N = 64, 300, 96


def sh(args, env=None):
    e = dict(os.environ, SHARDC_CUDA_EMU="0" if REAL else "1", SHARDC_CUDA_VERBOSE="1")
    e.update(env or {})
    return subprocess.run([SHARDC] + args, capture_output=True, text=True, timeout=600, env=e)


def as_tf32(v):
    """v (f32) rounded to TF32: to nearest, ties away from zero, as float64."""
    u = np.asarray(v, np.float32).view(np.uint32)
    return ((u + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)


def tf32_count(stderr):
    m = re.search(r"(\d+) f32 products with TF32 operands", stderr)
    return int(m.group(1)) if m else None


def matmul_model(path, w, bf16):
    """Y = X @ W, W a constant; with bf16, X and W cast to bf16 and Y back."""
    x = h.make_tensor_value_info("X", T.FLOAT, [M, K])
    y = h.make_tensor_value_info("Y", T.FLOAT, [M, N])
    nodes, a, b = [], "X", "W"
    if bf16:
        nodes += [h.make_node("Cast", ["X"], ["Xh"], to=T.BFLOAT16),
                  h.make_node("Cast", ["W"], ["Wh"], to=T.BFLOAT16)]
        a, b = "Xh", "Wh"
    nodes.append(h.make_node("MatMul", [a, b], ["P" if bf16 else "Y"]))
    if bf16:
        nodes.append(h.make_node("Cast", ["P"], ["Y"], to=T.FLOAT))
    g = h.make_graph(nodes, "tf32", [x], [y], [numpy_helper.from_array(w, "W")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)


def run_matmul(tmp, path, xfile, tag, flags):
    out = os.path.join(tmp, tag)
    r = sh(["run", path, "--input", "X=" + xfile, "-q", "--device", "cuda", "--output-dir", out]
           + flags)
    if not check(r.returncode == 0, f"{tag}: exit {r.returncode}: {r.stderr[-400:]}"):
        return None, None
    return np.load(os.path.join(out, "Y.npy")), tf32_count(r.stderr)


def matmul_checks(tmp, rng):
    x = rng.standard_normal((M, K)).astype(np.float32)
    w = rng.standard_normal((K, N)).astype(np.float32)
    xfile = os.path.join(tmp, "x.npy")
    np.save(xfile, x)
    path = os.path.join(tmp, "mm.onnx")
    matmul_model(path, w, False)
    exact = x.astype(np.float64) @ w.astype(np.float64)
    rounded = as_tf32(x) @ as_tf32(w)
    scale = float(np.max(np.abs(exact)))
    runs = {}
    for tag, flags in (("default", []), ("allow", ["--allow-tf32"]),
                       ("full", ["--no-allow-tf32"])):
        runs[tag] = run_matmul(tmp, path, xfile, tag, flags)
    if any(v[0] is None for v in runs.values()):
        return
    (dflt, n_dflt), (allow, n_allow), (full, n_full) = runs["default"], runs["allow"], \
        runs["full"]
    check(n_dflt == 1 and n_allow == 1 and n_full == 0,
          f"products with TF32 operands: default {n_dflt}, --allow-tf32 {n_allow}, "
          f"--no-allow-tf32 {n_full} (want 1, 1, 0)")
    check(not np.isnan(dflt).any() and not np.isnan(full).any(), "NaN in a product")
    e_full = float(np.max(np.abs(full - exact))) / scale
    check(e_full <= 1e-5, f"--no-allow-tf32 against the exact product: {e_full:.2e} (1e-5)")
    check(np.array_equal(dflt.view(np.uint32), allow.view(np.uint32)),
          "the default and --allow-tf32 differ")
    e_exact = float(np.max(np.abs(dflt - exact))) / scale
    e_round = float(np.max(np.abs(dflt - rounded))) / scale
    print(f"matmul {M}x{K}x{N}: TF32 {e_exact:.2e} from the exact product, {e_round:.2e} from "
          f"the TF32-rounded operands' product; full f32 {e_full:.2e}")
    check(e_exact <= 2.0 ** -10, f"TF32 against the exact product: {e_exact:.2e} (2^-10)")
    if not REAL:  # the emulation's rounding; a GPU's kernels may round otherwise
        check(e_round <= 1e-5, f"TF32 against the rounded operands' product: {e_round:.2e} "
              "(1e-5)")
        check(e_exact > 1e-4, f"TF32 only {e_exact:.2e} from the exact product (want > 1e-4: "
              "the operands were not rounded)")
    # bf16 products are not affected
    bpath = os.path.join(tmp, "mm16.onnx")
    matmul_model(bpath, w, True)
    b_dflt, nb = run_matmul(tmp, bpath, xfile, "bf16", [])
    b_full, _ = run_matmul(tmp, bpath, xfile, "bf16-full", ["--no-allow-tf32"])
    if b_dflt is not None and b_full is not None:
        check(nb == 0, f"bf16 MatMul: {nb} products with TF32 operands (want 0)")
        check(np.array_equal(b_dflt.view(np.uint32), b_full.view(np.uint32)),
              "bf16 MatMul: --no-allow-tf32 changed its bits")


def losses(path):
    with open(path) as f:
        return [json.loads(ln)["loss"] for ln in f if ln.strip()]


def training_checks(tmp, rng):
    x, lab = os.path.join(tmp, "tx.npy"), os.path.join(tmp, "tlab.npy")
    np.save(x, rng.standard_normal((16, 64)).astype(np.float32))
    np.save(lab, rng.integers(0, 10, 16).astype(np.int64))
    base = ["train", os.path.join(SAMPLES, "mlp.onnx"), "--data", "x=" + x, "--labels", lab,
            "--dim", "batch=8", "--optimizer", "adamw", "--steps", "4", "-q"]
    got, counts = {}, {}
    for tag, flags in (("cpu", ["--device", "cpu"]), ("tf32", ["--device", "cuda"]),
                       ("full", ["--device", "cuda", "--no-allow-tf32"])):
        lj = os.path.join(tmp, f"train.{tag}.jsonl")
        r = sh(base + flags + ["--log-json", lj])
        if not check(r.returncode == 0, f"train ({tag}): exit {r.returncode}: {r.stderr[-400:]}"):
            return
        got[tag] = np.array(losses(lj), np.float64)
        counts[tag] = tf32_count(r.stderr)
    check(counts["tf32"] is not None and counts["tf32"] > 0 and counts["full"] == 0,
          f"training: products with TF32 operands {counts['tf32']}, with --no-allow-tf32 "
          f"{counts['full']} (want > 0, 0)")
    check(len(got["tf32"]) == 4 and np.isfinite(got["tf32"]).all(),
          f"training losses with TF32 {got['tf32']}")
    rel = np.abs(got["tf32"] - got["full"]) / np.abs(got["full"])
    print(f"training losses: TF32 {got['tf32'].tolist()}, full f32 {got['full'].tolist()}, "
          f"relative difference up to {float(rel.max()):.2e}")
    check(float(rel.max()) <= 1e-2, f"TF32 losses {rel.max():.2e} from full f32's (1e-2)")
    if not REAL:
        check(float(rel.max()) > 0, "TF32 losses equal full f32's bit for bit: not rounded")
    rc = np.abs(got["full"] - got["cpu"]) / np.abs(got["cpu"])
    check(float(rc.max()) <= 2e-5, f"--no-allow-tf32 losses {rc.max():.2e} from the CPU's (2e-5)")


def main():
    if not has_cuda_target(SHARDC):
        return skip_all("this shardc has no cuda target (built without NVRTC)")
    rng = np.random.default_rng(20261206)
    with tempfile.TemporaryDirectory() as tmp:
        matmul_checks(tmp, rng)
        training_checks(tmp, rng)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
