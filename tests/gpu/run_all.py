"""run_all.py — every GPU check, one run, a JSON summary (tests/gpu/run-all.sh).

On a machine with a GPU (or, rehearsing, on the emulated GPU with
SHARDC_CUDA_EMU=1), each check below passes, fails or is skipped with its
reason; the summary goes to stdout as one JSON object (and to --json FILE),
then the closing line "N passed, N failed". Exit 0 when nothing failed.

  env          nvidia-smi, the driver's and the toolkit's versions (info)
  modules      GPT-2 run with the kernels loaded from a CUBIN, then from PTX
               (SHARDC_CUDA_MODULE), each against the CPU device
  kernels      tests/gpu/test_gpu.sh: every kernel of every sample against
               the CPU (unit binaries test_cuda, test_cuda_samples); on the
               emulated GPU, test_cuda_samples' emulated kernels
  samples      test_cuda_emulated.py's checks (SC_CUDA_REAL=1 on a GPU):
               every sample end to end against the CPU, CUDA graph replays
               bit-identical to stream launches, MLP and GPT-2 training,
               the bad-index message
  cuda-local   a mesh's thread-ranks sharing this GPU, their collectives on it
               (--comm cuda-local): the unit test of every collective against
               the host's reduction, bit for bit on every rank
               (cuda-local.collectives: test_comm_cuda_local, SC_CUDA_REAL=1),
               then tests/gpu/test_cuda_local.py (cuda-local.meshes): GPT-2
               trained at dp=2, fsdp=2, tp=2, pp=2 (1f1b) and dp=2 x tp=2
               against the CPU's thread-ranks (losses, gradient norms, the
               checkpoint), and run at tp=2 and pp=2 (not with --quick)
  arena        SHARDC_CUDA_VERBOSE's line: the arena allocated is the plan's,
               cuBLASLt's workspace is in it (the plan reserves 32 MiB), and
               the device memory the session took is arena + weights
  gemm         one MatMul (with and without a bias) against numpy, in f32
               (relative 1e-4 of the largest |value|) and bf16 (1e-2), a Gemm
               with a ReLU or tanh GELU (the activation in the product:
               cuBLASLt's epilogue; its count reported) the same way, and
               gemm.tf32: the f32 MatMul with TF32 allowed (the default)
               within 2^-10 against numpy, and its distance from the product
               of the TF32-rounded operands (the emulation's rounding);
               TFLOP/s at 8192^3 (1024^3 emulated) in f32, f32 with TF32
               operands and bf16 and at
               GPT-2 small's shapes (1024 tokens)
  nccl         one-rank NCCL (a GPU holds one rank): GPT-2 on a one-rank
               mesh with --comm nccl (torchrun variables), against the CPU
  planner      the planner on this GPU: `shardc calibrate --device cuda`
               (planner.calibrate: a profile of kind cuda), `shardc plan` of
               GPT-2 small's training step (bench/bench_planner_accuracy.py's
               generator: 12 layers, d 768, sequence 128, batch 8, AdamW,
               fp32; --quick: batch 1) on h200:1x1 with that profile
               (planner.plan: a predicted step time, the CUDA device's memory
               lines), and `shardc train --device cuda` of the same step
               (planner.train: the median step after the warm-up); then
               planner.accuracy (info): predicted, measured, their ratio,
               against the target of 15 %. Emulated: samples/gpt2.onnx, and
               the ratio says nothing of a GPU
  attention    the fused attention kernels (codegen/cuda/cuda_attention.c) as
               ATTENTION + ATTENTION_GRAD steps of a hand-built program
               (unit binary test_cuda_attention --compare): o, lse, dq, dk,
               dv of the CUDA device against the CPU device's (f32 2e-5,
               bf16 2^-6 of the largest |value|), and the GPU time of the
               forward and the backward with TFLOP/s (4·b·h·sq·skv·d for the
               forward, halved when causal; the backward counted as 2.5 times
               that) at GPT-2 small's shape (batch 8, 12 heads, seq 1024,
               d 64, causal; bf16 and f32) and a 1.3B model's (batch 2, 16
               heads, seq 2048, d 128, causal, bf16); then the bf16 shapes
               with the forward on tensor cores (SHARDC_CUDA_ATTENTION=mma,
               attention.*.mma). Emulated: the same at seq 128 and 64, one
               head pair
  real-models  GPT-2 small and ResNet-18 at real size (bench/real_models.py):
               latency at batch 1 and 8 with --device cuda (and cpu at batch
               1; ResNet-18 also with SHARDC_CUDA_CONV=im2col), against
               PyTorch eager on the same GPU where it is installed

Run only when named (`run-all.sh train-speed`, or in --only): minutes at
real size, so not part of the default run.

  train-speed  shardc's training step against PyTorch's (eager and
               torch.compile) on GPT-2 small and a Llama-style 1.3B, the same
               weights and batches (tests/gpu/train_speed.py): step time,
               tokens/s, MFU, peak memory, ratios, the first losses compared;
               and the 1.3B's fp8 step (--precision fp8) against shardc's
               bf16 one; OUT/train-speed.json and .md. --tiny (implied on the emulated
               GPU): the tiny configs, PyTorch on the CPU where installed
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
EMU = os.environ.get("SHARDC_CUDA_EMU") == "1"
results = []


RECORD = None    # --record FILE: every result appended as one JSON line as it comes
CUT = False      # a command was killed at the --deadline since the last result


def record(name, status, detail="", **figures):
    """One result. A failure that follows a command cut at the --deadline is
    a skip saying so: the time ran out, nothing was found wrong."""
    global CUT
    if status == "fail" and CUT:
        status, detail = "skip", "cut at the --deadline: " + detail
    CUT = False
    results.append(dict(name=name, status=status, detail=detail, **figures))
    print(f"[{status}] {name}: {detail}", flush=True)
    if RECORD:
        with open(RECORD, "a") as f:
            f.write(json.dumps(results[-1]) + "\n")


LOG = None       # --log FILE: every command, its exit status, time and output
DEADLINE = None  # --deadline S: the time.time() after which checks are skipped


def left(cap):
    """Seconds a command may take: `cap`, or what is left before the
    deadline (at least 10)."""
    return cap if DEADLINE is None else max(10, min(cap, int(DEADLINE - time.time())))


def sh(cmd, env=None, timeout=300):
    """Runs cmd; a command past its timeout is killed and comes back with
    status 124 and the output it had written (a hang on a GPU must not take
    the whole run with it)."""
    e = dict(os.environ)
    e.update(env or {})
    t0 = time.time()
    global CUT
    cap, timeout = timeout, left(timeout)
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=e)
    except subprocess.TimeoutExpired as x:
        def text(b):
            return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")
        r = subprocess.CompletedProcess(cmd, 124, text(x.stdout),
                                        text(x.stderr) + f"\n[killed after {timeout} s]")
        CUT = CUT or timeout < cap

    if LOG:
        with open(LOG, "a") as f:
            f.write(f"$ {' '.join(f'{k}={v}' for k, v in (env or {}).items())} "
                    f"{' '.join(cmd)}\n[rc {r.returncode}, {time.time() - t0:.1f} s]\n"
                    f"--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}\n\n")
    return r


def check_env(a):
    info = {}
    if not EMU:
        r = sh(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                "--format=csv,noheader"])
        info["nvidia_smi"] = r.stdout.strip() or r.stderr.strip()
    r = sh(["bash", "-c", "cat /usr/local/cuda/version.json 2>/dev/null | head -c 400; "
                          "nvcc --version 2>/dev/null | tail -2"])
    info["toolkit"] = " ".join(r.stdout.split())[:300]
    info["emulated"] = EMU
    record("env", "info", json.dumps(info), **info)


def npy_close(d1, d2, tol):
    import numpy as np
    worst = 0.0
    for n in sorted(os.listdir(d1)):
        if not n.endswith(".npy"):
            continue
        x, y = np.load(os.path.join(d1, n)), np.load(os.path.join(d2, n))
        if x.shape != y.shape or np.isnan(y).any():
            return False, float("inf")
        s = float(np.max(np.abs(x))) or 1.0
        worst = max(worst, float(np.max(np.abs(x.astype(np.float64) - y))) / s)
    return worst <= tol, worst


def check_modules(a, tmp):
    if EMU:
        record("modules", "skip", "the emulated driver loads CUDA C, not CUBIN or PTX")
        return
    gpt2 = os.path.join(SRC, "samples", "gpt2.onnx")
    base = ["run", gpt2, "--dim", "batch=2", "--random-inputs", "3", "-q"]
    cpu = os.path.join(tmp, "mod.cpu")
    sh([a.shardc] + base + ["--output-dir", cpu], timeout=90)
    for kind in ("cubin", "ptx"):
        out = os.path.join(tmp, "mod." + kind)
        r = sh([a.shardc] + base + ["--device", "cuda", "--no-allow-tf32", "--output-dir", out],
               {"SHARDC_CUDA_MODULE": kind, "SHARDC_CUDA_VERBOSE": "1"}, timeout=90)
        loaded = re.search(r"kernels (\w+)", r.stderr)
        ok = r.returncode == 0 and loaded and loaded.group(1) == kind
        close, err = npy_close(cpu, out, 1e-5) if ok else (False, None)
        record("modules." + kind, "pass" if ok and close else "fail",
               f"rc {r.returncode}, loaded {loaded.group(1) if loaded else '?'}, "
               f"max error {err} {r.stderr[-300:] if r.returncode else ''}")


def outcome(rc):
    """A test's exit status as a check's: 0 pass, 77 (the test found nothing
    it could run here, e.g. a build without NVRTC) skip, else fail."""
    return "pass" if rc == 0 else "skip" if rc == 77 else "fail"


def check_kernels(a):
    if EMU:
        exe = os.path.join(a.build, "tests", "test_cuda_samples")
        # its own ctest limit (tests/CMakeLists.txt): about a minute on two
        # busy cores, but past 300 s at a load average of 15 to 25
        r = sh([exe], timeout=600)
        ok = re.search(r"\[  PASSED  \] (\d+) test", r.stdout)
        record("kernels", outcome(r.returncode),
               "emulated kernels of every sample vs the CPU (unit test_cuda_samples): " +
               (f"{ok.group(1)} passed" if ok else (r.stdout + r.stderr).strip()[-300:]))
        return
    r = sh(["bash", os.path.join(HERE, "test_gpu.sh")],
           {"SC_BINARY_DIR": a.build, "SC_SOURCE_DIR": SRC}, timeout=150)
    record("kernels", outcome(r.returncode), (r.stdout + r.stderr)[-400:])


ATTN_SHAPES = ["gpt2-small:8,12,12,1024,64,1,bf16", "gpt2-small-f32:8,12,12,1024,64,1,f32",
               "1.3b:2,16,16,2048,128,1,bf16"]
ATTN_SHAPES_EMU = ["gpt2-small:1,2,2,128,64,1,bf16", "gpt2-small-f32:1,2,2,128,64,1,f32",
                   "1.3b:1,2,2,64,128,1,bf16"]


def check_attention(a):
    exe = os.path.join(a.build, "tests", "test_cuda_attention")
    pat = re.compile(r"^attention (\S+): (.*fwd ([0-9.]+) ms ([0-9.]+) TFLOP/s, "
                     r"bwd ([0-9.]+) ms ([0-9.]+) TFLOP/s.*) (ok|FAIL)$", re.M)
    shapes = ATTN_SHAPES_EMU if EMU else ATTN_SHAPES
    # CUDA cores, then the bf16 shapes with the forward on tensor cores
    for tag, env, todo in (("", {}, shapes),
                           (".mma", {"SHARDC_CUDA_ATTENTION": "mma"},
                            [s for s in shapes if s.endswith("bf16")])):
        r = sh([exe, "--compare", "--runs", "3" if EMU else "10"] + todo, env, timeout=300)
        seen = 0
        for m in pat.finditer(r.stdout):
            seen += 1
            record(f"attention.{m.group(1)}{tag}", "pass" if m.group(7) == "ok" else "fail",
                   m.group(2), fwd_ms=float(m.group(3)), fwd_tflops=float(m.group(4)),
                   bwd_ms=float(m.group(5)), bwd_tflops=float(m.group(6)))
        if r.returncode != 0 or seen != len(todo):
            record(f"attention{tag}", "fail", f"exit {r.returncode}, {seen} shapes: " +
                   (r.stdout + r.stderr).strip()[-400:])


def check_samples(a):
    t0 = time.time()
    r = sh([a.python, os.path.join(HERE, "test_cuda_emulated.py")],
           {"SHARDC": a.shardc, "SC_SOURCE_DIR": SRC, "SC_CUDA_REAL": "0" if EMU else "1",
            "SC_CUDA_QUICK": "1" if a.quick else "0"}, timeout=1500)
    record("samples", outcome(r.returncode),
           f"{time.time() - t0:.0f} s: " + (r.stdout + r.stderr).strip()[-600:])


def check_cuda_local(a):
    exe = os.path.join(a.build, "tests", "test_comm_cuda_local")
    if os.path.exists(exe):
        r = sh([exe], {"SC_CUDA_REAL": "0" if EMU else "1"}, timeout=300)
        record("cuda-local.collectives", outcome(r.returncode), (r.stdout + r.stderr)[-400:])
    else:
        record("cuda-local.collectives", "skip", f"{exe} was not built (or packed)")
    if a.quick:
        record("cuda-local.meshes", "skip", "--quick: no mesh matrices")
        return
    t0 = time.time()
    r = sh([a.python, os.path.join(HERE, "test_cuda_local.py")],
           {"SHARDC": a.shardc, "SC_SOURCE_DIR": SRC, "SC_CUDA_REAL": "0" if EMU else "1"},
           timeout=900)
    record("cuda-local.meshes", outcome(r.returncode),
           f"{time.time() - t0:.0f} s: " + (r.stdout + r.stderr).strip()[-600:])


def check_arena(a):
    gpt2 = os.path.join(SRC, "samples", "gpt2.onnx")
    r = sh([a.shardc, "run", gpt2, "--random-inputs", "1", "-q", "--device", "cuda",
            "--output-dir", os.devnull + ".d"], {"SHARDC_CUDA_VERBOSE": "1"}, timeout=60)
    m = re.search(r"arena (\d+) bytes \(the plan's (\d+)\), weights (\d+) bytes; device memory "
                  r"taken since the context: (-?\d+)", r.stderr)
    if not m:
        record("arena", "fail", r.stderr[-300:])
        return
    arena, plan, weights, taken = (int(x) for x in m.groups())
    # cuBLASLt's workspace is in the arena (the plan reserves it), unless the
    # engine had to allocate its own
    ws = 32 << 20 if "workspace allocated" in r.stderr else 0
    ok_ws = EMU or "workspace in the arena" in r.stderr
    expect = arena + weights + ws
    # the driver rounds allocations up (2 MiB pages on a GPU)
    ok = arena == plan and ok_ws and (EMU or abs(taken - expect) <= 8 << 20)
    record("arena", "pass" if ok else "fail",
           f"arena {arena} = plan {plan} (cuBLASLt's workspace "
           f"{'in it' if ws == 0 else 'allocated apart'}); device memory taken {taken}, "
           f"arena + weights{' + workspace' if ws else ''} {expect}", arena=arena, plan=plan,
           taken=taken)


def device_ms(stderr):
    """The median device time of a run's steps (SHARDC_CUDA_VERBOSE), or None."""
    m = re.search(r"device time of a run's steps: median ([0-9.]+) ms", stderr)
    return float(m.group(1)) if m else None


