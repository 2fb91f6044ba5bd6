"""test_gemm_act.py — a GEMM's activation applied in the product.

When the fused epilogue kernel of a GEMM step computes exactly one
activation of its result, and nothing else reads the product, the step says
so (sc_gemm.act, codegen/program.h; recognised by
codegen/from_graph.c:epilogue_act), and the CUDA device applies it in the
product: cuBLASLt's RELU or GELU epilogue on a GPU, the host GEMM followed
by the activation on the emulated one. The kernel is then not launched.
Checked, on seeded inputs, per model:

  * the compiled program's GEMM step carries the expected activation
    (`--emit=kir`: "act relu->bN", "act gelu_tanh->bN") or none:
      - Gemm -> Relu: relu;
      - Gemm -> Reshape -> GPT-2's tanh GELU spelled out in eight ops: gelu_tanh;
      - MatMul -> Gelu(approximate="tanh") (opset 20): gelu_tanh;
      - MatMul -> Gelu (erf, opset 20): none (cuBLASLt's GELU is the tanh form);
      - the tanh GELU with 0.04 for 0.044715: none;
      - Gemm -> Relu -> Add of another input: none;
      - Gemm -> Relu where the product is also a graph output: none;
  * --device cuda (SHARDC_CUDA_EMU=1, or the real driver with
    SC_CUDA_REAL=1) reports as many "activations in the product"
    (SHARDC_CUDA_VERBOSE) as the program has;
  * the outputs of --device cuda and of the CPU device agree within 1e-5
    of the largest |value|, and both agree with a float64 numpy reference
    within 1e-4 of it; no NaN;
  * a CUDA bundle (`shardc compile --target cuda`) keeps the activation in
    program.json, reserves cuBLASLt's 32 MiB workspace at the top of its
    arena (workspace_bytes, workspace_offset), and runs with the same
    outputs.

Environment: SHARDC, SC_CUDA_REAL. Exit 0 on success, 1 on any failure.
"""
import json
import math
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
M, K, N = 24, 40, 56


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def gelu_erf(x):
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def const(name, v):
    return numpy_helper.from_array(np.asarray(v, np.float32), name)


def spelled_gelu(x, y, c3=0.044715):
    """GPT-2's gelu_new as its ONNX export spells it."""
    nodes = [
        h.make_node("Mul", [x, "half"], ["g0"]),
        h.make_node("Pow", [x, "three"], ["g1"]),
        h.make_node("Mul", [
            "g1", "c3"], ["g2"]),
        h.make_node("Add", [x, "g2"], ["g3"]),
        h.make_node("Mul", ["g3", "s2pi"], ["g4"]),
        h.make_node("Tanh", ["g4"], ["g5"]),
        h.make_node("Add", ["g5", "one"], ["g6"]),
        h.make_node("Mul", ["g0", "g6"], [y]),
    ]
    inits = [const("half", 0.5), const("three", 3.0), const("c3", c3),
             const("s2pi", math.sqrt(2 / math.pi)), const("one", 1.0)]
    return nodes, inits


