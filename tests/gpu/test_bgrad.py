"""test_bgrad.py — a bias gradient computed in the weight gradient's product.

In the backward pass of Y = X·W + b, the bias gradient db (a ReduceSum of
dY over every axis but the last) is the sum over k of dY, an operand of the
weight gradient's product dW = Xᵀ·dY. The compiler makes that ReduceSum the
GEMM step's bias-gradient kernel (sc_gemm.bgrad, bgrad_kernel,
codegen/program.h; found by codegen/from_graph.c:take_bias_grad), beside
the step's own epilogue kernel where it has one (bf16: the cast of dW to
f32), and the CUDA device computes db in the product: cuBLASLt's BGRADA
where dY is our B (cuBLAS's A), BGRADB where it is our transposed A; that
kernel is then not launched. Checked, on
seeded random data, with a model whose first layer is a Gemm (transB=1, the
weights [out, in]: dWᵀ = dYᵀ·X, dY our A) on the rows of a [batch, 4, 32]
input reshaped to [4·batch, 32], and whose second is a MatMul + Add on the
[batch, 4, 64] activations (dW = Xᵀ·dY, dY our B, reshaped from [batch, 4,
32], its ReduceSum over axes 0 and 1):

  * fp32 training program (`--emit=kir`): two GEMM steps carry
    "bgrad a->bN kM kM_reduce_sum" and "bgrad b->bN ...", and no
    reduce_sum kernel is a step of its own; bf16: the Gemm layer's, beside
    the epilogue kernel that casts dW to f32 ("bgrad a"), while the MatMul
    + Add layer's sum stays a step (its bias is added in f32 after the
    product's cast, so the sum reads f32 dY and the product its bf16 cast);
  * 4 AdamW steps with mse, fp32 and bf16, on --device cuda
    (SHARDC_CUDA_EMU=1, or the real driver with SC_CUDA_REAL=1) report "2
    bias gradients in the product" (bf16: 1) (SHARDC_CUDA_VERBOSE) with the host
    engine and with SHARDC_CUDA_GEMM=cublaslt (the engine's cuBLASLt plan
    on the emulated library's BGRADA/BGRADB, the sum in D's type: bf16 in
    a bf16 step), and their losses and gradient norms are finite and
    within 2e-5 (fp32) or 2e-3 (bf16, as gpu.test_gemm_act) of the CPU's,
    which runs the ReduceSum kernel;
  * a cuda training bundle (`shardc compile --train --target cuda`, its
    kernels compiled by NVRTC to CUBIN and PTX) keeps both in
    program.json ("bgrad", "bgrad_out", "bgrad_kernel") and trains the same 4 steps on the
    CUDA device through the cuBLASLt plan, within 2e-5 of the CPU's.

Environment: SHARDC, SC_CUDA_REAL. Exit 0 on success, 1 on any failure.
"""
import glob
import json
import math
import os
import re
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import check, finish, has_cuda_target, skip_all  # noqa: E402

from test_gemm_act import ENGINES, SHARDC, cuda_env, sh  # noqa: E402

K, N, S = 32, 64, 4
TOL = 2e-5
TOL_BF16 = 2e-3  # as gpu.test_gemm_act's bf16 training


def bgrad_count(stderr):
    m = re.search(r"(\d+) bias gradients in the product", stderr)
    return int(m.group(1)) if m else None


def model(path, rng):
    """Reshape -> Gemm(transB=1) + bias -> Relu -> Reshape -> MatMul -> Add."""
    w1 = (rng.standard_normal((N, K)) / 6).astype(np.float32)
    b1 = (rng.standard_normal(N) / 4).astype(np.float32)
    w2 = (rng.standard_normal((N, K)) / 8).astype(np.float32)
    b2 = (rng.standard_normal(K) / 4).astype(np.float32)
    inits = [numpy_helper.from_array(a, nm) for a, nm in (
        (w1, "W1"), (b1, "B1"), (w2, "W2"), (b2, "B2"),
        (np.array([-1, K], np.int64), "S1"), (np.array([-1, S, N], np.int64), "S2"))]
    nodes = [h.make_node("Reshape", ["X", "S1"], ["X2"]),
             h.make_node("Gemm", ["X2", "W1", "B1"], ["Q"], transB=1),
             h.make_node("Relu", ["Q"], ["G"]),
             h.make_node("Reshape", ["G", "S2"], ["G3"]),
             h.make_node("MatMul", ["G3", "W2"], ["P"]),
             h.make_node("Add", ["P", "B2"], ["Y"])]
    g = h.make_graph(nodes, "linear_bias",
                     [h.make_tensor_value_info("X", T.FLOAT, ["batch", S, K])],
                     [h.make_tensor_value_info("Y", T.FLOAT, ["batch", S, K])], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 20)])
    m.ir_version = 9
    onnx.save(m, path)


def read_log(path):
    with open(path) as f:
        return [json.loads(ln) for ln in f if ln.strip()]