def gemm_model(path, m, k, n, bias, bf16=False):
    """Y = A @ W (+ B): f32, or with bf16 (every operand cast to bf16, the
    product cast back to f32)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper
    a = helper.make_tensor_value_info("A", TensorProto.FLOAT, [m, k])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [m, n])
    rng = np.random.default_rng(5)
    w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    inits = [onnx.numpy_helper.from_array(w, "W")]
    if bias:
        inits.append(onnx.numpy_helper.from_array(
            rng.standard_normal(n).astype(np.float32), "B"))
    nodes, ops = [], {"A": "A", "W": "W", "B": "B"}
    if bf16:
        for x in ("A", "W") + (("B",) if bias else ()):
            nodes.append(helper.make_node("Cast", [x], [x + "h"], to=TensorProto.BFLOAT16))
            ops[x] = x + "h"
    last = "Y" if not bias and not bf16 else "P"
    nodes.append(helper.make_node("MatMul", [ops["A"], ops["W"]], [last]))
    if bias:
        nodes.append(helper.make_node("Add", [last, ops["B"]], ["Y" if not bf16 else "Q"]))
        last = "Q"
    if bf16:
        nodes.append(helper.make_node("Cast", [last], ["Y"], to=TensorProto.FLOAT))
    g = helper.make_graph(nodes, "gemm", [a], [y], inits)
    mod = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    mod.ir_version = 8
    onnx.save(mod, path)
    return w, (onnx.numpy_helper.to_array(inits[1]) if bias else None)


def act_model(path, m, k, n, act, keep=False):
    """Y = act(Gemm(A, W, B)) in f32, act "relu" or "gelu" (ONNX Gelu,
    approximate="tanh", opset 20): one GEMM step whose activation goes into
    the product (cuBLASLt's RELU_BIAS or GELU_BIAS epilogue); keep: the
    product P is a graph output too (GELU_AUX_BIAS writes it as its aux)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper
    rng = np.random.default_rng(6)
    w = (rng.standard_normal((k, n)) * 2 / np.sqrt(k)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    inits = [onnx.numpy_helper.from_array(w, "W"), onnx.numpy_helper.from_array(b, "B")]
    nodes = [helper.make_node("Gemm", ["A", "W", "B"], ["P"]),
             helper.make_node("Relu", ["P"], ["Y"]) if act == "relu" else
             helper.make_node("Gelu", ["P"], ["Y"], approximate="tanh")]
    g = helper.make_graph(nodes, "gemm_act",
                          [helper.make_tensor_value_info("A", TensorProto.FLOAT, [m, k])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [m, n])] +
                          ([helper.make_tensor_value_info("P", TensorProto.FLOAT, [m, n])]
                           if keep else []), inits)
    mod = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    mod.ir_version = 9
    onnx.save(mod, path)
    return w, b


def check_gemm(a, tmp):
    try:
        import numpy as np
        import onnx  # noqa: F401
    except ImportError as e:
        record("gemm", "skip", f"needs numpy and onnx: {e}")
        return
    # correctness, with and without the bias, f32 (1e-4 of the largest |value|) and bf16
    # (1e-2; the reference rounds the operands to bf16 first)
    import ml_dtypes  # onnx's own dependency

    def as_bf16(v):  # rounded to the nearest bf16, ties to even
        return np.asarray(v, np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)
    for bf16 in (False, True):
        for bias in (False, True):
            tag = f"{'bf16.' if bf16 else ''}bias{int(bias)}"
            path = os.path.join(tmp, f"g.{tag}.onnx")
            w, b = gemm_model(path, 96, 160, 200, bias, bf16)
            x = np.random.default_rng(9).standard_normal((96, 160)).astype(np.float32)
            np.save(os.path.join(tmp, "x.npy"), x)
            out = os.path.join(tmp, f"gout.{tag}")
            r = sh([a.shardc, "run", path, "--input", "A=" + os.path.join(tmp, "x.npy"), "-q",
                    "--device", "cuda", "--no-allow-tf32", "--output-dir", out])
            if r.returncode != 0:
                record(f"gemm.{tag}", "fail", r.stderr[-300:])
                continue
            f = as_bf16 if bf16 else (lambda v: np.asarray(v, np.float64))
            want = f(x) @ f(w) + (f(b) if bias else 0)
            got = np.load(os.path.join(out, "Y.npy"))
            err = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
            tol = 1e-2 if bf16 else 1e-4
            record(f"gemm.{tag}", "pass" if err <= tol and not np.isnan(got).any() else "fail",
                   f"max error {err:.2e} (tolerance {tol:g})")
    check_tf32(a, tmp)
    # the activation in the product: relu and tanh GELU against numpy, f32
    # (cuBLASLt's GELU epilogue measured against the tanh form: 1e-4); gelu-aux:
    # the product kept as well (GELU_AUX_BIAS: P, its aux output, against numpy too)
    for act in ("relu", "gelu", "gelu-aux"):
        tag = f"act.{act}"
        path = os.path.join(tmp, f"g.{tag}.onnx")
        w, b = act_model(path, 96, 160, 200, act.split("-")[0], act == "gelu-aux")
        x = np.random.default_rng(10).standard_normal((96, 160)).astype(np.float32)
        np.save(os.path.join(tmp, "x.npy"), x)
        out = os.path.join(tmp, f"gout.{tag}")
        r = sh([a.shardc, "run", path, "--input", "A=" + os.path.join(tmp, "x.npy"), "-q",
                "--device", "cuda", "--no-allow-tf32", "--output-dir", out],
               {"SHARDC_CUDA_VERBOSE": "1"})
        if r.returncode != 0:
            record(f"gemm.{tag}", "fail", r.stderr[-300:])
            continue
        p = x.astype(np.float64) @ w.astype(np.float64) + b.astype(np.float64)
        want = np.maximum(p, 0) if act == "relu" else \
            0.5 * p * (1 + np.tanh(np.sqrt(2 / np.pi) * (p + 0.044715 * p ** 3)))
        got = np.load(os.path.join(out, "Y.npy"))
        err = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
        nan = np.isnan(got).any()
        if act == "gelu-aux":  # the aux output: the GELU's input
            kept = np.load(os.path.join(out, "P.npy"))
            err = max(err, float(np.max(np.abs(kept - p)) / np.max(np.abs(p))))
            nan = nan or np.isnan(kept).any()
        fused = re.search(r"\((\d+) activations in the product, (\d+) keeping", r.stderr)
        n = int(fused.group(1)) if fused else -1
        aux = int(fused.group(2)) if fused else -1
        # on a GPU, cuBLASLt may have no algorithm with the epilogue: then 0, and the
        # epilogue kernel runs; emulated, the activation is always in the product
        ok = err <= 1e-4 and not nan and (n == 1 or (n == 0 and not EMU)) and \
            aux == (n if act == "gelu-aux" else 0)
        record(f"gemm.{tag}", "pass" if ok else "fail",
               f"max error {err:.2e} (tolerance 1e-4); {n} activation(s) in the product, "
               f"{aux} keeping the pre-activation", fused=n, aux=aux)
    check_gelu_aux_train(a, tmp)
    big = 1024 if EMU else 8192
    shapes = [("square", big, big, big)] + [
        (f"gpt2-{n1}x{n2}", 1024, n1, n2) for n1, n2 in
        ((768, 2304), (768, 768), (768, 3072), (3072, 768), (768, 50257))]
    shapes += [("square-tf32", big, big, big), ("square-bf16", big, big, big)]
    for name, m, k, n in shapes:
        if EMU and not name.startswith("square"):
            continue
        path = os.path.join(tmp, f"{name}.onnx")
        gemm_model(path, m, k, n, False, name.endswith("bf16"))
        full = [] if name.endswith(("tf32", "bf16")) else ["--no-allow-tf32"]
        r = sh([a.shardc, "run", path, "--random-inputs", "1", "-q", "--device", "cuda"] + full +
               ["--repeat", "10", "--warmup", "3", "--output-dir", os.path.join(tmp, "gb")],
               {"SHARDC_CUDA_VERBOSE": "1"})
        med = re.search(r"run: median ([0-9.]+) ms", r.stderr)
        dev = device_ms(r.stderr)
        if r.returncode != 0 or not med or not dev:
            record(f"gemm.{name}", "fail", r.stderr[-300:])
            continue
        ms = float(med.group(1))
        tflops = 2.0 * m * k * n / (dev * 1e-3) / 1e12
        kind = ("bf16 (with the casts in and out)" if name.endswith("bf16") else
                "f32 with TF32 operands" if name.endswith("tf32") else "f32")
        record(f"gemm.{name}", "info", f"{m}x{k}x{n} {kind}: {dev:.3f} ms on the GPU, "
               f"{tflops:.2f} TFLOP/s; {ms:.3f} ms with the copies of A in and Y out",
               ms=ms, device_ms=dev, tflops=tflops)


def check_gelu_aux_train(a, tmp):
    """gemm.act.gelu-aux-train.{fp32,bf16}: Gemm -> Gelu(approximate="tanh")
    -> Gemm trained 4 AdamW steps (mse) on the GPU, whose forward's first
    product is cuBLASLt's GELU_AUX_BIAS (the backward reads the kept
    pre-activation) and, in both precisions, the backward's dG = dY·W2ᵀ its
    DGELU (dG · gelu'(Q) from that aux), against the CPU, which runs the
    kernels: losses and gradient norms within 2e-5 (fp32, --no-allow-tf32)
    and 2e-3 (bf16) relative; the verbose counts say which epilogues ran
    (emulated: all, 2 in the product)."""
    import json
    import numpy as np
    import onnx
    from onnx import TensorProto, helper
    rng = np.random.default_rng(11)
    k, n = 256, 1024
    inits = [onnx.numpy_helper.from_array(v.astype(np.float32), nm) for v, nm in (
        (rng.standard_normal((k, n)) / 16, "W1"), (rng.standard_normal(n) / 4, "B1"),
        (rng.standard_normal((n, k)) / 32, "W2"), (rng.standard_normal(k) / 4, "B2"))]
    nodes = [helper.make_node("Gemm", ["X", "W1", "B1"], ["Q"]),
             helper.make_node("Gelu", ["Q"], ["G"], approximate="tanh"),
             helper.make_node("Gemm", ["G", "W2", "B2"], ["Y"])]
    g = helper.make_graph(nodes, "mlp_gelu",
                          [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", k])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", k])],
                          inits)
    mod = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    mod.ir_version = 9
    path = os.path.join(tmp, "mlp_gelu.onnx")
    onnx.save(mod, path)
    xs, ts = os.path.join(tmp, "mlp.x.npy"), os.path.join(tmp, "mlp.t.npy")
    np.save(xs, rng.standard_normal((512, k)).astype(np.float32))
    np.save(ts, rng.standard_normal((512, k)).astype(np.float32))
    for prec, tol in (("fp32", 2e-5), ("bf16", 2e-3)):
        tag = f"gemm.act.gelu-aux-train.{prec}"
        logs, aux, fused = {}, -1, -1
        for dev in ("cpu", "cuda"):
            lj = os.path.join(tmp, f"mlp.{prec}.{dev}.jsonl")
            r = sh([a.shardc, "train", path, "--data", "X=" + xs, "--targets", ts, "--loss", "mse",
                    "--dim", "batch=128", "--optimizer", "adamw", "--precision", prec,
                    "--no-allow-tf32", "--steps", "4", "-q", "--device", dev, "--log-json", lj],
                   {"SHARDC_CUDA_VERBOSE": "1"} if dev == "cuda" else None)
            if r.returncode != 0:
                record(tag, "fail", f"{dev}: {r.stderr[-300:]}")
                break
            with open(lj) as f:
                logs[dev] = [json.loads(ln) for ln in f if ln.strip()]
            m = re.search(r"(\d+) keeping the pre-activation", r.stderr)
            f = re.search(r"\((\d+) activations in the product", r.stderr)
            if dev == "cuda":
                aux = int(m.group(1)) if m else -1
                fused = int(f.group(1)) if f else -1
        if len(logs) < 2:
            continue
        worst = max((abs(x[key] - y[key]) / abs(x[key]) for x, y in zip(logs["cpu"], logs["cuda"])
                     for key in ("loss", "grad_norm")), default=float("inf"))
        ok = len(logs["cuda"]) == 4 and all(np.isfinite(y["loss"]) for y in logs["cuda"]) and \
            worst <= tol and (aux == 1 or (aux == 0 and not EMU)) and \
            (fused == 2 or (0 <= fused and not EMU))
        record(tag, "pass" if ok else "fail",
               f"largest relative difference from the cpu {worst:.2e} (tolerance {tol:g}); "
               f"{fused} activation(s) in the product (GELU_AUX, DGELU), {aux} keeping the "
               f"pre-activation", worst=worst, aux=aux, fused=fused)