def model(path, case, rng):
    """The case's model and its float64 reference function of (X, Z)."""
    w = (rng.standard_normal((K, N)) / math.sqrt(K) * 2).astype(np.float32)
    b = rng.standard_normal(N).astype(np.float32)
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")]
    ins = [h.make_tensor_value_info("X", T.FLOAT, [M, K])]
    outs = [h.make_tensor_value_info("Y", T.FLOAT, None)]
    opset = 17
    wd, bd = w.astype(np.float64), b.astype(np.float64)
    gemm = h.make_node("Gemm", ["X", "W", "B"], ["P"])
    if case == "relu":
        nodes = [gemm, h.make_node("Relu", ["P"], ["Y"])]
        ref = lambda x, z: np.maximum(x @ wd + bd, 0)
    elif case in ("gelu_spelled", "gelu_wrong_constant"):
        c3 = 0.044715 if case == "gelu_spelled" else 0.04
        g, gi = spelled_gelu("R", "Y", c3)
        nodes = [gemm, h.make_node("Reshape", ["P", "shape"], ["R"])] + g
        inits += gi + [numpy_helper.from_array(np.array([2, M // 2, N], np.int64), "shape")]

        def ref(x, z, c3=c3):
            p = (x @ wd + bd).reshape(2, M // 2, N)
            return 0.5 * p * (1 + np.tanh(math.sqrt(2 / math.pi) * (p + c3 * p ** 3)))
    elif case in ("gelu_op_tanh", "gelu_op_erf"):
        opset = 20
        tanh = case == "gelu_op_tanh"
        nodes = [h.make_node("MatMul", ["X", "W"], ["P"]),
                 h.make_node("Gelu", ["P"], ["Y"], approximate="tanh" if tanh else "none")]
        ref = lambda x, z: (gelu_tanh if tanh else gelu_erf)(x @ wd)
    elif case == "relu_add":
        ins.append(h.make_tensor_value_info("Z", T.FLOAT, [M, N]))
        nodes = [gemm, h.make_node("Relu", ["P"], ["Q"]), h.make_node("Add", ["Q", "Z"], ["Y"])]
        ref = lambda x, z: np.maximum(x @ wd + bd, 0) + z
    elif case == "relu_product_out":
        outs.append(h.make_tensor_value_info("P", T.FLOAT, None))
        nodes = [gemm, h.make_node("Relu", ["P"], ["Y"])]
        ref = lambda x, z: np.maximum(x @ wd + bd, 0)
    g = h.make_graph(nodes, case, ins, outs, inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.save(m, path)
    return ref


CASES = {  # case: the activation its GEMM step must carry
    "relu": "relu", "gelu_spelled": "gelu_tanh", "gelu_op_tanh": "gelu_tanh",
    "gelu_op_erf": None, "gelu_wrong_constant": None, "relu_add": None,
    "relu_product_out": None,
}


def sh(args, env=None):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([SHARDC] + args, capture_output=True, text=True, timeout=600, env=e)


def cuda_env():
    return {"SHARDC_CUDA_EMU": "0" if REAL else "1", "SHARDC_CUDA_VERBOSE": "1"}


def fused_count(stderr):
    m = re.search(r"\((\d+) activations in the product", stderr)
    return int(m.group(1)) if m else None


def main():
    if not has_cuda_target(SHARDC):
        return skip_all("this shardc has no cuda target (built without NVRTC)")
    rng = np.random.default_rng(20261204)
    with tempfile.TemporaryDirectory() as tmp:
        for case, want_act in CASES.items():
            path = os.path.join(tmp, case + ".onnx")
            ref = model(path, case, rng)
            x = rng.uniform(-2, 2, (M, K)).astype(np.float32)
            z = rng.uniform(-1, 1, (M, N)).astype(np.float32)
            args = ["--input", "X=" + os.path.join(tmp, case + ".x.npy")]
            np.save(os.path.join(tmp, case + ".x.npy"), x)
            if case == "relu_add":
                np.save(os.path.join(tmp, "z.npy"), z)
                args += ["--input", "Z=" + os.path.join(tmp, "z.npy")]
            r = sh(["compile", path, "--emit=kir"])
            if not check(r.returncode == 0, f"{case}: compile: {r.stderr[-300:]}"):
                continue
            gemms = [ln for ln in r.stdout.splitlines() if re.match(r"s\d+ gemm ", ln)]
            acts = [re.search(r" act (\w+)->b\d+", ln) for ln in gemms]
            got_acts = [a.group(1) for a in acts if a]
            check(len(gemms) == 1, f"{case}: {len(gemms)} GEMM steps, want 1")
            check(got_acts == ([want_act] if want_act else []),
                  f"{case}: activations {got_acts}, want {want_act}")
            want = ref(x.astype(np.float64), z.astype(np.float64))
            outs = {}
            for dev in ("cpu", "cuda"):
                od = os.path.join(tmp, f"{case}.{dev}")
                r = sh(["run", path, "-q", "--device", dev, "--no-allow-tf32", "--output-dir", od] + args,
                       cuda_env() if dev == "cuda" else None)
                if not check(r.returncode == 0, f"{case} on {dev}: {r.stderr[-400:]}"):
                    continue
                outs[dev] = np.load(os.path.join(od, "Y.npy"))
                within(outs[dev], want, 1e-4, f"{case} on {dev} against numpy")
                if dev == "cuda":
                    n = fused_count(r.stderr)
                    check(n == (1 if want_act else 0),
                          f"{case}: {n} activations in the product, want "
                          f"{1 if want_act else 0}")
            if len(outs) == 2:
                within(outs["cuda"], outs["cpu"].astype(np.float64), 1e-5,
                      f"{case}: cuda against cpu")
            if case != "gelu_spelled" or "cpu" not in outs:
                continue
            # a CUDA bundle keeps the activation and runs it
            bdir = os.path.join(tmp, "bundle")
            r = sh(["compile", path, "--target", "cuda", "-o", bdir])
            if not check(r.returncode == 0, f"bundle: {r.stderr[-300:]}"):
                continue
            with open(os.path.join(bdir, "program.json")) as f:
                prog = json.load(f)
            steps = [s for s in prog["steps"] if s.get("kind") == "gemm"]
            check(len(steps) == 1 and steps[0]["gemm"].get("act") == "gelu_tanh",
                  f"bundle: GEMM steps {[s['gemm'].get('act') for s in steps]}")
            # cuBLASLt's workspace is part of the plan: 32 MiB at the arena's top
            ws, wo = prog.get("workspace_bytes"), prog.get("workspace_offset")
            check(ws == 32 << 20 and wo is not None and wo + ws == prog["arena_bytes"],
                  f"bundle: workspace {ws} at {wo} in an arena of {prog['arena_bytes']}")
            od = os.path.join(tmp, "bundle.out")
            r = sh(["run", bdir, "-q", "--device", "cuda", "--no-allow-tf32", "--output-dir", od] + args,
                   cuda_env())
            if check(r.returncode == 0, f"bundle run: {r.stderr[-400:]}"):
                check(fused_count(r.stderr) == 1, "bundle run: activation not in the product")
                within(np.load(os.path.join(od, "Y.npy")), outs["cpu"].astype(np.float64),
                      1e-5, "bundle on cuda against cpu")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