def against_cpu(tag, log, cpu, tol=TOL):
    if not check(len(log) == 4 == len(cpu), f"{tag}: {len(log)} steps, cpu {len(cpu)}"):
        return
    worst = 0.0
    for a, b in zip(cpu, log):
        for key in ("loss", "grad_norm"):
            x, y = a[key], b[key]
            check(math.isfinite(y) and abs(x - y) <= tol * abs(x),
                  f"{tag}: step {a['step']} {key} {y} vs cpu {x}")
            worst = max(worst, abs(x - y) / abs(x))
    print(f"{tag}: largest relative difference from the cpu {worst:.2e}")


def main():
    if not has_cuda_target(SHARDC):
        return skip_all("this shardc has no cuda target (built without NVRTC)")
    rng = np.random.default_rng(20261206)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "linear_bias.onnx")
        model(path, rng)
        xs, ts = os.path.join(tmp, "x.npy"), os.path.join(tmp, "t.npy")
        np.save(xs, rng.standard_normal((16, S, K)).astype(np.float32))
        np.save(ts, rng.standard_normal((16, S, K)).astype(np.float32))
        data = ["--data", "X=" + xs, "--targets", ts]
        opts = ["--loss", "mse", "--dim", "batch=4", "--optimizer", "adamw"]
        for prec, want in (("fp32", ["a", "b"]), ("bf16", ["a"])):
            r = sh(["compile", path, "--train", "--emit=kir", "--precision", prec, "-o",
                    os.path.join(tmp, "k." + prec)] + opts)
            if not check(r.returncode == 0, f"{prec}: compile: {r.stderr[-300:]}"):
                continue
            steps = re.findall(r"^s\d+ .*$", r.stdout, re.M)
            got = sorted(re.findall(r" bgrad (a|b)->b\d+ k\d+ k\d+_reduce_sum ", "\n".join(steps)))
            alone = [s for s in steps if re.match(r"s\d+ kernel k\d+ k\d+_reduce_sum ", s)]
            print(f"{prec}: {len(steps)} steps, bias gradients in GEMM steps {got}, "
                  f"reduce_sum steps {len(alone)}")
            check(got == want, f"{prec}: GEMM steps with a bias gradient {got}, want {want}")
            check(len(alone) == 2 - len(want),
                  f"{prec}: {len(alone)} reduce_sum kernel steps, want {2 - len(want)}")
        logs = {}
        for prec in ("fp32", "bf16"):
            for dev, env in [("cpu", None)] + [("cuda", e) for e in ENGINES]:
                tag = prec + " " + dev + ("-" + env["SHARDC_CUDA_GEMM"] if env else "")
                lj = os.path.join(tmp, f"train.{prec}.{dev}.{len(logs)}.jsonl")
                r = sh(["train", path, "--steps", "4", "--log-json", lj, "-q", "--device", dev,
                        "--no-allow-tf32", "--precision", prec] + data + opts,
                       dict(cuda_env(), **env) if dev == "cuda" else None)
                if not check(r.returncode == 0, f"train on {tag}: {r.stderr[-400:]}"):
                    continue
                logs[tag] = read_log(lj)
                want = 2 if prec == "fp32" else 1
                if dev == "cuda":
                    check(bgrad_count(r.stderr) == want,
                          f"train on {tag}: {bgrad_count(r.stderr)} bias gradients in the "
                          f"product, want {want}")
        for tag, log in logs.items():
            prec = tag.split()[0]
            if tag != prec + " cpu" and prec + " cpu" in logs:
                against_cpu("train on " + tag, log, logs[prec + " cpu"],
                            TOL if prec == "fp32" else TOL_BF16)
        # a cuda training bundle: NVRTC's CUBIN and PTX, bgrad in program.json
        bdir = os.path.join(tmp, "bundle")
        r = sh(["compile", path, "--train", "--target", "cuda", "-o", bdir] + opts)
        if check(r.returncode == 0, f"bundle: {r.stderr[-300:]}"):
            cubins = glob.glob(os.path.join(bdir, "*.cubin"))
            ptx = glob.glob(os.path.join(bdir, "*.ptx"))
            check(cubins and ptx, f"bundle: CUBINs {cubins}, PTX {ptx}")
            with open(os.path.join(bdir, "program.json")) as f:
                prog = json.load(f)
            sides = sorted(s["gemm"]["bgrad"] for s in prog["steps"]
                           if s.get("kind") == "gemm" and "bgrad" in s["gemm"])
            check(sides == ["a", "b"], f"bundle: bias gradients {sides}")
            kern = [s["gemm"].get("bgrad_kernel") for s in prog["steps"]
                    if s.get("kind") == "gemm" and "bgrad" in s["gemm"]]
            check(all(isinstance(k, int) and k >= 0 for k in kern) and len(kern) == 2,
                  f"bundle: bias-gradient kernels {kern}")
            lj = os.path.join(tmp, "train.bundle.jsonl")
            r = sh(["train", bdir, "--steps", "4", "--log-json", lj, "-q", "--device", "cuda",
                    "--no-allow-tf32"] + data, dict(cuda_env(), **ENGINES[-1]))
            if check(r.returncode == 0, f"bundle train: {r.stderr[-400:]}"):
                check(bgrad_count(r.stderr) == 2,
                      f"bundle train: {bgrad_count(r.stderr)} bias gradients in the product")
                if "fp32 cpu" in logs:
                    against_cpu("bundle train on cuda", read_log(lj), logs["fp32 cpu"])
    return finish()


if __name__ == "__main__":
    sys.exit(main())
