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
      - Gemm -> Relu where the product is also a graph output: none (no
        epilogue gives back ReLU's input: RELU_AUX keeps a bit mask);
      - Gemm -> tanh Gelu where the product is also a graph output:
        gelu_tanh with "aux" (cuBLASLt's GELU_AUX writes C as its aux);
      - compiled only: MatMul -> Cast(bf16) -> Cast(f32) -> tanh Gelu:
        none (the product rounded to bf16 inside the kernel is not what
        cuBLASLt's GELU reads), MatMul -> Identity -> tanh Gelu: gelu_tanh;
  * --device cuda (SHARDC_CUDA_EMU=1, or the real driver with
    SC_CUDA_REAL=1) reports as many "activations in the product"
    (SHARDC_CUDA_VERBOSE) as the program has, and as many of them keeping
    the pre-activation as have "aux"; on the emulated GPU also with
    SHARDC_CUDA_GEMM=cublaslt (every product through the emulated
    cuBLASLt's epilogues, so that the engine's cuBLASLt plan runs);
  * the outputs of --device cuda and of the CPU device agree within 1e-5
    of the largest |value|, and both agree with a float64 numpy reference
    within 1e-4 of it; no NaN;
  * a CUDA bundle (`shardc compile --target cuda`) of gelu_spelled and of
    gelu_product_out keeps the activation (and act_aux) in program.json,
    reserves cuBLASLt's 32 MiB workspace at the top of its arena
    (workspace_bytes, workspace_offset), and runs with the same outputs;
  * training (GELU_AUX, DGELU): an MLP Gemm -> Gelu(approximate="tanh") ->
    Gemm trained 4 AdamW steps with mse, fp32 and bf16: its forward's
    first GEMM step carries "act gelu_tanh->bN aux" (the backward reads the
    pre-activation) and, in fp32, the backward's product dG = dY·W2ᵀ
    and, in both precisions, the backward's product dG = dY·W2ᵀ carries
    "act dgelu_tanh->bN in=bM" (dG · gelu'(Q), Q that pre-activation:
    cuBLASLt's DGELU; in bf16 the Gelu's gradient computes in f32 with f32
    constants, as autocast's opmath, so its formula is DGELU's too);
    --device cuda counts 2 activations in the product,
    1 keeping the pre-activation, with the host engine and with
    SHARDC_CUDA_GEMM=cublaslt; losses and
    gradient norms finite and within 2e-5 (fp32) or 2e-3 (bf16: cuBLASLt's
    GELU reads the f32 sum, the kernel the bf16-rounded product) of the
    CPU's, which runs the activation kernel (the unfused path);
  * GPT-2 (samples/gpt2.onnx) trained in bf16: its spelled-out GELU is one
    Gelu(approximate="tanh") node before autodiff (passes/fuse_gelu.c), so
    the backward reads only the pre-activation, which the product reaches
    through a Reshape (a view of C): each layer's MLP GEMM step carries
    "act gelu_tanh->bN aux" and the backward's dG product "act
    dgelu_tanh->bN in=bM" (4 of 27 GEMM steps) and its GELU kernel writes
    one buffer; with SHARDC_NO_FUSE_GELU=1 (the eight ops kept, whose
    backward reads three of their intermediate values) no GEMM step carries
    an activation and each GELU kernel writes four buffers.

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
    elif case == "gelu_product_out":
        opset = 20
        outs.append(h.make_tensor_value_info("P", T.FLOAT, None))
        nodes = [gemm, h.make_node("Gelu", ["P"], ["Y"], approximate="tanh")]
        ref = lambda x, z: gelu_tanh(x @ wd + bd)
    g = h.make_graph(nodes, case, ins, outs, inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.save(m, path)
    return ref


CASES = {  # case: the activation its GEMM step must carry (" aux": C kept)
    "relu": "relu", "gelu_spelled": "gelu_tanh", "gelu_op_tanh": "gelu_tanh",
    "gelu_op_erf": None, "gelu_wrong_constant": None, "relu_add": None,
    "relu_product_out": None, "gelu_product_out": "gelu_tanh aux",
}
ENGINES = [{}] if REAL else [{}, {"SHARDC_CUDA_GEMM": "cublaslt"}]


def sh(args, env=None):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([SHARDC] + args, capture_output=True, text=True, timeout=600, env=e)


def cuda_env():
    return {"SHARDC_CUDA_EMU": "0" if REAL else "1", "SHARDC_CUDA_VERBOSE": "1"}


def fused_count(stderr):
    m = re.search(r"\((\d+) activations in the product", stderr)
    return int(m.group(1)) if m else None


def aux_count(stderr):
    m = re.search(r"activations in the product, (\d+) keeping the pre-activation", stderr)
    return int(m.group(1)) if m else None


def mlp_model(path, rng, k=32, n=64):
    """Gemm -> Gelu(approximate="tanh") -> Gemm, for training."""
    w1 = (rng.standard_normal((k, n)) / 6).astype(np.float32)
    b1 = (rng.standard_normal(n) / 4).astype(np.float32)
    w2 = (rng.standard_normal((n, k)) / 8).astype(np.float32)
    b2 = (rng.standard_normal(k) / 4).astype(np.float32)
    inits = [numpy_helper.from_array(a, nm) for a, nm in ((w1, "W1"), (b1, "B1"), (w2, "W2"),
                                                          (b2, "B2"))]
    nodes = [h.make_node("Gemm", ["X", "W1", "B1"], ["Q"]),
             h.make_node("Gelu", ["Q"], ["G"], approximate="tanh"),
             h.make_node("Gemm", ["G", "W2", "B2"], ["Y"])]
    g = h.make_graph(nodes, "mlp_gelu", [h.make_tensor_value_info("X", T.FLOAT, ["batch", k])],
                     [h.make_tensor_value_info("Y", T.FLOAT, ["batch", k])], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 20)])
    m.ir_version = 9
    onnx.save(m, path)


def gpt2_count(tmp):
    """GPT-2's bf16 training step: GEMM steps per activation (module comment)."""
    src = os.environ.get("SC_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                       "..", ".."))
    for fold, want, want_outs, kname in (
            (True, {"gelu_tanh aux": 2, "dgelu_tanh": 2, "none": 23}, [1, 1], r"\w*_gelu"),
            (False, {"none": 27}, [4, 4], r"\w*_mul_pow_mul_add_mul_tanh_add_mul")):
        env = None if fold else {"SHARDC_NO_FUSE_GELU": "1"}
        tag = "gpt2 bf16 training" + ("" if fold else " (SHARDC_NO_FUSE_GELU=1)")
        r = sh(["compile", os.path.join(src, "samples", "gpt2.onnx"), "--train", "--dim",
                "batch=2", "--precision", "bf16", "--optimizer", "adamw", "--emit=kir", "-o",
                os.path.join(tmp, "gpt2k")], env)
        if not check(r.returncode == 0, f"{tag}: compile: {r.stderr[-300:]}"):
            continue
        gemms = re.findall(r"^s\d+ gemm .*$", r.stdout, re.M)
        acts = [re.search(r" act (\w+)->b\d+( aux)?", ln) for ln in gemms]
        counts = {}
        for a in acts:
            key = (a.group(1) + (a.group(2) or "")) if a else "none"
            counts[key] = counts.get(key, 0) + 1
        # the forward GELU kernels (one per layer) and how many buffers each writes
        blocks = re.split(r"^(?=k\d+ kernel )", r.stdout, flags=re.M)
        outs = [len(re.findall(r"^  p\d+ = buf .* out$", bl, re.M)) for bl in blocks
                if re.match(r"k\d+ kernel " + kname + " ", bl)]
        print(f"{tag}: {len(gemms)} GEMM steps, by activation {counts}; the forward "
              f"GELU kernels write {outs} buffers")
        check(len(gemms) == 27 and counts == want and outs == want_outs,
              f"{tag}: {len(gemms)} GEMM steps, activations {counts}, GELU kernels "
              f"writing {outs} buffers; want 27 GEMM steps, {want}, GELU kernels writing "
              f"{want_outs}")


def cast_checks(tmp):
    """A narrowing Cast inside the epilogue rounds (module comment)."""
    w = (np.random.default_rng(20261206).standard_normal((K, N)) / math.sqrt(K)).astype(np.float32)
    for case, mid, want in (
            ("cast_round", [h.make_node("Cast", ["P"], ["Q"], to=T.BFLOAT16),
                            h.make_node("Cast", ["Q"], ["R"], to=T.FLOAT)], []),
            ("identity", [h.make_node("Identity", ["P"], ["R"])], ["gelu_tanh"])):
        nodes = ([h.make_node("MatMul", ["X", "W"], ["P"])] + mid +
                 [h.make_node("Gelu", ["R"], ["Y"], approximate="tanh")])
        g = h.make_graph(nodes, case, [h.make_tensor_value_info("X", T.FLOAT, [M, K])],
                         [h.make_tensor_value_info("Y", T.FLOAT, None)],
                         [numpy_helper.from_array(w, "W")])
        m = h.make_model(g, opset_imports=[h.make_opsetid("", 20)])
        m.ir_version = 9
        path = os.path.join(tmp, case + ".onnx")
        onnx.save(m, path)
        r = sh(["compile", path, "--emit=kir", "-o", os.path.join(tmp, case + ".k")])
        if not check(r.returncode == 0, f"{case}: compile: {r.stderr[-300:]}"):
            continue
        gemms = re.findall(r"^s\d+ gemm .*$", r.stdout, re.M)
        acts = [a.group(1) for a in (re.search(r" act (\w+)->b\d+", ln) for ln in gemms) if a]
        check(len(gemms) == 1 and acts == want,
              f"{case}: {len(gemms)} GEMM steps, activations {acts}, want 1, {want}")


def train_checks(tmp, rng):
    """GELU_AUX in a training step (module comment)."""
    path = os.path.join(tmp, "mlp_gelu.onnx")
    mlp_model(path, rng)
    xs, ts = os.path.join(tmp, "train.x.npy"), os.path.join(tmp, "train.t.npy")
    np.save(xs, rng.standard_normal((64, 32)).astype(np.float32))
    np.save(ts, rng.standard_normal((64, 32)).astype(np.float32))
    base = ["--data", "X=" + xs, "--targets", ts, "--loss", "mse", "--dim", "batch=16",
            "--optimizer", "adamw", "--no-allow-tf32"]
    for prec, tol in (("fp32", 2e-5), ("bf16", 2e-3)):
        r = sh(["compile", path, "--train", "--emit=kir", "--precision", prec, "-o",
                os.path.join(tmp, "k")] + base[4:-1])
        if not check(r.returncode == 0, f"train {prec}: compile: {r.stderr[-300:]}"):
            continue
        acts = re.findall(r"^s\d+ gemm .* act (\w+)->b\d+( aux)?", r.stdout, re.M)
        want = [("gelu_tanh", " aux"), ("dgelu_tanh", "")]
        check(acts == want, f"train {prec}: GEMM activations {acts}, want {want}")
        logs = {}
        for dev, env in [("cpu", None)] + [("cuda", e) for e in ENGINES]:
            tag = dev + ("-" + env["SHARDC_CUDA_GEMM"] if env else "")
            lj = os.path.join(tmp, f"train.{prec}.{tag}.jsonl")
            r = sh(["train", path, "--steps", "4", "--log-json", lj, "-q", "--device", dev,
                    "--precision", prec] + base,
                   dict(cuda_env(), **env) if dev == "cuda" else None)
            if not check(r.returncode == 0, f"train {prec} on {tag}: {r.stderr[-400:]}"):
                continue
            with open(lj) as f:
                logs[tag] = [json.loads(ln) for ln in f if ln.strip()]
            if dev == "cuda":
                check(fused_count(r.stderr) == len(want) and aux_count(r.stderr) == 1,
                      f"train {prec} on {tag}: {fused_count(r.stderr)} activations in the "
                      f"product, {aux_count(r.stderr)} keeping the pre-activation, want "
                      f"{len(want)}, 1")
        for tag, log in logs.items():
            if tag == "cpu" or "cpu" not in logs:
                continue
            check(len(log) == 4 == len(logs["cpu"]), f"train {prec} on {tag}: {len(log)} steps")
            for a, b in zip(logs["cpu"], log):
                for key in ("loss", "grad_norm"):
                    x, y = a[key], b[key]
                    check(math.isfinite(y) and abs(x - y) <= tol * abs(x),
                          f"train {prec} on {tag}: step {a['step']} {key} {y} vs cpu {x}")
            print(f"train {prec} on {tag}: largest relative difference from the cpu "
                  f"{max(abs(a[k] - b[k]) / abs(a[k]) for a, b in zip(logs['cpu'], log) for k in ('loss', 'grad_norm')):.2e}")


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
            acts = [re.search(r" act (\w+)->b\d+( aux)?", ln) for ln in gemms]
            got_acts = [a.group(1) + (a.group(2) or "") for a in acts if a]
            check(len(gemms) == 1, f"{case}: {len(gemms)} GEMM steps, want 1")
            check(got_acts == ([want_act] if want_act else []),
                  f"{case}: activations {got_acts}, want {want_act}")
            want = ref(x.astype(np.float64), z.astype(np.float64))
            outs = {}
            runs = [("cpu", None)] + [("cuda", e) for e in ENGINES]
            for dev, env in runs:
                tag = dev + ("-" + env["SHARDC_CUDA_GEMM"] if env else "")
                od = os.path.join(tmp, f"{case}.{tag}")
                r = sh(["run", path, "-q", "--device", dev, "--no-allow-tf32", "--output-dir", od] + args,
                       dict(cuda_env(), **env) if dev == "cuda" else None)
                if not check(r.returncode == 0, f"{case} on {tag}: {r.stderr[-400:]}"):
                    continue
                outs[tag] = np.load(os.path.join(od, "Y.npy"))
                within(outs[tag], want, 1e-4, f"{case} on {tag} against numpy")
                if case.endswith("_product_out"):  # C itself, kept beside the activation
                    wb = {t.name: numpy_helper.to_array(t).astype(np.float64)
                          for t in onnx.load(path).graph.initializer}
                    within(np.load(os.path.join(od, "P.npy")), x.astype(np.float64) @ wb["W"] + wb["B"],
                           1e-4, f"{case} on {tag}: the product P against numpy")
                if dev == "cuda":
                    n, na = fused_count(r.stderr), aux_count(r.stderr)
                    nw = 1 if want_act else 0
                    nwa = nw if want_act and want_act.endswith(" aux") else 0
                    check(n == nw and na == nwa,
                          f"{case} on {tag}: {n} activations in the product, {na} keeping "
                          f"the pre-activation, want {nw}, {nwa}")
            for tag in outs:
                if tag != "cpu" and "cpu" in outs:
                    within(outs[tag], outs["cpu"].astype(np.float64), 1e-5,
                           f"{case}: {tag} against cpu")
            if case not in ("gelu_spelled", "gelu_product_out") or "cpu" not in outs:
                continue
            # a CUDA bundle keeps the activation (and act_aux) and runs it
            aux = case == "gelu_product_out"
            bdir = os.path.join(tmp, "bundle." + case)
            # NVRTC's library allocates dynamic TLS that LeakSanitizer's tracer
            # reads as a bogus range and dies on ("DTLS at 0xc98", "Tracer
            # caught signal 11", after the bundle is written: gelu_product_out,
            # gcc 12's libasan): no leak check for this in-process NVRTC call;
            # the bundle's run below keeps it
            r = sh(["compile", path, "--target", "cuda", "-o", bdir],
                   env={"ASAN_OPTIONS": ":".join(filter(None, [os.environ.get("ASAN_OPTIONS"),
                                                               "detect_leaks=0"]))})
            if not check(r.returncode == 0, f"bundle: {r.stderr[-300:]}"):
                continue
            with open(os.path.join(bdir, "program.json")) as f:
                prog = json.load(f)
            steps = [s for s in prog["steps"] if s.get("kind") == "gemm"]
            check(len(steps) == 1 and steps[0]["gemm"].get("act") == "gelu_tanh" and
                  steps[0]["gemm"].get("act_aux", False) == aux,
                  f"bundle {case}: GEMM steps {[s['gemm'].get('act') for s in steps]}, act_aux "
                  f"{[s['gemm'].get('act_aux') for s in steps]}")
            # cuBLASLt's workspace is part of the plan: 32 MiB at the arena's top
            ws, wo = prog.get("workspace_bytes"), prog.get("workspace_offset")
            check(ws == 32 << 20 and wo is not None and wo + ws == prog["arena_bytes"],
                  f"bundle: workspace {ws} at {wo} in an arena of {prog['arena_bytes']}")
            od = os.path.join(tmp, f"bundle.{case}.out")
            r = sh(["run", bdir, "-q", "--device", "cuda", "--no-allow-tf32", "--output-dir", od] + args,
                   cuda_env())
            if check(r.returncode == 0, f"bundle run: {r.stderr[-400:]}"):
                check(fused_count(r.stderr) == 1 and aux_count(r.stderr) == int(aux),
                      f"bundle run {case}: {fused_count(r.stderr)} activations in the product, "
                      f"{aux_count(r.stderr)} keeping the pre-activation")
                within(np.load(os.path.join(od, "Y.npy")), outs["cpu"].astype(np.float64),
                      1e-5, f"bundle {case} on cuda against cpu")
        cast_checks(tmp)
        train_checks(tmp, rng)
        gpt2_count(tmp)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