def check_tf32(a, tmp):
    """gemm.tf32: the f32 MatMul with TF32 allowed (the default) against
    numpy in float64, on the operands as given and on them rounded to TF32
    (to nearest, ties away: PTX's cvt.rna.tf32.f32, what the emulated GPU
    takes). Passes within 2^-10 of the largest |value| of the exact
    product (TF32 keeps 10 mantissa bits); the two errors say how the GPU
    rounds (near 0 against the rounded operands: as the emulation does)."""
    import numpy as np
    path = os.path.join(tmp, "g.tf32.onnx")
    w, _ = gemm_model(path, 96, 160, 200, False)
    x = np.random.default_rng(9).standard_normal((96, 160)).astype(np.float32)
    np.save(os.path.join(tmp, "x.npy"), x)
    out = os.path.join(tmp, "gout.tf32")
    r = sh([a.shardc, "run", path, "--input", "A=" + os.path.join(tmp, "x.npy"), "-q",
            "--device", "cuda", "--output-dir", out], {"SHARDC_CUDA_VERBOSE": "1"})
    if r.returncode != 0:
        record("gemm.tf32", "fail", r.stderr[-300:])
        return

    def as_tf32(v):
        u = np.asarray(v, np.float32).view(np.uint32)
        return ((u + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32).astype(
            np.float64)
    exact = x.astype(np.float64) @ w.astype(np.float64)
    rounded = as_tf32(x) @ as_tf32(w)
    got = np.load(os.path.join(out, "Y.npy")).astype(np.float64)
    scale = float(np.max(np.abs(exact)))
    err, err_r = (float(np.max(np.abs(got - ref))) / scale for ref in (exact, rounded))
    n = re.search(r"(\d+) f32 products with TF32 operands", r.stderr)
    n = int(n.group(1)) if n else -1
    ok = err <= 2.0 ** -10 and not np.isnan(got).any() and n == 1
    record("gemm.tf32", "pass" if ok else "fail",
           f"max error {err:.2e} against the exact product (tolerance {2.0 ** -10:.2e}), "
           f"{err_r:.2e} against the TF32-rounded operands' product; {n} product(s) with TF32 "
           f"operands", err=err, err_rounded=err_r)


def check_planner(a, tmp):
    """calibrate --device cuda, plan with its profile, train the same step
    on the GPU: the predicted step against the measured one."""
    prof = os.path.join(tmp, "planner.prof.json")
    quick = a.quick or EMU
    r = sh([a.shardc, "calibrate", "--device", "cuda", "-o", prof] +
           (["--quick"] if quick else []), timeout=600)
    p = None
    if r.returncode == 0:
        with open(prof) as f:
            p = json.load(f)
    ok = p is not None and p["device"]["kind"] == "cuda" and len(p["gemm"]) > 0
    best = {t: max((g["flops_per_s"] for g in p["gemm"] if g["dtype"] == t), default=0) / 1e12
            for t in ("fp32", "bf16")} if ok else {}
    record("planner.calibrate", "pass" if ok else "fail",
           f"{p['device']['name']}: best {best['fp32']:.1f} TFLOP/s fp32, {best['bf16']:.1f} "
           f"bf16; memory {p['memory_bytes_per_s'] / 1e12:.2f} TB/s; a step "
           f"{p['step_overhead_s'] * 1e6:.2f} us; context "
           f"{p['device'].get('context_bytes', 0)} bytes; {p['calibrate_s']:.0f} s"
           if ok else f"rc {r.returncode}: {r.stderr[-400:]}",
           tflops_fp32=best.get("fp32"), tflops_bf16=best.get("bf16"),
           context_bytes=p["device"].get("context_bytes") if ok else None)
    if not ok:
        return
    sys.path.insert(0, os.path.join(SRC, "bench"))
    sys.path.insert(0, os.path.join(SRC, "samples"))
    import types
    import bench_planner_accuracy as bpa
    if EMU:  # minutes a step at GPT-2 small's size on the emulated GPU
        model, batch, seq, vocab, steps, warmup = (os.path.join(SRC, "samples", "gpt2.onnx"),
                                                   8, 16, 1000, 3, 1)
    else:
        batch = 1 if a.quick else 8
        model = bpa.gpt2_small(types.SimpleNamespace(small_seq=128, cache=tmp))
        seq, vocab, steps, warmup = 128, 50257, 10, 3
    opts = ["--dim", f"batch={batch}", "--optimizer", "adamw", "--mesh", "dp=1"]
    r = sh([a.shardc, "plan", model, "--train", "--json", "--cluster", f"h200:1x1@{prof}"] + opts,
           timeout=600)
    pred, mem = None, None
    if r.returncode == 0:
        j = json.loads(r.stdout)
        pred = (j.get("predicted") or {}).get("step_time_s")
        mem = j.get("device")
    ok = pred is not None and mem is not None and "cuda context" in mem
    record("planner.plan", "pass" if ok else "fail",
           f"predicted {pred * 1e3:.3f} ms a step (batch {batch} x {seq}); memory "
           f"{j['predicted'].get('peak_bytes_per_rank')} bytes a rank, lines {mem}" if ok
           else f"rc {r.returncode}: {r.stderr[-400:]}", predicted_s=pred)
    ids, labels = bpa.write_data(tmp, batch, seq, vocab)
    log = os.path.join(tmp, "planner.train.json")
    r = sh([a.shardc, "train", model, "--device", "cuda", "--data", f"input_ids={ids}",
            "--labels", labels, "--steps", str(warmup + steps), "--lr", "1e-4", "--log-json",
            log, "--quiet"] + opts, timeout=900)
    ms = []
    if r.returncode == 0 and os.path.exists(log):
        ms = [json.loads(ln)["time_ms"] for ln in open(log) if ln.strip()]
    meas = sorted(ms[warmup:])[len(ms[warmup:]) // 2] / 1e3 if len(ms) > warmup else None
    record("planner.train", "pass" if meas else "fail",
           f"measured {meas * 1e3:.3f} ms a step (median of {len(ms) - warmup} after "
           f"{warmup})" if meas else f"rc {r.returncode}: {r.stderr[-400:]}", measured_s=meas)
    if pred and meas:
        ratio = pred / meas
        record("planner.accuracy", "info",
               f"predicted {pred * 1e3:.3f} ms, measured {meas * 1e3:.3f} ms, ratio "
               f"{ratio:.3f} ({'within' if abs(ratio - 1) <= 0.15 else 'outside'} the 15 % "
               f"target)" + (" (emulated: the ratio says nothing of a GPU)" if EMU else ""),
               predicted_s=pred, measured_s=meas, ratio=ratio)


def check_nccl(a, tmp):
    """One rank of NCCL (one GPU holds one rank of a communicator): the
    world made through the torchrun variables, GPT-2 run and trained on a
    one-rank mesh with --comm nccl, against the CPU."""
    if EMU:
        record("nccl", "skip", "NCCL cannot run on the emulated GPU (its own GPU code)")
        return
    env = {"WORLD_SIZE": "1", "RANK": "0", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": "29613"}
    gpt2 = os.path.join(SRC, "samples", "gpt2.onnx")
    base = ["run", gpt2, "--dim", "batch=2", "--random-inputs", "3", "-q", "--mesh", "dp=1"]
    cpu, out = os.path.join(tmp, "nccl.cpu"), os.path.join(tmp, "nccl.gpu")
    sh([a.shardc] + base + ["--output-dir", cpu], timeout=90)
    r = sh([a.shardc] + base + ["--device", "cuda", "--no-allow-tf32", "--comm", "nccl",
                                "--output-dir", out], env,
           timeout=90)
    close, err = npy_close(cpu, out, 1e-5) if r.returncode == 0 else (False, None)
    record("nccl", "pass" if close else "fail",
           f"one rank, --comm nccl: rc {r.returncode}, max error {err} {r.stderr[-300:]}")


TORCH_REF = r"""
import sys, time, torch
name, batch = sys.argv[1], int(sys.argv[2])
torch.manual_seed(0)
if name == "gpt2-small":
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(n_layer=12, n_embd=768, n_head=12, vocab_size=50257, n_positions=1024)
    model = GPT2LMHeadModel(cfg)
    x = torch.randint(0, 50257, (batch, 128))
else:
    import torchvision
    model = torchvision.models.resnet18()
    x = torch.randn(batch, 3, 224, 224)
model = model.cuda().eval()
x = x.cuda()
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
def once(host_io):
    torch.cuda.synchronize(); t0 = time.perf_counter()
    y = model(xh.cuda() if host_io else x)
    y = y.logits if hasattr(y, "logits") else y
    if host_io:
        y.cpu()
    torch.cuda.synchronize(); return time.perf_counter() - t0
xh = x.cpu()
with torch.no_grad():
    for host_io in (False, True):
        ts = sorted([once(host_io) for i in range(13)][3:])
        print(f"{'host' if host_io else 'device'} median {ts[5] * 1e3:.3f} ms")
"""


def check_real_models(a, tmp):
    """GPT-2 small and ResNet-18 at their real sizes (bench/real_models.py:
    onnx.helper and seeded weights, no download): shardc's latency with
    --device cuda (CUDA graphs, and at batch 1 without; ResNet-18 also with
    SHARDC_CUDA_CONV=im2col: its convolutions as im2col and cuBLASLt rather
    than the implicit-GEMM kernels) and --device cpu, each a `shardc run` from
    host input to host output; PyTorch's on the same GPU
    where it is installed (fp32, TF32 off, eager), on device tensors and from
    host input to host output."""
    if EMU:
        record("real-models", "skip", "minutes per run on the emulated GPU: on a real one only")
        return
    sys.path.insert(0, os.path.join(SRC, "bench"))
    try:
        import numpy as np
        import real_models
    except ImportError as e:
        record("real-models", "skip", f"bench/real_models.py needs numpy and onnx: {e}")
        return
    cache = os.path.join(tmp, "real")
    for name in ("gpt2-small", "resnet18"):
        try:
            path = real_models.model_path(name, cache)
        except Exception as e:  # noqa: BLE001 (reported, not raised)
            record(name, "fail", f"building the model: {e}")
            continue
        for batch in (1, 8):
            inputs = []
            for k, v in real_models.feeds(name, batch).items():
                np.save(os.path.join(tmp, f"real.{k}.npy"), v)
                inputs += ["--input", f"{k}={os.path.join(tmp, f'real.{k}.npy')}"]
            for dev in ("cuda", "cuda-nograph", "cuda-im2col", "cpu"):
                if (dev in ("cuda-nograph", "cpu") and batch != 1) or (
                        dev == "cuda-im2col" and name != "resnet18"):
                    continue
                flags = ["--device", "cuda", "--no-cuda-graph"] if dev == "cuda-nograph" else [
                    "--device", dev.split("-")[0]]
                flags += ["--no-allow-tf32"]  # fp32 as PyTorch's side (TF32 off)
                # cuda-im2col: the convolutions as im2col kernels and cuBLASLt, against the
                # default's implicit-GEMM kernels
                env = {"SHARDC_CUDA_VERBOSE": "1"}
                if dev == "cuda-im2col":
                    env["SHARDC_CUDA_CONV"] = "im2col"
                r = sh([a.shardc, "run", path, "--dim", f"batch={batch}"] + inputs + flags +
                       ["-q", "--repeat", "10", "--warmup", "2",
                        "--output-dir", os.path.join(tmp, "real.out")], env, timeout=240)
                med = re.search(r"run: median ([0-9.]+) ms", r.stderr)
                how = " ".join(sorted(set(re.findall(
                    r"(engine \w+|kernels \w+|\d+ convolutions as implicit GEMMs|\d+ fused attention steps|"
                    r"\d+ activations in the product)", r.stderr))))
                on_gpu = device_ms(r.stderr)
                gpu = f", {on_gpu:.3f} ms of it on the GPU (steps only)" if on_gpu else ""
                record(f"{name}.b{batch}.{dev}", "info" if med else "fail",
                       f"batch {batch}: median {med.group(1)} ms{gpu} {how}" if med
                       else r.stderr[-400:], ms=float(med.group(1)) if med else None,
                       device_ms=on_gpu)
            r = sh([a.python, "-c", TORCH_REF, name, str(batch)], timeout=180)
            dev = re.search(r"device median ([0-9.]+) ms", r.stdout)
            host = re.search(r"host median ([0-9.]+) ms", r.stdout)
            record(f"{name}.b{batch}.torch", "info" if dev and host else "skip",
                   f"PyTorch eager fp32 on the GPU: median {dev.group(1)} ms on device "
                   f"tensors, {host.group(1)} ms with the input from and the output to host "
                   "memory (as shardc run)" if dev and host
                   else "PyTorch: " + (r.stderr.strip()[-300:] or "no figure"),
                   ms=float(dev.group(1)) if dev else None,
                   ms_host_io=float(host.group(1)) if host else None)


def torch_where(python):
    """(device, why not): where train-speed runs PyTorch's side: the GPU, or
    on the emulated GPU the CPU; None with the reason when `python` has no
    torch (or, on a GPU machine, no CUDA in it)."""
    r = sh([python, "-c", "import torch; print(torch.__version__, torch.cuda.is_available())"],
           timeout=120)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["?"])[-1]
        return None, f"PyTorch is not importable by {python} ({last})"
    version, cuda = r.stdout.split()[-2:]
    if EMU:
        return "cpu", ""
    return ("cuda", "") if cuda == "True" else (None, f"PyTorch {version} sees no CUDA device")


def check_train_speed(a, tmp):
    import train_speed
    tiny = a.tiny or EMU
    device, why = torch_where(a.python)
    if EMU and not a.tiny:
        print("train-speed: the emulated GPU runs the tiny configs (--tiny)", flush=True)
    ctx = train_speed.Context(
        sh=sh, record=record, shardc=a.shardc, python=a.python, emulated=EMU, tiny=tiny,
        models=a.train_models, variants=a.train_variants, scratch=a.train_scratch,
        warmup=a.train_warmup if a.train_warmup is not None else
        (1 if tiny else 3), steps=a.train_steps or (3 if tiny else 10),
        compile_budget=a.compile_budget, cmd_timeout=600, out=a.out, torch_device=device,
        torch_why=why,
        past_deadline=lambda: DEADLINE is not None and time.time() > DEADLINE - 10)
    train_speed.run(ctx, tmp)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("sections", nargs="*", metavar="CHECK",
                    help="run only these checks (as --only); train-speed runs only when named")
    ap.add_argument("--shardc", required=True)
    ap.add_argument("--build", required=True)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--json")
    ap.add_argument("--log", help="write every command and its whole output here")
    ap.add_argument("--deadline", type=float,
                    help="seconds: checks that would start later are skipped, and commands "
                         "are cut at it")
    ap.add_argument("--only", help="run only these checks (comma-separated names)")
    ap.add_argument("--quick", action="store_true",
                    help="no timings (GEMM, GPT-2 small), no mesh matrices in the samples check")
    ap.add_argument("--out", default="gpu-out",
                    help="where sections write the files they keep (train-speed.json, .md)")
    ap.add_argument("--tiny", action="store_true",
                    help="train-speed: the tiny configs (implied on the emulated GPU)")
    ap.add_argument("--train-models", help="train-speed: only these models (comma-separated: "
                    "gpt2-small, llama-1p3b; gpt2-tiny, llama-tiny)")
    ap.add_argument("--train-variants", help="train-speed: only these variants (comma-separated: "
                    "shardc's none, selective, fp8; PyTorch's eager, compile); the others "
                    "measured into the same --out earlier stay in its table")
    ap.add_argument("--train-scratch", help="train-speed: write the models here and use those "
                    "an earlier run wrote (default: the run's temporary folder)")
    ap.add_argument("--record", help="append every result to this file as one JSON line, as "
                    "it comes (a run cut short keeps what it measured)")
    ap.add_argument("--train-steps", type=int, help="train-speed: steps measured after the "
                    "warm-up (default 10; 3 with --tiny)")
    ap.add_argument("--train-warmup", type=int, help="train-speed: warm-up steps (default 3; "
                    "1 with --tiny)")
    ap.add_argument("--compile-budget", type=int, default=300,
                    help="train-speed: seconds torch.compile's run may take (default 300)")
    a = ap.parse_args()
    global LOG, DEADLINE, RECORD
    LOG, RECORD = a.log, a.record
    t0 = time.time()
    DEADLINE = t0 + a.deadline if a.deadline else None
    # the quick checks first, the long samples matrix last
    checks = [("env", lambda tmp: check_env(a)), ("modules", lambda tmp: check_modules(a, tmp)),
              ("arena", lambda tmp: check_arena(a)), ("nccl", lambda tmp: check_nccl(a, tmp)),
              ("kernels", lambda tmp: check_kernels(a)),
              ("attention", lambda tmp: check_attention(a)),
              ("planner", lambda tmp: check_planner(a, tmp)),
              ("cuda-local", lambda tmp: check_cuda_local(a))]
    if not a.quick:
        checks += [("gemm", lambda tmp: check_gemm(a, tmp)),
                   ("real-models", lambda tmp: check_real_models(a, tmp))]
    checks += [("samples", lambda tmp: check_samples(a))]
    named = set(a.sections) | set((a.only or "").split(",")) - {""}
    known = {c[0] for c in checks} | {"gemm", "real-models", "train-speed"}
    if named - known:
        ap.error(f"unknown check(s) {', '.join(sorted(named - known))} "
                 f"(have {', '.join(sorted(known))})")
    if "train-speed" in named:   # only when named: minutes at real size
        checks += [("train-speed", lambda tmp: check_train_speed(a, tmp))]
    if named:
        checks = [c for c in checks if c[0] in named]
    with tempfile.TemporaryDirectory() as tmp:
        for name, run in checks:
            if DEADLINE is not None and time.time() > DEADLINE - 10:
                record(name, "skip", f"past the --deadline of {a.deadline:.0f} s")
                continue
            try:
                run(tmp)
            except Exception as e:  # noqa: BLE001 (one broken check must not hide the rest)
                record(name, "fail", f"the check raised {type(e).__name__}: {e}")
    passed = sum(r["status"] == "pass" for r in results)
    failed = sum(r["status"] == "fail" for r in results)
    summary = {"emulated": EMU, "seconds": round(time.time() - t0, 1), "passed": passed,
               "failed": failed, "checks": results}
    text = json.dumps(summary, indent=1)
    print(text)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
